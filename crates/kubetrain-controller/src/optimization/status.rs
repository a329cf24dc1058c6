//! The OptimizationJob's status from its trials: conditions (`Created`, `Running`, `Complete`, `Failed`) and
//! `status.result`, as one pure function, and the merge patch that writes only what changed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kubetrain_api::optimizationjob::optimization_conditions::{
    COMPLETE, CREATED, FAILED, REASON_COMPLETED, REASON_CREATED, REASON_INVALID_SPEC,
    REASON_NO_OBJECTIVE, REASON_RUNNING, RUNNING,
};
use kubetrain_api::optimizationjob::trial_name;
use kubetrain_api::{OptimizationJob, OptimizationJobStatus, OptimizationResult};
use kubetrain_jobset::status::set_condition;
use kubetrain_optimize::{TrialRecord, TrialState};
use serde_json::{Value, json};

use super::search::{Search, assignments, is_finished};

/// Counts of the trials by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Created, not started (suspended, queued).
    pub pending: u32,
    /// Running.
    pub running: u32,
    /// Finished with `Complete`.
    pub succeeded: u32,
    /// Finished with `Failed`.
    pub failed: u32,
    /// Stopped early.
    pub stopped: u32,
}

impl Counts {
    /// Counts `records` by state.
    pub fn of(records: &[TrialRecord]) -> Self {
        let mut counts = Self::default();
        for record in records {
            match record.state {
                TrialState::Pending => counts.pending += 1,
                TrialState::Running => counts.running += 1,
                TrialState::Succeeded => counts.succeeded += 1,
                TrialState::Failed => counts.failed += 1,
                TrialState::Stopped => counts.stopped += 1,
            }
        }
        counts
    }

    /// Trials that are not finished.
    pub fn active(self) -> u32 {
        self.pending + self.running
    }

    /// Trials that are finished.
    pub fn finished(self) -> u32 {
        self.succeeded + self.failed + self.stopped
    }
}

fn condition(type_: &str, status: bool, reason: &str, message: String, now: &Time) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

/// Whether the job has finished (`Complete` or `Failed` is `True`): nothing more is created or written.
pub fn is_terminal(job: &OptimizationJob) -> bool {
    job.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| (c.type_ == COMPLETE || c.type_ == FAILED) && c.status == "True")
    })
}

/// The status after this reconcile: `records` are every trial (including those just created), `total` the
/// number of trials the search runs.
pub fn decide(
    job: &OptimizationJob,
    search: &Search,
    records: &[TrialRecord],
    now: &Time,
) -> OptimizationJobStatus {
    let mut status = job.status.clone().unwrap_or_default();
    let total = search.study.trial_count();
    let counts = Counts::of(records);
    let best = search.study.best(records);
    status.result = best
        .map(|b| OptimizationResult {
            train_job_name: trial_name(job.name(), b.index),
            parameters: assignments(job, &b.parameters),
        })
        .or(status.result);
    let conditions = &mut status.conditions;
    if !records.is_empty() {
        set_condition(
            conditions,
            condition(
                CREATED,
                true,
                REASON_CREATED,
                format!(
                    "OptimizationJob created {} of {total} trials",
                    records.len()
                ),
                now,
            ),
        );
    }
    let done = counts.finished() >= total && records.iter().all(|r| is_finished(r.state));
    let summary = format!(
        "{} running, {} pending, {} succeeded, {} failed, {} stopped of {total} trials",
        counts.running, counts.pending, counts.succeeded, counts.failed, counts.stopped
    );
    if !done {
        set_condition(
            conditions,
            condition(RUNNING, true, REASON_RUNNING, summary, now),
        );
        return status;
    }
    set_condition(
        conditions,
        condition(RUNNING, false, REASON_COMPLETED, summary.clone(), now),
    );
    match best {
        Some(best) => set_condition(
            conditions,
            condition(
                COMPLETE,
                true,
                REASON_COMPLETED,
                format!(
                    "all {total} trials finished; the best is {} with {} = {}",
                    trial_name(job.name(), best.index),
                    search.metric,
                    best.objective.unwrap_or(f64::NAN)
                ),
                now,
            ),
        ),
        None => set_condition(
            conditions,
            condition(
                FAILED,
                true,
                REASON_NO_OBJECTIVE,
                format!(
                    "all {total} trials finished and none succeeded with the objective metric {:?} in status.trainerStatus.metrics ({summary})",
                    search.metric
                ),
                now,
            ),
        ),
    }
    status
}

/// The status of a job whose spec cannot be searched: `Failed=True` with reason `InvalidSpec`.
pub fn invalid(job: &OptimizationJob, message: &str, now: &Time) -> OptimizationJobStatus {
    let mut status = job.status.clone().unwrap_or_default();
    set_condition(
        &mut status.conditions,
        condition(FAILED, true, REASON_INVALID_SPEC, message.to_owned(), now),
    );
    status
}

/// The JSON merge patch of the status subresource turning `before` into `after` (conditions and result
/// replaced whole), or `None` when nothing changed.
pub fn patch(
    before: Option<&OptimizationJobStatus>,
    after: &OptimizationJobStatus,
) -> Option<Value> {
    if before == Some(after) {
        return None;
    }
    Some(json!({"status": {
        "conditions": after.conditions,
        "result": after.result,
    }}))
}
