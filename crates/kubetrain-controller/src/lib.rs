//! The kubetrain operator as a library: the TrainJob controller that renders TrainJobs into JobSets and
//! their companions with server-side apply, the admission webhooks, Lease-based leader election and the
//! Prometheus metrics. `kubetrain-operator` (in `examples/operator`) is a thin composition of this crate.
//!
//! | module | job |
//! |---|---|
//! | [`controller`] | the kube-runtime Controller and [`run`]: watches, reconcile, error policy |
//! | [`webhook`] | HTTPS admission webhooks (validating and runtimePatches defaulting) |
//! | [`election`], [`Leadership`] | Lease leader election and the "may I write" view it drives |
//! | [`http`], [`metrics`], [`PlatformMetrics`] | `/healthz`, `/readyz`, `/metrics` and the Prometheus metrics (platform view: queue wait, outcomes, GPU-seconds) |
//! | [`optimization`] | the OptimizationJob controller: hyperparameter searches whose trials are TrainJobs ([docs/optimize.md](https://github.com/kubetrain/kubetrain/blob/main/docs/optimize.md)) |
//! | [`runtime_finalizer`] | removes the legacy `resource-in-use` finalizer from runtimes, as upstream v2.3 |
//! | [`config`] | upstream's `Configuration` file (`config.trainer.kubeflow.org/v1alpha1`): strict reading, defaults, the effective settings |
//! | [`certs`] | built-in webhook certificates (`certManagement.enable`): CA and serving certificate in a Secret, CA injection, rotation |
//! | [`metrics_auth`] | who may scrape `/metrics` (`metrics.auth.enabled`): TokenReview and SubjectAccessReview |
//! | [`permissions`] | the RBAC rules the controller needs (the install manifests are tested against them) |
//! | [`operator`] | [`Operator`]: every part above run side by side, with graceful shutdown (the `kubetrain-operator` binary is flags plus one call); an embedder's render plugins with [`Operator::plugin`] ([docs/plugins.md](https://github.com/kubetrain/kubetrain/blob/main/docs/plugins.md)) |
//! | [`status_server`] | upstream's TrainJob status server: progress and metrics from the training pods into `status.trainerStatus` |
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `ring` | yes | rustls with the ring crypto provider for the kube client; `rustls::crypto::ring` for the provider the webhook and status servers take |
//! | `aws-lc-rs` | no | the same with aws-lc-rs (turn `ring` off with `default-features = false`) |
//! | `cel` | yes | the CRDs' CEL rules evaluated with kube-cel by the admission webhooks (kubetrain-api's `cel`); without it, rules the native evaluator does not cover are skipped |
//!
//! The servers take their `CryptoProvider` as an argument, so the provider is the binary's choice; the
//! features only decide which one the kube client and rustls are built with.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod applied;
mod apply;
pub mod audit;
mod backoff;
mod cache;
#[cfg(test)]
mod cache_scenarios;
pub mod certs;
pub mod config;
pub mod controller;
#[cfg(test)]
mod count_write_scenarios;
mod count_writes;
pub mod election;
mod error;
mod events;
#[cfg(test)]
mod fixtures;
pub mod http;
mod leadership;
pub mod metrics;
pub mod metrics_auth;
pub mod operator;
pub mod optimization;
pub mod permissions;
mod platform;
mod reconcile;
pub mod runtime_finalizer;
#[cfg(test)]
mod scenarios;
mod serving;
mod settings;
mod snapshots;
pub mod status_server;
mod verdicts;
pub mod webhook;

pub use controller::run;
pub use count_writes::CountWriteBudget;
pub use error::{Error, Result};
pub use leadership::Leadership;
pub use metrics::ControllerMetrics;
pub use operator::{Operator, OperatorError};
pub use platform::PlatformMetrics;
pub use settings::{EVENT_REPORTER, FIELD_MANAGER, Settings};

/// The rustls crypto provider of this build: ring with the `ring` feature (default), else aws-lc-rs with
/// `aws-lc-rs`, else the process-wide default (`CryptoProvider::install_default`), `None` when there is none.
pub fn default_crypto_provider() -> Option<std::sync::Arc<rustls::crypto::CryptoProvider>> {
    #[cfg(feature = "ring")]
    return Some(std::sync::Arc::new(rustls::crypto::ring::default_provider()));
    #[cfg(all(feature = "aws-lc-rs", not(feature = "ring")))]
    return Some(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ));
    #[cfg(not(any(feature = "ring", feature = "aws-lc-rs")))]
    rustls::crypto::CryptoProvider::get_default().cloned()
}

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
