//! `render()`: a TrainJob and its runtime in, every object the controller would apply out. Pure and
//! deterministic: what the caller observed in the cluster and the randomness source are inputs.

use kubetrain_api::{MLPolicySource, PodGroupPolicySource, TrainJob, TrainingRuntimeSpec};
use kubetrain_merge::{Info, MergeError};

use crate::builder::{build_jobset, sync_parallelism};
use crate::companions::{
    coscheduling_pod_group, hostfile_config_map, ssh_auth_secret, volcano_pod_group,
};
use crate::object::{Object, sort};
use crate::ssh::KeySource;

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

/// Optional plugins of a render (upstream: feature gates and the operator configuration). The default enables
/// none, as upstream's defaults do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// The TrainJobStatus plugin (upstream gate `TrainJobStatus`, alpha, off by default).
    pub trainjob_status: Option<TrainJobStatusOptions>,
}

/// What the TrainJobStatus plugin needs: the status server's address and its CA certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainJobStatusOptions {
    /// Where the operator's status server listens.
    pub server: kubetrain_merge::plugins::trainjobstatus::StatusServer,
    /// `ca.crt` of the operator's webhook certificate Secret, as the caller read it; copied into the ConfigMap
    /// `<job>-tls-config`. Empty means the Secret has none (an error, as upstream).
    pub ca_cert: String,
}

/// Why a TrainJob could not be rendered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// The merge stage failed (runtime patches, resources, plugins).
    #[error(transparent)]
    Merge(#[from] MergeError),
    /// `runtimeRef` names an unsupported kind, or a runtime that does not exist.
    #[error("{path}: {source}")]
    Runtime {
        /// The field path (upstream writes `spec.RuntimeRef` for a missing ClusterTrainingRuntime).
        path: &'static str,
        /// What the lookup found.
        #[source]
        source: kubetrain_api::catalog::LookupError,
    },
    /// The TrainJobStatus plugin is on but the status server's CA certificate is empty.
    #[error(
        "failed to find status server ca.crt in tls secret (the TrainJobStatus plugin needs the CA certificate of the operator's webhook Secret)"
    )]
    MissingStatusServerCaCert,
    /// The MPI hostfile would list more hosts than [`MAX_HOSTFILE_ENTRIES`].
    #[error(
        "spec.trainer.numNodes: the MPI hostfile would list {hosts} hosts; at most {MAX_HOSTFILE_ENTRIES} are supported"
    )]
    TooManyHosts {
        /// Hosts the hostfile would list.
        hosts: u64,
    },
}

/// The most hosts an MPI hostfile may list (upstream has no limit; we refuse to build a file of gigabytes).
pub const MAX_HOSTFILE_ENTRIES: u64 = 100_000;

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

/// Renders `job` against `runtime`. The MPI SSH key is taken from `keys` (any cryptographic RNG, or a
/// [`crate::ssh::KeyPool`]) only when the Secret is needed, so a seeded RNG gives byte-identical output.
pub fn render<K: KeySource>(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
    observed: &Observed,
    keys: &mut K,
) -> Result<Rendered, RenderError> {
    render_with(job, runtime, observed, &RenderOptions::default(), keys)
}

/// [`render`] with optional plugins (TrainJobStatus) enabled by `options`.
pub fn render_with<K: KeySource>(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
    observed: &Observed,
    options: &RenderOptions,
    keys: &mut K,
) -> Result<Rendered, RenderError> {
    let status = options.trainjob_status.as_ref();
    if status.is_some_and(|s| s.ca_cert.is_empty()) {
        return Err(RenderError::MissingStatusServerCaCert);
    }
    let merge_options = kubetrain_merge::plugins::Options {
        trainjob_status: status.map(
            |s| kubetrain_merge::plugins::trainjobstatus::TrainJobStatus {
                server: s.server.clone(),
            },
        ),
    };
    let mut info = kubetrain_merge::merge_with(job, runtime, &merge_options)?;
    sync_parallelism(&mut info);

    let suspended = job.spec.is_suspended();
    let mut objects = Vec::with_capacity(4);
    // A running JobSet is never updated; a suspended one (or a suspended TrainJob) is re-applied in full.
    let keep_running = observed.jobset.is_some_and(|j| !j.suspended) && !suspended;
    if !keep_running {
        objects.push(Object::JobSet(Box::new(build_jobset(&info, job))));
    }
    if let Some(MLPolicySource::Mpi(_)) = info.ml_source() {
        let hosts = crate::companions::hostfile_entries(&info);
        if hosts > MAX_HOSTFILE_ENTRIES {
            return Err(RenderError::TooManyHosts { hosts });
        }
        if !observed.ssh_secret_exists {
            let key = keys.key_pair();
            objects.push(Object::Secret(Box::new(ssh_auth_secret(job, &key))));
        }
        objects.push(Object::ConfigMap(Box::new(hostfile_config_map(&info, job))));
    }
    if let Some(MLPolicySource::Flux(_)) = info.ml_source() {
        objects.push(Object::ConfigMap(Box::new(
            crate::flux::entrypoint_config_map(&info, job),
        )));
        objects.push(Object::Secret(Box::new(crate::flux::curve_secret(job))));
    }
    if let Some(status) = status {
        objects.push(Object::ConfigMap(Box::new(
            crate::companions::tls_config_map(job, &status.ca_cert),
        )));
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
