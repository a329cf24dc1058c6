//! JobSet `jobset.x-k8s.io/v1alpha2`: the object a TrainJob is rendered into.
//!
//! The types cover the JobSet API as far as training runtimes and the trainer controller use it (JobSet v0.12,
//! the version upstream Kubeflow Trainer v2.3 builds against). Core Kubernetes types come from `k8s-openapi`.
//! Defaults are not filled in while parsing, so a parsed object serializes back to what was read; the schema
//! carries them for the API server, and [`ReplicatedJob::replicas_or_default`] and friends apply them in code.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Group of the JobSet API.
pub const JOBSET_GROUP: &str = "jobset.x-k8s.io";
/// `apiVersion` of JobSets.
pub const JOBSET_API_VERSION: &str = "jobset.x-k8s.io/v1alpha2";

/// Desired state of a JobSet: a group of Kubernetes Jobs that run and fail together.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "jobset.x-k8s.io",
    version = "v1alpha2",
    kind = "JobSet",
    namespaced,
    status = "JobSetStatus",
    derive = "PartialEq",
    derive = "Default"
)]
#[x_kube(validation = kube::core::Rule::new(
    "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && self.replicatedJobs.exists(x, has(x.dependsOn)))"
).message("StartupPolicy and DependsOn APIs are mutually exclusive"))]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpec {
    /// The jobs of the set, each stamped out `replicas` times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub replicated_jobs: Vec<ReplicatedJob>,

    /// Pod networking: the headless service and DNS names of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("Value is immutable"))]
    pub network: Option<Network>,

    /// When the JobSet counts as succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("Value is immutable"))]
    pub success_policy: Option<SuccessPolicy>,

    /// How the JobSet reacts to failed jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("Value is immutable"))]
    pub failure_policy: Option<FailurePolicy>,

    /// Order in which replicated jobs start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("Value is immutable"))]
    pub startup_policy: Option<StartupPolicy>,

    /// Suspends the JobSet and all its jobs (Kueue admits by flipping it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,

    /// A pod whose address every other pod can use to coordinate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<Coordinator>,

    /// The controller that reconciles this JobSet (MultiKueue sets its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,

    /// Seconds after completion before the JobSet is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,

    /// PersistentVolumeClaims created for the JobSet and shared by its pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "atomic"))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("Value is immutable"))]
    pub volume_claim_policies: Vec<VolumeClaimPolicy>,
}

/// One job template of a JobSet, stamped out `replicas` times.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJob {
    /// Name of the replicated job; pods are named `<jobset>-<name>-<jobIndex>-<podIndex>`.
    pub name: String,

    /// Group for exclusive placement and labels (default `default`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "default"))]
    pub group_name: Option<String>,

    /// Template of the Job.
    pub template: JobTemplateSpec,

    /// Number of Jobs created from the template (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub replicas: Option<i32>,

    /// Replicated jobs that must reach a status before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("Value is immutable"))]
    pub depends_on: Vec<DependsOn>,
}

impl ReplicatedJob {
    /// Number of Jobs, with JobSet's default of 1.
    pub fn replicas_or_default(&self) -> i32 {
        self.replicas.unwrap_or(1)
    }

    /// The job template's `trainer.kubeflow.org/trainjob-ancestor-step` label (`dataset-initializer`,
    /// `model-initializer`, `trainer`), which ties a replicated job to the TrainJob field that overrides it.
    ///
    /// ```
    /// use kubetrain_api::jobset::ReplicatedJob;
    ///
    /// let mut job = ReplicatedJob::default();
    /// assert_eq!(job.ancestor(), None);
    /// job.template.metadata.get_or_insert_default().labels.get_or_insert_default().insert(
    ///     kubetrain_api::constants::ANCESTOR_LABEL.into(), "trainer".into());
    /// assert_eq!(job.ancestor(), Some("trainer"));
    /// assert!(job.pod_spec().is_none());
    /// job.pod_spec_mut().containers.push(Default::default());
    /// assert_eq!(job.pod_spec().unwrap().containers.len(), 1);
    /// ```
    pub fn ancestor(&self) -> Option<&str> {
        self.template
            .metadata
            .as_ref()?
            .labels
            .as_ref()?
            .get(crate::constants::ANCESTOR_LABEL)
            .map(String::as_str)
    }

    /// The pod spec of the job template, if it has one.
    pub fn pod_spec(&self) -> Option<&PodSpec> {
        self.template.spec.as_ref()?.template.spec.as_ref()
    }

    /// The pod spec of the job template, created empty where the template lacks one.
    pub fn pod_spec_mut(&mut self) -> &mut PodSpec {
        self.template
            .spec
            .get_or_insert_with(Default::default)
            .template
            .spec
            .get_or_insert_with(Default::default)
    }
}

/// A dependency of a replicated job on another one.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DependsOn {
    /// Name of the replicated job depended on.
    pub name: String,
    /// Status the dependency must reach.
    pub status: DependsOnStatus,
}

/// Status a dependency must reach before the dependent job starts.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DependsOnStatus {
    /// Every pod of the dependency is ready.
    Ready,
    /// The dependency completed.
    Complete,
}

/// Networking of a JobSet's pods.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    /// Create a headless service so pods resolve each other by hostname.
    #[serde(
        default,
        rename = "enableDNSHostnames",
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_dns_hostnames: Option<bool>,
    /// Subdomain (headless service name); defaults to the JobSet name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    /// Publish DNS records of pods before they are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_not_ready_addresses: Option<bool>,
}

/// When a JobSet succeeds.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SuccessPolicy {
    /// Whether all or any of the target jobs must succeed.
    pub operator: SuccessOperator,
    /// Replicated jobs that count; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub target_replicated_jobs: Vec<String>,
}

/// Operator of a [`SuccessPolicy`].
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum SuccessOperator {
    /// Every target job must succeed.
    All,
    /// One target job succeeding is enough.
    Any,
}

/// How a JobSet reacts to failed jobs.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    /// Restarts allowed before the JobSet fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<i32>,
    /// How jobs are recreated on restart (default `Recreate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Recreate"))]
    pub restart_strategy: Option<RestartStrategy>,
    /// Rules matched in order against a failed job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<FailurePolicyRule>,
}

/// Restart strategy of a [`FailurePolicy`].
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartStrategy {
    /// Recreate the failed jobs.
    Recreate,
    /// Delete every job before recreating any.
    BlockingRecreate,
    /// Restart pods in place.
    InPlaceRestart,
}

/// One rule of a [`FailurePolicy`].
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicyRule {
    /// Name of the rule.
    pub name: String,
    /// What to do when the rule matches.
    pub action: FailurePolicyAction,
    /// Job failure reasons the rule matches; empty matches all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_job_failure_reasons: Vec<String>,
    /// Regular expressions matched against the job failure message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_job_failure_message_patterns: Vec<String>,
    /// Replicated jobs the rule applies to; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub target_replicated_jobs: Vec<String>,
}

/// Action of a [`FailurePolicyRule`].
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicyAction {
    /// Fail the JobSet at once.
    FailJobSet,
    /// Restart the JobSet, counting towards maxRestarts.
    RestartJobSet,
    /// Restart the JobSet without counting towards maxRestarts.
    RestartJobSetAndIgnoreMaxRestarts,
    /// Restart only the failed job.
    RestartJob,
    /// Restart only the failed job without counting towards maxRestarts.
    RestartJobAndIgnoreMaxRestarts,
}

/// Start order of replicated jobs.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StartupPolicy {
    /// `AnyOrder` or `InOrder`.
    pub startup_policy_order: StartupPolicyOrder,
}

/// Order of a [`StartupPolicy`].
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartupPolicyOrder {
    /// Start all replicated jobs at once.
    AnyOrder,
    /// Start them in list order, each after the previous is ready.
    InOrder,
}

/// A pod that coordinates the others; its address is published as a label.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Coordinator {
    /// Replicated job of the coordinator pod.
    pub replicated_job: String,
    /// Job index of the coordinator pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_index: Option<i32>,
    /// Pod index of the coordinator pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_index: Option<i32>,
}

/// PersistentVolumeClaims created with the JobSet.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(validation = kube::core::Rule::new(
    "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)"
).message("namespace cannot be set for VolumeClaimPolicies templates"))]
#[serde(rename_all = "camelCase")]
pub struct VolumeClaimPolicy {
    /// Claims to create; each is mounted where a pod volume of the same name is declared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), extend("x-kubernetes-list-type" = "atomic"))]
    pub templates: Vec<VolumeClaimTemplate>,
    /// What happens to the claims when the JobSet is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_policy: Option<VolumeRetentionPolicy>,
}

/// A PersistentVolumeClaim template. `apiVersion` and `kind` are kept only when written, so a runtime reads back
/// exactly as it was written (`k8s-openapi`'s claim type would always add them).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeClaimTemplate {
    /// `v1`, when written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `PersistentVolumeClaim`, when written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name (the pod volume it backs) and labels. The CRD declares upstream's embedded-metadata fields
    /// (`annotations`, `finalizers`, `labels`, `name`, `namespace`), as for every embedded `ObjectMeta`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PersistentVolumeClaimSpec>,
    /// Status, never set in templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PersistentVolumeClaimStatus>,
}

/// Retention of volume claims.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeRetentionPolicy {
    /// `Delete` (default) or `Retain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Delete", "enum" = ["Delete", "Retain"]))]
    pub when_deleted: Option<String>,
}

/// Observed state of a JobSet.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobSetStatus {
    /// Conditions: `Completed`, `Failed`, `Suspended`, `StartupPolicyCompleted`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Number of restarts so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<i32>,
    /// Restarts that count towards `maxRestarts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts_count_towards_max: Option<i32>,
    /// `Completed` or `Failed` once the JobSet has finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_state: Option<String>,
    /// Job counts per replicated job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicated_jobs_status: Vec<ReplicatedJobStatus>,
}

/// Job counts of one replicated job.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJobStatus {
    /// Name of the replicated job.
    pub name: String,
    /// Jobs whose pods are all ready.
    #[serde(default)]
    pub ready: i32,
    /// Jobs that succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// Jobs that failed.
    #[serde(default)]
    pub failed: i32,
    /// Jobs with at least one active pod.
    #[serde(default)]
    pub active: i32,
    /// Suspended jobs.
    #[serde(default)]
    pub suspended: i32,
}
