//! From an OptimizationJob's spec to the sampler's [`Study`], and from trial TrainJobs to the sampler's
//! [`TrialRecord`]s: everything the reconcile decides from, derived from the objects on every reconcile.

use std::collections::BTreeMap;

use kubetrain_api::conditions::{COMPLETE, FAILED};
use kubetrain_api::optimizationjob::{annotations, parse_double, trial_index, trial_parameters};
use kubetrain_api::validation::{MEDIAN, TPE};
use kubetrain_api::{
    ObjectiveDirection, OptimizationJob, Parameter, ParameterType, SearchSpace, TrainJob,
};
use kubetrain_optimize::{
    Algorithm, Direction, EarlyStopping, Param, Space, Study, TrialRecord, TrialState,
};

/// Trial annotation (ours) set when the early-stopping rule stopped the trial: the rule's name.
pub const STOPPED_ANNOTATION: &str = "kubetrain.dev/stopped-by";
/// Trial annotation (ours): the objective values observed at each report, a JSON array, kept only with
/// early stopping on (the median rule compares trials step by step; `trainerStatus` holds only the latest).
pub const HISTORY_ANNOTATION: &str = "kubetrain.dev/objective-history";
/// The most values [`HISTORY_ANNOTATION`] keeps (the latest ones).
pub const MAX_HISTORY: usize = 200;

/// What the controller searches with: the study, the objective, and the early-stopping rule.
#[derive(Debug)]
pub struct Search {
    /// The sampler.
    pub study: Study,
    /// The metric named by `spec.objectives[0].metric`.
    pub metric: String,
    /// Minimize or maximize.
    pub direction: Direction,
    /// The rule from [`annotations::EARLY_STOPPING`], when set.
    pub early_stopping: Option<EarlyStopping>,
    /// `parallelTrials`.
    pub parallel: u32,
}

/// Builds the search of `job`, or says (with the field path) why it cannot run.
pub fn search_of(job: &OptimizationJob) -> Result<Search, String> {
    let spec = &job.spec;
    let objective = spec
        .objective()
        .ok_or("spec.objectives: an objective is required")?;
    let direction = match objective.direction_or_default() {
        ObjectiveDirection::Minimize => Direction::Minimize,
        ObjectiveDirection::Maximize => Direction::Maximize,
    };
    let params = spec
        .parameters
        .iter()
        .enumerate()
        .map(|(i, p)| param_of(p, i))
        .collect::<Result<Vec<_>, _>>()?;
    let notes = job.metadata.annotations.clone().unwrap_or_default();
    let algorithm = algorithm_of(job, notes.get(annotations::SEARCH_ALGORITHM))?;
    let early_stopping = match notes.get(annotations::EARLY_STOPPING).map(String::as_str) {
        None => None,
        Some(MEDIAN) => Some(EarlyStopping::median()),
        Some(other) => {
            return Err(format!(
                "metadata.annotations[{}]: unsupported value {other:?}; use \"{MEDIAN}\"",
                annotations::EARLY_STOPPING
            ));
        }
    };
    let num_trials = u32::try_from(spec.num_trials_or_default())
        .map_err(|_| "spec.numTrials: must be at least 1".to_owned())?;
    let parallel = u32::try_from(spec.parallel_trials_or_default())
        .map_err(|_| "spec.parallelTrials: must be at least 1".to_owned())?;
    let study = Study::new(params, algorithm, direction, num_trials)
        .map_err(|e| format!("spec.parameters: {e}"))?;
    Ok(Search {
        study,
        metric: objective.metric.clone(),
        direction,
        early_stopping,
        parallel: parallel.max(1),
    })
}

fn algorithm_of(job: &OptimizationJob, annotation: Option<&String>) -> Result<Algorithm, String> {
    let chosen = job.spec.search_algorithm_or_default();
    // Without a seed, a hash of the job's name (as `kubetrain optimize --local` does): the same for the job's
    // whole life (a restart repeats nothing), and the same points for the same manifest.
    let seed = chosen
        .random
        .as_ref()
        .and_then(|r| r.seed)
        .map_or_else(|| fnv1a(job.name()), i64::cast_unsigned);
    match (annotation.map(String::as_str), chosen.grid.is_some()) {
        (None, true) => Ok(Algorithm::Grid),
        (None, false) => Ok(Algorithm::Random { seed }),
        (Some(TPE), false) => Ok(Algorithm::Tpe { seed }),
        (Some(TPE), true) => Err(format!(
            "metadata.annotations[{}]: \"{TPE}\" replaces random search; set spec.searchAlgorithm to random, not grid",
            annotations::SEARCH_ALGORITHM
        )),
        (Some(other), _) => Err(format!(
            "metadata.annotations[{}]: unsupported value {other:?}; use \"{TPE}\"",
            annotations::SEARCH_ALGORITHM
        )),
    }
}

fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One parameter in the sampler's terms; bounds are parsed with their field paths.
pub fn param_of(parameter: &Parameter, index: usize) -> Result<Param, String> {
    let path = format!("spec.parameters[{index}].searchSpace");
    let SearchSpace {
        uniform,
        log_uniform,
        categorical,
    } = &parameter.search_space;
    let bounds = |kind: &str, min: &str, max: &str| -> Result<(f64, f64), String> {
        let min = parse_double(min, &format!("{path}.{kind}.min")).map_err(|e| e.to_string())?;
        let max = parse_double(max, &format!("{path}.{kind}.max")).map_err(|e| e.to_string())?;
        Ok((min, max))
    };
    let space = match (uniform, log_uniform, categorical) {
        (Some(u), None, None) => {
            let (min, max) = bounds("uniform", &u.min, &u.max)?;
            Space::Uniform {
                min,
                max,
                int: u.type_ == Some(ParameterType::Int),
            }
        }
        (None, Some(u), None) => {
            let (min, max) = bounds("logUniform", &u.min, &u.max)?;
            Space::LogUniform {
                min,
                max,
                int: u.type_ == Some(ParameterType::Int),
            }
        }
        (None, None, Some(c)) => Space::Categorical(c.choices.clone()),
        _ => {
            return Err(format!(
                "{path}: exactly one of uniform, logUniform and categorical must be set"
            ));
        }
    };
    Ok(Param::new(parameter.name.clone(), space))
}

/// The sampler's view of one trial TrainJob; `None` for a TrainJob without a readable index or parameters
/// (not one of ours, or edited by hand).
pub fn record_of(trial: &TrainJob, metric: &str) -> Option<TrialRecord> {
    let index = trial_index(trial)?;
    let parameters = trial_parameters(trial)?;
    let notes = trial.metadata.annotations.as_ref();
    let intermediate: Vec<f64> = notes
        .and_then(|n| n.get(HISTORY_ANNOTATION))
        .and_then(|h| serde_json::from_str(h).ok())
        .unwrap_or_default();
    let objective = reported(trial, metric).or_else(|| intermediate.last().copied());
    let stopped = notes.is_some_and(|n| n.contains_key(STOPPED_ANNOTATION));
    let state = if stopped {
        TrialState::Stopped
    } else if condition_true(trial, FAILED) {
        TrialState::Failed
    } else if condition_true(trial, COMPLETE) {
        TrialState::Succeeded
    } else if trial.status.as_ref().is_some_and(|s| {
        s.trainer_status.is_some() || s.jobs_status.iter().any(|j| j.active > 0 || j.ready > 0)
    }) {
        TrialState::Running
    } else {
        TrialState::Pending
    };
    Some(TrialRecord {
        index,
        parameters,
        objective,
        state,
        intermediate,
    })
}

/// The objective metric the trial last reported in `status.trainerStatus.metrics`, when it reads as a number.
pub fn reported(trial: &TrainJob, metric: &str) -> Option<f64> {
    trial
        .status
        .as_ref()?
        .trainer_status
        .as_ref()?
        .metrics
        .iter()
        .rev()
        .find(|m| m.name == metric)
        .and_then(|m| m.value.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite())
}

fn condition_true(trial: &TrainJob, type_: &str) -> bool {
    trial.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    })
}

/// Whether a trial no longer counts against `parallelTrials`.
pub fn is_finished(state: TrialState) -> bool {
    matches!(
        state,
        TrialState::Succeeded | TrialState::Failed | TrialState::Stopped
    )
}

/// The history annotation after a new report: `Some(values)` when the trial reported a value at a time not
/// seen before (each `trainerStatus.lastUpdatedTime` is one step).
pub fn next_history(trial: &TrainJob, metric: &str) -> Option<(Vec<f64>, String)> {
    let value = reported(trial, metric)?;
    let stamp = trial
        .status
        .as_ref()?
        .trainer_status
        .as_ref()?
        .last_updated_time
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    let notes = trial.metadata.annotations.as_ref();
    let seen = notes
        .and_then(|n| n.get(HISTORY_STAMP_ANNOTATION))
        .cloned()
        .unwrap_or_default();
    if seen == stamp && !stamp.is_empty() {
        return None;
    }
    let mut values: Vec<f64> = notes
        .and_then(|n| n.get(HISTORY_ANNOTATION))
        .and_then(|h| serde_json::from_str(h).ok())
        .unwrap_or_default();
    values.push(value);
    if values.len() > MAX_HISTORY {
        values.drain(..values.len() - MAX_HISTORY);
    }
    Some((values, stamp))
}

/// Trial annotation (ours): the `lastUpdatedTime` of the report last added to [`HISTORY_ANNOTATION`].
pub const HISTORY_STAMP_ANNOTATION: &str = "kubetrain.dev/objective-history-at";

/// The parameters of a record as upstream's `ParameterAssignment`s, in the spec's order.
pub fn assignments(
    job: &OptimizationJob,
    parameters: &BTreeMap<String, String>,
) -> Vec<kubetrain_api::ParameterAssignment> {
    job.spec
        .parameters
        .iter()
        .filter_map(|p| {
            parameters
                .get(&p.name)
                .map(|value| kubetrain_api::ParameterAssignment {
                    name: p.name.clone(),
                    value: value.clone(),
                })
        })
        .collect()
}
