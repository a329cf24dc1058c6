//! Collective communication for TrainJob ranks: NCCL and CPU backends, rendezvous from the trainer env, benchmarks.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
