//! Admission checks (issue 15, item 3) and `waitForPodsReady` (item 4), each case naming the
//! Kueue v0.19.1 test or code path it mirrors.

use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::conditions::{Condition, find};
use kubetrain_kueue::sched::{Phase, Scheduler};
use kubetrain_kueue::sim::engine::{SimOutcome, simulate};
use kubetrain_kueue::sim::scenario::ScenarioSpec;

/// Flavors `a` and `b` (4 cpu each) in queue `cq`; `cq_extra` is indented for `spec:`.
fn base(cq_extra: &str) -> String {
    format!(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {{name: a}}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {{name: b}}\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: cq}}\nspec:\n  namespaceSelector: {{}}\n{cq_extra}  resourceGroups:\n  - coveredResources: [cpu]\n    flavors: [{{name: a, resources: [{{name: cpu, nominalQuota: 4}}]}}, {{name: b, resources: [{{name: cpu, nominalQuota: 4}}]}}]\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{name: lq, namespace: ns}}\nspec: {{clusterQueue: cq}}\n"
    )
}

/// An active AdmissionCheck (its controller says `Active=True`) answering as `answers` says.
fn check(name: &str, answers: &str) -> String {
    check_with_status(
        name,
        answers,
        "status: {conditions: [{type: Active, status: \"True\", reason: Active, message: ok}]}\n",
    )
}

/// An AdmissionCheck with the given `status:` line (empty: none).
fn check_with_status(name: &str, answers: &str, status: &str) -> String {
    let ann = if answers.is_empty() {
        String::new()
    } else {
        format!(", annotations: {{kubetrain.dev/answers: \"{answers}\"}}")
    };
    format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: AdmissionCheck\nmetadata: {{name: {name}{ann}}}\nspec: {{controllerName: kueue.x-k8s.io/provisioning-request}}\n{status}"
    )
}

/// A Workload of `cpu` cpu arriving at `arrival`; `ann` are extra annotations (`k: v, ...`).
fn wl(name: &str, cpu: u32, arrival: &str, ann: &str) -> String {
    let sep = if ann.is_empty() { "" } else { ", " };
    format!(
        "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: Workload\nmetadata: {{name: {name}, namespace: ns, annotations: {{kubetrain.dev/arrival: \"{arrival}\", kubetrain.dev/runtime: 10m{sep}{ann}}}}}\nspec:\n  queueName: lq\n  podSets:\n  - name: main\n    count: 1\n    template:\n      spec:\n        containers: [{{name: c, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]\n"
    )
}

fn config(wait: &str) -> String {
    format!(
        "---\napiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nwaitForPodsReady: {wait}\n"
    )
}

fn scheduler(yaml: &str) -> Scheduler {
    let setup = Setup::from_yaml(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    Scheduler::new(Model::build(&setup).unwrap_or_else(|e| panic!("{e}")))
}

fn sim(yaml: &str, max_cycles: Option<u64>) -> SimOutcome {
    simulate(scheduler(yaml), &ScenarioSpec::default(), max_cycles)
}

fn cond<'a>(s: &'a Scheduler, i: usize, t: &str) -> Option<&'a Condition> {
    find(&s.state(i).conditions, t)
}

fn triple(c: Option<&Condition>) -> (String, String, String) {
    let c = c.expect("condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

fn t(status: &str, reason: &str, message: &str) -> (String, String, String) {
    (status.into(), reason.into(), message.into())
}

#[test]
fn missing_or_inactive_check_makes_the_queue_inactive() {
    // clusterqueue.go inactiveReason: AdmissionCheckNotFound / AdmissionCheckInactive.
    let s = scheduler(
        &(base("  admissionChecksStrategy: {admissionChecks: [{name: prov}]}\n")
            + &wl("w", 1, "0s", "")),
    );
    assert_eq!(
        s.model().cqs[0].inactive,
        Some((
            "AdmissionCheckNotFound".to_string(),
            "Can't admit new workloads: references missing AdmissionCheck(s): prov.".to_string()
        ))
    );
    let inactive = base("  admissionChecks: [prov]\n")
        + &check_with_status(
            "prov",
            "",
            "status: {conditions: [{type: Active, status: \"False\", reason: BadParameters, message: x}]}\n",
        );
    let s = scheduler(&inactive);
    assert_eq!(
        s.model().cqs[0].inactive.as_ref().map(|i| i.0.as_str()),
        Some("AdmissionCheckInactive")
    );
}

#[test]
fn reservation_waits_for_checks() {
    // admissionchecks_test.go TestSyncAdmittedCondition "reservation, checks not ready with
    // observability": QuotaReserved=True, Admitted=False/UnsatisfiedAdmissionChecks; a check
    // nobody answers keeps it there (the quota stays reserved).
    let yaml = base("  admissionChecks: [prov]\n") + &check("prov", "") + &wl("w", 1, "0s", "");
    let o = sim(&yaml, None);
    let s = &o.sched;
    assert_eq!(s.state(0).phase, Phase::Admitted);
    assert_eq!(triple(cond(s, 0, "QuotaReserved")).0, "True");
    assert_eq!(
        triple(cond(s, 0, "Admitted")),
        t(
            "False",
            "UnsatisfiedAdmissionChecks",
            "The workload has not all checks ready"
        )
    );
    assert_eq!(s.state(0).first_admitted_ms, None);
    let text = kubetrain_kueue::explain::explain(s, 0).to_text();
    assert!(
        text.contains("Quota reserved; waiting for admission check(s): prov (Pending)"),
        "{text}"
    );
    let html = kubetrain_kueue::sim::report::html(&o, "checks");
    assert!(html.contains("<h2>Admission checks</h2>"), "{html}");
}

#[test]
fn ready_answer_admits_and_the_job_starts_then() {
    // admissionchecks_test.go "reservation, checks ready": Admitted=True once every check is
    // Ready; the run time counts from there.
    let yaml =
        base("  admissionChecks: [prov]\n") + &check("prov", "Ready@30s") + &wl("w", 1, "0s", "");
    let o = sim(&yaml, None);
    let s = &o.sched;
    assert_eq!(s.state(0).first_admitted_ms, Some(30_000));
    assert_eq!(s.state(0).finished_ms, Some(30_000 + 600_000));
    assert_eq!(s.state(0).life.check_wait_ms, 30_000);
}

#[test]
fn checks_apply_to_their_flavors_only() {
    // workload_controller_test.go "add only checks covering all flavors to unadmitted wl from cq
    // with strategy": a check `onFlavors: [b]` does not hold a workload admitted on `a`.
    let yaml =
        base("  admissionChecksStrategy: {admissionChecks: [{name: prov, onFlavors: [b]}]}\n")
            + &check("prov", "")
            + &wl("on-a", 4, "0s", "")
            + &wl("on-b", 4, "1s", "");
    let o = sim(&yaml, Some(20));
    let s = &o.sched;
    assert_eq!(triple(cond(s, 0, "Admitted")).1, "Admitted");
    assert_eq!(
        triple(cond(s, 1, "Admitted")).1,
        "UnsatisfiedAdmissionChecks"
    );
}

#[test]
fn retry_evicts_and_requeues_rejected_deactivates() {
    // workload_controller.go reconcileCheckBasedEviction: Retry → Evicted/AdmissionCheck and
    // requeued; Rejected → deactivated (Evicted/DeactivatedDueToAdmissionCheck).
    let yaml = base("  admissionChecks: [prov]\n")
        + &check("prov", "Retry@10s,Ready@5s")
        + &wl("w", 1, "0s", "")
        + &wl("r", 1, "0s", "kubetrain.dev/check.prov: Rejected@20s");
    let o = sim(&yaml, None);
    let s = &o.sched;
    assert_eq!(s.state(0).life.check_retries, 1);
    assert_eq!(s.state(0).life.reservations, 2);
    // Re-admitted: the eviction is history (SetQuotaReservation's "Previously: ...").
    assert_eq!(
        triple(cond(s, 0, "Evicted")),
        t(
            "False",
            "QuotaReserved",
            "Previously: Evicted due to AdmissionCheck in Retry state: \"prov\""
        )
    );
    assert_eq!(triple(cond(s, 0, "Requeued")).1, "AdmissionCheck");
    assert!(s.state(0).first_admitted_ms.is_some_and(|t| t >= 15_000));
    assert_eq!(
        triple(cond(s, 1, "Evicted")),
        t(
            "True",
            "DeactivatedDueToAdmissionCheck",
            "The workload is deactivated due to AdmissionCheck in Rejected state: \"prov\""
        )
    );
    assert!(s.state(1).life.deactivated);
    assert_eq!(s.state(1).first_admitted_ms, None);
    assert!(s.state(1).admission.is_none());
}

#[test]
fn pods_ready_timeout_evicts_backs_off_and_deactivates() {
    // workload_controller.go reconcileNotReadyTimeout and triggerDeactivation; test
    // workload_controller_test.go "workload with Admitted=True, no PodsReady; timeout exceeded".
    let yaml = base("")
        + &config(
            "{timeout: 1m, requeuingStrategy: {backoffLimitCount: 1, backoffBaseSeconds: 30}}",
        )
        + &wl("w", 1, "0s", "kubetrain.dev/pods-ready: never");
    let o = sim(&yaml, None);
    let s = &o.sched;
    // Admitted at 0, evicted at 60 s, requeued after 30 s, admitted again, evicted at the
    // second timeout past the limit: deactivated.
    assert_eq!(s.state(0).life.pods_ready_timeouts, 1);
    assert_eq!(s.state(0).life.reservations, 2);
    assert!(s.state(0).life.deactivated);
    assert_eq!(
        triple(cond(s, 0, "Evicted")),
        t(
            "True",
            "DeactivatedDueToRequeuingLimitExceeded",
            "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
        )
    );
    assert_eq!(
        triple(cond(s, 0, "Requeued")).1,
        "DeactivatedDueToRequeuingLimitExceeded"
    );
    let html = kubetrain_kueue::sim::report::html(&o, "pods ready");
    assert!(
        html.contains("1 evictions by PodsReadyTimeout over 1 workloads; 1 deactivated"),
        "{html}"
    );
}

#[test]
fn pods_ready_timeout_message_and_backoff() {
    let yaml =
        base("") + &config("{timeout: 1m}") + &wl("w", 1, "0s", "kubetrain.dev/pods-ready: never");
    let mut s = scheduler(&yaml);
    s.arrive_all();
    s.cycle();
    assert_eq!(
        triple(cond(&s, 0, "PodsReady")),
        t(
            "False",
            "WaitForStart",
            "Not all pods are ready or succeeded"
        )
    );
    s.advance_to(60_000);
    s.run_timers();
    assert_eq!(
        triple(cond(&s, 0, "Evicted")),
        t(
            "True",
            "PodsReadyTimeout",
            "Exceeded the PodsReady timeout ns/w"
        )
    );
    assert_eq!(
        s.state(0).life.backoff_until,
        Some(120_000),
        "60 s × 2^0 backoff"
    );
    s.advance_to(119_999);
    s.run_timers();
    assert!(s.cycle().admitted.is_empty(), "still backing off");
    s.advance_to(120_000);
    s.run_timers();
    assert_eq!(
        triple(cond(&s, 0, "Requeued")),
        t(
            "True",
            "BackoffFinished",
            "The workload backoff was finished"
        )
    );
    assert_eq!(s.cycle().admitted, vec![0]);
}

#[test]
fn block_admission_waits_for_ready_pods() {
    // scheduler.go waitForPodsReadyIfNeeded: with blockAdmission the second workload waits
    // (QuotaReserved=False/WaitingForPodsReady) until the first one's pods are ready.
    let yaml = base("")
        + &config("{timeout: 5m, blockAdmission: true}")
        + &wl("first", 1, "0s", "kubetrain.dev/pods-ready: 30s")
        + &wl("second", 1, "1s", "");
    let mut s = scheduler(&yaml);
    s.arrive(0);
    assert_eq!(s.cycle().admitted, vec![0]);
    s.advance_to(1_000);
    s.arrive(1);
    assert!(s.cycle().admitted.is_empty());
    assert_eq!(
        triple(cond(&s, 1, "QuotaReserved")),
        t(
            "False",
            "WaitingForPodsReady",
            "waiting for all admitted workloads to be in PodsReady condition"
        )
    );
    s.advance_to(30_000);
    assert_eq!(s.cycle().admitted, vec![1]);
    assert_eq!(triple(cond(&s, 0, "PodsReady")).1, "Started");
}

#[test]
fn recovery_timeout_after_a_lost_pod() {
    // reconciler.go generatePodsReadyCondition (WaitForRecovery) and admittedNotReadyWorkload:
    // a pod lost 10 s after start and never replaced is evicted after recoveryTimeout (20 s).
    let yaml = base("")
        + &config("{timeout: 5m, recoveryTimeout: 20s}")
        + &wl(
            "w",
            1,
            "0s",
            "kubetrain.dev/pods-lost: 10s, kubetrain.dev/pods-recover: never",
        );
    let mut s = scheduler(&yaml);
    s.arrive_all();
    s.cycle();
    s.advance_to(10_000);
    s.run_timers();
    assert_eq!(
        triple(cond(&s, 0, "PodsReady")),
        t(
            "False",
            "WaitForRecovery",
            "At least one pod has failed, waiting for recovery"
        )
    );
    s.advance_to(30_000);
    s.run_timers();
    assert_eq!(triple(cond(&s, 0, "Evicted")).1, "PodsReadyTimeout");
    // With a replacement in time it recovers instead.
    let yaml = yaml.replace("pods-recover: never", "pods-recover: 5s");
    let mut s = scheduler(&yaml);
    s.arrive_all();
    s.cycle();
    s.advance_to(60_000);
    s.run_timers();
    assert_eq!(triple(cond(&s, 0, "PodsReady")).1, "Recovered");
    assert!(cond(&s, 0, "Evicted").is_none());
}
