//! From an OptimizationJob's spec (and kubetrain's annotations) to a kubetrain-optimize [`Study`].

use kubetrain_api::optimizationjob::annotations;
use kubetrain_api::{ObjectiveDirection, OptimizationJob, ParameterType, SearchSpace};
use kubetrain_optimize::{Algorithm, Direction, EarlyStopping, Param, Space, Study};

use crate::error::{ClientError, Result};

/// What a search runs: the study, the objective, the parallelism and the early-stopping rule.
#[derive(Debug, Clone)]
pub struct SearchPlan {
    /// The samplers' study (parameters, algorithm, direction, budget).
    pub study: Study,
    /// The metric of the trials' `trainerStatus` that is the objective.
    pub metric: String,
    /// Trials at once (`parallelTrials`, at least 1).
    pub parallel_trials: u32,
    /// Median stopping, when `kubetrain.dev/early-stopping: median` is set.
    pub early_stopping: Option<EarlyStopping>,
    /// The algorithm's name as the report shows it: `random`, `grid` or `tpe`.
    pub algorithm_name: &'static str,
}

/// The seed of a search whose `searchAlgorithm.random.seed` is not set: a stable hash of its name, so the
/// same manifest searches the same points.
pub fn default_seed(job_name: &str) -> u64 {
    job_name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn bound(path: &str, field: &str, text: &str) -> std::result::Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| format!("{path}.{field}: {text:?} is not a number (write a decimal such as \"0.01\" or \"1e-3\")"))
}

fn space(path: &str, s: &SearchSpace) -> std::result::Result<Space, String> {
    let int = |t: &Option<ParameterType>| matches!(t, Some(ParameterType::Int));
    match (&s.uniform, &s.log_uniform, &s.categorical) {
        (Some(u), None, None) => {
            let p = format!("{path}.uniform");
            Ok(Space::Uniform {
                min: bound(&p, "min", &u.min)?,
                max: bound(&p, "max", &u.max)?,
                int: int(&u.type_),
            })
        }
        (None, Some(l), None) => {
            let p = format!("{path}.logUniform");
            Ok(Space::LogUniform {
                min: bound(&p, "min", &l.min)?,
                max: bound(&p, "max", &l.max)?,
                int: int(&l.type_),
            })
        }
        (None, None, Some(c)) => Ok(Space::Categorical(c.choices.clone())),
        _ => Err(format!(
            "{path}: set exactly one of uniform, logUniform and categorical"
        )),
    }
}

fn algorithm(job: &OptimizationJob) -> std::result::Result<(Algorithm, &'static str), String> {
    let spec_algorithm = job.spec.search_algorithm_or_default();
    let seed = spec_algorithm
        .random
        .as_ref()
        .and_then(|r| r.seed)
        .map_or_else(
            || default_seed(job.name()),
            |s| u64::from_ne_bytes(s.to_ne_bytes()),
        );
    let note = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::SEARCH_ALGORITHM));
    match note.map(String::as_str) {
        Some("tpe") if spec_algorithm.random.is_some() => Ok((Algorithm::Tpe { seed }, "tpe")),
        Some("tpe") => Err(format!(
            "metadata.annotations[{}]: tpe needs spec.searchAlgorithm.random (its seed seeds TPE), not grid",
            annotations::SEARCH_ALGORITHM
        )),
        Some(other) => Err(format!(
            "metadata.annotations[{}]: unknown algorithm {other:?} (the one kubetrain adds is \"tpe\"; random and grid are spec.searchAlgorithm)",
            annotations::SEARCH_ALGORITHM
        )),
        None if spec_algorithm.grid.is_some() => Ok((Algorithm::Grid, "grid")),
        None => Ok((Algorithm::Random { seed }, "random")),
    }
}

fn early_stopping(job: &OptimizationJob) -> std::result::Result<Option<EarlyStopping>, String> {
    match job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::EARLY_STOPPING))
        .map(String::as_str)
    {
        None => Ok(None),
        Some("median") => Ok(Some(EarlyStopping::median())),
        Some(other) => Err(format!(
            "metadata.annotations[{}]: unknown rule {other:?} (use \"median\")",
            annotations::EARLY_STOPPING
        )),
    }
}

fn invalid(problems: &[String]) -> ClientError {
    ClientError::InvalidArgument(format!(
        "the OptimizationJob is invalid:\n  {}",
        problems.join("\n  ")
    ))
}

/// Reads the search an OptimizationJob asks for: its parameters, algorithm (`random`, `grid`, or `tpe` by
/// annotation), objective, budget and early stopping.
///
/// # Errors
/// [`ClientError::InvalidArgument`] with the field path of every problem: a bound that is not a number, a space
/// the samplers refuse (`min >= max`, a log range from 0, no choices), no objective, an unknown annotation.
pub fn search_plan(job: &OptimizationJob) -> Result<SearchPlan> {
    let mut problems = Vec::new();
    let mut params = Vec::new();
    for (i, p) in job.spec.parameters.iter().enumerate() {
        match space(
            &format!("spec.parameters[{i}].searchSpace"),
            &p.search_space,
        ) {
            Ok(s) => params.push(Param::new(p.name.clone(), s)),
            Err(e) => problems.push(e),
        }
    }
    let objective = job.spec.objective();
    if objective.is_none_or(|o| o.metric.is_empty()) {
        problems.push("spec.objectives: name the metric to optimise, e.g. [{metric: loss, direction: Minimize}]".into());
    }
    let algorithm = algorithm(job).map_err(|e| problems.push(e)).ok();
    let early = early_stopping(job)
        .map_err(|e| problems.push(e))
        .ok()
        .flatten();
    let num_trials = u32::try_from(job.spec.num_trials_or_default()).unwrap_or(0);
    if num_trials == 0 {
        problems.push("spec.numTrials: must be at least 1".into());
    }
    let (Some(objective), Some((algorithm, algorithm_name)), true) =
        (objective, algorithm, problems.is_empty())
    else {
        return Err(invalid(&problems));
    };
    let direction = match objective.direction_or_default() {
        ObjectiveDirection::Maximize => Direction::Maximize,
        ObjectiveDirection::Minimize => Direction::Minimize,
    };
    let study = Study::new(params, algorithm, direction, num_trials).map_err(|e| {
        let at = match &e {
            kubetrain_optimize::Error::InvalidParameter { name, .. }
            | kubetrain_optimize::Error::DuplicateParameter { name } => job
                .spec
                .parameters
                .iter()
                .position(|p| &p.name == name)
                .map_or_else(
                    || "spec.parameters".to_owned(),
                    |i| format!("spec.parameters[{i}]"),
                ),
            _ => "spec".to_owned(),
        };
        invalid(&[format!("{at}: {e}")])
    })?;
    Ok(SearchPlan {
        study,
        metric: objective.metric.clone(),
        parallel_trials: u32::try_from(job.spec.parallel_trials_or_default())
            .unwrap_or(1)
            .max(1),
        early_stopping: early,
        algorithm_name,
    })
}
