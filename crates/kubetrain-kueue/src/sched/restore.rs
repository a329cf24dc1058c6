//! Starting from a snapshot: the state a Workload's `status` records is taken over whole, so
//! that what happens next continues from it (see [`crate::recorded`]).
//!
//! * `status.admission` books its quota and, for TAS flavors, its `topologyAssignment` on the
//!   nodes (upstream `pkg/workload` `TopologyDomainRequests`, `tas_flavor.go` `addUsage`);
//! * `QuotaReserved=True` without `Admitted=True` holds the quota and waits for the admission
//!   checks, with their recorded states (`Ready` ones stay ready);
//! * `Admitted=True` with `PodsReady` not `True`: the pods-ready timeout runs from the `Admitted`
//!   time (`WaitForRecovery`: the recovery timeout from the `PodsReady` time), as upstream's
//!   `admittedNotReadyWorkload`;
//! * `requeueState`: the requeue count continues (the backoff limit counts it) and a workload
//!   waits for `requeueAt`; an eviction by a pods-ready timeout or a check orders the queue by
//!   its time (`GetQueueOrderTimestamp`).

use super::lifecycle::Timer;
use super::{Admission, Phase, PodSetAdmission, Scheduler, conditions};
use crate::api::CheckState;
use crate::api::{AdmissionSpec, PodSetAssignmentSpec};
use crate::model::{FlavorId, WlId};
use crate::quantity::{Count, add};
use crate::quota::FrId;
use crate::tas::TopologyAssignment;

impl Scheduler {
    /// Takes over the recorded state of workload `wl`.
    pub(super) fn restore(&mut self, wl: WlId) {
        self.restore_requeue_state(wl);
        let Some(spec) = self.model.workloads[wl].initial_admission.clone() else {
            return;
        };
        let recorded = self.model.workloads[wl].recorded.clone();
        let Some(reserved_ms) = recorded.reserved_ms else {
            return;
        };
        let Some(cq) = self.model.cq_id(&spec.cluster_queue) else {
            return;
        };
        self.book_recorded_admission(wl, cq, &spec, reserved_ms);
        let st = &mut self.wls[wl];
        st.phase = Phase::Admitted;
        st.life.reservations = 1;
        conditions::set_admitted(&mut st.conditions, &spec.cluster_queue);
        self.admitted[cq].push(wl);
        let checks = self.reservation_checks(wl);
        self.wls[wl].life.checks = checks
            .iter()
            .map(|&c| {
                let name = &self.model.checks[c].name;
                let state = recorded
                    .checks
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or(CheckState::Pending, |(_, s)| *s);
                (c, state)
            })
            .collect();
        match recorded.admitted_ms {
            Some(at) => self.restore_admitted(wl, at),
            None => self.restore_reserved(wl, reserved_ms),
        }
    }

    /// `requeueState`: the count goes on; a backoff not over yet holds the workload until
    /// `requeueAt`; a recorded eviction's time orders the queue.
    fn restore_requeue_state(&mut self, wl: WlId) {
        let recorded = &self.model.workloads[wl].recorded;
        let eviction_order = self
            .model
            .settings
            .pods_ready
            .is_some_and(|p| p.eviction_timestamp);
        let order = recorded.evicted.as_ref().and_then(|(reason, at)| {
            let by_timeout = reason == "PodsReadyTimeout" && eviction_order;
            (by_timeout || reason == "AdmissionCheck").then_some(*at)
        });
        let requeues = recorded.requeues;
        let backoff = recorded.requeue_at_ms.filter(|&t| t > self.now_ms);
        let st = &mut self.wls[wl];
        st.life.requeues = requeues;
        if st.life.order_ms.is_none() {
            st.life.order_ms = order;
        }
        if let Some(until) = backoff
            && recorded.reserved_ms.is_none()
        {
            st.life.backoff_until = Some(until);
            self.schedule(
                until,
                Timer::Requeue {
                    wl,
                    epoch: requeues,
                },
            );
        }
    }

    /// Quota reserved, checks not all ready: `Admitted=False` until they are; the scenario's
    /// answers of the pending ones count from the reservation, recorded `Retry`/`Rejected` ones
    /// act at once.
    fn restore_reserved(&mut self, wl: WlId, reserved_ms: i64) {
        self.mark_waiting_for_checks(wl);
        self.schedule_answers(wl, reserved_ms);
        let checks = &self.wls[wl].life.checks;
        let replay = [CheckState::Rejected, CheckState::Retry, CheckState::Ready]
            .iter()
            .find_map(|s| checks.iter().position(|c| c.1 == *s));
        if let Some(pos) = replay {
            // A recorded answer is handled as if it had just come (all ready: admitted).
            let state = checks[pos].1;
            checks_reset_for_replay(&mut self.wls[wl].life.checks, pos);
            self.schedule(
                self.now_ms,
                Timer::CheckAnswer {
                    wl,
                    pos,
                    state,
                    epoch: 1,
                },
            );
        }
    }

    /// Admitted at `admitted_ms`: its job runs; pods not recorded ready continue their timeout.
    fn restore_admitted(&mut self, wl: WlId, admitted_ms: i64) {
        let recorded = self.model.workloads[wl].recorded.clone();
        let plan = self.model.workloads[wl].pods;
        let st = &mut self.wls[wl];
        st.first_admitted_ms = Some(admitted_ms);
        st.admitted_ms = Some(admitted_ms);
        // A setup written by hand (no conditions) or pods recorded ready: its pods run.
        let record = recorded.pods_ready;
        let legacy = recorded.legacy;
        let Some(pr) = self.model.settings.pods_ready else {
            st.life.pods_ready = true;
            return;
        };
        if legacy || record.is_some_and(|r| r.ready) {
            st.life.pods_ready = true;
            if record.is_some() {
                conditions::set(
                    &mut st.conditions,
                    "PodsReady",
                    true,
                    "Started",
                    "All pods reached readiness and the workload is running",
                );
            }
            return;
        }
        let recovering = record.is_some_and(|r| r.recovering);
        st.life.pods_ready = false;
        let (reason, message) = if recovering {
            (
                "WaitForRecovery",
                "At least one pod has failed, waiting for recovery",
            )
        } else {
            ("WaitForStart", "Not all pods are ready or succeeded")
        };
        conditions::set(&mut st.conditions, "PodsReady", false, reason, message);
        let now = self.now_ms;
        let timeout = if recovering {
            pr.recovery_timeout_ms
                .map(|t| record.map_or(0, |r| r.since_ms).saturating_add(t))
        } else {
            Some(admitted_ms.saturating_add(pr.timeout_ms))
        };
        if let Some(at) = timeout {
            self.schedule(
                at.max(now),
                Timer::ReadyTimeout {
                    wl,
                    epoch: 1,
                    recovery: recovering,
                },
            );
        }
        // Without `kubetrain.dev/pods-ready` nothing says when the pods become ready: they stay
        // as recorded.
        if plan.ready_declared
            && !recovering
            && let Some(d) = plan.ready_after_ms
        {
            self.schedule(
                admitted_ms.saturating_add(d).max(now),
                Timer::PodsReady { wl, epoch: 1 },
            );
        }
    }

    /// Books `status.admission`: its quota in the ClusterQueue and its topology assignment on the
    /// nodes.
    fn book_recorded_admission(
        &mut self,
        wl: WlId,
        cq: usize,
        spec: &AdmissionSpec,
        reserved_ms: i64,
    ) {
        let mut usage: Vec<(FrId, Count)> = Vec::new();
        let mut pod_sets = Vec::new();
        for psa in &spec.pod_set_assignments {
            let p = self.recorded_pod_set(wl, psa);
            for &(r, f, amount) in &p.resources {
                if let Some(fr) = self.model.fr(f, r) {
                    match usage.iter_mut().find(|(x, _)| *x == fr) {
                        Some(e) => e.1 = add(e.1, amount),
                        None => usage.push((fr, amount)),
                    }
                }
            }
            pod_sets.push(p);
        }
        let node = self.model.cqs[cq].node;
        for &(fr, v) in &usage {
            self.model.tree.add_usage(&mut self.usage, node, fr, v);
        }
        self.book_topology(wl, &pod_sets, 1);
        self.wls[wl].admission = Some(Admission {
            cq,
            pod_sets,
            usage,
            reserved_ms,
        });
    }

    /// One recorded pod set assignment: count, flavors, usage and where its pods are.
    fn recorded_pod_set(&self, wl: WlId, psa: &PodSetAssignmentSpec) -> PodSetAdmission {
        let req = self.model.workloads[wl]
            .pod_sets
            .iter()
            .find(|p| p.name == psa.name);
        let count = psa.count.or(req.map(|p| p.count)).unwrap_or(1);
        let mut resources = Vec::new();
        let mut tas_flavor = None;
        for (res, flavor) in &psa.flavors {
            let (Some(r), Some(f)) = (self.model.res_id(res), self.model.flavor_id(flavor)) else {
                continue;
            };
            let amount = psa
                .resource_usage
                .get(res)
                .map(|q| q.count_for(res))
                .or_else(|| {
                    req.and_then(|p| p.per_pod.iter().find(|(pr, _)| *pr == r))
                        .map(|(_, v)| v.saturating_mul(i64::from(count)))
                })
                .unwrap_or(0);
            resources.push((r, f, amount));
            if self.model.flavors[f].topology.is_some() {
                tas_flavor = Some(f);
            }
        }
        let topology = psa
            .topology_assignment
            .as_ref()
            .map(|t| self.recorded_topology(wl, &psa.name, tas_flavor, t));
        PodSetAdmission {
            name: psa.name.clone(),
            count,
            resources,
            topology,
        }
    }

    /// A recorded topology assignment with its pods put on the nodes of each domain (a domain of
    /// the lowest level, usually one host; several nodes share its pods as they fit).
    fn recorded_topology(
        &self,
        wl: WlId,
        pod_set: &str,
        flavor: Option<FlavorId>,
        spec: &crate::api::TopologyAssignmentSpec,
    ) -> TopologyAssignment {
        let domains = spec.domains();
        let flavor_labels = flavor.map(|f| &self.model.flavors[f].node_labels);
        let per_pod: Vec<(usize, Count)> = self.model.workloads[wl]
            .pod_sets
            .iter()
            .find(|p| p.name == pod_set)
            .map(|p| p.per_pod.clone())
            .unwrap_or_default();
        let mut per_node: Vec<(usize, i32)> = Vec::new();
        for (values, pods) in &domains {
            let nodes = (0..self.model.nodes.len()).filter(|&n| {
                let labels = &self.model.nodes[n].labels;
                spec.levels
                    .iter()
                    .zip(values)
                    .all(|(l, v)| labels.get(l) == Some(v))
                    && flavor_labels
                        .is_none_or(|fl| fl.iter().all(|(k, v)| labels.get(k) == Some(v)))
            });
            // As many as fit on each node in turn, the rest on the first (the record says they
            // are there).
            let mut left = *pods;
            let mut first = None;
            for n in nodes {
                first.get_or_insert(n);
                let mut k = 0;
                while k < left && self.pods_fit(n, &per_pod, &per_node, k + 1) {
                    k += 1;
                }
                if k > 0 {
                    per_node.push((n, k));
                    left -= k;
                }
            }
            if let (true, Some(n)) = (left > 0, first) {
                per_node.push((n, left));
            }
        }
        TopologyAssignment {
            levels: spec.levels.clone(),
            domains,
            per_node,
        }
    }

    /// Whether `k` more pods of `per_pod` fit node `n` besides what is booked and `planned`.
    fn pods_fit(
        &self,
        n: usize,
        per_pod: &[(usize, Count)],
        planned: &[(usize, i32)],
        k: i32,
    ) -> bool {
        let already = planned
            .iter()
            .filter(|(x, _)| *x == n)
            .map(|(_, c)| i64::from(*c))
            .sum::<i64>();
        let pods = i64::from(k) + already;
        let node = &self.model.nodes[n];
        per_pod.iter().all(|&(r, v)| {
            let used = self.node_used[n]
                .iter()
                .find(|(x, _)| *x == r)
                .map_or(0, |e| e.1);
            let alloc = node
                .allocatable
                .iter()
                .find(|(x, _)| *x == r)
                .map_or(0, |e| e.1);
            used.saturating_add(v.saturating_mul(pods)) <= alloc
        })
    }
}

/// Marks the check at `pos` pending again so that its recorded answer, replayed by a timer, is
/// handled as a fresh one.
fn checks_reset_for_replay(checks: &mut [(usize, CheckState)], pos: usize) {
    if let Some(c) = checks.get_mut(pos) {
        c.1 = CheckState::Pending;
    }
}
