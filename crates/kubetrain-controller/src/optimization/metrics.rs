//! Prometheus metrics of the OptimizationJob controller.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `kubetrain_optimization_trials{namespace,name,state}` | gauge | trials of each OptimizationJob by state (Pending, Running, Succeeded, Failed, Stopped) at its last reconcile |
//! | `kubetrain_optimization_best_objective{namespace,name}` | gauge | the best objective value so far |
//! | `kubetrain_optimization_trials_created_total` | counter | trial TrainJobs created |
//! | `kubetrain_optimization_trials_stopped_total` | counter | trials stopped by the early-stopping rule |
//! | `kubetrain_optimization_reconcile_errors_total` | counter | failed reconciles of OptimizationJobs |

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::status::Counts;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    namespace: String,
    name: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    namespace: String,
    name: String,
}

/// The OptimizationJob controller's metrics; register once with [`OptimizationMetrics::register`].
#[derive(Clone, Debug, Default)]
pub struct OptimizationMetrics {
    trials: Family<StateLabels, Gauge>,
    best: Family<JobLabels, Gauge<f64, AtomicU64>>,
    created: Counter,
    stopped: Counter,
    errors: Counter,
}

impl OptimizationMetrics {
    /// Registers the metrics in `registry` and returns the handle the controller updates.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "kubetrain_optimization_trials",
            "Trials of each OptimizationJob by state",
            metrics.trials.clone(),
        );
        registry.register(
            "kubetrain_optimization_best_objective",
            "The best objective value of each OptimizationJob so far",
            metrics.best.clone(),
        );
        registry.register(
            "kubetrain_optimization_trials_created",
            "Trial TrainJobs created",
            metrics.created.clone(),
        );
        registry.register(
            "kubetrain_optimization_trials_stopped",
            "Trials stopped by the early-stopping rule",
            metrics.stopped.clone(),
        );
        registry.register(
            "kubetrain_optimization_reconcile_errors",
            "Failed reconciles of OptimizationJobs",
            metrics.errors.clone(),
        );
        metrics
    }

    /// Records the trial counts and best objective of one job.
    pub fn observe(&self, namespace: &str, name: &str, counts: Counts, best: Option<f64>) {
        for (state, value) in [
            ("Pending", counts.pending),
            ("Running", counts.running),
            ("Succeeded", counts.succeeded),
            ("Failed", counts.failed),
            ("Stopped", counts.stopped),
        ] {
            self.trials
                .get_or_create(&StateLabels {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    state,
                })
                .set(i64::from(value));
        }
        if let Some(best) = best {
            self.best
                .get_or_create(&JobLabels {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                })
                .set(best);
        }
    }

    /// One trial created.
    pub fn trial_created(&self) {
        self.created.inc();
    }

    /// One trial stopped early.
    pub fn trial_stopped(&self) {
        self.stopped.inc();
    }

    /// One failed reconcile.
    pub fn reconcile_failed(&self) {
        self.errors.inc();
    }

    /// Trials of `namespace/name` in `state` at the last reconcile (tests and embedders).
    pub fn trials(&self, namespace: &str, name: &str, state: &'static str) -> i64 {
        self.trials
            .get_or_create(&StateLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                state,
            })
            .get()
    }

    /// Trials created since start.
    pub fn created(&self) -> u64 {
        self.created.get()
    }
}
