//! The Kueue objects the model reads (`kueue.x-k8s.io/v1beta2`, v1beta1 accepted), with the fields
//! that matter for admission (kueue.md §1). Kueue's own specs reject unknown fields; Kubernetes
//! pod templates and metadata are read leniently since they carry many fields Kueue ignores.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::quantity::Quantity;

/// Object metadata: the parts the model uses.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Object name.
    #[serde(default)]
    pub name: String,
    /// Name prefix used when `name` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate_name: Option<String>,
    /// Namespace of namespaced objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations (the simulator reads `kubetrain.dev/*` ones).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// UID, when the object was exported from a cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// `metadata.creationTimestamp` (RFC 3339), when the object was exported from a cluster: a
    /// Workload's queue-order timestamp (never its arrival: it exists already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    /// `metadata.deletionTimestamp` of an exported object being deleted: a ClusterQueue that has one is
    /// terminating and admits nothing new (Kueue's `TerminateClusterQueue`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
}

/// A node taint, as on a ResourceFlavor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value.
    #[serde(default)]
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
    /// Ignored; accepted because exported taints carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_added: Option<String>,
}

/// A pod toleration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Toleration {
    /// Key to match; empty with `Exists` matches every key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Value for `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Effect to match; empty matches all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    /// Ignored by admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    /// Whether this toleration tolerates `taint` (Kubernetes `ToleratesTaint`).
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if let Some(effect) = self.effect.as_deref().filter(|e| !e.is_empty())
            && effect != taint.effect
        {
            return false;
        }
        let key = self.key.as_deref().unwrap_or("");
        if !key.is_empty() && key != taint.key {
            return false;
        }
        match self.operator.as_deref().unwrap_or("Equal") {
            "Exists" => true,
            "Equal" | "" => !key.is_empty() && self.value.as_deref().unwrap_or("") == taint.value,
            _ => false,
        }
    }
}

/// `ResourceFlavor.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceFlavorSpec {
    /// Labels of the nodes of this flavor.
    #[serde(default)]
    pub node_labels: BTreeMap<String, String>,
    /// Taints of the nodes of this flavor.
    #[serde(default)]
    pub node_taints: Vec<Taint>,
    /// Tolerations added to admitted pods.
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// Topology for topology-aware scheduling (not modelled beyond validation).
    #[serde(default)]
    pub topology_name: Option<String>,
}

/// One resource's quota in a flavor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceQuota {
    /// Resource name.
    pub name: String,
    /// Quota owned by this queue or cohort.
    pub nominal_quota: Quantity,
    /// How much more it may borrow (`None` = unlimited).
    #[serde(default)]
    pub borrowing_limit: Option<Quantity>,
    /// How much of the nominal quota it may lend (`None` = all).
    #[serde(default)]
    pub lending_limit: Option<Quantity>,
}

/// The quotas of one flavor in a resource group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlavorQuotas {
    /// ResourceFlavor name.
    pub name: String,
    /// Quota per covered resource.
    pub resources: Vec<ResourceQuota>,
}

/// A resource group: resources that share one flavor choice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceGroup {
    /// Resources this group covers.
    pub covered_resources: Vec<String>,
    /// Flavors in order of preference.
    pub flavors: Vec<FlavorQuotas>,
}

/// `flavorFungibility`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlavorFungibility {
    /// `MayStopSearch` (default; `Borrow` is an alias) or `TryNextFlavor`.
    #[serde(default)]
    pub when_can_borrow: Option<String>,
    /// `MayStopSearch` (`Preempt` is an alias) or `TryNextFlavor` (default).
    #[serde(default)]
    pub when_can_preempt: Option<String>,
    /// `BorrowingOverPreemption` or `PreemptionOverBorrowing`.
    #[serde(default)]
    pub preference: Option<String>,
}

/// `preemption.borrowWithinCohort`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BorrowWithinCohort {
    /// `Never` (default) or `LowerPriority`.
    #[serde(default)]
    pub policy: Option<String>,
    /// Only workloads at or below this priority may be preempted while borrowing.
    #[serde(default)]
    pub max_priority_threshold: Option<i32>,
}

/// `preemption`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Preemption {
    /// `Never` (default), `LowerPriority` or `Any`.
    #[serde(default)]
    pub reclaim_within_cohort: Option<String>,
    /// `Never` (default), `LowerPriority` or `LowerOrNewerEqualPriority`.
    #[serde(default)]
    pub within_cluster_queue: Option<String>,
    /// Preemption while borrowing.
    #[serde(default)]
    pub borrow_within_cohort: Option<BorrowWithinCohort>,
}

/// `fairSharing` of a queue or cohort.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FairSharing {
    /// Share weight (default 1).
    #[serde(default)]
    pub weight: Option<Quantity>,
}

/// A label selector.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    /// Exact label matches.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(default)]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One set-based selector requirement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelectorRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` and `NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector (an empty selector matches everything).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// `ClusterQueue.spec` (v1beta2, plus the v1beta1 spellings).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterQueueSpec {
    /// Quotas.
    #[serde(default)]
    pub resource_groups: Vec<ResourceGroup>,
    /// Parent cohort (v1beta2).
    #[serde(default)]
    pub cohort_name: Option<String>,
    /// Parent cohort (v1beta1 spelling).
    #[serde(default)]
    pub cohort: Option<String>,
    /// `BestEffortFIFO` (default) or `StrictFIFO`.
    #[serde(default)]
    pub queueing_strategy: Option<String>,
    /// Which namespaces may use it (`None` = none, `{}` = all).
    #[serde(default)]
    pub namespace_selector: Option<LabelSelector>,
    /// Flavor search policy.
    #[serde(default)]
    pub flavor_fungibility: Option<FlavorFungibility>,
    /// Preemption policy.
    #[serde(default)]
    pub preemption: Option<Preemption>,
    /// Fair-sharing weight.
    #[serde(default)]
    pub fair_sharing: Option<FairSharing>,
    /// `None` (default), `Hold` or `HoldAndDrain`.
    #[serde(default)]
    pub stop_policy: Option<String>,
    /// Admission checks, optionally per flavor.
    #[serde(default)]
    pub admission_checks_strategy: Option<AdmissionChecksStrategy>,
    /// v1beta1 admission checks (every flavor).
    #[serde(default)]
    pub admission_checks: Option<Vec<String>>,
    /// Admission fair sharing scope (read, not modelled).
    #[serde(default)]
    pub admission_scope: Option<serde_json::Value>,
    /// Concurrent admission of workload variants (v0.19 API, gated off by default; read, not
    /// modelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_admission_policy: Option<serde_json::Value>,
}

/// `admissionChecksStrategy` of a ClusterQueue.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdmissionChecksStrategy {
    /// The checks and the flavors each applies to.
    #[serde(default)]
    pub admission_checks: Vec<AdmissionCheckStrategyRule>,
}

/// One check of an `admissionChecksStrategy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdmissionCheckStrategyRule {
    /// AdmissionCheck name.
    pub name: String,
    /// Flavors it applies to (empty = every flavor of the queue).
    #[serde(default)]
    pub on_flavors: Vec<String>,
}

/// `AdmissionCheck.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdmissionCheckSpec {
    /// The controller that answers the check, e.g. `kueue.x-k8s.io/provisioning-request`.
    pub controller_name: String,
    /// Deprecated retry delay (read, not modelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_delay_minutes: Option<i64>,
    /// Controller parameters (read, not modelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<serde_json::Value>,
}

/// A status condition as the API stores it (the parts the model reads).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Reason.
    #[serde(default)]
    pub reason: String,
    /// Message.
    #[serde(default)]
    pub message: String,
    /// When the status last changed (RFC 3339): times in a snapshot exported from a cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// `AdmissionCheck.status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckStatus {
    /// Conditions; `Active` says whether the controller accepts the check.
    #[serde(default)]
    pub conditions: Vec<ApiCondition>,
}

/// `Topology.spec`: the node labels of the topology levels, from the widest (e.g. block) to the
/// narrowest (usually `kubernetes.io/hostname`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TopologySpec {
    /// Levels, widest first.
    #[serde(default)]
    pub levels: Vec<TopologyLevel>,
}

/// One topology level.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TopologyLevel {
    /// The node label that names a node's domain at this level.
    pub node_label: String,
}

/// `Cohort.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CohortSpec {
    /// Parent cohort (v1beta2).
    #[serde(default)]
    pub parent_name: Option<String>,
    /// Parent cohort (v1beta1 spelling).
    #[serde(default)]
    pub parent: Option<String>,
    /// Extra shared quota for the subtree.
    #[serde(default)]
    pub resource_groups: Vec<ResourceGroup>,
    /// Fair-sharing weight.
    #[serde(default)]
    pub fair_sharing: Option<FairSharing>,
}

/// `LocalQueue.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalQueueSpec {
    /// The ClusterQueue it feeds.
    #[serde(default)]
    pub cluster_queue: String,
    /// `None`, `Hold` or `HoldAndDrain`.
    #[serde(default)]
    pub stop_policy: Option<String>,
    /// Admission fair sharing (read, not modelled).
    #[serde(default)]
    pub fair_sharing: Option<FairSharing>,
}

/// Container resources.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    /// Requests.
    #[serde(default)]
    pub requests: BTreeMap<String, Quantity>,
    /// Limits (a request defaults to its limit).
    #[serde(default)]
    pub limits: BTreeMap<String, Quantity>,
}

/// A container: only its resources matter here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    /// Container name.
    #[serde(default)]
    pub name: String,
    /// Resources.
    #[serde(default)]
    pub resources: ResourceRequirements,
    /// Restart policy (`Always` marks a sidecar init container).
    #[serde(default)]
    pub restart_policy: Option<String>,
}

/// The pod spec fields admission reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    /// Containers.
    #[serde(default)]
    pub containers: Vec<Container>,
    /// Init containers.
    #[serde(default)]
    pub init_containers: Vec<Container>,
    /// Pod overhead.
    #[serde(default)]
    pub overhead: BTreeMap<String, Quantity>,
    /// Node selector.
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations.
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    /// Pod priority class name.
    #[serde(default)]
    pub priority_class_name: Option<String>,
    /// Affinity: only required node affinity takes part in flavor matching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
}

/// `affinity` of a pod spec; pod (anti-)affinity is read leniently and ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Affinity {
    /// Node affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,
}

/// `affinity.nodeAffinity`; preferred terms are read leniently and ignored (admission does not
/// use them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinity {
    /// `requiredDuringSchedulingIgnoredDuringExecution`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_during_scheduling_ignored_during_execution: Option<NodeSelector>,
}

/// A node selector: its terms are ORed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelector {
    /// Terms (ORed).
    #[serde(default)]
    pub node_selector_terms: Vec<NodeSelectorTerm>,
}

/// One node selector term: its expressions are ANDed; `matchFields` are read and ignored, as
/// Kueue's flavor matching ignores them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    /// Label requirements (ANDed).
    #[serde(default)]
    pub match_expressions: Vec<NodeSelectorRequirement>,
    /// Field requirements (ignored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_fields: Vec<NodeSelectorRequirement>,
}

/// One node selector requirement.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt` or `Lt`.
    pub operator: String,
    /// Values (one integer for `Gt`/`Lt`).
    #[serde(default)]
    pub values: Vec<String>,
}

impl NodeSelectorRequirement {
    /// Whether node `labels` satisfy the requirement (Kubernetes `NodeSelectorRequirementsAsSelector`;
    /// an unknown operator or a non-integer `Gt`/`Lt` matches nothing).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let int = |v: &str| v.parse::<i64>().ok();
        match self.operator.as_str() {
            "In" => value.is_some_and(|v| self.values.contains(v)),
            "NotIn" => value.is_none_or(|v| !self.values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            op @ ("Gt" | "Lt") => match (self.values.as_slice(), value.and_then(|v| int(v))) {
                ([bound], Some(v)) => {
                    int(bound).is_some_and(|b| if op == "Gt" { v > b } else { v < b })
                }
                _ => false,
            },
            _ => false,
        }
    }
}

/// A pod template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplateSpec {
    /// Template metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Pod spec.
    #[serde(default)]
    pub spec: PodSpec,
}

/// One pod set of a Workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSet {
    /// Pod set name (default `main`).
    #[serde(default = "default_pod_set_name")]
    pub name: String,
    /// Pod template.
    #[serde(default)]
    pub template: PodTemplateSpec,
    /// Number of pods (default 1).
    #[serde(default = "default_count")]
    pub count: i32,
    /// Minimum pods for partial admission.
    #[serde(default)]
    pub min_count: Option<i32>,
    /// Topology request (TAS).
    #[serde(default)]
    pub topology_request: Option<PodSetTopologyRequest>,
}

/// `podSets[].topologyRequest`; slice and group fields are read and not modelled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetTopologyRequest {
    /// Every pod in one domain of this level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<String>,
    /// This level if possible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred: Option<String>,
    /// Anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unconstrained: Option<bool>,
}

fn default_pod_set_name() -> String {
    "main".to_string()
}

fn default_count() -> i32 {
    1
}

/// `priorityClassRef` (v1beta2).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriorityClassRef {
    /// API group.
    #[serde(default)]
    pub group: Option<String>,
    /// Kind (`WorkloadPriorityClass` or `PriorityClass`).
    #[serde(default)]
    pub kind: Option<String>,
    /// Name.
    pub name: String,
}

/// `Workload.spec`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Pod sets.
    #[serde(default)]
    pub pod_sets: Vec<PodSet>,
    /// LocalQueue name in the workload's namespace.
    #[serde(default)]
    pub queue_name: Option<String>,
    /// Priority class (v1beta2).
    #[serde(default)]
    pub priority_class_ref: Option<PriorityClassRef>,
    /// Priority class name (v1beta1).
    #[serde(default)]
    pub priority_class_name: Option<String>,
    /// Priority class source (v1beta1).
    #[serde(default)]
    pub priority_class_source: Option<String>,
    /// Resolved priority.
    #[serde(default)]
    pub priority: Option<i32>,
    /// `false` deactivates the workload.
    #[serde(default)]
    pub active: Option<bool>,
    /// Maximum run time (read, not modelled).
    #[serde(default)]
    pub maximum_execution_time_seconds: Option<i32>,
    /// Preemption gates (read, not modelled).
    #[serde(default)]
    pub preemption_gates: Option<serde_json::Value>,
}

/// One pod set's part of an admission.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetAssignmentSpec {
    /// Pod set name.
    #[serde(default = "default_pod_set_name")]
    pub name: String,
    /// Flavor per resource.
    #[serde(default)]
    pub flavors: BTreeMap<String, String>,
    /// Total usage per resource.
    #[serde(default)]
    pub resource_usage: BTreeMap<String, Quantity>,
    /// Admitted pod count.
    #[serde(default)]
    pub count: Option<i32>,
    /// Where the pods were placed (TAS): v1beta1 `domains` or v1beta2 `slices`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_assignment: Option<TopologyAssignmentSpec>,
}

/// `podSetAssignments[].topologyAssignment` as stored: v1beta1 lists `domains`, v1beta2 packs
/// them into `slices`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopologyAssignmentSpec {
    /// Level labels, widest first.
    #[serde(default)]
    pub levels: Vec<String>,
    /// v1beta1: one entry per domain of the lowest level.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<TopologyDomainSpec>,
    /// v1beta2: groups of domains.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slices: Vec<TopologySliceSpec>,
}

/// A v1beta1 topology domain: its value per level and its pod count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopologyDomainSpec {
    /// Value per level.
    #[serde(default)]
    pub values: Vec<String>,
    /// Pods in the domain.
    #[serde(default)]
    pub count: i32,
}

/// A v1beta2 topology slice: `domainCount` domains, values per level and pod counts, each either
/// one value for all (`universal`) or one per domain (`individual`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopologySliceSpec {
    /// Domains in the slice.
    #[serde(default)]
    pub domain_count: i32,
    /// Per level, the domains' values.
    #[serde(default)]
    pub values_per_level: Vec<SliceLevelValues>,
    /// Pods per domain.
    #[serde(default)]
    pub pod_counts: SlicePodCounts,
}

/// Values of one level in a slice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceLevelValues {
    /// One value for every domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub universal: Option<String>,
    /// One value per domain: `prefix` + root + `suffix`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub individual: Option<SliceIndividualValues>,
}

/// Per-domain values of one level.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SliceIndividualValues {
    /// Common prefix.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Common suffix.
    #[serde(default)]
    pub suffix: Option<String>,
    /// The values without prefix and suffix.
    #[serde(default)]
    pub roots: Vec<String>,
}

/// Pod counts of a slice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlicePodCounts {
    /// The same count in every domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub universal: Option<i32>,
    /// One count per domain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub individual: Vec<i32>,
}

impl TopologyAssignmentSpec {
    /// Every domain as (value per level, pods), whichever form was stored; a slice counts at most
    /// the API's 100,000 domains, whatever its `domainCount` says.
    ///
    /// ```
    /// use kubetrain_kueue::api::TopologyAssignmentSpec;
    /// let t: TopologyAssignmentSpec = serde_json::from_value(serde_json::json!({
    ///     "levels": ["rack", "kubernetes.io/hostname"],
    ///     "slices": [{"domainCount": 2,
    ///                 "valuesPerLevel": [{"universal": "r1"},
    ///                                    {"individual": {"prefix": "node-", "roots": ["a", "b"]}}],
    ///                 "podCounts": {"individual": [3, 1]}}]
    /// })).unwrap();
    /// assert_eq!(t.domains(), vec![
    ///     (vec!["r1".to_string(), "node-a".to_string()], 3),
    ///     (vec!["r1".to_string(), "node-b".to_string()], 1),
    /// ]);
    /// ```
    pub fn domains(&self) -> Vec<(Vec<String>, i32)> {
        let mut out: Vec<(Vec<String>, i32)> = self
            .domains
            .iter()
            .map(|d| (d.values.clone(), d.count))
            .collect();
        for s in &self.slices {
            for i in 0..usize::try_from(s.domain_count).unwrap_or(0).min(100_000) {
                let values = s
                    .values_per_level
                    .iter()
                    .map(|l| match (&l.universal, &l.individual) {
                        (Some(u), _) => u.clone(),
                        (None, Some(ind)) => format!(
                            "{}{}{}",
                            ind.prefix.as_deref().unwrap_or(""),
                            ind.roots.get(i).map_or("", String::as_str),
                            ind.suffix.as_deref().unwrap_or("")
                        ),
                        (None, None) => String::new(),
                    })
                    .collect();
                let pods = s
                    .pod_counts
                    .universal
                    .or_else(|| s.pod_counts.individual.get(i).copied())
                    .unwrap_or(0);
                out.push((values, pods));
            }
        }
        out
    }
}

/// `status.admission`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionSpec {
    /// ClusterQueue holding the reservation.
    pub cluster_queue: String,
    /// Per pod set assignment.
    #[serde(default)]
    pub pod_set_assignments: Vec<PodSetAssignmentSpec>,
}

/// `Workload.status`: what a snapshot exported from a cluster records of a workload's progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// Current admission.
    #[serde(default)]
    pub admission: Option<AdmissionSpec>,
    /// Conditions (`QuotaReserved`, `Admitted`, `PodsReady`, `Evicted`, ...) with their times.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ApiCondition>,
    /// Admission check states of the current reservation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admission_checks: Vec<AdmissionCheckStateSpec>,
    /// Requeues after pods-ready timeouts so far, and when the backoff ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue_state: Option<RequeueStateSpec>,
    /// The MultiKueue worker cluster that admitted it (on a manager cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
}

/// `status.admissionChecks[]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckStateSpec {
    /// AdmissionCheck name.
    pub name: String,
    /// `Pending`, `Ready`, `Retry` or `Rejected`.
    #[serde(default)]
    pub state: String,
    /// When the state last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// `status.requeueState`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequeueStateSpec {
    /// Requeues so far.
    #[serde(default)]
    pub count: Option<i32>,
    /// When the backoff ends (RFC 3339).
    #[serde(default)]
    pub requeue_at: Option<String>,
}

/// `WorkloadPriorityClass` has its fields at the top level.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPriorityClass {
    /// Metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Priority value.
    #[serde(default)]
    pub value: i32,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
}

/// `config.kueue.x-k8s.io` `Configuration` fields that change admission.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    /// Fair sharing; its presence enables it.
    #[serde(default)]
    pub fair_sharing: Option<FairSharingConfig>,
    /// Feature gates by name.
    #[serde(default)]
    pub feature_gates: BTreeMap<String, bool>,
    /// `waitForPodsReady` (upstream v1beta2 defaults it on with a 30-minute timeout).
    #[serde(default)]
    pub wait_for_pods_ready: Option<WaitForPodsReady>,
    /// `multiKueue`: the dispatcher of a MultiKueue manager cluster.
    #[serde(default)]
    pub multi_kueue: Option<MultiKueueSettings>,
}

/// `Configuration.multiKueue`: the fields that decide where a workload goes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MultiKueueSettings {
    /// `kueue.x-k8s.io/multikueue-dispatcher-all-at-once` (default),
    /// `kueue.x-k8s.io/multikueue-dispatcher-incremental`, or an external dispatcher (not modelled: nothing
    /// is nominated).
    #[serde(default)]
    pub dispatcher_name: Option<String>,
    /// The incremental dispatcher's settings.
    #[serde(default)]
    pub incremental_dispatcher_config: Option<IncrementalDispatcherConfig>,
    /// Read, not modelled (`gcInterval`, `origin`, `workerLostTimeout`, `externalFrameworks`, ...).
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// `Configuration.multiKueue.incrementalDispatcherConfig`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IncrementalDispatcherConfig {
    /// Clusters added per round (default 3).
    #[serde(default)]
    pub step_size: Option<i32>,
}

/// `Configuration.waitForPodsReady`: durations as Go writes them (`5m`, `90s`, `1h30m`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaitForPodsReady {
    /// v1beta1 switch; `false` turns the feature off.
    #[serde(default)]
    pub enable: Option<bool>,
    /// Time for an admitted workload to reach `PodsReady=True` (default `30m`).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Block admissions while an admitted workload is not ready (default false).
    #[serde(default)]
    pub block_admission: Option<bool>,
    /// Time to recover after a pod failed (default: `timeout`; `0s` disables it).
    #[serde(default)]
    pub recovery_timeout: Option<String>,
    /// Requeuing after a timeout.
    #[serde(default)]
    pub requeuing_strategy: Option<RequeuingStrategy>,
}

/// `waitForPodsReady.requeuingStrategy`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequeuingStrategy {
    /// `Eviction` (default: requeued at the eviction time) or `Creation`.
    #[serde(default)]
    pub timestamp: Option<String>,
    /// Requeues allowed before the workload is deactivated (`None` = unlimited).
    #[serde(default)]
    pub backoff_limit_count: Option<i32>,
    /// Backoff base (default 60): the n-th requeue waits base × 2^(n−1) seconds.
    #[serde(default)]
    pub backoff_base_seconds: Option<i64>,
    /// Backoff cap (default 3600).
    #[serde(default)]
    pub backoff_max_seconds: Option<i64>,
}

/// `Configuration.fairSharing`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FairSharingConfig {
    /// `LessThanOrEqualToFinalShare` and/or `LessThanInitialShare`.
    #[serde(default)]
    pub preemption_strategies: Vec<String>,
    /// Deprecated switch (v1beta1); `false` disables fair sharing.
    #[serde(default)]
    pub enable: Option<bool>,
}

/// The Workload label that holds the UID of the job that owns it.
pub const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";

/// The state of an admission check on a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum CheckState {
    /// Not answered yet.
    Pending,
    /// Passed.
    Ready,
    /// Failed for now: the workload is evicted and requeued.
    Retry,
    /// Failed for good: the workload is deactivated.
    Rejected,
}

impl CheckState {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckState::Pending => "Pending",
            CheckState::Ready => "Ready",
            CheckState::Retry => "Retry",
            CheckState::Rejected => "Rejected",
        }
    }
}
