//! After the quota reservation: admission checks (two-phase admission) and `waitForPodsReady`,
//! driven by timers in virtual time (kueue v0.19.1 `pkg/workload/admissionchecks.go`,
//! `pkg/controller/core/workload_controller.go` `reconcileCheckBasedEviction` and
//! `reconcileNotReadyTimeout`, `pkg/controller/jobframework/reconciler.go`).
//!
//! * A reservation in a ClusterQueue with checks for the assigned flavors leaves the workload
//!   `QuotaReserved=True`, `Admitted=False/UnsatisfiedAdmissionChecks` until every check is
//!   `Ready`; `Retry` evicts it (reason `AdmissionCheck`) and requeues it at once, `Rejected`
//!   deactivates it (`DeactivatedDueToAdmissionCheck`). How and when each check answers comes from
//!   the scenario (`kubetrain.dev/answers` on the AdmissionCheck, `kubetrain.dev/check.<name>` on a
//!   Workload); without an answer a check stays `Pending`, as it does upstream when no controller
//!   answers.
//! * Once `Admitted`, a workload's pods become ready after `kubetrain.dev/pods-ready` (default at
//!   once; `never`). Not ready within `waitForPodsReady.timeout`: evicted (`PodsReadyTimeout`) and
//!   requeued after base × 2^(n−1) seconds (capped), deactivated past `backoffLimitCount`; a pod
//!   lost after `kubetrain.dev/pods-lost` must be replaced within `recoveryTimeout`.
//!   `blockAdmission` holds every admission while an admitted workload is not ready.

use std::cmp::Reverse;

use super::{Phase, Scheduler, conditions};
use crate::api::CheckState;
use crate::model::WlId;

/// A timed event of the workload lifecycle; `epoch` ties it to one reservation (or one requeue),
/// so an event of an earlier reservation is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    /// An admission check answers.
    CheckAnswer {
        /// Workload.
        wl: WlId,
        /// Position in the workload's checks.
        pos: usize,
        /// The answer.
        state: CheckState,
        /// Reservation number.
        epoch: u32,
    },
    /// Every pod is ready.
    PodsReady {
        /// Workload.
        wl: WlId,
        /// Reservation number.
        epoch: u32,
    },
    /// A pod failed; a replacement is awaited.
    PodsLost {
        /// Workload.
        wl: WlId,
        /// Reservation number.
        epoch: u32,
    },
    /// `waitForPodsReady.timeout` (or `recoveryTimeout`) is due.
    ReadyTimeout {
        /// Workload.
        wl: WlId,
        /// Reservation number.
        epoch: u32,
        /// Waiting for recovery (else for the start).
        recovery: bool,
    },
    /// The requeue backoff is over.
    Requeue {
        /// Workload.
        wl: WlId,
        /// Requeue number.
        epoch: u32,
    },
}

/// Lifecycle state of a workload beyond its reservation.
#[derive(Debug, Clone, Default)]
pub struct Lifecycle {
    /// Checks of the current reservation: (check index, state).
    pub checks: Vec<(usize, CheckState)>,
    /// Reservations so far (the answer list is indexed by it).
    pub reservations: u32,
    /// `PodsReady=True`.
    pub pods_ready: bool,
    /// Requeues after a pods-ready timeout (`requeueState.count`).
    pub requeues: u32,
    /// Queue-order timestamp override (the eviction time of a requeued workload).
    pub order_ms: Option<i64>,
    /// Deactivated (`spec.active=false`): never queued again.
    pub deactivated: bool,
    /// Waiting for its requeue backoff.
    pub backoff_until: Option<i64>,
    /// Total time spent between reservation and admission (checks pending), ms.
    pub check_wait_ms: i64,
    /// Evictions by a `Retry` check.
    pub check_retries: u32,
    /// Evictions by `PodsReadyTimeout`.
    pub pods_ready_timeouts: u32,
}

impl Scheduler {
    /// Schedules a timer.
    pub(super) fn schedule(&mut self, at: i64, t: Timer) {
        self.timer_seq += 1;
        self.timers.push(Reverse((at, self.timer_seq, t)));
    }

    /// When the next timer (check answer, pods ready, timeout, requeue) is due.
    pub fn next_timer(&self) -> Option<i64> {
        self.timers.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Workloads that became `Admitted` (checks ready) since the last call: their jobs start.
    pub fn take_started(&mut self) -> Vec<WlId> {
        std::mem::take(&mut self.started)
    }

    /// The ClusterQueues of workloads evicted by a check or a pods-ready timeout since the last
    /// call (one entry per eviction).
    pub fn take_lifecycle_evictions(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.lifecycle_evictions)
    }

    /// Runs the timers due at or before `now_ms`, each at its own time (so what it schedules
    /// counts from then).
    pub fn run_timers(&mut self) {
        let now = self.now_ms;
        while let Some(Reverse((at, _, t))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            self.now_ms = at;
            self.fire(t);
        }
        self.now_ms = now;
    }

    fn current(&self, wl: WlId, epoch: u32) -> bool {
        self.wls[wl].admission.is_some() && self.wls[wl].life.reservations == epoch
    }

    fn fire(&mut self, t: Timer) {
        match t {
            Timer::CheckAnswer {
                wl,
                pos,
                state,
                epoch,
            } if self.current(wl, epoch) => self.answer(wl, pos, state),
            Timer::PodsReady { wl, epoch } if self.current(wl, epoch) => self.pods_ready(wl),
            Timer::PodsLost { wl, epoch } if self.current(wl, epoch) => self.pods_lost(wl),
            Timer::ReadyTimeout {
                wl,
                epoch,
                recovery,
            } if self.current(wl, epoch) && !self.wls[wl].life.pods_ready => {
                self.ready_timeout(wl, recovery);
            }
            Timer::Requeue { wl, epoch } if self.wls[wl].life.requeues == epoch => {
                let st = &mut self.wls[wl];
                if st.life.backoff_until.take().is_some() && st.phase == Phase::Pending {
                    conditions::set(
                        &mut st.conditions,
                        "Requeued",
                        true,
                        "BackoffFinished",
                        "The workload backoff was finished",
                    );
                    if let crate::model::QueueTarget::Queue(cq) = self.model.workloads[wl].target {
                        self.enqueue(cq, wl);
                    }
                }
            }
            _ => {}
        }
    }

    /// The checks of the current reservation: those of its ClusterQueue for the assigned flavors,
    /// by name.
    pub(super) fn reservation_checks(&self, wl: WlId) -> Vec<usize> {
        let Some(adm) = &self.wls[wl].admission else {
            return Vec::new();
        };
        let flavors: Vec<usize> = adm
            .pod_sets
            .iter()
            .flat_map(|p| p.resources.iter().map(|r| r.1))
            .collect();
        let mut checks: Vec<usize> = self.model.cqs[adm.cq]
            .checks
            .iter()
            .filter(|(_, on)| on.is_empty() || on.iter().any(|f| flavors.contains(f)))
            .map(|(c, _)| *c)
            .filter(|&c| c < self.model.checks.len())
            .collect();
        checks.sort_by(|a, b| self.model.checks[*a].name.cmp(&self.model.checks[*b].name));
        checks.dedup();
        checks
    }

    /// `Admitted=False` while checks are pending.
    pub(super) fn mark_waiting_for_checks(&mut self, wl: WlId) {
        let reason = if self.model.settings.observability {
            "UnsatisfiedAdmissionChecks"
        } else {
            "UnsatisfiedChecks"
        };
        conditions::set(
            &mut self.wls[wl].conditions,
            "Admitted",
            false,
            reason,
            "The workload has not all checks ready",
        );
    }

    /// Called once the quota is reserved: pending checks for the assigned flavors, or admitted.
    pub(super) fn after_reservation(&mut self, wl: WlId) {
        let checks = self.reservation_checks(wl);
        let st = &mut self.wls[wl];
        st.life.reservations += 1;
        st.life.checks = checks.iter().map(|&c| (c, CheckState::Pending)).collect();
        if checks.is_empty() {
            self.start(wl);
            return;
        }
        self.mark_waiting_for_checks(wl);
        self.schedule_answers(wl, self.now_ms);
    }

    /// Schedules the scenario's answers of the reservation's pending checks, counted from
    /// `reserved_ms` (not before now).
    pub(super) fn schedule_answers(&mut self, wl: WlId, reserved_ms: i64) {
        let epoch = self.wls[wl].life.reservations;
        let checks = self.wls[wl].life.checks.clone();
        for (pos, &(c, state)) in checks.iter().enumerate() {
            if state != CheckState::Pending {
                continue;
            }
            let check = &self.model.checks[c];
            let answers = self.model.workloads[wl]
                .check_answers
                .get(&check.name)
                .unwrap_or(&check.answers);
            let Some(a) = answers
                .get(epoch as usize - 1)
                .or_else(|| answers.last())
                .copied()
            else {
                continue;
            };
            if let Some(state) = a.state {
                let at = reserved_ms
                    .saturating_add(a.after_ms.max(0))
                    .max(self.now_ms);
                self.schedule(
                    at,
                    Timer::CheckAnswer {
                        wl,
                        pos,
                        state,
                        epoch,
                    },
                );
            }
        }
    }

    fn answer(&mut self, wl: WlId, pos: usize, state: CheckState) {
        let Some(entry) = self.wls[wl].life.checks.get_mut(pos) else {
            return;
        };
        entry.1 = state;
        let name = self.model.checks[entry.0].name.clone();
        match state {
            CheckState::Ready => {
                if self.wls[wl]
                    .life
                    .checks
                    .iter()
                    .all(|c| c.1 == CheckState::Ready)
                {
                    self.start(wl);
                }
            }
            CheckState::Retry => {
                let msg = format!("Evicted due to AdmissionCheck in Retry state: {name:?}");
                self.wls[wl].life.check_retries += 1;
                self.wls[wl].life.order_ms = Some(self.now_ms);
                self.evict(wl, "AdmissionCheck", &msg, EvictThen::Requeue);
            }
            CheckState::Rejected => {
                let msg = format!(
                    "The workload is deactivated due to AdmissionCheck in Rejected state: {name:?}"
                );
                self.evict(
                    wl,
                    "DeactivatedDueToAdmissionCheck",
                    &msg,
                    EvictThen::Deactivate,
                );
            }
            CheckState::Pending => {}
        }
    }

    /// `Admitted=True`: the job starts; pods-ready timers begin.
    fn start(&mut self, wl: WlId) {
        let now = self.now_ms;
        let st = &mut self.wls[wl];
        conditions::set(
            &mut st.conditions,
            "Admitted",
            true,
            "Admitted",
            "The workload is admitted",
        );
        if let Some(adm) = &st.admission {
            st.life.check_wait_ms += now - adm.reserved_ms;
        }
        st.first_admitted_ms.get_or_insert(now);
        st.admitted_ms = Some(now);
        st.life.pods_ready = false;
        let epoch = st.life.reservations;
        self.started.push(wl);
        let Some(pr) = self.model.settings.pods_ready else {
            return;
        };
        let plan = self.model.workloads[wl].pods;
        match plan.ready_after_ms {
            Some(0) => self.pods_ready(wl),
            Some(d) => self.schedule(now.saturating_add(d), Timer::PodsReady { wl, epoch }),
            None => {}
        }
        if !self.wls[wl].life.pods_ready {
            conditions::set(
                &mut self.wls[wl].conditions,
                "PodsReady",
                false,
                "WaitForStart",
                "Not all pods are ready or succeeded",
            );
            self.schedule(
                now.saturating_add(pr.timeout_ms),
                Timer::ReadyTimeout {
                    wl,
                    epoch,
                    recovery: false,
                },
            );
        }
    }

    fn pods_ready(&mut self, wl: WlId) {
        let st = &mut self.wls[wl];
        let recovered = conditions::find(&st.conditions, "PodsReady")
            .is_some_and(|c| matches!(c.reason.as_str(), "WaitForRecovery" | "Recovered"));
        st.life.pods_ready = true;
        conditions::set(
            &mut st.conditions,
            "PodsReady",
            true,
            if recovered { "Recovered" } else { "Started" },
            "All pods reached readiness and the workload is running",
        );
        let epoch = st.life.reservations;
        if let Some(lost) = self.model.workloads[wl].pods.lost_after_ms
            && !recovered
        {
            self.schedule(
                self.now_ms.saturating_add(lost),
                Timer::PodsLost { wl, epoch },
            );
        }
    }

    fn pods_lost(&mut self, wl: WlId) {
        let Some(pr) = self.model.settings.pods_ready else {
            return;
        };
        let st = &mut self.wls[wl];
        st.life.pods_ready = false;
        conditions::set(
            &mut st.conditions,
            "PodsReady",
            false,
            "WaitForRecovery",
            "At least one pod has failed, waiting for recovery",
        );
        let epoch = st.life.reservations;
        if let Some(d) = self.model.workloads[wl].pods.recover_after_ms {
            self.schedule(
                self.now_ms.saturating_add(d),
                Timer::PodsReady { wl, epoch },
            );
        }
        if let Some(t) = pr.recovery_timeout_ms {
            self.schedule(
                self.now_ms.saturating_add(t),
                Timer::ReadyTimeout {
                    wl,
                    epoch,
                    recovery: true,
                },
            );
        }
    }

    /// `reconcileNotReadyTimeout`: evict with `PodsReadyTimeout` and back off, or deactivate
    /// past the backoff limit.
    fn ready_timeout(&mut self, wl: WlId, _recovery: bool) {
        let Some(pr) = self.model.settings.pods_ready else {
            return;
        };
        let key = self.model.workloads[wl].key.clone();
        let st = &mut self.wls[wl];
        if pr
            .backoff_limit
            .is_some_and(|limit| i64::from(st.life.requeues) + 1 > i64::from(limit))
        {
            self.evict(
                wl,
                "DeactivatedDueToRequeuingLimitExceeded",
                "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
                EvictThen::Deactivate,
            );
            return;
        }
        st.life.requeues += 1;
        st.life.pods_ready_timeouts += 1;
        let n = st.life.requeues;
        let wait = pr
            .backoff_base_ms
            .saturating_mul(1i64 << (n - 1).min(40))
            .min(pr.backoff_max_ms);
        let until = self.now_ms.saturating_add(wait);
        st.life.backoff_until = Some(until);
        if pr.eviction_timestamp {
            st.life.order_ms = Some(self.now_ms);
        }
        let msg = format!("Exceeded the PodsReady timeout {key}");
        self.evict(wl, "PodsReadyTimeout", &msg, EvictThen::Backoff);
        self.schedule(until, Timer::Requeue { wl, epoch: n });
    }

    /// Releases the reservation with an `Evicted` condition; then requeues, waits for the backoff
    /// timer or deactivates.
    fn evict(&mut self, wl: WlId, reason: &str, message: &str, then: EvictThen) {
        let Some(adm) = self.wls[wl].admission.take() else {
            return;
        };
        self.release(wl, &adm);
        self.lifecycle_evictions.push(adm.cq);
        let obs = self.model.settings.observability;
        let st = &mut self.wls[wl];
        st.phase = Phase::Pending;
        st.life.checks.clear();
        st.life.pods_ready = false;
        conditions::set(&mut st.conditions, "Evicted", true, reason, message);
        conditions::set(
            &mut st.conditions,
            "Requeued",
            then == EvictThen::Requeue,
            reason,
            message,
        );
        conditions::set_pending(
            &mut st.conditions,
            obs,
            if obs { "PendingEvaluation" } else { "Pending" },
            message,
        );
        if let Some(c) = st.conditions.iter_mut().find(|c| c.type_ == "PodsReady") {
            c.status = "False".to_string();
            c.reason = "WaitForStart".to_string();
            c.message = "Not all pods are ready or succeeded".to_string();
        }
        let cq = adm.cq;
        match then {
            EvictThen::Requeue => self.enqueue(cq, wl),
            EvictThen::Backoff => {}
            EvictThen::Deactivate => st.life.deactivated = true,
        }
        self.flush_tree(cq);
    }

    /// `blockAdmission`: some admitted workload's pods are not ready yet.
    pub(super) fn blocked_by_pods_ready(&self) -> bool {
        self.model
            .settings
            .pods_ready
            .is_some_and(|p| p.block_admission)
            && self.wls.iter().any(|w| {
                w.admission.is_some()
                    && !w.life.pods_ready
                    && conditions::find(&w.conditions, "Admitted")
                        .is_some_and(|c| c.status == "True")
            })
    }
}

/// What follows an eviction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EvictThen {
    /// Back in the queue at once.
    Requeue,
    /// Back in the queue when the backoff timer fires.
    Backoff,
    /// Never again (`spec.active=false`).
    Deactivate,
}
