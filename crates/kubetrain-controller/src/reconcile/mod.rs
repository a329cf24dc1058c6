//! The reconcile's decisions as pure functions: whether to touch a TrainJob at all, which runtime kind it
//! names, the runtime snapshot, the objects to apply and the status to write. The controller
//! ([`crate::controller`]) only reads what these need and writes what they return.
//!
//! | TrainJob | decision |
//! |---|---|
//! | `spec.managedBy` not ours (e.g. MultiKueue) | [`Skip::ManagedElsewhere`]: no reads, no writes |
//! | being deleted | [`Skip::Deleting`]: children go with it (owner references) |
//! | `runtimeRef` kind/group unsupported | `Failed=True`, reason `TrainingRuntimeNotSupported`; no objects |
//! | finished (`Complete` or `Failed`) | no objects, never a new JobSet (kubeflow/trainer#3779); status still follows the JobSet; deleted once its TTL expired ([`lifecycle`]) |
//! | otherwise | snapshot (first time), render, apply every object; status from the applied JobSet |

pub mod elastic;
pub mod lifecycle;
pub mod restarts;
mod snapshot;
mod status;

#[cfg(test)]
use snapshot::read_snapshot;
pub use snapshot::{
    FetchedRuntime, RUNTIME_KEY, SnapshotRuntime, check_owner, parse_snapshot, snapshot_config_map,
    snapshot_name,
};
pub use status::{StatusDecision, counts_only, decide_status, merge_patch};

use kubetrain_api::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, GROUP, TRAINING_RUNTIME_KIND, TRAINJOB_CONTROLLER,
};
use kubetrain_api::{MLPolicySource, TrainJob, TrainingRuntimeSpec};
use kubetrain_jobset::{Observed, ObservedJobSet};

/// Why a TrainJob is left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// `spec.managedBy` names another controller (e.g. `kueue.x-k8s.io/multikueue`).
    ManagedElsewhere(String),
    /// The TrainJob has a deletion timestamp; garbage collection removes its children.
    Deleting,
}

/// Whether the controller must leave `job` alone (upstream `IsManagedByExternalController`).
pub fn skip(job: &TrainJob) -> Option<Skip> {
    let managed_by = job.spec.managed_by_or_default();
    if managed_by != TRAINJOB_CONTROLLER {
        return Some(Skip::ManagedElsewhere(managed_by.to_owned()));
    }
    job.metadata
        .deletion_timestamp
        .is_some()
        .then_some(Skip::Deleting)
}

/// The two runtime kinds the controller serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeKind {
    /// `TrainingRuntime` in the TrainJob's namespace.
    Namespaced,
    /// `ClusterTrainingRuntime`.
    Cluster,
}

/// `spec.runtimeRef` names a kind the controller does not serve (upstream: "unsupported runtime: <kind.group>").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unsupported runtime: {0}")]
pub struct UnsupportedRuntime(
    /// Upstream's registry key of the kind, `<kind>.<group>`.
    pub String,
);

/// Which runtime kind `spec.runtimeRef` names.
///
/// # Errors
///
/// [`UnsupportedRuntime`] with upstream's registry key (`<kind>.<group>`) of any other kind.
pub fn runtime_kind(job: &TrainJob) -> Result<RuntimeKind, UnsupportedRuntime> {
    let r = &job.spec.runtime_ref;
    match (r.api_group_or_default(), r.kind_or_default()) {
        (GROUP, TRAINING_RUNTIME_KIND) => Ok(RuntimeKind::Namespaced),
        (GROUP, CLUSTER_TRAINING_RUNTIME_KIND) => Ok(RuntimeKind::Cluster),
        _ => Err(UnsupportedRuntime(r.group_kind())),
    }
}

/// What must be read besides the JobSet before rendering with `runtime`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reads {
    /// The MPI SSH Secret (only MPI runtimes have one; it is generated once).
    pub ssh_secret: bool,
    /// The PodGroup (only with a pod-group policy; it is applied only when absent or suspended).
    pub pod_group: Option<PodGroupKind>,
}

/// The PodGroup API a runtime's pod-group policy uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodGroupKind {
    /// `scheduling.x-k8s.io/v1alpha1` (scheduler-plugins coscheduling).
    Coscheduling,
    /// `scheduling.volcano.sh/v1beta1`.
    Volcano,
}

/// The reads rendering `runtime` depends on.
pub fn reads(runtime: &TrainingRuntimeSpec) -> Reads {
    use kubetrain_api::PodGroupPolicySource as P;
    let ssh_secret = matches!(
        runtime.ml_policy.as_ref().and_then(|p| p.source.as_ref()),
        Some(MLPolicySource::Mpi(_))
    );
    let pod_group = match runtime
        .pod_group_policy
        .as_ref()
        .and_then(|p| p.source.as_ref())
    {
        Some(P::Coscheduling(_)) => Some(PodGroupKind::Coscheduling),
        Some(P::Volcano(_)) => Some(PodGroupKind::Volcano),
        None => None,
    };
    Reads {
        ssh_secret,
        pod_group,
    }
}

/// The facts `render` needs, from what was read.
pub fn observed(
    jobset_suspend: Option<Option<bool>>,
    ssh_secret_exists: bool,
    pod_group_exists: bool,
) -> Observed {
    Observed {
        jobset: jobset_suspend.map(|suspend| ObservedJobSet {
            suspended: suspend.unwrap_or(false),
        }),
        ssh_secret_exists,
        pod_group_exists,
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod ttl_scenarios;
