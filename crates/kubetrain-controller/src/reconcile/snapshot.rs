//! The runtime snapshot (upstream v2.3, KEP-2599): on its first reconcile a TrainJob's runtime is copied into the
//! ConfigMap `<job>-runtime-snapshot` (key `runtime`, YAML with apiVersion and kind), and every later render
//! reads the runtime from there, so editing a runtime never changes TrainJobs that already exist.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kubetrain_api::{
    ClusterTrainingRuntime, Document, TrainJob, TrainingRuntime, TrainingRuntimeSpec,
};
use kubetrain_jobset::object::child_meta;

use crate::error::{Error, Result};

/// Suffix of the snapshot ConfigMap's name.
pub const SNAPSHOT_SUFFIX: &str = "-runtime-snapshot";
/// Data key of the snapshot.
pub const RUNTIME_KEY: &str = "runtime";

/// `<job>-runtime-snapshot`.
pub fn snapshot_name(job: &TrainJob) -> String {
    format!("{}{SNAPSHOT_SUFFIX}", job.name())
}

/// A runtime read from the API server.
#[derive(Clone, Debug, PartialEq)]
pub enum FetchedRuntime {
    /// A namespaced TrainingRuntime.
    Namespaced(Box<TrainingRuntime>),
    /// A ClusterTrainingRuntime.
    Cluster(Box<ClusterTrainingRuntime>),
}

/// The snapshot ConfigMap of `runtime` for `job`, controller-owned by the TrainJob.
pub fn snapshot_config_map(job: &TrainJob, runtime: &FetchedRuntime) -> Result<ConfigMap> {
    // The server's bookkeeping is not part of the runtime's meaning.
    let yaml = match runtime {
        FetchedRuntime::Namespaced(r) => {
            let mut r = (**r).clone();
            r.metadata.managed_fields = None;
            kubetrain_api::to_yaml(&r)
        }
        FetchedRuntime::Cluster(r) => {
            let mut r = (**r).clone();
            r.metadata.managed_fields = None;
            kubetrain_api::to_yaml(&r)
        }
    }
    .map_err(|e| Error::Snapshot(format!("serializing the runtime: {e}")))?;
    Ok(ConfigMap {
        metadata: child_meta(job, snapshot_name(job)),
        data: Some(BTreeMap::from([(RUNTIME_KEY.to_owned(), yaml)])),
        ..Default::default()
    })
}

/// The runtime spec stored in a snapshot ConfigMap, checked as upstream checks it: controller-owned by this
/// TrainJob's UID, has the `runtime` key, and names the runtime `spec.runtimeRef` names.
#[cfg(test)]
pub(crate) fn read_snapshot(job: &TrainJob, cm: &ConfigMap) -> Result<TrainingRuntimeSpec> {
    check_owner(job, cm)?;
    let snapshot = parse_snapshot(cm)?;
    snapshot.check_runtime_ref(job)?;
    Ok(snapshot.spec)
}

/// A snapshot ConfigMap's runtime as parsed, before it is checked against a TrainJob.
#[derive(Clone, Debug, PartialEq)]
pub struct SnapshotRuntime {
    /// `TrainingRuntime` or `ClusterTrainingRuntime`.
    pub kind: &'static str,
    /// The runtime's name.
    pub name: String,
    /// The runtime's spec.
    pub spec: TrainingRuntimeSpec,
}

impl SnapshotRuntime {
    /// Fails unless this is the runtime `spec.runtimeRef` of `job` names.
    pub fn check_runtime_ref(&self, job: &TrainJob) -> Result<()> {
        let (kind, name) = (self.kind, &self.name);
        let r = &job.spec.runtime_ref;
        if kind != r.kind_or_default() || *name != r.name {
            return Err(Error::Snapshot(format!(
                "the snapshot refers to the wrong runtime: expecting a runtime with name, api group and kind of {:?}, {:?}, {:?} but found runtime with name, api group and kind of {name:?}, {:?}, {kind:?}",
                r.name,
                r.api_group_or_default(),
                r.kind_or_default(),
                kubetrain_api::constants::GROUP,
            )));
        }
        Ok(())
    }
}

impl From<FetchedRuntime> for SnapshotRuntime {
    fn from(runtime: FetchedRuntime) -> Self {
        match runtime {
            FetchedRuntime::Namespaced(r) => Self {
                kind: "TrainingRuntime",
                name: r.name().to_owned(),
                spec: r.spec,
            },
            FetchedRuntime::Cluster(r) => Self {
                kind: "ClusterTrainingRuntime",
                name: r.name().to_owned(),
                spec: r.spec,
            },
        }
    }
}

/// Fails unless `cm` is controller-owned by `job` (its UID).
pub fn check_owner(job: &TrainJob, cm: &ConfigMap) -> Result<()> {
    let owned = cm
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .is_some_and(|o| Some(&o.uid) == job.metadata.uid.as_ref());
    if owned {
        Ok(())
    } else {
        Err(Error::Snapshot(
            "a snapshot configmap exists but is owned by another object".to_owned(),
        ))
    }
}

/// Parses the runtime in a snapshot ConfigMap's `runtime` key.
pub fn parse_snapshot(cm: &ConfigMap) -> Result<SnapshotRuntime> {
    let Some(yaml) = cm.data.as_ref().and_then(|d| d.get(RUNTIME_KEY)) else {
        return Err(Error::Snapshot(format!(
            "snapshot ConfigMap missing {RUNTIME_KEY:?} data key"
        )));
    };
    let documents = kubetrain_api::parse_documents(yaml)
        .map_err(|e| Error::Snapshot(format!("unable to unmarshal the snapshot: {e}")))?;
    let (kind, name, spec) = match documents.into_iter().next().map(|d| d.document) {
        Some(Document::TrainingRuntime(r)) => ("TrainingRuntime", r.name().to_owned(), r.spec),
        Some(Document::ClusterTrainingRuntime(r)) => {
            ("ClusterTrainingRuntime", r.name().to_owned(), r.spec)
        }
        other => {
            return Err(Error::Snapshot(format!(
                "unable to unmarshal the snapshot: expected a runtime, found {}",
                other.as_ref().map_or("nothing", Document::kind)
            )));
        }
    };
    Ok(SnapshotRuntime { kind, name, spec })
}
