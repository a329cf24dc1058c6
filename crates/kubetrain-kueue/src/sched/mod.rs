//! The scheduler: per-ClusterQueue queues, one scheduling cycle (kueue.md §2.3), admission,
//! preemption issuing and requeueing (§2.2).

pub mod assign;
pub mod conditions;
pub mod fair;
pub mod lifecycle;
pub mod preempt;
pub mod queue;
mod restore;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use serde::Serialize;

use crate::model::{CqId, Model, QueueTarget, WlId};
use crate::quantity::{Count, add};
use crate::quota::{FrId, Usage};
use assign::{Assignment, Mode};
use conditions::Condition;
use queue::{CqQueue, RequeueReason};

/// Why a workload was preempted (the `Preempted` condition reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PreemptReason {
    /// Prioritization in the ClusterQueue.
    InClusterQueue,
    /// Reclamation within the cohort.
    InCohortReclamation,
    /// Fair sharing within the cohort.
    InCohortFairSharing,
    /// Reclamation within the cohort while borrowing.
    InCohortReclaimWhileBorrowing,
}

impl PreemptReason {
    /// Condition reason.
    pub fn as_str(self) -> &'static str {
        match self {
            PreemptReason::InClusterQueue => "InClusterQueue",
            PreemptReason::InCohortReclamation => "InCohortReclamation",
            PreemptReason::InCohortFairSharing => "InCohortFairSharing",
            PreemptReason::InCohortReclaimWhileBorrowing => "InCohortReclaimWhileBorrowing",
        }
    }

    fn words(self) -> &'static str {
        match self {
            PreemptReason::InClusterQueue => "prioritization in the ClusterQueue",
            PreemptReason::InCohortReclamation => "reclamation within the cohort",
            PreemptReason::InCohortFairSharing => "Fair Sharing within the cohort",
            PreemptReason::InCohortReclaimWhileBorrowing => {
                "reclamation within the cohort while borrowing"
            }
        }
    }
}

/// A workload to preempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The victim.
    pub wl: WlId,
    /// Why.
    pub reason: PreemptReason,
}

/// Lifecycle phase of a workload in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    /// Not yet arrived (simulator).
    NotArrived,
    /// Waiting for quota.
    Pending,
    /// Holding a quota reservation (admitted).
    Admitted,
    /// Finished and released its quota.
    Finished,
}

/// One pod set's admitted flavors and usage.
#[derive(Debug, Clone, Serialize)]
pub struct PodSetAdmission {
    /// Pod set name.
    pub name: String,
    /// Admitted count.
    pub count: i32,
    /// (resource, flavor, total usage).
    pub resources: Vec<(usize, usize, Count)>,
    /// Where its pods go (TAS flavors only).
    pub topology: Option<crate::tas::TopologyAssignment>,
}

/// A quota reservation.
#[derive(Debug, Clone)]
pub struct Admission {
    /// ClusterQueue.
    pub cq: CqId,
    /// Per pod set.
    pub pod_sets: Vec<PodSetAdmission>,
    /// Usage per FR.
    pub usage: Vec<(FrId, Count)>,
    /// When the reservation was made (virtual ms).
    pub reserved_ms: i64,
}

/// The outcome of the last scheduling attempt of a pending workload, for explanations.
#[derive(Debug, Clone)]
pub struct LastAttempt {
    /// Cycle number.
    pub cycle: u64,
    /// The flavor assignment (if it got that far).
    pub assignment: Option<Assignment>,
    /// Preemption targets found.
    pub targets: Vec<Target>,
}

/// Dynamic state of a workload.
#[derive(Debug, Clone)]
pub struct WlState {
    /// Phase.
    pub phase: Phase,
    /// Current reservation.
    pub admission: Option<Admission>,
    /// Conditions as Kueue would write them.
    pub conditions: Vec<Condition>,
    /// First admission time (`Admitted=True`: quota reserved and every check ready).
    pub first_admitted_ms: Option<i64>,
    /// Latest admission time.
    pub admitted_ms: Option<i64>,
    /// Admission checks, pods readiness, requeue backoff.
    pub life: lifecycle::Lifecycle,
    /// Finish time.
    pub finished_ms: Option<i64>,
    /// How often it was preempted.
    pub preemptions: u32,
    /// Shape hash for equivalence hashing.
    pub hash: u64,
    /// Last scheduling attempt.
    pub last: Option<LastAttempt>,
    /// Usage released by the last eviction.
    pub evicted_usage: Vec<(FrId, Count)>,
    /// The admission a finished workload held.
    pub finished_admission: Option<Admission>,
}

/// What one cycle did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleResult {
    /// Heads popped.
    pub heads: usize,
    /// Workloads admitted.
    pub admitted: Vec<WlId>,
    /// Workloads preempted (evicted at the end of the cycle).
    pub preempted: Vec<WlId>,
    /// Heads parked as inadmissible.
    pub parked: usize,
}

impl CycleResult {
    /// Whether anything changed.
    pub fn progressed(&self) -> bool {
        !self.admitted.is_empty() || !self.preempted.is_empty() || self.parked > 0
    }
}

/// The scheduler state: the model plus usage, queues and workload states.
///
/// The state is private; read it with the methods ([`Scheduler::model`], [`Scheduler::workload_id`],
/// [`Scheduler::state`], [`Scheduler::condition`], [`Scheduler::admission`], [`Scheduler::usage`], ...) and
/// change it with the operations ([`Scheduler::arrive`], [`Scheduler::cycle`], [`Scheduler::finish`],
/// [`Scheduler::advance_to`], [`Scheduler::run_timers`]).
#[derive(Debug, Clone)]
pub struct Scheduler {
    /// The model.
    pub(crate) model: Model,
    /// Usage of admitted workloads (the cache).
    pub(crate) usage: Usage,
    /// Workload states, by workload id.
    pub(crate) wls: Vec<WlState>,
    /// Per-ClusterQueue queues.
    pub(crate) queues: Vec<CqQueue>,
    /// Admitted workloads per ClusterQueue.
    pub(crate) admitted: Vec<Vec<WlId>>,
    /// Cycles run.
    pub(crate) cycle: u64,
    /// Virtual time (ms).
    pub(crate) now_ms: i64,
    /// Heads popped per ClusterQueue per cycle (Kueue: 1; more is a what-if).
    pub(crate) heads_per_cycle: usize,
    /// The ClusterQueues of each queue's cohort tree (just itself without a cohort).
    tree_members: Vec<std::sync::Arc<[CqId]>>,
    /// Delay for retrying parked workloads after quota is freed (0 = at once).
    pub(crate) requeue_batch_ms: i64,
    /// Batched flushes: (due time, tree root, a queue of the tree).
    pending_flushes: Vec<(i64, usize, CqId)>,
    /// Lifecycle timers: (due, sequence, event).
    timers: BinaryHeap<Reverse<(i64, u64, lifecycle::Timer)>>,
    timer_seq: u64,
    /// Workloads admitted since the simulator last asked.
    started: Vec<WlId>,
    /// ClusterQueues of lifecycle evictions since the simulator last asked.
    lifecycle_evictions: Vec<CqId>,
    /// Per node, what admitted TAS workloads use: (resource, amount).
    pub(crate) node_used: Vec<Vec<(usize, Count)>>,
    /// Each workload's rank among the UIDs: the last tie-break of the queue order.
    uid_rank: Vec<usize>,
}

/// One nominated head.
struct Entry {
    wl: WlId,
    cq: CqId,
    assignment: Option<Assignment>,
    targets: Vec<Target>,
    /// Set when nomination already failed: (reason, message, requeue reason).
    blocked: Option<(String, String, RequeueReason)>,
}

impl Scheduler {
    /// A scheduler over `model`: workloads with `status.admission` start admitted; the others
    /// are not yet queued (call [`Scheduler::arrive`] or [`Scheduler::arrive_all`]).
    pub fn new(model: Model) -> Self {
        let n = model.tree.names.len() * model.tree.nfr;
        let mut s = Scheduler {
            queues: vec![CqQueue::default(); model.cqs.len()],
            admitted: vec![Vec::new(); model.cqs.len()],
            usage: vec![0; n],
            wls: model
                .workloads
                .iter()
                .map(|w| WlState {
                    phase: Phase::NotArrived,
                    admission: None,
                    conditions: Vec::new(),
                    first_admitted_ms: None,
                    admitted_ms: None,
                    life: lifecycle::Lifecycle::default(),
                    finished_ms: None,
                    preemptions: 0,
                    hash: queue::shape_hash(w),
                    last: None,
                    evicted_usage: Vec::new(),
                    finished_admission: None,
                })
                .collect(),
            tree_members: Self::tree_members(&model),
            requeue_batch_ms: 0,
            pending_flushes: Vec::new(),
            timers: BinaryHeap::new(),
            timer_seq: 0,
            started: Vec::new(),
            lifecycle_evictions: Vec::new(),
            node_used: vec![Vec::new(); model.nodes.len()],
            uid_rank: {
                let mut order: Vec<WlId> = (0..model.workloads.len()).collect();
                order.sort_by(|&a, &b| model.workloads[a].uid.cmp(&model.workloads[b].uid));
                let mut rank = vec![0; order.len()];
                for (r, w) in order.into_iter().enumerate() {
                    rank[w] = r;
                }
                rank
            },
            model,
            cycle: 0,
            now_ms: 0,
            heads_per_cycle: 1,
        };
        for wl in 0..s.wls.len() {
            s.restore(wl);
        }
        s.drain_stopped_queues();
        s
    }

    /// `stopPolicy: HoldAndDrain` evicts the queue's admitted workloads; they wait in the
    /// (inactive) queue.
    fn drain_stopped_queues(&mut self) {
        for cq in 0..self.model.cqs.len() {
            if !self.model.cqs[cq].drain {
                continue;
            }
            for wl in std::mem::take(&mut self.admitted[cq]) {
                let Some(adm) = self.wls[wl].admission.take() else {
                    continue;
                };
                let node = self.model.cqs[cq].node;
                for &(fr, v) in &adm.usage {
                    self.model.tree.remove_usage(&mut self.usage, node, fr, v);
                }
                let obs = self.model.settings.observability;
                let msg = "The ClusterQueue is stopped";
                let st = &mut self.wls[wl];
                st.phase = Phase::NotArrived;
                conditions::set(
                    &mut st.conditions,
                    "Evicted",
                    true,
                    "ClusterQueueStopped",
                    msg,
                );
                conditions::set_pending(&mut st.conditions, obs, "ClusterQueueStopped", msg);
                conditions::set(
                    &mut st.conditions,
                    "Admitted",
                    false,
                    "NoReservation",
                    "The workload has no reservation",
                );
            }
        }
    }

    fn tree_members(model: &Model) -> Vec<std::sync::Arc<[CqId]>> {
        let mut by_root: std::collections::HashMap<usize, Vec<CqId>> =
            std::collections::HashMap::new();
        for (c, q) in model.cqs.iter().enumerate() {
            by_root.entry(model.tree.root(q.node)).or_default().push(c);
        }
        let shared: std::collections::HashMap<usize, std::sync::Arc<[CqId]>> =
            by_root.into_iter().map(|(r, v)| (r, v.into())).collect();
        model
            .cqs
            .iter()
            .map(|q| shared[&model.tree.root(q.node)].clone())
            .collect()
    }

    /// Queues every workload that has not arrived yet.
    pub fn arrive_all(&mut self) {
        for wl in 0..self.wls.len() {
            if self.wls[wl].phase == Phase::NotArrived {
                self.arrive(wl);
            }
        }
    }

    /// A workload is created: it enters its ClusterQueue's queue, or gets a blocked condition.
    pub fn arrive(&mut self, wl: WlId) {
        self.wls[wl].phase = Phase::Pending;
        let obs = self.model.settings.observability;
        match self.model.workloads[wl].target.clone() {
            QueueTarget::Blocked(reason, message) => {
                conditions::set_blocked(&mut self.wls[wl].conditions, obs, &reason, &message);
            }
            QueueTarget::Queue(cq) => {
                if !self.model.workloads[wl].active || self.wls[wl].life.deactivated {
                    return;
                }
                if let Some((_, _)) = &self.model.cqs[cq].inactive {
                    let msg = format!("ClusterQueue {} is inactive", self.model.cqs[cq].name);
                    conditions::set_blocked(&mut self.wls[wl].conditions, obs, "Suspended", &msg);
                }
                self.enqueue(cq, wl);
                self.status_changed(cq);
            }
        }
    }

    /// `cq`'s status changed (its pending or reserving workloads): under a declared Cohort,
    /// upstream's ClusterQueue reconciler writes the status, the Cohort reconciler reconciles
    /// every ancestor (`cohortCqHandler.Generic`), and `Manager.AddOrUpdateCohort` requeues the
    /// parked workloads of the whole tree (`requeuer.notifyCohort`). Implicit cohorts have no
    /// object, so their reconcile requeues nothing.
    fn status_changed(&mut self, cq: CqId) {
        if self
            .model
            .tree
            .under_declared_cohort(self.model.cqs[cq].node)
        {
            self.flush_tree(cq);
        }
    }

    /// The queue-order timestamp: creation, or the eviction time of a workload requeued after a
    /// pods-ready timeout or a `Retry` check (upstream `GetQueueOrderTimestamp`).
    pub(crate) fn order_ts(&self, wl: WlId) -> i64 {
        self.wls[wl]
            .life
            .order_ms
            .unwrap_or(self.model.workloads[wl].order_ms)
    }

    fn enqueue(&mut self, cq: CqId, wl: WlId) {
        if self.wls[wl].life.deactivated || self.wls[wl].life.backoff_until.is_some() {
            return;
        }
        let w = &self.model.workloads[wl];
        let hash = self.wls[wl].hash;
        let ts = self.order_ts(wl);
        let hashing = self.model.settings.equivalence_hashing && !self.model.cqs[cq].strict_fifo;
        let rank = self.uid_rank[wl];
        if let Some(reason) = self.queues[cq].push(wl, w.priority, ts, rank, hash, hashing) {
            self.mark_bypassed(wl, &reason);
        }
    }

    /// The workload controller's note on a workload parked because an equivalent one failed; only
    /// the granular path (`UnadmittedWorkloadsObservability`) writes it, the legacy one leaves the
    /// workload's condition as it was (found by the e2e comparison with Kueue v0.19.1).
    fn mark_bypassed(&mut self, wl: WlId, reason: &str) {
        if !self.model.settings.observability {
            return;
        }
        conditions::set_pending(
            &mut self.wls[wl].conditions,
            self.model.settings.observability,
            reason,
            "Bypassed scheduling evaluation because an equivalent workload recently failed",
        );
    }

    /// Asks to move every parked workload of `cq`'s cohort tree (or just `cq` without a cohort)
    /// back to the active queues (`NotifyRetryInadmissible`): at once when `requeue_batch_ms` is
    /// 0, otherwise batched like Kueue's `requeueBatchPeriod` (see [`Scheduler::run_due_flushes`]).
    pub fn flush_tree(&mut self, cq: CqId) {
        if self.requeue_batch_ms <= 0 {
            self.flush_now(cq);
            return;
        }
        let root = self.model.tree.root(self.model.cqs[cq].node);
        if !self.pending_flushes.iter().any(|&(_, r, _)| r == root) {
            self.pending_flushes
                .push((self.now_ms + self.requeue_batch_ms, root, cq));
        }
    }

    /// Runs the batched flushes due at or before `now_ms`.
    pub fn run_due_flushes(&mut self) {
        let now = self.now_ms;
        let due: Vec<CqId> = self
            .pending_flushes
            .iter()
            .filter(|f| f.0 <= now)
            .map(|f| f.2)
            .collect();
        self.pending_flushes.retain(|f| f.0 > now);
        for cq in due {
            self.flush_now(cq);
        }
    }

    /// When the next batched flush is due.
    pub fn next_flush_due(&self) -> Option<i64> {
        self.pending_flushes.iter().map(|f| f.0).min()
    }

    /// Feeds the pending flushes and timers into `h`, their due times relative to now, in order (the
    /// simulator's livelock check: a state that recurs with the same events equally far ahead repeats).
    pub(crate) fn timed_fingerprint<H: std::hash::Hasher>(&self, h: &mut H) {
        use std::hash::Hash;
        let mut flushes: Vec<_> = self
            .pending_flushes
            .iter()
            .map(|&(due, root, cq)| (due - self.now_ms, root, cq))
            .collect();
        flushes.sort_unstable();
        flushes.hash(h);
        let mut timers: Vec<_> = self
            .timers
            .iter()
            .map(|Reverse((due, _, t))| (due - self.now_ms, format!("{t:?}")))
            .collect();
        timers.sort();
        timers.hash(h);
    }

    fn flush_now(&mut self, cq: CqId) {
        let members = self.tree_members[cq].clone();
        for c in members.iter().copied() {
            let parked = self.queues[c].take_inadmissible();
            for wl in parked {
                self.enqueue(c, wl);
            }
        }
    }

    /// A workload finished: release its quota and retry parked workloads of its tree.
    pub fn finish(&mut self, wl: WlId) {
        let Some(adm) = self.wls[wl].admission.take() else {
            return;
        };
        self.release(wl, &adm);
        let cq = adm.cq;
        let st = &mut self.wls[wl];
        st.finished_admission = Some(adm);
        st.phase = Phase::Finished;
        st.finished_ms = Some(self.now_ms);
        conditions::set(
            &mut st.conditions,
            "Finished",
            true,
            "Succeeded",
            "Job finished successfully",
        );
        self.flush_tree(cq);
    }

    fn release(&mut self, wl: WlId, adm: &Admission) {
        let node = self.model.cqs[adm.cq].node;
        for &(fr, v) in &adm.usage {
            self.model.tree.remove_usage(&mut self.usage, node, fr, v);
        }
        self.book_topology(wl, &adm.pod_sets, -1);
        if let Some(pos) = self.admitted[adm.cq].iter().position(|&x| x == wl) {
            self.admitted[adm.cq].swap_remove(pos);
        }
    }

    /// Runs one scheduling cycle.
    pub fn cycle(&mut self) -> CycleResult {
        self.cycle += 1;
        let mut result = CycleResult::default();
        self.run_timers();
        let heads = self.pop_heads();
        result.heads = heads.len();
        if heads.is_empty() {
            return result;
        }
        let mut snap = self.usage.clone();
        let mut entries: Vec<Entry> = heads
            .into_iter()
            .map(|(wl, cq)| self.nominate(&mut snap, wl, cq))
            .collect();
        let outcomes = self.process_entries(&mut snap, &entries, &mut result);
        self.requeue_unadmitted(&mut entries, &outcomes, &mut result);
        for &wl in &result.admitted {
            if let Some(cq) = self.wls[wl].admission.as_ref().map(|a| a.cq) {
                self.status_changed(cq);
            }
        }
        self.complete_preemptions(&result);
        self.run_timers();
        result
    }

    /// The cycle's heads: up to `heads_per_cycle` per active queue.
    fn pop_heads(&mut self) -> Vec<(WlId, CqId)> {
        let mut heads: Vec<(WlId, CqId)> = Vec::new();
        for cq in 0..self.model.cqs.len() {
            if self.model.cqs[cq].inactive.is_some() {
                continue;
            }
            for _ in 0..self.heads_per_cycle {
                match self.queues[cq].pop() {
                    Some(wl) => heads.push((wl, cq)),
                    None => break,
                }
            }
        }
        heads
    }

    /// Tries to admit the nominated entries in iteration order; returns, per entry, why it was not
    /// admitted (`None`: admitted, or no reason recorded).
    fn process_entries(
        &mut self,
        snap: &mut Usage,
        entries: &[Entry],
        result: &mut CycleResult,
    ) -> Vec<Option<(String, String, RequeueReason)>> {
        let order = self.iteration_order(snap, entries);
        let mut preempted: HashSet<WlId> = HashSet::new();
        let mut outcomes: Vec<Option<(String, String, RequeueReason)>> = vec![None; entries.len()];
        let mut processed = vec![false; entries.len()];
        let Order::Fixed(mut order_iter) = order;
        loop {
            let next = order_iter.next();
            let Some(i) = next.or_else(|| {
                // Fair sharing recomputes the next entry against the updated snapshot.
                self.next_fair(snap, entries, &processed)
            }) else {
                break;
            };
            processed[i] = true;
            let e = &entries[i];
            if let Some(b) = &e.blocked {
                outcomes[i] = Some(b.clone());
                continue;
            }
            outcomes[i] = self.process_entry(snap, e, &mut preempted, result);
        }
        outcomes
    }

    /// Records every entry's attempt and requeues the ones not admitted, pending with their reason.
    fn requeue_unadmitted(
        &mut self,
        entries: &mut [Entry],
        outcomes: &[Option<(String, String, RequeueReason)>],
        result: &mut CycleResult,
    ) {
        for (i, e) in entries.iter_mut().enumerate() {
            let wl = e.wl;
            self.wls[wl].last = Some(LastAttempt {
                cycle: self.cycle,
                assignment: e.assignment.take(),
                targets: std::mem::take(&mut e.targets),
            });
            if self.wls[wl].phase == Phase::Admitted {
                continue;
            }
            let (reason, message, rq) = outcomes[i].clone().unwrap_or_else(|| {
                (
                    "WaitingForQuota".to_string(),
                    String::new(),
                    RequeueReason::FailedAfterNomination,
                )
            });
            conditions::set_pending(
                &mut self.wls[wl].conditions,
                self.model.settings.observability,
                &reason,
                &message,
            );
            self.requeue_pending(wl, e.cq, &reason, rq, result);
        }
    }

    /// Puts a pending workload back in its queue; with equivalence hashing, parking it parks the
    /// workloads that would fail the same way too.
    fn requeue_pending(
        &mut self,
        wl: WlId,
        cq: CqId,
        reason: &str,
        rq: RequeueReason,
        result: &mut CycleResult,
    ) {
        let strict = self.model.cqs[cq].strict_fifo;
        let hashing = self.model.settings.equivalence_hashing && !strict;
        let ts = self.order_ts(wl);
        let w = &self.model.workloads[wl];
        let parked = self.queues[cq].requeue(
            wl,
            w.priority,
            ts,
            self.uid_rank[wl],
            self.wls[wl].hash,
            rq,
            strict,
            hashing.then_some(reason),
        );
        if parked {
            result.parked += 1;
            if hashing {
                let wls = &self.wls;
                let moved = self.queues[cq].park_matching(|x| wls[x].hash);
                result.parked += moved.len();
                for (m, r) in moved {
                    self.mark_bypassed(m, &r);
                }
            }
        }
    }

    /// Preemptions complete at the end of the cycle: victims release quota and requeue.
    fn complete_preemptions(&mut self, result: &CycleResult) {
        let mut touched = Vec::new();
        for &v in &result.preempted {
            if let Some(adm) = self.wls[v].admission.take() {
                self.release(v, &adm);
                self.wls[v].evicted_usage = adm.usage.clone();
                self.wls[v].phase = Phase::Pending;
                self.wls[v].preemptions += 1;
                touched.push(adm.cq);
                self.enqueue(adm.cq, v);
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for cq in touched {
            self.flush_tree(cq);
        }
    }

    fn nominate(&self, snap: &mut Usage, wl: WlId, cq: CqId) -> Entry {
        let mut e = Entry {
            wl,
            cq,
            assignment: None,
            targets: Vec::new(),
            blocked: None,
        };
        let c = &self.model.cqs[cq];
        let w = &self.model.workloads[wl];
        let ns_labels = self.model.namespaces.get(&w.namespace);
        let ns_ok = match (&c.namespace_selector, ns_labels) {
            (Some(sel), Some(labels)) => sel.matches(labels),
            _ => false,
        };
        if !ns_ok {
            e.blocked = Some((
                "Misconfigured".to_string(),
                "workload namespace doesn't match ClusterQueue selector".to_string(),
                RequeueReason::NamespaceMismatch,
            ));
            return e;
        }
        let (assignment, targets) = self.initial_assignment(snap, wl, cq);
        e.assignment = Some(assignment);
        e.targets = targets;
        e
    }

    fn fits(&self, u: &Usage, cq: CqId, usage: &[(FrId, Count)]) -> bool {
        let node = self.model.cqs[cq].node;
        usage
            .iter()
            .all(|&(fr, v)| v <= self.model.tree.available(u, node, fr))
    }

    /// Whether `usage` fits in the entry's queue once every victim claimed so far this cycle and the
    /// entry's own targets are taken out (their usage is put back after).
    fn fits_without_victims(
        &mut self,
        snap: &mut Usage,
        e: &Entry,
        preempted: &HashSet<WlId>,
        usage: &[(FrId, Count)],
    ) -> bool {
        let mut removed = Vec::new();
        for &v in preempted.iter().chain(e.targets.iter().map(|t| &t.wl)) {
            if self.wls[v].admission.is_some() && !removed.contains(&v) {
                self.remove_wl_usage(snap, v);
                removed.push(v);
            }
        }
        let fits = self.fits(snap, e.cq, usage);
        for &v in &removed {
            self.add_wl_usage(snap, v);
        }
        fits
    }

    fn process_entry(
        &mut self,
        snap: &mut Usage,
        e: &Entry,
        preempted: &mut HashSet<WlId>,
        result: &mut CycleResult,
    ) -> Option<(String, String, RequeueReason)> {
        let a = e.assignment.as_ref()?;
        let cq = e.cq;
        let node = self.model.cqs[cq].node;
        let mode = a.mode();
        match mode {
            Mode::NoFit => {
                return Some((
                    if self.model.settings.observability {
                        a.no_fit_reason().as_str().to_string()
                    } else {
                        "Pending".to_string()
                    },
                    a.message(),
                    RequeueReason::NoFit,
                ));
            }
            Mode::Preempt if e.targets.is_empty() => {
                let c = &self.model.cqs[cq];
                if c.reclaim != crate::model::ReclaimPolicy::Any {
                    for (fr, v) in self.reserve(snap, cq, &a.usage) {
                        self.model.tree.add_usage(snap, node, fr, v);
                    }
                }
                return Some((
                    "WaitingForQuota".to_string(),
                    a.message(),
                    RequeueReason::NoCandidates,
                ));
            }
            _ => {}
        }
        if e.targets.iter().any(|t| preempted.contains(&t.wl)) {
            return Some((
                "WaitingForQuota".to_string(),
                "Workload has overlapping preemption targets with another workload".to_string(),
                RequeueReason::FailedAfterNomination,
            ));
        }
        if !self.fits_without_victims(snap, e, preempted, &a.usage) {
            return Some((
                "WaitingForQuota".to_string(),
                "Workload no longer fits after processing another workload".to_string(),
                RequeueReason::FailedAfterNomination,
            ));
        }
        for t in &e.targets {
            preempted.insert(t.wl);
        }
        for &(fr, v) in &a.usage {
            self.model.tree.add_usage(snap, node, fr, v);
        }
        if mode == Mode::Fit && self.blocked_by_pods_ready() {
            // `waitForPodsReadyIfNeeded`: upstream's scheduler waits here until every admitted
            // workload is ready, then admits; the model requeues the head and retries then.
            for &(fr, v) in &a.usage {
                self.model.tree.remove_usage(snap, node, fr, v);
            }
            return Some((
                if self.model.settings.observability {
                    "WaitingForPodsReady"
                } else {
                    "Waiting"
                }
                .to_string(),
                "waiting for all admitted workloads to be in PodsReady condition".to_string(),
                RequeueReason::FailedAfterNomination,
            ));
        }
        if mode == Mode::Preempt {
            self.issue_preemptions(e, result);
            // The sticky preemptor is a BestEffortFIFO notion (StrictFIFO requeues the head anyway).
            if !self.model.cqs[cq].strict_fifo {
                self.queues[cq].sticky = Some(e.wl);
            }
            return Some((
                "WaitingForPreemptedWorkloads".to_string(),
                format!(
                    "{}. Pending the preemption of {} workload(s)",
                    a.message(),
                    e.targets.len()
                ),
                RequeueReason::PendingPreemption,
            ));
        }
        self.admit(e.wl, cq, a);
        result.admitted.push(e.wl);
        None
    }

    /// `quotaResourcesToReserve`: what a Preempt entry without candidates holds back.
    fn reserve(&self, snap: &Usage, cq: CqId, usage: &[(FrId, Count)]) -> Vec<(FrId, Count)> {
        let t = &self.model.tree;
        let node = self.model.cqs[cq].node;
        usage
            .iter()
            .map(|&(fr, req)| {
                let i = t.ix(node, fr);
                let (nominal, used) = (t.nominal[i], snap[i]);
                let v = if t.borrowing_with(snap, node, fr, req) {
                    match t.borrowing_limit[i] {
                        Some(bl) => req.min(crate::quantity::sub(add(nominal, bl), used)),
                        None => req,
                    }
                } else {
                    req.min(nominal - used)
                };
                (fr, v.max(0))
            })
            .collect()
    }

    fn issue_preemptions(&mut self, e: &Entry, result: &mut CycleResult) {
        let preemptor_path = self.model.node_path(self.model.cqs[e.cq].node);
        let uid = self.model.workloads[e.wl].uid.clone();
        let job_uid = self.model.workloads[e.wl]
            .job_uid
            .clone()
            .unwrap_or_else(|| "UNKNOWN".to_string());
        for t in &e.targets {
            let Some(adm) = &self.wls[t.wl].admission else {
                continue;
            };
            let victim_path = self.model.node_path(self.model.cqs[adm.cq].node);
            let msg = format!(
                "Preempted to accommodate a workload (UID: {uid}, JobUID: {job_uid}) due to {}; preemptor path: {preemptor_path}; preemptee path: {victim_path}",
                t.reason.words()
            );
            let obs = self.model.settings.observability;
            let st = &mut self.wls[t.wl];
            conditions::set(&mut st.conditions, "Evicted", true, "Preempted", &msg);
            conditions::set(
                &mut st.conditions,
                "Preempted",
                true,
                t.reason.as_str(),
                &msg,
            );
            conditions::set_pending(&mut st.conditions, obs, "Preempted", &msg);
            result.preempted.push(t.wl);
        }
    }

    fn admit(&mut self, wl: WlId, cq: CqId, a: &Assignment) {
        let node = self.model.cqs[cq].node;
        for &(fr, v) in &a.usage {
            self.model.tree.add_usage(&mut self.usage, node, fr, v);
        }
        let pod_sets = a
            .pod_sets
            .iter()
            .map(|p| PodSetAdmission {
                name: p.name.clone(),
                count: p.count,
                resources: p
                    .flavors
                    .iter()
                    .map(|f| (f.res, f.flavor, f.amount))
                    .collect(),
                topology: p.topology.clone(),
            })
            .collect();
        let now = self.now_ms;
        let name = self.model.cqs[cq].name.clone();
        let st = &mut self.wls[wl];
        st.admission = Some(Admission {
            cq,
            pod_sets,
            usage: a.usage.clone(),
            reserved_ms: now,
        });
        st.phase = Phase::Admitted;
        st.life.backoff_until = None;
        conditions::set_admitted(&mut st.conditions, &name);
        self.admitted[cq].push(wl);
        if self.queues[cq].sticky == Some(wl) {
            self.queues[cq].sticky = None;
        }
        let pod_sets = self.wls[wl]
            .admission
            .as_ref()
            .map(|a| a.pod_sets.clone())
            .unwrap_or_default();
        self.book_topology(wl, &pod_sets, 1);
        self.after_reservation(wl);
    }

    /// Adds (`sign` 1) or removes (−1) the node usage of the TAS placements of `pod_sets`.
    fn book_topology(&mut self, wl: WlId, pod_sets: &[PodSetAdmission], sign: i64) {
        let pods = self.model.res_id("pods");
        for p in pod_sets {
            let Some(t) = &p.topology else { continue };
            let Some(req) = self.model.workloads[wl]
                .pod_sets
                .iter()
                .find(|r| r.name == p.name)
            else {
                continue;
            };
            for &(node, n) in &t.per_node {
                let used = &mut self.node_used[node];
                let per_pod = req.per_pod.iter().copied().chain(pods.map(|r| (r, 1)));
                for (r, v) in per_pod {
                    let delta = v.saturating_mul(i64::from(n)).saturating_mul(sign);
                    match used.iter_mut().find(|(x, _)| *x == r) {
                        Some(e) => e.1 = e.1.saturating_add(delta),
                        None => used.push((r, delta)),
                    }
                }
            }
        }
    }

    /// The resolved model the scheduler runs on.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The state of every workload, indexed by [`WlId`].
    pub fn states(&self) -> &[WlState] {
        &self.wls
    }

    /// One workload's state (phase, reservation, conditions, lifecycle, times).
    ///
    /// # Panics
    /// If `wl` is not a workload of this scheduler's model (ids come from [`Scheduler::workload_id`]).
    pub fn state(&self, wl: WlId) -> &WlState {
        &self.wls[wl]
    }

    /// The usage of admitted workloads per (quota-tree node, flavor-resource), indexed by
    /// [`Tree::ix`](crate::quota::Tree::ix).
    pub fn usage(&self) -> &Usage {
        &self.usage
    }

    /// The workloads admitted in ClusterQueue `cq`, in admission order.
    pub fn admitted_in(&self, cq: CqId) -> &[WlId] {
        self.admitted.get(cq).map_or(&[], Vec::as_slice)
    }

    /// How many scheduling cycles have run.
    pub fn cycles_run(&self) -> u64 {
        self.cycle
    }

    /// The virtual clock (ms).
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// Moves the virtual clock forward to `now_ms` (never backwards); timers due by then fire on
    /// [`Scheduler::run_timers`], and cycles see the new time.
    pub fn advance_to(&mut self, now_ms: i64) {
        self.now_ms = self.now_ms.max(now_ms);
    }

    /// The workload `namespace/name`, if the model has it.
    pub fn workload_id(&self, key: &str) -> Option<WlId> {
        self.model.workloads.iter().position(|w| w.key == key)
    }

    /// A workload's lifecycle phase.
    pub fn phase(&self, wl: WlId) -> Phase {
        self.wls[wl].phase
    }

    /// A workload's conditions, as Kueue writes them.
    pub fn conditions(&self, wl: WlId) -> &[Condition] {
        &self.wls[wl].conditions
    }

    /// One condition of a workload by type (`QuotaReserved`, `Admitted`, `Evicted`, ...).
    pub fn condition(&self, wl: WlId, type_: &str) -> Option<&Condition> {
        conditions::find(&self.wls[wl].conditions, type_)
    }

    /// A workload's current quota reservation.
    pub fn admission(&self, wl: WlId) -> Option<&Admission> {
        self.wls[wl].admission.as_ref()
    }

    /// Runs cycles until nothing changes (or `max` cycles); returns the number run.
    pub fn run_until_stable(&mut self, max: Option<u64>) -> u64 {
        let mut n = 0;
        while max.is_none_or(|m| n < m) {
            let r = self.cycle();
            n += 1;
            if !r.progressed() {
                break;
            }
        }
        n
    }

    /// The usage a workload released when it was last evicted.
    pub fn last_evicted_usage(&self, wl: WlId) -> Option<&[(FrId, Count)]> {
        let u = &self.wls[wl].evicted_usage;
        (!u.is_empty()).then_some(u.as_slice())
    }

    /// Usage of a ClusterQueue for one FR in the cache.
    pub fn cq_usage(&self, cq: CqId, fr: FrId) -> Count {
        self.usage[self.model.tree.ix(self.model.cqs[cq].node, fr)]
    }
}

/// Iteration order of entries in a cycle.
enum Order {
    Fixed(std::vec::IntoIter<usize>),
}

impl Scheduler {
    fn iteration_order(&self, _snap: &Usage, entries: &[Entry]) -> Order {
        if self.model.settings.fair_sharing.is_some() {
            return Order::Fixed(Vec::new().into_iter());
        }
        // Classical iterator: borrowing level ascending, priority descending, timestamp, UID.
        let mut idx: Vec<usize> = (0..entries.len()).collect();
        idx.sort_by_key(|&i| {
            let e = &entries[i];
            let w = &self.model.workloads[e.wl];
            let borrow = e.assignment.as_ref().map_or(0, |a| a.borrowing);
            let priority = if self.model.settings.priority_sorting_within_cohort {
                w.priority
            } else {
                0
            };
            (
                borrow,
                std::cmp::Reverse(priority),
                self.order_ts(e.wl),
                e.wl,
            )
        });
        Order::Fixed(idx.into_iter())
    }
}
