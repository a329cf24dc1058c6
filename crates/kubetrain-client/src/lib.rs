//! TrainerClient SDK: train, list, get, logs, wait and delete TrainJobs on Kubernetes or as local
//! processes — the Rust counterpart of Kubeflow's Python `TrainerClient`.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
//!
//! One [`TrainerClient`] over a [`Backend`]:
//! - [`LocalProcessBackend`] renders the TrainJob to its JobSet (as the controller would) and runs every
//!   pod as local processes with the pod's env ([`local`]);
//! - [`KubernetesBackend`] talks to a cluster through kube-rs ([`kubernetes`]), from the kubeconfig or the
//!   in-cluster config.
//!
//! Training code inside a TrainJob reports its progress to the operator with [`progress`] (the Python SDK's
//! `update_trainjob_status`).
//!
//! The SDK's types keep the names of Kubeflow's Python SDK (`kubeflow.trainer`), so that code and docs
//! translate one to one: [`TrainerClient`], [`Trainer`], [`JobStatus`], [`Initializer`],
//! [`DatasetInitializer`](initializers::DatasetInitializer), [`ModelInitializer`](initializers::ModelInitializer),
//! [`BuiltinTrainer`], [`TorchTuneConfig`], [`DataType`](trainer::DataType) and the others. Some of these
//! names also exist in kubetrain-api (`Trainer`, `JobStatus`, the initializers) for the TrainJob's own API
//! fields: the SDK's type is the one a user writes, and [`build`] turns it into the API's.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), kubetrain_client::ClientError> {
//! use std::time::Duration;
//! use futures_util::StreamExt;
//! use kubetrain_client::{JobStatus, LocalProcessBackend, LogOptions, Trainer, TrainerClient};
//!
//! let runs = tempfile::tempdir().unwrap();
//! let client = TrainerClient::new(LocalProcessBackend::new().with_runs_under(runs.path()));
//! assert!(client.list_runtimes().await?.iter().any(|r| r.name == "torch-distributed"));
//!
//! let trainer = Trainer::command(["sh", "-c", "echo node $PET_NODE_RANK master $PET_MASTER_ADDR"]).with_num_nodes(2);
//! let name = client.train().runtime("torch-distributed").trainer(trainer).name("hello").await?;
//! client.wait_for_job(&name).status([JobStatus::Complete]).polling_interval(Duration::from_millis(50)).await?;
//!
//! let logs: Vec<String> = client.get_job_logs(&name, &LogOptions::default()).await?
//!     .map(|l| l.unwrap()).collect().await;
//! assert_eq!(logs, ["node 0 master 127.0.0.1"]);
//! # Ok(()) }
//! ```
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `kubernetes` | yes | [`KubernetesBackend`] and the `kubernetes` module (kube-rs client; kubeconfig or in-cluster config) |
//! | `local` | yes | [`LocalProcessBackend`] and the `local` module: one process per pod, the run ledger, the local queue (Kueue's model, kubetrain-kueue), process groups (nix) |
//! | `ring` | yes | rustls with the ring crypto provider, for the kube client and the [`progress`] reporter |
//! | `aws-lc-rs` | no | rustls with the aws-lc-rs crypto provider (used when `ring` is off) |
//! | `cel` | yes | the CRDs' CEL rules evaluated with kube-cel when a TrainJob is validated (kubetrain-api's `cel`); without it, rules the native evaluator does not cover are skipped |
//!
//! Without `kubernetes` and `local` the crate is the SDK's types, the request building and the progress
//! reporter; a [`Backend`] of your own plugs into [`TrainerClient`]. Without a provider feature the
//! reporter uses the process-wide rustls provider (`CryptoProvider::install_default`) and reports a
//! configuration error when none is installed.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
pub mod build;
pub mod client;
mod device;
pub mod error;
pub mod initializers;
#[cfg(feature = "kubernetes")]
pub mod kubernetes;
pub mod labels;
#[cfg(feature = "local")]
pub mod local;
pub mod optimize;
pub mod progress;
pub mod trainer;
pub mod types;

pub use backend::{Backend, LogStream, TrainerClient};
pub use client::{RuntimeChoice, TrainRequest, WaitRequest};
pub use error::{ClientError, Result};
pub use initializers::Initializer;
#[cfg(feature = "kubernetes")]
pub use kubernetes::{KubernetesBackend, KubernetesBackendConfig};
#[cfg(feature = "local")]
pub use local::LocalProcessBackend;
pub use trainer::{BuiltinTrainer, FunctionTrainer, TorchTuneConfig, TrainerSpec};
pub use types::{
    Event, JobStatus, LogOptions, Runtime, RuntimeTrainer, Step, TrainJobView, TrainOptions,
    Trainer,
};

/// Entry points of the fuzz targets (`fuzz/`) into the local queue's crate-private ledger parser and
/// admission decision; built only by cargo-fuzz (`--cfg fuzzing`), never part of the API.
#[cfg(all(fuzzing, feature = "local"))]
#[doc(hidden)]
pub mod fuzz {
    pub use crate::local::queue::decide::decide;
    pub use crate::local::queue::ledger::parse;
}

// The SDK guide's examples are compiled and run with the crate's doctests (they use both backends).
#[cfg(all(doctest, feature = "kubernetes", feature = "local"))]
#[doc = include_str!("../../../docs/sdk.md")]
mod sdk_guide {}

#[cfg(all(doctest, feature = "local"))]
#[doc = include_str!("../../../docs/local-runner.md")]
mod local_runner_guide {}

// The README's example is compiled and run with the doctests.
#[cfg(all(doctest, feature = "local"))]
#[doc = include_str!("../README.md")]
mod readme {}
