//! Table tests for quota, flavor-fungibility, preemption-policy and queueing rules (kueue.md
//! §2.1–§2.8, §2.11).

use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::conditions::find;
use kubetrain_kueue::sched::{Phase, Scheduler};

const HEAD: &str = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: a}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: b}\n";

/// A ClusterQueue over `gpu` with (flavor, nominal, borrowingLimit, lendingLimit) quotas.
fn cq(
    name: &str,
    cohort: &str,
    quotas: &[(&str, u32, Option<u32>, Option<u32>)],
    extra: &str,
) -> String {
    let mut flavors = String::new();
    for (f, n, bl, ll) in quotas {
        let bl = bl
            .map(|v| format!(", borrowingLimit: {v}"))
            .unwrap_or_default();
        let ll = ll
            .map(|v| format!(", lendingLimit: {v}"))
            .unwrap_or_default();
        flavors.push_str(&format!(
            "    - {{name: {f}, resources: [{{name: gpu, nominalQuota: {n}{bl}{ll}}}]}}\n"
        ));
    }
    let cohort = if cohort.is_empty() {
        String::new()
    } else {
        format!("  cohortName: {cohort}\n")
    };
    format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: {name}}}\nspec:\n{cohort}  namespaceSelector: {{}}\n{extra}  resourceGroups:\n  - coveredResources: [gpu]\n    flavors:\n{flavors}---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{name: {name}, namespace: ns}}\nspec: {{clusterQueue: {name}}}\n"
    )
}

fn wl(name: &str, queue: &str, gpus: u32, priority: i32, admitted_on: Option<&str>) -> String {
    let mut s = format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n  queueName: {queue}\n  priority: {priority}\n  podSets:\n  - name: main\n    count: 1\n    template:\n      spec:\n        containers: [{{name: c, resources: {{requests: {{gpu: {gpus}}}}}}}]\n"
    );
    if let Some(f) = admitted_on {
        s.push_str(&format!(
            "status:\n  admission:\n    clusterQueue: {queue}\n    podSetAssignments:\n    - name: main\n      count: 1\n      flavors: {{gpu: {f}}}\n      resourceUsage: {{gpu: {gpus}}}\n"
        ));
    }
    s
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

fn get(s: &Scheduler, name: &str) -> usize {
    s.model()
        .workloads
        .iter()
        .position(|w| w.key == format!("ns/{name}"))
        .unwrap()
}

fn reason(s: &Scheduler, name: &str) -> (String, String) {
    let c = find(&s.state(get(s, name)).conditions, "QuotaReserved")
        .cloned()
        .unwrap();
    (c.reason, c.message)
}

fn flavor(s: &Scheduler, name: &str) -> Option<String> {
    let a = s.state(get(s, name)).admission.as_ref()?;
    Some(s.model().flavors[a.pod_sets[0].resources[0].1].name.clone())
}

#[test]
fn lending_limit_caps_what_others_borrow() {
    let base = format!(
        "{HEAD}{}{}",
        cq("lender", "c", &[("a", 10, None, Some(4))], ""),
        cq("borrower", "c", &[("a", 0, None, None)], "")
    );
    let s = run(&format!("{base}{}", wl("w", "borrower", 5, 0, None)), 1);
    let (r, m) = reason(&s, "w");
    assert_eq!(r, "ExceedsMaxQuota");
    assert!(m.ends_with("> maximum capacity (4)"), "{m}");
    let s = run(&format!("{base}{}", wl("w", "borrower", 4, 0, None)), 1);
    assert_eq!(flavor(&s, "w").as_deref(), Some("a"));
}

#[test]
fn hierarchical_cohorts_share_cohort_quota() {
    // root cohort holds 6 GPUs of flavor a; team cohort below it; the queue has no quota.
    let cohorts = "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: root}\nspec:\n  resourceGroups:\n  - coveredResources: [gpu]\n    flavors: [{name: a, resources: [{name: gpu, nominalQuota: 6}]}]\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: team}\nspec:\n  parentName: root\n  resourceGroups:\n  - coveredResources: [gpu]\n    flavors: [{name: a, resources: [{name: gpu, nominalQuota: 0, borrowingLimit: 4}]}]\n";
    let base = format!(
        "{HEAD}{cohorts}{}",
        cq("q", "team", &[("a", 0, None, None)], "")
    );
    let s = run(&format!("{base}{}", wl("w", "q", 4, 0, None)), 1);
    assert_eq!(
        s.state(get(&s, "w")).phase,
        Phase::Admitted,
        "borrows 4 from the root"
    );
    let s = run(&format!("{base}{}", wl("w", "q", 5, 0, None)), 1);
    let (r, m) = reason(&s, "w");
    assert_eq!(
        r, "ExceedsMaxQuota",
        "the team cohort's borrowingLimit caps the subtree"
    );
    assert!(m.ends_with("> maximum capacity (4)"), "{m}");
}

#[test]
fn flavor_fungibility_table() {
    // Flavor a needs borrowing (nominal 2), flavor b fits within nominal (4).
    let cases = [
        ("", "a"),
        ("  flavorFungibility: {whenCanBorrow: TryNextFlavor}\n", "b"),
        ("  flavorFungibility: {whenCanBorrow: MayStopSearch}\n", "a"),
    ];
    for (extra, want) in cases {
        let yaml = format!(
            "{HEAD}{}{}{}",
            cq(
                "q",
                "c",
                &[("a", 2, None, None), ("b", 4, None, None)],
                extra
            ),
            cq("other", "c", &[("a", 4, None, None)], ""),
            wl("w", "q", 3, 0, None)
        );
        let s = run(&yaml, 1);
        assert_eq!(
            flavor(&s, "w").as_deref(),
            Some(want),
            "fungibility {extra:?}"
        );
    }
}

#[test]
fn within_queue_policy_table() {
    // The queue is full with one workload; the newcomer has the given priority.
    let cases: [(&str, i32, i32, bool); 5] = [
        ("LowerPriority", 10, 0, true),
        ("LowerPriority", 0, 0, false),
        ("LowerOrNewerEqualPriority", 0, 0, true),
        ("LowerOrNewerEqualPriority", 0, 10, false),
        ("Never", 10, 0, false),
    ];
    for (policy, new_prio, old_prio, preempts) in cases {
        let yaml = format!(
            "{HEAD}{}{}{}",
            cq(
                "q",
                "",
                &[("a", 4, None, None)],
                &format!("  preemption: {{withinClusterQueue: {policy}}}\n")
            ),
            wl("old", "q", 4, old_prio, Some("a")),
            wl("new", "q", 4, new_prio, None)
        );
        // For the equal-priority case the admitted workload is the newer one (created at 5s).
        let yaml = if policy == "LowerOrNewerEqualPriority" && new_prio == old_prio {
            yaml.replace(
                "metadata: {name: old, namespace: ns}",
                "metadata:\n  name: old\n  namespace: ns\n  annotations: {kubetrain.dev/arrival: 5s}",
            )
        } else {
            yaml
        };
        let s = run(&yaml, 1);
        let old = &s.state(get(&s, "old"));
        assert_eq!(
            find(&old.conditions, "Preempted").is_some(),
            preempts,
            "{policy} new={new_prio} old={old_prio}: {:?}",
            reason(&s, "new")
        );
    }
}

#[test]
fn borrow_within_cohort_allows_reclaim_while_borrowing() {
    let policy = "  preemption: {reclaimWithinCohort: LowerPriority, borrowWithinCohort: {policy: LowerPriority}}\n";
    let base = |extra: &str| {
        format!(
            "{HEAD}{}{}{}{}",
            cq("small", "c", &[("a", 2, None, None)], extra),
            cq("big", "c", &[("a", 6, None, None)], ""),
            wl("hog", "big", 7, 0, Some("a")),
            wl("w", "small", 4, 10, None)
        )
    };
    let s = run(&base(policy), 1);
    let hog = &s.state(get(&s, "hog"));
    assert_eq!(
        find(&hog.conditions, "Preempted").unwrap().reason,
        "InCohortReclaimWhileBorrowing"
    );
    assert!(find(&hog.conditions, "Preempted").unwrap().message.contains("due to reclamation within the cohort while borrowing; preemptor path: /c/small; preemptee path: /c/big"));
    // Without borrowWithinCohort the request above nominal cannot preempt: it is NoFit.
    let s = run(
        &base("  preemption: {reclaimWithinCohort: LowerPriority}\n"),
        1,
    );
    assert_eq!(reason(&s, "w").0, "WaitingForQuota");
    assert!(find(&s.state(get(&s, "hog")).conditions, "Preempted").is_none());
}

#[test]
fn preempting_entry_without_candidates_reserves_capacity() {
    // "strict" needs its nominal back but may not reclaim; its reservation keeps "greedy" from
    // borrowing further in the same cycle (kueue.md §2.6, issue #4809).
    let yaml = format!(
        "{HEAD}{}{}{}{}{}",
        cq(
            "strict",
            "c",
            &[("a", 8, None, None)],
            "  queueingStrategy: StrictFIFO\n"
        ),
        cq("greedy", "c", &[("a", 2, None, None)], ""),
        wl("lent", "greedy", 6, 0, Some("a")),
        wl("head", "strict", 8, 0, None),
        wl("more", "greedy", 2, 0, None),
    );
    let s = run(&yaml, 1);
    assert_eq!(reason(&s, "head").0, "WaitingForQuota");
    assert_eq!(
        reason(&s, "more"),
        (
            "WaitingForQuota".to_string(),
            "Workload no longer fits after processing another workload".to_string()
        )
    );
    // With reclaimWithinCohort: Any nothing is reserved, but then "head" reclaims instead.
    let s = run(
        &yaml.replace(
            "  queueingStrategy: StrictFIFO\n",
            "  queueingStrategy: StrictFIFO\n  preemption: {reclaimWithinCohort: Any}\n",
        ),
        1,
    );
    assert_eq!(
        find(&s.state(get(&s, "lent")).conditions, "Preempted")
            .unwrap()
            .reason,
        "InCohortReclamation"
    );
}

#[test]
fn legacy_reasons_without_observability_gate() {
    let cfg = "---\napiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nfeatureGates: {UnadmittedWorkloadsObservability: false}\n";
    let yaml = format!(
        "{HEAD}{cfg}{}{}",
        cq("q", "", &[("a", 2, None, None)], ""),
        wl("w", "q", 4, 0, None)
    );
    let s = run(&yaml, 1);
    assert_eq!(reason(&s, "w").0, "Pending");
    assert!(find(&s.state(0).conditions, "Admitted").is_none());
    let s = run(&yaml.replace(cfg, ""), 1);
    assert_eq!(reason(&s, "w").0, "ExceedsMaxQuota");
    assert_eq!(
        find(&s.state(0).conditions, "Admitted").unwrap().reason,
        "NoReservation"
    );
}

#[test]
fn hold_and_drain_evicts_admitted_workloads() {
    for (policy, evicted) in [("Hold", false), ("HoldAndDrain", true)] {
        let yaml = format!(
            "{HEAD}{}{}",
            cq(
                "q",
                "",
                &[("a", 4, None, None)],
                &format!("  stopPolicy: {policy}\n")
            ),
            wl("w", "q", 2, 0, Some("a"))
        );
        let s = run(&yaml, 1);
        let st = &s.state(0);
        assert_eq!(st.phase == Phase::Admitted, !evicted, "{policy}");
        if evicted {
            assert_eq!(
                find(&st.conditions, "Evicted").unwrap().reason,
                "ClusterQueueStopped"
            );
            assert_eq!(
                reason(&s, "w"),
                (
                    "Suspended".to_string(),
                    "ClusterQueue q is inactive".to_string()
                )
            );
        }
    }
}

#[test]
fn batch_job_with_min_parallelism_is_partially_admitted() {
    let job = "---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: train\n  namespace: ns\n  labels: {kueue.x-k8s.io/queue-name: q}\n  annotations: {kueue.x-k8s.io/job-min-parallelism: \"3\"}\nspec:\n  parallelism: 10\n  completions: 10\n  template:\n    spec:\n      containers: [{name: c, image: x, resources: {requests: {gpu: 1}}}]\n";
    let yaml = format!("{HEAD}{}{job}", cq("q", "", &[("a", 4, None, None)], ""));
    let s = run(&yaml, 1);
    let a = s
        .state(get(&s, "job-train"))
        .admission
        .as_ref()
        .expect("admitted");
    assert_eq!(a.pod_sets[0].count, 4);
    let yaml = yaml.replace("\"3\"", "\"5\"");
    let s = run(&yaml, 1);
    assert_eq!(reason(&s, "job-train").0, "ExceedsMaxQuota");
}

#[test]
fn jobset_becomes_one_pod_set_per_replicated_job() {
    let js = "---\napiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata:\n  name: js\n  namespace: ns\n  labels: {kueue.x-k8s.io/queue-name: q}\nspec:\n  replicatedJobs:\n  - name: Workers\n    replicas: 2\n    template:\n      spec:\n        parallelism: 3\n        template:\n          spec:\n            containers: [{name: c, resources: {requests: {gpu: 1}}}]\n  - name: driver\n    template:\n      spec:\n        template:\n          spec:\n            containers: [{name: c, resources: {requests: {gpu: 1}}}]\n";
    let yaml = format!("{HEAD}{}{js}", cq("q", "", &[("a", 8, None, None)], ""));
    let s = run(&yaml, 1);
    let w = &s.model().workloads[get(&s, "jobset-js")];
    let sets: Vec<(&str, i32)> = w
        .pod_sets
        .iter()
        .map(|p| (p.name.as_str(), p.count))
        .collect();
    assert_eq!(sets, vec![("workers", 6), ("driver", 1)]);
    assert_eq!(s.state(get(&s, "jobset-js")).phase, Phase::Admitted);
}

#[test]
fn earlier_pod_sets_count_against_later_ones() {
    // Two pod sets of 3 GPUs on a 5-GPU flavor: the second sees the first's 3.
    let yaml = format!(
        "{HEAD}{}---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: w, namespace: ns}}\nspec:\n  queueName: q\n  podSets:\n  - name: one\n    count: 3\n    template: {{spec: {{containers: [{{name: c, resources: {{requests: {{gpu: 1}}}}}}]}}}}\n  - name: two\n    count: 3\n    template: {{spec: {{containers: [{{name: c, resources: {{requests: {{gpu: 1}}}}}}]}}}}\n",
        cq("q", "", &[("a", 5, None, None)], "")
    );
    let s = run(&yaml, 1);
    assert_eq!(
        reason(&s, "w").1,
        "couldn't assign flavors to pod set two: insufficient quota for gpu in flavor a, previously considered podsets requests (3) + current podset request (3) > maximum capacity (5)"
    );
}

#[test]
fn priority_sorting_within_cohort_gate() {
    // Two queues with no quota of their own borrow from a third; one slot of 4 is left for two
    // heads: the high-priority one arrives later.
    let yaml = |gate: bool| {
        format!(
            "{HEAD}---\napiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nfeatureGates: {{PrioritySortingWithinCohort: {gate}}}\n{}{}{}{}{}",
            cq("qx", "c", &[("a", 0, None, None)], ""),
            cq("qy", "c", &[("a", 0, None, None)], ""),
            cq("pool", "c", &[("a", 4, None, None)], ""),
            wl("early", "qx", 4, 0, None),
            wl("urgent", "qy", 4, 100, None).replace(
                "metadata: {name: urgent, namespace: ns}",
                "metadata:\n  name: urgent\n  namespace: ns\n  annotations: {kubetrain.dev/arrival: 1s}"
            ),
        )
    };
    let s = run(&yaml(true), 1);
    assert_eq!(s.state(get(&s, "urgent")).phase, Phase::Admitted);
    assert_eq!(
        reason(&s, "early").1,
        "Workload no longer fits after processing another workload"
    );
    let s = run(&yaml(false), 1);
    assert_eq!(s.state(get(&s, "early")).phase, Phase::Admitted);
}
