//! # kubetrain
//!
//! Kubeflow Trainer V2 (`trainer.kubeflow.org/v1alpha1`, as of upstream v2.3) in Rust. This crate is the front
//! door: it re-exports the workspace's crates behind features, so one dependency line gives a tool what it
//! needs.
//!
//! | feature | module | crate |
//! |---|---|---|
//! | (always) | [`api`] | `kubetrain-api`: types, CRDs, validation |
//! | `render` (default) | `merge`, `jobset` | `kubetrain-merge`, `kubetrain-jobset`: TrainJob + runtime → JobSet |
//! | `kueue` | `kueue` | `kubetrain-kueue`: admission model and simulator |
//! | `collective` | `collective` | `kubetrain-collective`: NCCL / CPU collectives |
//! | `initializer` | `initializer` | `kubetrain-initializer`: s3:// and hf:// downloads |
//! | `client` | `client` | `kubetrain-client`: the TrainerClient SDK (Kubernetes and local processes) |
//! | `controller` | `controller` | `kubetrain-controller`: the operator (controller, webhooks, leader election, metrics) |
//!
//! Like kube-rs, the libraries pick no Kubernetes version: enable one `k8s-openapi` version feature in your
//! binary, e.g. `k8s-openapi = { version = "0.29", features = ["latest"] }`.
//!
//! ```
//! use kubetrain::api::{parse_documents, RuntimeCatalog};
//! use kubetrain::api::validation::validate_document;
//!
//! let docs = parse_documents("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: demo}\nspec: {runtimeRef: {name: torch-distributed}}\n").unwrap();
//! let findings = validate_document(&docs[0].document, &RuntimeCatalog::new());
//! // No runtime is known to an empty catalog, so the lookup fails with upstream's message.
//! assert!(findings[0].to_string().contains("specified clusterTrainingRuntime must be created"));
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(inline)]
pub use kubetrain_api as api;

#[cfg(feature = "render")]
#[cfg_attr(docsrs, doc(cfg(feature = "render")))]
#[doc(inline)]
pub use kubetrain_merge as merge;

#[cfg(feature = "render")]
#[cfg_attr(docsrs, doc(cfg(feature = "render")))]
#[doc(inline)]
pub use kubetrain_jobset as jobset;

#[cfg(feature = "kueue")]
#[cfg_attr(docsrs, doc(cfg(feature = "kueue")))]
#[doc(inline)]
pub use kubetrain_kueue as kueue;

#[cfg(feature = "collective")]
#[cfg_attr(docsrs, doc(cfg(feature = "collective")))]
#[doc(inline)]
pub use kubetrain_collective as collective;

#[cfg(feature = "initializer")]
#[cfg_attr(docsrs, doc(cfg(feature = "initializer")))]
#[doc(inline)]
pub use kubetrain_initializer as initializer;

#[cfg(feature = "client")]
#[cfg_attr(docsrs, doc(cfg(feature = "client")))]
#[doc(inline)]
pub use kubetrain_client as client;

#[cfg(feature = "controller")]
#[cfg_attr(docsrs, doc(cfg(feature = "controller")))]
#[doc(inline)]
pub use kubetrain_controller as controller;
