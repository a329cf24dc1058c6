//! Topology-aware scheduling (issue 15, item 5): table cases from Kueue v0.19.1
//! `pkg/cache/scheduler/tas_cache_test.go` `TestFindTopologyAssignments` (BestFit profile, the
//! `defaultNodes` inventory), run end to end through the model (Topology, Nodes, a TAS flavor, a
//! Workload with a `topologyRequest`), plus the flavor-matching and quota/topology interplay of
//! `flavorassigner.go` and a proptest law: no node ever holds more pods than its capacity.

use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::conditions::find;
use kubetrain_kueue::sched::{Phase, Scheduler};
use proptest::prelude::*;

const BLOCK: &str = "cloud.com/topology-block";
const RACK: &str = "cloud.com/topology-rack";
const HOST: &str = "kubernetes.io/hostname";

/// upstream's `defaultNodes`:
/// ```text
///      b1                   b2
///   /      \             /      \
///  r1       r2          r1       r2
///  |      /  |  \       |         |
///  x3    x5  x1  x6     x2       x4 (2 cpu)
/// ```
const DEFAULT_NODES: &[(&str, &str, &str, &str)] = &[
    ("b1", "r1", "x3", "1"),
    ("b1", "r2", "x5", "1"),
    ("b1", "r2", "x1", "1"),
    ("b1", "r2", "x6", "1"),
    ("b2", "r1", "x2", "1"),
    ("b2", "r2", "x4", "2"),
];

fn node(block: &str, rack: &str, host: &str, cpu: &str, extra: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: {block}-{rack}-{host}\n  labels: {{node-group: tas, {BLOCK}: {block}, {RACK}: {rack}, {HOST}: {host}}}\n{extra}status:\n  allocatable: {{cpu: \"{cpu}\", memory: 1Gi, pods: \"10\"}}\n"
    )
}

/// A setup: Topology `default` with `levels`, flavor `tas` on it, a queue with 100 cpu of quota,
/// the nodes, and workloads given as (name, count, topologyRequest YAML).
fn setup(levels: &[&str], nodes: &str, workloads: &[(&str, i32, &str)]) -> String {
    let levels = levels
        .iter()
        .map(|l| format!("{{nodeLabel: {l}}}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut y = format!(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {{name: default}}\nspec: {{levels: [{levels}]}}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {{name: tas}}\nspec: {{nodeLabels: {{node-group: tas}}, topologyName: default}}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: cq}}\nspec:\n  namespaceSelector: {{}}\n  resourceGroups:\n  - coveredResources: [cpu]\n    flavors: [{{name: tas, resources: [{{name: cpu, nominalQuota: 100}}]}}]\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{name: lq, namespace: ns}}\nspec: {{clusterQueue: cq}}\n{nodes}"
    );
    for (i, (name, count, request)) in workloads.iter().enumerate() {
        y.push_str(&format!(
            "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: {name}, namespace: ns, annotations: {{kubetrain.dev/arrival: \"{i}s\"}}}}\nspec:\n  queueName: lq\n  podSets:\n  - name: main\n    count: {count}\n    topologyRequest: {request}\n    template:\n      spec:\n        containers: [{{name: c, resources: {{requests: {{cpu: \"1\"}}}}}}]\n"
        ));
    }
    y
}

fn default_nodes() -> String {
    DEFAULT_NODES
        .iter()
        .map(|(b, r, h, cpu)| node(b, r, h, cpu, ""))
        .collect()
}

fn run(yaml: &str) -> Scheduler {
    let setup = Setup::from_yaml(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let mut s = Scheduler::new(Model::build(&setup).unwrap_or_else(|e| panic!("{e}")));
    s.arrive_all();
    s.run_until_stable(Some(50));
    s
}

/// The placement of workload `i` as (last-level values joined by `/`, pods), or its
/// QuotaReserved message when pending.
fn placement(s: &Scheduler, i: usize) -> Result<Vec<(String, i32)>, String> {
    match &s.state(i).admission {
        Some(a) => {
            let t = a.pod_sets[0].topology.as_ref().expect("a TAS placement");
            Ok(t.domains.iter().map(|(v, n)| (v.join("/"), *n)).collect())
        }
        None => Err(find(&s.state(i).conditions, "QuotaReserved")
            .map(|c| format!("{}: {}", c.reason, c.message))
            .unwrap_or_default()),
    }
}

fn ok(domains: &[(&str, i32)]) -> Result<Vec<(String, i32)>, String> {
    Ok(domains
        .iter()
        .map(|(d, n)| ((*d).to_string(), *n))
        .collect())
}

#[test]
fn find_topology_assignments_table() {
    let two = [BLOCK, RACK];
    let three = [BLOCK, RACK, HOST];
    type Placement = Result<Vec<(String, i32)>, String>;
    let cases: Vec<(&str, &[&str], i32, String, Placement)> = vec![
        (
            "host required; single Pod fits in the host; BestFit",
            &three,
            1,
            format!("{{required: {HOST}}}"),
            ok(&[("b1/r1/x3", 1)]),
        ),
        (
            "rack required; single Pod fits in a rack; BestFit",
            &two,
            1,
            format!("{{required: {RACK}}}"),
            ok(&[("b1/r1", 1)]),
        ),
        (
            "rack required; multiple Pods fit in a rack; BestFit",
            &two,
            3,
            format!("{{required: {RACK}}}"),
            ok(&[("b1/r2", 3)]),
        ),
        (
            "rack required; multiple Pods fit in some racks; BestFit",
            &two,
            2,
            format!("{{required: {RACK}}}"),
            ok(&[("b2/r2", 2)]),
        ),
        (
            "block required; single Pod fits in a block and a single rack; BestFit",
            &two,
            1,
            format!("{{required: {BLOCK}}}"),
            ok(&[("b2/r1", 1)]),
        ),
        (
            "rack preferred; but only block can accommodate the workload; BestFit",
            &two,
            4,
            format!("{{preferred: {RACK}}}"),
            ok(&[("b1/r1", 1), ("b1/r2", 3)]),
        ),
        (
            "rack required; too many pods to fit in any rack; BestFit (not even on empty nodes: NoFit)",
            &two,
            4,
            format!("{{required: {RACK}}}"),
            Err("TopologyPlacementFailed: couldn't assign flavors to pod set main: topology \"default\" allows to fit only 3 out of 4 pod(s)".to_string()),
        ),
        (
            "block preferred; but the workload cannot be accommodate in entire topology; BestFit",
            &two,
            10,
            format!("{{preferred: {BLOCK}}}"),
            Err("TopologyPlacementFailed: couldn't assign flavors to pod set main: topology \"default\" allows to fit only 7 out of 10 pod(s)".to_string()),
        ),
    ];
    for (name, levels, count, request, want) in cases {
        let s = run(&setup(levels, &default_nodes(), &[("w", count, &request)]));
        assert_eq!(placement(&s, 0), want, "{name}");
    }
}

#[test]
fn nodes_that_cannot_host_the_pods_are_skipped() {
    // "no assignment as node is unschedulable; BestFit", "skip node which has untolerated taint;
    // BestFit", "no assignment as node does not have enough allocatable pods": x4 (2 cpu) is
    // the best fit for 2 pods in a rack until it is cordoned, tainted or full of pods.
    let request = format!("{{required: {RACK}}}");
    let variants = [
        ("spec: {unschedulable: true}\n", "b1/r2"),
        (
            "spec: {taints: [{key: gpu, value: \"yes\", effect: NoSchedule}]}\n",
            "b1/r2",
        ),
        ("", "b2/r2"),
    ];
    for (extra, want) in variants {
        let nodes: String = DEFAULT_NODES
            .iter()
            .map(|(b, r, h, cpu)| node(b, r, h, cpu, if *h == "x4" { extra } else { "" }))
            .collect();
        let s = run(&setup(&[BLOCK, RACK], &nodes, &[("w", 2, &request)]));
        assert_eq!(placement(&s, 0), ok(&[(want, 2)]), "x4 with {extra:?}");
    }
}

#[test]
fn admitted_placements_use_the_nodes() {
    // Two 3-pod workloads that each need one rack: only b1/r2 has 3 free cpu, so the second
    // one fits its quota but not the topology, and waits for the first.
    let request = format!("{{required: {RACK}}}");
    let s = run(&setup(
        &[BLOCK, RACK],
        &default_nodes(),
        &[("first", 3, &request), ("second", 3, &request)],
    ));
    assert_eq!(placement(&s, 0), ok(&[("b1/r2", 3)]));
    assert_eq!(
        placement(&s, 1),
        Err("WaitingForQuota: couldn't assign flavors to pod set second: topology \"default\" allows to fit only 2 out of 3 pod(s)".replace("second", "main"))
    );
    assert_eq!(s.state(1).phase, Phase::Pending);
    let e = kubetrain_kueue::explain::explain(&s, 1);
    assert_eq!(
        e.topology,
        vec!["pod set main: no rack has room for 3 pods; the largest fits 2".to_string()]
    );
    let first = kubetrain_kueue::explain::explain(&s, 0);
    assert!(
        first
            .to_text()
            .contains("Placement of pod set main: b1/r2 ×3"),
        "{}",
        first.to_text()
    );
}

#[test]
fn tas_flavor_matching() {
    // flavorassigner.go checkPodSetAndFlavorMatchForTAS: a pod set without a topology request
    // cannot use a TAS flavor when the queue also has a non-TAS one ("supports only
    // TopologyAwareScheduling"), and a request for a level the topology lacks skips the flavor.
    let yaml = setup(&[BLOCK, RACK], &default_nodes(), &[("w", 1, "{required: zone}")])
        .replace(
            "flavors: [{name: tas, resources: [{name: cpu, nominalQuota: 100}]}]",
            "flavors: [{name: tas, resources: [{name: cpu, nominalQuota: 100}]}, {name: plain, resources: [{name: cpu, nominalQuota: 100}]}]",
        )
        + "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: plain}\n";
    let s = run(&yaml);
    assert_eq!(
        placement(&s, 0),
        Err("NoMatchingFlavor: couldn't assign flavors to pod set main: Flavor \"plain\" does not support TopologyAwareScheduling, Flavor \"tas\" does not contain the requested level".to_string())
    );
    let plain = yaml.replace("topologyRequest: {required: zone}", "topologyRequest: null");
    let s = run(&plain);
    let a = s
        .state(0)
        .admission
        .as_ref()
        .expect("admitted on the plain flavor");
    assert_eq!(
        s.model().flavors[a.pod_sets[0].resources[0].1].name,
        "plain"
    );
    assert!(a.pod_sets[0].topology.is_none());
}

#[test]
fn missing_topology_makes_the_queue_inactive() {
    let yaml = setup(&[BLOCK], &default_nodes(), &[("w", 1, "{required: x}")])
        .replace("topologyName: default", "topologyName: nowhere");
    let s = run(&yaml);
    let (reason, message) = s.model().cqs[0].inactive.clone().expect("inactive");
    assert_eq!(reason, "TopologyNotFound");
    assert_eq!(
        message,
        "Can't admit new workloads: there is no Topology \"nowhere\" for TAS flavor \"tas\"."
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// However workloads ask (required rack, preferred rack, unconstrained) and however large
    /// they are, no node ever holds more pods than its cpu and `pods` capacity allow.
    #[test]
    fn tas_never_overfills_a_node(
        cpus in proptest::collection::vec(0u32..4, 6),
        wls in proptest::collection::vec((1i32..6, 0usize..3), 1..8),
    ) {
        let nodes: String = DEFAULT_NODES
            .iter()
            .zip(&cpus)
            .map(|((b, r, h, _), cpu)| node(b, r, h, &cpu.to_string(), ""))
            .collect();
        let requests = [format!("{{required: {RACK}}}"), format!("{{preferred: {RACK}}}"), "{unconstrained: true}".to_string()];
        let names: Vec<String> = (0..wls.len()).map(|i| format!("w{i}")).collect();
        let specs: Vec<(&str, i32, &str)> = wls
            .iter()
            .zip(&names)
            .map(|((count, kind), name)| (name.as_str(), *count, requests[*kind].as_str()))
            .collect();
        let s = run(&setup(&[BLOCK, RACK, HOST], &nodes, &specs));
        let mut pods_on = vec![0i32; s.model().nodes.len()];
        for st in s.states() {
            let Some(a) = &st.admission else { continue };
            let t = a.pod_sets[0].topology.as_ref().expect("admitted with a placement");
            prop_assert_eq!(t.domains.iter().map(|d| d.1).sum::<i32>(), a.pod_sets[0].count);
            for &(n, pods) in &t.per_node {
                pods_on[n] += pods;
            }
        }
        for (i, n) in s.model().nodes.iter().enumerate() {
            let cpu = i32::try_from(cpus[i]).unwrap();
            prop_assert!(pods_on[i] <= cpu.min(10), "node {} holds {} pods with {} cpu", n.name, pods_on[i], cpu);
        }
    }
}
