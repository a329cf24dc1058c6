//! The kubetrain operator as a library: the TrainJob controller that renders TrainJobs into JobSets and
//! their companions with server-side apply, the admission webhooks, Lease-based leader election and the
//! Prometheus metrics. `kubetrain-operator` (in `examples/operator`) is a thin composition of this crate.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.

pub mod leadership;
// modules: controller (ctl helper)
// modules: webhook, leader election, http endpoints (op helper)
mod serving;
pub mod webhook;
