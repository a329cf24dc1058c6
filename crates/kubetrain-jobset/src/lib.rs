//! Renders a merged TrainJob into a JobSet and its companion objects; maps JobSet status back to the TrainJob.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust.
//!
//! ```
//! use kubetrain_api::{parse_documents, Document};
//! use kubetrain_jobset::{builtin, render, resolve, Observed, ssh::seeded_rng};
//!
//! let docs = parse_documents(r#"
//! apiVersion: trainer.kubeflow.org/v1alpha1
//! kind: TrainJob
//! metadata: {name: mnist, namespace: default}
//! spec:
//!   runtimeRef: {name: torch-distributed}
//!   trainer: {numNodes: 2, resourcesPerNode: {limits: {cpu: "4"}}}
//! "#).unwrap();
//! let Document::TrainJob(job) = &docs[0].document else { unreachable!() };
//! let catalog = builtin::catalog();
//! let out = render(job, resolve(&catalog, job).unwrap(), &Observed::default(), &mut seeded_rng(0)).unwrap();
//! let jobset = out.objects[0].as_jobset().unwrap();
//! let node = &jobset.spec.replicated_jobs[0];
//! assert_eq!(node.template.spec.as_ref().unwrap().parallelism, Some(2));
//! let env = node.template.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].env.as_ref().unwrap();
//! assert!(env.iter().any(|e| e.name == "PET_NPROC_PER_NODE" && e.value.as_deref() == Some("4")));
//! ```
//!
//! - [`render()`]: TrainJob + runtime + observed facts + randomness → objects; pure and deterministic.
//!   [`render_with()`] also takes [`RenderOptions`] (the optional TrainJobStatus plugin);
//!   [`render_with_registry()`] runs a [`plugins::Registry`] with custom plugins beside the built-ins
//!   ([docs/plugins.md](https://github.com/kubetrain/kubetrain/blob/main/docs/plugins.md)).
//! - [`resolve()`]: `runtimeRef` resolution against a `RuntimeCatalog`, e.g. [`builtin::catalog`].
//! - [`status::sync_status`]: JobSet status → TrainJob status.
//! - [`ssh`]: MPI key material in upstream's format.
//! - [`flux`]: the Flux entrypoint ConfigMap and CURVE certificate Secret.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod builder;
pub mod builtin;
pub mod canonical;
pub mod companions;
pub mod disruption;
mod error;
pub mod flux;
pub mod object;
mod options;
pub mod plugins;
mod render;
mod runtimes;
pub mod ssh;
pub mod status;

pub use error::{MAX_HOSTFILE_ENTRIES, RenderError};
pub use kubetrain_merge::plugins::trainjobstatus::StatusServerAddress;
pub use object::{DynamicObject, Object};
pub use options::{CaCert, Observed, ObservedJobSet, RenderOptions, TrainJobStatusOptions};
pub use render::{Rendered, render, render_trainjob, render_with, render_with_registry};
pub use runtimes::resolve;

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
