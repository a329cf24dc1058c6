//! Tests of the MultiKueue model, translated from Kueue v0.19.2's own tests where one covers the rule
//! (`pkg/controller/workloaddispatcher/incrementaldispatcher_test.go`,
//! `pkg/controller/admissionchecks/multikueue/workload_test.go`, `admissioncheck_test.go`).

use std::collections::BTreeMap;

use super::*;
use crate::Model;
use crate::sched::Scheduler;

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn incremental(step: usize, config_order: bool) -> Dispatcher {
    Dispatcher {
        name: INCREMENTAL.into(),
        step,
        config_order,
    }
}

// TestIncrementalDispatcherNominateWorkers: cluster names are anti-alphabetical, so the configured
// order is distinguishable from a sorted one. `round` counts the expired rounds (advanceRoundTime).
#[test]
fn incremental_nominates_step_clusters_per_round_in_config_order() {
    let d = incremental(DEFAULT_STEP_SIZE, true);
    // "one remote", "two remotes", "three remotes"
    assert_eq!(d.nominated(&names(&["A"]), 0), names(&["A"]));
    assert_eq!(d.nominated(&names(&["B", "A"]), 0), names(&["B", "A"]));
    assert_eq!(
        d.nominated(&names(&["C", "B", "A"]), 0),
        names(&["C", "B", "A"])
    );
    // "fifteen remotes"
    let fifteen = names(&[
        "O", "N", "M", "L", "K", "J", "I", "H", "G", "F", "E", "D", "C", "B", "A",
    ]);
    assert_eq!(d.nominated(&fifteen, 0), names(&["O", "N", "M"]));
    // "round expired, next set nominated"
    let six = names(&["F", "E", "D", "C", "B", "A"]);
    assert_eq!(d.nominated(&six, 1), six);
    // "round in progress, keep current"
    assert_eq!(d.nominated(&six, 0), names(&["F", "E", "D"]));
    // "round expired, nominate all" (six nominated, two left)
    let eight = names(&["H", "G", "F", "E", "D", "C", "B", "A"]);
    assert_eq!(d.nominated(&eight, 2), eight);
    // "no remotes"
    assert!(d.nominated(&[], 0).is_empty());
    // "all already nominated (3)": nothing more to add
    assert!(!d.more_after(&names(&["C", "B", "A"]), 0));
}

// TestIncrementalDispatcherNominateWorkers: "stepSize=2, five remotes — first batch is exactly 2",
// "stepSize=2, round expired — second batch is next 2", and the ordering-gate-off cases.
#[test]
fn incremental_step_size_and_alphabetical_order_without_the_gate() {
    let five = names(&["E", "D", "C", "B", "A"]);
    assert_eq!(incremental(2, true).nominated(&five, 0), names(&["E", "D"]));
    assert_eq!(
        incremental(2, true).nominated(&five, 1),
        names(&["E", "D", "C", "B"])
    );
    // "ordering gate off: three remotes nominated alphabetically"
    assert_eq!(
        incremental(3, false).nominated(&names(&["C", "B", "A"]), 0),
        names(&["A", "B", "C"])
    );
    // "ordering gate off: prior nomination retained, remainder alphabetical": with the gate off every
    // batch is alphabetical, so F, E, D were never a first batch; the remainder rule is what we check.
    assert_eq!(
        incremental(2, false).nominated(&five, 0),
        names(&["A", "B"])
    );
    assert_eq!(
        incremental(2, false).nominated(&five, 2),
        names(&["A", "B", "C", "D", "E"])
    );
}

// "config gate disabled — ignores stepSize=10, uses default 3"; the default dispatcher is all-at-once.
#[test]
fn dispatcher_settings_follow_configuration_and_gates() {
    let mut setup = Setup::from_yaml(
        "apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
featureGates: {MultiKueueIncrementalDispatcherConfig: false}
multiKueue:
  dispatcherName: kueue.x-k8s.io/multikueue-dispatcher-incremental
  incrementalDispatcherConfig: {stepSize: 10}
  gcInterval: 1m
",
    )
    .unwrap();
    let d = Dispatcher::of(&setup);
    assert_eq!(
        (d.name.as_str(), d.step, d.config_order),
        (INCREMENTAL, 3, true)
    );
    setup.configuration.as_mut().unwrap().feature_gates.clear();
    assert_eq!(Dispatcher::of(&setup).step, 10);
    assert_eq!(Dispatcher::of(&Setup::default()).name, ALL_AT_ONCE);
    // All at once: every cluster in round 0.
    assert_eq!(
        Dispatcher::of(&Setup::default()).nominated(&names(&["B", "A"]), 0),
        names(&["B", "A"])
    );
}

/// A manager with a MultiKueue check over `clusters` (16 GPUs of quota), `config` extra documents.
fn manager(clusters: &[&str], extra: &str) -> String {
    let mut out = String::new();
    for c in clusters {
        out.push_str(&format!(
            "apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {{name: {c}}}
spec: {{clusterSource: {{kubeConfig: {{locationType: Secret, location: {c}-secret}}}}}}
---
"
        ));
    }
    out.push_str(&format!(
        "apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata: {{name: mkc}}
spec: {{clusters: [{}]}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {{name: mk}}
spec:
  controllerName: kueue.x-k8s.io/multikueue
  parameters: {{apiGroup: kueue.x-k8s.io, kind: MultiKueueConfig, name: mkc}}
status:
  conditions: [{{type: Active, status: 'True', reason: Active, message: The admission check is active}}]
---
{}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  namespaceSelector: {{}}
  admissionChecksStrategy: {{admissionChecks: [{{name: mk}}]}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{{name: gpu, resources: [{{name: nvidia.com/gpu, nominalQuota: 16}}]}}]
{extra}",
        clusters.join(", "),
        queue_objects_without_cq(),
    ));
    out
}

fn queue_objects_without_cq() -> &'static str {
    "apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team, namespace: ml}
spec: {clusterQueue: cq}"
}

/// A worker with `gpus` of quota and the same LocalQueue.
fn worker(gpus: u32, extra: &str) -> Setup {
    Setup::from_yaml(&format!(
        "{}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {{name: cq}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{{name: gpu, resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}}}]}}]
{extra}",
        queue_objects_without_cq()
    ))
    .unwrap()
}

fn workload(name: &str, gpus: u32) -> String {
    format!(
        "---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {{name: {name}, namespace: ml}}
spec:
  queueName: team
  podSets:
  - name: main
    count: 1
    template:
      spec:
        containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: {gpus}}}}}}}]
"
    )
}

fn run(manager_yaml: &str, workers: &[(&str, Setup)]) -> (Setup, Report) {
    let mut m = Setup::from_yaml(manager_yaml).unwrap();
    let workers: BTreeMap<String, Setup> = workers
        .iter()
        .map(|(n, s)| (n.to_string(), s.clone()))
        .collect();
    let report = dispatch(&mut m, &workers).unwrap();
    (m, report)
}

fn verdict<'a>(d: &'a Dispatch, cluster: &str) -> &'a ClusterVerdict {
    d.clusters.iter().find(|c| c.cluster == cluster).unwrap()
}

// workload_test.go "remote wl admitted - other workers deleted": both workers can admit it; the first
// to admit wins, the other's copy is removed; the manager's check turns Ready and the manager admits.
#[test]
fn first_worker_to_admit_wins_and_the_manager_admits() {
    let (m, report) = run(
        &(manager(&["worker1", "worker2"], "") + &workload("wl", 4)),
        &[("worker1", worker(8, "")), ("worker2", worker(8, ""))],
    );
    let d = report.find("ml/wl").unwrap();
    assert_eq!(d.cluster.as_deref(), Some("worker1"));
    assert_eq!(d.check_state, "Ready");
    assert_eq!(verdict(d, "worker1").state, ClusterState::Admitted);
    assert_eq!(verdict(d, "worker2").state, ClusterState::Removed);
    // The manager, simulated with the check's answer, admits it.
    let mut s = Scheduler::new(Model::build(&m).unwrap());
    s.arrive_all();
    s.run_until_stable(None);
    s.advance_to(1);
    s.run_timers();
    let id = s.workload_id("ml/wl").unwrap();
    assert_eq!(s.condition(id, "Admitted").unwrap().status, "True");
}

// workload_test.go "wl with reservation, creates missing workloads" and "remote wl with reservation
// but not admitted - other workers not deleted": a worker without room keeps its copy pending, with its
// own reason; the one with room takes it.
#[test]
fn a_worker_without_quota_keeps_its_copy_pending_with_its_own_reason() {
    let (_, report) = run(
        &(manager(&["worker1", "worker2"], "") + &workload("wl", 4)),
        &[("worker1", worker(2, "")), ("worker2", worker(8, ""))],
    );
    let d = report.find("ml/wl").unwrap();
    assert_eq!(d.cluster.as_deref(), Some("worker2"));
    let w1 = verdict(d, "worker1");
    assert_eq!(w1.state, ClusterState::Removed, "{w1:?}");
    assert!(w1.message.contains("insufficient quota"), "{w1:?}");

    // Nowhere to go: both copies pending, the check stays Pending.
    let (m, report) = run(
        &(manager(&["worker1", "worker2"], "") + &workload("wl", 4)),
        &[("worker1", worker(2, "")), ("worker2", worker(2, ""))],
    );
    let d = report.find("ml/wl").unwrap();
    assert_eq!(
        (d.cluster.as_deref(), d.check_state.as_str()),
        (None, "Pending")
    );
    for c in ["worker1", "worker2"] {
        let v = verdict(d, c);
        assert_eq!(v.state, ClusterState::Pending);
        assert!(v.message.contains("insufficient quota"), "{v:?}");
    }
    assert!(
        m.workloads[0].metadata.annotations.is_empty(),
        "no answer for a pending check"
    );
}

// workload_test.go "wl without reservation, clears the workload objects": a workload the manager has
// not reserved quota for is offered to no worker.
#[test]
fn no_reservation_on_the_manager_no_dispatch() {
    let (_, report) = run(
        &(manager(&["worker1"], "") + &workload("big", 32)),
        &[("worker1", worker(64, ""))],
    );
    let d = report.find("ml/big").unwrap();
    assert_eq!(d.cluster, None);
    assert!(d.message.contains("reserves quota"), "{}", d.message);
    assert_eq!(verdict(d, "worker1").state, ClusterState::NotNominated);
}

// The incremental dispatcher with stepSize 1: worker1 (first in the config) is full, so the workload
// goes to worker2 in the second round, 5 minutes later; the manager's check answers then.
#[test]
fn incremental_dispatcher_tries_the_next_cluster_after_a_round() {
    let config = "---
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
multiKueue:
  dispatcherName: kueue.x-k8s.io/multikueue-dispatcher-incremental
  incrementalDispatcherConfig: {stepSize: 1}
";
    let (m, report) = run(
        &(manager(&["worker1", "worker2", "worker3"], config) + &workload("wl", 4)),
        &[
            ("worker1", worker(2, "")),
            ("worker2", worker(8, "")),
            ("worker3", worker(8, "")),
        ],
    );
    let d = report.find("ml/wl").unwrap();
    assert_eq!(d.cluster.as_deref(), Some("worker2"));
    assert_eq!(d.admitted_after_ms, Some(ROUND_MS));
    assert_eq!(verdict(d, "worker1").nominated_in_round, Some(0));
    assert_eq!(verdict(d, "worker2").nominated_in_round, Some(1));
    assert_eq!(verdict(d, "worker3").state, ClusterState::NotNominated);
    let wl = &m.workloads[0];
    assert_eq!(
        wl.metadata
            .annotations
            .get("kubetrain.dev/check.mk")
            .map(String::as_str),
        Some("Ready@300000ms")
    );
}

// admissioncheck_test.go / multikueuecluster: an inactive or missing cluster takes nothing; the
// others still do.
#[test]
fn inactive_missing_and_undescribed_clusters_are_unavailable() {
    let inactive = "---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {name: down}
spec: {clusterSource: {kubeConfig: {locationType: Secret, location: s}}}
status:
  conditions: [{type: Active, status: 'False', reason: ClientConnectionFailed, message: cannot connect}]
";
    let yaml = manager(&["worker1"], inactive).replace(
        "spec: {clusters: [worker1]}",
        "spec: {clusters: [down, ghost, nosetup, worker1]}",
    ) + "---
apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueCluster
metadata: {name: nosetup}
spec: {clusterSource: {kubeConfig: {locationType: Secret, location: s}}}
" + &workload("wl", 4);
    let (_, report) = run(
        &yaml,
        &[("worker1", worker(8, "")), ("down", worker(8, ""))],
    );
    let d = report.find("ml/wl").unwrap();
    assert_eq!(d.cluster.as_deref(), Some("worker1"));
    let down = verdict(d, "down");
    assert_eq!(down.state, ClusterState::Unavailable);
    assert!(down.message.contains("cannot connect"), "{down:?}");
    assert_eq!(verdict(d, "ghost").reason, "MissingCluster");
    assert_eq!(verdict(d, "nosetup").reason, "NoSetup");
}

// Two workloads, one slot per worker: each worker takes one; the copies compete in the workers' own
// queues, and a worker that lost a workload to another frees its room for the next.
#[test]
fn workloads_spread_over_workers_with_room() {
    let (_, report) = run(
        &(manager(&["worker1", "worker2"], "") + &workload("a", 8) + &workload("b", 8)),
        &[("worker1", worker(8, "")), ("worker2", worker(8, ""))],
    );
    let a = report.find("ml/a").unwrap().cluster.clone().unwrap();
    let b = report.find("ml/b").unwrap().cluster.clone().unwrap();
    assert_ne!(a, b, "each worker has room for one");
}

// A snapshot: the manager's Workload records status.clusterName, or the worker's own snapshot shows
// its copy admitted; the model keeps it there.
#[test]
fn recorded_cluster_is_kept() {
    let mut yaml = manager(&["worker1", "worker2"], "") + &workload("wl", 4);
    yaml.push_str("status: {clusterName: worker2}\n");
    let (_, report) = run(
        &yaml,
        &[("worker1", worker(8, "")), ("worker2", worker(8, ""))],
    );
    let d = report.find("ml/wl").unwrap();
    assert_eq!(d.cluster.as_deref(), Some("worker2"));
    assert!(d.message.contains("status.clusterName"), "{}", d.message);
}

// `kubetrain.dev/cluster` moves a worker's objects out of the manager's stream.
#[test]
fn annotated_objects_form_the_worker_setups() {
    let mut setup = Setup::from_yaml(
        "apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: gpu, annotations: {kubetrain.dev/cluster: worker1}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ml}
",
    )
    .unwrap();
    let workers = split_workers(&mut setup);
    assert_eq!(setup.flavors.len(), 1);
    assert_eq!(workers["worker1"].flavors.len(), 1);
    assert_eq!(workers["worker1"].namespaces[0].name, "ml");
}

#[test]
fn malformed_config_is_an_error_with_its_path() {
    let mut m = Setup::from_yaml(
        "apiVersion: kueue.x-k8s.io/v1beta2
kind: MultiKueueConfig
metadata: {name: c}
spec: {clusters: 3}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: mk}
spec: {controllerName: kueue.x-k8s.io/multikueue}
",
    )
    .unwrap();
    let e = dispatch(&mut m, &BTreeMap::new()).unwrap_err().to_string();
    assert!(e.contains("MultiKueueConfig/c: spec.clusters"), "{e}");
}
