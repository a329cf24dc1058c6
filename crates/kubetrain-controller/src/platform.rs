//! Metrics for the platform view (issue 16, item 3): how long TrainJobs queued, how often they were admitted
//! and preempted, how they ended, and what GPU time finished jobs held, split into succeeded and failed.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `kubetrain_trainjob_queue_wait_seconds` | histogram | `namespace`, `queue` (`kueue.x-k8s.io/queue-name`, empty without), `runtime` |
//! | `kubetrain_trainjob_admissions_total` | counter | `namespace`, `queue`, `runtime` |
//! | `kubetrain_trainjob_preemptions_total` | counter | `namespace`, `queue`, `runtime` |
//! | `kubetrain_trainjob_outcomes_total` | counter | `runtime`, `outcome` (`succeeded`, `failed`), `reason` (the condition's) |
//! | `kubetrain_trainjob_gpu_seconds_total` | counter | `namespace`, `outcome`, `pool` (node selector `gpu-pool`), `accelerator` (node selector `nvidia.com/gpu.product`, `cloud.google.com/gke-accelerator` or `accelerator`) |
//! | `kubetrain_trainjob_admission_reasons_total` | counter | `namespace`, `queue`, `runtime`, `reason`: `kueue` (the TrainJob has a `kueue.x-k8s.io/queue-name`, so Kueue's quota released it) or `manual` (no queue: a person or another controller unsuspended it) |
//! | `kubetrain_trainjob_progress_percent` | gauge, opt-in | `namespace`, `trainjob`, `runtime` |
//! | `kubetrain_trainjob_estimated_remaining_seconds` | gauge, opt-in | `namespace`, `trainjob`, `runtime` |
//! | `kubetrain_trainjob_trainer_metric` | gauge, opt-in | `namespace`, `trainjob`, `runtime`, `metric` (each numeric metric of `trainerStatus.metrics`) |
//!
//! Everything is derived from the status transitions the leader writes ([`transitions`]), so each is
//! counted once however many replicas run, and never again after a restart. A reconcile that starts from a
//! cached status older than the one just written computes the same transition again; it is recognised by
//! the TrainJob's UID and the time the previous state began, and not counted twice (the last 65,536
//! transitions are remembered):
//!
//! - **admitted**: `Suspended` goes from True to False (the TrainJob was unsuspended, by Kueue or a user).
//!   The wait is from the moment it was suspended (its creation for a job created suspended, as Kueue
//!   creates them) to the resume. TrainJobs created unsuspended never queue and are not observed.
//! - **preempted**: `Suspended` goes from False (it had been resumed) back to True.
//! - **finished**: `Complete` or `Failed` becomes True. GPU-seconds = the GPUs of the JobSet's pods
//!   (`nvidia.com/gpu` limits, else requests, × parallelism × replicas) × the time from the last resume (or the
//!   creation) to the finish. A JobSet already gone contributes nothing.
//!
//! Label values come from objects users write (namespace, queue, runtime, node selector values): their
//! number is what the cluster has, not per job. No TrainJob name or UID is a label — except in the opt-in
//! gauges below.
//!
//! **trainerStatus gauges (opt-in per runtime).** The progress the training code reports
//! (`status.trainerStatus`) is per TrainJob, so its series grow with the jobs: they are exported only for
//! TrainJobs whose runtime carries the annotation [`TRAINER_STATUS_METRICS_ANNOTATION`]
//! (`kubetrain.io/trainer-status-metrics: "true"`) in `spec.template.metadata.annotations` — the
//! runtime's author opts in, not each user. The leader sets them when it reconciles a running TrainJob and
//! drops every series of a TrainJob when it finishes; at most [`MAX_GAUGED_JOBS`] TrainJobs and
//! [`MAX_GAUGED_METRICS`] metrics per job have series (further ones are not exported); metric values that
//! are not numbers are skipped. A TrainJob deleted while running keeps its series until the operator
//! restarts.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kubetrain_api::conditions::{COMPLETE, FAILED, SUSPENDED};
use kubetrain_api::jobset::JobSet;
use kubetrain_api::{TrainJob, TrainJobStatus};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The Kueue label naming a TrainJob's LocalQueue.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The node selector key naming a GPU pool.
pub const POOL_KEY: &str = "gpu-pool";
/// Node selector keys naming an accelerator, in the order they are looked up.
pub const ACCELERATOR_KEYS: [&str; 3] = [
    "nvidia.com/gpu.product",
    "cloud.google.com/gke-accelerator",
    "accelerator",
];
/// The GPU resource counted.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// The runtime annotation (`spec.template.metadata.annotations`, value `"true"`) that exports the
/// trainerStatus gauges of its TrainJobs.
pub const TRAINER_STATUS_METRICS_ANNOTATION: &str = "kubetrain.io/trainer-status-metrics";
/// TrainJobs with trainerStatus gauges at once, at most.
pub const MAX_GAUGED_JOBS: usize = 1000;
/// Metrics of one TrainJob exported as gauges, at most.
pub const MAX_GAUGED_METRICS: usize = 32;

/// Whether `runtime` opts its TrainJobs into the trainerStatus gauges ([`TRAINER_STATUS_METRICS_ANNOTATION`]).
pub fn exports_trainer_status(runtime: &kubetrain_api::TrainingRuntimeSpec) -> bool {
    runtime
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(TRAINER_STATUS_METRICS_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// A status change worth counting.
#[derive(Clone, Debug, PartialEq)]
pub enum Transition {
    /// Unsuspended after waiting this long.
    Admitted {
        /// From being suspended (or created) to the resume.
        waited: Duration,
    },
    /// Suspended again after having been resumed.
    Preempted,
    /// `Complete` or `Failed` became True.
    Finished {
        /// `Complete` (else `Failed`).
        succeeded: bool,
        /// The condition's reason.
        reason: String,
        /// GPUs held × seconds they were held.
        gpu_seconds: f64,
        /// The `gpu-pool` node selector value ("" when none).
        pool: String,
        /// The accelerator node selector value ("" when none).
        accelerator: String,
    },
}

fn condition<'a>(status: &'a TrainJobStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

fn is_true(status: &TrainJobStatus, type_: &str) -> bool {
    condition(status, type_).is_some_and(|c| c.status == "True")
}

fn seconds_between(from: &Time, to: &Time) -> f64 {
    let span = to.0.as_second() as f64 + f64::from(to.0.subsec_nanosecond()) / 1e9
        - (from.0.as_second() as f64 + f64::from(from.0.subsec_nanosecond()) / 1e9);
    span.max(0.0)
}

/// The transitions from `before` to `after` (the status the leader is writing) of `job`; `jobset` is the
/// TrainJob's JobSet as this reconcile saw it.
pub fn transitions(
    job: &TrainJob,
    before: &TrainJobStatus,
    after: &TrainJobStatus,
    jobset: Option<&JobSet>,
) -> Vec<Transition> {
    let mut out = Vec::new();
    let created = job.metadata.creation_timestamp.as_ref();
    let was = condition(before, SUSPENDED);
    let now = condition(after, SUSPENDED);
    match (was.map(|c| c.status.as_str()), now) {
        (Some("True"), Some(resumed)) if resumed.status == "False" => {
            let since = was.map(|c| &c.last_transition_time).or(created);
            let waited = since.map_or(0.0, |s| seconds_between(s, &resumed.last_transition_time));
            out.push(Transition::Admitted {
                waited: Duration::from_secs_f64(waited),
            });
        }
        (Some("False"), Some(suspended)) if suspended.status == "True" => {
            out.push(Transition::Preempted);
        }
        _ => {}
    }
    let finish = [COMPLETE, FAILED]
        .into_iter()
        .find(|t| is_true(after, t) && !is_true(before, t));
    if let Some(type_) = finish
        && !(is_true(before, COMPLETE) || is_true(before, FAILED))
    {
        let ended = condition(after, type_);
        let started = condition(after, SUSPENDED)
            .filter(|c| c.status == "False")
            .map(|c| &c.last_transition_time)
            .or(created);
        let held = match (started, ended) {
            (Some(s), Some(e)) => seconds_between(s, &e.last_transition_time),
            _ => 0.0,
        };
        let (gpus, pool, accelerator) = jobset.map(gpus_of).unwrap_or_default();
        out.push(Transition::Finished {
            succeeded: type_ == COMPLETE,
            reason: ended.map(|c| c.reason.clone()).unwrap_or_default(),
            gpu_seconds: gpus as f64 * held,
            pool,
            accelerator,
        });
    }
    out
}

/// GPUs of every pod of the JobSet, and the pool and accelerator the first GPU pod asks for.
pub fn gpus_of(jobset: &JobSet) -> (u64, String, String) {
    let mut total = 0u64;
    let mut placement: Option<(String, String)> = None;
    for rj in &jobset.spec.replicated_jobs {
        let Some(job) = &rj.template.spec else {
            continue;
        };
        let Some(pod) = &job.template.spec else {
            continue;
        };
        let per_pod = pod_gpus(pod);
        if per_pod == 0 {
            continue;
        }
        let pods = u64::try_from(rj.replicas.unwrap_or(1).max(0)).unwrap_or(0)
            * u64::try_from(job.parallelism.unwrap_or(1).max(0)).unwrap_or(0);
        total = total.saturating_add(per_pod.saturating_mul(pods));
        placement.get_or_insert_with(|| {
            let selector = pod.node_selector.clone().unwrap_or_default();
            let pool = selector
                .iter()
                .find(|(k, _)| *k == POOL_KEY || k.ends_with("/gpu-pool"))
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let accelerator = ACCELERATOR_KEYS
                .iter()
                .find_map(|k| selector.get(*k).cloned())
                .unwrap_or_default();
            (pool, accelerator)
        });
    }
    let (pool, accelerator) = placement.unwrap_or_default();
    (total, pool, accelerator)
}

fn pod_gpus(pod: &PodSpec) -> u64 {
    let whole = |q: &Quantity| q.0.trim().parse::<u64>().unwrap_or(0);
    pod.containers
        .iter()
        .map(|c| {
            let resources = c.resources.as_ref();
            resources
                .and_then(|r| r.limits.as_ref())
                .and_then(|l| l.get(GPU_RESOURCE))
                .or_else(|| {
                    resources
                        .and_then(|r| r.requests.as_ref())
                        .and_then(|r| r.get(GPU_RESOURCE))
                })
                .map_or(0, whole)
        })
        .sum()
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    namespace: String,
    queue: String,
    runtime: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    namespace: String,
    queue: String,
    runtime: String,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    namespace: String,
    trainjob: String,
    runtime: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobMetricLabels {
    namespace: String,
    trainjob: String,
    runtime: String,
    metric: String,
}

/// The series one TrainJob has: its labels and the metric names exported.
type Gauged = std::collections::HashMap<(String, String), (JobLabels, Vec<String>)>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    runtime: String,
    outcome: &'static str,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    namespace: String,
    outcome: &'static str,
    pool: String,
    accelerator: String,
}

type WaitFamily = Family<QueueLabels, Histogram, fn() -> Histogram>;

fn wait_histogram() -> Histogram {
    // 1 s .. about 6 days: from a free queue to a long wait for quota.
    Histogram::new(exponential_buckets(1.0, 2.0, 20))
}

/// The platform metrics; part of [`crate::ControllerMetrics`] (registered with it): how long TrainJobs queued, how often
/// they were admitted and preempted, how they ended and what GPU time finished jobs held, counted once per
/// status transition the leader writes. Names, labels and how each is counted: docs/operator.md, "Metrics"
/// (`kubetrain_trainjob_queue_wait_seconds`, `..._admissions_total`, `..._preemptions_total`,
/// `..._outcomes_total`, `..._gpu_seconds_total`, `..._admission_reasons_total`, and the opt-in
/// trainerStatus gauges).
#[derive(Debug)]
pub struct PlatformMetrics {
    queue_wait: WaitFamily,
    admissions: Family<QueueLabels, Counter>,
    preemptions: Family<QueueLabels, Counter>,
    outcomes: Family<OutcomeLabels, Counter>,
    gpu_seconds: Family<GpuLabels, Counter<f64, AtomicU64>>,
    admission_reasons: Family<AdmissionLabels, Counter>,
    progress: Family<JobLabels, Gauge>,
    remaining: Family<JobLabels, Gauge>,
    trainer_metrics: Family<JobMetricLabels, Gauge<f64, AtomicU64>>,
    gauged: Mutex<Gauged>,
    /// Transitions counted: (UID, kind, when the state before it began).
    counted: Mutex<HashSet<(String, &'static str, i64)>>,
}

/// Transitions remembered for de-duplication; past it the memory starts afresh.
const REMEMBERED: usize = 65_536;

impl Default for PlatformMetrics {
    fn default() -> Self {
        Self {
            queue_wait: Family::new_with_constructor(wait_histogram),
            admissions: Family::default(),
            preemptions: Family::default(),
            outcomes: Family::default(),
            gpu_seconds: Family::default(),
            admission_reasons: Family::default(),
            progress: Family::default(),
            remaining: Family::default(),
            trainer_metrics: Family::default(),
            gauged: Mutex::default(),
            counted: Mutex::default(),
        }
    }
}

impl PlatformMetrics {
    /// Registers the metrics (names and labels as in the type's docs).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kubetrain_trainjob_queue_wait_seconds",
            "Time TrainJobs spent suspended before being admitted (unsuspended)",
            self.queue_wait.clone(),
        );
        registry.register(
            "kubetrain_trainjob_admissions",
            "TrainJobs unsuspended (admitted)",
            self.admissions.clone(),
        );
        registry.register(
            "kubetrain_trainjob_preemptions",
            "TrainJobs suspended again after running (preempted or evicted)",
            self.preemptions.clone(),
        );
        registry.register(
            "kubetrain_trainjob_outcomes",
            "Finished TrainJobs by runtime, outcome and reason",
            self.outcomes.clone(),
        );
        registry.register(
            "kubetrain_trainjob_gpu_seconds",
            "GPU-seconds held by finished TrainJobs, by outcome, namespace and requested GPU pool",
            self.gpu_seconds.clone(),
        );
        registry.register(
            "kubetrain_trainjob_admission_reasons",
            "TrainJobs unsuspended, by who released them: kueue (a queue-name label) or manual",
            self.admission_reasons.clone(),
        );
        registry.register(
            "kubetrain_trainjob_progress_percent",
            "trainerStatus.progressPercentage of running TrainJobs whose runtime opts in",
            self.progress.clone(),
        );
        registry.register(
            "kubetrain_trainjob_estimated_remaining_seconds",
            "trainerStatus.estimatedRemainingSeconds of running TrainJobs whose runtime opts in",
            self.remaining.clone(),
        );
        registry.register(
            "kubetrain_trainjob_trainer_metric",
            "Numeric trainerStatus.metrics of running TrainJobs whose runtime opts in",
            self.trainer_metrics.clone(),
        );
    }

    /// Sets the trainerStatus gauges of a running `job` whose runtime opts in (`exports`: its runtime
    /// carries `kubetrain.io/trainer-status-metrics: "true"`); drops its series otherwise (not opted in, nothing reported, finished).
    pub fn trainer_status(&self, job: &TrainJob, exports: bool) {
        let status = job.status.as_ref();
        let finished = status.is_some_and(|s| is_true(s, COMPLETE) || is_true(s, FAILED));
        let reported = status.and_then(|s| s.trainer_status.as_ref());
        let (Some(reported), true, false) = (reported, exports, finished) else {
            self.forget(job);
            return;
        };
        let labels = JobLabels {
            namespace: job.metadata.namespace.clone().unwrap_or_default(),
            trainjob: job.name().to_owned(),
            runtime: job.spec.runtime_ref.name.clone(),
        };
        let key = (labels.namespace.clone(), labels.trainjob.clone());
        let mut gauged = self.gauged.lock().unwrap_or_else(|e| e.into_inner());
        if !gauged.contains_key(&key) && gauged.len() >= MAX_GAUGED_JOBS {
            return;
        }
        let (_, names) = gauged
            .entry(key)
            .or_insert_with(|| (labels.clone(), Vec::new()));
        let set = |family: &Family<JobLabels, Gauge>, value: Option<i32>| match value {
            Some(v) => {
                family.get_or_create(&labels).set(i64::from(v));
            }
            None => {
                family.remove(&labels);
            }
        };
        set(&self.progress, reported.progress_percentage);
        set(&self.remaining, reported.estimated_remaining_seconds);
        let numeric: Vec<(&str, f64)> = reported
            .metrics
            .iter()
            .filter_map(|m| Some((m.name.as_str(), m.value.trim().parse::<f64>().ok()?)))
            .take(MAX_GAUGED_METRICS)
            .collect();
        let metric_labels = |metric: &str| JobMetricLabels {
            namespace: labels.namespace.clone(),
            trainjob: labels.trainjob.clone(),
            runtime: labels.runtime.clone(),
            metric: metric.to_owned(),
        };
        for gone in names
            .iter()
            .filter(|n| !numeric.iter().any(|(m, _)| m == n))
        {
            self.trainer_metrics.remove(&metric_labels(gone));
        }
        for (metric, value) in &numeric {
            self.trainer_metrics
                .get_or_create(&metric_labels(metric))
                .set(*value);
        }
        *names = numeric.iter().map(|(m, _)| (*m).to_owned()).collect();
    }

    /// Drops every trainerStatus series of `job`.
    pub fn forget(&self, job: &TrainJob) {
        let key = (
            job.metadata.namespace.clone().unwrap_or_default(),
            job.name().to_owned(),
        );
        let removed = self
            .gauged
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        if let Some((labels, names)) = removed {
            self.progress.remove(&labels);
            self.remaining.remove(&labels);
            for metric in names {
                self.trainer_metrics.remove(&JobMetricLabels {
                    namespace: labels.namespace.clone(),
                    trainjob: labels.trainjob.clone(),
                    runtime: labels.runtime.clone(),
                    metric,
                });
            }
        }
    }

    /// Counts the transitions of `job` from `before` to `after` (call once per status the leader wrote).
    pub fn observe(
        &self,
        job: &TrainJob,
        before: &TrainJobStatus,
        after: &TrainJobStatus,
        jobset: Option<&JobSet>,
    ) {
        let namespace = job.metadata.namespace.clone().unwrap_or_default();
        let runtime = job.spec.runtime_ref.name.clone();
        let queue = QueueLabels {
            namespace: namespace.clone(),
            queue: job
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(QUEUE_LABEL))
                .cloned()
                .unwrap_or_default(),
            runtime: runtime.clone(),
        };
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let since =
            condition(before, SUSPENDED).map_or(0, |c| c.last_transition_time.0.as_second());
        for transition in transitions(job, before, after, jobset) {
            let kind = match transition {
                Transition::Admitted { .. } => "admitted",
                Transition::Preempted => "preempted",
                Transition::Finished { .. } => "finished",
            };
            let since = if kind == "finished" { 0 } else { since };
            {
                let mut counted = self.counted.lock().unwrap_or_else(|e| e.into_inner());
                if counted.len() >= REMEMBERED {
                    counted.clear();
                }
                if !counted.insert((uid.clone(), kind, since)) {
                    continue;
                }
            }
            match transition {
                Transition::Admitted { waited } => {
                    self.admissions.get_or_create(&queue).inc();
                    self.admission_reasons
                        .get_or_create(&AdmissionLabels {
                            namespace: queue.namespace.clone(),
                            queue: queue.queue.clone(),
                            runtime: queue.runtime.clone(),
                            reason: if queue.queue.is_empty() {
                                "manual"
                            } else {
                                "kueue"
                            },
                        })
                        .inc();
                    self.queue_wait
                        .get_or_create(&queue)
                        .observe(waited.as_secs_f64());
                }
                Transition::Preempted => {
                    self.preemptions.get_or_create(&queue).inc();
                }
                Transition::Finished {
                    succeeded,
                    reason,
                    gpu_seconds,
                    pool,
                    accelerator,
                } => {
                    let outcome = if succeeded { "succeeded" } else { "failed" };
                    self.outcomes
                        .get_or_create(&OutcomeLabels {
                            runtime: runtime.clone(),
                            outcome,
                            reason,
                        })
                        .inc();
                    self.gpu_seconds
                        .get_or_create(&GpuLabels {
                            namespace: namespace.clone(),
                            outcome,
                            pool,
                            accelerator,
                        })
                        .inc_by(gpu_seconds);
                }
            }
        }
    }

    /// Finished TrainJobs counted for `runtime`, `outcome` (`succeeded`/`failed`) and `reason`.
    pub fn outcomes(&self, runtime: &str, outcome: &'static str, reason: &str) -> u64 {
        self.outcomes
            .get_or_create(&OutcomeLabels {
                runtime: runtime.to_owned(),
                outcome,
                reason: reason.to_owned(),
            })
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cond(type_: &str, status: &str, reason: &str, at: &str) -> Condition {
        serde_json::from_value(
            json!({"type": type_, "status": status, "reason": reason, "message": "",
            "lastTransitionTime": at}),
        )
        .unwrap()
    }

    fn status(conditions: Vec<Condition>) -> TrainJobStatus {
        TrainJobStatus {
            conditions,
            ..Default::default()
        }
    }

    fn job() -> TrainJob {
        kubetrain_test_support::fixtures::trainjob("j")
            .namespace("team")
            .created("2026-01-01T00:00:00Z")
            .label("kueue.x-k8s.io/queue-name", "gpu-queue")
            .typed()
    }

    fn jobset(gpus: &str, replicas: i32, selector: serde_json::Value) -> JobSet {
        let value = json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "j"},
            "spec": {"replicatedJobs": [
                {"name": "launcher", "replicas": 1, "template": {"spec": {"template": {"spec": {
                    "containers": [{"name": "l", "image": "x"}]}}}}},
                {"name": "node", "replicas": replicas, "template": {"spec": {"parallelism": 2, "template": {"spec": {
                    "nodeSelector": selector,
                    "containers": [{"name": "n", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}},
                                   {"name": "side", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}}}]}
        });
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn admission_preemption_and_finish() {
        let t0 = "2026-01-01T00:00:00Z";
        let queued = status(vec![cond(SUSPENDED, "True", "Suspended", t0)]);
        let resumed = status(vec![cond(
            SUSPENDED,
            "False",
            "Resumed",
            "2026-01-01T00:01:30Z",
        )]);
        assert_eq!(
            transitions(&job(), &queued, &resumed, None),
            [Transition::Admitted {
                waited: Duration::from_secs(90)
            }]
        );
        let preempted = status(vec![cond(
            SUSPENDED,
            "True",
            "Suspended",
            "2026-01-01T00:05:00Z",
        )]);
        assert_eq!(
            transitions(&job(), &resumed, &preempted, None),
            [Transition::Preempted]
        );
        // A new job, created suspended, is queued, not preempted.
        assert!(transitions(&job(), &status(vec![]), &queued, None).is_empty());
        assert!(transitions(&job(), &resumed, &resumed, None).is_empty());

        let mut done = resumed.clone();
        done.conditions.push(cond(
            COMPLETE,
            "True",
            "AllJobsCompleted",
            "2026-01-01T00:11:30Z",
        ));
        let js = jobset(
            "4",
            2,
            json!({"gpu-pool": "a100-pool", "nvidia.com/gpu.product": "A100"}),
        );
        // 2 replicas × parallelism 2 × (4 + 1) GPUs = 20 GPUs, for 600 s since the resume.
        assert_eq!(
            transitions(&job(), &resumed, &done, Some(&js)),
            [Transition::Finished {
                succeeded: true,
                reason: "AllJobsCompleted".into(),
                gpu_seconds: 12_000.0,
                pool: "a100-pool".into(),
                accelerator: "A100".into(),
            }]
        );
        // Once finished, never again.
        assert!(transitions(&job(), &done, &done, Some(&js)).is_empty());
        let mut failed_too = done.clone();
        failed_too
            .conditions
            .push(cond(FAILED, "True", "X", "2026-01-01T00:12:00Z"));
        assert!(transitions(&job(), &done, &failed_too, Some(&js)).is_empty());
    }

    #[test]
    fn a_stale_cache_does_not_count_an_admission_twice_but_a_readmission_counts() {
        let metrics = PlatformMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let queued = status(vec![cond(
            SUSPENDED,
            "True",
            "Suspended",
            "2026-01-01T00:00:00Z",
        )]);
        let resumed = |at| status(vec![cond(SUSPENDED, "False", "Resumed", at)]);
        metrics.observe(&job(), &queued, &resumed("2026-01-01T00:01:30Z"), None);
        // The next reconcile still sees the queued status and resumes it again, a little later.
        metrics.observe(&job(), &queued, &resumed("2026-01-01T00:01:31Z"), None);
        // Preempted at 00:05 and admitted again: a second admission.
        let requeued = status(vec![cond(
            SUSPENDED,
            "True",
            "Suspended",
            "2026-01-01T00:05:00Z",
        )]);
        metrics.observe(&job(), &resumed("2026-01-01T00:01:30Z"), &requeued, None);
        metrics.observe(&job(), &requeued, &resumed("2026-01-01T00:06:00Z"), None);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let labels = r#"{namespace="team",queue="gpu-queue",runtime="torch-distributed"}"#;
        for line in [
            format!("kubetrain_trainjob_admissions_total{labels} 2"),
            format!("kubetrain_trainjob_preemptions_total{labels} 1"),
            format!("kubetrain_trainjob_queue_wait_seconds_sum{labels} 150.0"),
        ] {
            assert!(text.contains(&line), "{line} in {text}");
        }
    }

    #[test]
    fn trainer_status_gauges_only_for_runtimes_that_opt_in_and_only_while_running() {
        let metrics = PlatformMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut running = job();
        running.status = Some(
            serde_json::from_value(json!({"trainerStatus": {
            "progressPercentage": 40, "estimatedRemainingSeconds": 600,
            "metrics": [{"name": "loss", "value": "0.25"}, {"name": "phase", "value": "warmup"}],
            "lastUpdatedTime": "2026-01-01T00:00:00Z"}}))
            .unwrap(),
        );
        let text = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
            text
        };
        let labels = r#"namespace="team",trainjob="j",runtime="torch-distributed""#;
        // Not opted in: no per-job series at all.
        metrics.trainer_status(&running, false);
        assert!(
            !text(&registry).contains("trainjob=\"j\""),
            "{}",
            text(&registry)
        );
        metrics.trainer_status(&running, true);
        let exported = text(&registry);
        for line in [
            format!("kubetrain_trainjob_progress_percent{{{labels}}} 40"),
            format!("kubetrain_trainjob_estimated_remaining_seconds{{{labels}}} 600"),
            format!("kubetrain_trainjob_trainer_metric{{{labels},metric=\"loss\"}} 0.25"),
        ] {
            assert!(exported.contains(&line), "{line} in {exported}");
        }
        assert!(!exported.contains("warmup") && !exported.contains("\"phase\""));
        // Finished: every series of the job goes.
        let mut done = running.clone();
        done.status.as_mut().unwrap().conditions =
            vec![cond(COMPLETE, "True", "Done", "2026-01-01T00:01:00Z")];
        metrics.trainer_status(&done, true);
        assert!(
            !text(&registry).contains("trainjob=\"j\""),
            "{}",
            text(&registry)
        );
        assert!(exports_trainer_status(
            &serde_json::from_value(json!({"template": {"metadata":
            {"annotations": {TRAINER_STATUS_METRICS_ANNOTATION: "true"}}, "spec": {}}}))
            .unwrap()
        ));
        assert!(!exports_trainer_status(&Default::default()));
    }

    #[test]
    fn admissions_say_whether_kueue_released_the_job() {
        let metrics = PlatformMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let queued = status(vec![cond(
            SUSPENDED,
            "True",
            "Suspended",
            "2026-01-01T00:00:00Z",
        )]);
        let resumed = status(vec![cond(
            SUSPENDED,
            "False",
            "Resumed",
            "2026-01-01T00:00:10Z",
        )]);
        metrics.observe(&job(), &queued, &resumed, None);
        let mut manual = job();
        manual.metadata.labels = None;
        manual.metadata.uid = Some("other".into());
        metrics.observe(&manual, &queued, &resumed, None);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"kubetrain_trainjob_admission_reasons_total{namespace="team",queue="gpu-queue",runtime="torch-distributed",reason="kueue"} 1"#,
            r#"kubetrain_trainjob_admission_reasons_total{namespace="team",queue="",runtime="torch-distributed",reason="manual"} 1"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
    }

    #[test]
    fn never_suspended_failure_counts_from_creation_and_is_exported() {
        let failed = status(vec![cond(
            FAILED,
            "True",
            "FailedJobs",
            "2026-01-01T00:00:10Z",
        )]);
        let js = jobset("1", 1, json!({}));
        let metrics = PlatformMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        metrics.observe(&job(), &status(vec![]), &failed, Some(&js));
        metrics.observe(&job(), &failed, &failed, Some(&js));
        // A reconcile from a stale cache computes the same finish again: counted once.
        metrics.observe(&job(), &status(vec![]), &failed, Some(&js));
        assert_eq!(
            metrics.outcomes("torch-distributed", "failed", "FailedJobs"),
            1
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        // (1 + 1) GPUs × 2 pods × 10 s.
        assert!(
            text.contains(r#"kubetrain_trainjob_gpu_seconds_total{namespace="team",outcome="failed",pool="",accelerator=""} 40.0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"kubetrain_trainjob_outcomes_total{runtime="torch-distributed",outcome="failed",reason="FailedJobs"} 1"#),
            "{text}"
        );
    }
}
