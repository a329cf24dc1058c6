//! The SDK's view of runtimes and TrainJobs (trainer.md §6): what `list_*`, `get_*` and `train` take and return.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};

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
    /// The device count from the container's limits (`Unknown` when not set).
    pub device_count: String,
    /// The `node` container's command.
    pub command: Vec<String>,
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
    /// when it never reported (and always from the local runner, which has no status endpoint yet).
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

    pub(crate) fn env_vars(&self) -> Vec<EnvVar> {
        self.env
            .iter()
            .map(|(k, v)| EnvVar {
                name: k.clone(),
                value: Some(v.clone()),
                value_from: None,
            })
            .collect()
    }
}

/// Dataset and model initializers: a storage URI and the initializer env (upper-case option names).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Initializer {
    /// Dataset `storageUri` (`hf://…`, `s3://…`) and env.
    pub dataset: Option<(String, BTreeMap<String, String>)>,
    /// Model `storageUri` and env.
    pub model: Option<(String, BTreeMap<String, String>)>,
}

/// Options of [`train`](crate::TrainerClient::train).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrainOptions {
    /// The job name; a random 12-character name (letter + 11 hex digits, as the Python SDK) when `None`.
    pub name: Option<String>,
    /// Labels of the TrainJob.
    pub labels: BTreeMap<String, String>,
    /// Annotations of the TrainJob.
    pub annotations: BTreeMap<String, String>,
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

/// Device kind and count from a container's resource limits, as the Python SDK derives them.
pub(crate) fn device_of(resources: Option<&ResourceRequirements>) -> (String, String) {
    let limits = resources.and_then(|r| r.limits.as_ref());
    let Some(limits) = limits else {
        return ("Unknown".into(), "Unknown".into());
    };
    for (key, device) in [
        ("nvidia.com/gpu", "gpu"),
        ("amd.com/gpu", "gpu"),
        ("cpu", "cpu"),
    ] {
        if let Some(q) = limits.get(key) {
            return (device.into(), q.0.clone());
        }
    }
    ("Unknown".into(), "Unknown".into())
}

/// The SDK view of a runtime, or `None` when it has no `trainer.kubeflow.org/framework` label (the SDK
/// skips those).
pub fn runtime_view(
    kind: &str,
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: &kubetrain_api::TrainingRuntimeSpec,
) -> Option<Runtime> {
    use kubetrain_api::constants::{ANCESTOR_LABEL, ANCESTOR_TRAINER, FRAMEWORK_LABEL, NODE};
    let framework = metadata.labels.as_ref()?.get(FRAMEWORK_LABEL)?.clone();
    let trainer_job = spec.template.spec.replicated_jobs.iter().find(|r| {
        r.template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .and_then(|l| l.get(ANCESTOR_LABEL))
            .is_some_and(|a| a == ANCESTOR_TRAINER)
    });
    let node = trainer_job
        .and_then(|r| r.template.spec.as_ref()?.template.spec.as_ref())
        .and_then(|s| s.containers.iter().find(|c| c.name == NODE));
    let (device, device_count) = device_of(node.and_then(|c| c.resources.as_ref()));
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
            framework,
            image: node.and_then(|c| c.image.clone()),
            num_nodes: spec
                .ml_policy
                .as_ref()
                .map_or(1, |m| m.num_nodes_or_default()),
            device,
            device_count,
            command: node.and_then(|c| c.command.clone()).unwrap_or_default(),
        },
    })
}

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
