//! `render()`: a TrainJob and its runtime in, every object the controller would apply out. Pure and
//! deterministic: what the caller observed in the cluster and the randomness source are inputs.

use kubetrain_api::{MLPolicySource, PodGroupPolicySource, TrainJob, TrainingRuntimeSpec};
use kubetrain_merge::{Info, MergeError};
use rand_core::{CryptoRng, RngCore};

use crate::builder::{build_jobset, sync_parallelism};
use crate::companions::{
    coscheduling_pod_group, hostfile_config_map, ssh_auth_secret, volcano_pod_group,
};
use crate::object::{Object, sort};
use crate::ssh::SshKeyPair;

/// What the caller found in the cluster; everything `false`/`None` for a fresh TrainJob (and in the CLI).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// The JobSet named like the TrainJob, if it exists.
    pub jobset: Option<ObservedJobSet>,
    /// Whether the Secret `<job>-mpi-ssh-auth` exists (then no new key is generated).
    pub ssh_secret_exists: bool,
    /// Whether the PodGroup named like the TrainJob exists.
    pub pod_group_exists: bool,
}

/// The facts about an existing JobSet that rendering depends on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObservedJobSet {
    /// `spec.suspend` of the existing JobSet.
    pub suspended: bool,
}

/// Why a TrainJob could not be rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RenderError {
    /// The merge stage failed (runtime patches, resources, plugins).
    #[error(transparent)]
    Merge(#[from] MergeError),
    /// `runtimeRef` names a kind or group that has no runtime implementation.
    #[error("spec.runtimeRef: unsupported runtime: {group_kind}")]
    RuntimeNotSupported {
        /// `<kind>.<apiGroup>` as upstream prints it.
        group_kind: String,
    },
    /// The referenced runtime does not exist.
    #[error("{path}: {message}")]
    RuntimeNotFound {
        /// The field path (upstream writes `spec.RuntimeRef` for ClusterTrainingRuntime).
        path: &'static str,
        /// Upstream's message.
        message: String,
    },
}

impl RenderError {
    /// The TrainJob field path the error is about.
    pub fn field_path(&self) -> String {
        let text = self.to_string();
        text.split_once(": ")
            .map(|(p, _)| p.to_owned())
            .unwrap_or_default()
    }

    /// The message without the field path.
    pub fn message(&self) -> String {
        let text = self.to_string();
        text.split_once(": ")
            .map(|(_, m)| m.to_owned())
            .unwrap_or(text)
    }
}

/// The result of a render: the merged info (pod sets, counts) and the objects to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The runtime info after every plugin ran.
    pub info: Info,
    /// The objects, JobSet first, then sorted by apiVersion, kind and name.
    pub objects: Vec<Object>,
}

/// Renders `job` against `runtime`. Randomness (the MPI SSH key) is drawn from `rng` only when the Secret is
/// needed, so a seeded RNG gives byte-identical output.
pub fn render<R: RngCore + CryptoRng>(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
    observed: &Observed,
    rng: &mut R,
) -> Result<Rendered, RenderError> {
    let mut info = kubetrain_merge::merge(job, runtime)?;
    sync_parallelism(&mut info);

    let suspended = job.spec.is_suspended();
    let mut objects = Vec::with_capacity(4);
    // A running JobSet is never updated; a suspended one (or a suspended TrainJob) is re-applied in full.
    let keep_running = observed.jobset.is_some_and(|j| !j.suspended) && !suspended;
    if !keep_running {
        objects.push(Object::JobSet(Box::new(build_jobset(&info, job))));
    }
    if let Some(MLPolicySource::Mpi(_)) = info.ml_source() {
        if !observed.ssh_secret_exists {
            let key = SshKeyPair::generate(rng);
            objects.push(Object::Secret(Box::new(ssh_auth_secret(job, &key))));
        }
        objects.push(Object::ConfigMap(Box::new(hostfile_config_map(&info, job))));
    }
    if !observed.pod_group_exists || suspended {
        match info
            .pod_group_policy
            .as_ref()
            .and_then(|p| p.source.as_ref())
        {
            Some(PodGroupPolicySource::Coscheduling(c)) => {
                objects.push(Object::CoschedulingPodGroup(Box::new(
                    coscheduling_pod_group(&info, job, c),
                )));
            }
            Some(PodGroupPolicySource::Volcano(v)) => {
                objects.push(Object::VolcanoPodGroup(Box::new(volcano_pod_group(
                    &info, job, v,
                ))));
            }
            None => {}
        }
    }
    sort(&mut objects);
    Ok(Rendered { info, objects })
}
