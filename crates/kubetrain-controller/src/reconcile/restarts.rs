//! Restarts of a TrainJob's JobSet: their cause, the last checkpoint the trainer reported, the step it resumed
//! from and the work lost (docs/operator.md "Restarts and the failure budget").
//!
//! The JobSet controller counts its restarts (`status.restarts`) and those that spend the failure budget
//! (`status.restartsCountTowardsMax`); a restart that does not count is one its failure-policy rules exempt,
//! e.g. [`kubetrain_jobset::disruption::DISRUPTION_RULE`] after a lost node or an evicted or preempted pod.
//! The reconcile compares the counts with what the TrainJob's [`RESTARTS_ANNOTATION`] recorded; a new restart
//! is recorded there (a bounded JSON history), announced by a [`TRAINJOB_RESTARTED`] event and, for a job
//! that opted in to restarts after disruptions, by a `Restarted` condition in the status the reconcile writes
//! anyway. The trainer's reported progress comes from `status.trainerStatus.metrics` under the reserved names
//! below; when a restarted trainer reports the step it resumed from, the record gets it and a
//! [`TRAINJOB_RESUMED`] event says so. Nothing is read or written when the counts did not move.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType};
use kubetrain_api::jobset::JobSet;
use kubetrain_api::{TrainJob, TrainJobStatus};
use serde::{Deserialize, Serialize};

/// The TrainJob annotation holding the restart history (JSON, [`RestartHistory`]).
pub const RESTARTS_ANNOTATION: &str = "kubetrain.dev/restarts";
/// Records kept in the history (the counts cover every restart).
pub const MAX_RECORDS: usize = 10;
/// Reason of the event announcing a restart.
pub const TRAINJOB_RESTARTED: &str = "TrainJobRestarted";
/// Reason of the event announcing the step a restarted trainer resumed from.
pub const TRAINJOB_RESUMED: &str = "TrainJobResumed";
/// Type of the status condition a job that opted in to restarts after disruptions gets.
pub const RESTARTED_CONDITION: &str = "Restarted";
/// Action of a restart event, followed by the JobSet's restart count (`Restart2`).
pub const ACTION_RESTART: &str = "Restart";
/// Action of a resumed event, followed by the JobSet's restart count (`Resume2`).
pub const ACTION_RESUME: &str = "Resume";

/// The trainer's last reported step (a `trainerStatus` metric; shared with the reporter and train-demo).
pub const METRIC_STEP: &str = "kubetrain.dev/step";
/// The step of the trainer's last checkpoint.
pub const METRIC_CHECKPOINT_STEP: &str = "kubetrain.dev/checkpoint-step";
/// When the trainer's last checkpoint was written (RFC 3339, or seconds since the epoch).
pub const METRIC_CHECKPOINT_TIME: &str = "kubetrain.dev/checkpoint-time";
/// The step a restarted trainer resumed from.
pub const METRIC_RESUMED_FROM_STEP: &str = "kubetrain.dev/resumed-from-step";

/// JobSet's condition type while it restarts; its reason names the failure-policy rule.
const JOBSET_RESTARTING: &str = "RestartingJobSet";

/// Why the JobSet restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cause {
    /// A failure-policy rule exempted it from the budget (a lost node, an eviction, a preemption).
    Disruption,
    /// It spent the failure budget (`maxRestarts`).
    Failure,
}

/// One restart (or several the reconcile saw at once: `count`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartRecord {
    /// The JobSet's restart count after it (`status.restarts`).
    pub restart: i32,
    /// Restarts seen at once (1 unless the operator missed some).
    pub count: i32,
    /// Why.
    pub cause: Cause,
    /// The reason of JobSet's `RestartingJobSet` condition, e.g. `FailurePolicy_RestartOnDisruption`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Its message (names the first failed Job).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the JobSet began restarting (RFC 3339).
    pub time: String,
    /// The last step the trainer reported before the restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<i64>,
    /// The step of the last checkpoint the trainer reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_step: Option<i64>,
    /// When that checkpoint was written (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_time: Option<String>,
    /// Steps done after the checkpoint, lost with the restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_lost: Option<i64>,
    /// GPU-seconds spent after the checkpoint (the job's GPUs × seconds from the checkpoint to the restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_seconds_lost: Option<f64>,
    /// The step the restarted trainer resumed from, once it reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from_step: Option<i64>,
}

/// The TrainJob's restart history ([`RESTARTS_ANNOTATION`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartHistory {
    /// The JobSet's `status.restarts` last recorded.
    pub restarts: i32,
    /// Its `status.restartsCountTowardsMax` last recorded.
    pub counted: i32,
    /// Restarts after disruptions (not counted against the budget), in all.
    pub disruptions: i32,
    /// Restarts after failures (counted), in all.
    pub failures: i32,
    /// The last [`MAX_RECORDS`] restarts, oldest first.
    #[serde(default)]
    pub records: Vec<RestartRecord>,
}

impl RestartHistory {
    /// The history recorded on `job`; none (or one that does not parse) is an empty history.
    pub fn of(job: &TrainJob) -> Self {
        job.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RESTARTS_ANNOTATION))
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default()
    }

    /// The annotation value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// An event to publish about the TrainJob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// The event's reason.
    pub reason: String,
    /// The event's action, naming the restart (`Restart2`, `Resume2`): kube's recorder folds events of one
    /// action and reason into a series that keeps the first note, and each restart must say its own.
    pub action: String,
    /// The event's note.
    pub note: String,
}

impl Notice {
    /// The event to publish.
    pub fn to_event(&self) -> Event {
        Event {
            type_: if self.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: self.reason.clone(),
            note: Some(self.note.clone()),
            action: self.action.clone(),
            secondary: None,
        }
    }
}

/// What a reconcile must write about restarts: the new history, the events, and the condition for the status.
#[derive(Clone, Debug, PartialEq)]
pub struct RestartUpdate {
    /// The history to store in [`RESTARTS_ANNOTATION`].
    pub history: RestartHistory,
    /// Events to publish, in order.
    pub events: Vec<Notice>,
    /// The `Restarted` condition to set, for a job that opted in to restarts after disruptions.
    pub condition: Option<Condition>,
}

/// The trainer's reported progress, from `status.trainerStatus.metrics`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress {
    /// [`METRIC_STEP`].
    pub step: Option<i64>,
    /// [`METRIC_CHECKPOINT_STEP`].
    pub checkpoint_step: Option<i64>,
    /// [`METRIC_CHECKPOINT_TIME`], as a time.
    pub checkpoint_time: Option<Timestamp>,
    /// [`METRIC_RESUMED_FROM_STEP`].
    pub resumed_from_step: Option<i64>,
    /// `trainerStatus.lastUpdatedTime`.
    pub updated: Option<Timestamp>,
}

impl Progress {
    /// The progress in `status` (absent metrics, or values that do not parse, are `None`).
    pub fn of(status: Option<&TrainJobStatus>) -> Self {
        let Some(trainer) = status.and_then(|s| s.trainer_status.as_ref()) else {
            return Self::default();
        };
        let metric = |name: &str| {
            trainer
                .metrics
                .iter()
                .find(|m| m.name == name)
                .map(|m| m.value.trim())
        };
        let int = |name: &str| metric(name).and_then(parse_step);
        Self {
            step: int(METRIC_STEP),
            checkpoint_step: int(METRIC_CHECKPOINT_STEP),
            checkpoint_time: metric(METRIC_CHECKPOINT_TIME).and_then(parse_time),
            resumed_from_step: int(METRIC_RESUMED_FROM_STEP),
            updated: trainer.last_updated_time.as_ref().map(|t| t.0),
        }
    }
}

/// A step: an integer, or a float with no fraction (`"400"`, `"400.0"`).
fn parse_step(value: &str) -> Option<i64> {
    value.parse::<i64>().ok().or_else(|| {
        value
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    })
}

/// A time: RFC 3339, or seconds since the epoch.
fn parse_time(value: &str) -> Option<Timestamp> {
    value.parse::<Timestamp>().ok().or_else(|| {
        let secs = value.parse::<f64>().ok().filter(|f| f.is_finite())?;
        Timestamp::from_millisecond((secs * 1000.0).round() as i64).ok()
    })
}

/// What changed about restarts, given the TrainJob (with its recorded history), its JobSet, the job's GPU count
/// and the time; `None` when nothing did. `opted_in` adds the `Restarted` condition.
pub fn observe(
    job: &TrainJob,
    jobset: Option<&JobSet>,
    gpus: f64,
    opted_in: bool,
    now: &Time,
) -> Option<RestartUpdate> {
    let mut history = RestartHistory::of(job);
    let progress = Progress::of(job.status.as_ref());
    let js_status = jobset.and_then(|j| j.status.as_ref());
    let restarts = js_status.and_then(|s| s.restarts).unwrap_or(0);
    let counted = js_status
        .and_then(|s| s.restarts_count_towards_max)
        .unwrap_or(0);
    if restarts > history.restarts {
        let new = restarts - history.restarts;
        // A JobSet recreated from scratch counts from 0 again: count what it says.
        let new_counted = (counted - history.counted).clamp(0, new);
        let restarting = js_status.and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == JOBSET_RESTARTING && c.reason != "JobsReady")
        });
        let time = restarting.map_or(now.0, |c| c.last_transition_time.0);
        let cause = if new_counted > 0 {
            Cause::Failure
        } else {
            Cause::Disruption
        };
        let record = record(restarts, new, cause, restarting, time, &progress, gpus);
        history.restarts = restarts;
        history.counted = counted;
        history.failures += new_counted;
        history.disruptions += new - new_counted;
        let events = vec![restarted_event(&record, &history)];
        let condition = opted_in.then(|| restarted_condition(&record, &history, now));
        history.records.push(record);
        let excess = history.records.len().saturating_sub(MAX_RECORDS);
        history.records.drain(..excess);
        return Some(RestartUpdate {
            history,
            events,
            condition,
        });
    }
    if restarts < history.restarts {
        // The JobSet was recreated (its counts start again): follow it, keeping the totals and records.
        history.restarts = restarts;
        history.counted = counted;
        return Some(RestartUpdate {
            history,
            events: Vec::new(),
            condition: None,
        });
    }
    // A restarted trainer reports the step it resumed from (after the restart).
    let last = history.records.last_mut()?;
    let resumed = progress.resumed_from_step?;
    let reported_after = match (progress.updated, last.time.parse::<Timestamp>()) {
        (Some(updated), Ok(restarted)) => updated >= restarted,
        _ => false,
    };
    if last.resumed_from_step.is_some() || !reported_after {
        return None;
    }
    last.resumed_from_step = Some(resumed);
    let event = resumed_event(last);
    let condition = opted_in.then(|| resumed_condition(last, now));
    Some(RestartUpdate {
        history,
        events: vec![event],
        condition,
    })
}

/// The record of `count` restarts up to JobSet restart `restart`, with the work lost since the last checkpoint.
fn record(
    restart: i32,
    count: i32,
    cause: Cause,
    restarting: Option<&Condition>,
    time: Timestamp,
    progress: &Progress,
    gpus: f64,
) -> RestartRecord {
    let steps_lost = progress
        .step
        .zip(progress.checkpoint_step)
        .map(|(step, checkpoint)| (step - checkpoint).max(0));
    let gpu_seconds_lost = progress.checkpoint_time.map(|checkpoint| {
        let seconds = (time.as_millisecond() - checkpoint.as_millisecond()).max(0) as f64 / 1000.0;
        (seconds * gpus * 1000.0).round() / 1000.0
    });
    RestartRecord {
        restart,
        count,
        cause,
        reason: restarting.map(|c| c.reason.clone()).unwrap_or_default(),
        message: restarting.map(|c| c.message.clone()).unwrap_or_default(),
        time: time.to_string(),
        step: progress.step,
        checkpoint_step: progress.checkpoint_step,
        checkpoint_time: progress.checkpoint_time.map(|t| t.to_string()),
        steps_lost,
        gpu_seconds_lost,
        resumed_from_step: None,
    }
}

/// What was lost, in words: `"checkpoint at step 400 (2026-…); 37 steps and 296 GPU-seconds lost"`.
fn lost(record: &RestartRecord) -> String {
    let checkpoint = match (&record.checkpoint_step, &record.checkpoint_time) {
        (Some(step), Some(time)) => format!("last checkpoint at step {step} ({time})"),
        (Some(step), None) => format!("last checkpoint at step {step}"),
        (None, Some(time)) => format!("last checkpoint at {time}"),
        (None, None) => "no checkpoint reported".to_owned(),
    };
    let mut lost = Vec::new();
    if let Some(steps) = record.steps_lost {
        lost.push(format!("{steps} steps"));
    }
    if let Some(gpu_seconds) = record.gpu_seconds_lost {
        lost.push(format!("{gpu_seconds} GPU-seconds"));
    }
    if lost.is_empty() {
        checkpoint
    } else {
        format!("{checkpoint}; {} lost", lost.join(" and "))
    }
}

fn cause_words(record: &RestartRecord) -> &'static str {
    match record.cause {
        Cause::Disruption => {
            "a disruption (node lost, pod evicted or preempted); the failure budget is kept"
        }
        Cause::Failure => "a failure; it counts against the failure budget (maxRestarts)",
    }
}

fn restarted_event(record: &RestartRecord, history: &RestartHistory) -> Notice {
    let mut note = format!(
        "JobSet restart {} after {}: {}",
        record.restart,
        cause_words(record),
        lost(record)
    );
    if !record.reason.is_empty() {
        note.push_str(&format!(" [{}: {}]", record.reason, record.message));
    }
    note.push_str(&format!(
        " ({} disruptions, {} failures so far)",
        history.disruptions, history.failures
    ));
    Notice {
        warning: record.cause == Cause::Failure,
        reason: TRAINJOB_RESTARTED.to_owned(),
        action: format!("{ACTION_RESTART}{}", record.restart),
        note: cut(note),
    }
}

fn resumed_event(record: &RestartRecord) -> Notice {
    Notice {
        warning: false,
        reason: TRAINJOB_RESUMED.to_owned(),
        action: format!("{ACTION_RESUME}{}", record.restart),
        note: cut(format!(
            "resumed from step {} after JobSet restart {} ({})",
            record.resumed_from_step.unwrap_or_default(),
            record.restart,
            lost(record)
        )),
    }
}

fn restarted_condition(record: &RestartRecord, history: &RestartHistory, now: &Time) -> Condition {
    Condition {
        type_: RESTARTED_CONDITION.to_owned(),
        status: "True".to_owned(),
        reason: match record.cause {
            Cause::Disruption => "Disruption",
            Cause::Failure => "Failure",
        }
        .to_owned(),
        message: format!(
            "restart {} after {}: {} ({} disruptions, {} failures so far)",
            record.restart,
            cause_words(record),
            lost(record),
            history.disruptions,
            history.failures
        ),
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

fn resumed_condition(record: &RestartRecord, now: &Time) -> Condition {
    Condition {
        type_: RESTARTED_CONDITION.to_owned(),
        status: "True".to_owned(),
        reason: "Resumed".to_owned(),
        message: format!(
            "restart {} after {}: resumed from step {}; {}",
            record.restart,
            cause_words(record),
            record.resumed_from_step.unwrap_or_default(),
            lost(record)
        ),
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

/// Cuts an event note to the events API's limit.
fn cut(mut note: String) -> String {
    if let Some((at, _)) = note.char_indices().nth(crate::events::MAX_QUOTED_ERROR) {
        note.truncate(at);
        note.push_str(" ...");
    }
    note
}

/// The GPUs `jobset` asks for: every replicated job's `replicas × parallelism ×` its pod's `nvidia.com/gpu`
/// (limits, else requests; summed over containers).
pub fn gpus(jobset: &JobSet) -> f64 {
    jobset
        .spec
        .replicated_jobs
        .iter()
        .map(|r| {
            let Some(spec) = r.template.spec.as_ref() else {
                return 0.0;
            };
            let per_pod: f64 = spec
                .template
                .spec
                .iter()
                .flat_map(|p| &p.containers)
                .filter_map(|c| c.resources.as_ref())
                .filter_map(|res| {
                    res.limits
                        .as_ref()
                        .and_then(|l| l.get("nvidia.com/gpu"))
                        .or_else(|| res.requests.as_ref()?.get("nvidia.com/gpu"))
                })
                .filter_map(|q| q.0.parse::<f64>().ok())
                .sum();
            f64::from(r.replicas_or_default()) * f64::from(spec.parallelism.unwrap_or(1)) * per_pod
        })
        .sum()
}

#[cfg(test)]
#[path = "restarts_tests.rs"]
mod tests;
