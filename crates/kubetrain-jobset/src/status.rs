//! Status mapping JobSet → TrainJob (upstream `trainjob_controller.go` and the JobSet plugin's `Status`), as a
//! pure function the controller calls with what it read and the current time.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kubetrain_api::conditions::{
    COMPLETE, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE, FAILED, REASON_SUSPENDED, RESUMED,
    RESUMED_MESSAGE, SUSPENDED, SUSPENDED_MESSAGE,
};
use kubetrain_api::jobset::JobSet;
use kubetrain_api::{JobStatus, TrainJob, TrainJobStatus};

/// What the controller should do after a status sync.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusUpdate {
    /// The new TrainJob status (patch it if it differs from the current one).
    pub status: TrainJobStatus,
    /// The active deadline passed: delete the JobSet.
    pub delete_jobset: bool,
    /// Check the deadline again after this long.
    pub requeue_after: Option<Duration>,
}

fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Whether the TrainJob is finished (Complete or Failed is True).
pub fn is_finished(status: &TrainJobStatus) -> bool {
    is_true(&status.conditions, COMPLETE) || is_true(&status.conditions, FAILED)
}

/// `meta.SetStatusCondition`: add, or update in place; lastTransitionTime changes only when the status flips.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        None => conditions.push(new),
        Some(existing) => {
            if existing.status != new.status {
                existing.status = new.status;
                existing.last_transition_time = new.last_transition_time;
            }
            existing.reason = new.reason;
            existing.message = new.message;
            existing.observed_generation = new.observed_generation;
        }
    }
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, now: &Time) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: now.clone(),
        observed_generation: None,
    }
}

/// Computes the TrainJob status from the TrainJob, its JobSet (if it exists) and the current time:
/// the Suspended condition, Complete/Failed copied from the JobSet, `jobsStatus`, and the active deadline.
pub fn sync_status(job: &TrainJob, jobset: Option<&JobSet>, now: &Time) -> StatusUpdate {
    let mut status = job.status.clone().unwrap_or_default();

    if job.spec.is_suspended() {
        set_condition(
            &mut status.conditions,
            condition(SUSPENDED, "True", REASON_SUSPENDED, SUSPENDED_MESSAGE, now),
        );
    } else if is_true(&status.conditions, SUSPENDED) {
        set_condition(
            &mut status.conditions,
            condition(SUSPENDED, "False", RESUMED, RESUMED_MESSAGE, now),
        );
    }

    if let Some(js_status) = jobset.and_then(|j| j.status.as_ref()) {
        for (from, to) in [("Completed", COMPLETE), ("Failed", FAILED)] {
            if let Some(c) = js_status
                .conditions
                .iter()
                .find(|c| c.type_ == from && c.status == "True")
            {
                set_condition(
                    &mut status.conditions,
                    Condition {
                        type_: to.to_owned(),
                        ..c.clone()
                    },
                );
            }
        }
        status.jobs_status = js_status
            .replicated_jobs_status
            .iter()
            .map(|r| JobStatus {
                name: r.name.clone(),
                ready: r.ready,
                succeeded: r.succeeded,
                failed: r.failed,
                active: r.active,
                suspended: r.suspended,
            })
            .collect();
    }

    let mut update = StatusUpdate {
        status,
        delete_jobset: false,
        requeue_after: None,
    };
    deadline(job, now, &mut update);
    update
}

fn deadline(job: &TrainJob, now: &Time, update: &mut StatusUpdate) {
    let Some(ads) = job.spec.active_deadline_seconds.filter(|s| *s > 0) else {
        return;
    };
    if is_finished(&update.status) || job.spec.is_suspended() {
        return;
    }
    let resumed = update
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == SUSPENDED && c.status == "False");
    let start = match resumed {
        Some(c) => c.last_transition_time.0,
        None => match &job.metadata.creation_timestamp {
            Some(t) => t.0,
            None => return,
        },
    };
    let elapsed_ms = now.0.as_millisecond() - start.as_millisecond();
    let deadline_ms = ads.saturating_mul(1000);
    if elapsed_ms > deadline_ms {
        set_condition(
            &mut update.status.conditions,
            condition(
                FAILED,
                "True",
                DEADLINE_EXCEEDED,
                DEADLINE_EXCEEDED_MESSAGE,
                now,
            ),
        );
        update.delete_jobset = true;
    } else {
        let remaining = u64::try_from(deadline_ms - elapsed_ms)
            .unwrap_or(0)
            .max(1000);
        update.requeue_after = Some(Duration::from_millis(remaining));
    }
}
