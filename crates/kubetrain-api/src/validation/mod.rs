//! Offline validation of trainer objects, as the API server and upstream's admission webhooks would do it.
//!
//! Three layers, all reported at once with field paths:
//! 1. the CRD schema's value constraints (lengths, ranges, item counts, enums, list-map keys);
//! 2. the CRD's CEL rules (`x-kubernetes-validations`): natively when every rule of the schema has a recognised
//!    shape (the TrainJob CRD's do), else with kube-cel, which stays the reference and the fallback for values the
//!    native evaluator does not model;
//! 3. upstream's webhook rules: the runtime must exist, reserved env names per ML policy, initializer jobs,
//!    runtime-patch targets, MPI and torchtune rules, replicas of ancestor jobs.
//!
//! Both schemas are compiled once per process; a typical TrainJob is serialised to JSON once and validated in a few
//! microseconds (`cargo bench -p kubetrain-benches --bench validate`, figures in docs/benchmarks.md).
//!
//! What needs a live cluster is left to the operator: that a Volcano `priorityClassName` exists, and whether a
//! running JobSet blocks a runtime-patch update (pass the JobSet to [`validate_trainjob_update`] when known).
//!
//! ```
//! use kubetrain_api::{parse_documents, Document, RuntimeCatalog};
//! use kubetrain_api::validation::validate_document;
//!
//! let docs = parse_documents(r#"
//! apiVersion: trainer.kubeflow.org/v1alpha1
//! kind: TrainJob
//! metadata: {name: Bad_Name}
//! spec:
//!   runtimeRef: {name: missing}
//!   trainer: {numNodes: -1}
//! "#).unwrap();
//! let errors = validate_document(&docs[0].document, &RuntimeCatalog::new());
//! let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
//! assert!(shown.contains(&"TrainJob/Bad_Name: spec.trainer.numNodes: Invalid value: -1: should be greater than or equal to 0".to_owned()));
//! assert!(shown.iter().any(|e| e.contains("metadata.name must match RFC 1035 DNS label format")));
//! assert!(shown.iter().any(|e| e.starts_with("TrainJob/Bad_Name: spec.RuntimeRef: Invalid value: {\"name\":\"missing\",\"apiGroup\":\"trainer.kubeflow.org\",\"kind\":\"ClusterTrainingRuntime\"}: ClusterTrainingRuntime.trainer.kubeflow.org \"missing\" not found")));
//! ```

mod cel;
mod cel_native;
mod cel_rules;
// Native evaluator versus kube-cel: needs the reference.
#[cfg(all(test, feature = "cel"))]
mod differential_tests;
mod go_json;
mod optimization;
mod schema;
mod webhook;

use serde::Serialize;
use serde_json::Value;

pub use optimization::{MEDIAN, TPE, validate_optimizationjob, validate_optimizationjob_object};
pub use webhook::gpus_per_node;

use crate::catalog::RuntimeCatalog;
use crate::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, SUPPORT_DEPRECATED, SUPPORT_LABEL, WEBHOOK_VALIDATION_LABEL,
};
use crate::document::Document;
use crate::error::FieldError;
use crate::jobset::JobSet;
use crate::{ClusterTrainingRuntime, TrainJob, TrainingRuntime};
use cel::SchemaKind;

/// Validates any parsed document; TrainJobs are resolved against `catalog`.
pub fn validate_document(document: &Document, catalog: &RuntimeCatalog) -> Vec<FieldError> {
    match document {
        Document::TrainJob(job) => validate_trainjob(job, catalog),
        Document::TrainingRuntime(runtime) => validate_training_runtime(runtime),
        Document::ClusterTrainingRuntime(runtime) => validate_cluster_training_runtime(runtime),
        Document::OptimizationJob(job) => validate_optimizationjob(job, catalog),
        Document::Other { .. } => Vec::new(),
    }
}

/// Validates a new TrainJob: schema, CEL and webhook rules.
pub fn validate_trainjob(job: &TrainJob, catalog: &RuntimeCatalog) -> Vec<FieldError> {
    let mut errors = schema_and_cel(SchemaKind::TrainJob, job, None);
    webhook::trainjob(job, catalog, &mut errors);
    resource_quantities(job, &mut errors);
    // Valid upstream (the schema's minimum is 0), but almost always a mistake: say so.
    if job.spec.trainer.as_ref().and_then(|t| t.num_nodes) == Some(0) {
        errors.push(FieldError::warning(
            "spec.trainer.numNodes",
            "numNodes is 0: the job runs no trainer pods (it completes without training)",
        ));
    }
    attribute(errors, "TrainJob", job.name())
}

/// Validates a TrainJob on its own: the CRD schema, its CEL rules and resource quantities — what the API
/// server enforces, so no TrainJob stored in a cluster breaks them. The render entry points of
/// `kubetrain-jobset` run it, so that they never render what the API server would refuse. The webhook's rules
/// between a TrainJob and its runtime are [`validate_trainjob`]'s.
pub fn validate_trainjob_object(job: &TrainJob) -> Vec<FieldError> {
    let mut errors = schema_and_cel(SchemaKind::TrainJob, job, None);
    resource_quantities(job, &mut errors);
    attribute(errors, "TrainJob", job.name())
}

/// Validates an update of a TrainJob: CEL transition rules (immutable fields) and the runtime-patch rules
/// (patches change only while suspended, and not while the JobSet still has active jobs).
pub fn validate_trainjob_update(
    old: &TrainJob,
    new: &TrainJob,
    catalog: &RuntimeCatalog,
    jobset: Option<&JobSet>,
) -> Vec<FieldError> {
    let mut errors = schema_and_cel(SchemaKind::TrainJob, new, Some(old));
    webhook::trainjob(new, catalog, &mut errors);
    resource_quantities(new, &mut errors);
    if old.spec.runtime_patches != new.spec.runtime_patches {
        if !old.spec.is_suspended() && !new.spec.is_suspended() {
            errors.push(FieldError::error(
                "spec.runtimePatches",
                "Forbidden: RuntimePatches can only be modified when the TrainJob is suspended before or after the update",
            ));
        } else if let Some(status) = jobset.and_then(|j| j.status.as_ref())
            && let Some(active) = status.replicated_jobs_status.iter().find(|s| s.active > 0)
        {
            errors.push(FieldError::error(
                    "spec.runtimePatches",
                    format!(
                        "Forbidden: RuntimePatches cannot be modified when the JobSet's ReplicatedJob {} is still active",
                        active.name
                    ),
                ));
        }
    }
    attribute(errors, "TrainJob", new.name())
}

/// Validates a TrainingRuntime.
pub fn validate_training_runtime(runtime: &TrainingRuntime) -> Vec<FieldError> {
    let mut errors = schema_and_cel(SchemaKind::Runtime, runtime, None);
    if !webhook_disabled(&runtime.metadata) {
        webhook::runtime(&runtime.spec, &mut errors);
    }
    attribute(errors, "TrainingRuntime", runtime.name())
}

/// Validates a ClusterTrainingRuntime (a deprecated one also gets a warning).
pub fn validate_cluster_training_runtime(runtime: &ClusterTrainingRuntime) -> Vec<FieldError> {
    let mut errors = schema_and_cel(SchemaKind::Runtime, runtime, None);
    if !webhook_disabled(&runtime.metadata) {
        webhook::runtime(&runtime.spec, &mut errors);
        let labels = runtime.metadata.labels.as_ref();
        if labels
            .and_then(|l| l.get(SUPPORT_LABEL))
            .map(String::as_str)
            == Some(SUPPORT_DEPRECATED)
        {
            errors.push(FieldError::warning(
                "metadata.labels",
                format!(
                    "ClusterTrainingRuntime {:?} is deprecated and will be removed in a future release of Kubeflow Trainer. See runtime deprecation policy: {}",
                    runtime.name(),
                    crate::constants::DEPRECATION_POLICY_URL
                ),
            ));
        }
    }
    attribute(errors, CLUSTER_TRAINING_RUNTIME_KIND, runtime.name())
}

/// Runtimes labelled `trainer.kubeflow.org/webhook-validation: disabled` skip the webhook (its objectSelector).
/// The pod validation the API server would apply to `resourcesPerNode` once it reaches a pod, here at the
/// TrainJob so that `validate`, `render`, `run` and the webhook refuse the same values with a field path:
/// every value is a quantity (`1e999999999` is not: its exponent is out of range), none is negative, none
/// exceeds what Kubernetes reads as an `int64` value (`1e26` GPUs), and extended resources (`nvidia.com/gpu`)
/// are whole numbers.
fn resource_quantities(job: &TrainJob, errors: &mut Vec<FieldError>) {
    use crate::quantity::Nanos;
    const NANO: i128 = 1_000_000_000;
    let Some(resources) = job
        .spec
        .trainer
        .as_ref()
        .and_then(|t| t.resources_per_node.as_ref())
    else {
        return;
    };
    for (field, list) in [
        ("requests", &resources.requests),
        ("limits", &resources.limits),
    ] {
        for (name, quantity) in list.iter().flatten() {
            let path = format!("spec.trainer.resourcesPerNode.{field}[{name}]");
            let text = &quantity.0;
            let nanos = match Nanos::parse(text) {
                Ok(nanos) => nanos,
                Err(error) => {
                    errors.push(FieldError::error(
                        path,
                        format!("Invalid value: {text:?}: {error}"),
                    ));
                    continue;
                }
            };
            if nanos.0 < 0 {
                errors.push(FieldError::error(
                    path,
                    format!("Invalid value: {text:?}: must be greater than or equal to 0"),
                ));
            } else if nanos.0 > i128::from(i64::MAX) * NANO {
                errors.push(FieldError::error(
                    path,
                    format!(
                        "Invalid value: {text:?}: must be less than or equal to {} (the largest value Kubernetes reads)",
                        i64::MAX
                    ),
                ));
            } else if is_extended_resource(name) && nanos.0 % NANO != 0 {
                errors.push(FieldError::error(
                    path,
                    format!("Invalid value: {text:?}: must be an integer"),
                ));
            }
        }
    }
}

/// Extended resources (`example.com/foo`, `nvidia.com/gpu`): whole units only, as the API server requires.
fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.starts_with("kubernetes.io/") && !name.contains(".kubernetes.io/")
}

fn webhook_disabled(metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(WEBHOOK_VALIDATION_LABEL))
        .is_some_and(|v| v == "disabled")
}

fn schema_and_cel<T: Serialize>(kind: SchemaKind, object: &T, old: Option<&T>) -> Vec<FieldError> {
    let Ok(value) = serde_json::to_value(object) else {
        return Vec::new();
    };
    let old = old.and_then(|o| serde_json::to_value(o).ok());
    schema_and_cel_value(kind, &value, old.as_ref())
}

/// Schema constraints, then CEL rules, on one serialised value (shared by both).
fn schema_and_cel_value(kind: SchemaKind, value: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(constraints) = cel::constraints(kind) {
        schema::check(constraints, value, &mut errors);
    }
    errors.extend(cel::check(kind, value, old));
    errors
}

fn attribute(errors: Vec<FieldError>, kind: &str, name: &str) -> Vec<FieldError> {
    errors.into_iter().map(|e| e.on(kind, name)).collect()
}

/// Checks a raw JSON value against the TrainJob CRD schema and CEL rules without typed parsing (for webhooks
/// that receive JSON).
pub fn validate_trainjob_value(value: &Value, old: Option<&Value>) -> Vec<FieldError> {
    schema_and_cel_value(SchemaKind::TrainJob, value, old)
}
