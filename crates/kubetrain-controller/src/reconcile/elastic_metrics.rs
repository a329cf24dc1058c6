//! `Resource` and `ContainerResource` metrics of an elastic TrainJob (docs/operator.md "The elastic loop"): the
//! node pods' usage from the resource metrics API (`metrics.k8s.io/v1beta1` `PodMetrics`, served by a metrics
//! server), against the node pod template's requests, with the HorizontalPodAutoscaler's formulas.
//!
//! The usage is read with one `LIST` of the node pods' `PodMetrics` (label selector
//! `jobset.sigs.k8s.io/jobset-name=<job>,jobset.sigs.k8s.io/replicatedjob-name=<node job>`), only for a running
//! elastic job whose policy has such a metric. When the API is not served (404, 503), is forbidden (403) or
//! fails, the metrics are not readable: the job keeps its size ([`super::Wanted::Unreadable`]) and the
//! reason is announced once per TrainJob ([`super::Memory::announce`]).

use std::collections::BTreeMap;

use k8s_openapi::api::autoscaling::v2::{MetricSpec, MetricTarget};
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ListParams;
use kubetrain_quantity::Amount;
use serde::Deserialize;

use super::{Bounds, TOLERANCE};

/// The group/version of the resource metrics API.
pub const METRICS_API: &str = "metrics.k8s.io/v1beta1";

/// Usage or requests per container, per resource, in base units (cores, bytes).
pub type PerContainer = BTreeMap<String, BTreeMap<String, f64>>;

/// The node pods' resource usage as the metrics API reported it, and the node pod template's requests.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceUsage {
    /// One entry per node pod the metrics API reported: each container's usage.
    pub pods: Vec<PerContainer>,
    /// Each container's requests in the node pod template (a limit stands for a missing request, as the API
    /// server defaults it).
    pub requests: PerContainer,
    /// Why the usage could not be read (the metrics API is not served, is forbidden, failed); `None` when it was
    /// read or was not needed.
    pub unreadable: Option<String>,
}

/// Whether `metrics` has a `Resource` or `ContainerResource` metric (the only ones read from the metrics API).
pub fn reads_resources(metrics: &[MetricSpec]) -> bool {
    metrics
        .iter()
        .any(|m| matches!(m.type_.as_str(), "Resource" | "ContainerResource"))
}

/// The label selector of the node pods of JobSet `jobset` (JobSet's labels on every pod it creates).
pub fn node_pod_selector(jobset: &str, bounds: &Bounds) -> String {
    format!(
        "jobset.sigs.k8s.io/jobset-name={jobset},jobset.sigs.k8s.io/replicatedjob-name={}",
        bounds.replicated_job
    )
}

/// Reads the node pods' usage of JobSet `jobset` in `namespace` (one `LIST` of their `PodMetrics`), with the
/// requests of `pod`, the node pod template. A failed read is not an error: it is recorded in
/// [`ResourceUsage::unreadable`].
pub async fn read_usage(
    client: &kube::Client,
    namespace: &str,
    jobset: &str,
    bounds: &Bounds,
    pod: &PodSpec,
) -> ResourceUsage {
    let requests = template_requests(pod);
    let path = format!("/apis/{METRICS_API}/namespaces/{namespace}/pods");
    let params = ListParams::default().labels(&node_pod_selector(jobset, bounds));
    let request = match kube::core::Request::new(path).list(&params) {
        Ok(r) => r,
        Err(e) => {
            return ResourceUsage {
                requests,
                unreadable: Some(format!("building the PodMetrics request failed: {e}")),
                ..ResourceUsage::default()
            };
        }
    };
    match client.request::<PodMetricsList>(request).await {
        Ok(list) => ResourceUsage {
            pods: list.items.into_iter().map(PodMetrics::usage).collect(),
            requests,
            unreadable: None,
        },
        Err(error) => ResourceUsage {
            requests,
            unreadable: Some(why_unreadable(namespace, &error)),
            ..ResourceUsage::default()
        },
    }
}

/// The sentence that says why a `PodMetrics` `LIST` in `namespace` failed.
pub fn why_unreadable(namespace: &str, error: &kube::Error) -> String {
    match error {
        kube::Error::Api(s) if s.code == 404 || s.code == 503 => format!(
            "the resource metrics API {METRICS_API} is not served (HTTP {}): install a metrics server to scale on \
             Resource and ContainerResource metrics",
            s.code
        ),
        kube::Error::Api(s) if s.code == 403 => format!(
            "the operator may not list pods.metrics.k8s.io in namespace {namespace} (HTTP 403): its ClusterRole \
             needs list on pods.metrics.k8s.io"
        ),
        other => {
            format!("listing the node pods' PodMetrics in namespace {namespace} failed: {other}")
        }
    }
}

/// A `PodMetricsList` of `metrics.k8s.io/v1beta1` (the fields read).
#[derive(Deserialize, Debug, Default)]
struct PodMetricsList {
    #[serde(default)]
    items: Vec<PodMetrics>,
}

/// A `PodMetrics` (the fields read).
#[derive(Deserialize, Debug, Default)]
struct PodMetrics {
    #[serde(default)]
    containers: Vec<ContainerMetrics>,
}

/// A `ContainerMetrics` (the fields read).
#[derive(Deserialize, Debug, Default)]
struct ContainerMetrics {
    #[serde(default)]
    name: String,
    #[serde(default)]
    usage: BTreeMap<String, Quantity>,
}

impl PodMetrics {
    fn usage(self) -> PerContainer {
        self.containers
            .into_iter()
            .map(|c| (c.name, amounts(&c.usage)))
            .collect()
    }
}

/// Quantities in base units; one that does not parse is left out.
fn amounts(quantities: &BTreeMap<String, Quantity>) -> BTreeMap<String, f64> {
    quantities
        .iter()
        .filter_map(|(resource, q)| Some((resource.clone(), base_units(&q.0)?)))
        .collect()
}

/// A quantity in base units (`"250m"` is 0.25, `"1Ki"` 1024).
pub fn base_units(text: &str) -> Option<f64> {
    let amount = Amount::parse(text).ok()?;
    let value = amount.nanos().0 as f64 / 1e9;
    Some(value).filter(|v| v.is_finite() && *v >= 0.0)
}

/// Each container's requests in `pod` (a limit stands for a missing request, as the API server defaults it).
pub fn template_requests(pod: &PodSpec) -> PerContainer {
    pod.containers
        .iter()
        .map(|c| {
            let resources = c.resources.clone().unwrap_or_default();
            let mut wanted = resources.limits.as_ref().map(amounts).unwrap_or_default();
            wanted.extend(resources.requests.as_ref().map(amounts).unwrap_or_default());
            (c.name.clone(), wanted)
        })
        .collect()
}

/// The node count a `Resource` or `ContainerResource` metric asks for at `current` nodes, or `None` when it
/// cannot be read (no usage, no pod reported, a container without a request for a `Utilization` target, an
/// unsupported target). The HorizontalPodAutoscaler's replica calculator:
///
/// - `Utilization`: utilization = `floor(100 × Σ usage / Σ requests)` over the pods reported; ratio =
///   utilization / `averageUtilization`;
/// - `AverageValue`: ratio = (Σ usage / pods reported) / `averageValue`;
/// - within 10 % of 1: `current`; else `ceil(ratio × pods reported)`;
/// - pods the metrics API did not report (fewer than `current`) count as using nothing when the job would grow
///   and as using their request (or the target value) when it would shrink; the ratio is computed again and the
///   recommendation is `current` when it is within 10 % or changed direction.
pub fn resource_replicas(spec: &MetricSpec, usage: &ResourceUsage, current: i32) -> Option<i32> {
    let (resource, container, target) = match spec.type_.as_str() {
        "Resource" => {
            let r = spec.resource.as_ref()?;
            (&r.name, None, &r.target)
        }
        "ContainerResource" => {
            let r = spec.container_resource.as_ref()?;
            (&r.name, Some(r.container.as_str()), &r.target)
        }
        _ => return None,
    };
    if usage.unreadable.is_some() {
        return None;
    }
    // Each reported pod's usage (a pod whose metrics lack the container or resource is left out, as HPA does).
    let pods: Vec<f64> = usage
        .pods
        .iter()
        .filter_map(|pod| in_scope(pod, resource, container))
        .collect();
    if pods.is_empty() {
        return None;
    }
    let reported = i32::try_from(pods.len()).unwrap_or(i32::MAX);
    let missing = current.saturating_sub(reported).max(0);
    let total: f64 = pods.iter().sum();
    let target = Target::of(target, usage, resource, container)?;
    let ratio_of = |total: f64, count: i32| target.ratio(total, f64::from(count));
    let ratio = ratio_of(total, reported);
    // Finite and non-negative, capped at i32::MAX.
    let ceil =
        |ratio: f64, count: i32| (ratio * f64::from(count)).ceil().min(f64::from(i32::MAX)) as i32;
    if missing == 0 {
        return Some(if (ratio - 1.0).abs() <= TOLERANCE {
            current
        } else {
            ceil(ratio, reported)
        });
    }
    // The pods not reported: nothing used when growing, their request (the target) when shrinking.
    let assumed = if ratio < 1.0 { target.full() } else { 0.0 };
    let count = reported + missing;
    let again = ratio_of(total + assumed * f64::from(missing), count);
    if (again - 1.0).abs() <= TOLERANCE
        || (ratio < 1.0 && again > 1.0)
        || (ratio > 1.0 && again < 1.0)
    {
        return Some(current);
    }
    let wanted = ceil(again, count);
    if (again < 1.0 && wanted > current) || (again > 1.0 && wanted < current) {
        return Some(current);
    }
    Some(wanted)
}

/// A pod's usage of `resource`: summed over its containers, or the one `container`'s.
fn in_scope(pod: &PerContainer, resource: &str, container: Option<&str>) -> Option<f64> {
    match container {
        Some(name) => pod.get(name)?.get(resource).copied(),
        None => pod
            .values()
            .map(|usage| usage.get(resource).copied())
            .sum::<Option<f64>>(),
    }
}

/// A resource metric's target.
enum Target {
    /// `averageUtilization` percent of `request` (per pod, base units).
    Utilization { percent: f64, request: f64 },
    /// `averageValue` per pod (base units).
    AverageValue(f64),
}

impl Target {
    fn of(
        target: &MetricTarget,
        usage: &ResourceUsage,
        resource: &str,
        container: Option<&str>,
    ) -> Option<Self> {
        match target.type_.as_str() {
            "Utilization" => {
                let percent = f64::from(target.average_utilization.filter(|p| *p > 0)?);
                // Every container in scope needs a request (HPA: "missing request for <resource>").
                let requests: Option<f64> = match container {
                    Some(name) => usage.requests.get(name)?.get(resource).copied(),
                    None if usage.requests.is_empty() => None,
                    None => usage
                        .requests
                        .values()
                        .map(|r| r.get(resource).copied())
                        .sum(),
                };
                let request = requests.filter(|r| *r > 0.0)?;
                Some(Self::Utilization { percent, request })
            }
            "AverageValue" => {
                let value = base_units(&target.average_value.as_ref()?.0).filter(|v| *v > 0.0)?;
                Some(Self::AverageValue(value))
            }
            _ => None,
        }
    }

    /// The usage ratio of `total` over `pods` pods.
    fn ratio(&self, total: f64, pods: f64) -> f64 {
        match self {
            Self::Utilization { percent, request } => {
                // HPA truncates the utilization to a whole percent.
                let utilization = (100.0 * total / (request * pods)).floor();
                utilization / percent
            }
            Self::AverageValue(value) => total / pods / value,
        }
    }

    /// What a pod not reported is assumed to use when the job would shrink.
    fn full(&self) -> f64 {
        match self {
            Self::Utilization { request, .. } => *request,
            Self::AverageValue(value) => *value,
        }
    }
}

#[cfg(test)]
#[path = "elastic_metrics_tests.rs"]
mod tests;
