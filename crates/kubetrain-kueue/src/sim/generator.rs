//! Generator configs in the shape of Kueue's scheduler performance test (kueue.md §4).

use serde::{Deserialize, Serialize};

use crate::quantity::Quantity;

/// The top-level generator config (`cohorts:` list), as in Kueue's `generator.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GeneratorConfig {
    /// Cohort classes.
    pub cohorts: Vec<CohortSet>,
}

/// `count` cohorts of one class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CohortSet {
    /// Class name (used in object names).
    pub class_name: String,
    /// Number of cohorts.
    pub count: u32,
    /// ClusterQueue classes in each cohort.
    pub queues_sets: Vec<QueueSet>,
}

/// `count` ClusterQueues of one class in each cohort.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QueueSet {
    /// Class name.
    pub class_name: String,
    /// Number of queues per cohort.
    pub count: u32,
    /// cpu nominal quota.
    pub nominal_quota: Quantity,
    /// cpu borrowing limit.
    #[serde(default)]
    pub borrowing_limit: Option<Quantity>,
    /// `reclaimWithinCohort`.
    #[serde(default)]
    pub reclaim_within_cohort: Option<String>,
    /// `withinClusterQueue`.
    #[serde(default)]
    pub within_cluster_queue: Option<String>,
    /// Workload sets created in each queue.
    pub workloads_sets: Vec<WorkloadSet>,
}

/// `count` rounds of workloads, one round every `creationIntervalMs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadSet {
    /// Rounds.
    pub count: u32,
    /// Interval between rounds.
    pub creation_interval_ms: i64,
    /// Workloads created each round.
    pub workloads: Vec<WorkloadClass>,
}

/// One workload class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadClass {
    /// Class name (metrics are grouped by it).
    pub class_name: String,
    /// Run time after admission.
    pub runtime_ms: i64,
    /// Priority.
    pub priority: i32,
    /// cpu request of its single pod.
    pub request: Quantity,
}
