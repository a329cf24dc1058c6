//! Raw NCCL FFI generated with bindgen, loaded at run time by path.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
