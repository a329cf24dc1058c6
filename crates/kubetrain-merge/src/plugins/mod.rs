//! The plugin framework: upstream's extension points (`pkg/runtime/framework/interface.go`) as traits, a
//! [`Plugin`] that says which of them it implements, and an ordered [`Registry`] that runs them.
//!
//! Writing a plugin, the extension points in order and what each may change:
//! [docs/plugins.md](https://github.com/kubetrain/kubetrain/blob/main/docs/plugins.md). In short,
//! [`Registry::enforce`] runs, for a TrainJob:
//!
//! | order | extension point | may change |
//! |---|---|---|
//! | 1 | [`EnforceMlPolicy`], every plugin in registration order | counts, env, ports, volumes, the trainer command |
//! | 2 | [`EnforcePodGroupPolicy`] | scheduler labels and annotations ([`Info::scheduler`]) |
//! | 3 | [`EnforcePodSpec`] | pod templates, whatever the policies |
//!
//! then [`Registry::pre_build`] runs [`PreComponentBuilder`] (the JobSet's parallelism sync), and
//! `kubetrain-jobset` runs the component builders. [`Registry::validate`] runs [`CustomValidation`].
//!
//! Upstream keeps its plugins in a Go map, so their order inside a phase is random; here the registration order
//! is the run order, so a render is deterministic. Each built-in decides itself whether the runtime's policy is
//! its own (as upstream's do) and does nothing otherwise:
//!
//! | plugin | runs when | phases |
//! |---|---|---|
//! | [`plainml::PlainMl`] | no ML policy, or flux (upstream's gate only excludes the other policies) | ML |
//! | [`torch::Torch`] (torchtune rules in [`torchtune`]) | `mlPolicy.torch` | ML |
//! | [`mpi::Mpi`] | `mlPolicy.mpi` (hostfile and launcher env for Open MPI only: another implementation, named by [`mpi::IMPLEMENTATION_ANNOTATION`], is a plugin's) | ML |
//! | [`jax::Jax`] | `mlPolicy.jax` | ML |
//! | [`xgboost::Xgboost`] | `mlPolicy.xgboost` | ML |
//! | [`flux::Flux`] | `mlPolicy.flux` (after PlainML) | ML |
//! | [`coscheduling::Coscheduling`] | `podGroupPolicy.coscheduling` | pod group |
//! | [`volcano::Volcano`] | `podGroupPolicy.volcano` | pod group |
//! | [`trainjobstatus::TrainJobStatus`] | registered ([`Options::trainjob_status`]) | pod spec |
//!
//! Upstream registers TrainJobStatus only behind its feature gate (alpha, off by default) and refuses more than
//! one TrainJobStatus plugin; here it is one optional configuration, off unless the caller passes it.
//!
//! The component builders (JobSet, MPI Secret and hostfile, PodGroups) and the registry that also runs them
//! live in `kubetrain-jobset`, whose objects they produce.

pub mod coscheduling;
pub mod flux;
pub mod jax;
pub mod mpi;
pub mod plainml;
mod registry;
pub mod torch;
pub mod torchtune;
pub mod trainjobstatus;
pub mod volcano;
pub mod xgboost;

use std::sync::Arc;

use kubetrain_api::{FieldError, TrainJob, TrainingRuntimeSpec};

use crate::error::MergeError;
use crate::info::Info;

pub use registry::{DuplicatePlugin, Registry};

/// Field path of the Job completion index, the rank of a pod (PET_NODE_RANK, JAX_PROCESS_ID, DMLC_TASK_ID).
pub const COMPLETION_INDEX_FIELD_PATH: &str =
    "metadata.annotations['batch.kubernetes.io/job-completion-index']";

/// A plugin: a name and the extension points it implements (upstream's interface assertions). Every accessor
/// answers `None` unless the plugin overrides it, typically with `Some(self)`.
pub trait Plugin: Send + Sync {
    /// The plugin's name: unique in a [`Registry`], and the prefix of its errors (`plugin <name>: ...`).
    fn name(&self) -> &str;

    /// The plugin as an [`EnforceMlPolicy`].
    fn ml_policy(&self) -> Option<&dyn EnforceMlPolicy> {
        None
    }

    /// The plugin as an [`EnforcePodGroupPolicy`].
    fn pod_group_policy(&self) -> Option<&dyn EnforcePodGroupPolicy> {
        None
    }

    /// The plugin as an [`EnforcePodSpec`].
    fn pod_spec(&self) -> Option<&dyn EnforcePodSpec> {
        None
    }

    /// The plugin as a [`PreComponentBuilder`].
    fn pre_component_builder(&self) -> Option<&dyn PreComponentBuilder> {
        None
    }

    /// The plugin as a [`CustomValidation`].
    fn custom_validation(&self) -> Option<&dyn CustomValidation> {
        None
    }
}

/// Enforces an ML policy: counts, framework env, ports, volumes (upstream `EnforceMLPolicyPlugin`).
pub trait EnforceMlPolicy {
    /// Writes the policy's effects into `info`, or nothing when the runtime's policy is not the plugin's.
    /// `job` is read only.
    fn enforce_ml_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError>;
}

/// Enforces a pod-group policy: scheduler labels and annotations on every pod (upstream
/// `EnforcePodGroupPolicyPlugin`).
pub trait EnforcePodGroupPolicy {
    /// Writes the policy's effects into `info`; runs after every ML policy, so counts are final.
    fn enforce_pod_group_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError>;
}

/// Rewrites pod templates for concerns no policy API drives (upstream `EnforcePodSpecPlugin`).
pub trait EnforcePodSpec {
    /// Writes the plugin's effects into `info`; runs after the ML and pod-group policies.
    fn enforce_pod_spec(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError>;
}

/// Consolidates the info with the concrete runtime template before any object is built (upstream
/// `PreComponentBuilderPlugin`; only the template's owner, the JobSet, implements it).
pub trait PreComponentBuilder {
    /// Syncs `info` with the template; runs after every enforce phase.
    fn pre_build(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError>;
}

/// Validates a TrainJob against its runtime (upstream `CustomValidationPlugin`).
pub trait CustomValidation {
    /// Findings with their field paths; [`FieldError::warning`]s do not deny. `old` is the stored TrainJob on
    /// an update.
    fn validate(&self, info: &Info, old: Option<&TrainJob>, new: &TrainJob) -> Vec<FieldError>;

    /// Findings about a runtime the operator's webhook reviews (as upstream's: a TrainingRuntime on create, a
    /// ClusterTrainingRuntime on create and update), with paths from the runtime's `spec`: the plugin's own settings, such as its `kubetrain.dev/`
    /// annotations, refused before any TrainJob uses them. None by default. Ours: upstream's framework
    /// validates TrainJobs only.
    fn validate_runtime(&self, runtime: &TrainingRuntimeSpec) -> Vec<FieldError> {
        let _ = runtime;
        Vec::new()
    }
}

/// Optional plugins and their configuration (upstream: feature gates and the operator's configuration).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// The TrainJobStatus plugin: `Some` enables it (upstream gate `TrainJobStatus`, off by default).
    pub trainjob_status: Option<trainjobstatus::TrainJobStatus>,
}

impl Registry {
    /// Every built-in plugin of this crate in its run order (the table above); TrainJobStatus only when
    /// `options` enables it.
    pub fn builtin(options: &Options) -> Self {
        let mut registry = Registry::new();
        let plugins: [Arc<dyn Plugin>; 8] = [
            Arc::new(plainml::PlainMl),
            Arc::new(torch::Torch),
            Arc::new(mpi::Mpi),
            Arc::new(jax::Jax),
            Arc::new(xgboost::Xgboost),
            Arc::new(flux::Flux),
            Arc::new(coscheduling::Coscheduling),
            Arc::new(volcano::Volcano),
        ];
        let status = options
            .trainjob_status
            .clone()
            .map(|s| Arc::new(s) as Arc<dyn Plugin>);
        for plugin in plugins.into_iter().chain(status) {
            // Built-in names are distinct (registry::tests), so nothing is refused here.
            let _ = registry.register(plugin);
        }
        registry
    }
}

/// Runs the enforce phases of the built-in plugins: the ML policy, then the pod-group policy.
pub fn enforce(info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
    enforce_with(info, job, &Options::default())
}

/// Runs the enforce phases of the built-in plugins that `options` enables ([`Registry::builtin`]).
pub fn enforce_with(info: &mut Info, job: &TrainJob, options: &Options) -> Result<(), MergeError> {
    Registry::builtin(options).enforce(info, job)
}

/// Whether the runtime's ML policy is `policy` (the gate of the ML-policy built-ins).
pub(crate) fn ml_policy_is(
    info: &Info,
    policy: fn(&kubetrain_api::MLPolicySource) -> bool,
) -> bool {
    info.ml_source().is_some_and(policy)
}

/// Whether the runtime's pod-group policy is `policy` (the gate of the pod-group built-ins).
pub(crate) fn pod_group_policy_is(
    info: &Info,
    policy: fn(&kubetrain_api::PodGroupPolicySource) -> bool,
) -> bool {
    info.pod_group_policy
        .as_ref()
        .and_then(|p| p.source.as_ref())
        .is_some_and(policy)
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
