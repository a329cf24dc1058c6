//! Prometheus metrics of the status server.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `kubetrain_status_updates_total` | counter | `verdict`: `written`, `empty`, `invalid`, `forbidden`, `not_found`, `too_large`, `busy`, `error` |
//! | `kubetrain_status_update_duration_seconds` | histogram | none (authentication, coalescing and the write included) |
//! | `kubetrain_status_updates_superseded_total` | counter | none: updates replaced by a newer one of the same TrainJob before they were written |

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The outcome of one status request, by the answer it got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatusPostOutcome {
    /// 200, `trainerStatus` written.
    Written,
    /// 200, no `trainerStatus` in the body: nothing written (upstream's behaviour).
    Empty,
    /// 422: the body did not decode or the status breaks the CRD's rules.
    Invalid,
    /// 403: no token, or one that may not update this TrainJob.
    Forbidden,
    /// 404: not the status path, or no such TrainJob.
    NotFound,
    /// 413: body over the limit.
    TooLarge,
    /// 429: too many TrainJobs writing at once.
    Busy,
    /// 500: the token could not be reviewed or the write failed.
    Error,
}

impl StatusPostOutcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusPostOutcome::Written => "written",
            StatusPostOutcome::Empty => "empty",
            StatusPostOutcome::Invalid => "invalid",
            StatusPostOutcome::Forbidden => "forbidden",
            StatusPostOutcome::NotFound => "not_found",
            StatusPostOutcome::TooLarge => "too_large",
            StatusPostOutcome::Busy => "busy",
            StatusPostOutcome::Error => "error",
        }
    }
}

impl EncodeLabelValue for StatusPostOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.as_str(), encoder)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct VerdictLabel {
    verdict: StatusPostOutcome,
}

/// Counters and latency of the status server. Register once, then pass to
/// [`super::StatusServer::with_metrics`].
#[derive(Debug)]
pub struct StatusMetrics {
    updates: Family<VerdictLabel, Counter>,
    duration: Histogram,
    superseded: Counter,
}

impl StatusMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self::unregistered();
        registry.register(
            "kubetrain_status_updates",
            "TrainJob status updates answered by the status server, by verdict",
            metrics.updates.clone(),
        );
        registry.register(
            "kubetrain_status_update_duration_seconds",
            "Time to answer one status update: authentication, coalescing and the status write",
            metrics.duration.clone(),
        );
        registry.register(
            "kubetrain_status_updates_superseded",
            "Status updates replaced by a newer update of the same TrainJob before being written",
            metrics.superseded.clone(),
        );
        Arc::new(metrics)
    }

    /// Metrics that no registry exports (the server's default).
    pub fn unregistered() -> Self {
        Self {
            updates: Family::default(),
            // 0.5 ms .. about 8 s: a cached token and a patch take milliseconds, TokenReviews more.
            duration: Histogram::new(exponential_buckets(0.0005, 2.0, 15)),
            superseded: Counter::default(),
        }
    }

    /// Records one answered request.
    pub fn observe(&self, verdict: StatusPostOutcome, took: Duration) {
        self.updates.get_or_create(&VerdictLabel { verdict }).inc();
        self.duration.observe(took.as_secs_f64());
    }

    /// Records one update replaced before it was written.
    pub fn supersede(&self) {
        self.superseded.inc();
    }

    /// Requests counted with `verdict`.
    pub fn updates(&self, verdict: StatusPostOutcome) -> u64 {
        self.updates.get_or_create(&VerdictLabel { verdict }).get()
    }

    /// Updates replaced before they were written.
    pub fn superseded(&self) -> u64 {
        self.superseded.get()
    }
}
