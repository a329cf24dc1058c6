//! The status decision: upstream's sequence of `setFailedCondition` (unsupported runtime), `setSuspendedCondition`,
//! `setTrainJobStatus` (JobSet → TrainJob, keeping a `DeadlineExceeded` failure) and `reconcileDeadline`, as one
//! pure function, plus the merge patch that writes only what changed.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kubetrain_api::conditions::{DEADLINE_EXCEEDED, FAILED, TRAINING_RUNTIME_NOT_SUPPORTED};
use kubetrain_api::jobset::JobSet;
use kubetrain_api::{RunPolicy, TrainJob, TrainJobStatus};
use kubetrain_jobset::status::{set_condition, sync_status};
use serde_json::{Map, Value};

use super::lifecycle::{Ttl, effective_active_deadline, effective_ttl, set_times, ttl_decision};

/// What to write after a reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusDecision {
    /// The TrainJob status after this reconcile.
    pub status: TrainJobStatus,
    /// The JSON merge patch for the status subresource (`{"status": {...}}`), or `None` when nothing changed.
    pub patch: Option<Value>,
    /// `activeDeadlineSeconds` passed: delete the JobSet.
    pub delete_jobset: bool,
    /// Reconcile again after this long (the active deadline, or the TTL of a finished job).
    pub requeue_after: Option<Duration>,
    /// What the TTL asks (KEP-2899): keep the TrainJob, or delete it now.
    pub ttl: Ttl,
    /// The TTL in force (the job's own, else the runtime's `runPolicy` default).
    pub effective_ttl: Option<i32>,
}

/// Computes the TrainJob's status from the TrainJob, its JobSet (as read or as just applied) and the time.
///
/// `unsupported_runtime` is upstream's registry key of a runtime kind the controller does not serve; the
/// TrainJob then fails with reason `TrainingRuntimeNotSupported`. `run_policy` is the runtime's KEP-2899
/// defaults, when known: its active deadline applies unless the job sets its own, and so does its TTL.
///
/// `status.startTime` and `status.completionTime` are written only for a job that uses a KEP-2899 field (its
/// own TTL, or a runtime with a `runPolicy`): any other job's status stays upstream v2.3's, field for field.
pub fn decide_status(
    job: &TrainJob,
    jobset: Option<&JobSet>,
    unsupported_runtime: Option<&str>,
    run_policy: Option<&RunPolicy>,
    now: &Time,
) -> StatusDecision {
    let effective;
    let job = match effective_active_deadline(job, run_policy) {
        deadline if deadline != job.spec.active_deadline_seconds => {
            let mut with_default = job.clone();
            with_default.spec.active_deadline_seconds = deadline;
            effective = with_default;
            &effective
        }
        _ => job,
    };
    let before = job.status.clone().unwrap_or_default();
    let kept_deadline = before
        .conditions
        .iter()
        .find(|c| c.type_ == FAILED && c.reason == DEADLINE_EXCEEDED)
        .cloned();

    let update = match unsupported_runtime {
        None => sync_status(job, jobset, now),
        Some(key) => {
            let mut failed = job.clone();
            let status = failed.status.get_or_insert_with(Default::default);
            let message = format!("unsupported runtime: {key}");
            set_condition(
                &mut status.conditions,
                Condition {
                    type_: FAILED.to_owned(),
                    status: "True".to_owned(),
                    reason: TRAINING_RUNTIME_NOT_SUPPORTED.to_owned(),
                    message,
                    last_transition_time: now.clone(),
                    observed_generation: None,
                },
            );
            // Upstream reads no JobSet here: the runtime that would own it is unknown.
            sync_status(&failed, None, now)
        }
    };
    let mut status = update.status;
    if let Some(deadline) = kept_deadline {
        set_condition(&mut status.conditions, deadline);
    }
    let effective_ttl = effective_ttl(job, run_policy);
    if job.spec.ttl_seconds_after_finished.is_some() || run_policy.is_some() {
        set_times(job, &mut status);
    }
    defer_empty_counts(&before, &mut status);
    let ttl = ttl_decision(&status, effective_ttl, now);
    let requeue_after = match ttl {
        Ttl::After(left) => Some(update.requeue_after.map_or(left, |d| d.min(left))),
        _ => update.requeue_after,
    };
    StatusDecision {
        patch: merge_patch(&before, &status),
        status,
        delete_jobset: update.delete_jobset,
        requeue_after,
        ttl,
        effective_ttl,
    }
}

/// Keeps a TrainJob's first `jobsStatus` back while its every count is zero and nothing else changed.
///
/// The JobSet controller's first status pass lists the replicated jobs with zero counts before any Job
/// exists. Upstream copies it as it is, in a patch of its own; that write tells nobody anything (no job is
/// active, ready, done or suspended either way) and was a third of our status patches, most of the API requests
/// we made beyond upstream's (issue 39). The counts are written with the first one that is not zero, or with
/// the first condition. Counts that fall back to zero after being written are a change, and written.
fn defer_empty_counts(before: &TrainJobStatus, after: &mut TrainJobStatus) {
    let all_zero = after.jobs_status.iter().all(|j| {
        j.ready == 0 && j.succeeded == 0 && j.failed == 0 && j.active == 0 && j.suspended == 0
    });
    if !before.jobs_status.is_empty() || after.jobs_status.is_empty() || !all_zero {
        return;
    }
    let counts = std::mem::take(&mut after.jobs_status);
    if after != before {
        after.jobs_status = counts;
    }
}

/// Whether `after` differs from `before` in `jobsStatus` counts and nothing else: a write that tells no
/// condition, time or result, only how many Jobs are active, ready, done or suspended right now (the writes
/// [`crate::CountWriteBudget`] paces).
pub fn counts_only(before: &TrainJobStatus, after: &TrainJobStatus) -> bool {
    before.jobs_status != after.jobs_status
        && TrainJobStatus {
            jobs_status: before.jobs_status.clone(),
            ..after.clone()
        } == *before
}

/// The JSON merge patch (RFC 7386) turning `before` into `after`, wrapped as `{"status": ...}`; `None` if equal.
/// Lists are replaced whole, removed fields become `null` (upstream's `client.MergeFrom`).
pub fn merge_patch(before: &TrainJobStatus, after: &TrainJobStatus) -> Option<Value> {
    if before == after {
        return None;
    }
    let before = serde_json::to_value(before).unwrap_or(Value::Null);
    let after = serde_json::to_value(after).unwrap_or(Value::Null);
    let diff = diff(&before, &after)?;
    Some(Value::Object(Map::from_iter([("status".to_owned(), diff)])))
}

fn diff(before: &Value, after: &Value) -> Option<Value> {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let mut out = Map::new();
            for (key, old) in b {
                match a.get(key) {
                    None => {
                        out.insert(key.clone(), Value::Null);
                    }
                    Some(new) => {
                        if let Some(d) = diff(old, new) {
                            out.insert(key.clone(), d);
                        }
                    }
                }
            }
            for (key, new) in a {
                if !b.contains_key(key) {
                    out.insert(key.clone(), new.clone());
                }
            }
            (!out.is_empty()).then_some(Value::Object(out))
        }
        (b, a) if b == a => None,
        (_, a) => Some(a.clone()),
    }
}
