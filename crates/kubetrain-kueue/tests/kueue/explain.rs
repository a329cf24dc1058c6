//! `explain` never contradicts itself (issue 39 item 4): a workload that can never fit says so
//! first with what to change and lists nobody to wait for; a missing queue label, a LocalQueue in
//! another namespace and a bare name given without namespace get clear answers.

use kubetrain_kueue::explain::{WorkloadLookupError, explain, find_workload};
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::Scheduler;

/// One ClusterQueue `team` with 8 GPUs of flavor a100 (no cohort), fed by LocalQueue `q` in
/// namespace ml and LocalQueue `shared` in namespace dev.
const SETUP: &str = r#"
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
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: shared, namespace: dev}
spec: {clusterQueue: team}
"#;

/// A Workload `namespace/name` of `pods` pods with `gpus` GPUs each; `queue` is its
/// `spec.queueName` line (empty: none).
fn workload(namespace: &str, name: &str, queue: &str, pods: u32, gpus: u32) -> String {
    format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  {queue}\n  podSets:\n  - name: node\n    count: {pods}\n    template:\n      spec:\n        containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: {gpus}}}}}}}]\n"
    )
}

/// The scheduler after admission settles, for `SETUP` plus `workloads`.
fn settled(workloads: &[String]) -> Scheduler {
    let setup = Setup::from_yaml(&format!("{SETUP}{}", workloads.concat())).unwrap();
    let mut s = Scheduler::new(Model::build(&setup).unwrap());
    s.arrive_all();
    s.run_until_stable(Some(10));
    s
}

#[test]
fn a_workload_that_can_never_fit_says_so_and_names_nobody_to_wait_for() {
    // 6 GPUs admitted; 3 pods × 4 GPUs = 12 against a maximum of 8: waiting never helps.
    let s = settled(&[
        workload("ml", "running", "queueName: q", 1, 6),
        workload("ml", "big", "queueName: q", 3, 4),
    ]);
    let e = explain(&s, s.workload_id("ml/big").unwrap());
    assert_eq!(e.reason, "ExceedsMaxQuota");
    assert!(e.preemption_targets.is_empty(), "{e:?}");
    assert!(e.shortfalls.is_empty(), "no one to wait for: {e:?}");
    assert_eq!(e.never_fits.len(), 1, "{e:?}");
    let text = e.to_text();
    assert!(
        text.starts_with(
            "Workload ml/big: Pending\nCan never be admitted as it is: pod set node asks for 12 nvidia.com/gpu (3 pods × 4), and ClusterQueue team can never hold more than 8 nvidia.com/gpu (in flavor a100, borrowing included)\n"
        ),
        "{text}"
    );
    for fix in [
        "fewer pods: at most 2 of 4 nvidia.com/gpu each",
        "less per pod: at most 2 nvidia.com/gpu for each of the 3 pods",
        "more quota: 4 more nvidia.com/gpu for ClusterQueue team in flavor a100 (its nominalQuota from 8 to 12, or as much more to borrow from its cohort)",
    ] {
        assert!(text.contains(&format!("  - {fix}")), "{fix:?} in {text}");
    }
    assert!(!text.contains("would have to finish"), "{text}");
    assert!(!text.contains("ml/running"), "{text}");
}

#[test]
fn a_workload_waiting_for_quota_still_names_what_it_waits_for() {
    let s = settled(&[
        workload("ml", "running", "queueName: q", 1, 6),
        workload("ml", "waiting", "queueName: q", 1, 4),
    ]);
    let e = explain(&s, s.workload_id("ml/waiting").unwrap());
    assert_eq!(e.reason, "WaitingForQuota");
    assert!(e.never_fits.is_empty(), "{e:?}");
    assert_eq!(e.shortfalls[0].blocking_workloads, vec!["ml/running"]);
}

#[test]
fn a_workload_in_no_queue_is_told_how_to_get_into_one() {
    // (spec.queueName line, what the hint must say; None: it is in a queue).
    let cases: &[(&str, Option<&[&str]>)] = &[
        (
            "",
            Some(&[
                "it has no kueue.x-k8s.io/queue-name label",
                "add `metadata: {labels: {kueue.x-k8s.io/queue-name: LOCALQUEUE}}`",
                "LocalQueues in namespace ml: q",
            ]),
        ),
        (
            "queueName: shared",
            Some(&[
                "LocalQueue shared is in namespace dev, not in ml",
                "create LocalQueue shared in namespace ml (spec.clusterQueue: team)",
            ]),
        ),
        (
            "queueName: nope",
            Some(&[
                "no LocalQueue nope exists in any namespace",
                "LocalQueues in namespace ml: q",
            ]),
        ),
        ("queueName: q", None),
    ];
    for (queue, want) in cases {
        let s = settled(&[workload("ml", "job", queue, 1, 1)]);
        let e = explain(&s, s.workload_id("ml/job").unwrap());
        match want {
            None => assert_eq!(e.queue_hint, None, "{queue:?}"),
            Some(parts) => {
                let text = e.to_text();
                let line = text
                    .lines()
                    .find(|l| l.starts_with("Not in any queue: "))
                    .unwrap_or_else(|| panic!("{queue:?}: no hint in {text}"));
                for p in *parts {
                    assert!(line.contains(p), "{queue:?}: {p:?} in {line}");
                }
            }
        }
    }
}

#[test]
fn a_name_without_namespace_finds_the_only_match_or_lists_the_candidates() {
    let s = settled(&[
        workload("ml", "a", "queueName: q", 1, 1),
        workload("dev", "a", "queueName: shared", 1, 1),
        workload("ml", "b", "queueName: q", 1, 1),
        workload("ml", "trainjob-c", "queueName: q", 1, 1),
        workload("dev", "job-d", "queueName: shared", 1, 1),
    ]);
    let key = |r: Result<usize, WorkloadLookupError>| r.map(|w| s.model().workloads[w].key.clone());
    let trainjobs = vec![("ml/c".to_string(), "ml/trainjob-c".to_string())];
    let cases: &[(&str, Result<&str, WorkloadLookupError>)] = &[
        ("b", Ok("ml/b")),
        ("c", Ok("ml/trainjob-c")),
        ("d", Ok("dev/job-d")),
        ("dev/a", Ok("dev/a")),
        ("ml/c", Ok("ml/trainjob-c")),
        (
            "a",
            Err(WorkloadLookupError::Ambiguous(
                "a".into(),
                vec!["ml/a".into(), "dev/a".into()],
            )),
        ),
        ("zzz", Err(WorkloadLookupError::NotFound("zzz".into()))),
        (
            "ml/zzz",
            Err(WorkloadLookupError::NotFound("ml/zzz".into())),
        ),
    ];
    for (query, want) in cases {
        let got = key(find_workload(&s, &trainjobs, query));
        assert_eq!(got, want.clone().map(String::from), "{query}");
    }
    let shown =
        WorkloadLookupError::Ambiguous("a".into(), vec!["ml/a".into(), "dev/a".into()]).to_string();
    assert_eq!(
        shown,
        "a names 2 workloads; give one as NAMESPACE/NAME: ml/a, dev/a"
    );
}

#[test]
fn a_workload_no_flavor_takes_says_so_without_blockers() {
    // The queue covers no example.com/fpga: no flavor can ever take the pod set.
    let fpga = workload("ml", "fpga", "queueName: q", 1, 8).replace(
        "nvidia.com/gpu: 8",
        "nvidia.com/gpu: 8, example.com/fpga: 1",
    );
    let s = settled(&[workload("ml", "running", "queueName: q", 1, 6), fpga]);
    let e = explain(&s, s.workload_id("ml/fpga").unwrap());
    assert_eq!(e.reason, "NoMatchingFlavor");
    assert!(
        e.shortfalls.is_empty() && e.preemption_targets.is_empty(),
        "{e:?}"
    );
    let text = e.to_text();
    assert!(
        text.contains("Can never be admitted as it is: no flavor of ClusterQueue team can ever take pod set node: resource example.com/fpga unavailable in ClusterQueue"),
        "{text}"
    );
}
