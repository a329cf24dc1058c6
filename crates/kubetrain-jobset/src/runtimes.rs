//! Runtime resolution: the (Cluster)TrainingRuntime a TrainJob's `runtimeRef` names, from a
//! [`RuntimeCatalog`] (the built-in runtimes are in [`crate::builtin::catalog`]).

use kubetrain_api::catalog::{DEFAULT_NAMESPACE, LookupError};
use kubetrain_api::constants::TRAINING_RUNTIME_KIND;
use kubetrain_api::{RuntimeCatalog, TrainJob, TrainingRuntimeSpec};

use crate::render::RenderError;

/// The runtime spec `job.spec.runtimeRef` names, looked up from the TrainJob's namespace (`default` if none).
pub fn resolve<'a>(
    catalog: &'a RuntimeCatalog,
    job: &TrainJob,
) -> Result<&'a TrainingRuntimeSpec, RenderError> {
    let namespace = job
        .metadata
        .namespace
        .as_deref()
        .unwrap_or(DEFAULT_NAMESPACE);
    catalog
        .lookup(&job.spec.runtime_ref, namespace)
        .map(|entry| entry.spec())
        .map_err(|source| {
            // Upstream reports a missing ClusterTrainingRuntime at `spec.RuntimeRef` (capital R).
            let path = match (&source, job.spec.runtime_ref.kind_or_default()) {
                (LookupError::NotFound { .. }, kind) if kind != TRAINING_RUNTIME_KIND => {
                    "spec.RuntimeRef"
                }
                _ => "spec.runtimeRef",
            };
            RenderError::Runtime { path, source }
        })
}
