//! A pure model of Kueue admission: quota tree, scheduling cycle, preemption, fair sharing, explanations and a simulator.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
