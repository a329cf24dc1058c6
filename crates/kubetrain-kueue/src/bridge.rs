//! The TrainJob bridge: pod sets of a rendered TrainJob become a Workload, and an admission
//! becomes the `runtimePatches` entry Kueue writes (kueue.md §5).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api::{
    Container, ObjectMeta, PodSet, PodSpec, PodTemplateSpec, ResourceRequirements, Toleration,
    WorkloadSpec, WorkloadStatus,
};
use crate::load::WorkloadObject;
use crate::model::Model;
use crate::quantity::Quantity;
use crate::sched::Admission;

/// The manager name of Kueue's entry in `spec.runtimePatches`.
pub const RUNTIME_PATCH_MANAGER: &str = "kueue.x-k8s.io/manager";

/// One pod set of a rendered TrainJob: one per replicatedJob.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodSetInput {
    /// replicatedJob name.
    pub name: String,
    /// Pods: parallelism × replicas.
    pub count: i32,
    /// Requests of one pod.
    pub requests: BTreeMap<String, Quantity>,
    /// Pod node selector.
    pub node_selector: BTreeMap<String, String>,
    /// Pod tolerations.
    pub tolerations: Vec<Toleration>,
}

/// The Workload Kueue builds for a TrainJob: one pod set per replicatedJob (names lowercased).
///
/// ```
/// use kubetrain_kueue::bridge::{PodSetInput, workload_for_trainjob};
/// use kubetrain_kueue::quantity::Quantity;
/// let ps = PodSetInput {
///     name: "node".into(),
///     count: 4,
///     requests: [("nvidia.com/gpu".to_string(), Quantity::parse("8").unwrap())].into(),
///     ..Default::default()
/// };
/// let wl = workload_for_trainjob("ml", "llama", "team-q", 10, &[ps]);
/// assert_eq!(wl.spec.pod_sets[0].count, 4);
/// assert_eq!(wl.metadata.name, "trainjob-llama");
/// ```
pub fn workload_for_trainjob(
    namespace: &str,
    name: &str,
    queue: &str,
    priority: i32,
    pod_sets: &[PodSetInput],
) -> WorkloadObject {
    WorkloadObject {
        metadata: ObjectMeta {
            name: format!("trainjob-{name}"),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        spec: WorkloadSpec {
            queue_name: Some(queue.to_string()),
            priority: Some(priority),
            pod_sets: pod_sets
                .iter()
                .map(|p| PodSet {
                    name: p.name.to_lowercase(),
                    count: p.count,
                    min_count: None,
                    topology_request: None,
                    template: PodTemplateSpec {
                        metadata: ObjectMeta::default(),
                        spec: PodSpec {
                            containers: vec![Container {
                                name: "trainer".to_string(),
                                resources: ResourceRequirements {
                                    requests: p.requests.clone(),
                                    limits: BTreeMap::new(),
                                },
                                restart_policy: None,
                            }],
                            node_selector: p.node_selector.clone(),
                            tolerations: p.tolerations.clone(),
                            ..PodSpec::default()
                        },
                    },
                })
                .collect(),
            ..WorkloadSpec::default()
        },
        status: WorkloadStatus::default(),
    }
}

/// The `spec.runtimePatches` entry Kueue writes on admission: per replicatedJob the node
/// selector (labels of every assigned flavor), the flavors' tolerations and the pod-set label.
///
/// `replicated_jobs` maps pod set names back to replicatedJob names (pod set names are the
/// lowercased replicatedJob names).
pub fn runtime_patch(model: &Model, admission: &Admission, replicated_jobs: &[String]) -> Value {
    let mut jobs = Vec::new();
    for ps in &admission.pod_sets {
        let mut node_selector = BTreeMap::new();
        let mut tolerations: Vec<Value> = Vec::new();
        let mut flavors: Vec<usize> = ps.resources.iter().map(|&(_, f, _)| f).collect();
        flavors.sort_unstable();
        flavors.dedup();
        for f in flavors {
            let fl = &model.flavors[f];
            for (k, v) in &fl.node_labels {
                node_selector.insert(k.clone(), v.clone());
            }
            for t in &fl.tolerations {
                let v = serde_json::to_value(t).unwrap_or(Value::Null);
                if !tolerations.contains(&v) {
                    tolerations.push(v);
                }
            }
        }
        let name = replicated_jobs
            .iter()
            .find(|r| r.to_lowercase() == ps.name)
            .cloned()
            .unwrap_or_else(|| ps.name.clone());
        jobs.push(json!({
            "name": name,
            "template": {"spec": {"template": {
                "metadata": {"labels": {"kueue.x-k8s.io/podset": ps.name}},
                "spec": {"nodeSelector": node_selector, "tolerations": tolerations},
            }}},
        }));
    }
    json!({
        "manager": RUNTIME_PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}},
    })
}
