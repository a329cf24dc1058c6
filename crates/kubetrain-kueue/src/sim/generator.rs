//! Generator configs in the shape of Kueue's scheduler performance test (kueue.md §4).

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::api::{
    ClusterQueueSpec, Container, FlavorQuotas, LabelSelector, LocalQueueSpec, ObjectMeta, PodSet,
    PodSpec, PodTemplateSpec, Preemption, ResourceFlavorSpec, ResourceGroup, ResourceQuota,
    ResourceRequirements, WorkloadSpec, WorkloadStatus,
};
use crate::load::{Object, Setup, WorkloadObject};
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

impl GeneratorConfig {
    /// Expands the config into Kueue objects: one `default-flavor`, the cohorts, one ClusterQueue
    /// per queue with its own namespace and LocalQueue `lq`, and every workload with its arrival,
    /// runtime and class as `kubetrain.dev/*` annotations.
    pub fn to_setup(&self) -> Setup {
        let mut s = Setup::default();
        s.flavors.push(Object {
            metadata: meta("default-flavor", None),
            spec: ResourceFlavorSpec::default(),
        });
        let mut uid = 0u64;
        for cs in &self.cohorts {
            for ci in 0..cs.count {
                let cohort = format!("{}-{ci}", cs.class_name);
                for qs in &cs.queues_sets {
                    for qi in 0..qs.count {
                        let name = format!("{cohort}-{}-{qi}", qs.class_name);
                        s.cluster_queues.push(Object {
                            metadata: meta(&name, None),
                            spec: ClusterQueueSpec {
                                cohort_name: Some(cohort.clone()),
                                namespace_selector: Some(LabelSelector::default()),
                                resource_groups: vec![ResourceGroup {
                                    covered_resources: vec!["cpu".to_string()],
                                    flavors: vec![FlavorQuotas {
                                        name: "default-flavor".to_string(),
                                        resources: vec![ResourceQuota {
                                            name: "cpu".to_string(),
                                            nominal_quota: qs.nominal_quota.clone(),
                                            borrowing_limit: qs.borrowing_limit.clone(),
                                            lending_limit: None,
                                        }],
                                    }],
                                }],
                                preemption: Some(Preemption {
                                    reclaim_within_cohort: qs.reclaim_within_cohort.clone(),
                                    within_cluster_queue: qs.within_cluster_queue.clone(),
                                    borrow_within_cohort: None,
                                }),
                                ..ClusterQueueSpec::default()
                            },
                        });
                        s.local_queues.push(Object {
                            metadata: meta("lq", Some(&name)),
                            spec: LocalQueueSpec {
                                cluster_queue: name.clone(),
                                ..LocalQueueSpec::default()
                            },
                        });
                        for ws in &qs.workloads_sets {
                            for k in 0..ws.count {
                                let at = i64::from(k) * ws.creation_interval_ms;
                                for class in &ws.workloads {
                                    uid += 1;
                                    let mut m =
                                        meta(&format!("{}-{k}", class.class_name), Some(&name));
                                    m.uid = Some(format!("{uid:08}"));
                                    m.annotations = BTreeMap::from([
                                        ("kubetrain.dev/arrival".to_string(), format!("{at}ms")),
                                        (
                                            "kubetrain.dev/runtime".to_string(),
                                            format!("{}ms", class.runtime_ms),
                                        ),
                                        (
                                            "kubetrain.dev/class".to_string(),
                                            class.class_name.clone(),
                                        ),
                                    ]);
                                    s.workloads.push(WorkloadObject {
                                        metadata: m,
                                        spec: WorkloadSpec {
                                            queue_name: Some("lq".to_string()),
                                            priority: Some(class.priority),
                                            pod_sets: vec![PodSet {
                                                name: "main".to_string(),
                                                count: 1,
                                                min_count: None,
                                                topology_request: None,
                                                template: PodTemplateSpec {
                                                    spec: PodSpec {
                                                        containers: vec![Container {
                                                            name: "c".to_string(),
                                                            resources: ResourceRequirements {
                                                                requests: BTreeMap::from([(
                                                                    "cpu".to_string(),
                                                                    class.request.clone(),
                                                                )]),
                                                                ..ResourceRequirements::default()
                                                            },
                                                            restart_policy: None,
                                                        }],
                                                        ..PodSpec::default()
                                                    },
                                                    ..PodTemplateSpec::default()
                                                },
                                            }],
                                            ..WorkloadSpec::default()
                                        },
                                        status: WorkloadStatus::default(),
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
        // Workloads in arrival order, so that equal timestamps break ties by creation.
        s.workloads.sort_by_key(|w| {
            w.metadata
                .annotations
                .get("kubetrain.dev/arrival")
                .and_then(|a| crate::model::parse_duration_ms(a))
                .unwrap_or(0)
        });
        s
    }
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: name.to_string(),
        namespace: namespace.map(str::to_string),
        ..ObjectMeta::default()
    }
}
