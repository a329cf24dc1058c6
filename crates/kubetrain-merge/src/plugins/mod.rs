//! The plugin framework: one trait per extension point, plugins run in one fixed order.
//!
//! Upstream registers plugins in a Go map, so their order inside a phase is random. Here each phase is a single
//! exhaustive `match` on the runtime's policy: exactly one ML-policy plugin and at most one pod-group plugin run.
//!
//! | phase | policy | plugin |
//! |---|---|---|
//! | EnforceMlPolicy | none | [`plainml::PlainMl`] |
//! | | torch | [`torch::Torch`] (torchtune rules in [`torchtune`]) |
//! | | mpi | [`mpi::Mpi`] |
//! | | jax | [`jax::Jax`] |
//! | | xgboost | [`xgboost::Xgboost`] |
//! | | flux | [`flux::Flux`] (PlainML's effects, then the Flux view) |
//! | EnforcePodGroupPolicy | coscheduling | [`coscheduling::Coscheduling`] |
//! | | volcano | [`volcano::Volcano`] |
//! | EnforcePodSpec | [`Options::trainjob_status`] set | [`trainjobstatus::TrainJobStatus`] |
//!
//! Upstream registers TrainJobStatus only behind its feature gate (alpha, off by default) and refuses more than
//! one TrainJobStatus plugin; here it is one optional configuration, off unless the caller passes it.
//!
//! The component builders (JobSet, MPI Secret and hostfile, PodGroups) live in `kubetrain-jobset`.

pub mod coscheduling;
pub mod flux;
pub mod jax;
pub mod mpi;
pub mod plainml;
pub mod torch;
pub mod torchtune;
pub mod trainjobstatus;
pub mod volcano;
pub mod xgboost;

use kubetrain_api::{MLPolicySource, PodGroupPolicySource, TrainJob};

use crate::error::MergeError;
use crate::info::Info;

/// Field path of the Job completion index, the rank of a pod (PET_NODE_RANK, JAX_PROCESS_ID, DMLC_TASK_ID).
pub const COMPLETION_INDEX_FIELD_PATH: &str =
    "metadata.annotations['batch.kubernetes.io/job-completion-index']";

/// Every plugin has a name (used in errors and docs).
pub trait Plugin {
    /// The plugin name, as upstream registers it.
    fn name(&self) -> &'static str;
}

/// Enforces an ML policy: counts, framework env, ports, volumes.
pub trait EnforceMlPolicy: Plugin {
    /// Writes the policy's effects into `info`. `job` is read only.
    fn enforce_ml_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError>;
}

/// Enforces a pod-group policy: scheduler labels and annotations on every pod.
pub trait EnforcePodGroupPolicy: Plugin {
    /// Writes the policy's effects into `info`; runs after the ML policy, so counts are final.
    fn enforce_pod_group_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError>;
}

/// Rewrites pod templates for every TrainJob, whatever its policies (upstream `EnforcePodSpecPlugin`).
pub trait EnforcePodSpec: Plugin {
    /// Writes the plugin's effects into `info`; runs after the ML and pod-group policies.
    fn enforce_pod_spec(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError>;
}

/// Optional plugins and their configuration (upstream: feature gates and the operator's configuration).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The TrainJobStatus plugin: `Some` enables it (upstream gate `TrainJobStatus`, off by default).
    pub trainjob_status: Option<trainjobstatus::TrainJobStatus>,
}

/// The ML-policy plugin for a policy source (exhaustive: a new policy does not compile until it has one).
pub fn ml_policy_plugin(
    source: Option<&MLPolicySource>,
) -> Result<&'static dyn EnforceMlPolicy, MergeError> {
    Ok(match source {
        None => &plainml::PlainMl,
        Some(MLPolicySource::Torch(_)) => &torch::Torch,
        Some(MLPolicySource::Mpi(_)) => &mpi::Mpi,
        Some(MLPolicySource::Jax(_)) => &jax::Jax,
        Some(MLPolicySource::Xgboost(_)) => &xgboost::Xgboost,
        Some(MLPolicySource::Flux(_)) => &flux::Flux,
    })
}

/// The pod-group plugin for a policy source.
pub fn pod_group_plugin(
    source: Option<&PodGroupPolicySource>,
) -> Option<&'static dyn EnforcePodGroupPolicy> {
    match source {
        None => None,
        Some(PodGroupPolicySource::Coscheduling(_)) => Some(&coscheduling::Coscheduling),
        Some(PodGroupPolicySource::Volcano(_)) => Some(&volcano::Volcano),
    }
}

/// Runs the enforce phases in their fixed order: the ML policy, then the pod-group policy.
pub fn enforce(info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
    enforce_with(info, job, &Options::default())
}

/// Runs the enforce phases in their fixed order: the ML policy, the pod-group policy, then the pod-spec plugins
/// that `options` enables.
pub fn enforce_with(info: &mut Info, job: &TrainJob, options: &Options) -> Result<(), MergeError> {
    ml_policy_plugin(info.ml_source())?.enforce_ml_policy(info, job)?;
    let pod_group = info
        .pod_group_policy
        .as_ref()
        .and_then(|p| p.source.as_ref());
    if let Some(plugin) = pod_group_plugin(pod_group) {
        plugin.enforce_pod_group_policy(info, job)?;
    }
    if let Some(status) = &options.trainjob_status {
        status.enforce_pod_spec(info, job)?;
    }
    Ok(())
}

/// `trainer.numNodes` → Count of the trainer pod set (PlainML, Torch, JAX, XGBoost).
pub(crate) fn apply_num_nodes(info: &mut Info, job: &TrainJob) -> Option<usize> {
    let index = info.pod_set_by_ancestor(kubetrain_api::constants::ANCESTOR_TRAINER)?;
    if let Some(n) = job.spec.trainer.as_ref().and_then(|t| t.num_nodes) {
        info.pod_sets[index].count = n;
    }
    Some(index)
}

/// `<job>-node-0-0.<job>`: where rank 0 listens. Upstream hard-codes the job name `node` and the subdomain.
pub(crate) fn master_host(job: &TrainJob) -> String {
    let name = job.name();
    format!("{name}-{}-0-0.{name}", kubetrain_api::constants::NODE)
}
