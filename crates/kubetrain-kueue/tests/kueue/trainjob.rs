//! TrainJobs in the model (issue 15, item 1): the Workload Kueue's TrainJob integration builds
//! (kueue v0.19.1 `pkg/controller/jobs/trainjob`: the child JobSet's pod sets, one per replicatedJob,
//! count = replicas × min(parallelism, completions)), and `admit`'s typed verdicts.

use kubetrain_api::{Document, RuntimeCatalog, TrainJob, parse_documents};
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::quantity::Quantity;
use kubetrain_kueue::trainjob::{add_trainjobs, workload_for, workload_for_with_plugins};
use kubetrain_kueue::{AdmissionVerdict, admit};

/// A runtime with an initializer and a trainer step (the Kueue setup has a tainted GPU flavor and an
/// untainted one); the trainer's pods have an overhead, a node
/// selector and a toleration, as a RuntimeClass and a GPU pool would give them.
const RUNTIME: &str = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: gpu-torch}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: dataset-initializer
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}
            spec:
              template:
                spec:
                  containers:
                    - name: dataset-initializer
                      image: init
                      resources: {requests: {cpu: "1", memory: 2Gi}}
        - name: node
          dependsOn: [{name: dataset-initializer, status: Complete}]
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  overhead: {cpu: 250m, memory: 1Gi}
                  nodeSelector: {cloud.example.com/pool: gpu}
                  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
                  containers:
                    - {name: node, image: trainer}
"#;

const JOB: &str = r#"
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: llama
  namespace: ml
  uid: 0a1b2c3d-1111-2222-3333-444455556666
  creationTimestamp: "2025-06-01T10:00:00Z"
  labels:
    kueue.x-k8s.io/queue-name: team-q
    kueue.x-k8s.io/priority-class: production
spec:
  runtimeRef: {name: gpu-torch}
  trainer:
    numNodes: 3
    resourcesPerNode:
      requests: {cpu: "4", nvidia.com/gpu: "2"}
      limits: {nvidia.com/gpu: "2"}
"#;

fn setup(gpus: u32, extra: &str) -> Setup {
    Setup::from_yaml(&format!(
        r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: a100}}
spec:
  nodeLabels: {{cloud.example.com/pool: gpu}}
  nodeTaints: [{{key: nvidia.com/gpu, value: present, effect: NoSchedule}}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {{name: general}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: team}}
spec:
  namespaceSelector: {{}}
  preemption: {{withinClusterQueue: LowerPriority}}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: a100
      resources:
      - {{name: cpu, nominalQuota: 64}}
      - {{name: memory, nominalQuota: 256Gi}}
      - {{name: nvidia.com/gpu, nominalQuota: {gpus}}}
    - name: general
      resources:
      - {{name: cpu, nominalQuota: 16}}
      - {{name: memory, nominalQuota: 64Gi}}
      - {{name: nvidia.com/gpu, nominalQuota: 0}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {{name: team-q, namespace: ml}}
spec: {{clusterQueue: team}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {{name: production}}
value: 1000
{extra}"#
    ))
    .unwrap()
}

fn job_and_catalog() -> (TrainJob, RuntimeCatalog) {
    let mut catalog = kubetrain_jobset::builtin::catalog();
    for d in parse_documents(RUNTIME).unwrap() {
        assert!(catalog.add_document(&d.document));
    }
    let docs = parse_documents(JOB).unwrap();
    let Document::TrainJob(job) = &docs[0].document else {
        panic!("not a TrainJob")
    };
    ((**job).clone(), catalog)
}

fn q(v: &str) -> Quantity {
    Quantity::parse(v).unwrap()
}

#[test]
fn workload_is_built_as_the_trainjob_integration_builds_it() {
    let (job, catalog) = job_and_catalog();
    let runtime = kubetrain_jobset::resolve(&catalog, &job).unwrap();
    let wl = workload_for(&job, runtime).unwrap();
    assert_eq!(wl.key(), "ml/trainjob-llama");
    assert_eq!(wl.spec.queue_name.as_deref(), Some("team-q"));
    let class = wl.spec.priority_class_ref.as_ref().unwrap();
    assert_eq!(
        (class.kind.as_deref(), class.name.as_str()),
        (Some("WorkloadPriorityClass"), "production")
    );
    assert_eq!(
        wl.metadata
            .labels
            .get("kueue.x-k8s.io/job-uid")
            .map(String::as_str),
        Some("0a1b2c3d-1111-2222-3333-444455556666")
    );
    assert_eq!(
        wl.metadata.creation_timestamp.as_deref(),
        Some("2025-06-01T10:00:00Z")
    );
    // One pod set per replicatedJob, in the runtime's order.
    let names: Vec<(&str, i32)> = wl
        .spec
        .pod_sets
        .iter()
        .map(|p| (p.name.as_str(), p.count))
        .collect();
    assert_eq!(names, [("dataset-initializer", 1), ("node", 3)]);
    let init = &wl.spec.pod_sets[0].template.spec;
    assert_eq!(init.containers[0].resources.requests["cpu"], q("1"));
    let node = &wl.spec.pod_sets[1].template.spec;
    // resourcesPerNode lands on the trainer container; the runtime's overhead, selector and
    // toleration stay on the pod.
    let trainer = node.containers.iter().find(|c| c.name == "node").unwrap();
    assert_eq!(trainer.resources.requests["nvidia.com/gpu"], q("2"));
    assert_eq!(trainer.resources.requests["cpu"], q("4"));
    assert_eq!(node.overhead["cpu"], q("250m"));
    assert_eq!(node.overhead["memory"], q("1Gi"));
    assert_eq!(node.node_selector["cloud.example.com/pool"], "gpu");
    assert_eq!(node.tolerations[0].key.as_deref(), Some("nvidia.com/gpu"));
}

#[test]
fn admitted_with_flavors_and_usage_including_overhead() {
    let (job, catalog) = job_and_catalog();
    let verdict = admit(&job, &catalog, &setup(8, "")).unwrap();
    let AdmissionVerdict::Admitted(a) = verdict else {
        panic!("{verdict:?}")
    };
    assert_eq!(a.workload, "ml/trainjob-llama");
    assert_eq!(a.cluster_queue, "team");
    let node = &a.pod_sets[1];
    assert_eq!((node.name.as_str(), node.count), ("node", 3));
    assert_eq!(node.flavors["nvidia.com/gpu"], "a100");
    assert_eq!(node.resource_usage["nvidia.com/gpu"], "6");
    // 3 × (4 cpu + 250m overhead).
    assert_eq!(node.resource_usage["cpu"], "12750m");
    assert_eq!(node.resource_usage["memory"], "3Gi");
    // The initializer does not tolerate the GPU taint: it lands on the untainted flavor.
    assert_eq!(a.pod_sets[0].flavors["cpu"], "general");
    assert_eq!(a.pod_sets[0].resource_usage["cpu"], "1");
    assert!(a.preempted.is_empty());
}

#[test]
fn waits_with_kueue_reasons() {
    let (job, catalog) = job_and_catalog();
    // 6 GPUs never fit in 4.
    let w = admit(&job, &catalog, &setup(4, "")).unwrap();
    let w = w.waiting().unwrap();
    assert_eq!(w.reason, "ExceedsMaxQuota");
    assert!(
        w.message
            .contains("current podset request (6) > maximum capacity (4)"),
        "{}",
        w.message
    );
    // No LocalQueue in the namespace.
    let mut other = job.clone();
    other.metadata.namespace = Some("elsewhere".into());
    let w = admit(&other, &catalog, &setup(8, "")).unwrap();
    let w = w.waiting().unwrap();
    assert_eq!(
        (w.reason.as_str(), w.message.as_str()),
        ("Misconfigured", "LocalQueue team-q doesn't exist")
    );
    // A runtime that does not exist is an error, not a verdict.
    let mut missing = job.clone();
    missing.spec.runtime_ref.name = "nope".into();
    let e = admit(&missing, &catalog, &setup(8, "")).unwrap_err();
    assert!(e.to_string().starts_with("TrainJob/ml/llama: "), "{e}");
}

#[test]
fn higher_priority_trainjob_preempts_an_admitted_workload() {
    let (job, catalog) = job_and_catalog();
    let running = r#"---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: sweep, namespace: ml}
spec:
  queueName: team-q
  priority: 10
  podSets:
  - name: main
    count: 1
    template: {spec: {containers: [{name: c, resources: {requests: {nvidia.com/gpu: 4}}}]}}
status:
  admission:
    clusterQueue: team
    podSetAssignments:
    - name: main
      count: 1
      flavors: {nvidia.com/gpu: a100}
      resourceUsage: {nvidia.com/gpu: "4"}
"#;
    let verdict = admit(&job, &catalog, &setup(8, running)).unwrap();
    let a = verdict
        .admitted()
        .expect("admitted after preempting the sweep");
    assert_eq!(a.preempted, ["ml/sweep"]);
}

#[test]
fn setup_documents_become_workloads() {
    let mut s = Setup::from_yaml(&format!("{RUNTIME}---{JOB}")).unwrap();
    assert_eq!(s.trainer_documents.len(), 2);
    assert!(s.skipped.is_empty());
    let mut catalog = RuntimeCatalog::new();
    let added = add_trainjobs(&mut s, &mut catalog).unwrap();
    assert_eq!(
        added,
        [("ml/llama".to_string(), "ml/trainjob-llama".to_string())]
    );
    assert_eq!(s.workloads[0].spec.pod_sets.len(), 2);
    assert!(s.trainer_documents.is_empty());
}

/// Issue 13, item 13: `kubetrain queue` and `admit` apply the Kubernetes quantity rules that
/// `kubetrain validate`, `render`, `run` and the webhook apply: a negative, unreadable or
/// larger-than-int64 quantity is a field-path error, not a Workload.
#[test]
fn invalid_quantities_are_refused_with_their_field_path() {
    let (job, catalog) = job_and_catalog();
    let setup = setup(8, "");
    for (bad, want) in [
        ("-2", "must be greater than or equal to 0"),
        ("1e26", "must be less than or equal to 9223372036854775807"),
        ("1e999999999", "quantities must match"),
    ] {
        let mut j = job.clone();
        let r = j
            .spec
            .trainer
            .as_mut()
            .unwrap()
            .resources_per_node
            .as_mut()
            .unwrap();
        for list in [r.requests.as_mut(), r.limits.as_mut()]
            .into_iter()
            .flatten()
        {
            list.insert(
                "nvidia.com/gpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(bad.to_string()),
            );
        }
        let err = admit(&j, &catalog, &setup).expect_err(bad).to_string();
        assert!(
            err.contains("spec.trainer.resourcesPerNode.requests[nvidia.com/gpu]")
                && err.contains(want),
            "{bad}: {err}"
        );
        // The CLI path (documents read with the setup) refuses it the same way.
        let mut s = setup.clone();
        s.trainer_documents
            .push(serde_json::to_value(&j).expect("TrainJob serializes"));
        let mut c = catalog.clone();
        let err = add_trainjobs(&mut s, &mut c).expect_err(bad).to_string();
        assert!(err.contains(want), "{bad}: {err}");
    }
}

/// A custom ML policy that doubles the trainer's node count, as an embedder's operator might.
struct DoubleNodes;

impl kubetrain_merge::plugins::Plugin for DoubleNodes {
    fn name(&self) -> &str {
        "DoubleNodes"
    }

    fn ml_policy(&self) -> Option<&dyn kubetrain_merge::plugins::EnforceMlPolicy> {
        Some(self)
    }
}

impl kubetrain_merge::plugins::EnforceMlPolicy for DoubleNodes {
    fn enforce_ml_policy(
        &self,
        info: &mut kubetrain_merge::Info,
        _: &TrainJob,
    ) -> Result<(), kubetrain_merge::MergeError> {
        if let Some(i) = info.pod_set_by_ancestor(kubetrain_api::constants::ANCESTOR_TRAINER) {
            info.pod_sets[i].count *= 2;
        }
        Ok(())
    }
}

impl kubetrain_jobset::plugins::RenderPlugin for DoubleNodes {}

#[test]
fn the_workload_follows_the_jobset_a_custom_registry_renders() {
    let (job, catalog) = job_and_catalog();
    let runtime = kubetrain_jobset::resolve(&catalog, &job).unwrap();
    let mut plugins = kubetrain_jobset::plugins::Registry::builtin(&Default::default());
    plugins.register(DoubleNodes).unwrap();
    let counts = |wl: &kubetrain_kueue::load::WorkloadObject| -> Vec<(String, i32)> {
        wl.spec
            .pod_sets
            .iter()
            .map(|p| (p.name.clone(), p.count))
            .collect()
    };
    let custom = workload_for_with_plugins(&job, runtime, &plugins).unwrap();
    assert_eq!(
        counts(&custom),
        [
            ("dataset-initializer".to_owned(), 1),
            ("node".to_owned(), 6)
        ]
    );
    // The built-in registry gives what `workload_for` gives.
    let builtin = kubetrain_jobset::plugins::Registry::builtin(&Default::default());
    assert_eq!(
        workload_for_with_plugins(&job, runtime, &builtin).unwrap(),
        workload_for(&job, runtime).unwrap()
    );
}

/// An elastic TrainJob (KEP-2903, `mlPolicy.torch.elasticPolicy` minNodes 2, maxNodes 4) asks for 4 nodes of
/// 2 GPUs: its node pod set carries minCount 2, so with 6 GPUs in the ClusterQueue it is admitted with 3 nodes
/// (the largest count that fits), with 2 GPUs it waits (fewer than minNodes fit).
#[test]
fn an_elastic_trainjob_is_partially_admitted_down_to_min_nodes() {
    let mut catalog = kubetrain_jobset::builtin::catalog();
    let runtime = RUNTIME
        .replace("name: gpu-torch", "name: gpu-torch-elastic")
        .replace(
            "mlPolicy: {numNodes: 1, torch: {}}",
            "mlPolicy: {torch: {elasticPolicy: {minNodes: 2, maxNodes: 4}}}",
        );
    for d in parse_documents(&runtime).unwrap() {
        assert!(catalog.add_document(&d.document));
    }
    let text = JOB
        .replace(
            "runtimeRef: {name: gpu-torch}",
            "runtimeRef: {name: gpu-torch-elastic}",
        )
        .replace("numNodes: 3", "numNodes: 4");
    let docs = parse_documents(&text).unwrap();
    let Document::TrainJob(job) = &docs[0].document else {
        panic!("not a TrainJob")
    };
    let runtime_spec = kubetrain_jobset::resolve(&catalog, job).unwrap();
    let wl = workload_for(job, runtime_spec).unwrap();
    let sets: Vec<(&str, i32, Option<i32>)> = wl
        .spec
        .pod_sets
        .iter()
        .map(|p| (p.name.as_str(), p.count, p.min_count))
        .collect();
    assert_eq!(
        sets,
        [("dataset-initializer", 1, None), ("node", 4, Some(2))]
    );

    let verdict = admit(job, &catalog, &setup(6, "")).unwrap();
    let AdmissionVerdict::Admitted(a) = verdict else {
        panic!("{verdict:?}")
    };
    assert_eq!(
        (a.pod_sets[1].name.as_str(), a.pod_sets[1].count),
        ("node", 3)
    );
    assert_eq!(a.pod_sets[1].resource_usage["nvidia.com/gpu"], "6");
    assert_eq!(
        a.partial_admission,
        [
            "admitted with 3 of 4 nodes (partial admission: quota for 4 not available in ClusterQueue team, \
not even by preemption; elastic minNodes 2)"
        ]
    );

    let verdict = admit(job, &catalog, &setup(2, "")).unwrap();
    assert!(verdict.waiting().is_some(), "{verdict:?}");
    // A non-elastic TrainJob never is: the same quota admits the 3-node job of the fixture whole or not at all.
    let (plain, plain_catalog) = job_and_catalog();
    let verdict = admit(&plain, &plain_catalog, &setup(4, "")).unwrap();
    assert!(verdict.waiting().is_some(), "{verdict:?}");
}
