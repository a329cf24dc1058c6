//! MPICH and Intel MPI for kubetrain's MPI policy: an example of the plugin API
//! ([docs/plugins.md](https://github.com/kubetrain/kubetrain/blob/main/docs/plugins.md)).
//!
//! Upstream's CRD admits only `OpenMPI` in `spec.mlPolicy.mpi.mpiImplementation`, so a runtime picks MPICH or
//! Intel MPI with the annotation `kubetrain.dev/mpi-implementation` on its JobSet template, with the names
//! upstream's Go constants use:
//!
//! ```yaml
//! apiVersion: trainer.kubeflow.org/v1alpha1
//! kind: ClusterTrainingRuntime
//! metadata: {name: mpich}
//! spec:
//!   mlPolicy: {numNodes: 2, mpi: {numProcPerNode: 4}}
//!   template:
//!     metadata:
//!       annotations: {kubetrain.dev/mpi-implementation: MPICH}   # or IntelMPI
//!     spec: {replicatedJobs: [...]}                                # launcher and node, as for Open MPI
//! ```
//!
//! The built-in MPI plugin still places the ranks, resolves the slots and mounts the SSH keys (and builds their
//! Secret); for such a runtime it leaves the hostfile and the launcher env to this plugin, which adds, as
//! upstream's open pull request kubeflow/trainer#3717 proposes:
//!
//! | | MPICH | Intel MPI |
//! |---|---|---|
//! | hostfile `<job>-mpi-hostfile`, key `hostfile` | `<host>:<slots>` per line (Hydra's format) | the same |
//! | launcher env: the hostfile | `HYDRA_HOST_FILE=/etc/mpi/hostfile` | `I_MPI_HYDRA_HOST_FILE=/etc/mpi/hostfile` |
//! | launcher env: the ssh arguments | `HYDRA_LAUNCHER_EXTRA_ARGS=-o ConnectionAttempts=10` | `I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS=-o ConnectionAttempts=10` |
//!
//! The hostfile lists the same hosts, in the same order, as the built-in's Open MPI hostfile
//! (`kubetrain_jobset::companions::hostfile`), only in Hydra's format; `mpiexec`/`mpirun` then need no
//! `-f`. Register the plugin after the built-ins:
//!
//! ```
//! let mut registry = kubetrain_jobset::plugins::Registry::builtin(&Default::default());
//! registry.register(kubetrain_plugin_mpi_flavours::MpiFlavours).unwrap();
//! ```
//!
//! Without it, a runtime that names MPICH or Intel MPI fails to render with an error at
//! `spec.template.metadata.annotations[kubetrain.dev/mpi-implementation]`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, EnvVar};
use kubetrain_api::TrainJob;
use kubetrain_jobset::object::child_meta;
use kubetrain_jobset::plugins::{BuildContext, ComponentBuilder, RenderPlugin};
use kubetrain_jobset::{Object, RenderError};
use kubetrain_merge::plugins::mpi::{self, HOSTFILE_DIR, HOSTFILE_NAME};
use kubetrain_merge::plugins::{EnforceMlPolicy, Plugin};
use kubetrain_merge::upsert::env_value;
use kubetrain_merge::{Info, MergeError};

/// An MPI implementation this plugin renders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// MPICH (Hydra process manager).
    Mpich,
    /// Intel MPI (Hydra process manager, `I_MPI_` settings).
    IntelMpi,
}

impl Flavour {
    /// The flavour named by the annotation value, as upstream's Go constants spell it (`MPICH`, `IntelMPI`).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "MPICH" => Some(Self::Mpich),
            "IntelMPI" => Some(Self::IntelMpi),
            _ => None,
        }
    }

    /// The flavour `info`'s runtime asks for, if it is one of this plugin's.
    pub fn of(info: &Info) -> Option<Self> {
        mpi::implementation(info).and_then(Self::from_name)
    }

    /// The env the launcher's `node` container gets.
    pub fn launcher_env(self) -> Vec<EnvVar> {
        let (hostfile, ssh_args) = match self {
            Self::Mpich => ("HYDRA_HOST_FILE", "HYDRA_LAUNCHER_EXTRA_ARGS"),
            Self::IntelMpi => (
                "I_MPI_HYDRA_HOST_FILE",
                "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
            ),
        };
        vec![
            env_value(hostfile, format!("{HOSTFILE_DIR}/{HOSTFILE_NAME}")),
            env_value(ssh_args, "-o ConnectionAttempts=10"),
        ]
    }
}

/// The plugin: MPICH and Intel MPI, chosen per runtime by the `kubetrain.dev/mpi-implementation` annotation.
#[derive(Clone, Copy, Debug, Default)]
pub struct MpiFlavours;

impl Plugin for MpiFlavours {
    fn name(&self) -> &str {
        "MPIFlavours"
    }

    fn ml_policy(&self) -> Option<&dyn EnforceMlPolicy> {
        Some(self)
    }
}

/// Mounts the hostfile on the launcher and sets the launcher env; runs after the built-in MPI plugin.
impl EnforceMlPolicy for MpiFlavours {
    fn enforce_ml_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        let Some(flavour) = Flavour::of(info) else {
            return Ok(());
        };
        mpi::mount_hostfile(info, job);
        mpi::launcher_env(info, &flavour.launcher_env());
        Ok(())
    }
}

impl RenderPlugin for MpiFlavours {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

/// The hostfile ConfigMap in Hydra's format (the built-in builds the SSH Secret).
impl ComponentBuilder for MpiFlavours {
    fn build(
        &self,
        info: &Info,
        job: &TrainJob,
        _: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        if Flavour::of(info).is_none() {
            return Ok(Vec::new());
        }
        let config_map = ConfigMap {
            metadata: child_meta(job, mpi::hostfile_config_map_name(job.name())),
            data: Some(BTreeMap::from([(
                HOSTFILE_NAME.to_owned(),
                hydra_hostfile(info, job),
            )])),
            ..Default::default()
        };
        Ok(vec![Object::ConfigMap(Box::new(config_map))])
    }
}

/// The built-in's hosts and slots (`<host> slots=<n>` lines) in Hydra's `<host>:<n>` format.
pub fn hydra_hostfile(info: &Info, job: &TrainJob) -> String {
    kubetrain_jobset::companions::hostfile(info, job).replace(" slots=", ":")
}
