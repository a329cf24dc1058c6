//! A livelock ends the simulation: with nothing left to arrive, finish or time out but the batched requeue
//! flushes the loop itself causes, a preemptor that evicts a borrowing workload which is then readmitted
//! before it in the next cycle (the preemptor "no longer fits") repeats forever. `simulate` without a cycle
//! bound used to run on and on (s5 of the TrainJob comparison of 2026-12-06, reduced to two Workloads);
//! it now stops when the state after a cycle equals an earlier one, and says so.
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::conditions::find;
use kubetrain_kueue::sched::{Phase, Scheduler};
use kubetrain_kueue::sim::engine::{SimOutcome, simulate};
use kubetrain_kueue::sim::report::{simulation_report, workloads};
use kubetrain_kueue::sim::scenario::ScenarioSpec;

/// `borrowing` (cpu 2 per pod, 3 pods, minCount 1) borrows cpu in `borrower`; `reclaiming` (priority 50,
/// cpu 3 and 2 GPUs per pod, 4 pods, minCount 1) reclaims it from `reclaimer`, whose GPUs are all lent.
const LIVELOCK: &str = r#"apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: f}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: root}
spec:
  resourceGroups:
  - coveredResources: [cpu, example.com/gpu]
    flavors: [{name: f, resources: [{name: cpu, nominalQuota: 4}, {name: example.com/gpu, nominalQuota: 0}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: left}
spec: {parentName: root}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: right}
spec: {parentName: root}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: borrower}
spec:
  cohortName: left
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, example.com/gpu]
    flavors: [{name: f, resources: [{name: cpu, nominalQuota: 1}, {name: example.com/gpu, nominalQuota: 5, lendingLimit: 4}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: reclaimer}
spec:
  cohortName: left
  namespaceSelector: {}
  preemption: {reclaimWithinCohort: LowerPriority, withinClusterQueue: LowerPriority, borrowWithinCohort: {policy: LowerPriority}}
  queueingStrategy: StrictFIFO
  resourceGroups:
  - coveredResources: [cpu, example.com/gpu]
    flavors: [{name: f, resources: [{name: cpu, nominalQuota: 8}, {name: example.com/gpu, nominalQuota: 2, lendingLimit: 2}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: lender}
spec:
  cohortName: right
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, example.com/gpu]
    flavors: [{name: f, resources: [{name: cpu, nominalQuota: 4, borrowingLimit: 1, lendingLimit: 2}, {name: example.com/gpu, nominalQuota: 2, borrowingLimit: 4}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq-borrower, namespace: ns}
spec: {clusterQueue: borrower}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq-reclaimer, namespace: ns}
spec: {clusterQueue: reclaimer}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: borrowing, namespace: ns, uid: uid-a, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  queueName: lq-borrower
  podSets:
  - {name: main, count: 3, minCount: 1, template: {spec: {containers: [{name: c, resources: {requests: {cpu: 2}}}]}}}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: reclaiming, namespace: ns, uid: uid-b, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  queueName: lq-reclaimer
  priority: 50
  podSets:
  - {name: main, count: 4, minCount: 1, template: {spec: {containers: [{name: c, resources: {requests: {cpu: 3, example.com/gpu: 2}}}]}}}
"#;

fn sim(yaml: &str, max_cycles: Option<u64>) -> SimOutcome {
    let setup = Setup::from_yaml(yaml).unwrap_or_else(|e| panic!("{e}"));
    let model = Model::build(&setup).unwrap_or_else(|e| panic!("{e}"));
    simulate(Scheduler::new(model), &ScenarioSpec::default(), max_cycles)
}

/// The workload reports as JSON, to compare two outcomes.
fn report(o: &SimOutcome) -> String {
    serde_json::to_string(&workloads(&o.sched)).expect("reports serialize")
}

#[test]
fn preempt_readmit_livelock_ends_the_run() {
    let o = sim(LIVELOCK, None);
    let period = o
        .repeating_every
        .expect("the run stops on the livelock, not because nothing is left");
    assert!(
        period > 0 && o.cycles < 1000,
        "cycles {}, period {period}",
        o.cycles
    );
    // It is a real livelock: preemptions go on, one every second cycle.
    assert!(o.metrics.preemptions >= 50, "{}", o.metrics.preemptions);
    let s = &o.sched;
    let borrowing = s.workload_id("ns/borrowing").expect("borrowing");
    let reclaiming = s.workload_id("ns/reclaiming").expect("reclaiming");
    assert_eq!(s.state(borrowing).phase, Phase::Pending);
    let preempted = find(&s.state(borrowing).conditions, "Preempted").expect("Preempted");
    assert_eq!(preempted.reason, "InCohortReclaimWhileBorrowing");
    assert_eq!(s.state(reclaiming).phase, Phase::Pending);
    let reserved = find(&s.state(reclaiming).conditions, "QuotaReserved").expect("QuotaReserved");
    assert!(
        reserved
            .message
            .ends_with("Pending the preemption of 1 workload(s)"),
        "{}",
        reserved.message
    );
    // The workload admitted and preempted over and over is the one caught in the loop; the preemptor, never
    // admitted, is not (Kueue counts the first's evictions in `status.schedulingStats`).
    assert_eq!(o.repeating, vec![borrowing]);
    let json = serde_json::to_value(simulation_report(&o)).expect("the report serializes");
    let flagged: Vec<&str> = json["workloads"]
        .as_array()
        .expect("workloads")
        .iter()
        .filter(|w| w["repeating"] == true)
        .map(|w| w["key"].as_str().expect("key"))
        .collect();
    assert_eq!(flagged, ["ns/borrowing"]);
    // The state it stops on is the one a bounded run reaches at that cycle, and again a period later.
    let at_stop = report(&o);
    assert_eq!(report(&sim(LIVELOCK, Some(o.cycles))), at_stop);
    assert_eq!(report(&sim(LIVELOCK, Some(o.cycles + period))), at_stop);
    assert_eq!(report(&sim(LIVELOCK, Some(o.cycles + 7 * period))), at_stop);
    // A bound keeps its meaning: the state after that many cycles, the livelock's phase included.
    let bounded = sim(LIVELOCK, Some(o.cycles + 1));
    assert_eq!(bounded.cycles, o.cycles + 1);
    assert_eq!(bounded.repeating_every, None);
    assert!(bounded.repeating.is_empty());
    assert_eq!(bounded.sched.state(borrowing).phase, Phase::Admitted);
}

#[test]
fn a_run_that_settles_is_not_a_livelock() {
    // Without the reclaiming workload the borrower is admitted and nothing else happens.
    let (settling, _) = LIVELOCK
        .rsplit_once("---\n")
        .expect("the last document is the reclaiming workload");
    let o = sim(settling, None);
    assert_eq!(o.repeating_every, None);
    assert!(o.repeating.is_empty());
    let s = &o.sched;
    let borrowing = s.workload_id("ns/borrowing").expect("borrowing");
    assert_eq!(s.state(borrowing).phase, Phase::Admitted);
    assert_eq!(o.metrics.preemptions, 0);
}
