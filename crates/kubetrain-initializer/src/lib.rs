//! Dataset and model initializers for TrainJobs: s3:// and hf:// into the shared workspace.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
