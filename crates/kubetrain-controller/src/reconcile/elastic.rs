//! The elastic loop (docs/operator.md "Elastic TrainJobs"): the node count of a running elastic TrainJob
//! follows the nodes its pods fit on and the policy's `metrics`, within the policy's `[minNodes, maxNodes]`.
//!
//! The torch plugin marks an elastic JobSet with [`ELASTIC_MIN_NODES_ANNOTATION`],
//! [`ELASTIC_MAX_NODES_ANNOTATION`] and [`ELASTIC_REPLICATED_JOB_ANNOTATION`]. Each reconcile of such a job
//! (as leader, not suspended, not admitted by Kueue) counts the Ready, schedulable nodes that one node pod
//! fits on (node selector, taints, allocatable resources; one node pod per node, as torchrun's nodes are): that
//! count caps the size, so a lost node shrinks the job at once. Within it, the policy's metrics decide as an
//! HPA would ([`wanted`], [`metrics`] for `Resource` metrics), a shrink waiting for the scale-down
//! stabilization window ([`Memory::stabilize`]); metrics that cannot be read keep the size; without metrics the
//! size is the count. The node job's `parallelism` and `completions` are rendered as that size, clamped to the
//! bounds. JobSet (feature gate `ElasticJobSet`) resizes the running Job in place: more nodes grow it, a lost
//! node shrinks it instead of failing it, and torchrun's c10d rendezvous (`PET_NNODES=min:max`) re-forms the
//! group.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v2::{MetricSpec, MetricTarget};
use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::{Node, PodSpec, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType};
use kubetrain_api::constants::{
    ELASTIC_MAX_NODES_ANNOTATION, ELASTIC_MIN_NODES_ANNOTATION, ELASTIC_REPLICATED_JOB_ANNOTATION,
};
use kubetrain_api::jobset::JobSet;
use kubetrain_api::{Metric, TrainJob};
use kubetrain_quantity::Amount;

/// Reason of the event after the loop changed an elastic job's node count.
pub const TRAINJOB_SCALED: &str = "TrainJobScaled";
/// How often a running elastic job's nodes are counted again (besides every reconcile its JobSet triggers).
pub const ELASTIC_RESYNC: Duration = Duration::from_secs(10);

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

/// What the policy's `metrics` ask for ([`wanted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// The policy has no metrics: the size follows the nodes that fit.
    NoMetrics,
    /// The policy has metrics and none can be read (or some cannot and the others ask for fewer nodes, as an
    /// HPA refuses to shrink then): the job keeps its size.
    Unreadable,
    /// The highest node count the metrics that can be read ask for.
    Nodes(i32),
}

/// The node count at `current` nodes: the nodes a node pod fits on (`fitting`) cap it; within that, the
/// metrics decide ([`Wanted::Nodes`]), or the size stays when they cannot be read ([`Wanted::Unreadable`]),
/// or it is `fitting` when the policy has no metrics. Clamped to the bounds.
pub fn desired(bounds: &Bounds, fitting: i32, current: i32, wanted: Wanted) -> i32 {
    let asked = match wanted {
        Wanted::NoMetrics => fitting,
        Wanted::Unreadable => current,
        Wanted::Nodes(w) => w,
    };
    asked.min(fitting).clamp(bounds.min, bounds.max)
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

/// What the policy's `metrics` ask for at `current` nodes, as an HPA computes it: each metric's
/// recommendation, the highest of those that can be read; [`Wanted::NoMetrics`] without metrics;
/// [`Wanted::Unreadable`] when none can be read, or when some cannot and the others ask for fewer than `current`
/// (an HPA does not shrink on partial metrics). Each metric:
///
/// - `Pods` with an `AverageValue` target, and `External`/`Object` with a `Value` target, from what the trainer
///   reports in `status.trainerStatus.metrics` (`reported`, matched by `metric.name`): the value is the job's
///   per-node average (or total) now, so `ceil(current × value / target)`, unchanged within 10 %;
/// - `External`/`Object` with an `AverageValue` target: the reported total divided by the per-node target,
///   `ceil(value / target)`;
/// - `Resource` and `ContainerResource` from the node pods' usage in the resource metrics API (`usage`,
///   [`metrics::resource_replicas`]).
pub fn wanted(
    metrics: &[MetricSpec],
    reported: &[Metric],
    usage: &metrics::ResourceUsage,
    current: i32,
) -> Wanted {
    if metrics.is_empty() {
        return Wanted::NoMetrics;
    }
    let each: Vec<Option<i32>> = metrics
        .iter()
        .map(|spec| match spec.type_.as_str() {
            "Resource" | "ContainerResource" => metrics::resource_replicas(spec, usage, current),
            _ => from_report(spec, reported, current),
        })
        .collect();
    let highest = each.iter().flatten().copied().max();
    let unread = each.iter().any(Option::is_none);
    match highest {
        Some(w) if !(unread && w < current) => Wanted::Nodes(w),
        _ => Wanted::Unreadable,
    }
}

/// The node count a `Pods`, `External` or `Object` metric asks for, from what the trainer reports; `None` when
/// the value is not reported (or does not parse) or the metric type or target is not supported.
fn from_report(spec: &MetricSpec, reported: &[Metric], current: i32) -> Option<i32> {
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
    let value = reported
        .iter()
        .find(|m| &m.name == name)
        .and_then(|m| m.value.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)?;
    let target = metrics::base_units(&target.0).filter(|t| *t > 0.0)?;
    let current = f64::from(current.max(1));
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
    let wanted = wanted.min(f64::from(i32::MAX)) as i32;
    Some(wanted)
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

/// How long a metric must ask for fewer nodes before the job shrinks: HPA's default
/// `behavior.scaleDown.stabilizationWindowSeconds`. Growing and a lost node are never delayed.
pub const SCALE_DOWN_STABILIZATION: Duration = Duration::from_secs(300);

/// Reason of the (Warning) event that says, once per TrainJob and cause, why its metrics cannot be read.
pub const ELASTIC_METRICS_UNREADABLE: &str = "ElasticMetricsUnreadable";

/// What the elastic loop remembers per TrainJob (by uid) in this operator process: the metrics'
/// recommendations within the stabilization window and the causes already announced. Lost on restart (the
/// window starts again, as an HPA controller's does); an entry not used for two windows is dropped.
#[derive(Debug, Default)]
pub struct Memory(Mutex<HashMap<String, JobMemory>>);

/// One TrainJob's memory.
#[derive(Debug)]
struct JobMemory {
    /// `(when, nodes)`: the metrics' recommendations, oldest first.
    recommendations: Vec<(Instant, i32)>,
    /// The unreadable causes already announced.
    announced: BTreeSet<String>,
    /// When it was last used.
    touched: Instant,
    /// When this process last resized the running job: a trainer report from before it describes the old size.
    resized_at: Option<Timestamp>,
}

impl Memory {
    /// Stabilizes the metrics' recommendation for the job `uid` at `current` nodes at `now`, as an HPA's
    /// scale-down stabilization: the result is the highest recommendation within `window` (this one included),
    /// so a metric that asks for fewer nodes shrinks the job only when it asked for fewer for the whole window,
    /// while growing follows at once. The first sight of a job counts as a recommendation of `current` (an HPA
    /// seeds its history with the current replicas). [`Wanted::NoMetrics`] and [`Wanted::Unreadable`] pass
    /// through (and are not recorded).
    pub fn stabilize(
        &self,
        uid: &str,
        wanted: Wanted,
        current: i32,
        now: Instant,
        window: Duration,
    ) -> Wanted {
        if wanted == Wanted::NoMetrics {
            return wanted;
        }
        let Ok(mut memory) = self.0.lock() else {
            return wanted;
        };
        forget_idle(&mut memory, now, window);
        let job = job_entry(&mut memory, uid, now, || vec![(now, current)]);
        job.recommendations
            .retain(|(at, _)| now.saturating_duration_since(*at) < window);
        let Wanted::Nodes(nodes) = wanted else {
            return wanted;
        };
        let highest = job
            .recommendations
            .iter()
            .map(|(_, n)| *n)
            .fold(nodes, i32::max);
        job.recommendations.push((now, nodes));
        Wanted::Nodes(highest)
    }

    /// Whether `cause` (why the job `uid`'s metrics cannot be read) is new for this job: `true` once per job and
    /// cause, so that it is announced once.
    pub fn announce(&self, uid: &str, cause: &str, now: Instant, window: Duration) -> bool {
        let Ok(mut memory) = self.0.lock() else {
            return false;
        };
        forget_idle(&mut memory, now, window);
        job_entry(&mut memory, uid, now, Vec::new)
            .announced
            .insert(cause.to_owned())
    }

    /// Records that the running job `uid` was resized `at` (wall clock, as the trainer's reports are stamped).
    pub fn resized(&self, uid: &str, at: Timestamp, now: Instant) {
        let Ok(mut memory) = self.0.lock() else {
            return;
        };
        job_entry(&mut memory, uid, now, Vec::new).resized_at = Some(at);
    }

    /// Whether a trainer report stamped `updated` may be read for the job `uid`: not when this process resized
    /// the job since (the reported per-node values then describe the old size, and reading them again would
    /// resize once more on the same evidence); a report without a stamp only while no resize happened.
    pub fn report_is_current(&self, uid: &str, updated: Option<&Time>) -> bool {
        let resized_at = self
            .0
            .lock()
            .ok()
            .and_then(|m| m.get(uid).and_then(|j| j.resized_at));
        match (resized_at, updated) {
            (None, _) => true,
            (Some(resized), Some(updated)) => updated.0 > resized,
            (Some(_), None) => false,
        }
    }

    /// How many TrainJobs it remembers.
    #[cfg(test)]
    pub(crate) fn jobs(&self) -> usize {
        self.0.lock().map_or(0, |m| m.len())
    }
}

/// The memory of the job `uid`, created with `seed` as its recommendations when new; marked used `now`.
fn job_entry<'a>(
    memory: &'a mut HashMap<String, JobMemory>,
    uid: &str,
    now: Instant,
    seed: impl FnOnce() -> Vec<(Instant, i32)>,
) -> &'a mut JobMemory {
    let job = memory.entry(uid.to_owned()).or_insert_with(|| JobMemory {
        recommendations: seed(),
        announced: BTreeSet::new(),
        touched: now,
        resized_at: None,
    });
    job.touched = now;
    job
}

/// Drops the jobs not seen for two windows (deleted or finished: a running elastic job is seen every
/// [`ELASTIC_RESYNC`]).
fn forget_idle(memory: &mut HashMap<String, JobMemory>, now: Instant, window: Duration) {
    let idle = (window * 2).max(ELASTIC_RESYNC * 6);
    memory.retain(|_, job| now.saturating_duration_since(job.touched) < idle);
}

/// What [`recommend`] found.
pub struct Recommendation {
    /// What the metrics ask for, stabilized.
    pub wanted: Wanted,
    /// The event that says why the metrics cannot be read, the first time for this job and cause.
    pub unreadable: Option<Event>,
}

/// What an elastic job's policy `metrics` ask for at `current` nodes: the trainer's reported metrics, the node
/// pods' resource usage (a `LIST` of their `PodMetrics`, made only when `running` and the policy has a
/// `Resource` or `ContainerResource` metric), combined ([`wanted`]) and stabilized ([`Memory::stabilize`]).
pub async fn recommend(
    client: &kube::Client,
    memory: &Memory,
    job: &TrainJob,
    ask: Ask<'_>,
    now: Instant,
) -> Recommendation {
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let usage = if ask.running && metrics::reads_resources(ask.metrics) {
        metrics::read_usage(client, namespace, name, ask.bounds, ask.pod).await
    } else {
        metrics::ResourceUsage::default()
    };
    let unreadable = usage.unreadable.as_ref().and_then(|cause| {
        memory
            .announce(uid, cause, now, SCALE_DOWN_STABILIZATION)
            .then(|| {
                tracing::warn!(
                    trainjob = name,
                    namespace,
                    cause = cause.as_str(),
                    "the elastic TrainJob's Resource metrics cannot be read: it keeps its size"
                );
                unreadable_event(cause)
            })
    });
    let reported = job
        .status
        .as_ref()
        .and_then(|s| s.trainer_status.as_ref())
        .filter(|t| memory.report_is_current(uid, t.last_updated_time.as_ref()))
        .map(|t| t.metrics.as_slice())
        .unwrap_or_default();
    let raw = wanted(ask.metrics, reported, &usage, ask.current);
    let wanted = memory.stabilize(uid, raw, ask.current, now, SCALE_DOWN_STABILIZATION);
    Recommendation { wanted, unreadable }
}

/// What [`recommend`] reads for one job.
#[derive(Clone, Copy, Debug)]
pub struct Ask<'a> {
    /// The job's bounds.
    pub bounds: &'a Bounds,
    /// The node pod template (its requests).
    pub pod: &'a PodSpec,
    /// The elastic policy's `metrics`.
    pub metrics: &'a [MetricSpec],
    /// The node count now (the JobSet's, or the initial size of one about to be created).
    pub current: i32,
    /// Whether the JobSet runs (its pods may have metrics).
    pub running: bool,
}

/// `note` cut to the 1 kB an event's note may have (the API server refuses longer ones), on a char boundary.
fn within_note_limit(mut note: String) -> String {
    const LIMIT: usize = 1024;
    if note.len() > LIMIT {
        let mut end = LIMIT - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

/// The event that says why an elastic job's metrics cannot be read.
pub fn unreadable_event(cause: &str) -> Event {
    Event {
        type_: EventType::Warning,
        reason: ELASTIC_METRICS_UNREADABLE.to_owned(),
        note: Some(within_note_limit(format!(
            "the elasticPolicy's Resource metrics cannot be read: {cause}; the job keeps its size (nodes lost \
             still shrink it)"
        ))),
        action: "ReadMetrics".to_owned(),
        secondary: None,
    }
}

/// The event after the node count changed from `from` to `to`.
/// `wanted` is what the policy's metrics asked for (stabilized).
pub fn scaled_event(bounds: &Bounds, from: i32, to: i32, fitting: i32, wanted: Wanted) -> Event {
    let why = match wanted {
        Wanted::Nodes(w) if w < fitting && to > from => "the metrics ask for more nodes",
        Wanted::Nodes(w) if w < fitting => {
            "the metrics ask for fewer nodes (for the whole stabilization window)"
        }
        _ if to > from => "more nodes fit",
        _ => "fewer nodes fit (a node was lost or is unschedulable)",
    };
    let metrics = match wanted {
        Wanted::Nodes(w) => format!(", the metrics ask for {w}"),
        Wanted::Unreadable => ", the metrics cannot be read".to_owned(),
        Wanted::NoMetrics => String::new(),
    };
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

#[cfg(test)]
#[path = "elastic_scenarios.rs"]
mod scenarios;

#[path = "elastic_metrics.rs"]
pub mod metrics;
