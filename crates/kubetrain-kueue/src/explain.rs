//! "Why is my job waiting": for a pending workload, its condition, every flavor tried per pod set
//! with the reasons, what would have to change (missing quota, workloads that would have to
//! finish or be preempted) and its position in the queue.

use std::fmt::Write as _;

use serde::Serialize;

use crate::model::{QueueTarget, WlId};
use crate::quantity::{Amount, format_amount, sub};
use crate::sched::assign::PMode;
use crate::sched::conditions::find;
use crate::sched::{Phase, Scheduler};

/// What is missing for one flavor-resource.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shortfall {
    /// Flavor.
    pub flavor: String,
    /// Resource.
    pub resource: String,
    /// Requested by the workload.
    pub requested: String,
    /// Available to its ClusterQueue now (including borrowing).
    pub available: String,
    /// Missing amount.
    pub missing: String,
    /// Admitted workloads that would have to finish or be preempted to free it, lowest
    /// priority and most recent first, until the missing amount is covered.
    pub blocking_workloads: Vec<String>,
}

/// One flavor tried for a pod set.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FlavorTried {
    /// Flavor name.
    pub flavor: String,
    /// Outcome.
    pub mode: PMode,
    /// Borrowing level (0 = within nominal quota).
    pub borrow: u32,
    /// Why it did not fit.
    pub reasons: Vec<String>,
}

/// The explanation of one workload.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `namespace/name`.
    pub key: String,
    /// State word.
    pub state: String,
    /// ClusterQueue it is queued in.
    pub cluster_queue: Option<String>,
    /// QuotaReserved reason.
    pub reason: String,
    /// QuotaReserved message.
    pub message: String,
    /// 1-based position among the queue's pending workloads (active heap order, then parked).
    pub position: Option<usize>,
    /// Pending workloads in the queue.
    pub queue_length: usize,
    /// Flavors tried per pod set in the last attempt.
    pub pod_sets: Vec<(String, Vec<FlavorTried>)>,
    /// Workloads the last attempt would preempt.
    pub preemption_targets: Vec<String>,
    /// Missing quota per flavor-resource of the first flavor choice.
    pub shortfalls: Vec<Shortfall>,
}

/// Explains workload `wl` in the scheduler's current state.
pub fn explain(s: &Scheduler, wl: WlId) -> Explanation {
    let m = &s.model;
    let st = &s.wls[wl];
    let w = &m.workloads[wl];
    let cond = find(&st.conditions, "QuotaReserved");
    let cq = match &w.target {
        QueueTarget::Queue(c) => Some(*c),
        QueueTarget::Blocked(..) => None,
    };
    let (mut position, mut queue_length) = (None, 0);
    if let Some(c) = cq {
        let q = &s.queues[c];
        let order: Vec<WlId> = q
            .active_in_order()
            .into_iter()
            .chain(q.inadmissible())
            .collect();
        queue_length = order.len();
        position = order.iter().position(|&x| x == wl).map(|p| p + 1);
    }
    let mut pod_sets = Vec::new();
    let mut targets = Vec::new();
    let mut shortfalls = Vec::new();
    if let (Some(last), Some(c)) = (&st.last, cq)
        && st.phase == Phase::Pending
    {
        targets = last
            .targets
            .iter()
            .map(|t| m.workloads[t.wl].key.clone())
            .collect();
        if let Some(a) = &last.assignment {
            for p in &a.pod_sets {
                let tried = p
                    .attempts
                    .iter()
                    .map(|a| FlavorTried {
                        flavor: m.flavors[a.flavor].name.clone(),
                        mode: a.mode,
                        borrow: a.borrow,
                        reasons: a.reasons.iter().map(|r| r.to_string()).collect(),
                    })
                    .collect();
                pod_sets.push((p.name.clone(), tried));
            }
            // Shortfall per FR of the chosen (or first) flavors, against the current usage.
            let node = m.cqs[c].node;
            let mut wanted: Vec<(usize, Amount)> = a.usage.clone();
            if wanted.is_empty() {
                // No flavor was assigned: measure against the first flavor of each group.
                for ps in &w.pod_sets {
                    for &(r, v) in &ps.per_pod {
                        let Some(&g) = m.cqs[c].group_of.get(&r) else {
                            continue;
                        };
                        let f = m.cqs[c].groups[g].flavors[0];
                        if let Some(fr) = m.fr(f, r) {
                            wanted.push((fr, v.saturating_mul(i64::from(ps.count))));
                        }
                    }
                }
            }
            for (fr, v) in wanted {
                let avail = m.tree.available(&s.usage, node, fr);
                if v <= avail {
                    continue;
                }
                let (f, r) = m.frs[fr];
                let rname = &m.resources[r];
                let missing = sub(v, avail);
                let mut holders: Vec<WlId> = s
                    .admitted
                    .iter()
                    .flatten()
                    .copied()
                    .filter(|&o| {
                        s.wls[o].admission.as_ref().is_some_and(|ad| {
                            m.tree.root(m.cqs[ad.cq].node) == m.tree.root(node)
                                && ad.usage.iter().any(|(x, _)| *x == fr)
                        })
                    })
                    .collect();
                holders.sort_by_key(|&o| {
                    let ad = s.wls[o].admission.as_ref().map_or(0, |a| a.reserved_ms);
                    (m.workloads[o].priority, std::cmp::Reverse(ad), o)
                });
                let mut freed = 0;
                let mut blocking = Vec::new();
                for o in holders {
                    if freed >= missing {
                        break;
                    }
                    freed += s.wls[o]
                        .admission
                        .as_ref()
                        .and_then(|a| a.usage.iter().find(|(x, _)| *x == fr))
                        .map_or(0, |x| x.1);
                    blocking.push(m.workloads[o].key.clone());
                }
                shortfalls.push(Shortfall {
                    flavor: m.flavors[f].name.clone(),
                    resource: rname.clone(),
                    requested: format_amount(rname, v),
                    available: format_amount(rname, avail),
                    missing: format_amount(rname, missing),
                    blocking_workloads: blocking,
                });
            }
        }
    }
    Explanation {
        key: w.key.clone(),
        state: crate::sim::report::state_word(s, wl).to_string(),
        cluster_queue: cq.map(|c| m.cqs[c].name.clone()),
        reason: cond.map(|c| c.reason.clone()).unwrap_or_default(),
        message: cond.map(|c| c.message.clone()).unwrap_or_default(),
        position,
        queue_length,
        pod_sets,
        preemption_targets: targets,
        shortfalls,
    }
}

impl Explanation {
    /// Human-readable text.
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "Workload {}: {}", self.key, self.state);
        if let Some(cq) = &self.cluster_queue {
            let _ = writeln!(o, "ClusterQueue: {cq}");
        }
        if let Some(p) = self.position {
            let _ = writeln!(o, "Position in queue: {p} of {}", self.queue_length);
        }
        if !self.reason.is_empty() {
            let _ = writeln!(o, "QuotaReserved: {}: {}", self.reason, self.message);
        }
        for (ps, attempts) in &self.pod_sets {
            let _ = writeln!(o, "Pod set {ps}:");
            for a in attempts {
                let outcome = match a.mode {
                    PMode::Fit => "fits".to_string(),
                    PMode::NoFit => "does not fit".to_string(),
                    PMode::NoCandidates => "needs preemption, no candidates".to_string(),
                    PMode::Preempt => "fits after preemption in its queue".to_string(),
                    PMode::Reclaim => "fits after reclaiming from the cohort".to_string(),
                };
                let borrow = if a.borrow > 0 {
                    format!(" (borrowing, level {})", a.borrow)
                } else {
                    String::new()
                };
                let _ = writeln!(o, "  flavor {}: {outcome}{borrow}", a.flavor);
                for r in &a.reasons {
                    let _ = writeln!(o, "    - {r}");
                }
            }
        }
        if !self.preemption_targets.is_empty() {
            let _ = writeln!(o, "Would preempt: {}", self.preemption_targets.join(", "));
        }
        for s in &self.shortfalls {
            let _ = writeln!(
                o,
                "Missing {} {} in flavor {} (requested {}, available {}); would have to finish or be preempted: {}",
                s.missing,
                s.resource,
                s.flavor,
                s.requested,
                s.available,
                if s.blocking_workloads.is_empty() {
                    "none (raise the quota)".to_string()
                } else {
                    s.blocking_workloads.join(", ")
                }
            );
        }
        o
    }
}
