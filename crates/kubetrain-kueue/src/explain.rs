//! "Why is my job waiting": for a pending workload, its condition, every flavor tried per pod set
//! with the reasons, what would have to change (missing quota, workloads that would have to
//! finish or be preempted) and its position in the queue. A workload that can never be admitted
//! says so first, with what to change, and lists nobody to wait for.

mod lookup;
mod never_fits;
mod queue_hint;

pub use lookup::{WorkloadLookupError, find_workload};
pub use never_fits::NeverFits;

use std::fmt::Write as _;

use serde::Serialize;

use crate::model::{CqId, QueueTarget, WlId};
use crate::quantity::{Count, format_count, sub};
use crate::quota::{FrId, NodeId};
use crate::sched::assign::{Assignment, PMode};
use crate::sched::conditions::find;
use crate::sched::{Phase, Scheduler, WlState};

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
    /// Pod sets that can never be admitted as the setup stands, with what to change; when not
    /// empty, `preemptionTargets` and `shortfalls` are empty (nothing to wait for).
    pub never_fits: Vec<NeverFits>,
    /// Why it is in no queue and how to put it in one (missing label, LocalQueue elsewhere).
    pub queue_hint: Option<String>,
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
    /// Admission checks of a workload holding a reservation: (check, state).
    pub admission_checks: Vec<(String, String)>,
    /// Topology: why a TAS pod set did not fit, in the ML engineer's terms.
    pub topology: Vec<String>,
    /// Where the pods of an admitted TAS pod set go: (pod set, `domain ×pods` list).
    pub placement: Vec<(String, Vec<String>)>,
    /// `waitForPodsReady` state: the PodsReady condition, requeues, backoff.
    pub pods_ready: Option<String>,
    /// Pod sets admitted with fewer pods than they asked for (partial admission), one sentence each, e.g.
    /// `admitted with 2 of 4 nodes (partial admission: ...)`.
    pub partial_admission: Vec<String>,
}

/// A topology level's short name: `cloud.com/topology-rack` → `rack`,
/// `kubernetes.io/hostname` → `hostname`.
fn level_name(label: &str) -> &str {
    let last = label.rsplit('/').next().unwrap_or(label);
    last.strip_prefix("topology-").unwrap_or(last)
}

/// "no rack has 8 free nvidia.com/gpu for 4 pods; the largest has room for 3 pods (6
/// nvidia.com/gpu)" for a pod set whose topology did not fit.
fn topology_note(s: &Scheduler, wl: WlId, ps: &str, f: &crate::tas::PlacementFailure) -> String {
    let m = &s.model;
    let per_pod = m.workloads[wl]
        .pod_sets
        .iter()
        .find(|p| p.name == ps)
        .map(|p| p.per_pod.as_slice())
        .unwrap_or_default();
    let accel = per_pod.iter().find(|(r, v)| {
        *v > 0
            && !matches!(
                m.resources[*r].as_str(),
                "cpu" | "memory" | "ephemeral-storage" | "pods"
            )
    });
    let level = level_name(&f.level);
    match accel {
        Some(&(r, v)) => {
            let name = &m.resources[r];
            format!(
                "pod set {ps}: no {level} has {} free {name} for {} pods; the largest has room for {} pods ({} {name})",
                format_count(name, v.saturating_mul(i64::from(f.requested))),
                f.requested,
                f.fits,
                format_count(name, v.saturating_mul(i64::from(f.fits)))
            )
        }
        None => format!(
            "pod set {ps}: no {level} has room for {} pods; the largest fits {}",
            f.requested, f.fits
        ),
    }
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
    let (position, queue_length) = cq.map_or((None, 0), |c| queue_position(s, c, wl));
    let mut pod_sets = Vec::new();
    let mut targets = Vec::new();
    let mut shortfalls = Vec::new();
    let mut never = Vec::new();
    let reason = cond.map(|c| c.reason.clone()).unwrap_or_default();
    if let (Some(last), Some(c)) = (&st.last, cq)
        && st.phase == Phase::Pending
    {
        if let Some(a) = &last.assignment {
            pod_sets = flavors_tried(s, a);
            if never_fits::is_permanent(&reason) {
                never = never_fits::never_fits(s, wl, c, a);
            }
            if never.is_empty() {
                shortfalls = shortfalls_of(s, wl, c, a);
            }
        }
        if never.is_empty() {
            targets = last
                .targets
                .iter()
                .map(|t| m.workloads[t.wl].key.clone())
                .collect();
        }
    }
    Explanation {
        key: w.key.clone(),
        state: crate::sim::report::state_word(s, wl).to_string(),
        never_fits: never,
        queue_hint: queue_hint::queue_hint(m, wl),
        cluster_queue: cq.map(|c| m.cqs[c].name.clone()),
        reason,
        message: cond.map(|c| c.message.clone()).unwrap_or_default(),
        position,
        queue_length,
        pod_sets,
        preemption_targets: targets,
        shortfalls,
        admission_checks: st
            .life
            .checks
            .iter()
            .map(|(c, state)| (m.checks[*c].name.clone(), state.as_str().to_string()))
            .collect(),
        topology: topology_notes(s, wl),
        placement: placement(st),
        pods_ready: pods_ready_line(st),
        partial_admission: partial_admission(s, wl),
    }
}

/// One sentence per pod set of an admitted workload that got fewer pods than its count (partial admission,
/// Kueue's `podset_reducer`: the full count neither fit nor could preempt, so the largest count down to
/// `minCount` that fits was taken). An elastic TrainJob's node pod set is counted in nodes.
pub fn partial_admission(s: &Scheduler, wl: WlId) -> Vec<String> {
    let m = &s.model;
    let w = &m.workloads[wl];
    let Some(admission) = &s.wls[wl].admission else {
        return Vec::new();
    };
    let cq = &m.cqs[admission.cq].name;
    admission
        .pod_sets
        .iter()
        .filter_map(|got| {
            let asked = w.pod_sets.iter().find(|p| p.name == got.name)?;
            if got.count >= asked.count {
                return None;
            }
            let min = asked.min_count.unwrap_or(got.count);
            let elastic = w.elastic_pod_set.as_deref() == Some(got.name.as_str());
            Some(if elastic {
                format!(
                    "admitted with {} of {} nodes (partial admission: quota for {} not available in ClusterQueue {cq}, \
not even by preemption; elastic minNodes {min})",
                    got.count, asked.count, asked.count
                )
            } else {
                format!(
                    "pod set {} admitted with {} of {} pods (partial admission: quota for {} not available in \
ClusterQueue {cq}, not even by preemption; minCount {min})",
                    got.name, got.count, asked.count, asked.count
                )
            })
        })
        .collect()
}

/// 1-based position of `wl` among the pending workloads of queue `c` (active heap order, then
/// parked), and their number.
fn queue_position(s: &Scheduler, c: CqId, wl: WlId) -> (Option<usize>, usize) {
    let q = &s.queues[c];
    let order: Vec<WlId> = q
        .active_in_order()
        .into_iter()
        .chain(q.inadmissible())
        .collect();
    (
        order.iter().position(|&x| x == wl).map(|p| p + 1),
        order.len(),
    )
}

/// Why the TAS pod sets of a pending workload's last attempt did not fit.
fn topology_notes(s: &Scheduler, wl: WlId) -> Vec<String> {
    let st = &s.wls[wl];
    let mut topology = Vec::new();
    if let (Some(last), Phase::Pending) = (&st.last, st.phase)
        && let Some(a) = &last.assignment
    {
        for p in &a.pod_sets {
            if let Some(f) = &p.topology_failure {
                topology.push(topology_note(s, wl, &p.name, f));
            }
        }
    }
    topology
}

/// Where the pods of each admitted TAS pod set go: (pod set, `domain ×pods` list).
fn placement(st: &WlState) -> Vec<(String, Vec<String>)> {
    st.admission
        .iter()
        .flat_map(|a| &a.pod_sets)
        .filter_map(|p| {
            let t = p.topology.as_ref()?;
            Some((
                p.name.clone(),
                t.domains
                    .iter()
                    .map(|(v, n)| format!("{} ×{n}", v.join("/")))
                    .collect(),
            ))
        })
        .collect()
}

/// The PodsReady condition with requeues, backoff and deactivation.
fn pods_ready_line(st: &WlState) -> Option<String> {
    find(&st.conditions, "PodsReady")
        .map(|c| format!("{}: {}: {}", c.status, c.reason, c.message))
        .map(|mut line| {
            if st.life.requeues > 0 {
                line.push_str(&format!(
                    "; requeued {} time(s) after a PodsReady timeout",
                    st.life.requeues
                ));
            }
            if let Some(until) = st.life.backoff_until {
                line.push_str(&format!("; backing off until {until} ms"));
            }
            if st.life.deactivated {
                line.push_str("; deactivated");
            }
            line
        })
}

/// Every flavor attempt per pod set of an assignment.
fn flavors_tried(s: &Scheduler, a: &Assignment) -> Vec<(String, Vec<FlavorTried>)> {
    a.pod_sets
        .iter()
        .map(|p| {
            let tried = p
                .attempts
                .iter()
                .map(|a| FlavorTried {
                    flavor: s.model.flavors[a.flavor].name.clone(),
                    mode: a.mode,
                    borrow: a.borrow,
                    reasons: a.reasons.iter().map(|r| r.to_string()).collect(),
                })
                .collect();
            (p.name.clone(), tried)
        })
        .collect()
}

/// Shortfall per FR of the chosen (or first) flavors, against the current usage.
fn shortfalls_of(s: &Scheduler, wl: WlId, c: CqId, a: &Assignment) -> Vec<Shortfall> {
    let m = &s.model;
    let node = m.cqs[c].node;
    let mut wanted: Vec<(usize, Count)> = a.usage.clone();
    if wanted.is_empty() {
        // No flavor was assigned: measure against the first flavor of each group.
        for ps in &m.workloads[wl].pod_sets {
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
    let mut shortfalls = Vec::new();
    for (fr, v) in wanted {
        let avail = m.tree.available(&s.usage, node, fr);
        if v <= avail {
            continue;
        }
        let (f, r) = m.frs[fr];
        let rname = &m.resources[r];
        let missing = sub(v, avail);
        shortfalls.push(Shortfall {
            flavor: m.flavors[f].name.clone(),
            resource: rname.clone(),
            requested: format_count(rname, v),
            available: format_count(rname, avail),
            missing: format_count(rname, missing),
            blocking_workloads: blocking_workloads(s, node, fr, missing),
        });
    }
    shortfalls
}

/// Admitted workloads in the same cohort tree holding `fr`, lowest priority and most recent
/// first, until `missing` is covered.
fn blocking_workloads(s: &Scheduler, node: NodeId, fr: FrId, missing: Count) -> Vec<String> {
    let m = &s.model;
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
    blocking
}

impl Explanation {
    /// Human-readable text.
    pub fn to_text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "Workload {}: {}", self.key, self.state);
        for n in &self.never_fits {
            let _ = writeln!(o, "Can never be admitted as it is: {}", n.why);
            for fix in &n.fixes {
                let _ = writeln!(o, "  - {fix}");
            }
        }
        if let Some(h) = &self.queue_hint {
            let _ = writeln!(o, "Not in any queue: {h}");
        }
        if let Some(cq) = &self.cluster_queue {
            let _ = writeln!(o, "ClusterQueue: {cq}");
        }
        if let Some(p) = self.position {
            let _ = writeln!(o, "Position in queue: {p} of {}", self.queue_length);
        }
        if !self.reason.is_empty() {
            let _ = writeln!(o, "QuotaReserved: {}: {}", self.reason, self.message);
        }
        let waiting: Vec<String> = self
            .admission_checks
            .iter()
            .filter(|(_, state)| state != "Ready")
            .map(|(c, state)| format!("{c} ({state})"))
            .collect();
        if !waiting.is_empty() {
            let _ = writeln!(
                o,
                "Quota reserved; waiting for admission check(s): {}",
                waiting.join(", ")
            );
        }
        for p in &self.partial_admission {
            let _ = writeln!(o, "Partially admitted: {p}");
        }
        if let Some(p) = &self.pods_ready {
            let _ = writeln!(o, "PodsReady: {p}");
        }
        for (ps, domains) in &self.placement {
            let _ = writeln!(o, "Placement of pod set {ps}: {}", domains.join(", "));
        }
        for t in &self.topology {
            let _ = writeln!(o, "Topology: {t}");
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
