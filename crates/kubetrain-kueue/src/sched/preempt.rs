//! Classical preemption (kueue.md §2.8): candidates in the queue and in the cohort tree, their
//! ordering, greedy removal until the preemptor fits, fill-back, and the oracle used during
//! flavor assignment.

use super::assign::{Assignment, PMode};
use super::{PreemptReason, Scheduler, Target};
use crate::model::{CqId, ReclaimPolicy, WithinPolicy, WlId};
use crate::quantity::Count;
use crate::quota::{FrId, NodeId, Usage};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    SameQueue,
    HierarchicalReclaim,
    ReclaimWithoutBorrowing,
    ReclaimWhileBorrowing,
}

#[derive(Debug, Clone, Copy)]
struct Candidate {
    wl: WlId,
    variant: Variant,
}

impl Scheduler {
    fn uses_any(&self, wl: WlId, frs: &[FrId]) -> bool {
        self.wls[wl]
            .admission
            .as_ref()
            .is_some_and(|a| a.usage.iter().any(|(fr, v)| *v > 0 && frs.contains(fr)))
    }

    /// Removes an admitted workload's usage from `u`.
    pub(crate) fn remove_wl_usage(&self, u: &mut Usage, wl: WlId) {
        if let Some(a) = &self.wls[wl].admission {
            let node = self.model.cqs[a.cq].node;
            for &(fr, v) in &a.usage {
                self.model.tree.remove_usage(u, node, fr, v);
            }
        }
    }

    /// Adds an admitted workload's usage back to `u`.
    pub(crate) fn add_wl_usage(&self, u: &mut Usage, wl: WlId) {
        if let Some(a) = &self.wls[wl].admission {
            let node = self.model.cqs[a.cq].node;
            for &(fr, v) in &a.usage {
                self.model.tree.add_usage(u, node, fr, v);
            }
        }
    }

    fn collect_subtree(
        &self,
        u: &Usage,
        node: NodeId,
        skip: NodeId,
        self_node: NodeId,
        needed: &[FrId],
        out: &mut Vec<NodeId>,
    ) {
        let t = &self.model.tree;
        for &c in &t.children[node] {
            if c == skip || c == self_node {
                continue;
            }
            let borrowing = needed.iter().any(|&fr| t.borrowing(u, c, fr));
            if t.is_cq[c] {
                if borrowing {
                    out.push(c);
                }
            } else if borrowing {
                self.collect_subtree(u, c, skip, self_node, needed, out);
            }
        }
    }

    fn candidates(
        &self,
        u: &Usage,
        wl: WlId,
        cq: CqId,
        requests: &[(FrId, Count)],
        needed: &[FrId],
    ) -> Vec<Candidate> {
        let m = &self.model;
        let c = &m.cqs[cq];
        let w = &m.workloads[wl];
        let mut out = Vec::new();
        if c.within != WithinPolicy::Never {
            for &other in &self.admitted[cq] {
                if other == wl || !self.uses_any(other, needed) {
                    continue;
                }
                let o = &m.workloads[other];
                let ok = o.priority < w.priority
                    || (c.within == WithinPolicy::LowerOrNewerEqualPriority
                        && o.priority == w.priority
                        // Strictly newer (upstream `SatisfiesPreemptionPolicy`: equal queue-order
                        // timestamps never preempt each other).
                        && self.order_ts(wl) < self.order_ts(other));
                if ok {
                    out.push(Candidate {
                        wl: other,
                        variant: Variant::SameQueue,
                    });
                }
            }
        }
        if c.reclaim != ReclaimPolicy::Never && m.tree.parent[c.node].is_some() {
            let (mut advantage, mut remaining) =
                m.tree.quantities_fit_in_quota(u, c.node, requests);
            let mut prev = c.node;
            for a in m.tree.ancestors(c.node) {
                let mut queues = Vec::new();
                self.collect_subtree(u, a, prev, c.node, needed, &mut queues);
                for qn in queues {
                    let Some(other_cq) = m.cq_of_node[qn] else {
                        continue;
                    };
                    for &other in &self.admitted[other_cq] {
                        if !self.uses_any(other, needed) {
                            continue;
                        }
                        let p = m.workloads[other].priority;
                        if c.reclaim == ReclaimPolicy::LowerPriority && p >= w.priority {
                            continue;
                        }
                        let variant = if advantage {
                            Variant::HierarchicalReclaim
                        } else {
                            match c.borrow_within {
                                None => Variant::ReclaimWithoutBorrowing,
                                Some(threshold) => {
                                    if p >= w.priority || threshold.is_some_and(|t| p > t) {
                                        Variant::ReclaimWithoutBorrowing
                                    } else {
                                        Variant::ReclaimWhileBorrowing
                                    }
                                }
                            }
                        };
                        out.push(Candidate { wl: other, variant });
                    }
                }
                if !advantage {
                    let (fits, rem) = m.tree.quantities_fit_in_quota(u, a, &remaining);
                    advantage = fits;
                    remaining = rem;
                }
                prev = a;
            }
        }
        // CandidatesOrdering: other queues first, lower priority, most recently reserved, UID.
        out.sort_by(|a, b| {
            let key = |x: &Candidate| {
                let adm = self.wls[x.wl]
                    .admission
                    .as_ref()
                    .map_or(i64::MAX, |a| a.reserved_ms);
                (
                    x.variant == Variant::SameQueue,
                    m.workloads[x.wl].priority,
                    std::cmp::Reverse(adm),
                    m.workloads[x.wl].uid.as_str(),
                )
            };
            key(a).cmp(&key(b))
        });
        out
    }

    fn workload_fits(
        &self,
        u: &Usage,
        cq: CqId,
        requests: &[(FrId, Count)],
        allow_borrow: bool,
    ) -> bool {
        let t = &self.model.tree;
        let node = self.model.cqs[cq].node;
        requests.iter().all(|&(fr, v)| {
            (allow_borrow || !t.borrowing_with(u, node, fr, v)) && v <= t.available(u, node, fr)
        })
    }

    fn still_valid(
        &self,
        u: &Usage,
        cq: CqId,
        cand: &Candidate,
        needed: &[FrId],
        allow_borrow: bool,
    ) -> bool {
        if cand.variant == Variant::SameQueue {
            return true;
        }
        if allow_borrow && cand.variant == Variant::ReclaimWithoutBorrowing {
            return false;
        }
        let t = &self.model.tree;
        let Some(adm) = &self.wls[cand.wl].admission else {
            return false;
        };
        let their = self.model.cqs[adm.cq].node;
        let ours: Vec<NodeId> = t.ancestors(self.model.cqs[cq].node).collect();
        let mut n = their;
        loop {
            if ours.contains(&n) {
                return true;
            }
            if !needed.iter().any(|&fr| t.borrowing(u, n, fr)) {
                return false;
            }
            match t.parent[n] {
                Some(p) => n = p,
                None => return true,
            }
        }
    }

    /// Classical preemption targets for `requests` of `wl` in `cq`, needing preemption in `needed`.
    fn classical(
        &self,
        u: &mut Usage,
        wl: WlId,
        cq: CqId,
        requests: &[(FrId, Count)],
        needed: &[FrId],
    ) -> Vec<(WlId, PreemptReason)> {
        let cands = self.candidates(u, wl, cq, requests, needed);
        if cands.is_empty() {
            return Vec::new();
        }
        let c = &self.model.cqs[cq];
        let t = &self.model.tree;
        let node = c.node;
        let any_other = cands.iter().any(|x| x.variant != Variant::SameQueue);
        let any_hier = cands
            .iter()
            .any(|x| x.variant == Variant::HierarchicalReclaim);
        let forbidden = c.borrow_within.is_none();
        let at_nominal = needed
            .iter()
            .any(|&fr| u[t.ix(node, fr)] >= t.nominal[t.ix(node, fr)]);
        let attempts: &[bool] = if !any_other || (forbidden && at_nominal) {
            &[true]
        } else if forbidden && !any_hier {
            &[false, true]
        } else {
            &[true, false]
        };
        for &allow_borrow in attempts {
            let mut removed: Vec<Candidate> = Vec::new();
            let mut fit = false;
            for cand in &cands {
                if !self.still_valid(u, cq, cand, needed, allow_borrow) {
                    continue;
                }
                self.remove_wl_usage(u, cand.wl);
                removed.push(*cand);
                if self.workload_fits(u, cq, requests, allow_borrow) {
                    fit = true;
                    break;
                }
            }
            if fit {
                // Fill back: re-add every target (but the last) whose absence is not needed.
                let mut targets = removed.clone();
                for i in (0..removed.len().saturating_sub(1)).rev() {
                    self.add_wl_usage(u, removed[i].wl);
                    if self.workload_fits(u, cq, requests, allow_borrow) {
                        targets.remove(i);
                    } else {
                        self.remove_wl_usage(u, removed[i].wl);
                    }
                }
                for x in &targets {
                    self.add_wl_usage(u, x.wl);
                }
                return targets
                    .into_iter()
                    .map(|x| {
                        let reason = match x.variant {
                            Variant::SameQueue => PreemptReason::InClusterQueue,
                            Variant::ReclaimWhileBorrowing => {
                                PreemptReason::InCohortReclaimWhileBorrowing
                            }
                            _ => PreemptReason::InCohortReclamation,
                        };
                        (x.wl, reason)
                    })
                    .collect();
            }
            for x in removed.iter().rev() {
                self.add_wl_usage(u, x.wl);
            }
        }
        Vec::new()
    }

    /// The oracle used during flavor assignment: the preemption possibility for one FR and the
    /// borrowing level after removing the targets.
    pub(crate) fn simulate_preemption(
        &self,
        u: &mut Usage,
        wl: WlId,
        cq: CqId,
        fr: FrId,
        val: Count,
    ) -> (PMode, u32) {
        let requests = [(fr, val)];
        let targets = if self.model.settings.fair_sharing.is_some() {
            self.fair_targets(u, wl, cq, &requests, &[fr])
        } else {
            self.classical(u, wl, cq, &requests, &[fr])
        };
        if targets.is_empty() {
            return (PMode::NoCandidates, 0);
        }
        let own = targets
            .iter()
            .any(|(t, _)| self.wls[*t].admission.as_ref().is_some_and(|a| a.cq == cq));
        for (t, _) in &targets {
            self.remove_wl_usage(u, *t);
        }
        let node = self.model.cqs[cq].node;
        let (borrow, _) = self
            .model
            .tree
            .height_of_lowest_subtree_that_fits(u, node, fr, val);
        for (t, _) in &targets {
            self.add_wl_usage(u, *t);
        }
        (if own { PMode::Preempt } else { PMode::Reclaim }, borrow)
    }

    /// The preemption targets for an assignment in Preempt mode (`GetTargets`).
    pub(crate) fn targets(&self, u: &mut Usage, wl: WlId, cq: CqId, a: &Assignment) -> Vec<Target> {
        let needed = a.preempt_frs();
        let raw = if self.model.settings.fair_sharing.is_some() {
            self.fair_targets(u, wl, cq, &a.usage, &needed)
        } else {
            self.classical(u, wl, cq, &a.usage, &needed)
        };
        raw.into_iter()
            .map(|(wl, reason)| Target { wl, reason })
            .collect()
    }
}
