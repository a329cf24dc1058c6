//! A generator config expanded into the Kueue objects of a [`Setup`]: kept apart from the config types so
//! that reading a config (the setup's loader does) does not depend on the setup it expands into.

use std::collections::BTreeMap;

use super::generator::{GeneratorConfig, QueueSet, WorkloadClass};
use crate::api::{
    ClusterQueueSpec, Container, FlavorQuotas, LabelSelector, LocalQueueSpec, ObjectMeta, PodSet,
    PodSpec, PodTemplateSpec, Preemption, ResourceFlavorSpec, ResourceGroup, ResourceQuota,
    ResourceRequirements, WorkloadSpec, WorkloadStatus,
};
use crate::load::{KueueObject, Setup, WorkloadObject};

impl GeneratorConfig {
    /// Expands the config into Kueue objects: one `default-flavor`, the cohorts, one ClusterQueue
    /// per queue with its own namespace and LocalQueue `lq`, and every workload with its arrival,
    /// runtime and class as `kubetrain.dev/*` annotations.
    pub fn to_setup(&self) -> Setup {
        let mut s = Setup::default();
        s.flavors.push(KueueObject {
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
                        s.cluster_queues.push(cluster_queue(&name, &cohort, qs));
                        s.local_queues.push(KueueObject {
                            metadata: meta("lq", Some(&name)),
                            spec: LocalQueueSpec {
                                cluster_queue: name.clone(),
                                ..LocalQueueSpec::default()
                            },
                        });
                        push_workloads(&mut s, &name, qs, &mut uid);
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

/// The ClusterQueue `name` of a queue set in `cohort`: one flavor, its cpu quota and preemption.
fn cluster_queue(name: &str, cohort: &str, qs: &QueueSet) -> KueueObject<ClusterQueueSpec> {
    KueueObject {
        metadata: meta(name, None),
        spec: ClusterQueueSpec {
            cohort_name: Some(cohort.to_string()),
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
    }
}

/// Adds the workloads of a queue set to the setup, in namespace `namespace`, numbering their uids on from
/// `uid`.
fn push_workloads(s: &mut Setup, namespace: &str, qs: &QueueSet, uid: &mut u64) {
    for ws in &qs.workloads_sets {
        for k in 0..ws.count {
            let at = i64::from(k) * ws.creation_interval_ms;
            for class in &ws.workloads {
                *uid += 1;
                let mut m = meta(&format!("{}-{k}", class.class_name), Some(namespace));
                m.uid = Some(format!("{:08}", *uid));
                m.annotations = BTreeMap::from([
                    ("kubetrain.dev/arrival".to_string(), format!("{at}ms")),
                    (
                        "kubetrain.dev/runtime".to_string(),
                        format!("{}ms", class.runtime_ms),
                    ),
                    ("kubetrain.dev/class".to_string(), class.class_name.clone()),
                ]);
                s.workloads.push(WorkloadObject {
                    metadata: m,
                    spec: workload_spec(class),
                    status: WorkloadStatus::default(),
                });
            }
        }
    }
}

/// The spec of one workload of a class: a single pod requesting the class's cpu, in LocalQueue `lq`.
fn workload_spec(class: &WorkloadClass) -> WorkloadSpec {
    WorkloadSpec {
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
                            requests: BTreeMap::from([("cpu".to_string(), class.request.clone())]),
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
    }
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: name.to_string(),
        namespace: namespace.map(str::to_string),
        ..ObjectMeta::default()
    }
}
