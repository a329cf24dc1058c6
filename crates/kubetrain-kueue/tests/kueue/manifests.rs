//! Our example setups under examples/manifests/kueue load, validate and simulate.

use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::quantity::Quantity;
use kubetrain_kueue::sched::Scheduler;
use kubetrain_kueue::sim::engine::simulate;

fn load(files: &[&str]) -> Setup {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/manifests/kueue");
    let mut setup = Setup::default();
    for f in files {
        let p = dir.join(f);
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        setup
            .add_yaml(f, &text)
            .unwrap_or_else(|e| panic!("{f}: {e}"));
    }
    setup.expand_generators();
    setup
}

#[test]
fn gpu_teams_runs_to_completion_with_costs() {
    let setup = load(&["gpu-teams.yaml", "gpu-teams-workloads.yaml"]);
    let scenario = setup.scenario.clone().expect("scenario");
    let o = simulate(
        Scheduler::new(Model::build(&setup).unwrap()),
        &scenario,
        None,
    );
    let cost = o.metrics.cost.as_ref().expect("prices given");
    assert_eq!(cost.accepted, setup.workloads.len());
    assert!(cost.compute > 0.0 && cost.idle >= 0.0);
    // Prod reclaims what research borrowed: at least one preemption.
    assert!(o.metrics.preemptions >= 1);
}

fn fair_split(weight_a: &str) -> (usize, usize, usize) {
    let mut setup = load(&["fair-sharing.yaml"]);
    setup
        .workloads
        .retain(|w| w.metadata.namespace.as_deref() != Some("team-c"));
    for cq in &mut setup.cluster_queues {
        if cq.metadata.name == "team-a" {
            cq.spec.fair_sharing.as_mut().unwrap().weight =
                Some(Quantity::parse(weight_a).unwrap());
        }
    }
    let model = Model::build(&setup).unwrap();
    assert!(model.settings.fair_sharing.is_some());
    let mut s = Scheduler::new(model);
    s.arrive_all();
    s.run_until_stable(Some(100));
    let admitted = |cq: &str| s.admitted_in(s.model().cq_id(cq).unwrap()).len();
    let preemptions = s.states().iter().map(|w| w.preemptions as usize).sum();
    (admitted("team-a"), admitted("team-b"), preemptions)
}

#[test]
fn fair_sharing_respects_weights() {
    // 32 GPUs, 4 per workload, 6 workloads each in team-a and team-b (nominal 8 each), team-c
    // (nominal 16) idle. Both borrow two slots; then team-a with weight 2 has the lower share
    // and takes one back from team-b (strategy LessThanInitialShare: 187.5 < 250).
    let (a, b, p) = fair_split("2");
    assert_eq!((a, b, p), (5, 3, 1), "weight 2 wins one more slot");
    let (a, b, p) = fair_split("1");
    assert_eq!((a, b, p), (4, 4, 0), "equal weights split evenly");
}

#[test]
fn generator_configs_load() {
    for f in ["baseline-generator.yaml", "large-scale-generator.yaml"] {
        let setup = load(&[f]);
        assert!(!setup.workloads.is_empty());
        Model::build(&setup).unwrap();
    }
}

#[test]
fn gpu_tas_places_checks_and_requeues() {
    let setup = load(&["gpu-tas.yaml"]);
    let scenario = setup.scenario.clone().expect("scenario");
    let o = simulate(
        Scheduler::new(Model::build(&setup).unwrap()),
        &scenario,
        None,
    );
    let s = &o.sched;
    let idx = |name: &str| {
        s.model()
            .workloads
            .iter()
            .position(|w| w.key == format!("ml/{name}"))
            .unwrap()
    };
    // The fine-tune waited two minutes for the capacity check, then ran in one rack.
    let ft = &s.state(idx("finetune-32"));
    assert_eq!(ft.first_admitted_ms, Some(120_000));
    let placement = ft.finished_admission.as_ref().unwrap().pod_sets[0]
        .topology
        .clone()
        .unwrap();
    assert_eq!(placement.domains.len(), 4);
    assert!(
        placement
            .domains
            .iter()
            .all(|(v, n)| v[1] == placement.domains[0].0[1] && *n == 1)
    );
    // Pods never ready: two timeouts, then deactivated at the backoff limit.
    let pt = &s.state(idx("pretrain-64"));
    assert_eq!(pt.life.pods_ready_timeouts, 2);
    assert!(pt.life.deactivated);
    // 8 nodes in one rack of 4: never placed.
    let llm = &s.state(idx("llm-64"));
    assert!(llm.first_admitted_ms.is_none());
    let text = kubetrain_kueue::explain::explain(s, idx("llm-64")).to_text();
    assert!(
        text.contains("no rack has 64 free nvidia.com/gpu for 8 pods; the largest has room for 4 pods (32 nvidia.com/gpu)"),
        "{text}"
    );
    let html = kubetrain_kueue::sim::report::html(&o, "gpu-tas");
    for section in [
        "Admission checks",
        "waitForPodsReady",
        "Topology-aware placement",
    ] {
        assert!(html.contains(section), "{section}");
    }
}
