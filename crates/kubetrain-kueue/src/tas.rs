//! Topology-aware scheduling (Kueue v0.19.1 `pkg/cache/scheduler/tas_flavor_snapshot.go`, the
//! BestFit profile): nodes grouped into domains by the levels of a `Topology` (e.g. block → rack →
//! hostname), per-domain pod capacity from the nodes' allocatable minus what admitted TAS workloads
//! use, and the placement of a pod set's pods into the fewest, tightest domains.
//!
//! A pod set asks for `required` placement (all pods in one domain of the level), `preferred`
//! (that level if possible, else the next wider level, finally spread over the widest level) or
//! `unconstrained` (anywhere). Pods fit a node when every requested resource (and one `pods`) fits
//! its free capacity, the node carries the flavor's `nodeLabels`, matches the pod's node selector
//! and required node affinity, and every `NoSchedule`/`NoExecute` taint is tolerated.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::api::{Taint, Toleration};
use crate::model::{PodSetReq, ResId};
use crate::quantity::Count;

mod nodes;

pub use nodes::{
    Node, PREFERRED_ANNOTATION, REQUIRED_ANNOTATION, Topology, TopologyRequest,
    UNCONSTRAINED_ANNOTATION,
};

/// Where the pods of one pod set go: per lowest-level domain (its values at every level), a count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TopologyAssignment {
    /// Level labels, widest first.
    pub levels: Vec<String>,
    /// (domain values per level, pods).
    pub domains: Vec<(Vec<String>, i32)>,
    /// Pods per node, for usage accounting.
    #[serde(skip)]
    pub per_node: Vec<(usize, i32)>,
}

/// Why a placement failed, in Kueue's words plus the figures `explain` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementFailure {
    /// Kueue's message: `topology "t" doesn't allow to fit any of N pod(s)` or `allows to fit only
    /// K out of N pod(s)`.
    pub message: String,
    /// Pods requested.
    pub requested: i32,
    /// Pods that fit in the best domain of the requested level (or in all, when spreading).
    pub fits: i32,
    /// The level searched last.
    pub level: String,
}

#[derive(Debug, Clone)]
struct Domain {
    values: Vec<String>,
    state: i32,
    children: Vec<usize>,
    node: Option<usize>,
}

/// A node as placement sees it: its labels and taints and what is still free on it.
#[derive(Debug, Clone)]
pub struct NodeView<'a> {
    /// Node index in the model.
    pub id: usize,
    /// Labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Taints.
    pub taints: &'a [Taint],
    /// Free amount per resource.
    pub free: Vec<(ResId, Count)>,
}

/// Finds a placement of `count` pods of `ps` (its per-pod requests plus one `pods`) on the `nodes` of a flavor
/// (already filtered by the flavor's labels).
pub fn place(
    topology: &Topology,
    nodes: &[NodeView<'_>],
    ps: &PodSetReq,
    flavor_tolerations: &[Toleration],
    pods_res: Option<ResId>,
    count: i32,
    request: &TopologyRequest,
) -> Result<TopologyAssignment, PlacementFailure> {
    let (level_key, required, unconstrained) = match request {
        TopologyRequest::Required(l) => (l.clone(), true, false),
        TopologyRequest::Preferred(l) => (l.clone(), false, false),
        TopologyRequest::Unconstrained => (
            topology.levels.last().cloned().unwrap_or_default(),
            false,
            true,
        ),
    };
    let Some(level_idx) = topology.levels.iter().position(|l| *l == level_key) else {
        return Err(PlacementFailure {
            message: format!("no requested topology level: {level_key}"),
            requested: count,
            fits: 0,
            level: level_key,
        });
    };
    let tree = DomainTree::build(topology, nodes, ps, flavor_tolerations, pods_res);
    let chosen = tree.choose_level(topology, level_idx, count, required, unconstrained)?;
    let current = tree.descend(chosen);
    Ok(tree.assignment(topology, current))
}

/// The failure of a placement that fits only `fits` of `count` pods at `level`.
fn fit_failure(topology: &Topology, count: i32, fits: i32, level: &str) -> PlacementFailure {
    let message = if fits == 0 {
        format!(
            "topology {:?} doesn't allow to fit any of {count} pod(s)",
            topology.name
        )
    } else {
        format!(
            "topology {:?} allows to fit only {fits} out of {count} pod(s)",
            topology.name
        )
    };
    PlacementFailure {
        message,
        requested: count,
        fits,
        level: level.to_string(),
    }
}

/// The topology's domains with the pods of the pod set each can hold.
struct DomainTree {
    domains: Vec<Domain>,
    /// Per level: domain values (up to that level) to domain index.
    per_level: Vec<BTreeMap<Vec<String>, usize>>,
}

impl DomainTree {
    /// Domains per level: a node belongs to the domain of its label values at each level;
    /// nodes missing a level label are left out.
    fn build(
        topology: &Topology,
        nodes: &[NodeView<'_>],
        ps: &PodSetReq,
        flavor_tolerations: &[Toleration],
        pods_res: Option<ResId>,
    ) -> Self {
        let nlevels = topology.levels.len();
        let mut t = DomainTree {
            domains: Vec::new(),
            per_level: vec![BTreeMap::new(); nlevels],
        };
        for n in nodes {
            let (node_id, labels, taints, free) = (n.id, n.labels, n.taints, &n.free);
            let Some(values) = topology
                .levels
                .iter()
                .map(|l| labels.get(l).cloned())
                .collect::<Option<Vec<String>>>()
            else {
                continue;
            };
            let fits = pods_fitting(
                ps,
                flavor_tolerations,
                labels,
                taints,
                free,
                ps.per_pod.as_slice(),
                pods_res,
            );
            let mut parent: Option<usize> = None;
            for lvl in 0..nlevels {
                let id = t.domain_at(lvl, &values[..=lvl], parent);
                t.domains[id].state = t.domains[id].state.saturating_add(fits);
                parent = Some(id);
            }
            if let Some(leaf) = parent {
                t.domains[leaf].node = Some(node_id);
            }
        }
        t
    }

    /// The domain of `key` at level `lvl`, created (as a child of `parent`) when new.
    fn domain_at(&mut self, lvl: usize, key: &[String], parent: Option<usize>) -> usize {
        if let Some(&id) = self.per_level[lvl].get(key) {
            return id;
        }
        let id = self.domains.len();
        self.domains.push(Domain {
            values: key.to_vec(),
            state: 0,
            children: Vec::new(),
            node: None,
        });
        self.per_level[lvl].insert(key.to_vec(), id);
        if let Some(p) = parent {
            self.domains[p].children.push(id);
        }
        id
    }

    /// Sorted: most capacity first, ties by domain values (upstream `sortedDomains`).
    fn sorted(&self, mut ids: Vec<usize>) -> Vec<usize> {
        let domains = &self.domains;
        ids.sort_by(|&a, &b| {
            domains[b]
                .state
                .cmp(&domains[a].state)
                .then_with(|| domains[a].values.cmp(&domains[b].values))
        });
        ids
    }

    /// BestFit: the first domain with the smallest capacity that still holds `needed`.
    fn best_fit(&self, ids: &[usize], needed: i32) -> usize {
        ids.iter()
            .copied()
            .filter(|&d| self.domains[d].state >= needed)
            .min_by_key(|&d| self.domains[d].state)
            .unwrap_or(ids[0])
    }

    /// Greedy cover of `count` pods by `ids`, the last domain chosen by best fit; returns
    /// (domain, pods) pairs.
    fn cover(&self, ids: &[usize], count: i32) -> Vec<(usize, i32)> {
        let domains = &self.domains;
        let mut out = Vec::new();
        let mut remaining = count;
        let mut i = 0;
        while remaining > 0 && i < ids.len() {
            let mut d = ids[i];
            if domains[d].state >= remaining {
                d = self.best_fit(&ids[i..], remaining);
                out.push((d, remaining));
                return out;
            }
            if domains[d].state > 0 {
                out.push((d, domains[d].state));
                remaining -= domains[d].state;
            }
            i += 1;
        }
        out
    }

    /// Phase 2a: the level whose domains can hold every pod (widening from `level_idx` unless
    /// required), or a cover of the widest level searched.
    fn choose_level(
        &self,
        topology: &Topology,
        level_idx: usize,
        count: i32,
        required: bool,
        unconstrained: bool,
    ) -> Result<Vec<(usize, i32)>, PlacementFailure> {
        let domains = &self.domains;
        let mut lvl = level_idx;
        loop {
            let ids = self.sorted(self.per_level[lvl].values().copied().collect());
            if ids.is_empty() {
                return Err(PlacementFailure {
                    message: format!("no topology domains at level: {}", topology.levels[lvl]),
                    requested: count,
                    fits: 0,
                    level: topology.levels[lvl].clone(),
                });
            }
            let top = ids[0];
            if domains[top].state >= count && !unconstrained {
                return Ok(vec![(self.best_fit(&ids, count), count)]);
            }
            if required {
                return Err(fit_failure(
                    topology,
                    count,
                    domains[top].state,
                    &topology.levels[lvl],
                ));
            }
            if lvl > 0 && !unconstrained {
                lvl -= 1;
                continue;
            }
            let total: i32 = ids
                .iter()
                .map(|&d| domains[d].state)
                .fold(0, i32::saturating_add);
            if total < count {
                return Err(fit_failure(topology, count, total, &topology.levels[lvl]));
            }
            return Ok(self.cover(&ids, count));
        }
    }

    /// Phase 2b: down level by level, each domain's pods into its tightest children.
    fn descend(&self, chosen: Vec<(usize, i32)>) -> Vec<(usize, i32)> {
        let domains = &self.domains;
        let mut current = chosen;
        while current
            .iter()
            .any(|&(d, _)| !domains[d].children.is_empty())
        {
            let mut next = Vec::new();
            for (d, pods) in current {
                if domains[d].children.is_empty() {
                    next.push((d, pods));
                    continue;
                }
                let kids = self.sorted(domains[d].children.clone());
                next.extend(self.cover(&kids, pods));
            }
            current = next;
        }
        current
    }

    /// The assignment of the leaf domains in `current`, ordered by domain values.
    fn assignment(
        &self,
        topology: &Topology,
        mut current: Vec<(usize, i32)>,
    ) -> TopologyAssignment {
        let domains = &self.domains;
        let mut out = TopologyAssignment {
            levels: topology.levels.clone(),
            ..TopologyAssignment::default()
        };
        current.sort_by(|a, b| domains[a.0].values.cmp(&domains[b.0].values));
        for (d, pods) in current {
            out.domains.push((domains[d].values.clone(), pods));
            if let Some(n) = domains[d].node {
                out.per_node.push((n, pods));
            }
        }
        out
    }
}

/// How many pods of `ps` fit on one node with `free` resources left.
fn pods_fitting(
    ps: &PodSetReq,
    flavor_tolerations: &[Toleration],
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
    free: &[(ResId, Count)],
    requests: &[(ResId, Count)],
    pods_res: Option<ResId>,
) -> i32 {
    let selector_ok = ps
        .node_selector
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v));
    let affinity_ok = ps.required_affinity.is_empty()
        || ps
            .required_affinity
            .iter()
            .any(|t| t.iter().all(|r| r.matches(labels)));
    let tolerated = taints.iter().all(|t| {
        !matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
            || ps
                .tolerations
                .iter()
                .chain(flavor_tolerations)
                .any(|tol| tol.tolerates(t))
    });
    if !(selector_ok && affinity_ok && tolerated) {
        return 0;
    }
    let free_of = |r: ResId| free.iter().find(|(x, _)| *x == r).map_or(0, |(_, v)| *v);
    let mut n = i64::from(i32::MAX);
    for &(r, per_pod) in requests {
        if per_pod <= 0 {
            continue;
        }
        n = n.min(free_of(r).max(0) / per_pod);
    }
    if let Some(p) = pods_res {
        n = n.min(free_of(p).max(0));
    }
    n.clamp(0, i64::from(i32::MAX)) as i32
}
