//! Prometheus metrics of the admission webhooks: reviews by webhook and verdict, and how long they took
//! (cluster reads included).
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `kubetrain_admission_reviews_total` | counter | `webhook` (name in the configuration), `verdict` (`allowed`, `denied`, `error`, `bad_request`) |
//! | `kubetrain_admission_review_duration_seconds` | histogram | `webhook` |

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::Route;

/// The outcome of one admission request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReviewOutcome {
    /// Allowed (possibly with warnings or a patch).
    Allowed,
    /// Denied by a rule, or the object did not decode.
    Denied,
    /// Refused because something on our side failed (the cluster could not be read).
    Error,
    /// The body was not an AdmissionReview (HTTP 400).
    BadRequest,
}

impl ReviewOutcome {
    /// The label value: `allowed`, `denied`, `error`, `bad_request`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewOutcome::Allowed => "allowed",
            ReviewOutcome::Denied => "denied",
            ReviewOutcome::Error => "error",
            ReviewOutcome::BadRequest => "bad_request",
        }
    }
}

impl EncodeLabelValue for ReviewOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        EncodeLabelValue::encode(&self.as_str(), encoder)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReviewLabels {
    webhook: &'static str,
    verdict: ReviewOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WebhookLabel {
    webhook: &'static str,
}

type DurationFamily = Family<WebhookLabel, Histogram, fn() -> Histogram>;

/// Counters and durations of admission reviews. Register once, then pass to [`super::Admission::with_metrics`].
#[derive(Debug)]
pub struct WebhookMetrics {
    reviews: Family<ReviewLabels, Counter>,
    duration: DurationFamily,
}

fn duration_histogram() -> Histogram {
    // 0.5 ms .. about 8 s: rules alone take well under a millisecond, cluster reads dominate.
    Histogram::new(exponential_buckets(0.0005, 2.0, 15))
}

impl WebhookMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self {
            reviews: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
        };
        registry.register(
            "kubetrain_admission_reviews",
            "Admission reviews answered, by webhook and verdict",
            metrics.reviews.clone(),
        );
        registry.register(
            "kubetrain_admission_review_duration_seconds",
            "Time to answer one admission review, cluster reads included",
            metrics.duration.clone(),
        );
        Arc::new(metrics)
    }

    /// Records one answered review.
    pub fn observe(&self, route: Route, verdict: ReviewOutcome, took: Duration) {
        let webhook = route.webhook_name();
        self.reviews
            .get_or_create(&ReviewLabels { webhook, verdict })
            .inc();
        self.duration
            .get_or_create(&WebhookLabel { webhook })
            .observe(took.as_secs_f64());
    }

    /// Reviews counted for `route` with `verdict` (for tests and diagnostics).
    pub fn reviews(&self, route: Route, verdict: ReviewOutcome) -> u64 {
        self.reviews
            .get_or_create(&ReviewLabels {
                webhook: route.webhook_name(),
                verdict,
            })
            .get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_are_counted_per_webhook_and_verdict_and_encoded() {
        let mut registry = Registry::default();
        let metrics = WebhookMetrics::register(&mut registry);
        metrics.observe(
            Route::ValidateTrainJob,
            ReviewOutcome::Denied,
            Duration::from_millis(3),
        );
        metrics.observe(
            Route::ValidateTrainJob,
            ReviewOutcome::Denied,
            Duration::from_millis(1),
        );
        metrics.observe(
            Route::MutateTrainJob,
            ReviewOutcome::Allowed,
            Duration::from_micros(200),
        );
        assert_eq!(
            metrics.reviews(Route::ValidateTrainJob, ReviewOutcome::Denied),
            2
        );
        assert_eq!(
            metrics.reviews(Route::ValidateTrainJob, ReviewOutcome::Allowed),
            0
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(r#"kubetrain_admission_reviews_total{webhook="validator.trainjob.trainer.kubeflow.org",verdict="denied"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"kubetrain_admission_review_duration_seconds_count{webhook="defaulter.trainjob.trainer.kubeflow.org"} 1"#),
            "{text}"
        );
    }
}
