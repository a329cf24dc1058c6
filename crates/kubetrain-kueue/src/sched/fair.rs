//! Fair sharing (kueue.md §2.9): dominant resource share (DRS), the tournament that orders heads
//! inside a cohort tree, and fair-sharing preemption with its two strategies.

use super::{Entry, PreemptReason, Scheduler};
use crate::model::{CqId, ReclaimPolicy, WithinPolicy, WlId};
use crate::quantity::{Count, add, sub};
use crate::quota::{FrId, NodeId, Usage};

/// The share of a zero-weight borrower with no unweighted share: above any weighted share (those are
/// at most ~1e21 for the quantities the model holds), below `+∞`, and precise enough that
/// `ZERO_WEIGHT_BASE × (1 + r)` keeps the order of unweighted shares `r`.
pub(crate) const ZERO_WEIGHT_BASE: f64 = 1e280;

impl Scheduler {
    /// The dominant resource share of node `n` (×1000, divided by its weight); 0 for a root or a
    /// node within its quota. A zero-weight borrower ranks above every weighted share and, among
    /// zero-weight borrowers, by its unweighted share (upstream's `CompareDRS`): it is
    /// `ZERO_WEIGHT_BASE × (1 + unweighted share)`.
    pub fn drs(&self, u: &Usage, n: NodeId) -> f64 {
        let m = &self.model;
        let t = &m.tree;
        let Some(parent) = t.parent[n] else {
            return 0.0;
        };
        let mut borrowed: Vec<Count> = vec![0; m.resources.len()];
        let mut lendable: Vec<Count> = vec![0; m.resources.len()];
        let mut any = false;
        for (fr, &(_, res)) in m.frs.iter().enumerate() {
            let i = t.ix(n, fr);
            let b = sub(u[i], t.subtree[i]).max(0);
            if b > 0 {
                any = true;
            }
            borrowed[res] = add(borrowed[res], b);
            lendable[res] = add(lendable[res], t.potential_available(parent, fr));
        }
        if !any {
            return 0.0;
        }
        let mut ratio: f64 = 0.0;
        for res in 0..m.resources.len() {
            if lendable[res] > 0 {
                ratio = ratio.max(borrowed[res] as f64 * 1000.0 / lendable[res] as f64);
            }
        }
        let w = t.weight_milli[n];
        if w == 0 {
            return ZERO_WEIGHT_BASE * (1.0 + ratio);
        }
        ratio * 1000.0 / w as f64
    }

    fn drs_with(&self, u: &mut Usage, n: NodeId, cq: CqId, usage: &[(FrId, Count)]) -> f64 {
        let node = self.model.cqs[cq].node;
        for &(fr, v) in usage {
            self.model.tree.add_usage(u, node, fr, v);
        }
        let d = self.drs(u, n);
        for &(fr, v) in usage {
            self.model.tree.remove_usage(u, node, fr, v);
        }
        d
    }

    /// The next entry to process under fair sharing: blocked entries first, then a tournament
    /// in the cohort tree of the first remaining entry.
    pub(super) fn next_fair(
        &self,
        snap: &Usage,
        entries: &[Entry],
        processed: &[bool],
    ) -> Option<usize> {
        self.model.settings.fair_sharing.as_ref()?;
        let remaining: Vec<usize> = (0..entries.len()).filter(|&i| !processed[i]).collect();
        let first = *remaining.first()?;
        if let Some(&i) = remaining
            .iter()
            .find(|&&i| entries[i].blocked.is_some() || entries[i].assignment.is_none())
        {
            return Some(i);
        }
        let t = &self.model.tree;
        let node = self.model.cqs[entries[first].cq].node;
        if t.parent[node].is_none() {
            return Some(first);
        }
        let root = t.root(node);
        let mut u = snap.clone();
        self.tournament(&mut u, root, entries, &remaining)
    }

    fn tournament(
        &self,
        u: &mut Usage,
        n: NodeId,
        entries: &[Entry],
        remaining: &[usize],
    ) -> Option<usize> {
        let t = &self.model.tree;
        if t.is_cq[n] {
            return remaining
                .iter()
                .copied()
                .find(|&i| self.model.cqs[entries[i].cq].node == n);
        }
        let mut best: Option<(usize, (bool, f64, i32, i64))> = None;
        for &c in &t.children[n] {
            let Some(i) = self.tournament(u, c, entries, remaining) else {
                continue;
            };
            let e = &entries[i];
            let usage = e
                .assignment
                .as_ref()
                .map(|a| a.usage.clone())
                .unwrap_or_default();
            let borrowing = self.model.settings.fs_prioritize_non_borrowing
                && usage.iter().any(|&(fr, v)| t.borrowing_with(u, c, fr, v));
            let drs = self.drs_with(u, c, e.cq, &usage);
            let w = &self.model.workloads[e.wl];
            let priority = if self.model.settings.priority_sorting_within_cohort {
                w.priority
            } else {
                0
            };
            let key = (borrowing, drs, -priority, w.order_ms);
            let better = match &best {
                None => true,
                Some((_, k)) => (key.0, key.1, key.2, key.3)
                    .partial_cmp(&(k.0, k.1, k.2, k.3))
                    .is_some_and(|o| o.is_lt()),
            };
            if better {
                best = Some((i, key));
            }
        }
        best.map(|b| b.0)
    }

    fn lca_children(&self, a: NodeId, b: NodeId) -> (NodeId, NodeId) {
        let t = &self.model.tree;
        let pa: Vec<NodeId> = std::iter::once(a).chain(t.ancestors(a)).collect();
        let pb: Vec<NodeId> = std::iter::once(b).chain(t.ancestors(b)).collect();
        for (i, x) in pa.iter().enumerate() {
            if let Some(j) = pb.iter().position(|y| y == x) {
                let ca = if i > 0 { pa[i - 1] } else { a };
                let cb = if j > 0 { pb[j - 1] } else { b };
                return (ca, cb);
            }
        }
        (*pa.last().unwrap_or(&a), *pb.last().unwrap_or(&b))
    }

    /// Fair-sharing preemption targets (`fairPreemptions`).
    pub(super) fn fair_targets(
        &self,
        u: &mut Usage,
        wl: WlId,
        cq: CqId,
        requests: &[(FrId, Count)],
        needed: &[FrId],
    ) -> Vec<(WlId, PreemptReason)> {
        let m = &self.model;
        let t = &m.tree;
        let node = m.cqs[cq].node;
        let cands = self.fair_candidates(u, wl, cq, needed);
        if cands.is_empty() {
            return Vec::new();
        }
        for &(fr, v) in requests {
            t.add_usage(u, node, fr, v);
        }
        let within_nominal = m.settings.fs_preempt_within_nominal
            && requests
                .iter()
                .filter(|(fr, _)| needed.contains(fr))
                .all(|&(fr, _)| u[t.ix(node, fr)] <= t.nominal[t.ix(node, fr)]);
        let (mut targets, done) = self.pick_fair_targets(u, cq, requests, cands, within_nominal);
        if done {
            self.fill_back(u, node, requests, &mut targets);
        }
        for (x, _) in &targets {
            self.add_wl_usage(u, *x);
        }
        for &(fr, v) in requests {
            t.remove_usage(u, node, fr, v);
        }
        if done { targets } else { Vec::new() }
    }

    /// Candidates using a needed FR: lower-priority (or newer equal-priority) workloads of the
    /// own queue, and reclaimable ones of borrowing queues in the same cohort tree; other
    /// queues first, then lowest priority, most recent, uid.
    fn fair_candidates(&self, u: &Usage, wl: WlId, cq: CqId, needed: &[FrId]) -> Vec<WlId> {
        let m = &self.model;
        let t = &m.tree;
        let c = &m.cqs[cq];
        let w = &m.workloads[wl];
        let node = c.node;
        let uses = |x: WlId| {
            self.wls[x]
                .admission
                .as_ref()
                .is_some_and(|a| a.usage.iter().any(|(fr, v)| *v > 0 && needed.contains(fr)))
        };
        let mut cands: Vec<WlId> = Vec::new();
        if c.within != WithinPolicy::Never {
            for &o in &self.admitted[cq] {
                let ow = &m.workloads[o];
                if o != wl
                    && uses(o)
                    && (ow.priority < w.priority
                        || (c.within == WithinPolicy::LowerOrNewerEqualPriority
                            && ow.priority == w.priority
                            && self.order_ts(wl) < self.order_ts(o)))
                {
                    cands.push(o);
                }
            }
        }
        if c.reclaim != ReclaimPolicy::Never && t.parent[node].is_some() {
            let root = t.root(node);
            for (oc, other) in m.cqs.iter().enumerate() {
                if oc == cq || t.root(other.node) != root {
                    continue;
                }
                if !needed.iter().any(|&fr| t.borrowing(u, other.node, fr)) {
                    continue;
                }
                for &o in &self.admitted[oc] {
                    if uses(o)
                        && (c.reclaim == ReclaimPolicy::Any || m.workloads[o].priority < w.priority)
                    {
                        cands.push(o);
                    }
                }
            }
        }
        cands.sort_by_key(|&x| {
            let adm = self.wls[x].admission.as_ref().map_or(0, |a| a.reserved_ms);
            let same = self.wls[x].admission.as_ref().is_some_and(|a| a.cq == cq);
            (
                same,
                m.workloads[x].priority,
                std::cmp::Reverse(adm),
                m.workloads[x].uid.clone(),
            )
        });
        cands
    }

    /// Whether `requests` (already added to `u`) fit in `node` once they are taken out again.
    fn fits_requests(&self, u: &mut Usage, node: NodeId, requests: &[(FrId, Count)]) -> bool {
        let t = &self.model.tree;
        for &(fr, v) in requests {
            t.remove_usage(u, node, fr, v);
        }
        let ok = requests
            .iter()
            .all(|&(fr, v)| v <= t.available(u, node, fr));
        for &(fr, v) in requests {
            t.add_usage(u, node, fr, v);
        }
        ok
    }

    /// Per strategy, takes candidates from the queue with the highest share while the
    /// strategy allows, until the requests fit; the targets' usage is left removed from `u`.
    /// Returns the targets and whether the requests fit.
    fn pick_fair_targets(
        &self,
        u: &mut Usage,
        cq: CqId,
        requests: &[(FrId, Count)],
        cands: Vec<WlId>,
        within_nominal: bool,
    ) -> (Vec<(WlId, PreemptReason)>, bool) {
        let m = &self.model;
        let node = m.cqs[cq].node;
        let strategies = m.settings.fair_sharing.clone().unwrap_or_default();
        let mut targets: Vec<(WlId, PreemptReason)> = Vec::new();
        let mut pool = cands;
        let mut done = self.fits_requests(u, node, requests);
        for strategy in &strategies {
            if done {
                break;
            }
            let mut rejected = Vec::new();
            while !done {
                // Target queue: the one whose tree side has the highest share.
                let Some(pos) = (0..pool.len()).max_by(|&a, &b| {
                    let da = self.victim_share(u, pool[a], node);
                    let db = self.victim_share(u, pool[b], node);
                    da.partial_cmp(&db)
                        .unwrap_or(std::cmp::Ordering::Equal)
                        .then(b.cmp(&a))
                }) else {
                    break;
                };
                let cand = pool.remove(pos);
                let Some(adm) = self.wls[cand].admission.as_ref() else {
                    continue;
                };
                let reason = if adm.cq == cq {
                    Some(PreemptReason::InClusterQueue)
                } else if within_nominal {
                    Some(PreemptReason::InCohortReclamation)
                } else {
                    self.fair_share_allows(u, node, adm.cq, cand, strategy)
                        .then_some(PreemptReason::InCohortFairSharing)
                };
                match reason {
                    Some(r) => {
                        self.remove_wl_usage(u, cand);
                        targets.push((cand, r));
                        done = self.fits_requests(u, node, requests);
                    }
                    None => rejected.push(cand),
                }
            }
            pool = rejected;
        }
        (targets, done)
    }

    /// Whether `strategy` lets the preemptor at `node` take `cand` (admitted in `victim_cq`),
    /// comparing the shares of the two sides below their lowest common ancestor.
    fn fair_share_allows(
        &self,
        u: &mut Usage,
        node: NodeId,
        victim_cq: CqId,
        cand: WlId,
        strategy: &str,
    ) -> bool {
        let (pside, tside) = self.lca_children(node, self.model.cqs[victim_cq].node);
        let before = self.drs(u, tside);
        let preemptor_share = self.drs(u, pside);
        self.remove_wl_usage(u, cand);
        let after = self.drs(u, tside);
        self.add_wl_usage(u, cand);
        if strategy == "LessThanInitialShare" {
            preemptor_share < before
        } else {
            preemptor_share <= after
        }
    }

    /// Fills back every target (but the last) that is not needed for the requests to fit.
    fn fill_back(
        &self,
        u: &mut Usage,
        node: NodeId,
        requests: &[(FrId, Count)],
        targets: &mut Vec<(WlId, PreemptReason)>,
    ) {
        let mut i = targets.len().saturating_sub(1);
        while i > 0 {
            i -= 1;
            self.add_wl_usage(u, targets[i].0);
            if self.fits_requests(u, node, requests) {
                targets.remove(i);
            } else {
                self.remove_wl_usage(u, targets[i].0);
            }
        }
    }

    fn victim_share(&self, u: &Usage, victim: WlId, preemptor_node: NodeId) -> f64 {
        let Some(adm) = self.wls[victim].admission.as_ref() else {
            return f64::NEG_INFINITY;
        };
        let n = self.model.cqs[adm.cq].node;
        if n == preemptor_node {
            // The own queue is tried first when it has candidates.
            return f64::INFINITY;
        }
        let (_, tside) = self.lca_children(preemptor_node, n);
        self.drs(u, tside)
    }
}
