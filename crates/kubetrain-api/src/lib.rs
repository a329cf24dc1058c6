//! Typed API of Kubeflow Trainer V2 (trainer.kubeflow.org/v1alpha1), JobSet and PodGroup types, CRDs and validation.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
