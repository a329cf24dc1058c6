//! Flavor assignment (kueue.md §2.4): per pod set and resource group, flavors in ClusterQueue
//! order, taint and node-selector filters, quota fit, flavor fungibility, and partial admission
//! (§2.7).

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use super::Scheduler;
use crate::model::{CqId, FlavorId, Preference, ResId, WlId};
use crate::quantity::{Count, add, format_count, sub};
use crate::quota::{FrId, Usage};

/// The internal preemption mode of a flavor attempt, worst first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum PMode {
    /// Does not fit.
    NoFit,
    /// Needs preemption but nothing can be preempted.
    NoCandidates,
    /// Needs preemption, with targets in its own queue.
    Preempt,
    /// Needs preemption, all targets elsewhere in the cohort.
    Reclaim,
    /// Fits now.
    Fit,
}

/// The external flavor-assignment mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Mode {
    /// Does not fit.
    NoFit,
    /// Fits after preempting (or waiting for) other workloads.
    Preempt,
    /// Fits now.
    Fit,
}

impl PMode {
    /// The external mode.
    pub fn external(self) -> Mode {
        match self {
            PMode::NoFit => Mode::NoFit,
            PMode::Fit => Mode::Fit,
            _ => Mode::Preempt,
        }
    }
}

/// A preemption mode with its borrowing level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granular {
    /// Preemption mode.
    pub pmode: PMode,
    /// Borrowing level (0 = within nominal quota).
    pub borrow: u32,
}

/// Severity of a no-fit reason (kueue.md §2.4 `resolveNoFitReason`), least severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum NoFitReason {
    /// Topology placement failed.
    TopologyPlacementFailed,
    /// Quota is in use.
    WaitingForQuota,
    /// The request exceeds what the queue could ever hold.
    ExceedsMaxQuota,
    /// No flavor matches the pod set.
    NoMatchingFlavor,
}

impl NoFitReason {
    /// The condition reason.
    pub fn as_str(self) -> &'static str {
        match self {
            NoFitReason::TopologyPlacementFailed => "TopologyPlacementFailed",
            NoFitReason::WaitingForQuota => "WaitingForQuota",
            NoFitReason::ExceedsMaxQuota => "ExceedsMaxQuota",
            NoFitReason::NoMatchingFlavor => "NoMatchingFlavor",
        }
    }
}

/// The flavor chosen for one resource of a pod set.
#[derive(Debug, Clone)]
pub struct ResourceFlavor {
    /// Resource.
    pub res: ResId,
    /// Flavor.
    pub flavor: FlavorId,
    /// FR id.
    pub fr: FrId,
    /// Mode of this resource in that flavor.
    pub mode: PMode,
    /// Borrowing level.
    pub borrow: u32,
    /// Total request of the pod set for this resource.
    pub amount: Count,
}

/// One attempted flavor, for explanations.
#[derive(Debug, Clone)]
pub struct FlavorAttempt {
    /// Flavor.
    pub flavor: FlavorId,
    /// Outcome mode.
    pub mode: PMode,
    /// Borrowing level.
    pub borrow: u32,
    /// Reasons it did not fit (empty when it fits).
    pub reasons: Vec<Arc<str>>,
}

/// The assignment of one pod set.
#[derive(Debug, Clone)]
pub struct PodSetAssignment {
    /// Pod set name.
    pub name: String,
    /// Admitted count.
    pub count: i32,
    /// Chosen flavors; empty when no flavor could be assigned.
    pub flavors: Vec<ResourceFlavor>,
    /// Status reasons (kept unless every resource fits); shared with the attempts.
    pub reasons: Vec<Arc<str>>,
    /// Whether a resource group found no flavor.
    pub failed: bool,
    /// No-fit severity for the condition reason.
    pub no_fit: Option<NoFitReason>,
    /// Every flavor attempt per resource group, for explanations.
    pub attempts: Vec<FlavorAttempt>,
    /// Where its pods go, when a TAS flavor was assigned and the topology fits.
    pub topology: Option<crate::tas::TopologyAssignment>,
    /// Why the topology did not fit (TAS flavors only).
    pub topology_failure: Option<crate::tas::PlacementFailure>,
}

/// The flavor assignment of a workload.
#[derive(Debug, Clone)]
pub struct Assignment {
    /// Per pod set, in order; pod sets after a failing one are absent.
    pub pod_sets: Vec<PodSetAssignment>,
    /// Highest borrowing level.
    pub borrowing: u32,
    /// Total usage per FR.
    pub usage: Vec<(FrId, Count)>,
    /// Whether every pod set was evaluated.
    pub complete: bool,
}

impl Assignment {
    /// Worst mode over pod sets (`RepresentativeMode`).
    pub fn mode(&self) -> Mode {
        if !self.complete || self.pod_sets.iter().any(|p| p.failed) {
            return Mode::NoFit;
        }
        self.pod_sets
            .iter()
            .flat_map(|p| &p.flavors)
            .map(|f| f.mode.external())
            .min()
            .unwrap_or(Mode::Fit)
    }

    /// FRs whose mode is Preempt.
    pub fn preempt_frs(&self) -> Vec<FrId> {
        let mut out: Vec<FrId> = self
            .pod_sets
            .iter()
            .flat_map(|p| &p.flavors)
            .filter(|f| f.mode.external() == Mode::Preempt)
            .map(|f| f.fr)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// `Message()`: `couldn't assign flavors to pod set <ps>: <reasons>` joined by `; `.
    pub fn message(&self) -> String {
        self.pod_sets
            .iter()
            .filter(|p| !p.reasons.is_empty())
            .map(|p| {
                let mut r: Vec<&str> = p.reasons.iter().map(|x| &**x).collect();
                r.sort_unstable();
                format!(
                    "couldn't assign flavors to pod set {}: {}",
                    p.name,
                    r.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The condition reason for a NoFit assignment: the most severe over pod sets.
    pub fn no_fit_reason(&self) -> NoFitReason {
        self.pod_sets
            .iter()
            .filter_map(|p| p.no_fit)
            .max()
            .unwrap_or(NoFitReason::NoMatchingFlavor)
    }
}

fn should_try_next(s: &Scheduler, cq: CqId, m: Granular) -> bool {
    let c = &s.model.cqs[cq];
    if !s.model.settings.flavor_fungibility {
        return m.pmode != PMode::Fit;
    }
    matches!(m.pmode, PMode::NoFit | PMode::NoCandidates)
        || (matches!(m.pmode, PMode::Preempt | PMode::Reclaim) && c.preempt_try_next)
        || (m.borrow > 0 && c.borrow_try_next)
}

fn is_preferred(s: &Scheduler, cq: CqId, a: Granular, b: Option<Granular>) -> bool {
    let Some(b) = b else {
        return a.pmode != PMode::NoFit;
    };
    if a.pmode == PMode::NoFit {
        return false;
    }
    if b.pmode == PMode::NoFit {
        return true;
    }
    if !s.model.settings.flavor_fungibility {
        return a.pmode > b.pmode;
    }
    if (a.pmode == PMode::NoCandidates) != (b.pmode == PMode::NoCandidates) {
        return b.pmode == PMode::NoCandidates;
    }
    match s.model.cqs[cq].preference {
        Some(Preference::PreemptionOverBorrowing) => {
            if a.borrow != b.borrow {
                a.borrow < b.borrow
            } else {
                a.pmode > b.pmode
            }
        }
        _ => {
            if a.pmode != b.pmode {
                a.pmode > b.pmode
            } else {
                a.borrow < b.borrow
            }
        }
    }
}

/// The outcome of one resource group's flavor search.
struct GroupPick {
    /// The chosen flavor, its mode and per-resource choices.
    best: Option<(FlavorId, Granular, Vec<ResourceFlavor>)>,
    /// Reasons of every attempted flavor.
    reasons: Vec<Arc<str>>,
    /// No-fit severities of the attempts that did not fit.
    severities: Vec<NoFitReason>,
}

/// The quota fit of one flavor for a resource group.
struct FlavorTry {
    mode: Granular,
    chosen: Vec<ResourceFlavor>,
    reasons: Vec<Arc<str>>,
    /// The most severe reason among resources that do not fit.
    worst_sev: Option<NoFitReason>,
}

fn taint_text(t: &crate::api::Taint) -> String {
    format!("{{{} {} {} <nil>}}", t.key, t.value, t.effect)
}

impl Scheduler {
    /// `fitsResourceQuota` for one FR: mode, borrowing level and reason (with severity).
    #[allow(clippy::too_many_arguments)]
    fn fits_resource_quota(
        &self,
        u: &mut Usage,
        wl: WlId,
        cq: CqId,
        fr: FrId,
        already: Count,
        request: Count,
    ) -> (Granular, Option<(NoFitReason, String)>) {
        let m = &self.model;
        let node = m.cqs[cq].node;
        let (flavor, res) = m.frs[fr];
        let rname = &m.resources[res];
        let fname = &m.flavors[flavor].name;
        let val = add(already, request);
        let available = m.tree.available(u, node, fr);
        let max_cap = m.tree.potential_available(node, fr);
        if val > max_cap {
            return (
                Granular {
                    pmode: PMode::NoFit,
                    borrow: 0,
                },
                Some((
                    NoFitReason::ExceedsMaxQuota,
                    format!(
                        "insufficient quota for {rname} in flavor {fname}, previously considered podsets requests ({}) + current podset request ({}) > maximum capacity ({})",
                        format_count(rname, already),
                        format_count(rname, request),
                        format_count(rname, max_cap)
                    ),
                )),
            );
        }
        let (borrow, may_reclaim) = m.tree.height_of_lowest_subtree_that_fits(u, node, fr, val);
        if val <= available {
            return (
                Granular {
                    pmode: PMode::Fit,
                    borrow,
                },
                None,
            );
        }
        let msg = format!(
            "insufficient unused quota for {rname} in flavor {fname}, {} more needed",
            format_count(rname, sub(val, available))
        );
        let c = &m.cqs[cq];
        let can_preempt_while_borrowing = c.borrow_within.is_some()
            || (m.settings.fair_sharing.is_some()
                && c.reclaim != crate::model::ReclaimPolicy::Never);
        let nominal = m.tree.nominal[m.tree.ix(node, fr)];
        if nominal >= val || may_reclaim || can_preempt_while_borrowing {
            let (pmode, borrow_after) = self.simulate_preemption(u, wl, cq, fr, val);
            let borrow = if pmode == PMode::NoCandidates {
                borrow
            } else {
                borrow_after
            };
            return (
                Granular { pmode, borrow },
                Some((NoFitReason::WaitingForQuota, msg)),
            );
        }
        (
            Granular {
                pmode: PMode::NoFit,
                borrow: 0,
            },
            Some((NoFitReason::WaitingForQuota, msg)),
        )
    }

    /// Assigns flavors to every pod set of `wl` in `cq` with the given pod counts.
    pub fn assign_flavors(&self, u: &mut Usage, wl: WlId, cq: CqId, counts: &[i32]) -> Assignment {
        let m = &self.model;
        let w = &m.workloads[wl];
        let mut assigned: HashMap<FrId, Count> = HashMap::new();
        let mut out = Assignment {
            pod_sets: Vec::new(),
            borrowing: 0,
            usage: Vec::new(),
            complete: true,
        };
        for (pi, ps) in w.pod_sets.iter().enumerate() {
            let psa = self.assign_pod_set(u, wl, cq, ps, counts[pi], &assigned, &mut out.borrowing);
            let failed = psa.failed;
            if !failed {
                for rf in &psa.flavors {
                    let e = assigned.entry(rf.fr).or_insert(0);
                    *e = add(*e, rf.amount);
                }
            }
            out.pod_sets.push(psa);
            if failed {
                out.complete = pi + 1 == w.pod_sets.len();
                break;
            }
        }
        let mut usage: Vec<(FrId, Count)> = assigned.into_iter().collect();
        usage.sort_unstable();
        out.usage = usage;
        if m.settings.tas && out.complete {
            self.place_topology(&mut out, wl, cq);
        }
        out
    }

    /// One pod set: each resource group in the order of its first requested resource, stopping
    /// at the first group that gets no flavor. `assigned` holds the earlier pod sets' usage;
    /// `borrowing` is raised by every chosen flavor (also of a pod set that fails later).
    #[allow(clippy::too_many_arguments)]
    fn assign_pod_set(
        &self,
        u: &mut Usage,
        wl: WlId,
        cq: CqId,
        ps: &crate::model::PodSetReq,
        count: i32,
        assigned: &HashMap<FrId, Count>,
        borrowing: &mut u32,
    ) -> PodSetAssignment {
        let m = &self.model;
        let c = &m.cqs[cq];
        let mut psa = PodSetAssignment {
            name: ps.name.clone(),
            count,
            flavors: Vec::new(),
            reasons: Vec::new(),
            failed: false,
            no_fit: None,
            attempts: Vec::new(),
            topology: None,
            topology_failure: None,
        };
        let requests: Vec<(ResId, Count)> = ps
            .per_pod
            .iter()
            .map(|&(r, v)| (r, v.saturating_mul(i64::from(count))))
            .collect();
        let mut done_groups: Vec<usize> = Vec::new();
        for &(r, v) in &requests {
            let Some(&g) = c.group_of.get(&r) else {
                if v == 0 {
                    continue;
                }
                psa.reasons = vec![Arc::from(format!(
                    "resource {} unavailable in ClusterQueue",
                    m.resources[r]
                ))];
                psa.failed = true;
                psa.flavors.clear();
                psa.no_fit = Some(NoFitReason::NoMatchingFlavor);
                break;
            };
            if done_groups.contains(&g) {
                continue;
            }
            done_groups.push(g);
            let group = &c.groups[g];
            let in_group: Vec<(ResId, Count)> = requests
                .iter()
                .copied()
                .filter(|(res, _)| group.resources.contains(res))
                .collect();
            let pick = self.pick_group_flavor(
                u,
                wl,
                cq,
                ps,
                &group.flavors,
                &in_group,
                assigned,
                &mut psa.attempts,
            );
            match pick.best {
                None => {
                    // The pod set gets no flavors; its status is this group's status only.
                    psa.flavors.clear();
                    psa.reasons = pick.reasons;
                    psa.failed = true;
                    psa.no_fit = Some(
                        pick.severities
                            .iter()
                            .copied()
                            .min()
                            .unwrap_or(NoFitReason::NoMatchingFlavor),
                    );
                    break;
                }
                Some((_, mode, chosen)) => {
                    if mode.pmode != PMode::Fit {
                        psa.reasons.extend(pick.reasons);
                    }
                    for rf in chosen {
                        *borrowing = (*borrowing).max(rf.borrow);
                        psa.flavors.push(rf);
                    }
                }
            }
        }
        psa
    }

    /// Tries the group's flavors in queue order (flavor fungibility decides whether to go on)
    /// and keeps the preferred one; every attempt is appended to `attempts`.
    #[allow(clippy::too_many_arguments)]
    fn pick_group_flavor(
        &self,
        u: &mut Usage,
        wl: WlId,
        cq: CqId,
        ps: &crate::model::PodSetReq,
        flavors: &[FlavorId],
        in_group: &[(ResId, Count)],
        assigned: &HashMap<FrId, Count>,
        attempts: &mut Vec<FlavorAttempt>,
    ) -> GroupPick {
        let mut pick = GroupPick {
            best: None,
            reasons: Vec::new(),
            severities: Vec::new(),
        };
        for &f in flavors {
            if let Some(msg) = self.flavor_mismatch(cq, ps, f, in_group) {
                let msg: Arc<str> = msg.into();
                pick.reasons.push(msg.clone());
                pick.severities.push(NoFitReason::NoMatchingFlavor);
                attempts.push(FlavorAttempt {
                    flavor: f,
                    mode: PMode::NoFit,
                    borrow: 0,
                    reasons: vec![msg],
                });
                continue;
            }
            let t = self.try_flavor(u, wl, cq, f, in_group, assigned);
            if let Some(sev) = t.worst_sev {
                pick.severities.push(sev);
            }
            pick.reasons.extend(t.reasons.iter().cloned());
            attempts.push(FlavorAttempt {
                flavor: f,
                mode: t.mode.pmode,
                borrow: t.mode.borrow,
                reasons: t.reasons,
            });
            if !should_try_next(self, cq, t.mode) {
                pick.best = Some((f, t.mode, t.chosen));
                break;
            }
            if is_preferred(self, cq, t.mode, pick.best.as_ref().map(|b| b.1)) {
                pick.best = Some((f, t.mode, t.chosen));
            }
        }
        pick
    }

    /// Why flavor `f` cannot take the pod set at all, checked in order: the flavor is missing,
    /// the TAS request does not match, a taint is not tolerated, node affinity does not match.
    pub(crate) fn flavor_mismatch(
        &self,
        cq: CqId,
        ps: &crate::model::PodSetReq,
        f: FlavorId,
        in_group: &[(ResId, Count)],
    ) -> Option<String> {
        let flavor = &self.model.flavors[f];
        if !flavor.exists {
            return Some(format!("flavor {} not found", flavor.name));
        }
        if let Some(msg) = self.tas_flavor_mismatch(cq, ps, f, in_group) {
            return Some(msg);
        }
        let untolerated = flavor.taints.iter().find(|t| {
            matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
                && !ps
                    .tolerations
                    .iter()
                    .chain(&flavor.tolerations)
                    .any(|tol| tol.tolerates(t))
        });
        untolerated
            .map(|t| {
                format!(
                    "untolerated taint {} in flavor {}",
                    taint_text(t),
                    flavor.name
                )
            })
            .or_else(|| {
                (!ps.matches_flavor_labels(&flavor.node_labels))
                    .then(|| format!("flavor {} doesn't match node affinity", flavor.name))
            })
    }

    /// Quota fit of every resource of the group in flavor `f`: the worst mode, the highest
    /// borrowing level, the per-resource choices and the reasons.
    fn try_flavor(
        &self,
        u: &mut Usage,
        wl: WlId,
        cq: CqId,
        f: FlavorId,
        in_group: &[(ResId, Count)],
        assigned: &HashMap<FrId, Count>,
    ) -> FlavorTry {
        let mut t = FlavorTry {
            mode: Granular {
                pmode: PMode::Fit,
                borrow: 0,
            },
            chosen: Vec::new(),
            reasons: Vec::new(),
            worst_sev: None,
        };
        for &(res, amount) in in_group {
            let Some(fr) = self.model.fr(f, res) else {
                continue;
            };
            let already = assigned.get(&fr).copied().unwrap_or(0);
            let (g, reason) = self.fits_resource_quota(u, wl, cq, fr, already, amount);
            if g.pmode < t.mode.pmode {
                t.mode.pmode = g.pmode;
            }
            t.mode.borrow = t.mode.borrow.max(g.borrow);
            if let Some((sev, msg)) = reason {
                if g.pmode == PMode::NoFit {
                    t.worst_sev = Some(t.worst_sev.map_or(sev, |w| w.max(sev)));
                }
                t.reasons.push(Arc::<str>::from(msg));
            }
            t.chosen.push(ResourceFlavor {
                res,
                flavor: f,
                fr,
                mode: g.pmode,
                borrow: g.borrow,
                amount,
            });
        }
        t
    }

    /// `checkPodSetAndFlavorMatchForTAS`: a pod set that asks for a topology needs a TAS flavor
    /// with the requested level; one that does not cannot use a TAS flavor (unless every flavor
    /// of the queue is a TAS flavor: then TAS is implied).
    fn tas_flavor_mismatch(
        &self,
        cq: CqId,
        ps: &crate::model::PodSetReq,
        f: FlavorId,
        in_group: &[(ResId, Count)],
    ) -> Option<String> {
        let m = &self.model;
        if !m.settings.tas {
            return None;
        }
        let flavor = &m.flavors[f];
        let implied = ps.topology.is_none() && m.cqs[cq].tas_only;
        match (&ps.topology, &flavor.topology_name) {
            _ if implied => None,
            (Some(_), None) => in_group.iter().any(|&(_, v)| v > 0).then(|| {
                format!(
                    "Flavor {:?} does not support TopologyAwareScheduling",
                    flavor.name
                )
            }),
            (Some(req), Some(_)) => {
                let Some(t) = flavor.topology else {
                    return Some(format!(
                        "Flavor {:?} information missing in TAS cache",
                        flavor.name
                    ));
                };
                let level = match req {
                    crate::tas::TopologyRequest::Required(l)
                    | crate::tas::TopologyRequest::Preferred(l) => Some(l),
                    crate::tas::TopologyRequest::Unconstrained => None,
                };
                level
                    .filter(|l| !m.topologies[t].levels.contains(l))
                    .map(|_| {
                        format!(
                            "Flavor {:?} does not contain the requested level",
                            flavor.name
                        )
                    })
            }
            (None, Some(_)) => Some(format!(
                "Flavor {:?} supports only TopologyAwareScheduling",
                flavor.name
            )),
            (None, None) => None,
        }
    }

    /// TAS after the quota (upstream `assignFlavors` end): with quota Fit, place every TAS pod
    /// set with the current node usage; a pod set that does not fit makes the assignment Preempt.
    /// With Preempt, place on empty nodes: if even that fails, NoFit (`TopologyPlacementFailed`).
    fn place_topology(&self, out: &mut Assignment, wl: WlId, cq: CqId) {
        if out.mode() == Mode::Fit {
            match self.tas_pass(out, wl, cq, false) {
                Ok(placed) => {
                    for (pi, t) in placed {
                        out.pod_sets[pi].topology = Some(t);
                    }
                    return;
                }
                Err((pi, f)) => {
                    let p = &mut out.pod_sets[pi];
                    p.reasons.push(Arc::from(f.message.as_str()));
                    p.topology_failure = Some(f);
                    for rf in &mut p.flavors {
                        rf.mode = rf.mode.min(PMode::Preempt);
                    }
                }
            }
        }
        if out.mode() != Mode::Preempt {
            return;
        }
        match self.tas_pass(out, wl, cq, true) {
            Ok(placed) => {
                for (pi, _) in placed {
                    for rf in &mut out.pod_sets[pi].flavors {
                        rf.mode = rf.mode.min(PMode::Preempt);
                    }
                }
            }
            Err((pi, f)) => {
                let p = &mut out.pod_sets[pi];
                for rf in &mut p.flavors {
                    rf.mode = PMode::NoFit;
                }
                p.no_fit = Some(p.no_fit.map_or(NoFitReason::TopologyPlacementFailed, |n| {
                    n.max(NoFitReason::TopologyPlacementFailed)
                }));
                if p.reasons.is_empty() {
                    p.reasons.push(Arc::from(f.message.as_str()));
                }
                p.topology_failure.get_or_insert(f);
            }
        }
    }

    /// Places every TAS pod set of an assignment in order (earlier pod sets' pods count);
    /// `empty`: as if no admitted workload used the nodes.
    #[allow(clippy::type_complexity)]
    fn tas_pass(
        &self,
        out: &Assignment,
        wl: WlId,
        cq: CqId,
        empty: bool,
    ) -> Result<Vec<(usize, crate::tas::TopologyAssignment)>, (usize, crate::tas::PlacementFailure)>
    {
        let m = &self.model;
        let w = &m.workloads[wl];
        let pods_res = m.res_id("pods");
        let mut assumed: HashMap<usize, Vec<(ResId, Count)>> = HashMap::new();
        let mut placed = Vec::new();
        for (pi, psa) in out.pod_sets.iter().enumerate() {
            let Some(ps) = w.pod_sets.get(pi) else {
                continue;
            };
            let Some((flavor, topo)) = psa.flavors.iter().find_map(|rf| {
                m.flavors[rf.flavor]
                    .topology
                    .map(|t| (&m.flavors[rf.flavor], t))
            }) else {
                continue;
            };
            let request = match &ps.topology {
                Some(r) => r.clone(),
                None if m.cqs[cq].tas_only => crate::tas::TopologyRequest::Unconstrained,
                None => continue,
            };
            let free = |id: usize| -> Vec<(ResId, Count)> {
                let n = &m.nodes[id];
                n.allocatable
                    .iter()
                    .map(|&(r, a)| {
                        let used = |list: &[(ResId, Count)]| {
                            list.iter()
                                .filter(|(x, _)| *x == r)
                                .map(|(_, v)| *v)
                                .sum::<Count>()
                        };
                        let mut left = a - used(assumed.get(&id).map_or(&[][..], |v| v.as_slice()));
                        if !empty {
                            left -= used(&self.node_used[id]);
                        }
                        (r, left)
                    })
                    .collect()
            };
            let nodes: Vec<_> = m
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| {
                    !n.unschedulable
                        && flavor
                            .node_labels
                            .iter()
                            .all(|(k, v)| n.labels.get(k) == Some(v))
                })
                .map(|(id, n)| crate::tas::NodeView {
                    id,
                    labels: &n.labels,
                    taints: &n.taints,
                    free: free(id),
                })
                .collect();
            match crate::tas::place(
                &m.topologies[topo],
                &nodes,
                ps,
                &flavor.tolerations,
                pods_res,
                psa.count,
                &request,
            ) {
                Ok(t) => {
                    for &(node, n) in &t.per_node {
                        let e = assumed.entry(node).or_default();
                        for (r, v) in ps.per_pod.iter().copied().chain(pods_res.map(|r| (r, 1))) {
                            let add_v = v.saturating_mul(i64::from(n));
                            match e.iter_mut().find(|(x, _)| *x == r) {
                                Some(x) => x.1 += add_v,
                                None => e.push((r, add_v)),
                            }
                        }
                    }
                    placed.push((pi, t));
                }
                Err(f) => return Err((pi, f)),
            }
        }
        Ok(placed)
    }

    /// The full assignment, then partial admission if needed (kueue.md §2.7). Returns the
    /// assignment and its preemption targets.
    pub fn initial_assignment(
        &self,
        u: &mut Usage,
        wl: WlId,
        cq: CqId,
    ) -> (Assignment, Vec<super::Target>) {
        let w = &self.model.workloads[wl];
        let full_counts: Vec<i32> = w.pod_sets.iter().map(|p| p.count).collect();
        let full = self.assign_flavors(u, wl, cq, &full_counts);
        let mut full_targets = Vec::new();
        match full.mode() {
            Mode::Fit => return (full, Vec::new()),
            Mode::Preempt => {
                full_targets = self.targets_unless_hopeless(u, wl, cq, &full);
                if !full_targets.is_empty() {
                    return (full, full_targets);
                }
            }
            Mode::NoFit => {}
        }
        let deltas: Vec<i64> = w
            .pod_sets
            .iter()
            .map(|p| p.min_count.map_or(0, |m| i64::from(p.count - m).max(0)))
            .collect();
        let total: i64 = deltas.iter().sum();
        if !self.model.settings.partial_admission || total == 0 {
            return (full, full_targets);
        }
        let counts_at = |i: i64| -> Vec<i32> {
            w.pod_sets
                .iter()
                .zip(&deltas)
                .map(|(p, &d)| p.count - (d * i / total) as i32)
                .collect()
        };
        let mut found: Option<(Assignment, Vec<super::Target>)> = None;
        let (mut lo, mut hi) = (0i64, total + 1);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let a = self.assign_flavors(u, wl, cq, &counts_at(mid));
            let ok = match a.mode() {
                Mode::Fit => Some((a, Vec::new())),
                Mode::Preempt => {
                    let t = self.targets_unless_hopeless(u, wl, cq, &a);
                    (!t.is_empty()).then_some((a, t))
                }
                Mode::NoFit => None,
            };
            match ok {
                Some(r) => {
                    found = Some(r);
                    hi = mid;
                }
                None => lo = mid + 1,
            }
        }
        found.unwrap_or((full, full_targets))
    }

    /// `GetTargets`, skipped when the oracle already found no candidates for every resource
    /// that needs preemption: the candidate set of their union is then empty too.
    fn targets_unless_hopeless(
        &self,
        u: &mut Usage,
        wl: WlId,
        cq: CqId,
        a: &Assignment,
    ) -> Vec<super::Target> {
        let hopeless = a
            .pod_sets
            .iter()
            .flat_map(|p| &p.flavors)
            .filter(|f| f.mode.external() == Mode::Preempt)
            .all(|f| f.mode == PMode::NoCandidates);
        if hopeless {
            return Vec::new();
        }
        self.targets(u, wl, cq, a)
    }
}
