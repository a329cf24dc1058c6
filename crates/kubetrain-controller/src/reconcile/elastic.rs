//! The elastic loop (docs/operator.md "Elastic TrainJobs"): the node count of a running elastic TrainJob
//! follows the nodes its pods fit on, within the policy's `[minNodes, maxNodes]`.
//!
//! The torch plugin marks an elastic JobSet with [`ELASTIC_MIN_NODES_ANNOTATION`],
//! [`ELASTIC_MAX_NODES_ANNOTATION`] and [`ELASTIC_REPLICATED_JOB_ANNOTATION`]. Each reconcile of such a job
//! (as leader, not suspended, not admitted by Kueue) counts the Ready, schedulable nodes that one node pod
//! fits on (node selector, taints, allocatable resources; one node pod per node, as torchrun's nodes are) and
//! renders the node job's `parallelism` and `completions` as that count, clamped to the bounds. JobSet
//! (feature gate `ElasticJobSet`) resizes the running Job in place: more nodes grow it, a lost node shrinks it
//! instead of failing it, and torchrun's c10d rendezvous (`PET_NNODES=min:max`) re-forms the group.

use std::collections::BTreeMap;

use k8s_openapi::api::autoscaling::v2::{MetricSpec, MetricTarget};
use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::{Node, PodSpec, Taint, Toleration};
use kube::runtime::events::{Event, EventType};
use kubetrain_api::Metric;
use kubetrain_api::constants::{
    ELASTIC_MAX_NODES_ANNOTATION, ELASTIC_MIN_NODES_ANNOTATION, ELASTIC_REPLICATED_JOB_ANNOTATION,
};
use kubetrain_api::jobset::JobSet;
use kubetrain_quantity::Amount;

/// Reason of the event after the loop changed an elastic job's node count.
pub const TRAINJOB_SCALED: &str = "TrainJobScaled";
/// How often a running elastic job's nodes are counted again (besides every reconcile its JobSet triggers).
pub const ELASTIC_RESYNC: std::time::Duration = std::time::Duration::from_secs(10);

/// An elastic JobSet's bounds and the replicated job they size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// `minNodes`.
    pub min: i32,
    /// `maxNodes`.
    pub max: i32,
    /// The replicated job whose `parallelism` is the node count.
    pub replicated_job: String,
}

/// The bounds the torch plugin annotated `jobset` with; `None` for a JobSet that is not elastic (or whose
/// annotations do not parse, or give `min > max` or `min < 1`).
pub fn bounds(jobset: &JobSet) -> Option<Bounds> {
    let annotations = jobset.metadata.annotations.as_ref()?;
    let int = |key: &str| annotations.get(key)?.trim().parse::<i32>().ok();
    let (min, max) = (
        int(ELASTIC_MIN_NODES_ANNOTATION)?,
        int(ELASTIC_MAX_NODES_ANNOTATION)?,
    );
    let replicated_job = annotations
        .get(ELASTIC_REPLICATED_JOB_ANNOTATION)
        .cloned()
        .unwrap_or_else(|| "node".to_owned());
    (1 <= min && min <= max).then_some(Bounds {
        min,
        max,
        replicated_job,
    })
}

/// The pod template of the replicated job `bounds` sizes.
pub fn node_pod<'a>(jobset: &'a JobSet, bounds: &Bounds) -> Option<&'a PodSpec> {
    node_job(jobset, bounds)?.template.spec.as_ref()
}

/// The node job's `parallelism` in `jobset`.
pub fn current(jobset: &JobSet, bounds: &Bounds) -> Option<i32> {
    node_job(jobset, bounds)?.parallelism
}

/// The Job spec of the replicated job `bounds` sizes.
fn node_job<'a>(jobset: &'a JobSet, bounds: &Bounds) -> Option<&'a JobSpec> {
    jobset
        .spec
        .replicated_jobs
        .iter()
        .find(|r| r.name == bounds.replicated_job)?
        .template
        .spec
        .as_ref()
}

/// The node count: the nodes a node pod fits on, or fewer when the metrics ask for fewer ([`wanted_by_metrics`]),
/// clamped to the bounds.
pub fn desired(bounds: &Bounds, fitting: i32, wanted: Option<i32>) -> i32 {
    wanted
        .map_or(fitting, |w| w.min(fitting))
        .clamp(bounds.min, bounds.max)
}

/// Sets the node job's `parallelism` and `completions` to `nodes` (elastic Indexed Jobs keep them equal).
pub fn scale(jobset: &mut JobSet, bounds: &Bounds, nodes: i32) {
    if let Some(spec) = jobset
        .spec
        .replicated_jobs
        .iter_mut()
        .find(|r| r.name == bounds.replicated_job)
        .and_then(|r| r.template.spec.as_mut())
    {
        spec.parallelism = Some(nodes);
        spec.completions = Some(nodes);
    }
}

/// How many of `nodes` one pod of `pod` fits on: Ready, schedulable, matching its node selector, every
/// `NoSchedule`/`NoExecute` taint tolerated, and allocatable at least its requests (limits where no request).
/// Other pods' use is not subtracted: a node the job's own pod already runs on must count.
pub fn fitting_nodes(nodes: &[Node], pod: &PodSpec) -> i32 {
    let requests = pod_requests(pod);
    let fits = nodes.iter().filter(|n| fits(n, pod, &requests)).count();
    i32::try_from(fits).unwrap_or(i32::MAX)
}

fn fits(node: &Node, pod: &PodSpec, requests: &BTreeMap<String, Amount>) -> bool {
    if node.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let spec = node.spec.clone().unwrap_or_default();
    if spec.unschedulable == Some(true) {
        return false;
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        return false;
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if let Some(selector) = &pod.node_selector
        && selector.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    let tolerations = pod.tolerations.as_deref().unwrap_or_default();
    let blocked = spec.taints.iter().flatten().any(|t| {
        matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
            && !tolerations.iter().any(|tol| tolerates(tol, t))
    });
    if blocked {
        return false;
    }
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.clone())
        .unwrap_or_default();
    requests.iter().all(|(resource, wanted)| {
        allocatable
            .get(resource)
            .and_then(|q| Amount::parse(&q.0).ok())
            .is_some_and(|have| have.compare(wanted).is_ge())
    })
}

/// Whether `toleration` tolerates `taint` (Kubernetes' rules: an empty key with `Exists` tolerates all).
fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref()
        && !effect.is_empty()
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        _ => {
            key == taint.key
                && toleration.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
    }
}

/// The pod's requests per resource, summed over its containers (a limit stands for a missing request).
/// A quantity that does not parse is left out (the API server refuses such a pod anyway).
fn pod_requests(pod: &PodSpec) -> BTreeMap<String, Amount> {
    let mut total: BTreeMap<String, Amount> = BTreeMap::new();
    for container in &pod.containers {
        let Some(resources) = &container.resources else {
            continue;
        };
        let mut wanted: BTreeMap<&String, Amount> = BTreeMap::new();
        for (name, q) in resources.limits.iter().flatten() {
            if let Ok(v) = Amount::parse(&q.0) {
                wanted.insert(name, v);
            }
        }
        for (name, q) in resources.requests.iter().flatten() {
            if let Ok(v) = Amount::parse(&q.0) {
                wanted.insert(name, v);
            }
        }
        for (name, v) in wanted {
            let sum = total.get(name).map_or(v, |t| t.add(&v));
            total.insert(name.clone(), sum);
        }
    }
    total
}

/// HPA's tolerance: a metric within 10 % of its target asks for no change.
const TOLERANCE: f64 = 0.1;

/// The node count the policy's `metrics` ask for at `current` nodes, from the metrics the trainer reports in
/// `status.trainerStatus.metrics` (the highest of the metrics that can be read, as an HPA takes; `None` when
/// none can). Each metric is named by its `metric.name`, matched against the reported names:
///
/// - `Pods` with an `AverageValue` target, and `External`/`Object` with a `Value` target: the reported value is
///   the job's per-node average (or total) now, so `ceil(current × value / target)`, unchanged within 10 %;
/// - `External`/`Object` with an `AverageValue` target: the total divided by the per-node target,
///   `ceil(value / target)`.
///
/// `Resource` and `ContainerResource` metrics (CPU, memory: a metrics server's) are not read by this loop.
pub fn wanted_by_metrics(metrics: &[MetricSpec], reported: &[Metric], current: i32) -> Option<i32> {
    let value_of = |name: &str| {
        reported
            .iter()
            .find(|m| m.name == name)
            .and_then(|m| m.value.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    let current = f64::from(current.max(1));
    metrics
        .iter()
        .filter_map(|spec| {
            let (name, target, per_node_total) = match spec.type_.as_str() {
                "Pods" => {
                    let p = spec.pods.as_ref()?;
                    (&p.metric.name, p.target.average_value.as_ref()?, false)
                }
                "External" => {
                    let e = spec.external.as_ref()?;
                    metric_target(&e.metric.name, &e.target)?
                }
                "Object" => {
                    let o = spec.object.as_ref()?;
                    metric_target(&o.metric.name, &o.target)?
                }
                _ => return None,
            };
            let value = value_of(name)?;
            let target = quantity(&target.0).filter(|t| *t > 0.0)?;
            let wanted = if per_node_total {
                (value / target).ceil()
            } else {
                let ratio = value / target;
                if (ratio - 1.0).abs() <= TOLERANCE {
                    current
                } else {
                    (current * ratio).ceil()
                }
            };
            Some(wanted.min(f64::from(i32::MAX)) as i32)
        })
        .max()
}

/// An `External`/`Object` metric's name and target: `(name, value, false)` for a `Value` target,
/// `(name, averageValue, true)` for an `AverageValue` one.
fn metric_target<'a>(
    name: &'a String,
    target: &'a MetricTarget,
) -> Option<(
    &'a String,
    &'a k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    bool,
)> {
    match target.type_.as_str() {
        "Value" => Some((name, target.value.as_ref()?, false)),
        "AverageValue" => Some((name, target.average_value.as_ref()?, true)),
        _ => None,
    }
}

/// A quantity as a number (`"100"`, `"1.5"`, `"500m"`, `"2k"`).
fn quantity(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().or_else(|| {
        let milli = kubetrain_quantity::Quantity::parse(text).ok()?.milli()?;
        Some(milli as f64 / 1000.0)
    })
}

/// The event after the node count changed from `from` to `to`.
/// `wanted` is what the policy's metrics asked for, if they could be read.
pub fn scaled_event(
    bounds: &Bounds,
    from: i32,
    to: i32,
    fitting: i32,
    wanted: Option<i32>,
) -> Event {
    let why = match wanted {
        Some(w) if w < fitting && to > from => "the metrics ask for more nodes",
        Some(w) if w < fitting => "the metrics ask for fewer nodes",
        _ if to > from => "more nodes fit",
        _ => "fewer nodes fit (a node was lost or is unschedulable)",
    };
    let metrics = wanted.map_or(String::new(), |w| format!(", the metrics ask for {w}"));
    Event {
        type_: EventType::Normal,
        reason: TRAINJOB_SCALED.to_owned(),
        note: Some(format!(
            "scaled replicated job {} from {from} to {to} nodes: {why}; {fitting} nodes fit a node pod{metrics} (minNodes {}, maxNodes {})",
            bounds.replicated_job, bounds.min, bounds.max
        )),
        // The action names the step: kube's recorder folds events of one action and reason into a series
        // that keeps the first note, and each scaling must say its own.
        action: format!("Scale{from}To{to}"),
        secondary: None,
    }
}

#[cfg(test)]
#[path = "elastic_tests.rs"]
mod tests;
