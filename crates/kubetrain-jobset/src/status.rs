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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use kubetrain_api::jobset::{JobSetStatus, ReplicatedJobStatus};

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn job(suspend: bool, ads: Option<i64>) -> TrainJob {
        let mut job = TrainJob::new("j", Default::default());
        job.spec.suspend = Some(suspend);
        job.spec.active_deadline_seconds = ads;
        job.metadata.creation_timestamp = Some(at(1_000));
        job
    }

    fn find<'a>(s: &'a TrainJobStatus, t: &str) -> &'a Condition {
        s.conditions
            .iter()
            .find(|c| c.type_ == t)
            .unwrap_or_else(|| panic!("no {t} condition"))
    }

    #[test]
    fn suspend_then_resume() {
        let suspended = sync_status(&job(true, None), None, &at(1_010)).status;
        let c = find(&suspended, SUSPENDED);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("True", "Suspended", "TrainJob is suspended")
        );
        let mut resumed_job = job(false, None);
        resumed_job.status = Some(suspended);
        let resumed = sync_status(&resumed_job, None, &at(1_020)).status;
        let c = find(&resumed, SUSPENDED);
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "Resumed"));
        assert_eq!(c.last_transition_time, at(1_020), "the status flipped");
        // Never suspended: no condition at all.
        assert!(
            sync_status(&job(false, None), None, &at(1_010))
                .status
                .conditions
                .is_empty()
        );
    }

    #[test]
    fn completion_and_jobs_status_are_copied_from_the_jobset() {
        let js = JobSet {
            status: Some(JobSetStatus {
                conditions: vec![Condition {
                    type_: "Completed".into(),
                    status: "True".into(),
                    reason: "AllJobsCompleted".into(),
                    message: "jobset completed successfully".into(),
                    last_transition_time: at(2_000),
                    observed_generation: None,
                }],
                replicated_jobs_status: vec![ReplicatedJobStatus {
                    name: "node".into(),
                    succeeded: 2,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let update = sync_status(&job(false, Some(10)), Some(&js), &at(5_000));
        let c = find(&update.status, COMPLETE);
        assert_eq!(
            (c.reason.as_str(), c.last_transition_time.clone()),
            ("AllJobsCompleted", at(2_000))
        );
        assert_eq!(update.status.jobs_status[0].succeeded, 2);
        assert!(is_finished(&update.status));
        assert!(!update.delete_jobset, "a finished TrainJob has no deadline");
    }

    #[test]
    fn active_deadline() {
        let early = sync_status(&job(false, Some(60)), None, &at(1_030));
        assert_eq!(early.requeue_after, Some(Duration::from_secs(30)));
        assert!(!early.delete_jobset);
        let late = sync_status(&job(false, Some(60)), None, &at(1_061));
        assert!(late.delete_jobset);
        let c = find(&late.status, FAILED);
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            ("DeadlineExceeded", "TrainJob exceeded its active deadline")
        );
        // Suspended TrainJobs do not run down their deadline.
        assert_eq!(
            sync_status(&job(true, Some(60)), None, &at(9_999)).requeue_after,
            None
        );
    }
}
