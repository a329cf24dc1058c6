//! Partial admission (`minCount`, Kueue's `podset_reducer`): the cases of Kueue v0.19.2's
//! `pkg/scheduler/scheduler_test.go` named "partial admission ...", translated to the model with their
//! quotas and outcomes, plus the sentence `queue explain` gives for a partially admitted workload.

use kubetrain_kueue::explain::explain;
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::conditions::find;
use kubetrain_kueue::sched::{Phase, Scheduler};

/// Kueue's test ClusterQueues: `sales` (cpu 50 in flavor `default`) and `eng-beta` (example.com/gpu 20 in
/// `model-a`, preempting lower priorities within the queue).
const SETUP: &str = r#"
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: model-a}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: sales}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 50}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: sales}
spec: {clusterQueue: sales}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: eng-beta}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [example.com/gpu]
    flavors: [{name: model-a, resources: [{name: example.com/gpu, nominalQuota: 20}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: main, namespace: eng-beta}
spec: {clusterQueue: eng-beta}
"#;

/// One pod set: `(name, count, minCount, resource, per-pod quantity)`.
type Set<'a> = (&'a str, u32, Option<u32>, &'a str, &'a str);

fn workload(namespace: &str, name: &str, priority: i32, sets: &[Set<'_>]) -> String {
    let mut out = format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: {name}, namespace: {namespace}}}\n\
         spec:\n  queueName: main\n  priority: {priority}\n  podSets:\n"
    );
    for (set, count, min, resource, each) in sets {
        let min = min
            .map(|m| format!("    minCount: {m}\n"))
            .unwrap_or_default();
        out.push_str(&format!(
            "  - name: {set}\n    count: {count}\n{min}    template:\n      spec:\n        containers: \
             [{{name: c, resources: {{requests: {{{resource}: \"{each}\"}}}}}}]\n"
        ));
    }
    out
}

/// `old` in eng-beta: priority -4, 10 GPUs admitted.
fn old_in_eng_beta() -> String {
    format!(
        "{}status:\n  admission:\n    clusterQueue: eng-beta\n    podSetAssignments:\n    - name: one\n      count: 10\n      \
         flavors: {{example.com/gpu: model-a}}\n      resourceUsage: {{example.com/gpu: \"10\"}}\n",
        workload(
            "eng-beta",
            "old",
            -4,
            &[("one", 10, None, "example.com/gpu", "1")]
        )
    )
}

fn run(yaml: &str) -> Scheduler {
    let setup = Setup::from_yaml(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let mut s = Scheduler::new(Model::build(&setup).unwrap_or_else(|e| panic!("{e}")));
    s.arrive_all();
    s.cycle();
    s
}

fn index(s: &Scheduler, key: &str) -> usize {
    s.model()
        .workloads
        .iter()
        .position(|w| w.key == key)
        .unwrap_or_else(|| panic!("no workload {key}"))
}

fn counts(s: &Scheduler, key: &str) -> Vec<(String, i32)> {
    let admission = s.state(index(s, key)).admission.as_ref().expect("admitted");
    admission
        .pod_sets
        .iter()
        .map(|p| (p.name.clone(), p.count))
        .collect()
}

#[test]
fn single_variable_pod_set() {
    let yaml = format!(
        "{SETUP}{}",
        workload("sales", "new", 0, &[("one", 50, Some(20), "cpu", "2")])
    );
    let s = run(&yaml);
    assert_eq!(counts(&s, "sales/new"), [("one".to_owned(), 25)]);
    let e = explain(&s, index(&s, "sales/new"));
    assert_eq!(
        e.partial_admission,
        [
            "pod set one admitted with 25 of 50 pods (partial admission: quota for 50 not available in \
ClusterQueue sales, not even by preemption; minCount 20)"
        ]
    );
    assert!(
        e.to_text()
            .contains("Partially admitted: pod set one admitted with 25 of 50 pods")
    );
}

#[test]
fn single_variable_pod_set_preempts_first() {
    // The full count fits once `old` is preempted: Kueue preempts instead of admitting 10 now.
    let yaml = format!(
        "{SETUP}{}{}",
        workload(
            "eng-beta",
            "new",
            4,
            &[("one", 20, Some(10), "example.com/gpu", "1")]
        ),
        old_in_eng_beta()
    );
    let s = run(&yaml);
    let new = s.state(index(&s, "eng-beta/new"));
    assert_eq!(new.phase, Phase::Pending);
    let reserved = find(&new.conditions, "QuotaReserved").expect("QuotaReserved");
    assert_eq!(reserved.reason, "WaitingForPreemptedWorkloads");
    assert!(
        reserved.message.contains(
            "insufficient unused quota for example.com/gpu in flavor model-a, 10 more needed"
        ),
        "{}",
        reserved.message
    );
    let old = s.state(index(&s, "eng-beta/old"));
    assert_eq!(
        find(&old.conditions, "Preempted").map(|c| c.reason.as_str()),
        Some("InClusterQueue")
    );
}

#[test]
fn single_variable_pod_set_preempts_with_partial_admission() {
    // 30 never fits in 20: the reduced count (20) fits after preempting `old`, 10 more needed.
    let yaml = format!(
        "{SETUP}{}{}",
        workload(
            "eng-beta",
            "new",
            4,
            &[("one", 30, Some(10), "example.com/gpu", "1")]
        ),
        old_in_eng_beta()
    );
    let s = run(&yaml);
    let new = s.state(index(&s, "eng-beta/new"));
    assert_eq!(new.phase, Phase::Pending);
    let reserved = find(&new.conditions, "QuotaReserved").expect("QuotaReserved");
    assert!(
        reserved.message.contains("10 more needed"),
        "{}",
        reserved.message
    );
    let old = s.state(index(&s, "eng-beta/old"));
    assert_eq!(
        find(&old.conditions, "Preempted").map(|c| c.reason.as_str()),
        Some("InClusterQueue")
    );
}

/// Kueue's scheduler test "partial admission multiple variable pod sets" bypasses the Workload webhook, which
/// allows `minCount` on at most one pod set; the model validates as the API server does, so such a Workload is
/// refused when the model is built.
#[test]
fn multiple_variable_pod_sets_are_refused_as_the_webhook_refuses_them() {
    let yaml = format!(
        "{SETUP}{}",
        workload(
            "sales",
            "new",
            0,
            &[
                ("one", 20, None, "cpu", "1"),
                ("two", 30, Some(10), "cpu", "1"),
                ("three", 15, Some(5), "cpu", "1"),
            ],
        )
    );
    let setup = Setup::from_yaml(&yaml).expect("the YAML loads");
    let error = Model::build(&setup).expect_err("refused").to_string();
    assert!(
        error.contains("spec.podSets: at most one podSet can use minCount"),
        "{error}"
    );
}

#[test]
fn partial_admission_disabled() {
    let gate = "---\napiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nfeatureGates: {PartialAdmission: false}\n";
    let new = workload("sales", "new", 0, &[("one", 50, Some(20), "cpu", "2")]);
    let s = run(&format!("{SETUP}{gate}{new}"));
    let state = s.state(index(&s, "sales/new"));
    assert_eq!(state.phase, Phase::Pending);
    let reserved = find(&state.conditions, "QuotaReserved").expect("QuotaReserved");
    assert!(
        reserved.message.starts_with(
            "couldn't assign flavors to pod set one: insufficient quota for cpu in flavor default"
        ),
        "{}",
        reserved.message
    );
    assert!(
        explain(&s, index(&s, "sales/new"))
            .partial_admission
            .is_empty()
    );
}
