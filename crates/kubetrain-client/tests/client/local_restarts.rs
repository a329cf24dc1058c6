//! Restarts of a local run (issue 32): an elastic job shrinks when a trainer pod is lost and fails below its
//! minimum; a disruption restarts the run without consuming the failure budget while a failure consumes it;
//! every restart's cause, last checkpoint, resumed step and work lost are in the summary and the record.
//!
//! The pods are shell scripts that write their pid, then wait on a FIFO the test writes their exit code to:
//! the test decides when and how each pod ends, and kills a pod's process by its identity (pid, start
//! time, boot, user), never by a bare pid.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use kubetrain_client::JobStatus;
use kubetrain_client::local::{
    self, ProcessIdentity, RestartCause, RestartScope, RunEvent, RunSummary,
};
use kubetrain_client::progress::{Progress, Reporter};
use serde_json::json;
use tokio::sync::mpsc;

use crate::common::trainjob_with;

/// A pod's script: per attempt `n` (counted by files in `dir`), writes its pid to `<dir>/<rank>-<n>.pid` and
/// its env to `<dir>/env`, then exits with the code the test writes to `<dir>/<rank>-<n>.fifo`.
fn script(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "n=$(ls {d} | grep -c \"^attempt-$PET_NODE_RANK-\"); touch {d}/attempt-$PET_NODE_RANK-$n; \
         env > {d}/env; echo $$$$ > {d}/$PET_NODE_RANK-$n.tmp && mv {d}/$PET_NODE_RANK-$n.tmp {d}/$PET_NODE_RANK-$n.pid; \
         read code < {d}/$PET_NODE_RANK-$n.fifo; exit $code"
    )
}

/// FIFOs for `ranks` × `attempts`.
fn fifos(dir: &Path, ranks: usize, attempts: usize) {
    for r in 0..ranks {
        for n in 0..attempts {
            let path = dir.join(format!("{r}-{n}.fifo"));
            nix_mkfifo(&path);
        }
    }
}

fn nix_mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Waits (polling, up to a minute) until `path` exists.
async fn until_exists(path: &Path) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The identity of the process of rank `r` in attempt `n`, once it has started.
async fn pod_process(dir: &Path, r: usize, n: usize) -> ProcessIdentity {
    let file = dir.join(format!("{r}-{n}.pid"));
    until_exists(&file).await;
    let pid: u32 = std::fs::read_to_string(&file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    ProcessIdentity::of(pid).expect("the pod's process is alive")
}

/// Ends rank `r`'s attempt `n` with `code` (blocks until the pod reads it).
async fn end(dir: &Path, r: usize, n: usize, code: i32) {
    let fifo = dir.join(format!("{r}-{n}.fifo"));
    tokio::task::spawn_blocking(move || std::fs::write(fifo, format!("{code}\n")).unwrap())
        .await
        .unwrap();
}

/// Posts `progress` to the run's status endpoint as the trainer would (the env a pod got).
async fn report(dir: &Path, progress: Progress) {
    let env = std::fs::read_to_string(dir.join("env")).unwrap();
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(str::to_string)
    };
    let url = var("KUBEFLOW_TRAINER_SERVER_URL").expect("the status env");
    let ca = var("KUBEFLOW_TRAINER_SERVER_CA_CERT").map(PathBuf::from);
    let token = var("KUBEFLOW_TRAINER_SERVER_TOKEN").map(PathBuf::from);
    tokio::task::spawn_blocking(move || {
        Reporter::new(&url, ca, token)
            .unwrap()
            .report_now(&progress)
            .unwrap()
    })
    .await
    .unwrap();
}

/// Runs `plan` on a task; the events come through the returned receiver as they happen.
fn start(
    plan: local::JobPlan,
) -> (
    tokio::task::JoinHandle<RunSummary>,
    mpsc::UnboundedReceiver<RunEvent>,
) {
    let (tx, mut rx) = mpsc::channel(local::EVENT_BUFFER);
    let (seen_tx, seen_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(e) = rx.recv().await {
            let _ = seen_tx.send(e);
        }
    });
    let run = tokio::spawn(async move { local::execute(&plan, &tx, std::future::pending()).await });
    (run, seen_rx)
}

/// Waits (up to a minute) for an event that `wanted` accepts; returns it.
async fn until_event(
    events: &mut mpsc::UnboundedReceiver<RunEvent>,
    wanted: impl Fn(&RunEvent) -> bool,
) -> RunEvent {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let e = events.recv().await.expect("the run ended first");
            if wanted(&e) {
                return e;
            }
        }
    })
    .await
    .expect("the event never came")
}

fn notice_starting(prefix: &'static str) -> impl Fn(&RunEvent) -> bool {
    move |e| matches!(e, RunEvent::Notice(n) if n.starts_with(prefix))
}

fn plan_of(name: &str, nodes: i32, dir: &Path, elastic: Option<(u32, u32)>) -> local::JobPlan {
    let yaml = trainjob_with(
        name,
        nodes,
        &script(&dir.join("pods")),
        json!({"limits": {"nvidia.com/gpu": "1"}}),
    );
    let mut plan = crate::common::plan(&yaml, dir);
    // Until the torch plugin renders elasticPolicy, a plan is made elastic as PET_NNODES=min:max would.
    plan.elastic = elastic;
    plan
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_node_of_an_elastic_job_shrinks_it_and_the_run_completes() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods");
    std::fs::create_dir(&pods).unwrap();
    fifos(&pods, 3, 1);
    let (run, mut events) = start(plan_of("elastic", 3, dir.path(), Some((2, 3))));
    let victim = pod_process(&pods, 1, 0).await;
    pod_process(&pods, 0, 0).await;
    pod_process(&pods, 2, 0).await;
    report(
        &pods,
        Progress::new()
            .step(30)
            .checkpoint(20, SystemTime::now() - Duration::from_secs(100)),
    )
    .await;
    assert!(victim.kill(), "the pod's process was still the one started");
    let RunEvent::Notice(notice) = until_event(&mut events, notice_starting("restart 1:")).await
    else {
        unreachable!()
    };
    assert!(
        notice.contains("disruption: pod elastic-node-0-1 was killed by signal 9")
            && notice.contains("the elastic job goes on with 2 node(s)")
            && notice.contains("the failure budget is not consumed")
            && notice.contains("work lost: 10 steps"),
        "{notice}"
    );
    // The survivors (which meet again at the elastic rendezvous) resume and finish.
    report(&pods, Progress::new().step(21).resumed_from_step(20)).await;
    end(&pods, 0, 0, 0).await;
    end(&pods, 2, 0, 0).await;
    let summary = run.await.unwrap();
    assert_eq!(summary.status, JobStatus::Complete, "{}", summary.message);
    assert_eq!(summary.restarts, 0, "no restart of the whole run");
    let [shrink] = summary.restart_history.as_slice() else {
        panic!("{:?}", summary.restart_history)
    };
    assert_eq!(shrink.cause, RestartCause::Disruption);
    assert_eq!(shrink.scope, RestartScope::Shrink { nodes: 2 });
    assert!(!shrink.consumed_budget);
    assert_eq!(
        (shrink.step, shrink.checkpoint_step, shrink.lost_steps),
        (Some(30), Some(20), Some(10))
    );
    assert_eq!(shrink.resumed_from_step, Some(20));
    // 3 GPUs (one per node) for about 100 s since the checkpoint.
    assert_eq!(shrink.gpus, 3);
    let lost = shrink.lost_seconds.unwrap();
    assert!((100..160).contains(&lost), "{lost}");
    assert_eq!(shrink.lost_gpu_seconds, Some(lost * 3));
    let lost_pod = summary
        .pods
        .iter()
        .find(|p| p.name == "elastic-node-0-1")
        .unwrap();
    assert!(
        lost_pod
            .detail
            .as_deref()
            .unwrap()
            .contains("the elastic job went on without it"),
        "{lost_pod:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elastic_job_below_its_minimum_fails_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods");
    std::fs::create_dir(&pods).unwrap();
    fifos(&pods, 2, 1);
    let (run, _events) = start(plan_of("small", 2, dir.path(), Some((2, 3))));
    let victim = pod_process(&pods, 0, 0).await;
    pod_process(&pods, 1, 0).await;
    assert!(victim.kill());
    let summary = run.await.unwrap();
    assert_eq!(summary.status, JobStatus::Failed);
    assert!(
        summary.message.contains(
            "elastic job below its minimum: pod small-node-0-0 was killed by signal 9 (a disruption) and 1 \
             trainer pod(s) are left, fewer than minNodes 2 (PET_NNODES=2:3)"
        ),
        "{}",
        summary.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disruption_restarts_without_the_budget_and_a_failure_consumes_it() {
    let dir = tempfile::tempdir().unwrap();
    let pods = dir.path().join("pods");
    std::fs::create_dir(&pods).unwrap();
    fifos(&pods, 2, 3);
    let mut plan = plan_of("budget", 2, dir.path(), None);
    // A budget of one restart after a failure.
    plan.max_restarts = 1;
    let run_dir = plan.run_dir.clone();
    let mut recorder = local::record::Recorder::new(&plan).unwrap();
    let (run, mut events) = start(plan);
    // Attempt 0: the trainer reports a checkpoint at step 20 and is at step 30; node 1 is lost.
    let victim = pod_process(&pods, 1, 0).await;
    pod_process(&pods, 0, 0).await;
    report(
        &pods,
        Progress::new()
            .step(30)
            .checkpoint(20, SystemTime::now() - Duration::from_secs(100)),
    )
    .await;
    assert!(victim.kill());
    let restart = until_event(&mut events, |e| matches!(e, RunEvent::Restarting { .. })).await;
    let RunEvent::Restarting { attempt, reason } = restart else {
        unreachable!()
    };
    assert_eq!(attempt, 1);
    assert!(
        reason.starts_with("disruption: pod budget-node-0-1 was killed by signal 9")
            && reason.contains("every pod restarts, the failure budget is not consumed")
            && reason.contains("last checkpoint: step 20 at ")
            && reason.contains("work lost: 10 steps"),
        "{reason}"
    );
    // Attempt 1: resumed from step 20; node 1 fails for real (exit 3): the one restart of the budget.
    pod_process(&pods, 0, 1).await;
    pod_process(&pods, 1, 1).await;
    report(
        &pods,
        Progress::new()
            .step(25)
            .checkpoint(20, SystemTime::now())
            .resumed_from_step(20),
    )
    .await;
    end(&pods, 1, 1, 3).await;
    let restart = until_event(&mut events, |e| matches!(e, RunEvent::Restarting { .. })).await;
    let RunEvent::Restarting { attempt, reason } = restart else {
        unreachable!()
    };
    assert_eq!(attempt, 2);
    assert!(
        reason.starts_with("failure: pod budget-node-0-1 failed (exit code 3)")
            && reason.contains("consumes the failure budget")
            && reason.ends_with("(1 of failurePolicy.maxRestarts 1)"),
        "{reason}"
    );
    // Attempt 2: another failure, and the budget is spent.
    pod_process(&pods, 0, 2).await;
    pod_process(&pods, 1, 2).await;
    end(&pods, 0, 2, 4).await;
    let summary = run.await.unwrap();
    assert_eq!(summary.status, JobStatus::Failed);
    assert_eq!(summary.message, "pod budget-node-0-0 failed (exit code 4)");
    assert_eq!(summary.restarts, 2);
    let [disruption, failure] = summary.restart_history.as_slice() else {
        panic!("{:?}", summary.restart_history)
    };
    assert_eq!(
        (
            disruption.cause,
            disruption.scope,
            disruption.consumed_budget
        ),
        (RestartCause::Disruption, RestartScope::Job, false)
    );
    assert_eq!(
        (
            disruption.step,
            disruption.checkpoint_step,
            disruption.resumed_from_step
        ),
        (Some(30), Some(20), Some(20))
    );
    assert_eq!(disruption.gpus, 2);
    assert_eq!(
        (
            failure.cause,
            failure.consumed_budget,
            failure.step,
            failure.lost_steps
        ),
        (RestartCause::Failure, true, Some(25), Some(5))
    );
    // The record keeps them.
    recorder.finish(&summary).unwrap();
    let record = local::record::read(&run_dir).unwrap();
    assert_eq!(record.restarts, summary.restart_history);
}
