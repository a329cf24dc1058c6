//! The CRD's CEL rules (`x-kubernetes-validations`), evaluated client-side with kube-cel.

use std::sync::OnceLock;

use kube::core::cel::{CompiledSchema, ErrorKind, Validator, compile_schema};
use serde_json::Value;

use crate::crd::{runtime_schema, trainjob_schema};
use crate::error::FieldError;

/// Which schema an object is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SchemaKind {
    TrainJob,
    Runtime,
}

struct Compiled {
    validator: Validator,
    schema: CompiledSchema,
}

fn compiled(kind: SchemaKind) -> &'static Compiled {
    static TRAINJOB: OnceLock<Compiled> = OnceLock::new();
    static RUNTIME: OnceLock<Compiled> = OnceLock::new();
    let (cell, schema) = match kind {
        SchemaKind::TrainJob => (&TRAINJOB, trainjob_schema()),
        SchemaKind::Runtime => (&RUNTIME, runtime_schema()),
    };
    cell.get_or_init(|| Compiled {
        validator: Validator::new(),
        schema: compile_schema(schema),
    })
}

/// Evaluates every CEL rule of the kind's schema on `object` (and transition rules against `old`).
pub(crate) fn check(kind: SchemaKind, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let compiled = compiled(kind);
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
