//! The resolved model: interned flavors and resources, the quota forest, ClusterQueue policies,
//! queues and workloads with per-pod requests, built from a validated [`Setup`].

use std::collections::{BTreeMap, HashMap};

use crate::api::{
    AdmissionSpec, LabelSelector, PodSpec, ResourceGroup, Taint, Toleration, WorkloadPriorityClass,
};
use crate::error::LoadError;
use crate::load::Setup;
use crate::quantity::{Amount, Quantity, add};
use crate::quota::{FrId, NodeId, Tree};

/// Index of a ResourceFlavor.
pub type FlavorId = usize;
/// Index of a resource name.
pub type ResId = usize;
/// Index of a ClusterQueue.
pub type CqId = usize;
/// Index of a Workload.
pub type WlId = usize;

/// A ResourceFlavor.
#[derive(Debug, Clone, Default)]
pub struct Flavor {
    /// Name.
    pub name: String,
    /// Node labels.
    pub node_labels: BTreeMap<String, String>,
    /// Node taints.
    pub taints: Vec<Taint>,
    /// Tolerations added to admitted pods.
    pub tolerations: Vec<Toleration>,
    /// Whether the flavor object exists (a CQ may name a missing one).
    pub exists: bool,
}

/// A resource group of a ClusterQueue with interned ids.
#[derive(Debug, Clone)]
pub struct Group {
    /// Covered resources.
    pub resources: Vec<ResId>,
    /// Flavors in preference order.
    pub flavors: Vec<FlavorId>,
}

/// `withinClusterQueue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WithinPolicy {
    /// Never preempt in the same queue.
    Never,
    /// Strictly lower priority.
    LowerPriority,
    /// Lower priority, or equal and newer.
    LowerOrNewerEqualPriority,
}

/// `reclaimWithinCohort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimPolicy {
    /// Never reclaim.
    Never,
    /// Reclaim from lower-priority borrowers.
    LowerPriority,
    /// Reclaim from any borrower.
    Any,
}

/// `flavorFungibility.preference`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preference {
    /// Prefer a flavor that needs borrowing over one that needs preemption.
    BorrowingOverPreemption,
    /// Prefer preemption over borrowing.
    PreemptionOverBorrowing,
}

/// A ClusterQueue with interned quotas and parsed policies.
#[derive(Debug, Clone)]
pub struct ClusterQueue {
    /// Name.
    pub name: String,
    /// Node in the quota forest.
    pub node: NodeId,
    /// Resource groups.
    pub groups: Vec<Group>,
    /// Resource group covering each resource (by resource id).
    pub group_of: HashMap<ResId, usize>,
    /// StrictFIFO (else BestEffortFIFO).
    pub strict_fifo: bool,
    /// Namespace selector (`None` matches nothing).
    pub namespace_selector: Option<LabelSelector>,
    /// `whenCanBorrow: TryNextFlavor`.
    pub borrow_try_next: bool,
    /// `whenCanPreempt: TryNextFlavor`.
    pub preempt_try_next: bool,
    /// Flavor preference.
    pub preference: Option<Preference>,
    /// `withinClusterQueue`.
    pub within: WithinPolicy,
    /// `reclaimWithinCohort`.
    pub reclaim: ReclaimPolicy,
    /// `borrowWithinCohort`: `Some(threshold)` when policy is LowerPriority.
    pub borrow_within: Option<Option<i32>>,
    /// Why the queue is inactive: (reason, message); `None` when active.
    pub inactive: Option<(String, String)>,
    /// `stopPolicy: HoldAndDrain`: admitted workloads are evicted too.
    pub drain: bool,
}

/// One pod set's requests.
#[derive(Debug, Clone)]
pub struct PodSetReq {
    /// Pod set name.
    pub name: String,
    /// Pod count.
    pub count: i32,
    /// Minimum count for partial admission.
    pub min_count: Option<i32>,
    /// Requests of one pod, in Kueue's resource iteration order.
    pub per_pod: Vec<(ResId, Amount)>,
    /// Pod node selector.
    pub node_selector: BTreeMap<String, String>,
    /// Pod tolerations.
    pub tolerations: Vec<Toleration>,
}

/// Where a workload's queue leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueTarget {
    /// The ClusterQueue serving its LocalQueue.
    Queue(CqId),
    /// The queue is missing or stopped: (reason, message).
    Blocked(String, String),
}

/// A workload of the model.
#[derive(Debug, Clone)]
pub struct Workload {
    /// `namespace/name`.
    pub key: String,
    /// Namespace.
    pub namespace: String,
    /// UID (from metadata or generated).
    pub uid: String,
    /// The `kueue.x-k8s.io/job-uid` label (the UID of the job that owns the Workload), printed in
    /// preemption messages as `JobUID`; `UNKNOWN` when absent, as upstream prints it.
    pub job_uid: Option<String>,
    /// Effective priority.
    pub priority: i32,
    /// Pod sets.
    pub pod_sets: Vec<PodSetReq>,
    /// Arrival (creation) time in virtual milliseconds; also the queue-order timestamp: the
    /// `kubetrain.dev/arrival` annotation, else `metadata.creationTimestamp` relative to the earliest
    /// creation timestamp of the setup's workloads, else 0.
    pub arrival_ms: i64,
    /// Run time after admission, for the simulator.
    pub runtime_ms: Option<i64>,
    /// Class label for simulator metrics.
    pub class: String,
    /// `spec.active`.
    pub active: bool,
    /// Target queue.
    pub target: QueueTarget,
    /// Admission recorded in the input (`status.admission`).
    pub initial_admission: Option<AdmissionSpec>,
}

/// Controller-level switches (Configuration and feature gates).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Fair sharing preemption strategies when fair sharing is on.
    pub fair_sharing: Option<Vec<String>>,
    /// PartialAdmission gate.
    pub partial_admission: bool,
    /// FlavorFungibility gate.
    pub flavor_fungibility: bool,
    /// UnadmittedWorkloadsObservability gate (granular reasons).
    pub observability: bool,
    /// SchedulingEquivalenceHashing gate.
    pub equivalence_hashing: bool,
    /// FairSharingPrioritizeNonBorrowing gate.
    pub fs_prioritize_non_borrowing: bool,
    /// FairSharingPreemptWithinNominal gate.
    pub fs_preempt_within_nominal: bool,
    /// PrioritySortingWithinCohort gate: priority orders heads across queues.
    pub priority_sorting_within_cohort: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            fair_sharing: None,
            partial_admission: true,
            flavor_fungibility: true,
            observability: true,
            equivalence_hashing: true,
            fs_prioritize_non_borrowing: true,
            fs_preempt_within_nominal: true,
            priority_sorting_within_cohort: true,
        }
    }
}

/// The resolved model.
#[derive(Debug, Clone, Default)]
pub struct Model {
    /// Resource names.
    pub resources: Vec<String>,
    /// Flavors.
    pub flavors: Vec<Flavor>,
    /// (flavor, resource) of each FR.
    pub frs: Vec<(FlavorId, ResId)>,
    /// FR lookup.
    pub fr_index: HashMap<(FlavorId, ResId), FrId>,
    /// Quota forest.
    pub tree: Tree,
    /// ClusterQueue of each CQ node.
    pub cq_of_node: Vec<Option<CqId>>,
    /// ClusterQueues.
    pub cqs: Vec<ClusterQueue>,
    /// Workloads.
    pub workloads: Vec<Workload>,
    /// Settings.
    pub settings: Settings,
    /// Namespaces and their labels.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

/// The order in which Kueue iterates requested resources: ascending FNV-1a-64 of the name, ties
/// by name (kueue.md §2.4).
pub fn resource_order_key(name: &str) -> (u64, &str) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h, name)
}

/// Per-pod requests of a pod spec: max(sum of containers, each init container) plus overhead.
pub fn pod_requests(spec: &PodSpec) -> BTreeMap<String, Amount> {
    fn container_requests(c: &crate::api::Container) -> BTreeMap<String, Amount> {
        let mut out = BTreeMap::new();
        for (r, q) in &c.resources.limits {
            out.insert(r.clone(), q.amount_for(r));
        }
        for (r, q) in &c.resources.requests {
            out.insert(r.clone(), q.amount_for(r));
        }
        out
    }
    let mut sum: BTreeMap<String, Amount> = BTreeMap::new();
    for c in spec.containers.iter().chain(
        spec.init_containers
            .iter()
            .filter(|c| c.restart_policy.as_deref() == Some("Always")),
    ) {
        for (r, v) in container_requests(c) {
            let e = sum.entry(r).or_insert(0);
            *e = add(*e, v);
        }
    }
    for c in spec
        .init_containers
        .iter()
        .filter(|c| c.restart_policy.as_deref() != Some("Always"))
    {
        for (r, v) in container_requests(c) {
            let e = sum.entry(r).or_insert(0);
            *e = (*e).max(v);
        }
    }
    for (r, q) in &spec.overhead {
        let e = sum.entry(r.clone()).or_insert(0);
        *e = add(*e, q.amount_for(r));
    }
    sum
}

struct Interner<'a> {
    model: &'a mut Model,
    res_index: HashMap<String, ResId>,
    flavor_index: HashMap<String, FlavorId>,
}

impl Interner<'_> {
    fn res(&mut self, name: &str) -> ResId {
        if let Some(&r) = self.res_index.get(name) {
            return r;
        }
        let id = self.model.resources.len();
        self.model.resources.push(name.to_string());
        self.res_index.insert(name.to_string(), id);
        id
    }

    fn flavor(&mut self, name: &str) -> FlavorId {
        if let Some(&f) = self.flavor_index.get(name) {
            return f;
        }
        let id = self.model.flavors.len();
        self.model.flavors.push(Flavor {
            name: name.to_string(),
            ..Flavor::default()
        });
        self.flavor_index.insert(name.to_string(), id);
        id
    }

    fn fr(&mut self, flavor: &str, res: &str) -> FrId {
        let key = (self.flavor(flavor), self.res(res));
        if let Some(&fr) = self.model.fr_index.get(&key) {
            return fr;
        }
        let id = self.model.frs.len();
        self.model.frs.push(key);
        self.model.fr_index.insert(key, id);
        id
    }
}

fn policy<'a>(value: Option<&'a str>, default: &'a str) -> &'a str {
    value.unwrap_or(default)
}

impl Model {
    /// Validates `setup` and resolves it into a model.
    ///
    /// ```
    /// use kubetrain_kueue::{load::Setup, model::Model};
    /// let setup = Setup::from_yaml("
    /// apiVersion: kueue.x-k8s.io/v1beta2
    /// kind: ClusterQueue
    /// metadata: {name: cq}
    /// spec:
    ///   resourceGroups:
    ///   - coveredResources: [cpu]
    ///     flavors: [{name: missing, resources: [{name: cpu, nominalQuota: 4}]}]
    /// ").unwrap();
    /// let model = Model::build(&setup).unwrap();
    /// assert_eq!(model.cqs[0].inactive.as_ref().unwrap().0, "FlavorNotFound");
    /// ```
    pub fn build(setup: &Setup) -> Result<Model, LoadError> {
        let errors = crate::validate::validate(setup);
        if !errors.is_empty() {
            return Err(LoadError::Invalid(errors));
        }
        let mut model = Model::default();
        let mut i = Interner {
            model: &mut model,
            res_index: HashMap::new(),
            flavor_index: HashMap::new(),
        };
        for f in &setup.flavors {
            let id = i.flavor(&f.metadata.name);
            let fl = &mut i.model.flavors[id];
            fl.node_labels = f.spec.node_labels.clone();
            fl.taints = f.spec.node_taints.clone();
            fl.tolerations = f.spec.tolerations.clone();
            fl.exists = true;
        }
        // Intern every FR first so the dense quota arrays have their final width.
        let all_groups = setup
            .cohorts
            .iter()
            .flat_map(|c| &c.spec.resource_groups)
            .chain(
                setup
                    .cluster_queues
                    .iter()
                    .flat_map(|c| &c.spec.resource_groups),
            );
        for rg in all_groups {
            for f in &rg.flavors {
                for r in &f.resources {
                    i.fr(&f.name, &r.name);
                }
            }
        }
        let mut tree = Tree {
            nfr: i.model.frs.len(),
            ..Tree::default()
        };
        let mut cohort_node: HashMap<String, NodeId> = HashMap::new();
        let mut cohort_parent: Vec<(NodeId, Option<String>)> = Vec::new();
        for c in &setup.cohorts {
            let n = tree.add_node(&c.metadata.name, false);
            cohort_node.insert(c.metadata.name.clone(), n);
            cohort_parent.push((
                n,
                c.spec.parent_name.clone().or_else(|| c.spec.parent.clone()),
            ));
            set_quotas(&mut tree, &mut i, n, &c.spec.resource_groups);
            set_weight(&mut tree, n, c.spec.fair_sharing.as_ref());
        }
        let mut get_cohort = |tree: &mut Tree, name: &str| -> NodeId {
            if let Some(&n) = cohort_node.get(name) {
                return n;
            }
            let n = tree.add_node(name, false);
            cohort_node.insert(name.to_string(), n);
            n
        };
        for (n, parent) in cohort_parent {
            if let Some(p) = parent {
                let p = get_cohort(&mut tree, &p);
                tree.parent[n] = Some(p);
            }
        }
        let mut cqs = Vec::new();
        for cq in &setup.cluster_queues {
            let s = &cq.spec;
            let n = tree.add_node(&cq.metadata.name, true);
            set_quotas(&mut tree, &mut i, n, &s.resource_groups);
            set_weight(&mut tree, n, s.fair_sharing.as_ref());
            if let Some(c) = s.cohort_name.as_deref().or(s.cohort.as_deref()) {
                let p = get_cohort(&mut tree, c);
                tree.parent[n] = Some(p);
            }
            let mut groups = Vec::new();
            let mut group_of = HashMap::new();
            let mut missing = None;
            for (gi, rg) in s.resource_groups.iter().enumerate() {
                let resources: Vec<ResId> = rg.covered_resources.iter().map(|r| i.res(r)).collect();
                for &r in &resources {
                    group_of.insert(r, gi);
                }
                let flavors: Vec<FlavorId> = rg.flavors.iter().map(|f| i.flavor(&f.name)).collect();
                for &f in &flavors {
                    if !i.model.flavors[f].exists && missing.is_none() {
                        missing = Some(i.model.flavors[f].name.clone());
                    }
                }
                groups.push(Group { resources, flavors });
            }
            let ff = s.flavor_fungibility.clone().unwrap_or_default();
            let pre = s.preemption.clone().unwrap_or_default();
            let stop = policy(s.stop_policy.as_deref(), "None");
            let inactive = if let Some(f) = missing {
                Some((
                    "FlavorNotFound".to_string(),
                    format!(
                        "Can't admit new workloads: references missing ResourceFlavor(s): {f}."
                    ),
                ))
            } else if stop != "None" {
                Some((
                    "Stopped".to_string(),
                    "Can't admit new workloads: is stopped.".to_string(),
                ))
            } else {
                None
            };
            cqs.push(ClusterQueue {
                name: cq.metadata.name.clone(),
                node: n,
                groups,
                group_of,
                strict_fifo: s.queueing_strategy.as_deref() == Some("StrictFIFO"),
                namespace_selector: s.namespace_selector.clone(),
                borrow_try_next: ff.when_can_borrow.as_deref() == Some("TryNextFlavor"),
                preempt_try_next: !matches!(
                    ff.when_can_preempt.as_deref(),
                    Some("MayStopSearch" | "Preempt")
                ),
                preference: match ff.preference.as_deref() {
                    Some("BorrowingOverPreemption") => Some(Preference::BorrowingOverPreemption),
                    Some("PreemptionOverBorrowing") => Some(Preference::PreemptionOverBorrowing),
                    _ => None,
                },
                within: match policy(pre.within_cluster_queue.as_deref(), "Never") {
                    "LowerPriority" => WithinPolicy::LowerPriority,
                    "LowerOrNewerEqualPriority" => WithinPolicy::LowerOrNewerEqualPriority,
                    _ => WithinPolicy::Never,
                },
                reclaim: match policy(pre.reclaim_within_cohort.as_deref(), "Never") {
                    "LowerPriority" => ReclaimPolicy::LowerPriority,
                    "Any" => ReclaimPolicy::Any,
                    _ => ReclaimPolicy::Never,
                },
                borrow_within: pre.borrow_within_cohort.as_ref().and_then(|b| {
                    (policy(b.policy.as_deref(), "Never") == "LowerPriority")
                        .then_some(b.max_priority_threshold)
                }),
                inactive,
                drain: stop == "HoldAndDrain",
            });
        }
        // Link children and break cohort cycles: every ClusterQueue of a cyclic tree is inactive.
        let cyclic = cyclic_nodes(&tree);
        for (n, &bad) in cyclic.iter().enumerate() {
            if bad {
                tree.parent[n] = None;
            }
        }
        for n in 0..tree.names.len() {
            if let Some(p) = tree.parent[n] {
                tree.children[p].push(n);
            }
        }
        tree.finish();
        let mut cq_of_node = vec![None; tree.names.len()];
        for (id, cq) in cqs.iter_mut().enumerate() {
            cq_of_node[cq.node] = Some(id);
            let in_cycle = std::iter::once(cq.node)
                .chain(tree.ancestors(cq.node))
                .any(|a| cyclic[a])
                || tree.parent[cq.node].is_some_and(|p| cyclic[p]);
            if in_cycle && cq.inactive.is_none() {
                cq.inactive = Some((
                    "CohortCycle".to_string(),
                    "Can't admit new workloads: the cohort tree has a cycle.".to_string(),
                ));
            }
        }
        // Namespaces: declared ones, plus every namespace a workload or queue uses (Kubernetes
        // labels each namespace with its name).
        let mut namespaces = BTreeMap::new();
        for ns in &setup.namespaces {
            let mut labels = ns.labels.clone();
            labels.insert("kubernetes.io/metadata.name".to_string(), ns.name.clone());
            namespaces.insert(ns.name.clone(), labels);
        }
        let local_queues: HashMap<(String, String), (&str, bool)> = setup
            .local_queues
            .iter()
            .map(|lq| {
                (
                    (
                        lq.metadata
                            .namespace
                            .clone()
                            .unwrap_or_else(|| "default".to_string()),
                        lq.metadata.name.clone(),
                    ),
                    (
                        lq.spec.cluster_queue.as_str(),
                        policy(lq.spec.stop_policy.as_deref(), "None") != "None",
                    ),
                )
            })
            .collect();
        let cq_by_name: HashMap<&str, CqId> = cqs
            .iter()
            .enumerate()
            .map(|(id, c)| (c.name.as_str(), id))
            .collect();
        let wpc: HashMap<&str, &WorkloadPriorityClass> = setup
            .priority_classes
            .iter()
            .map(|p| (p.metadata.name.as_str(), p))
            .collect();
        let mut workloads = Vec::new();
        // Creation timestamps count from the earliest one, so that a setup exported from a cluster
        // starts at virtual time 0.
        let epoch = setup
            .workloads
            .iter()
            .filter_map(|w| w.metadata.creation_timestamp.as_deref())
            .filter_map(parse_rfc3339_ms)
            .min()
            .unwrap_or(0);
        for (idx, w) in setup.workloads.iter().enumerate() {
            let namespace = w
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_string());
            namespaces.entry(namespace.clone()).or_insert_with(|| {
                BTreeMap::from([("kubernetes.io/metadata.name".to_string(), namespace.clone())])
            });
            let priority = w.spec.priority.unwrap_or_else(|| {
                let class = w
                    .spec
                    .priority_class_ref
                    .as_ref()
                    .filter(|r| {
                        r.kind.as_deref().unwrap_or("WorkloadPriorityClass")
                            == "WorkloadPriorityClass"
                    })
                    .map(|r| r.name.as_str())
                    .or_else(|| {
                        (w.spec.priority_class_source.as_deref()
                            == Some("kueue.x-k8s.io/workloadpriorityclass"))
                        .then_some(w.spec.priority_class_name.as_deref())
                        .flatten()
                    });
                class.and_then(|c| wpc.get(c)).map_or(0, |p| p.value)
            });
            let mut pod_sets = Vec::new();
            for ps in &w.spec.pod_sets {
                let mut per_pod: Vec<(ResId, Amount)> = pod_requests(&ps.template.spec)
                    .into_iter()
                    .map(|(r, v)| (i.res(&r), v))
                    .collect();
                per_pod.sort_by(|a, b| {
                    resource_order_key(&i.model.resources[a.0])
                        .cmp(&resource_order_key(&i.model.resources[b.0]))
                });
                pod_sets.push(PodSetReq {
                    name: ps.name.clone(),
                    count: ps.count,
                    min_count: ps.min_count,
                    per_pod,
                    node_selector: ps.template.spec.node_selector.clone(),
                    tolerations: ps.template.spec.tolerations.clone(),
                });
            }
            let target = match &w.spec.queue_name {
                None => QueueTarget::Blocked(
                    "Misconfigured".to_string(),
                    "LocalQueue  doesn't exist".to_string(),
                ),
                Some(q) => match local_queues.get(&(namespace.clone(), q.clone())) {
                    None => QueueTarget::Blocked(
                        "Misconfigured".to_string(),
                        format!("LocalQueue {q} doesn't exist"),
                    ),
                    Some((_, true)) => QueueTarget::Blocked(
                        "Suspended".to_string(),
                        format!("LocalQueue {q} is inactive"),
                    ),
                    Some((cq, false)) => match cq_by_name.get(cq) {
                        None => QueueTarget::Blocked(
                            "Misconfigured".to_string(),
                            format!("ClusterQueue {cq} doesn't exist"),
                        ),
                        Some(&id) => QueueTarget::Queue(id),
                    },
                },
            };
            let ann = &w.metadata.annotations;
            let ms = |k: &str| ann.get(k).and_then(|v| parse_duration_ms(v));
            workloads.push(Workload {
                key: w.key(),
                namespace,
                uid: w
                    .metadata
                    .uid
                    .clone()
                    .unwrap_or_else(|| format!("uid-{idx:06}")),
                priority,
                pod_sets,
                job_uid: w.metadata.labels.get(JOB_UID_LABEL).cloned(),
                arrival_ms: ms("kubetrain.dev/arrival")
                    .or_else(|| {
                        w.metadata
                            .creation_timestamp
                            .as_deref()
                            .and_then(parse_rfc3339_ms)
                            .map(|t| t - epoch)
                    })
                    .unwrap_or(0),
                runtime_ms: ms("kubetrain.dev/runtime"),
                class: ann
                    .get("kubetrain.dev/class")
                    .cloned()
                    .unwrap_or_else(|| w.spec.queue_name.clone().unwrap_or_default()),
                active: w.spec.active.unwrap_or(true),
                target,
                initial_admission: w.status.admission.clone(),
            });
        }
        for lq in &setup.local_queues {
            let ns = lq
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_string());
            namespaces.entry(ns.clone()).or_insert_with(|| {
                BTreeMap::from([("kubernetes.io/metadata.name".to_string(), ns.clone())])
            });
        }
        let mut settings = Settings::default();
        if let Some(cfg) = &setup.configuration {
            if let Some(fs) = &cfg.fair_sharing
                && fs.enable != Some(false)
            {
                let mut s = fs.preemption_strategies.clone();
                if s.is_empty() {
                    s = vec![
                        "LessThanOrEqualToFinalShare".to_string(),
                        "LessThanInitialShare".to_string(),
                    ];
                }
                settings.fair_sharing = Some(s);
            }
            let g =
                |name: &str, default: bool| cfg.feature_gates.get(name).copied().unwrap_or(default);
            settings.partial_admission = g("PartialAdmission", true);
            settings.flavor_fungibility = g("FlavorFungibility", true);
            settings.observability = g("UnadmittedWorkloadsObservability", true);
            settings.equivalence_hashing = g("SchedulingEquivalenceHashing", true);
            settings.fs_prioritize_non_borrowing = g("FairSharingPrioritizeNonBorrowing", true);
            settings.fs_preempt_within_nominal = g("FairSharingPreemptWithinNominal", true);
            settings.priority_sorting_within_cohort = g("PrioritySortingWithinCohort", true);
        }
        model.tree = tree;
        model.cq_of_node = cq_of_node;
        model.cqs = cqs;
        model.workloads = workloads;
        model.settings = settings;
        model.namespaces = namespaces;
        Ok(model)
    }

    /// The FR id of `(flavor, resource)`, if any queue or cohort has quota for it.
    pub fn fr(&self, flavor: FlavorId, res: ResId) -> Option<FrId> {
        self.fr_index.get(&(flavor, res)).copied()
    }

    /// The resource id of a name.
    pub fn res_id(&self, name: &str) -> Option<ResId> {
        self.resources.iter().position(|r| r == name)
    }

    /// The ClusterQueue id of a name.
    pub fn cq_id(&self, name: &str) -> Option<CqId> {
        self.cqs.iter().position(|c| c.name == name)
    }

    /// The flavor id of a name.
    pub fn flavor_id(&self, name: &str) -> Option<FlavorId> {
        self.flavors.iter().position(|f| f.name == name)
    }

    /// The path of a node from its root: `/root/…/parent/cq`.
    pub fn node_path(&self, n: NodeId) -> String {
        let mut parts: Vec<&str> = self
            .tree
            .ancestors(n)
            .map(|a| self.tree.names[a].as_str())
            .collect();
        parts.reverse();
        parts.push(&self.tree.names[n]);
        format!("/{}", parts.join("/"))
    }
}

/// The Workload label that holds the UID of the job that owns it.
pub const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";

/// Milliseconds since the Unix epoch of an RFC 3339 timestamp as Kubernetes writes it
/// (`2025-01-02T03:04:05Z`; fractional seconds and `+hh:mm` offsets accepted).
///
/// ```
/// use kubetrain_kueue::model::parse_rfc3339_ms;
/// assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01Z"), Some(1000));
/// assert_eq!(parse_rfc3339_ms("2024-03-01T01:00:00.5+01:00"), Some(1_709_251_200_500));
/// assert_eq!(parse_rfc3339_ms("yesterday"), None);
/// ```
pub fn parse_rfc3339_ms(v: &str) -> Option<i64> {
    let v = v.trim();
    let b = v.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let s = v.get(r)?;
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut frac_ms = 0;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let digits = v.get(start..i.min(start + 3))?;
        frac_ms = num(start..i.min(start + 3))? * 10_i64.pow(3 - digits.len() as u32);
    }
    let offset_min = match *b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        c @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let m = num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?;
            if c == b'-' { -m } else { m }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + mi - offset_min) * 60_000 + sec * 1000 + frac_ms)
}

/// Parses `1500`, `1500ms`, `30s`, `10m`, `2h` into milliseconds.
pub fn parse_duration_ms(v: &str) -> Option<i64> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: i64 = n.parse().ok()?;
    let mult = match unit {
        "" | "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

fn set_weight(tree: &mut Tree, n: NodeId, fs: Option<&crate::api::FairSharing>) {
    if let Some(w) = fs.and_then(|f| f.weight.as_ref()) {
        tree.weight_milli[n] = w.milli().unwrap_or(i64::MAX);
    }
}

fn set_quotas(tree: &mut Tree, i: &mut Interner<'_>, n: NodeId, groups: &[ResourceGroup]) {
    for rg in groups {
        for f in &rg.flavors {
            for r in &f.resources {
                let fr = i.fr(&f.name, &r.name);
                let ix = tree.ix(n, fr);
                let name = r.name.as_str();
                let amount = |q: &Quantity| q.amount_for(name);
                tree.nominal[ix] = r.nominal_quota.amount_for(name);
                tree.borrowing_limit[ix] = r.borrowing_limit.as_ref().map(amount);
                tree.lending_limit[ix] = r.lending_limit.as_ref().map(amount);
            }
        }
    }
}

/// Marks nodes that lie on a parent cycle.
fn cyclic_nodes(tree: &Tree) -> Vec<bool> {
    let n = tree.names.len();
    let mut state = vec![0u8; n]; // 0 unvisited, 1 on stack, 2 done
    let mut cyclic = vec![false; n];
    for start in 0..n {
        let mut path = Vec::new();
        let mut cur = Some(start);
        while let Some(c) = cur {
            match state[c] {
                2 => break,
                1 => {
                    let pos = path.iter().position(|&p| p == c).unwrap_or(0);
                    for &p in &path[pos..] {
                        cyclic[p] = true;
                    }
                    break;
                }
                _ => {
                    state[c] = 1;
                    path.push(c);
                    cur = tree.parent[c];
                }
            }
        }
        for p in path {
            state[p] = 2;
        }
    }
    // Everything below a cyclic node is part of the disabled tree too.
    for start in 0..n {
        if std::iter::successors(tree.parent[start], |&p| {
            if cyclic[p] { None } else { tree.parent[p] }
        })
        .any(|p| cyclic[p])
        {
            cyclic[start] = true;
        }
    }
    cyclic
}
