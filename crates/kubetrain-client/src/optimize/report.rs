//! The outcome of a search: every trial and the best one (`optimization.json`).

use std::collections::BTreeMap;

use kubetrain_optimize::{Study, TrialRecord, TrialState};
use serde::Serialize;

/// One trial in a report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrialReport {
    /// The trial's TrainJob name (`<job>-<index>`).
    pub name: String,
    /// Its parameters (name to value, as its env carries them).
    pub parameters: BTreeMap<String, String>,
    /// Its objective (the last value of the metric it reported), if any.
    pub objective: Option<f64>,
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Stopped` (early stopping).
    pub state: String,
    /// Its index in the search.
    pub index: u32,
    /// The objective values it reported along the way.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub intermediate: Vec<f64>,
    /// Why it failed or stopped, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The best trial of a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BestTrial {
    /// The trial's TrainJob name.
    pub name: String,
    /// Its parameters.
    pub parameters: BTreeMap<String, String>,
    /// Its objective.
    pub objective: f64,
}

/// A search's outcome: `{"trials": [...], "best": {...}}` plus what the search was.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OptimizationReport {
    /// Every trial, by index.
    pub trials: Vec<TrialReport>,
    /// The best succeeded trial (`null` when none succeeded with the objective).
    pub best: Option<BestTrial>,
    /// The OptimizationJob's name.
    pub name: String,
    /// The objective metric.
    pub metric: String,
    /// `Minimize` or `Maximize`.
    pub direction: String,
    /// `random`, `grid` or `tpe`.
    pub algorithm: String,
}

/// The state's name in reports.
pub fn state_name(state: TrialState) -> &'static str {
    match state {
        TrialState::Pending => "Pending",
        TrialState::Running => "Running",
        TrialState::Succeeded => "Succeeded",
        TrialState::Failed => "Failed",
        TrialState::Stopped => "Stopped",
    }
}

impl OptimizationReport {
    /// The report of `records` (trial names from `name_of`), the best picked by `study`.
    pub fn new(
        name: &str,
        metric: &str,
        algorithm: &str,
        study: &Study,
        records: &[(TrialRecord, Option<String>)],
        name_of: impl Fn(u32) -> String,
    ) -> Self {
        let mut trials: Vec<TrialReport> = records
            .iter()
            .map(|(r, message)| TrialReport {
                name: name_of(r.index),
                parameters: r.parameters.clone(),
                objective: r.objective,
                state: state_name(r.state).to_owned(),
                index: r.index,
                intermediate: r.intermediate.clone(),
                message: message.clone(),
            })
            .collect();
        trials.sort_by_key(|t| t.index);
        let plain: Vec<TrialRecord> = records.iter().map(|(r, _)| r.clone()).collect();
        let best = study.best(&plain).and_then(|b| {
            Some(BestTrial {
                name: name_of(b.index),
                parameters: b.parameters.clone(),
                objective: b.objective?,
            })
        });
        Self {
            trials,
            best,
            name: name.to_owned(),
            metric: metric.to_owned(),
            direction: format!("{:?}", study.direction()),
            algorithm: algorithm.to_owned(),
        }
    }
}
