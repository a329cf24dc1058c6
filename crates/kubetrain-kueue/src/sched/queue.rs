//! One ClusterQueue's pending workloads: the active heap (sticky preemptor, priority,
//! queue-order timestamp, UID), the inadmissible set and equivalence hashing (kueue.md §2.2).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};

use crate::model::{WlId, Workload};

/// Why a head goes back to its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequeueReason {
    /// No flavor fits.
    NoFit,
    /// Preemption needed but nothing to preempt.
    NoCandidates,
    /// Namespace does not match the selector.
    NamespaceMismatch,
    /// Skipped after nomination (contention in the cycle).
    FailedAfterNomination,
    /// Waiting for its preemptions to complete.
    PendingPreemption,
}

/// Heap order: priority (highest first), queue-order timestamp, then the UID (its rank among the
/// workloads' UIDs, as upstream's `queueOrderingFunc` compares `a.Obj.UID < b.Obj.UID`).
type Key = (Reverse<i32>, i64, usize, WlId);

/// The queue of one ClusterQueue.
#[derive(Debug, Clone, Default)]
pub struct CqQueue {
    active: BTreeSet<Key>,
    inadmissible: Vec<WlId>,
    parked_ns: Vec<WlId>,
    /// Shapes that recently failed, with the condition reason of the failure.
    blocked_hashes: HashMap<u64, String>,
    /// The workload that last issued preemptions (BestEffortFIFO), popped first.
    pub sticky: Option<WlId>,
    sticky_key: Option<Key>,
}

/// The equivalence hash of a workload's scheduling shape (upstream `computeSchedulingHash`: per pod
/// set its name, count, requests, `minCount`, topology request and pod spec shape; with the priority).
/// The name counts: a TrainJob's Workload (pod set `node`) is not equivalent to a Workload of the same
/// requests in a pod set `main` (found by the e2e comparison with Kueue v0.19.2, s14 of 2026-12-06).
pub(crate) fn shape_hash(w: &Workload) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    w.priority.hash(&mut h);
    for ps in &w.pod_sets {
        ps.name.hash(&mut h);
        ps.count.hash(&mut h);
        ps.min_count.hash(&mut h);
        ps.per_pod.hash(&mut h);
        ps.node_selector.hash(&mut h);
        ps.required_affinity.hash(&mut h);
        ps.topology.hash(&mut h);
        for t in &ps.tolerations {
            (&t.key, &t.operator, &t.value, &t.effect).hash(&mut h);
        }
    }
    h.finish()
}

impl CqQueue {
    /// Adds a workload (arrival, requeue after eviction or flush). When an equivalent workload
    /// recently failed it goes straight to the inadmissible set; the failure reason is returned.
    pub fn push(
        &mut self,
        wl: WlId,
        priority: i32,
        ts: i64,
        uid_rank: usize,
        hash: u64,
        hashing: bool,
    ) -> Option<String> {
        if hashing && let Some(reason) = self.blocked_hashes.get(&hash) {
            self.inadmissible.push(wl);
            return Some(reason.clone());
        }
        let key = (Reverse(priority), ts, uid_rank, wl);
        if self.sticky == Some(wl) {
            self.sticky_key = Some(key);
        }
        self.active.insert(key);
        None
    }

    /// Pops the head: the sticky preemptor if queued, else the highest priority, oldest.
    pub fn pop(&mut self) -> Option<WlId> {
        if let Some(k) = self.sticky_key.take()
            && self.active.remove(&k)
        {
            return Some(k.3);
        }
        self.active.pop_first().map(|k| k.3)
    }

    /// Puts back a head after an unsuccessful attempt; returns whether it was parked.
    #[allow(clippy::too_many_arguments)]
    pub fn requeue(
        &mut self,
        wl: WlId,
        priority: i32,
        ts: i64,
        uid_rank: usize,
        hash: u64,
        reason: RequeueReason,
        strict: bool,
        hashing: Option<&str>,
    ) -> bool {
        let immediate = if strict {
            reason != RequeueReason::NamespaceMismatch
        } else {
            matches!(
                reason,
                RequeueReason::FailedAfterNomination | RequeueReason::PendingPreemption
            )
        };
        if immediate {
            let key = (Reverse(priority), ts, uid_rank, wl);
            if self.sticky == Some(wl) {
                self.sticky_key = Some(key);
            }
            self.active.insert(key);
            return false;
        }
        if self.sticky == Some(wl) {
            self.sticky = None;
        }
        if reason == RequeueReason::NamespaceMismatch {
            self.parked_ns.push(wl);
            return true;
        }
        self.inadmissible.push(wl);
        if let Some(condition_reason) = hashing
            && matches!(reason, RequeueReason::NoFit | RequeueReason::NoCandidates)
        {
            self.blocked_hashes
                .insert(hash, condition_reason.to_string());
        }
        true
    }

    /// Moves queued workloads whose shape recently failed to the inadmissible set; returns them
    /// with the failure reason.
    pub fn park_matching(&mut self, hash_of: impl Fn(WlId) -> u64) -> Vec<(WlId, String)> {
        if self.blocked_hashes.is_empty() {
            return Vec::new();
        }
        let blocked = &self.blocked_hashes;
        let mut moved = Vec::new();
        self.active.retain(|k| match blocked.get(&hash_of(k.3)) {
            Some(reason) => {
                moved.push((k.3, reason.clone()));
                false
            }
            None => true,
        });
        self.inadmissible.extend(moved.iter().map(|m| m.0));
        moved
    }

    /// Empties the inadmissible set (namespace mismatches stay parked) and forgets blocked hashes.
    pub fn take_inadmissible(&mut self) -> Vec<WlId> {
        self.blocked_hashes.clear();
        std::mem::take(&mut self.inadmissible)
    }

    /// Workloads in the active heap, in pop order (sticky first).
    pub fn active_in_order(&self) -> Vec<WlId> {
        let mut out: Vec<WlId> = Vec::new();
        if let Some(k) = self.sticky_key
            && self.active.contains(&k)
        {
            out.push(k.3);
        }
        out.extend(
            self.active
                .iter()
                .map(|k| k.3)
                .filter(|w| Some(*w) != self.sticky_key.map(|k| k.3)),
        );
        out
    }

    /// Parked workloads.
    pub fn inadmissible(&self) -> impl Iterator<Item = WlId> + '_ {
        self.inadmissible.iter().chain(&self.parked_ns).copied()
    }

    /// Number of pending workloads.
    pub fn len(&self) -> usize {
        self.active.len() + self.inadmissible.len() + self.parked_ns.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the active heap is empty.
    pub fn active_is_empty(&self) -> bool {
        self.active.is_empty()
    }

    /// Feeds what decides this queue's next pops into `h`, times left out: the active workloads in heap
    /// order, the parked ones, the sticky preemptor and the blocked shapes (the simulator's livelock check).
    pub(crate) fn fingerprint<H: Hasher>(&self, h: &mut H) {
        for k in &self.active {
            k.3.hash(h);
        }
        self.inadmissible.hash(h);
        self.parked_ns.hash(h);
        self.sticky.hash(h);
        let mut blocked: Vec<_> = self.blocked_hashes.iter().collect();
        blocked.sort();
        blocked.hash(h);
    }
}
