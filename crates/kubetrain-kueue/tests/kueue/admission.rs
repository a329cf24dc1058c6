//! Table tests for admission rules and messages, written from kueue.md §2 and §2.10.

use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::conditions::find;
use kubetrain_kueue::sched::{Phase, Scheduler};

const FLAVORS: &str = r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
spec: {nodeLabels: {gpu: a100}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: spot}
spec:
  nodeLabels: {gpu: h100-spot}
  nodeTaints: [{key: spot, value: "true", effect: NoSchedule}]
"#;

fn cq(
    name: &str,
    cohort: Option<&str>,
    flavors: &[(&str, &str, Option<&str>)],
    extra: &str,
) -> String {
    let mut f = String::new();
    for (flavor, nominal, bl) in flavors {
        let bl = bl
            .map(|b| format!(", borrowingLimit: {b}"))
            .unwrap_or_default();
        f.push_str(&format!(
            "    - name: {flavor}\n      resources: [{{name: nvidia.com/gpu, nominalQuota: {nominal}{bl}}}]\n"
        ));
    }
    let cohort = cohort
        .map(|c| format!("  cohortName: {c}\n"))
        .unwrap_or_default();
    format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: {name}}}\nspec:\n{cohort}  namespaceSelector: {{}}\n{extra}  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n{f}---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{name: {name}, namespace: ml}}\nspec: {{clusterQueue: {name}}}\n"
    )
}

fn wl(name: &str, queue: &str, count: u32, gpus: u32, priority: i32, extra_spec: &str) -> String {
    format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n  queueName: {queue}\n  priority: {priority}\n  podSets:\n  - name: main\n    count: {count}\n    template:\n      spec:\n{extra_spec}        containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: {gpus}}}}}}}]\n"
    )
}

fn admitted(name: &str, queue: &str, count: u32, gpus: u32, priority: i32, flavor: &str) -> String {
    format!(
        "{}status:\n  admission:\n    clusterQueue: {queue}\n    podSetAssignments:\n    - name: main\n      count: {count}\n      flavors: {{nvidia.com/gpu: {flavor}}}\n      resourceUsage: {{nvidia.com/gpu: {}}}\n",
        wl(name, queue, count, gpus, priority, ""),
        count * gpus
    )
}

fn run(yaml: &str, cycles: u64) -> Scheduler {
    let setup = Setup::from_yaml(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let mut s = Scheduler::new(Model::build(&setup).unwrap_or_else(|e| panic!("{e}")));
    s.arrive_all();
    for _ in 0..cycles {
        s.cycle();
    }
    s
}

fn state(s: &Scheduler, key: &str) -> (Phase, String, String) {
    let i = s
        .model()
        .workloads
        .iter()
        .position(|w| w.key == key)
        .unwrap_or_else(|| panic!("no workload {key}"));
    let c = find(&s.state(i).conditions, "QuotaReserved").cloned();
    (
        s.state(i).phase,
        c.as_ref().map(|c| c.reason.clone()).unwrap_or_default(),
        c.map(|c| c.message).unwrap_or_default(),
    )
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "a table test: one case per row, read top to bottom"
)]
fn pending_messages_table() {
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "fits",
            format!(
                "{FLAVORS}{}{}",
                cq("team", None, &[("a100", "8", None)], ""),
                wl("w", "team", 2, 2, 0, "")
            ),
            "QuotaReserved",
            "Quota reserved in ClusterQueue team",
        ),
        (
            "exceeds max quota",
            format!(
                "{FLAVORS}{}{}",
                cq("team", None, &[("a100", "8", None)], ""),
                wl("w", "team", 3, 4, 0, "")
            ),
            "ExceedsMaxQuota",
            "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor a100, previously considered podsets requests (0) + current podset request (12) > maximum capacity (8)",
        ),
        (
            "waiting for quota with usage",
            format!(
                "{FLAVORS}{}{}{}",
                cq("team", None, &[("a100", "8", None)], ""),
                admitted("old", "team", 1, 6, 10, "a100"),
                wl("w", "team", 1, 6, 0, "")
            ),
            "WaitingForQuota",
            "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor a100, 4 more needed",
        ),
        (
            "untolerated taint then quota",
            format!(
                "{FLAVORS}{}{}",
                cq(
                    "team",
                    None,
                    &[("spot", "8", None), ("a100", "2", None)],
                    ""
                ),
                wl("w", "team", 1, 4, 0, "")
            ),
            "ExceedsMaxQuota",
            "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor a100, previously considered podsets requests (0) + current podset request (4) > maximum capacity (2), untolerated taint {spot true NoSchedule <nil>} in flavor spot",
        ),
        (
            "node selector mismatch",
            format!(
                "{FLAVORS}{}{}",
                cq("team", None, &[("a100", "8", None)], ""),
                wl("w", "team", 1, 1, 0, "        nodeSelector: {gpu: h100}\n")
            ),
            "NoMatchingFlavor",
            "couldn't assign flavors to pod set main: flavor a100 doesn't match node affinity",
        ),
        (
            "resource not in queue",
            format!(
                "{FLAVORS}{}{}",
                cq("team", None, &[("a100", "8", None)], ""),
                wl("w", "team", 1, 1, 0, "")
                    .replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 1, cpu: 2")
            ),
            "NoMatchingFlavor",
            "couldn't assign flavors to pod set main: resource cpu unavailable in ClusterQueue",
        ),
        (
            "missing local queue",
            format!(
                "{FLAVORS}{}{}",
                cq("team", None, &[("a100", "8", None)], ""),
                wl("w", "nope", 1, 1, 0, "")
            ),
            "Misconfigured",
            "LocalQueue nope doesn't exist",
        ),
        (
            "missing flavor makes the queue inactive",
            format!(
                "{}{}",
                cq("team", None, &[("a100", "8", None)], ""),
                wl("w", "team", 1, 1, 0, "")
            ),
            "Suspended",
            "ClusterQueue team is inactive",
        ),
        (
            "stopped queue",
            format!(
                "{FLAVORS}{}{}",
                cq("team", None, &[("a100", "8", None)], "  stopPolicy: Hold\n"),
                wl("w", "team", 1, 1, 0, "")
            ),
            "Suspended",
            "ClusterQueue team is inactive",
        ),
        (
            "namespace selector",
            format!(
                "{FLAVORS}{}{}",
                cq("team", None, &[("a100", "8", None)], "").replace(
                    "namespaceSelector: {}",
                    "namespaceSelector: {matchLabels: {team: ml}}"
                ),
                wl("w", "team", 1, 1, 0, "")
            ),
            "Misconfigured",
            "workload namespace doesn't match ClusterQueue selector",
        ),
        (
            "tolerated taint admits on spot",
            format!(
                "{FLAVORS}{}{}",
                cq("team", None, &[("spot", "8", None)], ""),
                wl(
                    "w",
                    "team",
                    1,
                    1,
                    0,
                    "        tolerations: [{key: spot, operator: Exists}]\n"
                )
            ),
            "QuotaReserved",
            "Quota reserved in ClusterQueue team",
        ),
    ];
    for (name, yaml, reason, message) in cases {
        let s = run(&yaml, 1);
        let (_, r, m) = state(&s, "ml/w");
        assert_eq!((r.as_str(), m.as_str()), (reason, message), "case {name}");
    }
}

#[test]
fn borrowing_from_cohort_and_limits() {
    let yaml = format!(
        "{FLAVORS}{}{}{}",
        cq("a", Some("c"), &[("a100", "4", Some("2"))], ""),
        cq("b", Some("c"), &[("a100", "4", None)], ""),
        wl("w", "a", 1, 6, 0, ""),
    );
    let s = run(&yaml, 1);
    assert_eq!(state(&s, "ml/w").0, Phase::Admitted);
    let yaml = yaml.replace("nvidia.com/gpu: 6", "nvidia.com/gpu: 7");
    let s = run(&yaml, 1);
    let (phase, reason, msg) = state(&s, "ml/w");
    assert_eq!(phase, Phase::Pending);
    assert_eq!(reason, "ExceedsMaxQuota");
    assert!(msg.ends_with("> maximum capacity (6)"), "{msg}");
}

#[test]
fn preemption_within_queue_then_admission() {
    let yaml = format!(
        "{FLAVORS}{}{}{}",
        cq(
            "team",
            None,
            &[("a100", "8", None)],
            "  preemption: {withinClusterQueue: LowerPriority}\n"
        ),
        admitted("low", "team", 1, 8, 0, "a100"),
        wl("high", "team", 1, 4, 100, ""),
    );
    let s = run(&yaml, 1);
    let (phase, reason, msg) = state(&s, "ml/high");
    assert_eq!(phase, Phase::Pending);
    assert_eq!(reason, "WaitingForPreemptedWorkloads");
    assert_eq!(
        msg,
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor a100, 4 more needed. Pending the preemption of 1 workload(s)"
    );
    let low = s
        .model()
        .workloads
        .iter()
        .position(|w| w.key == "ml/low")
        .unwrap();
    let p = find(&s.state(low).conditions, "Preempted").unwrap();
    assert_eq!(p.reason, "InClusterQueue");
    assert!(
        p.message
            .starts_with("Preempted to accommodate a workload (UID: ")
    );
    assert!(p.message.ends_with(
        "due to prioritization in the ClusterQueue; preemptor path: /team; preemptee path: /team"
    ));
    let mut s = s;
    s.cycle();
    assert_eq!(state(&s, "ml/high").0, Phase::Admitted);
    // Equal priority is never preempted with LowerPriority.
    let s = run(&yaml.replace("priority: 100", "priority: 0"), 2);
    assert_eq!(state(&s, "ml/high").1, "WaitingForQuota");
}

#[test]
fn reclaim_within_cohort() {
    let yaml = format!(
        "{FLAVORS}{}{}{}{}",
        cq(
            "a",
            Some("c"),
            &[("a100", "4", None)],
            "  preemption: {reclaimWithinCohort: Any}\n"
        ),
        cq("b", Some("c"), &[("a100", "4", None)], ""),
        admitted("borrower", "b", 1, 8, 100, "a100"),
        wl("w", "a", 1, 4, 0, ""),
    );
    let mut s = run(&yaml, 1);
    let b = s
        .model()
        .workloads
        .iter()
        .position(|w| w.key == "ml/borrower")
        .unwrap();
    assert_eq!(
        find(&s.state(b).conditions, "Preempted").unwrap().reason,
        "InCohortReclamation"
    );
    s.cycle();
    assert_eq!(state(&s, "ml/w").0, Phase::Admitted);
    // With reclaimWithinCohort: Never the workload waits.
    let s = run(
        &yaml.replace("reclaimWithinCohort: Any", "reclaimWithinCohort: Never"),
        2,
    );
    assert_eq!(state(&s, "ml/w").0, Phase::Pending);
}

#[test]
fn partial_admission_reduces_count() {
    let yaml = format!(
        "{FLAVORS}{}{}",
        cq("team", None, &[("a100", "8", None)], ""),
        wl("w", "team", 12, 1, 0, "")
            .replace("    count: 12\n", "    count: 12\n    minCount: 4\n"),
    );
    let s = run(&yaml, 1);
    let i = 0;
    assert_eq!(s.state(i).phase, Phase::Admitted);
    assert_eq!(s.state(i).admission.as_ref().unwrap().pod_sets[0].count, 8);
}

#[test]
fn strict_fifo_blocks_best_effort_does_not() {
    let base = format!(
        "{FLAVORS}{}{}{}",
        cq(
            "team",
            None,
            &[("a100", "8", None)],
            "  queueingStrategy: StrictFIFO\n"
        ),
        wl("big", "team", 1, 8, 10, ""),
        wl("small", "team", 1, 2, 0, ""),
    );
    let with_usage = format!("{base}{}", admitted("run", "team", 1, 4, 0, "a100"));
    let s = run(&with_usage, 5);
    assert_eq!(
        state(&s, "ml/small").0,
        Phase::Pending,
        "StrictFIFO head blocks"
    );
    let s = run(
        &with_usage.replace("  queueingStrategy: StrictFIFO\n", ""),
        5,
    );
    assert_eq!(
        state(&s, "ml/small").0,
        Phase::Admitted,
        "BestEffortFIFO skips"
    );
}

#[test]
fn flavor_order_and_fungibility() {
    // First flavor full: default whenCanBorrow MayStopSearch still tries the next flavor when
    // the first does not fit at all.
    let yaml = format!(
        "{FLAVORS}{}{}{}",
        cq(
            "team",
            None,
            &[("a100", "4", None), ("spot", "8", None)],
            ""
        ),
        admitted("run", "team", 1, 4, 0, "a100"),
        wl(
            "w",
            "team",
            1,
            2,
            0,
            "        tolerations: [{key: spot, operator: Exists}]\n"
        ),
    );
    let s = run(&yaml, 1);
    let i = s
        .model()
        .workloads
        .iter()
        .position(|w| w.key == "ml/w")
        .unwrap();
    let a = s.state(i).admission.as_ref().expect("admitted");
    let flavor = a.pod_sets[0].resources[0].1;
    assert_eq!(s.model().flavors[flavor].name, "spot");
}
