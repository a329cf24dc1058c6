//! Overlay of a TrainJob onto its (Cluster)TrainingRuntime: strategic merge patch, runtime info and the plugin
//! framework.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
//!
//! - [`smp`]: the strategic-merge-patch engine runtime patches go through.
//! - [`Info`]: the runtime info built from the TrainJob and its runtime (labels, patched template, pod sets).
//! - [`plugins`]: the plugin framework (upstream's extension points as traits, an ordered
//!   [`plugins::Registry`]) and every built-in ML-policy and pod-group plugin. Writing a plugin:
//!   [docs/plugins.md](https://github.com/kubetrain/kubetrain/blob/main/docs/plugins.md).
//! - [`resources`]: pod requests (quantities are `kubetrain_api::quantity`'s).
//!
//! The JobSet and its companion objects are built from an [`Info`] by `kubetrain-jobset`.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
pub mod info;
pub mod plugins;
pub mod resources;
pub mod smp;
pub mod upsert;

pub use error::MergeError;
pub use info::{Info, PodSet, Scheduler};

/// Builds the runtime info and runs the enforce phases of the built-in plugins: the merge stage of the render
/// pipeline.
pub fn merge(
    job: &kubetrain_api::TrainJob,
    runtime: &kubetrain_api::TrainingRuntimeSpec,
) -> Result<Info, MergeError> {
    merge_with(job, runtime, &plugins::Options::default())
}

/// [`merge`] with optional plugins (e.g. TrainJobStatus) enabled by `options`.
pub fn merge_with(
    job: &kubetrain_api::TrainJob,
    runtime: &kubetrain_api::TrainingRuntimeSpec,
    options: &plugins::Options,
) -> Result<Info, MergeError> {
    merge_with_registry(job, runtime, &plugins::Registry::builtin(options))
}

/// [`merge`] running the enforce phases of `registry` (built-in and custom plugins, in registration order).
pub fn merge_with_registry<P: ?Sized + plugins::Plugin>(
    job: &kubetrain_api::TrainJob,
    runtime: &kubetrain_api::TrainingRuntimeSpec,
    registry: &plugins::Registry<P>,
) -> Result<Info, MergeError> {
    let mut info = Info::new(job, runtime)?;
    registry.enforce(&mut info, job)?;
    Ok(info)
}

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
