//! `spec.runtimePatches`: patches to the runtime that a manager (a user, the SDK, Kueue) owns.
//!
//! The tree mirrors upstream v2.3: only the fields listed here may be patched. Lists are `Option<Vec<_>>` so that
//! an explicit empty list (which replaces) stays distinct from an absent one (which keeps the runtime's).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, PodSchedulingGate, PodSecurityContext, SecurityContext,
    Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One manager's patch to the runtime.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimePatch {
    /// Who owns this patch, as a domain-prefixed path (e.g. `kueue.x-k8s.io/manager`).
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub manager: String,
    /// When the patch last changed; stamped by the mutating webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// The patch itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training_runtime_spec: Option<TrainingRuntimeSpecPatch>,
}

/// Patch of a runtime spec.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrainingRuntimeSpecPatch {
    /// Patch of the JobSet template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<JobSetTemplatePatch>,
}

/// Patch of the JobSet template.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobSetTemplatePatch {
    /// Labels and annotations added to the JobSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// Patch of the JobSet spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSetSpecPatch>,
}

/// Patch of the JobSet spec.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpecPatch {
    /// Patches of replicated jobs, matched by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub replicated_jobs: Option<Vec<ReplicatedJobPatch>>,
}

/// Patch of one replicated job.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJobPatch {
    /// Name of the replicated job in the runtime.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Patch of its Job template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<JobTemplatePatch>,
}

/// Patch of a Job template.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobTemplatePatch {
    /// Labels and annotations added to the Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// Patch of the Job spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<JobSpecPatch>,
}

/// Patch of a Job spec.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobSpecPatch {
    /// Patch of the pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PodTemplatePatch>,
}

/// Patch of a pod template.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplatePatch {
    /// Labels and annotations added to the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// Patch of the pod spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpecPatch>,
}

/// The pod spec fields a runtime patch may set.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecPatch {
    /// Service account of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub service_account_name: Option<String>,
    /// Volumes, merged by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub volumes: Option<Vec<Volume>>,
    /// Init containers, merged by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub init_containers: Option<Vec<ContainerPatch>>,
    /// Containers, merged by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub containers: Option<Vec<ContainerPatch>>,
    /// Image pull secrets, merged by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// Pod security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub security_context: Option<PodSecurityContext>,
    /// Node selector, merged key by key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Tolerations; replace the runtime's list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128), extend("x-kubernetes-list-type" = "atomic"))]
    pub tolerations: Option<Vec<Toleration>>,
    /// Scheduling gates, merged by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub scheduling_gates: Option<Vec<PodSchedulingGate>>,
    /// Grace period for pod termination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    #[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("field is immutable"))]
    pub termination_grace_period_seconds: Option<i64>,
}

/// The container fields a runtime patch may set.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerPatch {
    /// Name of the container in the runtime.
    pub name: String,
    /// Env, merged by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub env: Option<Vec<EnvVar>>,
    /// Volume mounts, merged by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub volume_mounts: Option<Vec<VolumeMount>>,
    /// Container security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
}
