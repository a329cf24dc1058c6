//! The admission webhooks, served over HTTPS at upstream's paths so that upstream's webhook configurations
//! (and ours in `examples/manifests/deploy/`) work unchanged.
//!
//! | Path | Kind | Operations | Does |
//! |---|---|---|---|
//! | `/mutate-trainer-kubeflow-org-v1alpha1-trainjob` | TrainJob | CREATE, UPDATE | stamps `spec.runtimePatches[].time` (JSON patch) |
//! | `/validate-trainer-kubeflow-org-v1alpha1-trainjob` | TrainJob | CREATE, UPDATE | schema, CEL and webhook rules against the referenced runtime; the training policy |
//! | `/validate-trainer-kubeflow-org-v1alpha1-trainingruntime` | TrainingRuntime | CREATE (UPDATE: the training policy only) | runtime rules; the training policy |
//! | `/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime` | ClusterTrainingRuntime | CREATE, UPDATE | runtime rules, deprecation warning; the training policy |
//!
//! The training policy ([`PolicyGate`], docs/training-policy.md) is enforced only when one is configured;
//! the validating reviews are recorded as events and, optionally, audit lines ([`AdmissionAudit`]).
//!
//! The rules themselves live in [`kubetrain_api::validation`] and [`kubetrain_api::defaulting`]; this module
//! reads what they need from the cluster (the runtime, the JobSet) and speaks AdmissionReview v1.
//!
//! ```
//! use kubetrain_controller::webhook::Route;
//!
//! let route = Route::from_path("/validate-trainer-kubeflow-org-v1alpha1-trainjob").unwrap();
//! assert_eq!(route, Route::ValidateTrainJob);
//! assert_eq!(Route::ALL.len(), 4);
//! assert!(Route::from_path("/validate-something-else").is_none());
//! ```

mod admission;
mod audit;
mod cluster;
mod metrics;
mod policy;
mod server;
pub mod tls;

pub use admission::{Admission, BadReview, MAX_MESSAGE};
pub use audit::{
    AdmissionAudit, RUNTIME_CHANGED, RUNTIME_DENIED, TRAINJOB_DENIED, TRAINJOB_SUBMITTED,
};
pub use cluster::RuntimeCache;
pub use metrics::{ReviewOutcome, WebhookMetrics};
pub(crate) use policy::AdmissionSetup;
pub use policy::{PolicyGate, TrainingPolicySource};
pub use server::{FREE_BODY, MAX_BODY, ServerLimits, WebhookError, WebhookServer};

/// The RBAC the webhooks need (cluster-wide reads only): the runtime a TrainJob references (watched by the
/// [`RuntimeCache`], hence `list` and `watch`), for runtime-patch updates its JobSet, for Volcano runtimes
/// the PriorityClasses they name, and for the training policy its ConfigMap and namespace labels. Verbs are sorted, so rules compare as data.
pub fn required_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    let rule =
        |group: &str, resources: &[&str], verbs: &[&str]| k8s_openapi::api::rbac::v1::PolicyRule {
            api_groups: Some(vec![group.to_owned()]),
            resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..Default::default()
        };
    vec![
        rule(
            "trainer.kubeflow.org",
            &["clustertrainingruntimes", "trainingruntimes"],
            &["get", "list", "watch"],
        ),
        rule("jobset.x-k8s.io", &["jobsets"], &["get"]),
        rule("scheduling.k8s.io", &["priorityclasses"], &["get"]),
        // The training policy: its ConfigMap (watched) and the labels of namespaces for namespace selectors.
        rule("", &["configmaps"], &["get", "list", "watch"]),
        rule("", &["namespaces"], &["get"]),
    ]
}

/// One admission endpoint of the operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// Defaulting of TrainJobs (`defaulter.trainjob.trainer.kubeflow.org`).
    MutateTrainJob,
    /// Validation of TrainJobs (`validator.trainjob.trainer.kubeflow.org`).
    ValidateTrainJob,
    /// Validation of TrainingRuntimes (`validator.trainingruntime.trainer.kubeflow.org`).
    ValidateTrainingRuntime,
    /// Validation of ClusterTrainingRuntimes (`validator.clustertrainingruntime.trainer.kubeflow.org`).
    ValidateClusterTrainingRuntime,
}

impl Route {
    /// Every route, in the order the table above lists them.
    pub const ALL: [Route; 4] = [
        Route::MutateTrainJob,
        Route::ValidateTrainJob,
        Route::ValidateTrainingRuntime,
        Route::ValidateClusterTrainingRuntime,
    ];

    /// The URL path the API server posts to (upstream's, from controller-runtime's naming scheme).
    pub fn path(self) -> &'static str {
        match self {
            Route::MutateTrainJob => "/mutate-trainer-kubeflow-org-v1alpha1-trainjob",
            Route::ValidateTrainJob => "/validate-trainer-kubeflow-org-v1alpha1-trainjob",
            Route::ValidateTrainingRuntime => {
                "/validate-trainer-kubeflow-org-v1alpha1-trainingruntime"
            }
            Route::ValidateClusterTrainingRuntime => {
                "/validate-trainer-kubeflow-org-v1alpha1-clustertrainingruntime"
            }
        }
    }

    /// The webhook's name in the webhook configurations (upstream's).
    pub fn webhook_name(self) -> &'static str {
        match self {
            Route::MutateTrainJob => "defaulter.trainjob.trainer.kubeflow.org",
            Route::ValidateTrainJob => "validator.trainjob.trainer.kubeflow.org",
            Route::ValidateTrainingRuntime => "validator.trainingruntime.trainer.kubeflow.org",
            Route::ValidateClusterTrainingRuntime => {
                "validator.clustertrainingruntime.trainer.kubeflow.org"
            }
        }
    }

    /// Whether the route answers with patches (a mutating webhook) rather than a verdict.
    pub fn is_mutating(self) -> bool {
        self == Route::MutateTrainJob
    }

    /// The route served at `path`, if any.
    pub fn from_path(path: &str) -> Option<Route> {
        Route::ALL.into_iter().find(|r| r.path() == path)
    }
}
