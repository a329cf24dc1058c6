//! Overlay of a TrainJob onto its (Cluster)TrainingRuntime: strategic merge patch, runtime info and the plugin
//! framework.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
//!
//! - [`smp`]: the strategic-merge-patch engine runtime patches go through.
//! - [`Info`]: the runtime info built from the TrainJob and its runtime (labels, patched template, pod sets).
//! - [`plugins`]: the ML-policy and pod-group plugins, run by [`plugins::enforce`] in a fixed order.
//! - [`quantity`], [`resources`]: Kubernetes quantities and pod requests.
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
/// Kubernetes quantities: the one implementation lives in `kubetrain-api` (this path is kept for callers).
pub use kubetrain_api::quantity;

/// Builds the runtime info and runs every enforce phase: the merge stage of the render pipeline.
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
    let mut info = Info::new(job, runtime)?;
    plugins::enforce_with(&mut info, job, options)?;
    Ok(info)
}

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
