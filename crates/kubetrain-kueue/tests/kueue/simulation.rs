//! The simulator, the generator, the reports, explain and the TrainJob bridge.

use kubetrain_kueue::bridge::{PodSetInput, runtime_patch, workload_for_trainjob};
use kubetrain_kueue::explain::explain;
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::quantity::Quantity;
use kubetrain_kueue::sched::Scheduler;
use kubetrain_kueue::sim::engine::{SimOutcome, simulate};
use kubetrain_kueue::sim::report::{html, simulation_report};
use kubetrain_kueue::sim::scenario::ScenarioSpec;

const SMALL_GENERATOR: &str = r#"
cohorts:
- className: cohort
  count: 2
  queuesSets:
  - className: cq
    count: 3
    nominalQuota: 10
    borrowingLimit: 20
    reclaimWithinCohort: Any
    withinClusterQueue: LowerPriority
    workloadsSets:
    - count: 40
      creationIntervalMs: 50
      workloads:
      - {className: small, runtimeMs: 200, priority: 50, request: 1}
    - count: 10
      creationIntervalMs: 300
      workloads:
      - {className: large, runtimeMs: 600, priority: 200, request: 8}
"#;

fn run_generator(text: &str, scenario: &ScenarioSpec) -> SimOutcome {
    let mut setup = Setup::from_yaml(text).unwrap();
    setup.expand_generators();
    let model = Model::build(&setup).unwrap();
    simulate(Scheduler::new(model), scenario, None)
}

#[test]
fn generator_runs_to_completion_with_sane_metrics() {
    let o = run_generator(SMALL_GENERATOR, &ScenarioSpec::default());
    let m = &o.metrics;
    assert_eq!(m.classes["small"].workloads, 2 * 3 * 40);
    assert_eq!(m.classes["large"].workloads, 2 * 3 * 10);
    for c in m.classes.values() {
        assert_eq!(c.admitted, c.workloads, "everything is admitted eventually");
        assert!(c.p50_ms <= c.p90_ms && c.p90_ms <= c.max_ms);
    }
    let r = simulation_report(&o);
    assert!(
        r.workloads.iter().all(|w| w.state == "Finished"),
        "all finish"
    );
    for q in m.cluster_queues.values() {
        assert!(
            q.utilization_pct > 0.0 && q.utilization_pct <= 100.0,
            "{q:?}"
        );
    }
    // The last workload arrives at 39 × 50 ms and runs 200 ms, so the run is at least that long.
    assert!(m.elapsed_ms >= 39 * 50 + 200);
}

#[test]
fn simulation_is_deterministic() {
    let a = run_generator(SMALL_GENERATOR, &ScenarioSpec::default());
    let b = run_generator(SMALL_GENERATOR, &ScenarioSpec::default());
    let ja = serde_json::to_string(&simulation_report(&a)).unwrap();
    let jb = serde_json::to_string(&simulation_report(&b)).unwrap();
    assert_eq!(ja, jb);
}

#[test]
fn more_heads_per_cycle_never_slows_admission_in_a_queue_bound_setup() {
    // Plenty of quota: only the one-head-per-cycle rule limits admissions.
    let text = SMALL_GENERATOR
        .replace("nominalQuota: 10", "nominalQuota: 1000")
        .replace("creationIntervalMs: 50", "creationIntervalMs: 1");
    let one = run_generator(&text, &ScenarioSpec::default());
    let four = run_generator(
        &text,
        &ScenarioSpec {
            heads_per_cycle: 4,
            ..ScenarioSpec::default()
        },
    );
    let mean = |o: &SimOutcome| o.metrics.classes["small"].mean_ms;
    assert!(
        mean(&four) < mean(&one),
        "{} vs {}",
        mean(&four),
        mean(&one)
    );
}

#[test]
fn json_report_shape() {
    let o = run_generator(SMALL_GENERATOR, &ScenarioSpec::default());
    let v = serde_json::to_value(simulation_report(&o)).unwrap();
    assert!(v["cycles"].as_u64().unwrap() > 0);
    let w = &v["workloads"][0];
    for key in [
        "key",
        "state",
        "clusterQueue",
        "podSetAssignments",
        "conditions",
    ] {
        assert!(w.get(key).is_some(), "missing {key}");
    }
    assert!(v["metrics"]["classes"]["small"]["p90Ms"].is_i64());
}

#[test]
fn html_report_is_self_contained() {
    let o = run_generator(SMALL_GENERATOR, &ScenarioSpec::default());
    let page = html(&o, "test <report>");
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("<svg"));
    assert!(page.contains("test &lt;report&gt;"));
    assert!(
        !page.contains("http://")
            || page
                .matches("http://")
                .all(|_| page.contains("xmlns=\"http://www.w3.org/2000/svg\""))
    );
    assert!(!page.contains("<script"));
}

#[test]
fn generate_round_trips_through_yaml() {
    let mut setup = Setup::from_yaml(SMALL_GENERATOR).unwrap();
    setup.expand_generators();
    let text = setup.to_yaml();
    let back = Setup::from_yaml(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.cluster_queues.len(), 6);
    assert_eq!(back.workloads.len(), setup.workloads.len());
    assert_eq!(back.workloads[5], setup.workloads[5]);
}

const PRICED: &str = r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: ml}
spec: {clusterQueue: team}
---
apiVersion: kubetrain.dev/v1alpha1
kind: QueueScenario
metadata: {name: s}
spec:
  cycleMs: 1000
  prices: {a100: {nvidia.com/gpu: 2.0}}
"#;

fn job(name: &str, gpus: u32, runtime: &str, arrival: &str) -> String {
    format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata:\n  name: {name}\n  namespace: ml\n  annotations: {{kubetrain.dev/runtime: \"{runtime}\", kubetrain.dev/arrival: \"{arrival}\", kubetrain.dev/class: train}}\nspec:\n  queueName: q\n  podSets:\n  - name: main\n    count: 1\n    template:\n      spec:\n        containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: {gpus}}}}}}}]\n"
    )
}

#[test]
fn cost_view_counts_compute_and_idle() {
    // One 8-GPU job for one hour on an 8-GPU queue at 2.0 per GPU-hour: compute = 16.
    let text = format!("{PRICED}{}", job("a", 8, "1h", "0"));
    let setup = Setup::from_yaml(&text).unwrap();
    let scenario = setup.scenario.clone().unwrap();
    let o = simulate(
        Scheduler::new(Model::build(&setup).unwrap()),
        &scenario,
        None,
    );
    let c = o.metrics.cost.as_ref().unwrap();
    assert!((c.compute - 16.0).abs() < 1e-6, "{c:?}");
    assert_eq!(c.accepted, 1);
    assert!(c.effective_per_accepted >= c.compute);
}

#[test]
fn explain_names_position_shortfall_and_blockers() {
    let text = format!(
        "{PRICED}{}{}{}",
        job("running", 6, "1h", "0"),
        job("waiting", 4, "1h", "1s"),
        job("behind", 4, "1h", "2s"),
    );
    let setup = Setup::from_yaml(&text).unwrap();
    let mut s = Scheduler::new(Model::build(&setup).unwrap());
    s.arrive_all();
    s.run_until_stable(Some(10));
    let wl = s
        .model()
        .workloads
        .iter()
        .position(|w| w.key == "ml/waiting")
        .unwrap();
    let e = explain(&s, wl);
    assert_eq!(e.state, "Pending");
    assert_eq!(e.reason, "WaitingForQuota");
    assert_eq!(e.position, Some(1));
    assert_eq!(e.queue_length, 2);
    assert_eq!(e.shortfalls.len(), 1);
    assert_eq!(e.shortfalls[0].missing, "2");
    assert_eq!(
        e.shortfalls[0].blocking_workloads,
        vec!["ml/running".to_string()]
    );
    let text = e.to_text();
    assert!(
        text.contains("insufficient unused quota for nvidia.com/gpu in flavor a100, 2 more needed"),
        "{text}"
    );
}

#[test]
fn trainjob_bridge_round_trip() {
    let text = r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec:
  nodeLabels: {gpu.example.com/type: h100}
  tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors: [{name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: 32}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: ml}
spec: {clusterQueue: team}
"#;
    let mut setup = Setup::from_yaml(text).unwrap();
    let ps = PodSetInput {
        name: "Node".into(),
        count: 4,
        requests: [("nvidia.com/gpu".to_string(), Quantity::parse("8").unwrap())].into(),
        ..PodSetInput::default()
    };
    setup
        .workloads
        .push(workload_for_trainjob("ml", "llama", "q", 0, &[ps]));
    let mut s = Scheduler::new(Model::build(&setup).unwrap());
    s.arrive_all();
    s.cycle();
    let adm = s.state(0).admission.as_ref().expect("admitted");
    let patch = runtime_patch(s.model(), adm, &["Node".to_string()]);
    assert_eq!(patch["manager"], "kueue.x-k8s.io/manager");
    let rj = &patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0];
    assert_eq!(rj["name"], "Node");
    let pod = &rj["template"]["spec"]["template"];
    assert_eq!(pod["spec"]["nodeSelector"]["gpu.example.com/type"], "h100");
    assert_eq!(pod["spec"]["tolerations"][0]["key"], "gpu");
    assert_eq!(pod["metadata"]["labels"]["kueue.x-k8s.io/podset"], "node");
}

/// `borrower` has 1 cpu and 2 GPUs of nominal quota and borrows 5 more cpus from `lender`: s180-cq2 of the
/// 2026-12-06 random differential (0 cpu, 2 GPUs, 6 cpus borrowed) reported 7660 % because the utilization
/// added milli-cpus and GPUs together and counted borrowed usage against the queue's own quota. The model
/// admitted nothing beyond the cohort's quota (Kueue admitted the same); only the figure was wrong.
const BORROWING_FOR_UTILIZATION: &str = r#"apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: f}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: borrower}
spec:
  cohortName: c
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, example.com/gpu]
    flavors: [{name: f, resources: [{name: cpu, nominalQuota: 1}, {name: example.com/gpu, nominalQuota: 2}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: lender}
spec:
  cohortName: c
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, example.com/gpu]
    flavors: [{name: f, resources: [{name: cpu, nominalQuota: 8}, {name: example.com/gpu, nominalQuota: 0}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: q, namespace: ns}
spec: {clusterQueue: borrower}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: w, namespace: ns, annotations: {kubetrain.dev/runtime: 10s}}
spec:
  queueName: q
  podSets:
  - {name: main, count: 1, template: {spec: {containers: [{name: c, resources: {requests: {cpu: 6, example.com/gpu: 1}}}]}}}
"#;

#[test]
fn utilization_counts_each_resource_in_its_unit_and_never_passes_the_nominal_quota() {
    let setup = Setup::from_yaml(BORROWING_FOR_UTILIZATION).unwrap();
    let o = simulate(
        Scheduler::new(Model::build(&setup).unwrap()),
        &ScenarioSpec::default(),
        None,
    );
    let m = &o.metrics;
    assert_eq!(
        o.sched.state(0).phase,
        kubetrain_kueue::sched::Phase::Finished
    );
    // While it runs (10 s of the run), the borrower's cpu is full (6 used, 1 its own: 100 %) and its GPUs
    // half used (1 of 2): 75 %. The lender's own quota is not its usage: 0 %.
    let ran = 10_000.0 / m.elapsed_ms as f64;
    let borrower = m.cluster_queues["borrower"].utilization_pct;
    assert!((borrower - 75.0 * ran).abs() < 0.01, "{borrower} of {m:?}");
    assert_eq!(m.cluster_queues["lender"].utilization_pct, 0.0);
    assert!((m.mean_utilization_pct - borrower / 2.0).abs() < 1e-9);
    for s in &o.samples {
        assert!((0.0..=100.0).contains(&s.utilization), "{s:?}");
    }
    assert!(
        o.samples
            .iter()
            .any(|s| (s.utilization - 37.5).abs() < 1e-9)
    );
}
