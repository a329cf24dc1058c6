//! Offline validation of OptimizationJobs: upstream's CRD (schema and CEL rules, on the object with its
//! defaults, as the API server sees it), then what kubetrain's controller needs to run the search, each finding
//! at its field path: bounds that parse to finite numbers and, for `Int`, contain an integer; parameter names
//! whose env vars do not collide; known values of kubetrain's annotations; and the trial TrainJob against its
//! runtime (upstream's TrainJob webhook rules), reported under `spec.trainJobTemplate`.

use std::collections::BTreeMap;

use super::cel::SchemaKind;
use crate::catalog::RuntimeCatalog;
use crate::error::FieldError;
use crate::optimizationjob::{
    OptimizationJob, annotations, parameter_env_name, parse_double, trial_train_job,
};
use crate::{ParameterType, SearchSpace};

/// The value of [`annotations::SEARCH_ALGORITHM`] that selects TPE.
pub const TPE: &str = "tpe";
/// The value of [`annotations::EARLY_STOPPING`] that selects the median stopping rule.
pub const MEDIAN: &str = "median";

/// Validates an OptimizationJob: the CRD schema and CEL rules (after defaulting), kubetrain's search rules,
/// and the trial TrainJob's runtime rules (`catalog` resolves its runtime).
pub fn validate_optimizationjob(
    job: &OptimizationJob,
    catalog: &RuntimeCatalog,
) -> Vec<FieldError> {
    let mut errors = validate_optimizationjob_rules(job);
    template_webhook(job, catalog, &mut errors);
    dedup(&mut errors);
    super::attribute(errors, "OptimizationJob", job.name())
}

/// Validates an OptimizationJob on its own (no runtime lookup): the CRD schema and CEL rules and kubetrain's
/// search rules. What the controller checks before it creates a trial.
pub fn validate_optimizationjob_object(job: &OptimizationJob) -> Vec<FieldError> {
    let mut errors = validate_optimizationjob_rules(job);
    dedup(&mut errors);
    super::attribute(errors, "OptimizationJob", job.name())
}

fn validate_optimizationjob_rules(job: &OptimizationJob) -> Vec<FieldError> {
    let mut errors = match serde_json::to_value(job) {
        Ok(mut value) => {
            crate::crd::apply_schema_defaults(
                &mut value,
                crate::crd::optimizationjob_validation_schema(),
            );
            super::schema_and_cel_value(SchemaKind::OptimizationJob, &value, None)
        }
        Err(e) => vec![FieldError::error("", e.to_string())],
    };
    parameters(job, &mut errors);
    kubetrain_annotations(job, &mut errors);
    errors
}

/// Bounds, integer ranges and env-name collisions of `spec.parameters`.
fn parameters(job: &OptimizationJob, errors: &mut Vec<FieldError>) {
    let mut env_names: BTreeMap<String, &str> = BTreeMap::new();
    for (i, parameter) in job.spec.parameters.iter().enumerate() {
        let path = format!("spec.parameters[{i}]");
        let env = parameter_env_name(&parameter.name);
        if let Some(other) = env_names.insert(env.clone(), &parameter.name)
            && other != parameter.name
        {
            errors.push(FieldError::error(
                format!("{path}.name"),
                format!(
                    "Invalid value: {:?}: parameters {other:?} and {:?} both become env var {env}; rename one",
                    parameter.name, parameter.name
                ),
            ));
        }
        bounds(
            &parameter.search_space,
            &format!("{path}.searchSpace"),
            errors,
        );
        let template_env = job
            .spec
            .train_job_template
            .spec
            .trainer
            .iter()
            .flat_map(|t| t.env.iter())
            .position(|e| e.name == env);
        if let Some(j) = template_env {
            errors.push(FieldError::warning(
                format!("spec.trainJobTemplate.spec.trainer.env[{j}]"),
                format!(
                    "{env} is set by the controller from parameter {:?}; the template's value is replaced in every trial",
                    parameter.name
                ),
            ));
        }
    }
}

fn bounds(space: &SearchSpace, path: &str, errors: &mut Vec<FieldError>) {
    let ranges = [
        space
            .uniform
            .as_ref()
            .map(|u| ("uniform", &u.min, &u.max, u.type_)),
        space
            .log_uniform
            .as_ref()
            .map(|u| ("logUniform", &u.min, &u.max, u.type_)),
    ];
    for (name, min, max, type_) in ranges.into_iter().flatten() {
        let min_path = format!("{path}.{name}.min");
        let max_path = format!("{path}.{name}.max");
        let (min, max) = match (parse_double(min, &min_path), parse_double(max, &max_path)) {
            (Ok(min), Ok(max)) => (min, max),
            (min, max) => {
                errors.extend(min.err());
                errors.extend(max.err());
                continue;
            }
        };
        // min < max and min > 0 are the CRD's rules, reported by CEL; only what they leave open is checked here (the
        // samplers need two integers to choose from).
        if type_ == Some(ParameterType::Int) && min < max && min.ceil() >= max.floor() {
            errors.push(FieldError::error(
                format!("{path}.{name}"),
                format!("Invalid value: [{min}, {max}]: type Int needs at least two integers between min and max"),
            ));
        }
    }
}

/// kubetrain's annotations: known values, and TPE only on top of `random` (whose seed it takes).
fn kubetrain_annotations(job: &OptimizationJob, errors: &mut Vec<FieldError>) {
    let Some(notes) = job.metadata.annotations.as_ref() else {
        return;
    };
    let path = |key: &str| format!("metadata.annotations[{key}]");
    if let Some(value) = notes.get(annotations::SEARCH_ALGORITHM) {
        if value != TPE {
            errors.push(FieldError::error(
                path(annotations::SEARCH_ALGORITHM),
                format!(
                    "Unsupported value: {value:?}: supported values: \"{TPE}\" (random and grid are spec.searchAlgorithm)"
                ),
            ));
        } else if job.spec.search_algorithm_or_default().grid.is_some() {
            errors.push(FieldError::error(
                path(annotations::SEARCH_ALGORITHM),
                "Invalid value: \"tpe\": TPE replaces random search; set spec.searchAlgorithm to random (its seed seeds TPE), not grid",
            ));
        }
    }
    if let Some(value) = notes.get(annotations::EARLY_STOPPING)
        && value != MEDIAN
    {
        errors.push(FieldError::error(
            path(annotations::EARLY_STOPPING),
            format!("Unsupported value: {value:?}: supported values: \"{MEDIAN}\""),
        ));
    }
}

/// Upstream's TrainJob webhook rules on the first trial (placeholder parameter values), re-rooted under
/// `spec.trainJobTemplate`. The template's schema and CEL rules are part of the OptimizationJob's own.
fn template_webhook(job: &OptimizationJob, catalog: &RuntimeCatalog, errors: &mut Vec<FieldError>) {
    let placeholders: BTreeMap<String, String> = job
        .spec
        .parameters
        .iter()
        .map(|p| {
            let space = &p.search_space;
            let value = space
                .uniform
                .as_ref()
                .map(|u| u.min.clone())
                .or_else(|| space.log_uniform.as_ref().map(|u| u.min.clone()))
                .or_else(|| {
                    space
                        .categorical
                        .as_ref()
                        .and_then(|c| c.choices.first().cloned())
                })
                .unwrap_or_default();
            (p.name.clone(), value)
        })
        .collect();
    let mut trial = trial_train_job(job, 0, &placeholders);
    if trial.metadata.namespace.is_none() {
        trial.metadata.namespace = job.metadata.namespace.clone();
    }
    let mut found = Vec::new();
    super::webhook::trainjob(&trial, catalog, &mut found);
    super::resource_quantities(&trial, &mut found);
    errors.extend(found.into_iter().map(|mut e| {
        e.path = reroot(&e.path);
        e
    }));
}

fn reroot(path: &str) -> String {
    if path.is_empty() {
        "spec.trainJobTemplate".to_owned()
    } else if let Some(rest) = path.strip_prefix("spec") {
        format!("spec.trainJobTemplate.spec{rest}")
    } else if let Some(rest) = path.strip_prefix("metadata") {
        format!("spec.trainJobTemplate.metadata{rest}")
    } else {
        format!("spec.trainJobTemplate.{path}")
    }
}

fn dedup(errors: &mut Vec<FieldError>) {
    let mut seen = std::collections::HashSet::new();
    errors.retain(|e| seen.insert((e.path.clone(), e.message.clone())));
}
