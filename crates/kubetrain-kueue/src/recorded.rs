//! What a Workload exported from a cluster records of its progress (`status`), resolved into the
//! model's virtual time: 0 is the moment of the snapshot (the latest time the setup records), so
//! recorded times are negative or 0 and a timeout or backoff continues from where it was
//! (upstream `pkg/controller/core/workload_controller.go` `admittedNotReadyWorkload`,
//! `pkg/workload` `GetQueueOrderTimestamp`).

use crate::api::CheckState;
use crate::api::{ApiCondition, WorkloadStatus};
use crate::load::WorkloadObject;
use crate::time::parse_rfc3339_ms;

/// A workload's recorded progress, in virtual milliseconds relative to the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordedStatus {
    /// Quota reserved since (the `QuotaReserved=True` condition's time; 0 without one); `None`
    /// without `status.admission` or when `Evicted=True` (the eviction releases it).
    pub reserved_ms: Option<i64>,
    /// `Admitted=True` since; `None` while only quota is reserved. A `status.admission` without
    /// `QuotaReserved` and `Admitted` conditions (a hand-written setup) counts as admitted at 0.
    pub admitted_ms: Option<i64>,
    /// `status.admissionChecks`: (check name, state).
    pub checks: Vec<(String, CheckState)>,
    /// The `PodsReady` condition, if recorded.
    pub pods_ready: Option<PodsReadyRecord>,
    /// A `status.admission` without `QuotaReserved` and `Admitted` conditions (a setup written by
    /// hand): admitted at 0 with its pods running.
    pub legacy: bool,
    /// `requeueState.count`.
    pub requeues: u32,
    /// `requeueState.requeueAt`: the backoff ends then.
    pub requeue_at_ms: Option<i64>,
    /// `Evicted=True` by a pods-ready timeout or an admission check: (reason, time); with
    /// `requeuingStrategy.timestamp: Eviction` (or for a check) the queue orders by that time.
    pub evicted: Option<(String, i64)>,
}

/// The recorded `PodsReady` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodsReadyRecord {
    /// `True`.
    pub ready: bool,
    /// `False` with reason `WaitForRecovery`: a pod failed after the start.
    pub recovering: bool,
    /// The condition's time.
    pub since_ms: i64,
}

/// Every time a Workload records: its creation and the times of its conditions and checks
/// (`requeueAt` lies in the future and is not one).
pub fn recorded_times(w: &WorkloadObject) -> impl Iterator<Item = i64> + '_ {
    let status = &w.status;
    w.metadata
        .creation_timestamp
        .iter()
        .chain(
            status
                .conditions
                .iter()
                .filter_map(|c| c.last_transition_time.as_ref()),
        )
        .chain(
            status
                .admission_checks
                .iter()
                .filter_map(|c| c.last_transition_time.as_ref()),
        )
        .filter_map(|t| parse_rfc3339_ms(t))
}

fn condition<'a>(status: &'a WorkloadStatus, type_: &str) -> Option<&'a ApiCondition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// The check state as the API spells it; unknown words read as `Pending`.
fn check_state(v: &str) -> CheckState {
    match v {
        "Ready" => CheckState::Ready,
        "Retry" => CheckState::Retry,
        "Rejected" => CheckState::Rejected,
        _ => CheckState::Pending,
    }
}

impl RecordedStatus {
    /// Resolves `status` with times relative to `snapshot_ms` (absolute ms since the epoch).
    pub fn resolve(status: &WorkloadStatus, snapshot_ms: i64) -> Self {
        let at = |t: Option<&String>| {
            t.and_then(|t| parse_rfc3339_ms(t))
                .map_or(0, |t| t - snapshot_ms)
        };
        let is_true = |c: &&ApiCondition| c.status == "True";
        let quota = condition(status, "QuotaReserved").filter(is_true);
        let admitted = condition(status, "Admitted").filter(is_true);
        let legacy = status.admission.is_some()
            && condition(status, "QuotaReserved").is_none()
            && condition(status, "Admitted").is_none();
        let reserved_ms = match (quota, &status.admission) {
            (Some(c), _) => Some(at(c.last_transition_time.as_ref())),
            (None, Some(_)) if legacy || admitted.is_some() => Some(0),
            _ => None,
        };
        let admitted_ms = match admitted {
            Some(c) => Some(at(c.last_transition_time.as_ref())),
            None if legacy => Some(0),
            None => None,
        };
        let pods_ready = condition(status, "PodsReady").map(|c| PodsReadyRecord {
            ready: c.status == "True",
            recovering: c.status != "True" && c.reason == "WaitForRecovery",
            since_ms: at(c.last_transition_time.as_ref()),
        });
        let evicted = condition(status, "Evicted")
            .filter(is_true)
            .map(|c| (c.reason.clone(), at(c.last_transition_time.as_ref())));
        let requeue = status.requeue_state.as_ref();
        // Evicted while the reservation is still recorded: the job is being stopped; the
        // controllers take no time in the model, so the quota is released already.
        let holds = status.admission.is_some() && evicted.is_none();
        RecordedStatus {
            reserved_ms: reserved_ms.filter(|_| holds),
            admitted_ms: admitted_ms.filter(|_| holds),
            checks: status
                .admission_checks
                .iter()
                .map(|c| (c.name.clone(), check_state(&c.state)))
                .collect(),
            pods_ready,
            legacy,
            requeues: requeue
                .and_then(|r| r.count)
                .map_or(0, |c| u32::try_from(c).unwrap_or(0)),
            requeue_at_ms: requeue
                .and_then(|r| r.requeue_at.as_deref())
                .and_then(parse_rfc3339_ms)
                .map(|t| t - snapshot_ms),
            evicted,
        }
    }

    /// Quota is reserved and the workload waits for its admission checks (`QuotaReserved=True`
    /// without `Admitted=True`).
    pub fn reserved_only(&self) -> bool {
        self.reserved_ms.is_some() && self.admitted_ms.is_none()
    }
}
