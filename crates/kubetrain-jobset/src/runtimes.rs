//! Runtime resolution: which (Cluster)TrainingRuntime a TrainJob's `runtimeRef` names.

use std::collections::BTreeMap;

use kubetrain_api::constants::{CLUSTER_TRAINING_RUNTIME_KIND, GROUP, TRAINING_RUNTIME_KIND};
use kubetrain_api::{ClusterTrainingRuntime, TrainJob, TrainingRuntime, TrainingRuntimeSpec};

use crate::render::RenderError;

/// A set of runtimes to resolve `runtimeRef` against: ClusterTrainingRuntimes by name, TrainingRuntimes by
/// namespace and name.
#[derive(Clone, Debug, Default)]
pub struct Runtimes {
    cluster: BTreeMap<String, ClusterTrainingRuntime>,
    namespaced: BTreeMap<(String, String), TrainingRuntime>,
}

/// The namespace a namespaced object lives in when its manifest names none.
pub const DEFAULT_NAMESPACE: &str = "default";

impl Runtimes {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// The built-in runtimes (see [`crate::builtin`]).
    pub fn builtin() -> Self {
        let mut set = Self::new();
        for rt in crate::builtin::runtimes() {
            set.insert_cluster(rt);
        }
        set
    }

    /// Adds (or replaces) a ClusterTrainingRuntime.
    pub fn insert_cluster(&mut self, runtime: ClusterTrainingRuntime) {
        self.cluster.insert(runtime.name().to_owned(), runtime);
    }

    /// Adds (or replaces) a TrainingRuntime.
    pub fn insert_namespaced(&mut self, runtime: TrainingRuntime) {
        let ns = runtime
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
        self.namespaced
            .insert((ns, runtime.name().to_owned()), runtime);
    }

    /// The runtime spec `job.spec.runtimeRef` names, with upstream's errors when there is none.
    pub fn resolve(&self, job: &TrainJob) -> Result<&TrainingRuntimeSpec, RenderError> {
        let r = &job.spec.runtime_ref;
        if r.api_group_or_default() != GROUP {
            return Err(RenderError::RuntimeNotSupported {
                group_kind: r.group_kind(),
            });
        }
        match r.kind_or_default() {
            CLUSTER_TRAINING_RUNTIME_KIND => {
                self.cluster.get(&r.name).map(|rt| &rt.spec).ok_or_else(|| {
                    RenderError::RuntimeNotFound {
                        // Upstream's path spelling for this error.
                        path: "spec.RuntimeRef",
                        message: format!(
                            "not found ClusterTrainingRuntime specified in TrainJob: {}",
                            r.name
                        ),
                    }
                })
            }
            TRAINING_RUNTIME_KIND => {
                let ns = job
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
                self.namespaced
                    .get(&(ns, r.name.clone()))
                    .map(|rt| &rt.spec)
                    .ok_or_else(|| RenderError::RuntimeNotFound {
                        path: "spec.runtimeRef",
                        message: format!(
                            "TrainingRuntime specified in TrainJob is not found: {}",
                            r.name
                        ),
                    })
            }
            _ => Err(RenderError::RuntimeNotSupported {
                group_kind: r.group_kind(),
            }),
        }
    }
}
