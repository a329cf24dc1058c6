//! The CRD's CEL rules (`x-kubernetes-validations`).
//!
//! kube-cel is the reference. When every rule of a schema is of a shape [`super::cel_rules`] recognises, the
//! native evaluator ([`super::cel_native`]) runs instead (about a hundred times faster: no CEL values are built,
//! no regex is compiled per call, only paths that lead to rules are visited). If the native evaluator meets a
//! value it does not model exactly, that object goes to kube-cel, so the findings are always kube-cel's, with one
//! exception: on updates the native evaluator hands an item of a `listType: map` list the old item with the same
//! keys, as the API server does, where kube-cel takes the old item at the same index (a runtime patch added in
//! front of Kueue's would otherwise be reported as `manager: field is immutable`).
//!
//! Without the crate feature `cel` there is no kube-cel: the native evaluator still checks the rules it
//! recognises (every TrainJob rule) on the values it models, and the rest are skipped without a finding.

use std::sync::OnceLock;

#[cfg(feature = "cel")]
use kube::core::cel::{CompiledSchema, ErrorKind, Validator, compile_schema};
use serde_json::Value;

use super::cel_native::{self, Shape};
use super::schema::{self, Constraints};
use crate::crd::{
    optimizationjob_validation_schema, runtime_validation_schema, trainjob_validation_schema,
};
use crate::error::FieldError;

/// Which schema an object is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SchemaKind {
    TrainJob,
    Runtime,
    OptimizationJob,
}

impl SchemaKind {
    fn schema(self) -> &'static Value {
        match self {
            SchemaKind::TrainJob => trainjob_validation_schema(),
            SchemaKind::Runtime => runtime_validation_schema(),
            SchemaKind::OptimizationJob => optimizationjob_validation_schema(),
        }
    }

    fn index(self) -> usize {
        match self {
            SchemaKind::TrainJob => 0,
            SchemaKind::Runtime => 1,
            SchemaKind::OptimizationJob => 2,
        }
    }
}

#[cfg(feature = "cel")]
struct Reference {
    validator: Validator,
    schema: CompiledSchema,
}

/// kube-cel's compiled schema, built on first use (only objects that need it pay for it).
#[cfg(feature = "cel")]
fn reference(kind: SchemaKind) -> &'static Reference {
    static CELLS: [OnceLock<Reference>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    CELLS[kind.index()].get_or_init(|| Reference {
        validator: Validator::new(),
        schema: compile_schema(kind.schema()),
    })
}

/// The native rule tree, or `None` when some rule of the schema is not recognised.
pub(crate) fn native(kind: SchemaKind) -> Option<&'static Shape> {
    static CELLS: [OnceLock<Option<Shape>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    CELLS[kind.index()]
        .get_or_init(|| cel_native::compile(kind.schema()))
        .as_ref()
}

/// The schema's value constraints, compiled once.
pub(crate) fn constraints(kind: SchemaKind) -> Option<&'static Constraints> {
    static CELLS: [OnceLock<Option<Constraints>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    CELLS[kind.index()]
        .get_or_init(|| schema::compile(kind.schema()))
        .as_ref()
}

/// Evaluates every CEL rule of the kind's schema on `object` (and transition rules against `old`).
pub(crate) fn check(kind: SchemaKind, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    if let Some(shape) = native(kind)
        && let Ok(errors) = cel_native::check(shape, object, old)
    {
        return errors;
    }
    #[cfg(feature = "cel")]
    return check_with_kube_cel(kind, object, old);
    // Without kube-cel, rules the native evaluator cannot decide are skipped (module docs).
    #[cfg(not(feature = "cel"))]
    return Vec::new();
}

/// The reference: kube-cel's `validate_compiled` (its order of findings follows its hash maps).
#[cfg(feature = "cel")]
pub(crate) fn check_with_kube_cel(
    kind: SchemaKind,
    object: &Value,
    old: Option<&Value>,
) -> Vec<FieldError> {
    let compiled = reference(kind);
    match compiled
        .validator
        .validate_compiled(&compiled.schema, object, old)
    {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .map(|e| {
                let message = match e.kind {
                    ErrorKind::ValidationFailure => e.message,
                    _ => format!("{} (rule {:?})", e.message, e.rule),
                };
                FieldError::error(e.field_path, message)
            })
            .collect(),
    }
}
