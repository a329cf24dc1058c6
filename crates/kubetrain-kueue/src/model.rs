//! The resolved model: interned flavors and resources, the quota forest, ClusterQueue policies,
//! queues and workloads with per-pod requests, built from a validated [`Setup`].

use std::collections::{BTreeMap, HashMap};

use crate::api::{
    AdmissionSpec, CheckState, JOB_UID_LABEL, LabelSelector, NodeSelectorRequirement, PodSpec,
    ResourceGroup, Taint, Toleration, WorkloadPriorityClass,
};
use crate::error::LoadError;
use crate::load::Setup;
use crate::quantity::{Count, Quantity, add};
use crate::quota::{FrId, NodeId, Tree};
use crate::tas::{Topology, TopologyRequest};

pub use crate::time::{parse_duration_ms, parse_rfc3339_ms};

use serde::Serialize;

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
    /// `topologyName`: a TAS flavor (index into [`Model::topologies`], `None` when the Topology
    /// object is missing: see [`Flavor::topology_name`]).
    pub topology: Option<usize>,
    /// The `topologyName` as written.
    pub topology_name: Option<String>,
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
    /// Admission checks: (check index into [`Model::checks`], the flavors it applies to; empty =
    /// every flavor).
    pub checks: Vec<(usize, Vec<FlavorId>)>,
    /// Every flavor of the queue is a TAS flavor: pod sets without a topology request are placed
    /// unconstrained (upstream's implied TAS).
    pub tas_only: bool,
}

/// How an admission check answers, for the simulator: the state and the delay after the quota
/// reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CheckAnswer {
    /// `Ready`, `Retry` or `Rejected`; `None` = the check never answers (stays `Pending`).
    pub state: Option<CheckState>,
    /// Delay after the reservation (ms).
    pub after_ms: i64,
}

/// An AdmissionCheck.
#[derive(Debug, Clone)]
pub struct AdmissionCheck {
    /// Name.
    pub name: String,
    /// `spec.controllerName`.
    pub controller: String,
    /// `Active`: only a check whose status says `Active=True` is active; any other makes its
    /// queues inactive.
    pub active: bool,
    /// Answers per reservation attempt (the last repeats), from the `kubetrain.dev/answers`
    /// annotation; empty = never answers.
    pub answers: Vec<CheckAnswer>,
}

/// When a workload's pods become ready in the simulator (`kubetrain.dev/pods-ready`,
/// `kubetrain.dev/pods-lost`, `kubetrain.dev/pods-recover`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PodsPlan {
    /// Delay after admission until every pod is ready; `None` = never.
    pub ready_after_ms: Option<i64>,
    /// `kubetrain.dev/pods-ready` was given: without it, a workload recorded as admitted with
    /// pods not ready stays so (nothing says when they become ready).
    pub ready_declared: bool,
    /// Time after becoming ready when a pod fails (`None` = never).
    pub lost_after_ms: Option<i64>,
    /// Time a failed pod needs to be replaced (`None` = never).
    pub recover_after_ms: Option<i64>,
}

/// `waitForPodsReady`, resolved (upstream v1beta2 defaults: on, 30 min, no blocking, backoff
/// 60 s doubling to 3600 s, requeue at the eviction time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodsReadySettings {
    /// Time for an admitted workload to become ready.
    pub timeout_ms: i64,
    /// Block admissions while an admitted workload is not ready.
    pub block_admission: bool,
    /// Time to recover after a pod failed (`None` = not checked).
    pub recovery_timeout_ms: Option<i64>,
    /// Backoff base.
    pub backoff_base_ms: i64,
    /// Backoff cap.
    pub backoff_max_ms: i64,
    /// Requeues before deactivation (`None` = unlimited).
    pub backoff_limit: Option<i32>,
    /// Requeued workloads queue at their eviction time (else their creation time).
    pub eviction_timestamp: bool,
}

impl Default for PodsReadySettings {
    fn default() -> Self {
        Self {
            timeout_ms: 30 * 60_000,
            block_admission: false,
            recovery_timeout_ms: Some(30 * 60_000),
            backoff_base_ms: 60_000,
            backoff_max_ms: 3_600_000,
            backoff_limit: None,
            eviction_timestamp: true,
        }
    }
}

/// A node of a TAS flavor's inventory.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Allocatable per resource.
    pub allocatable: Vec<(ResId, Count)>,
    /// Not schedulable (cordoned or not ready).
    pub unschedulable: bool,
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
    pub per_pod: Vec<(ResId, Count)>,
    /// Pod node selector.
    pub node_selector: BTreeMap<String, String>,
    /// Pod tolerations.
    pub tolerations: Vec<Toleration>,
    /// Required node affinity: terms (ORed) of requirements (ANDed); empty = no constraint.
    pub required_affinity: Vec<Vec<NodeSelectorRequirement>>,
    /// Topology request (`topologyRequest` or the pod template's TAS annotations).
    pub topology: Option<TopologyRequest>,
}

impl PodSetReq {
    /// Whether a flavor with node `labels` matches the pod set's `nodeSelector` and required node
    /// affinity, both restricted to the flavor's own label keys (Kueue's `flavorSelector`): a
    /// selector key the flavor does not label is ignored, and a term left without requirements
    /// matches every flavor (terms are ORed).
    pub fn matches_flavor_labels(&self, labels: &BTreeMap<String, String>) -> bool {
        let selector = self
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k).is_none_or(|fv| fv == v));
        if !selector {
            return false;
        }
        let mut any_term = false;
        for term in &self.required_affinity {
            let mut kept = term
                .iter()
                .filter(|r| labels.contains_key(&r.key))
                .peekable();
            if kept.peek().is_none() {
                return true;
            }
            any_term = true;
            if kept.all(|r| r.matches(labels)) {
                return true;
            }
        }
        !any_term
    }
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
    /// Arrival time in virtual milliseconds, when the workload reaches Kueue's queues: the
    /// `kubetrain.dev/arrival` annotation, else 0 — a Workload given without one exists now (one
    /// exported from a cluster was created before the snapshot).
    pub arrival_ms: i64,
    /// Queue-order timestamp in the same virtual milliseconds: `metadata.creationTimestamp`
    /// relative to the snapshot (the latest time the setup's workloads record, so 0 or earlier;
    /// Kueue orders by it, also for workloads that existed before Kueue started: an annotated
    /// arrival then only says when Kueue sees them), else the arrival.
    pub order_ms: i64,
    /// Run time after admission, for the simulator.
    pub runtime_ms: Option<i64>,
    /// Class label for simulator metrics.
    pub class: String,
    /// `spec.active`.
    pub active: bool,
    /// `spec.queueName` (from a job's `kueue.x-k8s.io/queue-name` label); `None` when absent.
    pub queue_name: Option<String>,
    /// Target queue.
    pub target: QueueTarget,
    /// Admission recorded in the input (`status.admission`).
    pub initial_admission: Option<AdmissionSpec>,
    /// The rest of the recorded status: conditions, check states, requeue state, their times.
    pub recorded: crate::recorded::RecordedStatus,
    /// Per admission check, answers that override the check's own (`kubetrain.dev/check.<name>`).
    pub check_answers: BTreeMap<String, Vec<CheckAnswer>>,
    /// When its pods become ready (simulator).
    pub pods: PodsPlan,
    /// The pod set whose pods are an elastic TrainJob's nodes (the `kubetrain.dev/elastic-replicated-job`
    /// annotation the renderer puts on the JobSet): explanations count its pods as nodes.
    pub elastic_pod_set: Option<String>,
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
    /// `waitForPodsReady` (`None` when turned off).
    pub pods_ready: Option<PodsReadySettings>,
    /// TopologyAwareScheduling gate.
    pub tas: bool,
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
            pods_ready: Some(PodsReadySettings::default()),
            tas: true,
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
    /// AdmissionChecks.
    pub checks: Vec<AdmissionCheck>,
    /// Topologies.
    pub topologies: Vec<Topology>,
    /// Nodes (the inventory of TAS flavors).
    pub nodes: Vec<NodeInfo>,
    /// LocalQueues: (namespace, name) → the ClusterQueue they feed (for explanations).
    pub local_queues: BTreeMap<(String, String), String>,
}

/// The order in which Kueue iterates requested resources: ascending FNV-1a-64 of the name, ties
/// by name (kueue.md §2.4).
pub(crate) fn resource_order_key(name: &str) -> (u64, &str) {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h, name)
}

/// Per-pod requests of a pod spec: max(sum of containers, each init container) plus overhead.
pub fn pod_requests(spec: &PodSpec) -> BTreeMap<String, Count> {
    fn container_requests(c: &crate::api::Container) -> BTreeMap<String, Count> {
        let mut out = BTreeMap::new();
        for (r, q) in &c.resources.limits {
            out.insert(r.clone(), q.count_for(r));
        }
        for (r, q) in &c.resources.requests {
            out.insert(r.clone(), q.count_for(r));
        }
        out
    }
    let mut sum: BTreeMap<String, Count> = BTreeMap::new();
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
        *e = add(*e, q.count_for(r));
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
        let mut model = Model {
            settings: settings_from(setup),
            ..Model::default()
        };
        let mut i = Interner {
            model: &mut model,
            res_index: HashMap::new(),
            flavor_index: HashMap::new(),
        };
        // The interning order fixes every id (and so every tie-break): flavors, TAS, checks,
        // quota keys, then the resources queues and workloads name.
        intern_flavors(&mut i, setup);
        intern_tas(&mut i, setup);
        intern_checks(i.model, setup);
        intern_quota_keys(&mut i, setup);
        let mut tree = Tree {
            nfr: i.model.frs.len(),
            ..Tree::default()
        };
        let mut cohorts = Cohorts::build(&mut tree, &mut i, setup);
        let mut cqs: Vec<ClusterQueue> = setup
            .cluster_queues
            .iter()
            .map(|cq| cluster_queue(&mut tree, &mut i, &mut cohorts, cq))
            .collect();
        let cq_of_node = link_tree(&mut tree, &mut cqs);
        let mut namespaces = declared_namespaces(setup);
        let workloads = WorkloadContext::new(setup, &cqs).workloads(&mut i, &mut namespaces);
        for lq in &setup.local_queues {
            let ns = lq
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_string());
            add_namespace(&mut namespaces, &ns);
        }
        model.tree = tree;
        model.cq_of_node = cq_of_node;
        model.cqs = cqs;
        model.workloads = workloads;
        model.namespaces = namespaces;
        model.local_queues = setup
            .local_queues
            .iter()
            .map(|lq| {
                let ns = lq.metadata.namespace.as_deref().unwrap_or("default");
                (
                    (ns.to_string(), lq.metadata.name.clone()),
                    lq.spec.cluster_queue.clone(),
                )
            })
            .collect();
        Ok(model)
    }

    /// Whether TAS takes part (the gate; read before the settings are final, it is on by default).
    fn settings_tas_default(&self) -> bool {
        self.settings.tas
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

/// Kueue's `Configuration` and feature gates, resolved.
/// Every ResourceFlavor, with its labels, taints, tolerations and topology.
fn intern_flavors(i: &mut Interner<'_>, setup: &Setup) {
    for f in &setup.flavors {
        let id = i.flavor(&f.metadata.name);
        let fl = &mut i.model.flavors[id];
        fl.node_labels = f.spec.node_labels.clone();
        fl.taints = f.spec.node_taints.clone();
        fl.tolerations = f.spec.tolerations.clone();
        fl.topology_name = f.spec.topology_name.clone();
        fl.exists = true;
    }
}

/// Every (flavor, resource) with quota anywhere, first, so the dense quota arrays have their
/// final width.
fn intern_quota_keys(i: &mut Interner<'_>, setup: &Setup) {
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
}

/// The cohorts' tree nodes by name: the declared Cohorts, and implicit ones created when a
/// queue or cohort names a parent that is not declared.
struct Cohorts(HashMap<String, NodeId>);

impl Cohorts {
    /// The declared Cohorts with their quotas, weights and parents.
    fn build(tree: &mut Tree, i: &mut Interner<'_>, setup: &Setup) -> Self {
        let mut cohorts = Cohorts(HashMap::new());
        let mut parents: Vec<(NodeId, Option<String>)> = Vec::new();
        for c in &setup.cohorts {
            let n = tree.add_node(&c.metadata.name, false);
            tree.declared[n] = true;
            cohorts.0.insert(c.metadata.name.clone(), n);
            parents.push((
                n,
                c.spec.parent_name.clone().or_else(|| c.spec.parent.clone()),
            ));
            set_quotas(tree, i, n, &c.spec.resource_groups);
            set_weight(tree, n, c.spec.fair_sharing.as_ref());
        }
        for (n, parent) in parents {
            if let Some(p) = parent {
                let p = cohorts.node(tree, &p);
                tree.parent[n] = Some(p);
            }
        }
        cohorts
    }

    /// The node of cohort `name`, created (implicit, without quota) when it was not declared.
    fn node(&mut self, tree: &mut Tree, name: &str) -> NodeId {
        if let Some(&n) = self.0.get(name) {
            return n;
        }
        let n = tree.add_node(name, false);
        self.0.insert(name.to_string(), n);
        n
    }
}

/// One ClusterQueue: its tree node (under its cohort), quotas, resource groups and policies.
fn cluster_queue(
    tree: &mut Tree,
    i: &mut Interner<'_>,
    cohorts: &mut Cohorts,
    cq: &crate::load::KueueObject<crate::api::ClusterQueueSpec>,
) -> ClusterQueue {
    let s = &cq.spec;
    let n = tree.add_node(&cq.metadata.name, true);
    set_quotas(tree, i, n, &s.resource_groups);
    set_weight(tree, n, s.fair_sharing.as_ref());
    if let Some(c) = s.cohort_name.as_deref().or(s.cohort.as_deref()) {
        let p = cohorts.node(tree, c);
        tree.parent[n] = Some(p);
    }
    let (groups, group_of, missing) = resource_groups(i, s);
    let ff = s.flavor_fungibility.clone().unwrap_or_default();
    let pre = s.preemption.clone().unwrap_or_default();
    let stop = policy(s.stop_policy.as_deref(), "None");
    let all_flavors: Vec<FlavorId> = groups.iter().flat_map(|g| g.flavors.clone()).collect();
    let checks = cq_checks(i.model, s);
    let inactive = if cq.metadata.deletion_timestamp.is_some() {
        // Kueue's cache keeps a deleted queue's status `terminating` whatever else holds.
        Some((
            "Terminating".to_string(),
            "Can't admit new workloads; clusterQueue is terminating".to_string(),
        ))
    } else {
        inactive_reason(i.model, stop != "None", &missing, s, &all_flavors)
    };
    let tas_only = !all_flavors.is_empty()
        && all_flavors
            .iter()
            .all(|&f| i.model.flavors[f].topology_name.is_some());
    ClusterQueue {
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
        checks,
        tas_only,
    }
}

/// A ClusterQueue's resource groups, the group of each resource, and the flavors it names that
/// do not exist.
fn resource_groups(
    i: &mut Interner<'_>,
    s: &crate::api::ClusterQueueSpec,
) -> (Vec<Group>, HashMap<ResId, usize>, Vec<String>) {
    let mut groups = Vec::new();
    let mut group_of = HashMap::new();
    let mut missing: Vec<String> = Vec::new();
    for (gi, rg) in s.resource_groups.iter().enumerate() {
        let resources: Vec<ResId> = rg.covered_resources.iter().map(|r| i.res(r)).collect();
        for &r in &resources {
            group_of.insert(r, gi);
        }
        let flavors: Vec<FlavorId> = rg.flavors.iter().map(|f| i.flavor(&f.name)).collect();
        for &f in &flavors {
            if !i.model.flavors[f].exists {
                missing.push(i.model.flavors[f].name.clone());
            }
        }
        groups.push(Group { resources, flavors });
    }
    (groups, group_of, missing)
}

/// Links children to parents, breaks cohort cycles (every ClusterQueue of a cyclic tree is
/// inactive) and computes the tree's aggregates; returns the ClusterQueue of each node.
fn link_tree(tree: &mut Tree, cqs: &mut [ClusterQueue]) -> Vec<Option<CqId>> {
    let cyclic = cyclic_nodes(tree);
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
    cq_of_node
}

/// The declared namespaces with their labels (Kubernetes labels each namespace with its name).
fn declared_namespaces(setup: &Setup) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut namespaces = BTreeMap::new();
    for ns in &setup.namespaces {
        let mut labels = ns.labels.clone();
        labels.insert("kubernetes.io/metadata.name".to_string(), ns.name.clone());
        namespaces.insert(ns.name.clone(), labels);
    }
    namespaces
}

/// Adds a namespace a workload or queue uses, if not declared, with its name label.
fn add_namespace(namespaces: &mut BTreeMap<String, BTreeMap<String, String>>, ns: &str) {
    namespaces.entry(ns.to_string()).or_insert_with(|| {
        BTreeMap::from([("kubernetes.io/metadata.name".to_string(), ns.to_string())])
    });
}

/// What resolving a Workload needs from the rest of the setup.
struct WorkloadContext<'a> {
    setup: &'a Setup,
    /// (namespace, LocalQueue) → (its ClusterQueue, whether it is stopped).
    local_queues: HashMap<(String, String), (&'a str, bool)>,
    cq_by_name: HashMap<&'a str, CqId>,
    priority_classes: HashMap<&'a str, &'a WorkloadPriorityClass>,
    /// The snapshot's moment: the latest time the setup's workloads record (creation, conditions,
    /// check states). Virtual time 0 is then, so recorded times are in the past.
    epoch: i64,
}

impl<'a> WorkloadContext<'a> {
    fn new(setup: &'a Setup, cqs: &'a [ClusterQueue]) -> Self {
        let local_queues = setup
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
        WorkloadContext {
            setup,
            local_queues,
            cq_by_name: cqs
                .iter()
                .enumerate()
                .map(|(id, c)| (c.name.as_str(), id))
                .collect(),
            priority_classes: setup
                .priority_classes
                .iter()
                .map(|p| (p.metadata.name.as_str(), p))
                .collect(),
            epoch: setup
                .workloads
                .iter()
                .flat_map(crate::recorded::recorded_times)
                .max()
                .unwrap_or(0),
        }
    }

    /// Every Workload of the setup, resolved; adds the namespaces they use.
    fn workloads(
        &self,
        i: &mut Interner<'_>,
        namespaces: &mut BTreeMap<String, BTreeMap<String, String>>,
    ) -> Vec<Workload> {
        let mut workloads = Vec::new();
        for (idx, w) in self.setup.workloads.iter().enumerate() {
            let namespace = w
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_string());
            add_namespace(namespaces, &namespace);
            workloads.push(self.workload(i, idx, w, namespace));
        }
        workloads
    }

    /// One Workload: priority, pod sets, queue, times and the simulator's annotations.
    fn workload(
        &self,
        i: &mut Interner<'_>,
        idx: usize,
        w: &crate::load::WorkloadObject,
        namespace: String,
    ) -> Workload {
        let priority = self.priority(w);
        let pod_sets = w
            .spec
            .pod_sets
            .iter()
            .map(|ps| pod_set_req(i, ps))
            .collect();
        let target = self.target(w, &namespace);
        let ann = &w.metadata.annotations;
        let ms = |k: &str| ann.get(k).and_then(|v| parse_duration_ms(v));
        let created = w
            .metadata
            .creation_timestamp
            .as_deref()
            .and_then(parse_rfc3339_ms)
            .map(|t| t - self.epoch);
        let arrival = ms("kubetrain.dev/arrival").unwrap_or(0);
        Workload {
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
            arrival_ms: arrival,
            order_ms: created.unwrap_or(arrival),
            runtime_ms: ms("kubetrain.dev/runtime"),
            class: ann
                .get("kubetrain.dev/class")
                .cloned()
                .unwrap_or_else(|| w.spec.queue_name.clone().unwrap_or_default()),
            active: w.spec.active.unwrap_or(true),
            queue_name: w.spec.queue_name.clone(),
            target,
            initial_admission: w.status.admission.clone(),
            recorded: crate::recorded::RecordedStatus::resolve(&w.status, self.epoch),
            check_answers: ann
                .iter()
                .filter_map(|(k, v)| {
                    let check = k.strip_prefix(CHECK_ANSWER_PREFIX)?;
                    Some((check.to_string(), parse_answers(v)))
                })
                .collect(),
            pods: PodsPlan {
                ready_after_ms: ann
                    .get(PODS_READY_ANNOTATION)
                    .map_or(Some(0), |v| parse_duration_ms(v)),
                ready_declared: ann.contains_key(PODS_READY_ANNOTATION),
                lost_after_ms: ann
                    .get("kubetrain.dev/pods-lost")
                    .and_then(|v| parse_duration_ms(v)),
                recover_after_ms: ann
                    .get("kubetrain.dev/pods-recover")
                    .map_or(Some(0), |v| parse_duration_ms(v)),
            },
            elastic_pod_set: ann.get(ELASTIC_POD_SET_ANNOTATION).cloned(),
        }
    }

    /// `spec.priority`, else the value of its WorkloadPriorityClass, else 0.
    fn priority(&self, w: &crate::load::WorkloadObject) -> i32 {
        w.spec.priority.unwrap_or_else(|| {
            let class = w
                .spec
                .priority_class_ref
                .as_ref()
                .filter(|r| {
                    r.kind.as_deref().unwrap_or("WorkloadPriorityClass") == "WorkloadPriorityClass"
                })
                .map(|r| r.name.as_str())
                .or_else(|| {
                    (w.spec.priority_class_source.as_deref()
                        == Some("kueue.x-k8s.io/workloadpriorityclass"))
                    .then_some(w.spec.priority_class_name.as_deref())
                    .flatten()
                });
            class
                .and_then(|c| self.priority_classes.get(c))
                .map_or(0, |p| p.value)
        })
    }

    /// The ClusterQueue the workload queues in, or why it cannot queue (Kueue's condition).
    fn target(&self, w: &crate::load::WorkloadObject, namespace: &str) -> QueueTarget {
        let blocked = |reason: &str, message: String| QueueTarget::Blocked(reason.into(), message);
        let Some(q) = &w.spec.queue_name else {
            return blocked("Misconfigured", "LocalQueue  doesn't exist".to_string());
        };
        match self.local_queues.get(&(namespace.to_string(), q.clone())) {
            None => blocked("Misconfigured", format!("LocalQueue {q} doesn't exist")),
            Some((_, true)) => blocked("Suspended", format!("LocalQueue {q} is inactive")),
            Some((cq, false)) => match self.cq_by_name.get(cq) {
                None => blocked("Misconfigured", format!("ClusterQueue {cq} doesn't exist")),
                Some(&id) => QueueTarget::Queue(id),
            },
        }
    }
}

/// A pod set's per-pod requests (in resource order) and placement constraints.
fn pod_set_req(i: &mut Interner<'_>, ps: &crate::api::PodSet) -> PodSetReq {
    let mut per_pod: Vec<(ResId, Count)> = pod_requests(&ps.template.spec)
        .into_iter()
        .map(|(r, v)| (i.res(&r), v))
        .collect();
    per_pod.sort_by(|a, b| {
        resource_order_key(&i.model.resources[a.0])
            .cmp(&resource_order_key(&i.model.resources[b.0]))
    });
    PodSetReq {
        name: ps.name.clone(),
        count: ps.count,
        min_count: ps.min_count,
        per_pod,
        node_selector: ps.template.spec.node_selector.clone(),
        tolerations: ps.template.spec.tolerations.clone(),
        required_affinity: required_affinity(&ps.template.spec),
        topology: topology_request(ps),
    }
}

fn settings_from(setup: &Setup) -> Settings {
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
        let g = |name: &str, default: bool| cfg.feature_gates.get(name).copied().unwrap_or(default);
        settings.partial_admission = g("PartialAdmission", true);
        settings.flavor_fungibility = g("FlavorFungibility", true);
        settings.observability = g("UnadmittedWorkloadsObservability", true);
        settings.equivalence_hashing = g("SchedulingEquivalenceHashing", true);
        settings.fs_prioritize_non_borrowing = g("FairSharingPrioritizeNonBorrowing", true);
        settings.fs_preempt_within_nominal = g("FairSharingPreemptWithinNominal", true);
        settings.priority_sorting_within_cohort = g("PrioritySortingWithinCohort", true);
        settings.tas = g("TopologyAwareScheduling", true);
        settings.pods_ready = pods_ready_settings(cfg.wait_for_pods_ready.as_ref());
    }
    settings
}

/// The annotation prefix of a Workload's per-check answers: `kubetrain.dev/check.<check>`.
pub const CHECK_ANSWER_PREFIX: &str = "kubetrain.dev/check.";
/// Workload annotation naming the pod set of an elastic TrainJob's nodes (the value of the JobSet's
/// `kubetrain.dev/elastic-replicated-job`, which the TrainJob integration copies; explanations count that pod
/// set's pods as nodes).
pub const ELASTIC_POD_SET_ANNOTATION: &str = "kubetrain.dev/elastic-replicated-job";
/// The AdmissionCheck annotation with its answers, e.g. `Retry@30s,Ready@2m`.
pub const CHECK_ANSWERS_ANNOTATION: &str = "kubetrain.dev/answers";
/// The Workload annotation with the delay until its pods are ready (`90s`, `never`).
pub const PODS_READY_ANNOTATION: &str = "kubetrain.dev/pods-ready";

/// Parses answers such as `Ready@30s`, `Retry@10s,Ready@1m` or `Pending` (never answers); an
/// entry that does not parse reads as `Pending`.
///
/// ```
/// use kubetrain_kueue::api::CheckState;
/// use kubetrain_kueue::model::parse_answers;
/// let a = parse_answers("Retry@10s, Ready@1m");
/// assert_eq!((a[0].state, a[0].after_ms), (Some(CheckState::Retry), 10_000));
/// assert_eq!((a[1].state, a[1].after_ms), (Some(CheckState::Ready), 60_000));
/// assert_eq!(parse_answers("Pending")[0].state, None);
/// ```
pub fn parse_answers(v: &str) -> Vec<CheckAnswer> {
    v.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (state, after) = e.split_once('@').unwrap_or((e, "0"));
            let state = match state.trim() {
                "Ready" => Some(CheckState::Ready),
                "Retry" => Some(CheckState::Retry),
                "Rejected" => Some(CheckState::Rejected),
                _ => None,
            };
            match parse_duration_ms(after) {
                Some(after_ms) => CheckAnswer { state, after_ms },
                None => CheckAnswer {
                    state: None,
                    after_ms: 0,
                },
            }
        })
        .collect()
}

/// Topologies, TAS flavors and the node inventory.
fn intern_tas(i: &mut Interner<'_>, setup: &Setup) {
    i.model.topologies = setup
        .topologies
        .iter()
        .map(|t| Topology {
            name: t.metadata.name.clone(),
            levels: t.spec.levels.iter().map(|l| l.node_label.clone()).collect(),
        })
        .collect();
    for f in 0..i.model.flavors.len() {
        let name = i.model.flavors[f].topology_name.clone();
        i.model.flavors[f].topology =
            name.and_then(|n| i.model.topologies.iter().position(|t| t.name == n));
    }
    let pools: Vec<crate::tas::Node> = setup
        .scenario
        .iter()
        .flat_map(|s| &s.node_pools)
        .flat_map(|p| p.nodes())
        .collect();
    let nodes: Vec<NodeInfo> = setup
        .nodes
        .iter()
        .chain(&pools)
        .map(|n| NodeInfo {
            name: n.name.clone(),
            labels: n.labels.clone(),
            taints: n.taints.clone(),
            allocatable: n
                .allocatable
                .iter()
                .map(|(r, q)| (i.res(r), q.count_for(r)))
                .collect(),
            unschedulable: n.unschedulable,
        })
        .collect();
    i.model.nodes = nodes;
}

/// AdmissionChecks: active unless their status says `Active=False` (a check without status is
/// taken as answered by a running controller).
fn intern_checks(model: &mut Model, setup: &Setup) {
    model.checks = setup
        .admission_checks
        .iter()
        .map(|c| AdmissionCheck {
            name: c.metadata.name.clone(),
            controller: c.spec.controller_name.clone(),
            // Upstream's cache (`pkg/cache/scheduler/cache.go`) takes only `Active=True` as active:
            // a check whose controller has not said so yet blocks its queues.
            active: c
                .status
                .conditions
                .iter()
                .any(|k| k.type_ == "Active" && k.status == "True"),
            answers: c
                .metadata
                .annotations
                .get(CHECK_ANSWERS_ANNOTATION)
                .map(|v| parse_answers(v))
                .unwrap_or_default(),
        })
        .collect();
}

/// The checks a ClusterQueue names (v1beta1 `admissionChecks` and `admissionChecksStrategy`),
/// with the flavors each applies to; a missing check gets an index past the model's checks.
fn cq_checks(model: &Model, s: &crate::api::ClusterQueueSpec) -> Vec<(usize, Vec<FlavorId>)> {
    let mut out: Vec<(usize, Vec<FlavorId>)> = Vec::new();
    let idx = |name: &str| {
        model
            .checks
            .iter()
            .position(|c| c.name == name)
            .unwrap_or(usize::MAX)
    };
    for name in s.admission_checks.iter().flatten() {
        out.push((idx(name), Vec::new()));
    }
    for rule in s
        .admission_checks_strategy
        .iter()
        .flat_map(|a| &a.admission_checks)
    {
        let flavors = rule
            .on_flavors
            .iter()
            .filter_map(|f| model.flavors.iter().position(|x| x.name == *f))
            .collect();
        out.push((idx(&rule.name), flavors));
    }
    out
}

/// Why a ClusterQueue is inactive, as upstream's `inactiveReason` words it: the first reason, and
/// every message joined (`Can't admit new workloads: is stopped, references missing
/// ResourceFlavor(s): a,b.`).
fn inactive_reason(
    model: &Model,
    stopped: bool,
    missing_flavors: &[String],
    s: &crate::api::ClusterQueueSpec,
    flavors: &[FlavorId],
) -> Option<(String, String)> {
    let mut reasons: Vec<(&str, String)> = Vec::new();
    if stopped {
        reasons.push(("Stopped", "is stopped".to_string()));
    }
    if !missing_flavors.is_empty() {
        reasons.push((
            "FlavorNotFound",
            format!(
                "references missing ResourceFlavor(s): {}",
                missing_flavors.join(",")
            ),
        ));
    }
    let mut names: Vec<&str> = s
        .admission_checks
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    names.extend(
        s.admission_checks_strategy
            .iter()
            .flat_map(|a| &a.admission_checks)
            .map(|r| r.name.as_str()),
    );
    names.sort_unstable();
    names.dedup();
    let find = |n: &str| model.checks.iter().find(|c| c.name == n);
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| find(n).is_none())
        .collect();
    let inactive: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| find(n).is_some_and(|c| !c.active))
        .collect();
    if !missing.is_empty() {
        reasons.push((
            "AdmissionCheckNotFound",
            format!(
                "references missing AdmissionCheck(s): {}",
                missing.join(",")
            ),
        ));
    }
    if !inactive.is_empty() {
        reasons.push((
            "AdmissionCheckInactive",
            format!(
                "references inactive AdmissionCheck(s): {}",
                inactive.join(",")
            ),
        ));
    }
    if model.settings_tas_default() {
        for &f in flavors {
            let fl = &model.flavors[f];
            if let (Some(t), None) = (&fl.topology_name, fl.topology) {
                reasons.push((
                    "TopologyNotFound",
                    format!("there is no Topology {t:?} for TAS flavor {:?}", fl.name),
                ));
            }
        }
    }
    let (first, _) = reasons.first()?;
    let messages: Vec<&str> = reasons.iter().map(|(_, m)| m.as_str()).collect();
    Some((
        (*first).to_string(),
        format!("Can't admit new workloads: {}.", messages.join(", ")),
    ))
}

/// A pod set's topology request: `topologyRequest` of a Workload, else the pod template's
/// `kueue.x-k8s.io/podset-*-topology` annotations (what the job integrations translate).
fn topology_request(ps: &crate::api::PodSet) -> Option<TopologyRequest> {
    use crate::tas::{PREFERRED_ANNOTATION, REQUIRED_ANNOTATION, UNCONSTRAINED_ANNOTATION};
    if let Some(tr) = &ps.topology_request {
        if let Some(l) = &tr.required {
            return Some(TopologyRequest::Required(l.clone()));
        }
        if let Some(l) = &tr.preferred {
            return Some(TopologyRequest::Preferred(l.clone()));
        }
        if tr.unconstrained == Some(true) {
            return Some(TopologyRequest::Unconstrained);
        }
    }
    let ann = &ps.template.metadata.annotations;
    if let Some(l) = ann.get(REQUIRED_ANNOTATION) {
        return Some(TopologyRequest::Required(l.clone()));
    }
    if let Some(l) = ann.get(PREFERRED_ANNOTATION) {
        return Some(TopologyRequest::Preferred(l.clone()));
    }
    ann.get(UNCONSTRAINED_ANNOTATION)
        .filter(|v| v.as_str() == "true")
        .map(|_| TopologyRequest::Unconstrained)
}

/// `waitForPodsReady` with upstream's defaults filled in; `enable: false` turns it off.
fn pods_ready_settings(w: Option<&crate::api::WaitForPodsReady>) -> Option<PodsReadySettings> {
    let d = PodsReadySettings::default();
    let Some(w) = w else {
        return Some(d);
    };
    if w.enable == Some(false) {
        return None;
    }
    let dur = |v: &Option<String>| v.as_deref().and_then(parse_go_duration_ms);
    let timeout_ms = dur(&w.timeout).unwrap_or(d.timeout_ms);
    let rs = w.requeuing_strategy.clone().unwrap_or_default();
    Some(PodsReadySettings {
        timeout_ms,
        block_admission: w.block_admission.unwrap_or(false),
        recovery_timeout_ms: match dur(&w.recovery_timeout) {
            Some(0) => None,
            Some(v) => Some(v),
            None => Some(timeout_ms),
        },
        backoff_base_ms: rs.backoff_base_seconds.unwrap_or(60).saturating_mul(1000),
        backoff_max_ms: rs.backoff_max_seconds.unwrap_or(3600).saturating_mul(1000),
        backoff_limit: rs.backoff_limit_count,
        eviction_timestamp: rs.timestamp.as_deref() != Some("Creation"),
    })
}

/// Parses a Go duration (`1h30m`, `90s`, `500ms`, `0s`) into milliseconds.
///
/// ```
/// use kubetrain_kueue::model::parse_go_duration_ms;
/// assert_eq!(parse_go_duration_ms("1h30m"), Some(5_400_000));
/// assert_eq!(parse_go_duration_ms("1.5s"), Some(1_500));
/// assert_eq!(parse_go_duration_ms("soon"), None);
/// ```
pub fn parse_go_duration_ms(v: &str) -> Option<i64> {
    let mut rest = v.trim();
    if rest == "0" {
        return Some(0);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let n: f64 = rest[..end].parse().ok()?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let mult = match &rest[..unit_end] {
            "ms" => 1.0,
            "s" => 1000.0,
            "m" => 60_000.0,
            "h" => 3_600_000.0,
            "us" | "µs" => 0.001,
            "ns" => 0.000_001,
            _ => return None,
        };
        total += n * mult;
        rest = &rest[unit_end..];
    }
    Some(total.round() as i64)
}

/// The `matchExpressions` of each required node affinity term of a pod spec.
fn required_affinity(spec: &PodSpec) -> Vec<Vec<NodeSelectorRequirement>> {
    spec.affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|s| {
            s.node_selector_terms
                .iter()
                .map(|t| t.match_expressions.clone())
                .collect()
        })
        .unwrap_or_default()
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
                let amount = |q: &Quantity| q.count_for(name);
                tree.nominal[ix] = r.nominal_quota.count_for(name);
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
