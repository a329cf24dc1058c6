//! Overlay of a TrainJob onto its (Cluster)TrainingRuntime: strategic merge patch, runtime info and the plugin framework.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
//!
//! - [`smp`]: the strategic-merge-patch engine runtime patches go through.

pub mod smp;
