//! The SDK's view of runtimes and TrainJobs (trainer.md §6): what `list_*`, `get_*` and `train` take and return.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::core::v1::ResourceRequirements;

use crate::device::device_of;
use crate::error::ClientError;

/// The status of a TrainJob as the SDK reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum JobStatus {
    /// Created, but not every trainer pod is running yet.
    Created,
    /// Every `node` pod is Running or Succeeded.
    Running,
    /// The `Complete` condition is True.
    Complete,
    /// The `Failed` condition is True.
    Failed,
}

impl JobStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [JobStatus; 4] = [
        JobStatus::Created,
        JobStatus::Running,
        JobStatus::Complete,
        JobStatus::Failed,
    ];

    /// The name the Python SDK uses.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Created => "Created",
            JobStatus::Running => "Running",
            JobStatus::Complete => "Complete",
            JobStatus::Failed => "Failed",
        }
    }

    /// Whether the job has finished.
    pub fn is_finished(self) -> bool {
        matches!(self, JobStatus::Complete | JobStatus::Failed)
    }
}

impl fmt::Display for JobStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobStatus {
    type Err = ClientError;

    /// ```
    /// use kubetrain_client::JobStatus;
    /// assert_eq!("complete".parse::<JobStatus>().unwrap(), JobStatus::Complete);
    /// assert!("Done".parse::<JobStatus>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobStatus::ALL
            .into_iter()
            .find(|st| st.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                ClientError::InvalidArgument(format!(
                    "status {s:?} is not one of Created, Running, Complete, Failed"
                ))
            })
    }
}

/// The trainer of a runtime, derived from its `node` container.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RuntimeTrainer {
    /// `custom` for every runtime but torchtune ones (`builtin`).
    pub trainer_type: String,
    /// The `trainer.kubeflow.org/framework` label.
    pub framework: String,
    /// The image of the `node` container.
    pub image: Option<String>,
    /// `mlPolicy.numNodes` (default 1).
    pub num_nodes: i32,
    /// `cpu`, `gpu` or `Unknown` from the container's limits.
    pub device: String,
    /// The device count of the whole job, as the SDK computes it: the container's limit (or MPI's
    /// `numProcPerNode`) times the nodes; `Unknown` when not set.
    pub device_count: String,
    /// The trainer entrypoint the Python SDK derives from the runtime (`RuntimeTrainer.command`):
    /// `tune run` (TorchTune), a `torchrun` / `mpirun` / `python` script for function trainers
    /// ([`sdk_entrypoint`](crate::trainer::sdk_entrypoint)).
    pub command: Vec<String>,
    /// The `node` container's own command in the runtime.
    pub container_command: Vec<String>,
}

/// A training runtime as listed by the SDK.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Runtime {
    /// Runtime name.
    pub name: String,
    /// `ClusterTrainingRuntime` or `TrainingRuntime`.
    pub kind: String,
    /// The trainer it runs.
    pub trainer: RuntimeTrainer,
    /// The model the runtime's model initializer downloads (its `STORAGE_URI`), e.g.
    /// `hf://meta-llama/Llama-3.2-1B-Instruct` for the TorchTune runtimes; `None` without one. (The Python
    /// SDK 0.5.0 declares the field but its Kubernetes backend leaves it `None`.)
    pub pretrained_model: Option<String>,
}

/// One pod of a TrainJob: an initializer, the launcher or a trainer node.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Step {
    /// `dataset-initializer`, `model-initializer`, `launcher` or `node-<index>`.
    pub name: String,
    /// The pod phase (`Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`).
    pub status: String,
    /// The pod name (locally: the pod's host name).
    pub pod_name: String,
    /// `cpu`, `gpu` or `Unknown`.
    pub device: String,
    /// The device count (`Unknown` when not set).
    pub device_count: String,
}

/// A TrainJob as the SDK reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TrainJobView {
    /// Job name.
    pub name: String,
    /// `spec.runtimeRef.name`.
    pub runtime: String,
    /// Its pods.
    pub steps: Vec<Step>,
    /// `spec.trainer.numNodes` (else the runtime's, else 1).
    pub num_nodes: i32,
    /// `metadata.creationTimestamp` as RFC 3339, when known.
    pub creation_timestamp: Option<String>,
    /// The status.
    pub status: JobStatus,
    /// The message of the Failed (or Complete) condition, when there is one.
    pub message: Option<String>,
    /// What the training code last reported (`status.trainerStatus`, see [`crate::progress`]); `None`
    /// when it never reported. The local runner serves the same endpoint on loopback
    /// ([`crate::local::status`]).
    pub trainer_status: Option<TrainerProgress>,
}

/// `status.trainerStatus` of a TrainJob: the progress its training code reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TrainerProgress {
    /// Percentage done (0 to 100).
    pub progress_percentage: Option<i32>,
    /// Estimated seconds left.
    pub estimated_remaining_seconds: Option<i32>,
    /// Metrics as reported, in order.
    pub metrics: Vec<ProgressMetric>,
    /// When it was reported (RFC 3339).
    pub last_updated_time: Option<String>,
}

/// One reported metric.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ProgressMetric {
    /// Its name, e.g. `loss`.
    pub name: String,
    /// Its value as text.
    pub value: String,
}

impl TrainerProgress {
    /// The view of a TrainJob's `status.trainerStatus`.
    pub fn of(status: &kubetrain_api::TrainerStatus) -> Self {
        Self {
            progress_percentage: status.progress_percentage,
            estimated_remaining_seconds: status.estimated_remaining_seconds,
            metrics: status
                .metrics
                .iter()
                .map(|m| ProgressMetric {
                    name: m.name.clone(),
                    value: m.value.clone(),
                })
                .collect(),
            last_updated_time: status.last_updated_time.as_ref().map(|t| t.0.to_string()),
        }
    }

    /// One line for people: `40% done, about 600 s left; loss=0.25 step=40 (reported 2026-12-01T14:00:00Z)`.
    ///
    /// ```
    /// use kubetrain_client::types::{ProgressMetric, TrainerProgress};
    ///
    /// let p = TrainerProgress {
    ///     progress_percentage: Some(40),
    ///     estimated_remaining_seconds: Some(600),
    ///     metrics: vec![ProgressMetric { name: "loss".into(), value: "0.25".into() }],
    ///     last_updated_time: Some("2026-12-01T14:00:00Z".into()),
    /// };
    /// assert_eq!(p.summary(), "40% done, about 600 s left; loss=0.25 (reported 2026-12-01T14:00:00Z)");
    /// ```
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = self.progress_percentage {
            parts.push(format!("{p}% done"));
        }
        if let Some(s) = self.estimated_remaining_seconds {
            parts.push(format!("about {s} s left"));
        }
        let mut line = parts.join(", ");
        if !self.metrics.is_empty() {
            let metrics: Vec<String> = self
                .metrics
                .iter()
                .map(|m| format!("{}={}", m.name, m.value))
                .collect();
            if !line.is_empty() {
                line.push_str("; ");
            }
            line.push_str(&metrics.join(" "));
        }
        if let Some(t) = &self.last_updated_time {
            line.push_str(&format!(" (reported {t})"));
        }
        line
    }
}

/// The trainer part of [`train`](crate::TrainerClient::train): a container command and its resources
/// (the Python SDK's `CustomTrainerContainer`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trainer {
    /// Image (ignored by the local runner).
    pub image: Option<String>,
    /// Command of the trainer container.
    pub command: Vec<String>,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment.
    pub env: BTreeMap<String, String>,
    /// Nodes (pods) of the trainer.
    pub num_nodes: Option<i32>,
    /// Resources of each node.
    pub resources_per_node: Option<ResourceRequirements>,
}

impl Trainer {
    /// A trainer that runs `command`.
    pub fn command<I, S>(command: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Trainer {
            command: command.into_iter().map(Into::into).collect(),
            ..Trainer::default()
        }
    }

    /// Sets the node count.
    pub fn with_num_nodes(mut self, n: i32) -> Self {
        self.num_nodes = Some(n);
        self
    }

    /// Adds an env var.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Sets the image.
    pub fn with_image(mut self, image: impl Into<String>) -> Self {
        self.image = Some(image.into());
        self
    }

    /// Sets the arguments.
    pub fn with_args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the resources of each node (see [`resources`](crate::trainer::resources) for the SDK's
    /// shorthand).
    pub fn with_resources(mut self, resources: ResourceRequirements) -> Self {
        self.resources_per_node = Some(resources);
        self
    }
}

pub use crate::initializers::Initializer;

/// The manager the SDK's runtime patches carry (`RuntimePatch.manager`).
pub const SDK_PATCH_MANAGER: &str = "trainer.kubeflow.org/kubeflow-sdk";

/// Options of [`train`](crate::TrainerClient::train): the Python SDK's `options=[...]` (`Name`,
/// `Labels`, `Annotations`, `RuntimePatch`, `ActiveDeadlineSeconds`, `TrainerCommand`, `TrainerArgs`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainOptions {
    /// The job name; a random 12-character name (letter + 11 hex digits, as the Python SDK) when `None`.
    pub name: Option<String>,
    /// Labels of the TrainJob.
    pub labels: BTreeMap<String, String>,
    /// Annotations of the TrainJob.
    pub annotations: BTreeMap<String, String>,
    /// A patch of the runtime (`spec.runtimePatches`, manager [`SDK_PATCH_MANAGER`]).
    pub runtime_patch: Option<kubetrain_api::TrainingRuntimeSpecPatch>,
    /// `spec.activeDeadlineSeconds` (at least 1): the job fails with `DeadlineExceeded` after it.
    pub active_deadline_seconds: Option<i64>,
    /// `spec.ttlSecondsAfterFinished` (at least 0; KEP-2899, ahead of upstream v2.3): the operator deletes the
    /// finished job this long after it finished. The Python SDK's `ttl_seconds_after_finished`.
    pub ttl_seconds_after_finished: Option<i32>,
    /// Replaces the trainer command; only with a container trainer (or none), as in the SDK.
    pub trainer_command: Option<Vec<String>>,
    /// Replaces the trainer args; only with a container trainer (or none), as in the SDK.
    pub trainer_args: Option<Vec<String>>,
}

/// One event about a TrainJob or its pods.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Event {
    /// `TrainJob/<name>`, `JobSet/<name>` or `Pod/<name>`.
    pub involved_object: String,
    /// Short reason (`Started`, `Completed`, `BackOff`, ...).
    pub reason: String,
    /// Message.
    pub message: String,
    /// `Normal` or `Warning`.
    pub event_type: String,
    /// When it happened (RFC 3339), if known.
    pub time: Option<String>,
}

/// How [`get_job_logs`](crate::TrainerClient::get_job_logs) reads logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogOptions {
    /// The step (`node-0`, `dataset-initializer`, ...).
    pub step: String,
    /// Follow the log until the pod ends.
    pub follow: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            step: "node-0".to_string(),
            follow: false,
        }
    }
}

#[doc(hidden)]
/// The SDK view of a runtime, or `None` when it has no `trainer.kubeflow.org/framework` label (the SDK
/// skips those).
pub fn runtime_view(
    kind: &str,
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: &kubetrain_api::TrainingRuntimeSpec,
) -> Option<Runtime> {
    use kubetrain_api::constants::{ANCESTOR_TRAINER, FRAMEWORK_LABEL, MODEL_INITIALIZER, NODE};
    let framework = metadata.labels.as_ref()?.get(FRAMEWORK_LABEL)?.clone();
    let trainer_job = spec
        .template
        .spec
        .replicated_jobs
        .iter()
        .find(|r| r.ancestor() == Some(ANCESTOR_TRAINER));
    let node = trainer_job
        .and_then(kubetrain_api::jobset::ReplicatedJob::pod_spec)
        .and_then(|s| s.containers.iter().find(|c| c.name == NODE));
    let (device, mut device_count) = device_of(node.and_then(|c| c.resources.as_ref()));
    let ml_policy = spec.ml_policy.as_ref();
    if let Some(kubetrain_api::MLPolicySource::Mpi(mpi)) = ml_policy.and_then(|m| m.source.as_ref())
        && let Some(n) = mpi.num_proc_per_node
    {
        device_count = n.to_string();
    }
    let num_nodes = ml_policy.map_or(1, |m| m.num_nodes_or_default());
    if let Ok(per_node) = device_count.parse::<i64>() {
        device_count = (per_node * i64::from(num_nodes)).to_string();
    }
    let pretrained_model = spec
        .template
        .spec
        .replicated_jobs
        .iter()
        .filter_map(|r| r.template.spec.as_ref()?.template.spec.as_ref())
        .flat_map(|s| s.containers.iter())
        .find(|c| c.name == MODEL_INITIALIZER)
        .and_then(|c| c.env.as_ref()?.iter().find(|e| e.name == "STORAGE_URI"))
        .and_then(|e| e.value.clone());
    Some(Runtime {
        name: metadata.name.clone().unwrap_or_default(),
        kind: kind.to_string(),
        trainer: RuntimeTrainer {
            trainer_type: if framework == "torchtune" {
                "builtin"
            } else {
                "custom"
            }
            .to_string(),
            command: crate::trainer::sdk_entrypoint(&framework, ml_policy),
            framework,
            image: node.and_then(|c| c.image.clone()),
            num_nodes,
            device,
            device_count,
            container_command: node.and_then(|c| c.command.clone()).unwrap_or_default(),
        },
        pretrained_model,
    })
}

#[doc(hidden)]
/// The SDK step name of a pod: the replicated job for initializers and the launcher, `node-<index>` for
/// trainer nodes.
///
/// ```
/// assert_eq!(kubetrain_client::types::step_name("node", 3), "node-3");
/// assert_eq!(kubetrain_client::types::step_name("dataset-initializer", 0), "dataset-initializer");
/// ```
pub fn step_name(replicated_job: &str, completion_index: i32) -> String {
    if replicated_job == kubetrain_api::constants::NODE {
        format!("node-{completion_index}")
    } else {
        replicated_job.to_string()
    }
}
