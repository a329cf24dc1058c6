//! The kubetrain operator as a library: the TrainJob controller that renders TrainJobs into JobSets and
//! their companions with server-side apply, the admission webhooks, Lease-based leader election and the
//! Prometheus metrics. `kubetrain-operator` (in `examples/operator`) is a thin composition of this crate.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.

pub mod apply;
pub mod backoff;
pub mod controller;
mod error;
pub mod events;
#[cfg(test)]
mod fixtures;
pub mod leadership;
pub mod metrics;
#[cfg(feature = "mock")]
pub mod mock;
pub mod permissions;
pub mod reconcile;
#[cfg(test)]
mod scenarios;
mod settings;

pub use controller::run;
pub use error::{Error, Result};
pub use leadership::Leadership;
pub use metrics::Metrics;
pub use settings::{EVENT_REPORTER, FIELD_MANAGER, Settings};
// modules: controller (ctl helper)
// modules: webhook, leader election, http endpoints (op helper)
pub mod election;
pub mod http;
mod serving;
pub mod webhook;
