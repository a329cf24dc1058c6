//! A pending workload that can never be admitted as the setup stands (`ExceedsMaxQuota`,
//! `NoMatchingFlavor`): which pod set, why, and what to change. Waiting for other workloads to
//! finish would not help, so an explanation with these lists no preemption candidates.

use serde::Serialize;

use crate::model::{CqId, PodSetReq, ResId, WlId};
use crate::quantity::{Count, format_count};
use crate::sched::Scheduler;
use crate::sched::assign::{Assignment, NoFitReason};

/// One pod set that can never be admitted in its ClusterQueue, and what would change that.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NeverFits {
    /// Pod set name.
    pub pod_set: String,
    /// Why it can never fit, in words.
    pub why: String,
    /// What would make it fit, each in words.
    pub fixes: Vec<String>,
}

/// Whether a QuotaReserved reason means the workload can never be admitted as things stand.
pub(crate) fn is_permanent(reason: &str) -> bool {
    reason == NoFitReason::ExceedsMaxQuota.as_str()
        || reason == NoFitReason::NoMatchingFlavor.as_str()
}

/// The pod sets of the last attempt that can never fit in ClusterQueue `cq`.
pub(crate) fn never_fits(s: &Scheduler, wl: WlId, cq: CqId, a: &Assignment) -> Vec<NeverFits> {
    let m = &s.model;
    a.pod_sets
        .iter()
        .filter_map(|p| {
            let ps = m.workloads[wl].pod_sets.iter().find(|x| x.name == p.name)?;
            match p.no_fit? {
                NoFitReason::ExceedsMaxQuota => {
                    Some(over_quota(s, cq, ps).unwrap_or_else(|| generic(s, cq, ps, &p.reasons)))
                }
                NoFitReason::NoMatchingFlavor => Some(generic(s, cq, ps, &p.reasons)),
                _ => None,
            }
        })
        .collect()
}

/// The most `cq` could ever hold of resource `r` in a flavor the pod set may use: (flavor, capacity,
/// nominal quota there).
fn best_capacity(
    s: &Scheduler,
    cq: CqId,
    ps: &PodSetReq,
    r: ResId,
) -> Option<(String, Count, Count)> {
    let m = &s.model;
    let c = &m.cqs[cq];
    let group = &c.groups[*c.group_of.get(&r)?];
    let in_group: Vec<(ResId, Count)> = ps
        .per_pod
        .iter()
        .copied()
        .filter(|(res, _)| group.resources.contains(res))
        .collect();
    let mut best: Option<(String, Count, Count)> = None;
    for &f in &group.flavors {
        if s.flavor_mismatch(cq, ps, f, &in_group).is_some() {
            continue;
        }
        let Some(fr) = m.fr(f, r) else { continue };
        let cap = m.tree.potential_available(c.node, fr);
        if best.as_ref().is_none_or(|b| cap > b.1) {
            let nominal = m.tree.nominal[m.tree.ix(c.node, fr)];
            best = Some((m.flavors[f].name.clone(), cap, nominal));
        }
    }
    best
}

/// The first resource whose whole request exceeds the most `cq` could ever hold of it, with the
/// three ways out: fewer pods, less per pod, more quota.
fn over_quota(s: &Scheduler, cq: CqId, ps: &PodSetReq) -> Option<NeverFits> {
    let m = &s.model;
    let cq_name = &m.cqs[cq].name;
    let pods = Count::from(ps.count.max(1));
    ps.per_pod.iter().find_map(|&(r, per_pod)| {
        if per_pod <= 0 {
            return None;
        }
        let total = per_pod.saturating_mul(pods);
        let (flavor, cap, nominal) = best_capacity(s, cq, ps, r)?;
        if total <= cap {
            return None;
        }
        let name = &m.resources[r];
        let n = |v: Count| format_count(name, v);
        let why = format!(
            "pod set {} asks for {} {name} ({} pods × {}), and ClusterQueue {cq_name} can never hold more than {} {name} (in flavor {flavor}, borrowing included)",
            ps.name,
            n(total),
            ps.count,
            n(per_pod),
            n(cap),
        );
        let mut fixes = Vec::new();
        let max_pods = cap / per_pod;
        if max_pods >= 1 {
            fixes.push(format!(
                "fewer pods: at most {max_pods} of {} {name} each (a TrainJob's numNodes)",
                n(per_pod)
            ));
        }
        let max_per_pod = cap / pods;
        if max_per_pod >= 1 {
            fixes.push(format!(
                "less per pod: at most {} {name} for each of the {} pods (a TrainJob's resourcesPerNode)",
                n(max_per_pod),
                ps.count
            ));
        }
        let missing = total.saturating_sub(cap);
        fixes.push(format!(
            "more quota: {} more {name} for ClusterQueue {cq_name} in flavor {flavor} (its nominalQuota from {} to {}, or as much more to borrow from its cohort)",
            n(missing),
            n(nominal),
            n(nominal.saturating_add(missing))
        ));
        Some(NeverFits {
            pod_set: ps.name.clone(),
            why,
            fixes,
        })
    })
}

/// A pod set that no flavor of `cq` takes (taints, selectors, a resource the queue does not cover),
/// or whose quota is exceeded only together with the workload's other pod sets.
fn generic(s: &Scheduler, cq: CqId, ps: &PodSetReq, reasons: &[std::sync::Arc<str>]) -> NeverFits {
    let cq_name = &s.model.cqs[cq].name;
    let reasons: Vec<&str> = reasons.iter().map(|r| &**r).collect();
    NeverFits {
        pod_set: ps.name.clone(),
        why: format!(
            "no flavor of ClusterQueue {cq_name} can ever take pod set {}: {}",
            ps.name,
            reasons.join(", ")
        ),
        fixes: vec![format!(
            "change the pod set (its requests, tolerations or node selector) or ClusterQueue {cq_name} (its flavors and quotas) so that one flavor takes it"
        )],
    }
}
