//! Prometheus metrics of the TrainJob controller (prometheus-client; kube-runtime exports none itself).
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `kubetrain_trainjob_reconcile_total` | counter | reconciles run (every outcome) |
//! | `kubetrain_trainjob_reconcile_errors_total{kind}` | counter | failed reconciles by [`crate::Error::metric_label`] (every kind at 0 from the start) |
//! | `kubetrain_trainjob_reconcile_duration_seconds` | histogram | time of one reconcile, API calls included |
//! | `kubetrain_trainjobs{state}` | gauge | TrainJobs in the controller's cache by state (Created, Running, Suspended, Complete, Failed) |
//! | `kubetrain_trainjob_reconciles_in_flight` | gauge | reconciles running now |
//! | `kubetrain_trainjob_requeues_scheduled` | gauge | TrainJobs with a requeue (deadline, retry, follower re-check) still ahead |
//! | `kubetrain_status_count_writes_waiting` | gauge | TrainJobs whose changed `jobsStatus` counts wait for the count-only write budget ([`crate::CountWriteBudget`]) |
//! | `kubetrain_trainjob_queue_depth` | gauge | in flight + scheduled requeues: the work the controller has accepted and not finished |
//!
//! The platform metrics (queue wait, admissions, preemptions, outcomes, GPU-seconds) are registered with these;
//! see [`PlatformMetrics`].
//!
//! The queue depth is an honest lower bound: kube-runtime's scheduler does not expose its queue, so reconciles
//! triggered by watch events that wait for a free concurrency slot are not counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::reflector::Store;
use kubetrain_api::TrainJob;
use kubetrain_api::conditions::{COMPLETE, FAILED, SUSPENDED};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::backoff::Key;
use crate::platform::PlatformMetrics;

/// Where a TrainJob stands, as the `state` label of `kubetrain_trainjobs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TrainJobState {
    /// Accepted, nothing running yet (or status not written yet).
    Created,
    /// At least one job of the JobSet is active or ready.
    Running,
    /// `spec.suspend` is true (e.g. waiting for Kueue admission).
    Suspended,
    /// `Complete=True`.
    Complete,
    /// `Failed=True`.
    Failed,
}

impl TrainJobState {
    /// Every state, in label order.
    pub const ALL: [TrainJobState; 5] = [
        Self::Created,
        Self::Running,
        Self::Suspended,
        Self::Complete,
        Self::Failed,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "Created",
            Self::Running => "Running",
            Self::Suspended => "Suspended",
            Self::Complete => "Complete",
            Self::Failed => "Failed",
        }
    }

    /// Classifies a TrainJob: Failed and Complete from conditions, then Suspended from the spec, then Running
    /// when `jobsStatus` reports an active or ready job, else Created.
    pub fn of(job: &TrainJob) -> Self {
        let status = job.status.as_ref();
        let is_true = |t: &str| {
            status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == t && c.status == "True")
            })
        };
        if is_true(FAILED) {
            Self::Failed
        } else if is_true(COMPLETE) {
            Self::Complete
        } else if job.spec.is_suspended() || is_true(SUSPENDED) {
            Self::Suspended
        } else if status.is_some_and(|s| s.jobs_status.iter().any(|j| j.active > 0 || j.ready > 0))
        {
            Self::Running
        } else {
            Self::Created
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    kind: String,
}

/// The controller's metrics. Create once with [`ControllerMetrics::register`] and pass to [`crate::run`].
#[derive(Debug)]
pub struct ControllerMetrics {
    reconciles: Counter,
    errors: Family<ErrorLabels, Counter>,
    duration: Histogram,
    live: Arc<Live>,
    count_writes_waiting: Gauge,
    /// Queue wait, admissions, preemptions, outcomes and GPU-seconds ([`crate::PlatformMetrics`]).
    pub platform: PlatformMetrics,
}

/// State read at scrape time.
#[derive(Debug, Default)]
struct Live {
    in_flight: AtomicI64,
    requeues: Mutex<HashMap<Key, Instant>>,
    store: Mutex<Option<Store<TrainJob>>>,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self {
            reconciles: Counter::default(),
            errors: Family::default(),
            duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            live: Arc::default(),
            count_writes_waiting: Gauge::default(),
            platform: PlatformMetrics::default(),
        }
    }
}

impl ControllerMetrics {
    /// Creates the metrics and registers them in `registry` (names as in the [module docs](self)).
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self::default();
        // Every kind of error at 0 from the start: a rate over the family has series before the first error.
        for kind in crate::error::METRIC_LABELS {
            let _zero = metrics.errors.get_or_create(&ErrorLabels {
                kind: (*kind).to_owned(),
            });
        }
        registry.register(
            "kubetrain_trainjob_reconcile",
            "TrainJob reconciles run",
            metrics.reconciles.clone(),
        );
        registry.register(
            "kubetrain_trainjob_reconcile_errors",
            "Failed TrainJob reconciles by kind of error",
            metrics.errors.clone(),
        );
        registry.register(
            "kubetrain_trainjob_reconcile_duration_seconds",
            "Duration of one TrainJob reconcile, API calls included",
            metrics.duration.clone(),
        );
        registry.register(
            "kubetrain_status_count_writes_waiting",
            "TrainJobs whose jobsStatus counts wait for the count-only write budget",
            metrics.count_writes_waiting.clone(),
        );
        registry.register_collector(Box::new(LiveCollector(metrics.live.clone())));
        metrics.platform.register(registry);
        Arc::new(metrics)
    }

    /// The gauge of TrainJobs waiting for the count-only write budget (crate::count_writes).
    pub(crate) fn count_writes_waiting(&self) -> Gauge {
        self.count_writes_waiting.clone()
    }

    /// Reconciles run so far.
    pub fn reconciles(&self) -> u64 {
        self.reconciles.get()
    }

    /// Failed reconciles with error kind `kind` so far.
    pub fn errors(&self, kind: &str) -> u64 {
        self.errors
            .get_or_create(&ErrorLabels {
                kind: kind.to_owned(),
            })
            .get()
    }

    /// Reconciles running now.
    pub fn in_flight(&self) -> i64 {
        self.live.in_flight.load(Ordering::Relaxed)
    }

    /// TrainJobs with a requeue still ahead.
    pub fn requeues_scheduled(&self) -> usize {
        self.live.requeues_scheduled(Instant::now())
    }

    /// Marks the start of a reconcile; the guard records its duration and end when dropped.
    pub(crate) fn reconcile_started(&self) -> ReconcileGuard<'_> {
        self.reconciles.inc();
        self.live.in_flight.fetch_add(1, Ordering::Relaxed);
        ReconcileGuard {
            metrics: self,
            start: Instant::now(),
        }
    }

    pub(crate) fn error(&self, label: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                kind: label.to_owned(),
            })
            .inc();
    }

    /// Notes that `key` will be reconciled again after `after` (or not, with `None`).
    pub(crate) fn requeue(&self, key: &Key, after: Option<Duration>) {
        let mut requeues = self.live.requeues.lock().unwrap_or_else(|e| e.into_inner());
        match after {
            Some(after) => {
                requeues.insert(key.clone(), Instant::now() + after);
            }
            None => {
                requeues.remove(key);
            }
        }
    }

    /// Lets `kubetrain_trainjobs` count the TrainJobs of the controller's cache.
    pub(crate) fn observe_store(&self, store: Store<TrainJob>) {
        *self.live.store.lock().unwrap_or_else(|e| e.into_inner()) = Some(store);
    }
}

/// Ends a reconcile's measurement on drop (also when the reconcile future is cancelled).
pub(crate) struct ReconcileGuard<'a> {
    metrics: &'a ControllerMetrics,
    start: Instant,
}

impl Drop for ReconcileGuard<'_> {
    fn drop(&mut self) {
        self.metrics
            .duration
            .observe(self.start.elapsed().as_secs_f64());
        self.metrics.live.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Live {
    fn requeues_scheduled(&self, now: Instant) -> usize {
        let mut requeues = self.requeues.lock().unwrap_or_else(|e| e.into_inner());
        // Requeues that already fired are either running or done; forget them.
        requeues.retain(|_, at| *at > now);
        requeues.len()
    }

    fn states(&self) -> [i64; 5] {
        let mut counts = [0i64; 5];
        if let Some(store) = &*self.store.lock().unwrap_or_else(|e| e.into_inner()) {
            for job in store.state() {
                let state = TrainJobState::of(&job);
                if let Some(i) = TrainJobState::ALL.iter().position(|s| *s == state) {
                    counts[i] += 1;
                }
            }
        }
        counts
    }
}

#[derive(Debug)]
struct LiveCollector(Arc<Live>);

impl Collector for LiveCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.0.states();
        let mut family = encoder.encode_descriptor(
            "kubetrain_trainjobs",
            "TrainJobs in the controller's cache by state",
            None,
            MetricType::Gauge,
        )?;
        for (state, count) in TrainJobState::ALL.iter().zip(counts) {
            let labels = [("state", state.as_str())];
            ConstGauge::new(count).encode(family.encode_family(&labels)?)?;
        }
        let in_flight = self.0.in_flight.load(Ordering::Relaxed);
        let scheduled =
            i64::try_from(self.0.requeues_scheduled(Instant::now())).unwrap_or(i64::MAX);
        for (name, help, value) in [
            (
                "kubetrain_trainjob_reconciles_in_flight",
                "TrainJob reconciles running now",
                in_flight,
            ),
            (
                "kubetrain_trainjob_requeues_scheduled",
                "TrainJobs with a scheduled requeue still ahead",
                scheduled,
            ),
            (
                "kubetrain_trainjob_queue_depth",
                "Reconciles in flight plus scheduled requeues",
                in_flight.saturating_add(scheduled),
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
