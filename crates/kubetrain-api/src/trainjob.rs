//! `TrainJob`: what a user submits. It names a runtime and overrides a few things.

use k8s_openapi::api::core::v1::{EnvVar, LocalObjectReference, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::constants::{CLUSTER_TRAINING_RUNTIME_KIND, GROUP, TRAINJOB_CONTROLLER, TRAINJOB_KIND};
use crate::patch::RuntimePatch;
use crate::resource::trainer_kind;

trainer_kind! {
    /// A training job: a reference to a (Cluster)TrainingRuntime plus the user's overrides.
    kind TrainJob {
        kind: TRAINJOB_KIND,
        plural: "trainjobs",
        scope: k8s_openapi::NamespaceResourceScope,
        spec: TrainJobSpec,
        status: TrainJobStatus,
    }
}

/// Desired state of a TrainJob.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobSpec {
    /// The runtime this job is overlaid onto.
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub runtime_ref: RuntimeRef,

    /// Dataset and model initializers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub initializer: Option<Initializer>,

    /// Overrides of the trainer container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub trainer: Option<Trainer>,

    /// Patches to the runtime, each owned by one manager (e.g. Kueue).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["manager"]))]
    pub runtime_patches: Vec<RuntimePatch>,

    /// Suspends the job (default false); Kueue admits by setting it to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub suspend: Option<bool>,

    /// Seconds the job may run before it fails with `DeadlineExceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub active_deadline_seconds: Option<i64>,

    /// Seconds after the job finished (`Complete` or `Failed`) when the controller deletes it, its JobSet,
    /// pods and other children with it; `0` deletes it as soon as it finishes. Unset: the runtime's
    /// `runPolicy.ttlSecondsAfterFinished`, else never. Mutable: an edit takes effect at the next reconcile,
    /// counted from `status.completionTime`. KEP-2899 (kubeflow/trainer#4052), ahead of upstream v2.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,

    /// The controller that reconciles the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("default" = "trainer.kubeflow.org/trainjob-controller"))]
    #[x_kube(
        validation = kube::core::Rule::new("self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']")
            .message("ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"),
        validation = kube::core::Rule::new("self == oldSelf").message("field is immutable")
    )]
    pub managed_by: Option<String>,
}

impl TrainJobSpec {
    /// Whether the job is suspended (default false).
    pub fn is_suspended(&self) -> bool {
        self.suspend.unwrap_or(false)
    }
    /// The managing controller with upstream's default.
    pub fn managed_by_or_default(&self) -> &str {
        self.managed_by.as_deref().unwrap_or(TRAINJOB_CONTROLLER)
    }
}

/// Reference to a training runtime.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeRef {
    /// Name of the runtime.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// API group of the runtime (default `trainer.kubeflow.org`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("default" = "trainer.kubeflow.org"))]
    pub api_group: Option<String>,
    /// Kind of the runtime (default `ClusterTrainingRuntime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("default" = "ClusterTrainingRuntime"))]
    pub kind: Option<String>,
}

impl RuntimeRef {
    /// A reference to a ClusterTrainingRuntime by name (what the SDK sends).
    pub fn cluster(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            api_group: None,
            kind: None,
        }
    }
    /// API group with its default.
    pub fn api_group_or_default(&self) -> &str {
        self.api_group.as_deref().unwrap_or(GROUP)
    }
    /// Kind with its default.
    pub fn kind_or_default(&self) -> &str {
        self.kind
            .as_deref()
            .unwrap_or(CLUSTER_TRAINING_RUNTIME_KIND)
    }
    /// Upstream's runtime registry key, `<kind>.<apiGroup>` (Go's `GroupKind.String()`).
    pub fn group_kind(&self) -> String {
        let group = self.api_group_or_default();
        if group.is_empty() {
            self.kind_or_default().to_owned()
        } else {
            format!("{}.{}", self.kind_or_default(), group)
        }
    }
}

/// Dataset and model initializers, run once before the trainer.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Initializer {
    /// Downloads the dataset to `/workspace/dataset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<DatasetInitializer>,
    /// Downloads the model to `/workspace/model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelInitializer>,
}

/// Settings of one initializer (dataset or model): where to download from, and the env and credentials of its
/// container. Upstream has one Go type per role with the same fields; here both roles share this struct.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InitializerSource {
    /// Where the data comes from, e.g. `hf://tatsu-lab/alpaca`, `hf://meta-llama/Llama-3.2-1B-Instruct` or
    /// `s3://bucket/prefix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = kube::core::Rule::new("self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')")
        .message("storageUri may be empty, or it must be a valid URI (scheme://...)"))]
    pub storage_uri: Option<String>,
    /// Extra env of the initializer container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub env: Vec<EnvVar>,
    /// Secret whose keys become env of the initializer container (credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
}

/// Dataset initializer settings (`spec.initializer.dataset`), downloaded to `/workspace/dataset`.
pub type DatasetInitializer = InitializerSource;

/// Model initializer settings (`spec.initializer.model`), downloaded to `/workspace/model`.
pub type ModelInitializer = InitializerSource;

/// Overrides of the trainer (`node`) container and the node count.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Trainer {
    /// Container image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 500))]
    pub image: Option<String>,
    /// Entrypoint; replaces the runtime's when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(inner(length(max = 1048576)), length(max = 128), extend("x-kubernetes-list-type" = "atomic"))]
    pub command: Option<Vec<String>>,
    /// Arguments; replace the runtime's when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(inner(length(max = 1048576)), length(max = 128), extend("x-kubernetes-list-type" = "atomic"))]
    pub args: Option<Vec<String>>,
    /// Env upserted into the trainer container by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub env: Vec<EnvVar>,
    /// Number of training nodes; wins over the runtime's `mlPolicy.numNodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub num_nodes: Option<i32>,
    /// Resources of each node's trainer container, merged key by key over the runtime's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_per_node: Option<ResourceRequirements>,
    /// Processes per node; torch defaults to "auto".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self >= 1").message("numProcPerNode must be greater than or equal to 1"))]
    pub num_proc_per_node: Option<i32>,
}

/// Observed state of a TrainJob.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TrainJobStatus {
    /// `Suspended`, `Complete` and `Failed` conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Job counts per replicated job, copied from the JobSet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub jobs_status: Vec<JobStatus>,
    /// Progress reported by the trainer itself (alpha, feature gate `TrainJobStatus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer_status: Option<TrainerStatus>,
    /// When the job last started running: set when it is first not suspended, reset when it resumes after a
    /// suspension, cleared while suspended (JobSet's semantics; the active deadline counts from it). KEP-2899,
    /// ahead of upstream v2.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the job finished, `Complete` or `Failed` (the time that condition became true); the TTL counts
    /// from it. KEP-2899, ahead of upstream v2.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

/// Job counts of one replicated job.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// Name of the replicated job.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Jobs whose pods are ready.
    #[schemars(range(min = 0))]
    pub ready: i32,
    /// Jobs that succeeded.
    #[schemars(range(min = 0))]
    pub succeeded: i32,
    /// Jobs that failed.
    #[schemars(range(min = 0))]
    pub failed: i32,
    /// Jobs with an active pod.
    #[schemars(range(min = 0))]
    pub active: i32,
    /// Suspended jobs.
    #[schemars(range(min = 0))]
    pub suspended: i32,
}

/// Progress reported by the training code.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.lastUpdatedTime)")
    .message("lastUpdatedTime is required when trainerStatus is present"))]
pub struct TrainerStatus {
    /// Percentage done, 0 to 100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub progress_percentage: Option<i32>,
    /// Estimated seconds left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub estimated_remaining_seconds: Option<i32>,
    /// Training metrics as name/value strings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), extend("x-kubernetes-list-type" = "atomic"))]
    pub metrics: Vec<Metric>,
    /// When the trainer last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated_time: Option<Time>,
}

/// One training metric.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Metric {
    /// Metric name, e.g. `loss`.
    #[schemars(length(min = 1, max = 64))]
    pub name: String,
    /// Metric value as a string.
    #[schemars(length(min = 1, max = 64))]
    pub value: String,
}

/// Condition types and reasons the trainer controller writes on a TrainJob.
pub mod conditions {
    /// The job is suspended (or was, with reason [`RESUMED`]).
    pub const SUSPENDED: &str = "Suspended";
    /// The job finished successfully.
    pub const COMPLETE: &str = "Complete";
    /// The job failed.
    pub const FAILED: &str = "Failed";
    /// Reason of `Suspended=True`.
    pub const REASON_SUSPENDED: &str = "Suspended";
    /// Reason of `Suspended=False` after a resume.
    pub const RESUMED: &str = "Resumed";
    /// Message of `Suspended=True`.
    pub const SUSPENDED_MESSAGE: &str = "TrainJob is suspended";
    /// Message of `Suspended=False`.
    pub const RESUMED_MESSAGE: &str = "TrainJob is resumed";
    /// Reason of `Failed=True` for a runtime kind the controller does not know.
    pub const TRAINING_RUNTIME_NOT_SUPPORTED: &str = "TrainingRuntimeNotSupported";
    /// Reason of `Failed=True` after `activeDeadlineSeconds`.
    pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
    /// Message of `Failed=True` after `activeDeadlineSeconds`.
    pub const DEADLINE_EXCEEDED_MESSAGE: &str = "TrainJob exceeded its active deadline";
    /// Reason of the event the controller records when it deletes a TrainJob whose TTL expired.
    pub const TTL_EXPIRED: &str = "TTLExpired";
}
