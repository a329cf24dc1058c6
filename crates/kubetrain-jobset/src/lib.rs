//! Renders a merged TrainJob into a JobSet and its companion objects; maps JobSet status back to the TrainJob.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.

pub mod builtin;
pub mod ssh;
