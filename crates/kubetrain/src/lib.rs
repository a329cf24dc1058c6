//! # kubetrain
//!
//! Kubeflow Trainer V2 (`trainer.kubeflow.org/v1alpha1`, as of upstream v2.3) in Rust. This crate is the front
//! door: it re-exports the workspace's crates behind features, so one dependency line gives a tool what it
//! needs.
//!
//! | feature | module | crate |
//! |---|---|---|
//! | (always) | [`api`] | `kubetrain-api`: types, CRDs, validation |
//! | `render` (default) | `merge`, `jobset`, [`plugins`] | `kubetrain-merge`, `kubetrain-jobset`: TrainJob + runtime → JobSet; the plugin API |
//! | `yaml` | `yaml` | `kubetrain-yaml`: fast YAML reader and writer, streaming multi-document reading |
//! | `kueue` | `kueue` | `kubetrain-kueue`: admission model and simulator |
//! | `collective` | `collective` | `kubetrain-collective`: NCCL / CPU collectives |
//! | `initializer` | `initializer` | `kubetrain-initializer`: s3:// and hf:// downloads |
//! | `migrate` | `migrate` | `kubetrain-migrate`: Training Operator v1 jobs to TrainJobs, with a report |
//! | `tenancy` | `tenancy` | `kubetrain-tenancy`: the training policy, team onboarding, the multi-tenancy checklist |
//! | `optimize` | `optimize` | `kubetrain-optimize`: hyperparameter search samplers (random, grid, TPE) and median stopping |
//! | `client` | `client` | `kubetrain-client`: the TrainerClient SDK (Kubernetes and local processes) |
//! | `controller` | `controller` | `kubetrain-controller`: the operator (controller, webhooks, leader election, metrics) |
//! | `latest`, `earliest`, `v1_33` … `v1_37` | [`k8s_openapi`] | the Kubernetes version of the `k8s-openapi` types |
//!
//! Switches inside the modules, forwarded to every crate that has them (as kube-rs's facade forwards its
//! own); each applies only to the modules enabled:
//!
//! | feature | default | what it switches |
//! |---|---|---|
//! | `cel` | yes | the CRDs' CEL rules evaluated with kube-cel (50 more crates), the fallback of the native evaluator; without it, rules the native evaluator does not cover are skipped |
//! | `nccl` | yes | with `collective`: the NCCL backend (cudarc, loaded at run time, so it builds without CUDA) |
//! | `ring` | yes | with `client` or `controller`: rustls with the ring crypto provider |
//! | `aws-lc-rs` | no | with `client` or `controller`: rustls with the aws-lc-rs crypto provider (used when `ring` is off) |
//!
//! The smallest build, for a tool that only validates and renders, turns the defaults off:
//!
//! ```toml
//! [dependencies]
//! kubetrain = { version = "0.1", default-features = false, features = ["latest", "render"] }
//! ```
//!
//! It builds neither kube-cel, nor cudarc, nor a TLS stack (`scripts/check-minimal-facade.sh` checks this
//! in CI). The `initializer` module always uses rustls with ring (object_store's TLS).
//!
//! Like kube-rs, the libraries pick no Kubernetes version; the binary does. This crate forwards the
//! `k8s-openapi` version features, so one line is all a first build needs (enable exactly one version, and
//! only in a binary):
//!
//! ```toml
//! [dependencies]
//! kubetrain = { version = "0.1", features = ["latest", "client"] }
//! ```
//!
//! The `k8s-openapi` this crate was built with is re-exported as [`k8s_openapi`], so the Kubernetes types
//! need no dependency line of their own either.
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

/// The Kubernetes types (the crate the kubetrain types are built on; its version is chosen with the
/// `latest` / `v1_3x` features of this crate).
#[doc(no_inline)]
pub use k8s_openapi;

#[cfg(feature = "render")]
#[cfg_attr(docsrs, doc(cfg(feature = "render")))]
#[doc(inline)]
pub use kubetrain_merge as merge;

#[cfg(feature = "render")]
#[cfg_attr(docsrs, doc(cfg(feature = "render")))]
#[doc(inline)]
pub use kubetrain_jobset as jobset;

#[cfg(feature = "yaml")]
#[cfg_attr(docsrs, doc(cfg(feature = "yaml")))]
#[doc(inline)]
pub use kubetrain_yaml as yaml;

/// What a render plugin implements and how it is registered, in one place: the extension points of
/// [`merge::plugins`] and the component builder and registry of [`jobset::plugins`]. Writing, testing and
/// running a plugin (the operator's `Operator::plugin`, the local runner's `LocalOptions::plugins`):
/// [docs/plugins.md](https://github.com/kubetrain/kubetrain/blob/main/docs/plugins.md).
///
/// ```
/// use kubetrain::api::TrainJob;
/// use kubetrain::plugins::{EnforcePodGroupPolicy, Info, MergeError, Plugin, Registry, RenderPlugin};
///
/// struct ToyGang;
///
/// impl Plugin for ToyGang {
///     fn name(&self) -> &str { "ToyGang" }
///     fn pod_group_policy(&self) -> Option<&dyn EnforcePodGroupPolicy> { Some(self) }
/// }
///
/// impl EnforcePodGroupPolicy for ToyGang {
///     fn enforce_pod_group_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
///         info.scheduler.pod_labels.insert("toy.example.com/gang".into(), job.name().into());
///         Ok(())
///     }
/// }
///
/// impl RenderPlugin for ToyGang {}
///
/// let mut registry = Registry::builtin(&Default::default());
/// registry.register(ToyGang).unwrap();
/// assert!(registry.plugins().get("ToyGang").is_some());
/// ```
#[cfg(feature = "render")]
#[cfg_attr(docsrs, doc(cfg(feature = "render")))]
pub mod plugins {
    pub use kubetrain_jobset::object::child_meta;
    pub use kubetrain_jobset::plugins::{BuildContext, ComponentBuilder, Registry, RenderPlugin};
    pub use kubetrain_jobset::{DynamicObject, Object, Observed, RenderError, RenderOptions};
    pub use kubetrain_merge::plugins::{
        CustomValidation, DuplicatePlugin, EnforceMlPolicy, EnforcePodGroupPolicy, EnforcePodSpec,
        Plugin, PreComponentBuilder,
    };
    pub use kubetrain_merge::{Info, MergeError};
}

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

#[cfg(feature = "migrate")]
#[cfg_attr(docsrs, doc(cfg(feature = "migrate")))]
#[doc(inline)]
pub use kubetrain_migrate as migrate;

#[cfg(feature = "tenancy")]
#[cfg_attr(docsrs, doc(cfg(feature = "tenancy")))]
#[doc(inline)]
pub use kubetrain_tenancy as tenancy;

#[cfg(feature = "optimize")]
#[cfg_attr(docsrs, doc(cfg(feature = "optimize")))]
#[doc(inline)]
pub use kubetrain_optimize as optimize;

#[cfg(feature = "client")]
#[cfg_attr(docsrs, doc(cfg(feature = "client")))]
#[doc(inline)]
pub use kubetrain_client as client;

#[cfg(feature = "controller")]
#[cfg_attr(docsrs, doc(cfg(feature = "controller")))]
#[doc(inline)]
pub use kubetrain_controller as controller;

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
