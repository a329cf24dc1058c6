//! KEP-2899's run policy as pure decisions (ahead of upstream v2.3): the effective active deadline and TTL (the
//! TrainJob's own field, else the runtime's `runPolicy` default), `status.startTime` and
//! `status.completionTime` with JobSet's semantics, and when a finished TrainJob's TTL expires.
//!
//! Everything is computed from what is stored (conditions and their transition times, the TTL in the spec)
//! and the current time, never from a timer kept in memory: after an operator restart the first reconcile
//! finds an expired TTL expired and deletes at once, and an edited TTL counts from the same completion time.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::{Event, EventType};
use kubetrain_api::conditions::{COMPLETE, FAILED, SUSPENDED, TTL_EXPIRED};
use kubetrain_api::{RunPolicy, TrainJob, TrainJobStatus};
use kubetrain_jobset::status::is_finished;

/// Action of the [`ttl_expired_event`].
pub const ACTION_DELETING: &str = "Deleting";

/// The shortest requeue for a TTL still to run (a TTL due now, or a clock behind the completion time,
/// is looked at again after this rather than in a tight loop).
pub const MIN_REQUEUE: Duration = Duration::from_secs(1);

/// The active deadline in force: the TrainJob's `spec.activeDeadlineSeconds`, else the runtime's
/// `runPolicy.activeDeadlineSeconds`.
pub fn effective_active_deadline(job: &TrainJob, run_policy: Option<&RunPolicy>) -> Option<i64> {
    job.spec
        .active_deadline_seconds
        .or_else(|| run_policy.and_then(|p| p.active_deadline_seconds))
}

/// The TTL in force: the TrainJob's `spec.ttlSecondsAfterFinished`, else the runtime's
/// `runPolicy.ttlSecondsAfterFinished`; `None` keeps the finished TrainJob.
pub fn effective_ttl(job: &TrainJob, run_policy: Option<&RunPolicy>) -> Option<i32> {
    job.spec
        .ttl_seconds_after_finished
        .or_else(|| run_policy.and_then(|p| p.ttl_seconds_after_finished))
}

/// Sets `startTime` and `completionTime` on `status` (the status after this reconcile's other changes).
///
/// `startTime`: cleared while the job is suspended and not finished; otherwise the time the job last began
/// to run, which is the transition of `Suspended` to `False` (a resume) or, for a job never suspended, its
/// creation: the instants the active deadline counts from. A finished job keeps its start.
///
/// `completionTime`: the transition time of the `Complete` or `Failed` condition that is true (kept once
/// set); absent while the job runs.
pub fn set_times(job: &TrainJob, status: &mut TrainJobStatus) {
    let finished = is_finished(status);
    if job.spec.is_suspended() && !finished {
        status.start_time = None;
    } else if !finished || status.start_time.is_none() {
        let resumed = status
            .conditions
            .iter()
            .find(|c| c.type_ == SUSPENDED && c.status == "False")
            .map(|c| c.last_transition_time.clone());
        let start = resumed.or_else(|| job.metadata.creation_timestamp.clone());
        if start.is_some() {
            status.start_time = start;
        }
    }
    if finished {
        if status.completion_time.is_none() {
            status.completion_time = finish_time(status);
        }
    } else {
        status.completion_time = None;
    }
}

/// When the job finished: the transition time of its true `Complete` (else `Failed`) condition.
pub fn finish_time(status: &TrainJobStatus) -> Option<Time> {
    [COMPLETE, FAILED].iter().find_map(|type_| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == *type_ && c.status == "True")
            .map(|c| c.last_transition_time.clone())
    })
}

/// What the TTL asks of a finished TrainJob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ttl {
    /// No TTL, or the job has not finished: keep it.
    Keep,
    /// The TTL expired (now, or while the operator was down): delete the TrainJob.
    Expired,
    /// The TTL expires after this long: reconcile again then.
    After(Duration),
}

/// The TTL decision for a job with `status` (completion time set) and effective TTL `ttl` at `now`.
pub fn ttl_decision(status: &TrainJobStatus, ttl: Option<i32>, now: &Time) -> Ttl {
    let (Some(ttl), true) = (ttl, is_finished(status)) else {
        return Ttl::Keep;
    };
    let Some(finished) = status
        .completion_time
        .clone()
        .or_else(|| finish_time(status))
    else {
        return Ttl::Keep;
    };
    let expires_ms = finished
        .0
        .as_millisecond()
        .saturating_add(i64::from(ttl.max(0)).saturating_mul(1000));
    let left_ms = expires_ms.saturating_sub(now.0.as_millisecond());
    if left_ms <= 0 {
        Ttl::Expired
    } else {
        let left = Duration::from_millis(u64::try_from(left_ms).unwrap_or(u64::MAX));
        Ttl::After(left.max(MIN_REQUEUE))
    }
}

/// The Normal event recorded on a TrainJob as the controller deletes it after its TTL.
pub fn ttl_expired_event(status: &TrainJobStatus, ttl: i32) -> Event {
    let finished = status
        .completion_time
        .as_ref()
        .map_or_else(|| "its completion".to_owned(), |t| t.0.to_string());
    Event {
        type_: EventType::Normal,
        reason: TTL_EXPIRED.to_owned(),
        note: Some(format!(
            "TrainJob finished at {finished}; ttlSecondsAfterFinished={ttl} expired: deleting it, \
its JobSet and pods with it"
        )),
        action: ACTION_DELETING.to_owned(),
        secondary: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use k8s_openapi::jiff::Timestamp;
    use kubetrain_api::{RuntimeRef, TrainJobSpec};
    use proptest::prelude::*;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(1_700_000_000 + secs).unwrap())
    }

    fn cond(type_: &str, status: &str, secs: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            last_transition_time: at(secs),
            observed_generation: None,
        }
    }

    fn job(ttl: Option<i32>, suspend: bool) -> TrainJob {
        let mut job = TrainJob::new(
            "j",
            TrainJobSpec {
                runtime_ref: RuntimeRef::cluster("r"),
                suspend: Some(suspend),
                ttl_seconds_after_finished: ttl,
                ..TrainJobSpec::default()
            },
        );
        job.metadata.creation_timestamp = Some(at(0));
        job
    }

    #[test]
    fn the_job_overrides_the_runtime_default() {
        let policy = RunPolicy {
            active_deadline_seconds: Some(60),
            ttl_seconds_after_finished: Some(30),
        };
        let mut j = job(None, false);
        assert_eq!(effective_ttl(&j, Some(&policy)), Some(30));
        assert_eq!(effective_active_deadline(&j, Some(&policy)), Some(60));
        assert_eq!(effective_ttl(&j, None), None);
        j.spec.ttl_seconds_after_finished = Some(0);
        j.spec.active_deadline_seconds = Some(5);
        assert_eq!(effective_ttl(&j, Some(&policy)), Some(0));
        assert_eq!(effective_active_deadline(&j, Some(&policy)), Some(5));
    }

    #[test]
    fn start_and_completion_times_follow_jobset_semantics() {
        // Never suspended: started at creation, no completion yet.
        let mut status = TrainJobStatus::default();
        set_times(&job(None, false), &mut status);
        assert_eq!(
            (status.start_time.clone(), status.completion_time.clone()),
            (Some(at(0)), None)
        );
        // Suspended: no start time.
        let mut suspended = TrainJobStatus {
            conditions: vec![cond(SUSPENDED, "True", 5)],
            start_time: Some(at(0)),
            ..TrainJobStatus::default()
        };
        set_times(&job(None, true), &mut suspended);
        assert_eq!(suspended.start_time, None);
        // Resumed at 50: the start resets to the resume.
        let mut resumed = TrainJobStatus {
            conditions: vec![cond(SUSPENDED, "False", 50)],
            ..TrainJobStatus::default()
        };
        set_times(&job(None, false), &mut resumed);
        assert_eq!(resumed.start_time, Some(at(50)));
        // Failed at 90: completion is the condition's transition; start is kept.
        resumed.conditions.push(cond(FAILED, "True", 90));
        set_times(&job(None, false), &mut resumed);
        assert_eq!(
            (resumed.start_time.clone(), resumed.completion_time.clone()),
            (Some(at(50)), Some(at(90)))
        );
        // Set once: a later reconcile keeps it.
        resumed.conditions[1].last_transition_time = at(95);
        set_times(&job(None, false), &mut resumed);
        assert_eq!(resumed.completion_time, Some(at(90)));
    }

    #[test]
    fn ttl_counts_from_completion_and_an_expired_ttl_deletes_at_once() {
        let finished = TrainJobStatus {
            conditions: vec![cond(COMPLETE, "True", 100)],
            completion_time: Some(at(100)),
            ..TrainJobStatus::default()
        };
        assert_eq!(ttl_decision(&finished, None, &at(1000)), Ttl::Keep);
        assert_eq!(
            ttl_decision(&finished, Some(60), &at(130)),
            Ttl::After(Duration::from_secs(30))
        );
        assert_eq!(ttl_decision(&finished, Some(60), &at(160)), Ttl::Expired);
        // The operator was down past the TTL: the first reconcile deletes.
        assert_eq!(ttl_decision(&finished, Some(60), &at(10_000)), Ttl::Expired);
        assert_eq!(ttl_decision(&finished, Some(0), &at(100)), Ttl::Expired);
        // A clock behind the completion time waits the TTL plus the skew, never less than a second.
        assert_eq!(
            ttl_decision(&finished, Some(0), &at(99)),
            Ttl::After(Duration::from_secs(1))
        );
        // An edited TTL recomputes from the same completion time.
        assert_eq!(
            ttl_decision(&finished, Some(3600), &at(160)),
            Ttl::After(Duration::from_secs(3540))
        );
        // Running: no TTL decision.
        assert_eq!(
            ttl_decision(&TrainJobStatus::default(), Some(0), &at(0)),
            Ttl::Keep
        );
    }

    #[test]
    fn the_event_names_the_ttl() {
        let status = TrainJobStatus {
            completion_time: Some(at(100)),
            ..TrainJobStatus::default()
        };
        let event = ttl_expired_event(&status, 30);
        assert_eq!(
            (event.reason.as_str(), event.type_),
            (TTL_EXPIRED, EventType::Normal)
        );
        assert!(event.note.unwrap().contains("ttlSecondsAfterFinished=30"));
    }

    proptest! {
        /// Whatever the times, a finished job with a TTL is either expired or due within the TTL (plus any
        /// clock skew), and the decision only moves towards expiry as time passes.
        #[test]
        fn ttl_is_monotonic(done in 0i64..10_000, ttl in 0i32..100_000, now in 0i64..200_000, later in 0i64..100_000) {
            let status = TrainJobStatus {
                conditions: vec![cond(FAILED, "True", done)],
                completion_time: Some(at(done)),
                ..TrainJobStatus::default()
            };
            let first = ttl_decision(&status, Some(ttl), &at(now));
            let second = ttl_decision(&status, Some(ttl), &at(now + later));
            match first {
                Ttl::Keep => prop_assert!(false, "a finished job with a TTL is never kept"),
                Ttl::Expired => prop_assert_eq!(second, Ttl::Expired),
                Ttl::After(left) => {
                    prop_assert!(left.as_secs() <= u64::try_from(ttl).unwrap() + u64::try_from(done).unwrap());
                    if let Ttl::After(left2) = second {
                        prop_assert!(left2 <= left);
                    }
                }
            }
        }
    }
}
