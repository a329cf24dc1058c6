//! The local queue: concurrent local runs wait for a (synthetic, injected) capacity in Kueue's order.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{plan, trainjob_with, wait_for};
use kubetrain_client::local::capacity::Capacity;
use kubetrain_client::local::queue::{
    LocalQueue, Pending, QueueError, QueueState, QueueingStrategy, Ticket,
};
use kubetrain_client::{Backend, ClientError, JobStatus, LocalProcessBackend, TrainerClient};

/// The ledger's file in the queue directory (docs/local-runner.md, "The ledger").
const LEDGER_FILE: &str = "ledger.json";

fn cores(cpu: u64) -> Capacity {
    Capacity {
        cpu,
        memory: None,
        gpus: 0,
    }
}

/// A queue of `cpu` cores whose ledger lives in `dir/queue`, polled every 20 ms.
fn queue(dir: &Path, cpu: u64) -> LocalQueue {
    LocalQueue::new(dir.join("queue"), cores(cpu)).with_poll_interval(Duration::from_millis(20))
}

/// A one-pod job asking `cpu` cores, running `script`.
fn job(name: &str, cpu: &str, script: &str) -> String {
    trainjob_with(
        name,
        1,
        script,
        serde_json::json!({"requests": {"cpu": cpu}}),
    )
}

/// Queues a one-pod job `name` asking `cpu` cores (its run directory under `dir`).
fn ticket(queue: &LocalQueue, dir: &Path, name: &str, cpu: &str) -> Ticket {
    queue
        .enqueue(&plan(&job(name, cpu, "true"), dir))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn pending(state: QueueState) -> Pending {
    match state {
        QueueState::Pending(p) => p,
        QueueState::Admitted => panic!("admitted, expected pending"),
    }
}

/// A backend over `queue` whose run directories live under `dir/runs`.
fn client(dir: &Path, queue: LocalQueue) -> TrainerClient<LocalProcessBackend> {
    TrainerClient::new(
        LocalProcessBackend::new()
            .with_runs_under(dir.join("runs"))
            .with_queue(Some(queue)),
    )
}

async fn create(
    client: &TrainerClient<LocalProcessBackend>,
    yaml: &str,
) -> Result<(), ClientError> {
    let docs = kubetrain_api::parse_documents(yaml).expect("yaml");
    let Some(kubetrain_api::Document::TrainJob(job)) = docs.into_iter().next().map(|d| d.document)
    else {
        panic!("no TrainJob in {yaml}");
    };
    client.backend().create_job(*job).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_of_two_runs_waits_with_kueues_reason_and_runs_after_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("first-done");
    let client = client(dir.path(), queue(dir.path(), 2));
    let first = format!("sleep 0.5; touch {}", marker.display());
    let second = format!("test -e {} && echo after-first", marker.display());
    create(&client, &job("first", "2", &first)).await.unwrap();
    create(&client, &job("second", "2", &second)).await.unwrap();

    wait_for(&client, "first", &[JobStatus::Running]).await;
    let waiting = client.get_job("second").await.unwrap();
    assert_eq!(waiting.status, JobStatus::Created);
    let message = waiting.message.unwrap_or_default();
    assert!(
        message.starts_with(
            "Pending: couldn't assign flavors to pod set node: insufficient unused quota for cpu"
        ),
        "{message}"
    );
    assert!(message.ends_with("(position 1 of 1 waiting)"), "{message}");

    wait_for(&client, "second", &[JobStatus::Complete]).await;
    assert_eq!(
        client.get_job("first").await.unwrap().status,
        JobStatus::Complete
    );
    let reasons: Vec<String> = client
        .get_job_events("second")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.reason)
        .collect();
    let pos = |r: &str| reasons.iter().position(|x| x == r);
    assert!(
        pos("Pending") < pos("Admitted") && pos("Admitted") < pos("Started"),
        "{reasons:?}"
    );
    // Both runs ended: the ledger holds nothing.
    assert!(queue(dir.path(), 2).runs().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_runs_that_each_need_the_machine_start_in_arrival_order() {
    let dir = tempfile::tempdir().unwrap();
    let order = dir.path().join("order");
    let client = client(dir.path(), queue(dir.path(), 4));
    for name in ["a", "b", "c"] {
        let script = format!("echo {name} >> {}; sleep 0.2", order.display());
        create(&client, &job(name, "3", &script)).await.unwrap();
    }
    let runs = queue(dir.path(), 4).runs().unwrap();
    let jobs: Vec<&str> = runs.iter().map(|r| r.job.as_str()).collect();
    assert_eq!(jobs, ["default/a", "default/b", "default/c"]);
    assert_eq!(runs[0].state, QueueState::Admitted);
    let positions: Vec<(usize, usize)> = runs[1..]
        .iter()
        .map(|r| {
            let p = pending(r.state.clone());
            (p.position, p.waiting)
        })
        .collect();
    assert_eq!(positions, [(1, 2), (2, 2)]);
    for name in ["a", "b", "c"] {
        wait_for(&client, name, &[JobStatus::Complete]).await;
    }
    assert_eq!(std::fs::read_to_string(&order).unwrap(), "a\nb\nc\n");
}

/// Tickets polled by hand: which of three runs are admitted under each strategy.
#[test]
fn strict_fifo_blocks_behind_the_head_and_best_effort_lets_a_smaller_run_pass() {
    // A 3-core machine: a (2) runs, b (2) cannot, c (1) could.
    for (strategy, c_admitted) in [
        (QueueingStrategy::BestEffortFifo, true),
        (QueueingStrategy::StrictFifo, false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let q = queue(dir.path(), 3).with_strategy(strategy);
        let mut a = ticket(&q, dir.path(), "a", "2");
        let mut b = ticket(&q, dir.path(), "b", "2");
        let mut c = ticket(&q, dir.path(), "c", "1");
        assert_eq!(a.poll().unwrap(), QueueState::Admitted, "{strategy}");
        let b_pending = pending(b.poll().unwrap());
        assert_eq!(
            (b_pending.position, b_pending.waiting),
            (1, 2),
            "{strategy}"
        );
        assert!(
            b_pending
                .reason
                .contains("insufficient unused quota for cpu"),
            "{b_pending}"
        );
        match c.poll().unwrap() {
            QueueState::Admitted => assert!(c_admitted, "{strategy}: c passed b"),
            QueueState::Pending(p) => {
                assert!(!c_admitted, "{strategy}: c waits: {p}");
                assert_eq!(p.position, 2);
            }
        }
        drop(a);
        // b is first in line again and fits next to whatever c holds.
        assert_eq!(b.poll().unwrap(), QueueState::Admitted, "{strategy}");
        assert_eq!(c.poll().unwrap(), QueueState::Admitted, "{strategy}");
    }
}

#[test]
fn an_entry_whose_process_died_is_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path(), 2);
    let mut holder = Command::new("sleep").arg("30").spawn().unwrap();
    // An admitted entry of another process, in the ledger's file format.
    let stale = serde_json::json!({
        "version": 1,
        "nextSeq": 2,
        "entries": [{
            "id": "stale", "job": "default/crashed", "seq": 1, "pid": holder.id(),
            "state": "admitted", "queuedAtMs": 0,
            "podSets": [{"name": "node", "count": 1, "requests": {"cpu": "2"}}],
        }],
    });
    std::fs::create_dir_all(q.dir()).unwrap();
    std::fs::write(q.dir().join(LEDGER_FILE), stale.to_string()).unwrap();
    let mut ticket = ticket(&q, dir.path(), "next", "2");
    // While the holder lives its share counts.
    let p = pending(ticket.poll().unwrap());
    assert!(
        p.reason.contains("insufficient unused quota for cpu"),
        "{p}"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(ticket.poll().unwrap(), QueueState::Admitted);
    let notices = ticket.take_notices();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("TrainJob default/crashed")
                && n.contains(&format!("process {} is gone", holder.id()))),
        "{notices:?}"
    );
    let jobs: Vec<String> = q.runs().unwrap().into_iter().map(|r| r.job).collect();
    assert_eq!(jobs, ["default/next"]);
}

#[test]
fn a_corrupt_ledger_is_set_aside_and_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path(), 2);
    std::fs::create_dir_all(q.dir()).unwrap();
    let cases: [&[u8]; 4] = [
        b"{ not json",
        b"",
        br#"{"version": 7, "nextSeq": 1, "entries": []}"#,
        br#"{"version": 1, "nextSeq": 2, "entries": [{"id": "x", "job": "default/x", "seq": 1, "pid": 1,
            "state": "admitted", "queuedAtMs": 0, "podSets": [{"name": "node", "count": 1, "requests": {"cpu": "two"}}]}]}"#,
    ];
    for garbage in cases {
        std::fs::write(q.dir().join(LEDGER_FILE), garbage).unwrap();
        let mut ticket = ticket(&q, dir.path(), "after", "1");
        let notices = ticket.take_notices();
        assert!(
            notices
                .iter()
                .any(|n| n.contains("was unreadable") && n.contains("rebuilt")),
            "{notices:?}"
        );
        assert!(q.dir().join(format!("{LEDGER_FILE}.corrupt")).exists());
        assert_eq!(ticket.poll().unwrap(), QueueState::Admitted);
        drop(ticket);
        assert!(q.runs().unwrap().is_empty());
    }
}

#[test]
fn a_ticket_whose_entry_vanished_takes_its_place_again() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path(), 2);
    let mut first = ticket(&q, dir.path(), "first", "2");
    assert_eq!(first.poll().unwrap(), QueueState::Admitted);
    std::fs::write(q.dir().join(LEDGER_FILE), b"garbage").unwrap();
    let mut second = ticket(&q, dir.path(), "second", "2");
    // The rebuilt ledger forgot `first`; its next poll books its share again, so `second` waits.
    assert_eq!(first.poll().unwrap(), QueueState::Admitted);
    assert!(matches!(second.poll().unwrap(), QueueState::Pending(_)));
}

#[tokio::test]
async fn a_running_run_books_its_share_again_after_the_ledger_was_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path(), 2);
    let mut running = ticket(&q, dir.path(), "running", "2");
    assert_eq!(running.poll().unwrap(), QueueState::Admitted);
    let ledger = q.dir().join(LEDGER_FILE);
    let runs = running
        .hold_while(async {
            std::fs::write(&ledger, b"garbage").unwrap();
            tokio::time::sleep(Duration::from_millis(1500)).await;
            q.runs().unwrap()
        })
        .await;
    let runs: Vec<(String, QueueState)> = runs.into_iter().map(|r| (r.job, r.state)).collect();
    assert_eq!(
        runs,
        [("default/running".to_string(), QueueState::Admitted)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_can_never_fit_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path(), 2);
    let gpu = trainjob_with(
        "gpu",
        2,
        "true",
        serde_json::json!({"limits": {"nvidia.com/gpu": 1}}),
    );
    match q.enqueue(&plan(&gpu, dir.path())) {
        Err(QueueError::NeverFits(why)) => {
            assert!(
                why.to_string()
                    .contains("insufficient quota for nvidia.com/gpu"),
                "{why}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(q.runs().unwrap().is_empty(), "nothing was queued");
    let client = client(dir.path(), q.clone());
    let err = create(&client, &gpu).await.unwrap_err();
    assert!(matches!(err, ClientError::DoesNotFit(_)), "{err:?}");

    // More CPU than the machine has is not refused (processes share cores): it waits for the whole machine.
    let mut small = ticket(&q, dir.path(), "small", "1");
    let mut big = ticket(&q, dir.path(), "big", "8");
    assert!(
        big.take_notices()
            .iter()
            .any(|n| n.contains("does not fit this machine"))
    );
    assert_eq!(small.poll().unwrap(), QueueState::Admitted);
    assert!(pending(big.poll().unwrap()).reason.contains("cpu"));
    drop(small);
    assert_eq!(big.poll().unwrap(), QueueState::Admitted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_gives_up_after_the_timeout_and_deleting_a_waiting_job_leaves_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let q = queue(dir.path(), 2);
    let mut holder = ticket(&q, dir.path(), "holder", "2");
    assert_eq!(holder.poll().unwrap(), QueueState::Admitted);

    let impatient = q.clone().with_timeout(Some(Duration::from_millis(150)));
    let mut ticket = ticket(&impatient, dir.path(), "late", "1");
    let mut seen = 0;
    match ticket.wait(|_| seen += 1).await {
        Err(QueueError::Timeout { job, pending, .. }) => {
            assert_eq!(job, "default/late");
            assert!(pending.reason.contains("cpu"), "{pending}");
        }
        other => panic!("{other:?}"),
    }
    assert!(seen >= 2, "polled {seen} times");
    drop(ticket);

    let timing_out = client(dir.path(), impatient);
    create(&timing_out, &job("doomed", "1", "true"))
        .await
        .unwrap();
    let view = wait_for(&timing_out, "doomed", &[JobStatus::Failed]).await;
    assert!(view.message.unwrap().contains("was not admitted within"));

    let patient = client(dir.path(), q.clone());
    create(&patient, &job("deleted", "1", "true"))
        .await
        .unwrap();
    assert_eq!(q.runs().unwrap().len(), 2);
    patient.delete_job("deleted").await.unwrap();
    let jobs: Vec<String> = q.runs().unwrap().into_iter().map(|r| r.job).collect();
    assert_eq!(jobs, ["default/holder"]);
}
