//! The Training Operator v1 API (`kubeflow.org/v1`), written from the Go types of
//! `github.com/kubeflow/training-operator` v1.8.1 (`pkg/apis/kubeflow.org/v1/*_types.go`; `JAXJob` from v1.9.0).
//!
//! Only what a migration reads is typed; [`V1Job::from_value`] reports every field of the input that the types
//! do not hold, so that nothing is dropped without a word. `status` is kept as it was read and never carried.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::MigrateError;

/// The API version of every Training Operator v1 job.
pub const API_VERSION: &str = "kubeflow.org/v1";

/// The six kinds of Training Operator v1 jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum V1Kind {
    /// `PyTorchJob`: Master and Worker replicas, torch.distributed env.
    PyTorchJob,
    /// `TFJob`: Chief/Master, PS, Worker and Evaluator replicas, `TF_CONFIG`.
    TFJob,
    /// `MPIJob`: Launcher and Worker replicas, ranks started with `kubectl exec`.
    MPIJob,
    /// `XGBoostJob`: Master and Worker replicas, Rabit tracker env.
    XGBoostJob,
    /// `PaddleJob`: Master and Worker replicas, `PADDLE_*` env.
    PaddleJob,
    /// `JAXJob` (Training Operator v1.9): Worker replicas, JAX coordinator env.
    JAXJob,
}

impl V1Kind {
    /// Every kind, in documentation order.
    pub const ALL: [V1Kind; 6] = [
        V1Kind::PyTorchJob,
        V1Kind::TFJob,
        V1Kind::MPIJob,
        V1Kind::XGBoostJob,
        V1Kind::PaddleJob,
        V1Kind::JAXJob,
    ];

    /// The kind's name as written in `kind:`.
    pub fn as_str(self) -> &'static str {
        match self {
            V1Kind::PyTorchJob => "PyTorchJob",
            V1Kind::TFJob => "TFJob",
            V1Kind::MPIJob => "MPIJob",
            V1Kind::XGBoostJob => "XGBoostJob",
            V1Kind::PaddleJob => "PaddleJob",
            V1Kind::JAXJob => "JAXJob",
        }
    }

    /// The kind named `name`, if it is one of the six.
    pub fn from_name(name: &str) -> Option<V1Kind> {
        V1Kind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The `spec` field holding the replica specs (`pytorchReplicaSpecs`, ...).
    pub fn replica_specs_field(self) -> &'static str {
        match self {
            V1Kind::PyTorchJob => "pytorchReplicaSpecs",
            V1Kind::TFJob => "tfReplicaSpecs",
            V1Kind::MPIJob => "mpiReplicaSpecs",
            V1Kind::XGBoostJob => "xgbReplicaSpecs",
            V1Kind::PaddleJob => "paddleReplicaSpecs",
            V1Kind::JAXJob => "jaxReplicaSpecs",
        }
    }

    /// The replica types the v1 operator accepts for this kind.
    pub fn replica_types(self) -> &'static [&'static str] {
        match self {
            V1Kind::PyTorchJob | V1Kind::XGBoostJob | V1Kind::PaddleJob => &["Master", "Worker"],
            V1Kind::TFJob => &["Chief", "Master", "PS", "Worker", "Evaluator"],
            V1Kind::MPIJob => &["Launcher", "Worker"],
            V1Kind::JAXJob => &["Worker"],
        }
    }

    /// The container the v1 operator treats as the job's own (`pytorch`, `tensorflow`, ...).
    pub fn default_container(self) -> &'static str {
        match self {
            V1Kind::PyTorchJob => "pytorch",
            V1Kind::TFJob => "tensorflow",
            V1Kind::MPIJob => "mpi",
            V1Kind::XGBoostJob => "xgboost",
            V1Kind::PaddleJob => "paddle",
            V1Kind::JAXJob => "jax",
        }
    }

    /// The name and number of the v1 operator's default port (its `<kind>-port` container port).
    pub fn default_port(self) -> (&'static str, i32) {
        match self {
            V1Kind::PyTorchJob => ("pytorchjob-port", 23456),
            V1Kind::TFJob => ("tfjob-port", 2222),
            V1Kind::MPIJob => ("mpi-port", 9999),
            V1Kind::XGBoostJob => ("xgboostjob-port", 9999),
            V1Kind::PaddleJob => ("master", 36543),
            V1Kind::JAXJob => ("jaxjob-port", 6666),
        }
    }

    /// The restart policy the v1 operator gives replicas that set none.
    pub fn default_restart_policy(self) -> RestartPolicy {
        match self {
            V1Kind::PyTorchJob | V1Kind::PaddleJob => RestartPolicy::OnFailure,
            _ => RestartPolicy::Never,
        }
    }
}

impl std::fmt::Display for V1Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `ReplicaSpec`: how many pods of one replica type, from which template, restarted how.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    /// Number of pods (v1 default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The pod template.
    #[serde(default)]
    pub template: PodTemplateSpec,
    /// The restart policy; overrides the template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<RestartPolicy>,
}

impl ReplicaSpec {
    /// Number of pods with v1's default of 1.
    pub fn replicas_or_default(&self) -> i32 {
        self.replicas.unwrap_or(1)
    }
}

/// `RestartPolicy` of a replica type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart the container whatever its exit.
    Always,
    /// Restart the container when it fails.
    OnFailure,
    /// Never restart; a failed pod fails the job (after `backoffLimit`).
    Never,
    /// Restart the pod on retryable exit codes (128 and above), fail on the others.
    ExitCode,
}

impl RestartPolicy {
    /// The name as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            RestartPolicy::Always => "Always",
            RestartPolicy::OnFailure => "OnFailure",
            RestartPolicy::Never => "Never",
            RestartPolicy::ExitCode => "ExitCode",
        }
    }
}

/// `CleanPodPolicy`: which pods the v1 operator deletes when the job ends.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanPodPolicy {
    /// Every pod.
    All,
    /// The pods still running.
    Running,
    /// None.
    None,
}

/// `RunPolicy`: the job-level policies every kind shares.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// Which pods to delete when the job ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_pod_policy: Option<CleanPodPolicy>,
    /// Seconds after the end before the job is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Seconds the job may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// Retries before the job fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    /// Gang scheduling (Volcano or scheduler-plugins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<SchedulingPolicy>,
    /// Whether the job is suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
}

/// `SchedulingPolicy`: the gang's PodGroup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    /// Pods that must be scheduled together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,
    /// The Volcano queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Resources the gang needs at least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// The PodGroup's priority class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    /// Seconds the gang may wait to be scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// `ElasticPolicy` of a PyTorchJob (torch elastic: a range of nodes, a rendezvous backend, autoscaling).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ElasticPolicy {
    /// Fewest nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    /// Most nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
    /// Rendezvous backend (`c10d`, `etcd`, `etcd-v2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_backend: Option<String>,
    /// Rendezvous port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_port: Option<i32>,
    /// Rendezvous host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_host: Option<String>,
    /// Rendezvous id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_id: Option<String>,
    /// Extra rendezvous settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdzv_conf: Option<Vec<RdzvConf>>,
    /// torchrun `--standalone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standalone: Option<bool>,
    /// Processes per node (deprecated for `nprocPerNode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_proc_per_node: Option<i32>,
    /// torchrun `--max-restarts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<i32>,
    /// HorizontalPodAutoscaler metrics (`autoscaling/v2` MetricSpec, kept as read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Vec<Value>>,
}

/// One `rdzvConf` entry.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RdzvConf {
    /// Key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// `PaddleElasticPolicy` of a PaddleJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PaddleElasticPolicy {
    /// Fewest nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    /// Most nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
    /// Restarts allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<i32>,
    /// HorizontalPodAutoscaler metrics, kept as read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Vec<Value>>,
}

/// Replica specs by replica type (`Master`, `Worker`, ...), in name order.
pub type ReplicaSpecs = BTreeMap<String, ReplicaSpec>;

/// `PyTorchJobSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PyTorchJobSpec {
    /// Job-level policies.
    #[serde(default)]
    pub run_policy: RunPolicy,
    /// Torch elastic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic_policy: Option<ElasticPolicy>,
    /// `Master` and `Worker`.
    #[serde(rename = "pytorchReplicaSpecs", default)]
    pub replica_specs: ReplicaSpecs,
    /// Processes per node: an integer, `auto`, `cpu` or `gpu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nproc_per_node: Option<String>,
}

/// `TFJobSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TFJobSpec {
    /// Job-level policies.
    #[serde(default)]
    pub run_policy: RunPolicy,
    /// `AllWorkers`, or empty for "the chief (or worker 0) succeeded".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_policy: Option<String>,
    /// `Chief`, `Master`, `PS`, `Worker`, `Evaluator`.
    #[serde(rename = "tfReplicaSpecs", default)]
    pub replica_specs: ReplicaSpecs,
    /// Workers may join and leave (the operator rewrites `TF_CONFIG`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_dynamic_worker: Option<bool>,
}

/// `MPIJobSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MPIJobSpec {
    /// Slots (processes) per worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots_per_worker: Option<i32>,
    /// Deprecated place of `runPolicy.cleanPodPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_pod_policy: Option<CleanPodPolicy>,
    /// `Launcher` and `Worker`.
    #[serde(rename = "mpiReplicaSpecs", default)]
    pub replica_specs: ReplicaSpecs,
    /// The container that runs MPI (default `mpi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_container: Option<String>,
    /// Job-level policies.
    #[serde(default)]
    pub run_policy: RunPolicy,
}

/// `XGBoostJobSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct XGBoostJobSpec {
    /// Job-level policies.
    #[serde(default)]
    pub run_policy: RunPolicy,
    /// `Master` and `Worker`.
    #[serde(rename = "xgbReplicaSpecs", default)]
    pub replica_specs: ReplicaSpecs,
}

/// `PaddleJobSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PaddleJobSpec {
    /// Job-level policies.
    #[serde(default)]
    pub run_policy: RunPolicy,
    /// Paddle elastic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic_policy: Option<PaddleElasticPolicy>,
    /// `Master` and `Worker`.
    #[serde(rename = "paddleReplicaSpecs", default)]
    pub replica_specs: ReplicaSpecs,
}

/// `JAXJobSpec`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JAXJobSpec {
    /// Job-level policies.
    #[serde(default)]
    pub run_policy: RunPolicy,
    /// `Worker`.
    #[serde(rename = "jaxReplicaSpecs", default)]
    pub replica_specs: ReplicaSpecs,
}

/// A v1 job object: metadata, a kind-specific spec and the status as read.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Job<S> {
    /// `kubeflow.org/v1`.
    pub api_version: String,
    /// The kind's name.
    pub kind: String,
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The spec.
    #[serde(default)]
    pub spec: S,
    /// The status, as the v1 operator wrote it (never carried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

/// One Training Operator v1 job, typed by kind.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum V1Job {
    /// A `PyTorchJob`.
    PyTorch(Job<PyTorchJobSpec>),
    /// A `TFJob`.
    TF(Job<TFJobSpec>),
    /// An `MPIJob`.
    Mpi(Job<MPIJobSpec>),
    /// An `XGBoostJob`.
    XGBoost(Job<XGBoostJobSpec>),
    /// A `PaddleJob`.
    Paddle(Job<PaddleJobSpec>),
    /// A `JAXJob`.
    Jax(Job<JAXJobSpec>),
}

/// A v1 job as read, with the paths of the input fields the types do not hold.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    /// The typed job.
    pub job: V1Job,
    /// Field paths present in the input (and not null) that the typed job lost, e.g.
    /// `spec.runPolicy.managedBy`; each becomes a "not carried" line of the report.
    pub unknown_fields: Vec<String>,
}

impl V1Job {
    /// Reads one document. Errors name the field path (`spec.pytorchReplicaSpecs.Worker.replicas: ...`); a
    /// document of another apiVersion or kind is an error too.
    pub fn from_value(value: &Value) -> Result<Parsed, MigrateError> {
        let identity = Identity::of(value);
        let fail = |path: &str, message: String| MigrateError::new(&identity, path, message);
        if !value.is_object() {
            return Err(fail(
                "",
                "a document must be a mapping with apiVersion and kind".into(),
            ));
        }
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind_name = value.get("kind").and_then(Value::as_str).unwrap_or("");
        let Some(kind) = V1Kind::from_name(kind_name) else {
            if kind_name == "MXJob" {
                return Err(fail(
                    "kind",
                    "MXJob is not migrated: Kubeflow Trainer V2 has no MXNet runtime (MXNet is retired upstream)"
                        .into(),
                ));
            }
            return Err(fail(
                "kind",
                format!(
                    "{kind_name:?} is not a Training Operator v1 job (expected one of PyTorchJob, TFJob, MPIJob, \
                     XGBoostJob, PaddleJob, JAXJob)"
                ),
            ));
        };
        if api_version != API_VERSION {
            return Err(fail(
                "apiVersion",
                format!("{api_version:?}: a {kind} to migrate has apiVersion {API_VERSION}"),
            ));
        }
        let job = match kind {
            V1Kind::PyTorchJob => V1Job::PyTorch(typed(value, &identity)?),
            V1Kind::TFJob => V1Job::TF(typed(value, &identity)?),
            V1Kind::MPIJob => V1Job::Mpi(typed(value, &identity)?),
            V1Kind::XGBoostJob => V1Job::XGBoost(typed(value, &identity)?),
            V1Kind::PaddleJob => V1Job::Paddle(typed(value, &identity)?),
            V1Kind::JAXJob => V1Job::Jax(typed(value, &identity)?),
        };
        let mut unknown_fields = Vec::new();
        lost_paths(value, &job.to_value(), "", &mut unknown_fields);
        Ok(Parsed {
            job,
            unknown_fields,
        })
    }

    /// The job's kind.
    pub fn kind(&self) -> V1Kind {
        match self {
            V1Job::PyTorch(_) => V1Kind::PyTorchJob,
            V1Job::TF(_) => V1Kind::TFJob,
            V1Job::Mpi(_) => V1Kind::MPIJob,
            V1Job::XGBoost(_) => V1Kind::XGBoostJob,
            V1Job::Paddle(_) => V1Kind::PaddleJob,
            V1Job::Jax(_) => V1Kind::JAXJob,
        }
    }

    /// The job's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            V1Job::PyTorch(j) => &j.metadata,
            V1Job::TF(j) => &j.metadata,
            V1Job::Mpi(j) => &j.metadata,
            V1Job::XGBoost(j) => &j.metadata,
            V1Job::Paddle(j) => &j.metadata,
            V1Job::Jax(j) => &j.metadata,
        }
    }

    /// The job's `runPolicy`.
    pub fn run_policy(&self) -> &RunPolicy {
        match self {
            V1Job::PyTorch(j) => &j.spec.run_policy,
            V1Job::TF(j) => &j.spec.run_policy,
            V1Job::Mpi(j) => &j.spec.run_policy,
            V1Job::XGBoost(j) => &j.spec.run_policy,
            V1Job::Paddle(j) => &j.spec.run_policy,
            V1Job::Jax(j) => &j.spec.run_policy,
        }
    }

    /// The job's replica specs by replica type.
    pub fn replica_specs(&self) -> &ReplicaSpecs {
        match self {
            V1Job::PyTorch(j) => &j.spec.replica_specs,
            V1Job::TF(j) => &j.spec.replica_specs,
            V1Job::Mpi(j) => &j.spec.replica_specs,
            V1Job::XGBoost(j) => &j.spec.replica_specs,
            V1Job::Paddle(j) => &j.spec.replica_specs,
            V1Job::Jax(j) => &j.spec.replica_specs,
        }
    }

    /// The status the v1 operator wrote, if the document has one.
    pub fn status(&self) -> Option<&Value> {
        match self {
            V1Job::PyTorch(j) => j.status.as_ref(),
            V1Job::TF(j) => j.status.as_ref(),
            V1Job::Mpi(j) => j.status.as_ref(),
            V1Job::XGBoost(j) => j.status.as_ref(),
            V1Job::Paddle(j) => j.status.as_ref(),
            V1Job::Jax(j) => j.status.as_ref(),
        }
    }

    /// The job written back as JSON.
    pub fn to_value(&self) -> Value {
        let value = match self {
            V1Job::PyTorch(j) => serde_json::to_value(j),
            V1Job::TF(j) => serde_json::to_value(j),
            V1Job::Mpi(j) => serde_json::to_value(j),
            V1Job::XGBoost(j) => serde_json::to_value(j),
            V1Job::Paddle(j) => serde_json::to_value(j),
            V1Job::Jax(j) => serde_json::to_value(j),
        };
        // Plain data with string keys: serialising cannot fail.
        value.unwrap_or(Value::Null)
    }
}

/// `kind/namespace/name` of a document, for messages, read before the document is typed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) kind: String,
    pub(crate) name: String,
}

impl Identity {
    pub(crate) fn of(value: &Value) -> Identity {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_owned();
        Identity {
            kind: text(value.get("kind")),
            name: text(value.get("metadata").and_then(|m| m.get("name"))),
        }
    }
}

fn typed<S: DeserializeOwned + Default>(
    value: &Value,
    identity: &Identity,
) -> Result<Job<S>, MigrateError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        MigrateError::new(identity, &path, e.into_inner().to_string())
    })
}

/// Appends the paths of `input` (objects' keys, arrays' items; null values skipped) that `output` lacks.
fn lost_paths(input: &Value, output: &Value, path: &str, lost: &mut Vec<String>) {
    match (input, output) {
        (Value::Object(fields), Value::Object(kept)) => {
            for (key, value) in fields {
                if value.is_null() {
                    continue;
                }
                let here = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match kept.get(key) {
                    Some(out) => lost_paths(value, out, &here, lost),
                    None => lost.push(here),
                }
            }
        }
        (Value::Array(items), Value::Array(kept)) => {
            for (index, (value, out)) in items.iter().zip(kept).enumerate() {
                lost_paths(value, out, &format!("{path}[{index}]"), lost);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_listed_with_their_paths() {
        let parsed = V1Job::from_value(&json!({
            "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "a"},
            "spec": {"runPolicy": {"managedBy": "x"}, "pytorchReplicaSpecs": {"Worker": {
                "replicas": 2, "extra": 1,
                "template": {"spec": {"containers": [{"name": "pytorch", "image": "i", "bogus": true}]}}}}},
        }))
        .unwrap();
        assert_eq!(
            parsed.unknown_fields,
            [
                "spec.pytorchReplicaSpecs.Worker.extra",
                "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].bogus",
                "spec.runPolicy.managedBy",
            ]
        );
    }

    #[test]
    fn type_errors_name_the_field() {
        let error = V1Job::from_value(&json!({
            "apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "a"},
            "spec": {"tfReplicaSpecs": {"Worker": {"replicas": "two"}}},
        }))
        .unwrap_err();
        assert_eq!(error.path, "spec.tfReplicaSpecs.Worker.replicas");
        assert_eq!(error.job, "TFJob/a");
    }

    #[test]
    fn other_documents_are_refused() {
        let error =
            V1Job::from_value(&json!({"apiVersion": "v1", "kind": "ConfigMap"})).unwrap_err();
        assert_eq!(error.path, "kind");
        let error = V1Job::from_value(&json!({"apiVersion": "kubeflow.org/v2", "kind": "MPIJob"}))
            .unwrap_err();
        assert_eq!(error.path, "apiVersion");
        let error = V1Job::from_value(&json!([1])).unwrap_err();
        assert_eq!(error.path, "");
    }
}
