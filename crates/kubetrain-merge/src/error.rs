//! Errors of the merge stage.

use crate::smp::SmpError;

/// Why a TrainJob could not be overlaid onto its runtime. Each variant names the TrainJob field at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// A runtime patch does not apply to the runtime template.
    #[error("spec.runtimePatches[{index}] (manager {manager:?}): {source}")]
    RuntimePatch {
        /// Position in `spec.runtimePatches`.
        index: usize,
        /// The patch's manager.
        manager: String,
        /// What the merge engine reported.
        #[source]
        source: SmpError,
    },
    /// The patched runtime template is no longer a valid JobSetSpec.
    #[error("spec.runtimePatches: the patched runtime template is not a valid JobSet spec: {0}")]
    PatchedTemplate(String),
    /// `spec.trainer.resourcesPerNode` does not merge with the runtime's resources.
    #[error("spec.trainer.resourcesPerNode: {0}")]
    Resources(#[source] SmpError),
    /// A torch `envInjection` target names a job or container the runtime lacks.
    #[error(
        "runtime mlPolicy.torch.envInjection: envInjection target podSet {job:?} container {container:?} not found in runtime template"
    )]
    EnvInjectionTarget {
        /// The replicatedJob name.
        job: String,
        /// The container name.
        container: String,
    },
    /// The MPI implementation is not OpenMPI.
    #[error(
        "runtime mlPolicy.mpi.mpiImplementation: MPI implementation {0:?} is not supported; use OpenMPI"
    )]
    UnsupportedMpiImplementation(String),
    /// An ML policy this version cannot render (every policy of the v1alpha1 API renders today; kept so that
    /// callers matching on it keep compiling).
    #[error("runtime mlPolicy.{0}: rendering this ML policy is not supported by kubetrain yet")]
    UnsupportedPolicy(&'static str),
    /// A plugin failed: its name and its error ([`MergeError::without_plugin`] unwraps it).
    #[error("plugin {plugin}: {source}")]
    Plugin {
        /// The plugin's name.
        plugin: String,
        /// What the plugin reported.
        #[source]
        source: Box<MergeError>,
    },
    /// A plugin refuses the TrainJob or its runtime: the field at fault and how to fix it (for plugins outside
    /// this crate).
    #[error("{path}: {message}")]
    Invalid {
        /// The field path, e.g. `spec.trainer.numNodes` or `runtime mlPolicy.mpi`.
        path: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl MergeError {
    /// The plugin that failed, if a plugin did.
    pub fn plugin(&self) -> Option<&str> {
        match self {
            MergeError::Plugin { plugin, .. } => Some(plugin),
            _ => None,
        }
    }

    /// The error without the plugin that reported it.
    pub fn without_plugin(&self) -> &MergeError {
        match self {
            MergeError::Plugin { source, .. } => source.without_plugin(),
            other => other,
        }
    }
}
