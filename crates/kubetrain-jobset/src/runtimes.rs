//! Runtime resolution: the (Cluster)TrainingRuntime a TrainJob's `runtimeRef` names, from a
//! [`RuntimeCatalog`] (the built-in runtimes are in [`crate::builtin::catalog`]).

use kubetrain_api::catalog::{DEFAULT_NAMESPACE, LookupError};
use kubetrain_api::{RuntimeCatalog, TrainJob, TrainingRuntimeSpec};

use crate::error::RenderError;

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
            // A missing runtime is the name's fault; an unsupported kind or group the reference's.
            let path = match source {
                LookupError::NotFound { .. } => "spec.runtimeRef.name",
                _ => "spec.runtimeRef",
            };
            RenderError::Runtime { path, source }
        })
}
