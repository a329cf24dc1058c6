//! A setup exported from a cluster is read whole (issue 37, item 1): creation times order the
//! queue but are no arrivals, every workload given is in the report, and the recorded status
//! (reservation without admission, check states, `PodsReady`, `requeueState`, topology
//! assignments, the times of all of them) is continued from. Each case names the Kueue test it
//! translates; the fixtures are our own.

use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::conditions::find;
use kubetrain_kueue::sched::{Phase, Scheduler};
use kubetrain_kueue::sim::engine::{SimOutcome, Stop, simulate, simulate_until};
use kubetrain_kueue::sim::report::{WorkloadReport, workloads};
use kubetrain_kueue::sim::scenario::ScenarioSpec;

/// The snapshot's moment in these fixtures, 2026-01-01T01:00:00Z (the latest time any of their
/// workloads records), shifted by `seconds` (negative: earlier), as RFC 3339.
fn at(seconds: i64) -> String {
    let t = 3600 + seconds;
    format!(
        "2026-01-01T{:02}:{:02}:{:02}Z",
        t / 3600,
        (t % 3600) / 60,
        t % 60
    )
}

/// Flavor `default`, ClusterQueue `cq` with `cpu` of quota (`extra` indented for `spec:`),
/// LocalQueue `lq` in `ns`, and `more` documents.
fn setup(cpu: u32, extra: &str, more: &str) -> String {
    format!(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {{name: default}}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: cq}}\nspec:\n  namespaceSelector: {{}}\n{extra}  resourceGroups:\n  - coveredResources: [cpu]\n    flavors: [{{name: default, resources: [{{name: cpu, nominalQuota: {cpu}}}]}}]\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{name: lq, namespace: ns}}\nspec: {{clusterQueue: cq}}\n{more}"
    )
}

/// A Workload of one 1-cpu pod; `meta` is extra metadata (indented two spaces), `status` its
/// status block.
fn wl(name: &str, priority: i32, meta: &str, status: &str) -> String {
    format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata:\n  name: {name}\n  namespace: ns\n  uid: uid-{name}\n{meta}spec:\n  queueName: lq\n  priority: {priority}\n  podSets:\n  - name: main\n    count: 1\n    template:\n      spec:\n        containers: [{{name: c, resources: {{requests: {{cpu: \"1\"}}}}}}]\n{status}"
    )
}

fn created(seconds: i64) -> String {
    format!("  creationTimestamp: \"{}\"\n", at(seconds))
}

/// A condition line of a status (`  - {...}` under `conditions:`).
fn cond(type_: &str, status: &str, reason: &str, seconds: i64) -> String {
    format!(
        "  - {{type: {type_}, status: \"{status}\", reason: {reason}, message: recorded, lastTransitionTime: \"{}\"}}\n",
        at(seconds)
    )
}

/// A status with the 1-cpu admission in `cq`, the given condition lines and `more` fields.
fn admitted_status(conditions: &str, more: &str) -> String {
    format!(
        "status:\n  admission:\n    clusterQueue: cq\n    podSetAssignments:\n    - {{name: main, count: 1, flavors: {{cpu: default}}, resourceUsage: {{cpu: \"1\"}}}}\n  conditions:\n{conditions}{more}"
    )
}

fn config(wait: &str) -> String {
    format!(
        "---\napiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nwaitForPodsReady: {wait}\n"
    )
}

fn active_check(name: &str) -> String {
    format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: AdmissionCheck\nmetadata: {{name: {name}}}\nspec: {{controllerName: example.com/check}}\nstatus: {{conditions: [{{type: Active, status: \"True\", reason: Active, message: ok}}]}}\n"
    )
}

fn scheduler(yaml: &str) -> Scheduler {
    let setup = Setup::from_yaml(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    Scheduler::new(Model::build(&setup).unwrap_or_else(|e| panic!("{e}")))
}

fn until(yaml: &str, ms: i64) -> SimOutcome {
    let stop = Stop {
        cycles: None,
        until_ms: Some(ms),
    };
    simulate_until(scheduler(yaml), &ScenarioSpec::default(), stop)
}

fn report<'a>(reports: &'a [WorkloadReport], name: &str) -> &'a WorkloadReport {
    let key = format!("ns/{name}");
    reports
        .iter()
        .find(|w| w.key == key)
        .unwrap_or_else(|| panic!("{key} missing from the report"))
}

fn id(s: &Scheduler, name: &str) -> usize {
    s.workload_id(&format!("ns/{name}"))
        .unwrap_or_else(|| panic!("no workload ns/{name}"))
}

fn condition(s: &Scheduler, name: &str, type_: &str) -> (String, String) {
    let c = find(&s.state(id(s, name)).conditions, type_)
        .unwrap_or_else(|| panic!("ns/{name} has no {type_} condition"));
    (c.status.clone(), c.reason.clone())
}

/// kueue `pkg/cache/queue/cluster_queue_test.go` TestStrictFIFO, "w1.priority is higher than
/// w2.priority": `w1`, created one second after `w2`, exists already and is the head; after one
/// cycle both are in the report, and a workload whose explicit arrival is later is listed as
/// `NotArrived`.
#[test]
fn workloads_created_one_second_apart_are_both_reported_after_one_cycle() {
    let yaml = setup(
        1,
        "  queueingStrategy: StrictFIFO\n",
        &(wl("w2", 0, &created(-1), "")
            + &wl("w1", 100, &created(0), "")
            + &wl(
                "later",
                0,
                "  annotations: {kubetrain.dev/arrival: 90s}\n",
                "",
            )),
    );
    let o = simulate(scheduler(&yaml), &ScenarioSpec::default(), Some(1));
    let reports = workloads(&o.sched);
    assert_eq!(reports.len(), 3, "every workload given is reported");
    assert_eq!(report(&reports, "w1").state, "Admitted");
    assert_eq!(report(&reports, "w2").state, "Pending");
    let later = report(&reports, "later");
    assert_eq!(
        (later.state.as_str(), later.arrival_ms),
        ("NotArrived", Some(90_000))
    );
}

/// kueue `pkg/cache/queue/cluster_queue_test.go` TestStrictFIFO, "w1.priority equals w2.priority
/// and w1.create time is earlier than w2.create time but w1 was evicted": a recorded eviction by
/// a pods-ready timeout orders the queue by its time.
#[test]
fn recorded_eviction_orders_the_queue_by_its_time() {
    let evicted = format!(
        "status:\n  conditions:\n{}",
        cond("Evicted", "True", "PodsReadyTimeout", 0)
    );
    let yaml = setup(
        1,
        "  queueingStrategy: StrictFIFO\n",
        &(wl("w1", 0, &created(-2), &evicted) + &wl("w2", 0, &created(-1), "")),
    );
    let o = simulate(scheduler(&yaml), &ScenarioSpec::default(), Some(1));
    assert_eq!(o.sched.phase(id(&o.sched, "w2")), Phase::Admitted);
    assert_eq!(o.sched.phase(id(&o.sched, "w1")), Phase::Pending);
}

/// kueue `pkg/cache/scheduler/cache_test.go` TestClusterQueueReadiness, "check inactive": an
/// AdmissionCheck whose controller has not set `Active` makes the queue inactive, and nothing is
/// admitted.
#[test]
fn admission_check_without_active_condition_blocks_admission() {
    let check = "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: AdmissionCheck\nmetadata: {name: check1}\nspec: {controllerName: example.com/check}\n";
    let yaml = setup(
        4,
        "  admissionChecks: [check1]\n",
        &(check.to_string() + &wl("w", 0, "", "")),
    );
    let o = simulate(scheduler(&yaml), &ScenarioSpec::default(), None);
    let s = &o.sched;
    assert_eq!(
        s.model().cqs[0].inactive,
        Some((
            "AdmissionCheckInactive".to_string(),
            "Can't admit new workloads: references inactive AdmissionCheck(s): check1.".to_string()
        ))
    );
    assert_eq!(s.phase(id(s, "w")), Phase::Pending);
}

/// kueue `pkg/controller/core/workload_controller_test.go` TestReconcile, "admit": quota reserved
/// and every check recorded `Ready`, not yet `Admitted`: reported as reserved, admitted at the
/// next step.
#[test]
fn reserved_workload_with_ready_checks_is_admitted_next() {
    let status = admitted_status(
        &cond("QuotaReserved", "True", "QuotaReserved", 0),
        "  admissionChecks:\n  - {name: check, state: Ready}\n",
    );
    let yaml = setup(
        1,
        "  admissionChecks: [check]\n",
        &(active_check("check") + &wl("w", 0, &created(-10), &status)),
    );
    let s = scheduler(&yaml);
    assert_eq!(report(&workloads(&s), "w").state, "QuotaReserved");
    let o = simulate(s, &ScenarioSpec::default(), Some(1));
    assert_eq!(report(&workloads(&o.sched), "w").state, "Admitted");
    assert_eq!(
        condition(&o.sched, "w", "Admitted"),
        ("True".into(), "Admitted".into())
    );
}

/// kueue `pkg/workload/admissionchecks_test.go` TestSyncAdmittedCondition, "reservation, checks
/// not ready": `QuotaReserved=True` without `Admitted`, a check still `Pending` — it keeps the
/// quota, is reported `QuotaReserved` (not `Admitted`) and another workload waits.
#[test]
fn reserved_workload_waiting_for_a_check_is_reported_reserved() {
    let status = admitted_status(
        &cond("QuotaReserved", "True", "QuotaReserved", 0),
        "  admissionChecks:\n  - {name: check, state: Pending}\n",
    );
    let yaml = setup(
        1,
        "  admissionChecks: [check]\n",
        &(active_check("check")
            + &wl("w", 0, &created(-10), &status)
            + &wl("other", 0, &created(-5), "")),
    );
    let o = simulate(scheduler(&yaml), &ScenarioSpec::default(), None);
    let reports = workloads(&o.sched);
    assert_eq!(report(&reports, "w").state, "QuotaReserved");
    assert_eq!(
        condition(&o.sched, "w", "Admitted"),
        ("False".into(), "UnsatisfiedAdmissionChecks".into())
    );
    assert_eq!(report(&reports, "other").state, "Pending");
    let json = serde_json::to_value(report(&reports, "w")).unwrap();
    assert_eq!(json["state"], "QuotaReserved");
}

/// kueue `pkg/controller/core/workload_controller_test.go` TestAdmittedNotReadyWorkload, "with
/// reason WorkloadWaitForPodsReadyStart; workload with Admitted=True, PodsReady=False; counting
/// since admitted.LastTransitionTime" (5-minute timeout, admitted a minute ago: 4 minutes left)
/// and "workload with Admitted=True, PodsReady=False, Reason=WorkloadWaitForPodsReadyRecovery"
/// (3-minute recovery timeout counted from the `PodsReady` time).
#[test]
fn pods_ready_timeout_continues_from_the_recorded_times() {
    for (reason, left_s) in [("WaitForStart", 240), ("WaitForRecovery", 180)] {
        let status = admitted_status(
            &(cond("QuotaReserved", "True", "QuotaReserved", -60)
                + &cond("Admitted", "True", "Admitted", -60)
                + &cond("PodsReady", "False", reason, 0)),
            "",
        );
        let yaml = setup(
            1,
            "",
            &(wl("w", 0, &created(-120), &status) + &config("{timeout: 5m, recoveryTimeout: 3m}")),
        );
        let before = until(&yaml, left_s * 1000 - 1);
        assert_eq!(
            before.sched.phase(id(&before.sched, "w")),
            Phase::Admitted,
            "{reason}"
        );
        assert_eq!(
            condition(&before.sched, "w", "PodsReady"),
            ("False".into(), reason.into())
        );
        let after = until(&yaml, left_s * 1000);
        assert_eq!(
            condition(&after.sched, "w", "Evicted"),
            ("True".into(), "PodsReadyTimeout".into()),
            "{reason}"
        );
        assert_eq!(after.sched.phase(id(&after.sched, "w")), Phase::Pending);
    }
}

/// kueue `pkg/controller/core/workload_controller_requeue_test.go` TestReconcileRequeue,
/// "increment re-queue count" (3 s timeout passed 5 minutes ago, `requeueState.count` 3: the 4th
/// requeue waits 10 s × 2³ = 80 s) and `workload_controller_eviction_test.go` "trigger
/// deactivation of workload when reaching backoffLimitCount" (count 1 of 1: deactivated).
#[test]
fn requeue_count_continues_from_the_record() {
    let status = |count: u32| {
        admitted_status(
            &(cond("QuotaReserved", "True", "QuotaReserved", 0)
                + &cond("Admitted", "True", "Admitted", -300)),
            &format!("  requeueState: {{count: {count}}}\n"),
        )
    };
    let wait = |limit: u32| {
        config(&format!(
            "{{timeout: 3s, requeuingStrategy: {{backoffLimitCount: {limit}, backoffBaseSeconds: 10, backoffMaxSeconds: 3600}}}}"
        ))
    };
    let yaml = setup(
        1,
        "",
        &(wl("w", 0, &created(-400), &status(3)) + &wait(100)),
    );
    let o = simulate(scheduler(&yaml), &ScenarioSpec::default(), Some(1));
    let s = &o.sched;
    let st = s.state(id(s, "w"));
    assert_eq!(
        condition(s, "w", "Evicted"),
        ("True".into(), "PodsReadyTimeout".into())
    );
    assert_eq!(st.life.requeues, 4);
    assert_eq!(st.life.backoff_until, Some(80_000));

    let yaml = setup(1, "", &(wl("w", 0, &created(-400), &status(1)) + &wait(1)));
    let o = simulate(scheduler(&yaml), &ScenarioSpec::default(), Some(1));
    let s = &o.sched;
    assert!(s.state(id(s, "w")).life.deactivated);
    assert_eq!(
        condition(s, "w", "Evicted"),
        (
            "True".into(),
            "DeactivatedDueToRequeuingLimitExceeded".into()
        )
    );
}

/// kueue `pkg/cache/queue/cluster_queue_test.go` TestBackoffWaitingTimeExpired, "now hasn't yet
/// exceeded requeueAt" and "now already has exceeded requeueAt": a workload in its backoff waits
/// for `requeueAt` though quota is free; one whose backoff is over queues at once.
#[test]
fn recorded_backoff_holds_the_workload_until_requeue_at() {
    let status = |requeue_at: i64| {
        format!(
            "status:\n  conditions:\n{}  requeueState: {{count: 10, requeueAt: \"{}\"}}\n",
            cond("Evicted", "True", "PodsReadyTimeout", 0),
            at(requeue_at)
        )
    };
    let yaml = setup(1, "", &wl("w", 0, &created(-600), &status(60)));
    let before = until(&yaml, 59_000);
    assert_eq!(before.sched.phase(id(&before.sched, "w")), Phase::Pending);
    let after = until(&yaml, 61_000);
    assert_eq!(after.sched.phase(id(&after.sched, "w")), Phase::Admitted);

    let yaml = setup(1, "", &wl("w", 0, &created(-600), &status(-60)));
    let o = simulate(scheduler(&yaml), &ScenarioSpec::default(), Some(1));
    assert_eq!(o.sched.phase(id(&o.sched, "w")), Phase::Admitted);
}

/// A TAS setup: Topology `hosts` (one level, the hostname), flavor `tas`, nodes `n1` and `n2` of
/// 4 cpu, a recorded workload `running` (2 pods of 2 cpu) placed by `topology` (YAML of its
/// `topologyAssignment`), and `next` (the same shape, one host required).
fn tas_setup(topology: &str) -> String {
    let node = |n: &str| {
        format!(
            "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: {n}\n  labels: {{pool: tas, kubernetes.io/hostname: {n}}}\nstatus:\n  allocatable: {{cpu: \"4\", pods: \"10\"}}\n"
        )
    };
    let workload = |name: &str, status: &str| {
        format!(
            "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: {name}, namespace: ns}}\nspec:\n  queueName: lq\n  podSets:\n  - name: main\n    count: 2\n    topologyRequest: {{required: kubernetes.io/hostname}}\n    template:\n      spec:\n        containers: [{{name: c, resources: {{requests: {{cpu: \"2\"}}}}}}]\n{status}"
        )
    };
    let running = format!(
        "status:\n  admission:\n    clusterQueue: cq\n    podSetAssignments:\n    - name: main\n      count: 2\n      flavors: {{cpu: tas}}\n      resourceUsage: {{cpu: \"4\"}}\n      topologyAssignment: {topology}\n"
    );
    format!(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: Topology\nmetadata: {{name: hosts}}\nspec: {{levels: [{{nodeLabel: kubernetes.io/hostname}}]}}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {{name: tas}}\nspec: {{nodeLabels: {{pool: tas}}, topologyName: hosts}}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: cq}}\nspec:\n  namespaceSelector: {{}}\n  resourceGroups:\n  - coveredResources: [cpu]\n    flavors: [{{name: tas, resources: [{{name: cpu, nominalQuota: 100}}]}}]\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{name: lq, namespace: ns}}\nspec: {{clusterQueue: cq}}\n{}{}{}{}",
        node("n1"),
        node("n2"),
        workload("running", &running),
        workload("next", "")
    )
}

/// kueue `pkg/cache/scheduler/tas_flavor_test.go` TestTASFlavorCacheAddAndRemoveUsage, "add
/// usage": an admitted workload's `topologyAssignment` (v1beta1 `domains` or v1beta2 `slices`)
/// uses its nodes, so a second workload that needs a whole host goes to the other one.
#[test]
fn recorded_topology_assignment_uses_its_nodes() {
    for topology in [
        "{levels: [kubernetes.io/hostname], domains: [{values: [n1], count: 2}]}",
        "{levels: [kubernetes.io/hostname], slices: [{domainCount: 1, valuesPerLevel: [{universal: n1}], podCounts: {universal: 2}}]}",
    ] {
        let o = simulate(
            scheduler(&tas_setup(topology)),
            &ScenarioSpec::default(),
            None,
        );
        let s = &o.sched;
        let placed = |name: &str| {
            s.admission(id(s, name))
                .and_then(|a| a.pod_sets[0].topology.clone())
                .map(|t| t.domains)
                .unwrap_or_else(|| panic!("{name} not placed ({topology})"))
        };
        assert_eq!(placed("running"), vec![(vec!["n1".to_string()], 2)]);
        assert_eq!(
            placed("next"),
            vec![(vec!["n2".to_string()], 2)],
            "{topology}"
        );
    }
}

/// kueue `pkg/controller/jobs/job/job_controller_test.go` TestReconciler, "when workload is evicted
/// due to pods ready timeout, job gets suspended and quota is unset": a snapshot taken while the
/// eviction is under way (`Evicted=True`, the admission still recorded) holds no quota; the
/// workload waits for its `requeueAt` and another one takes the quota.
#[test]
fn eviction_under_way_releases_the_recorded_quota() {
    let status = admitted_status(
        &(cond("QuotaReserved", "True", "QuotaReserved", -300)
            + &cond("Admitted", "True", "Admitted", -300)
            + &cond("Evicted", "True", "PodsReadyTimeout", 0)),
        &format!("  requeueState: {{count: 1, requeueAt: \"{}\"}}\n", at(60)),
    );
    let yaml = setup(
        1,
        "",
        &(wl("w", 0, &created(-400), &status) + &wl("other", 0, &created(-10), "")),
    );
    let o = simulate(scheduler(&yaml), &ScenarioSpec::default(), Some(1));
    let s = &o.sched;
    assert_eq!(s.phase(id(s, "other")), Phase::Admitted);
    assert_eq!(s.phase(id(s, "w")), Phase::Pending);
    assert_eq!(s.state(id(s, "w")).life.backoff_until, Some(60_000));
}

/// What `kubectl get workloads,clusterqueues,localqueues,resourceflavors,admissionchecks -A -o yaml`
/// prints against Kueue v0.19 (a `v1` `List`; server-side fields, defaults and statuses included;
/// our own fixture in the shape of the v1beta2 API): it loads whole, the admitted workload keeps its
/// quota and the pending one waits for it.
const EXPORTED: &str = r#"apiVersion: v1
kind: List
metadata: {resourceVersion: ""}
items:
- apiVersion: kueue.x-k8s.io/v1beta2
  kind: Workload
  metadata:
    creationTimestamp: "2026-01-01T00:59:00Z"
    finalizers: [kueue.x-k8s.io/resource-in-use]
    generation: 1
    labels: {kueue.x-k8s.io/job-uid: 0b6e-job}
    name: job-train-1a2b3
    namespace: ns
    ownerReferences:
    - {apiVersion: batch/v1, blockOwnerDeletion: true, controller: true, kind: Job, name: train, uid: 0b6e-job}
    resourceVersion: "1234"
    uid: 7f3c-running
  spec:
    active: true
    podSets:
    - count: 1
      name: main
      template:
        metadata: {}
        spec:
          containers:
          - image: busybox
            name: c
            resources: {requests: {cpu: "1"}}
          restartPolicy: Never
    priority: 0
    queueName: lq
  status:
    admission:
      clusterQueue: cq
      podSetAssignments:
      - count: 1
        flavors: {cpu: default}
        name: main
        resourceUsage: {cpu: "1"}
    conditions:
    - {lastTransitionTime: "2026-01-01T00:59:01Z", message: Quota reserved in ClusterQueue cq, observedGeneration: 1, reason: QuotaReserved, status: "True", type: QuotaReserved}
    - {lastTransitionTime: "2026-01-01T00:59:01Z", message: The workload is admitted, observedGeneration: 1, reason: Admitted, status: "True", type: Admitted}
    - {lastTransitionTime: "2026-01-01T00:59:30Z", message: All pods reached readiness and the workload is running, observedGeneration: 1, reason: Started, status: "True", type: PodsReady}
    resourceRequests:
    - name: main
      resources: {cpu: "1"}
    schedulingStats:
      evictions: []
- apiVersion: kueue.x-k8s.io/v1beta2
  kind: Workload
  metadata:
    creationTimestamp: "2026-01-01T01:00:00Z"
    generation: 1
    name: job-eval-4c5d6
    namespace: ns
    resourceVersion: "1240"
    uid: 8a1d-waiting
  spec:
    active: true
    podSets:
    - count: 1
      name: main
      template:
        metadata: {}
        spec:
          containers:
          - {image: busybox, name: c, resources: {requests: {cpu: "1"}}}
    priority: 0
    queueName: lq
  status:
    conditions:
    - {lastTransitionTime: "2026-01-01T01:00:00Z", message: "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1 more needed", observedGeneration: 1, reason: Pending, status: "False", type: QuotaReserved}
    resourceRequests:
    - name: main
      resources: {cpu: "1"}
- apiVersion: kueue.x-k8s.io/v1beta2
  kind: ClusterQueue
  metadata: {generation: 1, name: cq, resourceVersion: "900", uid: 11aa}
  spec:
    flavorFungibility: {whenCanBorrow: MayStopSearch, whenCanPreempt: TryNextFlavor}
    namespaceSelector: {}
    preemption:
      borrowWithinCohort: {policy: Never}
      reclaimWithinCohort: Never
      withinClusterQueue: Never
    queueingStrategy: BestEffortFIFO
    resourceGroups:
    - coveredResources: [cpu]
      flavors:
      - name: default
        resources: [{name: cpu, nominalQuota: "1"}]
    stopPolicy: None
  status:
    admittedWorkloads: 1
    conditions:
    - {lastTransitionTime: "2026-01-01T00:58:00Z", message: Can admit new workloads, observedGeneration: 1, reason: Ready, status: "True", type: Active}
    flavorsReservation:
    - name: default
      resources: [{borrowed: "0", name: cpu, total: "1"}]
    pendingWorkloads: 1
    reservingWorkloads: 1
- apiVersion: kueue.x-k8s.io/v1beta2
  kind: LocalQueue
  metadata: {generation: 1, name: lq, namespace: ns, uid: 22bb}
  spec: {clusterQueue: cq, stopPolicy: None}
  status:
    admittedWorkloads: 1
    conditions:
    - {lastTransitionTime: "2026-01-01T00:58:00Z", message: Can submit new workloads to localQueue, observedGeneration: 1, reason: Ready, status: "True", type: Active}
    pendingWorkloads: 1
- apiVersion: kueue.x-k8s.io/v1beta2
  kind: ResourceFlavor
  metadata: {finalizers: [kueue.x-k8s.io/resource-in-use], generation: 1, name: default, uid: 33cc}
  spec: {}
"#;

#[test]
fn kubectl_list_export_loads_whole() {
    let o = simulate(scheduler(EXPORTED), &ScenarioSpec::default(), None);
    let s = &o.sched;
    let reports = workloads(s);
    assert_eq!(reports.len(), 2);
    assert_eq!(report(&reports, "job-train-1a2b3").state, "Admitted");
    let waiting = report(&reports, "job-eval-4c5d6");
    assert_eq!(waiting.state, "Pending");
    // The model's gates are v0.20's (`UnadmittedWorkloadsObservability` on): the granular reason.
    assert_eq!(
        condition(s, "job-eval-4c5d6", "QuotaReserved"),
        ("False".into(), "WaitingForQuota".into())
    );
    // The running workload was admitted a minute before the snapshot; its pods are ready.
    let running = s.state(id(s, "job-train-1a2b3"));
    assert_eq!(running.admitted_ms, Some(-59_000));
    assert!(running.life.pods_ready);
}

/// kueue `pkg/cache/scheduler/cache_test.go` TestClusterQueueReadiness, "terminating": a
/// ClusterQueue exported while being deleted (`metadata.deletionTimestamp`, held by Kueue's
/// finalizer while it has admitted workloads) admits nothing new; its admitted workload stays.
/// Found by the e2e snapshot scenario (`test_exported_cluster_reads_whole`).
#[test]
fn terminating_cluster_queue_admits_nothing_new() {
    let admitted = admitted_status(
        &(cond("QuotaReserved", "True", "QuotaReserved", -5)
            + &cond("Admitted", "True", "Admitted", -5)),
        "",
    );
    let yaml = setup(
        4,
        "",
        &(wl("running", 0, &created(-10), &admitted) + &wl("waiting", 0, &created(-1), "")),
    )
    .replace(
        "metadata: {name: cq}",
        &format!("metadata: {{name: cq, deletionTimestamp: \"{}\"}}", at(-2)),
    );
    let o = until(&yaml, 0);
    let s = &o.sched;
    assert_eq!(
        s.model().cqs[0].inactive,
        Some((
            "Terminating".to_string(),
            "Can't admit new workloads; clusterQueue is terminating".to_string()
        ))
    );
    assert_eq!(s.phase(id(s, "running")), Phase::Admitted);
    assert_eq!(s.phase(id(s, "waiting")), Phase::Pending);
    let waiting = find(&s.state(id(s, "waiting")).conditions, "QuotaReserved")
        .expect("the waiting workload is told why");
    assert_eq!(waiting.message, "ClusterQueue cq is inactive");
}
