//! `TrainingRuntime` and `ClusterTrainingRuntime`: the templates a TrainJob is overlaid onto.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::constants::{CLUSTER_TRAINING_RUNTIME_KIND, TRAINING_RUNTIME_KIND};
use crate::jobset::JobSetSpec;
use crate::resource::trainer_kind;

trainer_kind! {
    /// A namespaced training runtime: a JobSet template plus the ML and pod-group policies that TrainJobs in the
    /// same namespace can reference.
    kind TrainingRuntime {
        kind: TRAINING_RUNTIME_KIND,
        plural: "trainingruntimes",
        scope: k8s_openapi::NamespaceResourceScope,
        spec: TrainingRuntimeSpec,
    }
}

trainer_kind! {
    /// A cluster-scoped training runtime, usable by TrainJobs in every namespace (the default `runtimeRef.kind`).
    kind ClusterTrainingRuntime {
        kind: CLUSTER_TRAINING_RUNTIME_KIND,
        plural: "clustertrainingruntimes",
        scope: k8s_openapi::ClusterResourceScope,
        spec: TrainingRuntimeSpec,
    }
}

/// Desired state of a training runtime.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
pub struct TrainingRuntimeSpec {
    /// Which ML framework wires the ranks together, and how many nodes by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ml_policy: Option<MLPolicy>,
    /// Gang scheduling of the TrainJob's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_policy: Option<PodGroupPolicy>,
    /// Lifecycle defaults of the TrainJobs that use this runtime (a TrainJob's own fields override them).
    /// KEP-2899, ahead of upstream v2.3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_policy: Option<RunPolicy>,
    /// The JobSet template that TrainJobs are rendered from.
    pub template: JobSetTemplateSpec,
}

/// Lifecycle defaults of a runtime's TrainJobs (KEP-2899 `RunPolicy`): a TrainJob's
/// `spec.activeDeadlineSeconds` and `spec.ttlSecondsAfterFinished` override them.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    /// Default seconds a TrainJob may run (from `status.startTime`) before it fails with `DeadlineExceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,
    /// Default seconds after a TrainJob finished when the controller deletes it (and its children with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// The message of the rule that refuses `ttlSecondsAfterFinished` in a runtime's JobSet template.
pub const JOBSET_TTL_IN_TEMPLATE: &str = "ttlSecondsAfterFinished must not be set in the JobSet template: \
the TrainJob controller owns cleanup, use spec.runPolicy.ttlSecondsAfterFinished";
/// The message of the rule that refuses `activeDeadlineSeconds` or `ttlSecondsAfterFinished` in a runtime's Job
/// templates.
pub const JOB_LIFECYCLE_IN_TEMPLATE: &str = "activeDeadlineSeconds and ttlSecondsAfterFinished must not be set \
in the Job templates: the TrainJob controller owns them, use spec.runPolicy";

/// A JobSet template: metadata propagated to the JobSet and a full JobSet spec.
///
/// Two CEL rules (KEP-2899) keep cleanup and deadlines with the TrainJob controller: no
/// `spec.ttlSecondsAfterFinished`, and no `activeDeadlineSeconds` or `ttlSecondsAfterFinished` in a Job template.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1))]
#[x_kube(
    validation = kube::core::Rule::new("!has(self.spec) || !has(self.spec.ttlSecondsAfterFinished)")
        .message(JOBSET_TTL_IN_TEMPLATE),
    validation = kube::core::Rule::new(
        "!has(self.spec) || !has(self.spec.replicatedJobs) || self.spec.replicatedJobs.all(rj, \
!has(rj.template.spec) || (!has(rj.template.spec.activeDeadlineSeconds) && \
!has(rj.template.spec.ttlSecondsAfterFinished)))"
    ).message(JOB_LIFECYCLE_IN_TEMPLATE)
)]
pub struct JobSetTemplateSpec {
    /// Labels and annotations copied to the rendered JobSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    /// The JobSet spec.
    #[serde(default)]
    pub spec: JobSetSpec,
}

/// The ML policy of a runtime: a default node count and at most one framework.
///
/// Upstream expresses "at most one framework" as a CEL rule over five optional fields; here it is an enum, so a
/// runtime with two frameworks cannot exist after parsing. On the wire the shape is upstream's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "MLPolicyRepr", into = "MLPolicyRepr")]
pub struct MLPolicy {
    /// Default number of training nodes (upstream's default is 1, applied in code).
    pub num_nodes: Option<i32>,
    /// The framework; `None` is upstream's "PlainML".
    pub source: Option<MLPolicySource>,
}

impl MLPolicy {
    /// Number of nodes with upstream's default of 1.
    pub fn num_nodes_or_default(&self) -> i32 {
        self.num_nodes.unwrap_or(1)
    }
}

/// The framework of an [`MLPolicy`].
#[derive(Clone, Debug, PartialEq)]
pub enum MLPolicySource {
    /// PyTorch (torchrun): `PET_*` env.
    Torch(TorchMLPolicySource),
    /// MPI (OpenMPI): SSH keys, hostfile, `OMPI_MCA_*` env.
    Mpi(MPIMLPolicySource),
    /// JAX: `JAX_*` env.
    Jax(JAXMLPolicySource),
    /// XGBoost (Rabit/DMLC tracker): `DMLC_*` env.
    Xgboost(XGBoostMLPolicySource),
    /// Flux framework for HPC workloads.
    Flux(FluxMLPolicySource),
}

impl MLPolicySource {
    /// The wire name of the policy (`torch`, `mpi`, `jax`, `xgboost`, `flux`).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Torch(_) => "torch",
            Self::Mpi(_) => "mpi",
            Self::Jax(_) => "jax",
            Self::Xgboost(_) => "xgboost",
            Self::Flux(_) => "flux",
        }
    }
}

/// Upstream's wire shape of [`MLPolicy`]; the CEL rule that forbids two frameworks lives here, in the schema.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new(
        "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)].filter(x, x).size() <= 1"
    ).message("Only one of the policy can be configured"),
    validation = kube::core::Rule::new(
        "!has(self.numNodes) || !has(self.torch) || !has(self.torch.elasticPolicy) || \
(self.numNodes >= self.torch.elasticPolicy.minNodes && self.numNodes <= self.torch.elasticPolicy.maxNodes)"
    ).message(ELASTIC_NUM_NODES_IN_BOUNDS)
)]
#[schemars(rename = "MLPolicy")]
struct MLPolicyRepr {
    /// Default number of training nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    num_nodes: Option<i32>,
    /// PyTorch policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    torch: Option<TorchMLPolicySource>,
    /// MPI policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mpi: Option<MPIMLPolicySource>,
    /// JAX policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    jax: Option<JAXMLPolicySource>,
    /// XGBoost policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    xgboost: Option<XGBoostMLPolicySource>,
    /// Flux policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flux: Option<FluxMLPolicySource>,
}

/// The message upstream's CEL rule gives when more than one framework is set.
pub const ONLY_ONE_POLICY: &str = "Only one of the policy can be configured";

impl TryFrom<MLPolicyRepr> for MLPolicy {
    type Error = String;

    fn try_from(repr: MLPolicyRepr) -> Result<Self, Self::Error> {
        let mut sources = Vec::with_capacity(1);
        sources.extend(repr.torch.map(MLPolicySource::Torch));
        sources.extend(repr.mpi.map(MLPolicySource::Mpi));
        sources.extend(repr.jax.map(MLPolicySource::Jax));
        sources.extend(repr.xgboost.map(MLPolicySource::Xgboost));
        sources.extend(repr.flux.map(MLPolicySource::Flux));
        if sources.len() > 1 {
            let names: Vec<_> = sources.iter().map(MLPolicySource::name).collect();
            return Err(format!(
                "{ONLY_ONE_POLICY} (found {}); keep exactly one",
                names.join(", ")
            ));
        }
        Ok(Self {
            num_nodes: repr.num_nodes,
            source: sources.pop(),
        })
    }
}

impl From<MLPolicy> for MLPolicyRepr {
    fn from(policy: MLPolicy) -> Self {
        let mut repr = MLPolicyRepr {
            num_nodes: policy.num_nodes,
            ..Default::default()
        };
        match policy.source {
            None => {}
            Some(MLPolicySource::Torch(s)) => repr.torch = Some(s),
            Some(MLPolicySource::Mpi(s)) => repr.mpi = Some(s),
            Some(MLPolicySource::Jax(s)) => repr.jax = Some(s),
            Some(MLPolicySource::Xgboost(s)) => repr.xgboost = Some(s),
            Some(MLPolicySource::Flux(s)) => repr.flux = Some(s),
        }
        repr
    }
}

impl JsonSchema for MLPolicy {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MLPolicy".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        MLPolicyRepr::json_schema(generator)
    }
}

/// PyTorch policy: torchrun rendezvous through `PET_*` env.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TorchMLPolicySource {
    /// Extra containers (besides `node`) that receive the `PET_*` env.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_injection: Option<TorchEnvInjection>,
    /// Elastic training (KEP-2903, ahead of upstream v2.3): torchrun runs with `--nnodes=min:max` and a c10d
    /// rendezvous, and the job may run with any node count between the bounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic_policy: Option<TorchElasticPolicy>,
}

/// The message of the rule that keeps `minNodes <= maxNodes`.
pub const ELASTIC_MIN_LE_MAX: &str = "minNodes must be less than or equal to maxNodes";
/// The message of the rule that keeps `mlPolicy.numNodes` within an elastic policy's bounds.
pub const ELASTIC_NUM_NODES_IN_BOUNDS: &str =
    "numNodes must be between torch.elasticPolicy.minNodes and torch.elasticPolicy.maxNodes";

/// Elastic PyTorch (KEP-2903 `ElasticPolicy`, ahead of upstream v2.3): the node-count bounds of an elastic
/// TrainJob and the metrics that drive its size.
///
/// With this policy the torch plugin renders `PET_NNODES=<minNodes>:<maxNodes>` and a c10d rendezvous
/// (`PET_RDZV_BACKEND`, `PET_RDZV_ENDPOINT`, `PET_RDZV_ID`) instead of a fixed `PET_NODE_RANK`; the node job
/// starts at the TrainJob's `trainer.numNodes`, else the runtime's `mlPolicy.numNodes`, else `maxNodes`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.minNodes <= self.maxNodes").message(ELASTIC_MIN_LE_MAX))]
pub struct TorchElasticPolicy {
    /// The fewest nodes the job runs with (at least 1); below it the job fails.
    #[x_kube(validation = kube::core::Rule::new("self >= 1").message("minNodes must be greater than or equal to 1"))]
    pub min_nodes: i32,
    /// The most nodes the job scales to (at least `minNodes`).
    pub max_nodes: i32,
    /// What drives the node count between the bounds (autoscaling/v2 `MetricSpec`s, as an HPA reads them).
    /// Without metrics the size changes only with admission (Kueue) and node loss.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "atomic"))]
    pub metrics: Vec<k8s_openapi::api::autoscaling::v2::MetricSpec>,
}

impl TorchElasticPolicy {
    /// The node count a job of `requested` nodes (its `trainer.numNodes` or the runtime's `mlPolicy.numNodes`)
    /// starts with: the request when it is given, else `maxNodes` (admission may start it smaller).
    pub fn initial_nodes(&self, requested: Option<i32>) -> i32 {
        requested.unwrap_or(self.max_nodes)
    }

    /// Whether `nodes` lies within `[minNodes, maxNodes]`.
    pub fn admits(&self, nodes: i32) -> bool {
        (self.min_nodes..=self.max_nodes).contains(&nodes)
    }
}

/// Containers that receive the torch distributed env besides the trainer container.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TorchEnvInjection {
    /// Target jobs and containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["jobName"]))]
    pub targets: Vec<TorchEnvInjectionTarget>,
}

/// One env-injection target: containers of one replicated job.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TorchEnvInjectionTarget {
    /// Name of the replicated job.
    #[schemars(length(min = 1, max = 253))]
    pub job_name: String,
    /// Containers (or init containers) of that job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1, max = 8), extend("x-kubernetes-list-type" = "set"))]
    #[x_kube(validation = kube::core::Rule::new("!self.exists(c, c == 'node')").message(
        "containerNames must not include the main node container because PET_* envs are always injected into it"
    ))]
    pub container_names: Vec<String>,
}

/// MPI policy (OpenMPI).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MPIMLPolicySource {
    /// Slots per node (default 1; with 1 and more than one GPU per node, the GPU count is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    #[x_kube(validation = kube::core::Rule::new("self >= 1").message("NumProcPerNode in mpiPolicy must be >= 1"))]
    pub num_proc_per_node: Option<i32>,
    /// MPI implementation (default and only accepted value: `OpenMPI`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "OpenMPI"))]
    pub mpi_implementation: Option<MPIImplementation>,
    /// Where the SSH keys are mounted (default `/root/.ssh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096), extend("default" = "/root/.ssh"))]
    pub ssh_auth_mount_path: Option<String>,
    /// Whether the launcher also runs ranks (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub run_launcher_as_node: Option<bool>,
}

impl MPIMLPolicySource {
    /// Slots per node with upstream's default of 1.
    pub fn num_proc_per_node_or_default(&self) -> i32 {
        self.num_proc_per_node.unwrap_or(1)
    }
    /// The MPI implementation with upstream's default (`OpenMPI`).
    pub fn mpi_implementation_or_default(&self) -> MPIImplementation {
        self.mpi_implementation
            .unwrap_or(MPIImplementation::OpenMPI)
    }
    /// SSH mount path with upstream's default `/root/.ssh`.
    pub fn ssh_auth_mount_path_or_default(&self) -> &str {
        self.ssh_auth_mount_path.as_deref().unwrap_or("/root/.ssh")
    }
    /// Whether the launcher runs ranks, default false.
    pub fn run_launcher_as_node_or_default(&self) -> bool {
        self.run_launcher_as_node.unwrap_or(false)
    }
}

/// MPI implementations the CRD accepts.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MPIImplementation {
    /// Open MPI.
    OpenMPI,
    /// Empty string, which upstream's CRD also accepts (and which the plugin rejects at render time).
    #[serde(rename = "")]
    Unset,
}

/// JAX policy; it has no settings.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct JAXMLPolicySource {}

/// XGBoost policy; it has no settings.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct XGBoostMLPolicySource {}

/// Flux policy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FluxMLPolicySource {
    /// Tasks per node (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    #[x_kube(validation = kube::core::Rule::new("self >= 1").message("NumProcPerNode in fluxPolicy must be >= 1"))]
    pub num_proc_per_node: Option<i32>,
}

/// Gang scheduling of a TrainJob's pods: coscheduling (scheduler-plugins) or Volcano.
///
/// Upstream documents "only one of" without enforcing it; a runtime that sets both is rejected here (see
/// docs/differences.md), since two gang schedulers cannot both own a pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "PodGroupPolicyRepr", into = "PodGroupPolicyRepr")]
pub struct PodGroupPolicy {
    /// The scheduler; `None` when the policy is empty.
    pub source: Option<PodGroupPolicySource>,
}

/// The scheduler of a [`PodGroupPolicy`].
#[derive(Clone, Debug, PartialEq)]
pub enum PodGroupPolicySource {
    /// scheduler-plugins coscheduling (`scheduling.x-k8s.io/v1alpha1` PodGroup).
    Coscheduling(CoschedulingPodGroupPolicySource),
    /// Volcano (`scheduling.volcano.sh/v1beta1` PodGroup).
    Volcano(VolcanoPodGroupPolicySource),
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "PodGroupPolicy")]
struct PodGroupPolicyRepr {
    /// Coscheduling plugin of scheduler-plugins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    coscheduling: Option<CoschedulingPodGroupPolicySource>,
    /// Volcano gang scheduling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    volcano: Option<VolcanoPodGroupPolicySource>,
}

impl TryFrom<PodGroupPolicyRepr> for PodGroupPolicy {
    type Error = String;

    fn try_from(repr: PodGroupPolicyRepr) -> Result<Self, Self::Error> {
        match (repr.coscheduling, repr.volcano) {
            (Some(_), Some(_)) => {
                Err("Only one of coscheduling and volcano can be configured; keep one".into())
            }
            (Some(c), None) => Ok(Self {
                source: Some(PodGroupPolicySource::Coscheduling(c)),
            }),
            (None, Some(v)) => Ok(Self {
                source: Some(PodGroupPolicySource::Volcano(v)),
            }),
            (None, None) => Ok(Self { source: None }),
        }
    }
}

impl From<PodGroupPolicy> for PodGroupPolicyRepr {
    fn from(policy: PodGroupPolicy) -> Self {
        match policy.source {
            None => Self::default(),
            Some(PodGroupPolicySource::Coscheduling(c)) => Self {
                coscheduling: Some(c),
                volcano: None,
            },
            Some(PodGroupPolicySource::Volcano(v)) => Self {
                coscheduling: None,
                volcano: Some(v),
            },
        }
    }
}

impl JsonSchema for PodGroupPolicy {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "PodGroupPolicy".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        PodGroupPolicyRepr::json_schema(generator)
    }
}

/// Coscheduling settings.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingPodGroupPolicySource {
    /// Seconds the scheduler waits for the whole gang (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 60))]
    pub schedule_timeout_seconds: Option<i32>,
}

impl CoschedulingPodGroupPolicySource {
    /// Timeout with upstream's default of 60 seconds.
    pub fn schedule_timeout_seconds_or_default(&self) -> i32 {
        self.schedule_timeout_seconds.unwrap_or(60)
    }
}

/// Volcano settings.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoPodGroupPolicySource {
    /// Network-topology-aware placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_topology: Option<NetworkTopology>,
}

/// Volcano network topology constraint.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkTopology {
    /// `hard` (default) or `soft`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "hard"))]
    pub mode: Option<NetworkTopologyMode>,
    /// Highest network tier the gang may span (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1))]
    pub highest_tier_allowed: Option<i32>,
}

/// Mode of a [`NetworkTopology`].
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NetworkTopologyMode {
    /// The constraint must hold.
    Hard,
    /// Best effort.
    Soft,
}
