//! # kubetrain-api
//!
//! The typed API of Kubeflow Trainer V2, `trainer.kubeflow.org/v1alpha1` as of upstream v2.3, for Rust tools and
//! operators: [`TrainJob`], [`TrainingRuntime`] and [`ClusterTrainingRuntime`], the JobSet
//! (`jobset.x-k8s.io/v1alpha2`) and PodGroup types they render into, CRD generation, and offline validation (the
//! CRD's CEL rules and upstream's webhook rules) with field-path errors.
//!
//! No client and no async runtime: the types work with `kube::Api` through the `k8s-openapi` resource traits, and
//! everything else is pure.
//!
//! ```
//! use kubetrain_api::{parse_documents, Document};
//!
//! let yaml = r#"
//! apiVersion: trainer.kubeflow.org/v1alpha1
//! kind: TrainJob
//! metadata:
//!   name: mnist
//! spec:
//!   runtimeRef:
//!     name: torch-distributed
//!   trainer:
//!     numNodes: 2
//! "#;
//! let docs = parse_documents(yaml).expect("valid YAML");
//! let Document::TrainJob(job) = &docs[0].document else { panic!("a TrainJob") };
//! assert_eq!(job.spec.trainer.as_ref().and_then(|t| t.num_nodes), Some(2));
//! assert_eq!(job.spec.runtime_ref.kind_or_default(), "ClusterTrainingRuntime");
//! ```
//!
//! Kubernetes version: like kube-rs, this crate does not pick a `k8s-openapi` version feature; a binary that uses
//! it enables one (e.g. `k8s-openapi = { version = "0.29", features = ["latest"] }`).
//!
//! ## Features
//!
//! | feature | default | what it does |
//! |---|---|---|
//! | `cel` | yes | evaluates the CRDs' CEL rules (`x-kubernetes-validations`) with kube-cel, the reference, wherever the built-in evaluator does not cover a rule or a value |
//!
//! Without `cel` (and its ~70 dependencies), [`validation`] still checks the schema constraints and upstream's
//! webhook rules, and the built-in evaluator still checks every TrainJob CEL rule on the values it models; the
//! CEL rules it does not cover (all of the runtimes' rules, and TrainJob values it does not model) are skipped
//! without a finding.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod catalog;
pub mod constants;
pub mod crd;
mod crd_facts;
pub mod defaulting;
mod document;
mod error;
pub mod jobset;
pub mod optimizationjob;
mod patch;
pub mod podgroup;
pub mod quantity;
mod resource;
mod runtime;
pub mod status_update;
pub mod stream;
pub mod torchtune;
mod trainjob;
pub mod validation;

pub use catalog::{RuntimeCatalog, RuntimeEntry};
pub use document::{Document, LocatedDocument, ParseError, parse_documents, parse_value, to_yaml};
pub use error::{FieldError, Severity};
pub use optimizationjob::{
    CategoricalSpace, GridAlgorithm, LogUniformSpace, Objective, ObjectiveDirection,
    OptimizationJob, OptimizationJobSpec, OptimizationJobStatus, OptimizationResult, Parameter,
    ParameterAssignment, ParameterType, RandomAlgorithm, SearchAlgorithm, SearchSpace,
    TrainJobTemplateSpec, UniformSpace,
};
pub use patch::{
    ContainerPatch, JobSetSpecPatch, JobSetTemplatePatch, JobSpecPatch, JobTemplatePatch,
    PodSpecPatch, PodTemplatePatch, ReplicatedJobPatch, RuntimePatch, TrainingRuntimeSpecPatch,
};
pub use runtime::{
    ClusterTrainingRuntime, CoschedulingPodGroupPolicySource, ELASTIC_MIN_LE_MAX,
    ELASTIC_NUM_NODES_IN_BOUNDS, FluxMLPolicySource, JAXMLPolicySource, JOB_LIFECYCLE_IN_TEMPLATE,
    JOBSET_TTL_IN_TEMPLATE, JobSetTemplateSpec, MLPolicy, MLPolicySource, MPIImplementation,
    MPIMLPolicySource, NetworkTopology, NetworkTopologyMode, ONLY_ONE_POLICY, PodGroupPolicy,
    PodGroupPolicySource, RunPolicy, TorchElasticPolicy, TorchEnvInjection,
    TorchEnvInjectionTarget, TorchMLPolicySource, TrainingRuntime, TrainingRuntimeSpec,
    VolcanoPodGroupPolicySource, XGBoostMLPolicySource,
};
pub use trainjob::{
    DatasetInitializer, Initializer, InitializerSource, JobStatus, Metric, ModelInitializer,
    RuntimeRef, TrainJob, TrainJobSpec, TrainJobStatus, Trainer, TrainerStatus, conditions,
};

/// Re-export of the `k8s-openapi` version this crate builds on.
pub use k8s_openapi;

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
