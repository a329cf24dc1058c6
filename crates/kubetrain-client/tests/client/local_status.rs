//! The local runner's status endpoint (issue 16): what a trainer's process gets in its env, what the Python
//! SDK's `update_trainjob_status` and our reporter produce, and what is refused; and (issue 13) a new MPI SSH
//! key per local run.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use kubetrain_client::backend::Backend;
use kubetrain_client::local::status::StatusEndpoint;
use kubetrain_client::local::{self, RunEvent, RunSummary};
use kubetrain_client::progress::{Progress, ReportError, Reporter};
use kubetrain_client::types::{ProgressMetric, TrainerProgress};
use kubetrain_client::{JobStatus, LocalProcessBackend, TrainerClient};

/// A 1-node torch TrainJob whose trainer runs `command` (written as JSON, which is YAML).
fn trainjob(name: &str, command: &[&str], runtime: &str) -> String {
    kubetrain_test_support::fixtures::trainjob(name)
        .runtime(runtime)
        .num_nodes(1)
        .command(command)
        .yaml()
}

async fn run(yaml: &str, dir: &std::path::Path) -> (RunSummary, Vec<RunEvent>) {
    let plan = crate::common::plan(yaml, dir);
    let (tx, mut rx) = tokio::sync::mpsc::channel(local::EVENT_BUFFER);
    // The channel is bounded: the events are taken while the run goes on.
    let collect = tokio::spawn(async move {
        let mut events = Vec::new();
        while let Some(e) = rx.recv().await {
            events.push(e);
        }
        events
    });
    let summary = local::execute(&plan, &tx, std::future::pending()).await;
    drop(tx);
    (summary, collect.await.unwrap())
}

fn logs(events: &[RunEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::Log(l) => Some(l.line.clone()),
            _ => None,
        })
        .collect()
}

/// The Python interpreter with `kubeflow==0.5.0`: `KUBETRAIN_SDK_PYTHON`, else the e2e harness's venv
/// (`e2e/build.sh venv`, in `$KUBETRAIN_E2E_CACHE`, `$XDG_CACHE_HOME/kubetrain-e2e` or `~/.cache/kubetrain-e2e`).
fn sdk_python() -> Option<PathBuf> {
    if let Some(python) = std::env::var_os("KUBETRAIN_SDK_PYTHON") {
        return Some(PathBuf::from(python));
    }
    let cache = std::env::var_os("KUBETRAIN_E2E_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("kubetrain-e2e"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/kubetrain-e2e"))
        })?;
    let python = cache.join("venv-kubeflow-0.5.0/bin/python");
    python.exists().then_some(python)
}

/// Without the SDK: skipped with a message, or a failure under CI (where the venv is part of the setup).
fn skip_without_sdk() {
    let why =
        "no Python with kubeflow==0.5.0 (run `e2e/build.sh venv`, or set KUBETRAIN_SDK_PYTHON)";
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but there is {why}"
    );
    eprintln!("skipped: {why}");
}

/// What e2e/scenarios/test_status_server.py posts through the operator.
const SDK_CALL: &str = "
import sys
from kubeflow.trainer import update_trainjob_status
ok = update_trainjob_status(progress_percent=40, estimated_remaining_seconds=600, metrics={'loss': 0.25, 'step': 40})
sys.exit(0 if ok else 1)
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdks_update_becomes_the_runs_trainer_status() {
    let Some(python) = sdk_python() else {
        return skip_without_sdk();
    };
    let dir = tempfile::tempdir().unwrap();
    let python = python.display().to_string();
    let (summary, events) = run(
        &trainjob("sdk", &[&python, "-c", SDK_CALL], "torch-distributed"),
        dir.path(),
    )
    .await;
    assert_eq!(summary.status, JobStatus::Complete, "{:?}", logs(&events));
    let status = summary.trainer_status.expect("a trainerStatus");
    // The same assertions as the e2e scenario on the operator's path.
    assert_eq!(status.progress_percentage, Some(40));
    assert_eq!(status.estimated_remaining_seconds, Some(600));
    let metric = |name: &str, value: &str| ProgressMetric {
        name: name.into(),
        value: value.into(),
    };
    assert_eq!(
        status.metrics,
        [metric("loss", "0.25"), metric("step", "40")]
    );
    let time = status.last_updated_time.clone().unwrap();
    assert!(time.ends_with('Z') && !time.contains('.'), "{time}");
    // The event carries the same status.
    assert!(
        events
            .iter()
            .any(|e| matches!(e, RunEvent::TrainerStatus(s) if *s == status))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_trainer_gets_the_endpoint_and_the_token_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let script = "echo url=$KUBEFLOW_TRAINER_SERVER_URL; echo ca=[$KUBEFLOW_TRAINER_SERVER_CA_CERT]; \
                  echo token=$KUBEFLOW_TRAINER_SERVER_TOKEN";
    let (summary, events) = run(
        &trainjob("envs", &["sh", "-c", script], "torch-distributed"),
        dir.path(),
    )
    .await;
    assert_eq!(summary.status, JobStatus::Complete);
    let lines = logs(&events);
    let value = |key: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("{key} in {lines:?}"))
            .to_owned()
    };
    let url = value("url=");
    let path = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/envs/status";
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with(path),
        "{url}"
    );
    assert_eq!(value("ca="), "[]");
    let token = PathBuf::from(value("token="));
    assert!(token.starts_with(dir.path()), "{}", token.display());
    let mode = std::fs::metadata(&token).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(&token).unwrap();
    assert!(text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()));
    // Nothing reported, nothing stored.
    assert_eq!(summary.trainer_status, None);

    // MPI: the launcher carries the trainer label (it runs mpirun), so it gets the env, as upstream's
    // TrainJobStatus plugin gives it; the nodes do not.
    let dir = tempfile::tempdir().unwrap();
    let yaml = trainjob(
        "mpi",
        &["sh", "-c", "echo has=${KUBEFLOW_TRAINER_SERVER_URL:+yes}"],
        "deepspeed-distributed",
    );
    let plan = crate::common::plan(&yaml, dir.path());
    let trainers: Vec<&str> = plan
        .replicated_jobs
        .iter()
        .filter(|r| r.trainer)
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(trainers, ["launcher"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_reporter_is_accepted_and_forged_tokens_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let endpoint = StatusEndpoint::start("default", "demo", dir.path(), move |s| {
        let _ = tx.send(s.clone());
    })
    .await
    .unwrap();
    let url = endpoint.url().to_owned();
    let token = endpoint.token_file().to_owned();
    let reporter = Reporter::new(&url, None, Some(token.clone())).unwrap();
    let update = Progress::new()
        .percent(250)
        .remaining_seconds(-3)
        .metric("loss", 0.5);
    // The reporter blocks (std I/O): off the runtime's threads.
    let sent = tokio::task::spawn_blocking(move || reporter.report_now(&update))
        .await
        .unwrap();
    sent.unwrap();
    let stored = rx.recv().await.unwrap();
    assert_eq!(stored.progress_percentage, Some(100));
    assert_eq!(stored.estimated_remaining_seconds, Some(0));
    assert_eq!(
        TrainerProgress::of(&stored).summary(),
        TrainerProgress::of(&endpoint.latest().unwrap()).summary()
    );

    let forged = dir.path().join("forged");
    std::fs::write(&forged, "0".repeat(64)).unwrap();
    let reporter = Reporter::new(&url, None, Some(forged)).unwrap();
    let refused =
        tokio::task::spawn_blocking(move || reporter.report_now(&Progress::new().percent(1)))
            .await
            .unwrap();
    match refused {
        Err(ReportError::Http { status: 403, body }) => assert!(body.contains("Forbidden")),
        other => panic!("{other:?}"),
    }
    // Another TrainJob's path with the right token: 403 too.
    let other = url.replace("/trainjobs/demo/", "/trainjobs/other/");
    let reporter = Reporter::new(&other, None, Some(token)).unwrap();
    let refused =
        tokio::task::spawn_blocking(move || reporter.report_now(&Progress::new().percent(1)))
            .await
            .unwrap();
    assert!(matches!(
        refused,
        Err(ReportError::Http { status: 403, .. })
    ));

    // Chunked bodies are not read: 411.
    let address = url
        .strip_prefix("http://")
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(address).unwrap();
        s.write_all(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 411 "), "{answer}");
    assert_eq!(endpoint.latest().unwrap().progress_percentage, Some(100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_returns_the_reported_status() {
    let Some(python) = sdk_python() else {
        return skip_without_sdk();
    };
    let dir = tempfile::tempdir().unwrap();
    let client = TrainerClient::new(
        LocalProcessBackend::new()
            .with_runs_under(dir.path())
            .with_queue(None)
            .with_capacity(None),
    );
    let python = python.display().to_string();
    let yaml = trainjob("viewed", &[&python, "-c", SDK_CALL], "torch-distributed");
    let docs = kubetrain_api::parse_documents(&yaml).unwrap();
    let kubetrain_api::Document::TrainJob(job) = &docs[0].document else {
        panic!("a TrainJob")
    };
    client.backend().create_job((**job).clone()).await.unwrap();
    let view = crate::common::wait_for(&client, "viewed", &[JobStatus::Complete]).await;
    let progress = view.trainer_status.expect("trainer_status");
    assert_eq!(
        progress.summary().split(" (reported").next().unwrap(),
        "40% done, about 600 s left; loss=0.25 step=40"
    );
}

/// The endpoint's `host:port`.
fn address_of(url: &str) -> String {
    url.strip_prefix("http://")
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_is_answered_promptly_behind_many_slow_connections() {
    // Issue 38: 64 slow connections held every slot and the pods' posts waited in the listen backlog.
    use kubetrain_client::local::status::MAX_PER_SOURCE;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = tempfile::tempdir().unwrap();
    let endpoint = StatusEndpoint::start("default", "demo", dir.path(), |_| {})
        .await
        .unwrap();
    let address = address_of(endpoint.url());
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {address}\r\n",
        endpoint
            .url()
            .trim_start_matches(&format!("http://{address}"))
    );
    // Twice the per-source cap, all from 127.0.0.1 as the pods: a third send nothing, a third hold a started
    // head, a third trickle one (a byte every 100 ms: each read succeeds, the head never ends).
    let (mut silent, mut stalled, mut trickling) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..2 * MAX_PER_SOURCE {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        match i % 3 {
            0 => silent.push(stream),
            1 => {
                stream.write_all(head.as_bytes()).await.unwrap();
                stalled.push(stream);
            }
            _ => {
                stream.write_all(head.as_bytes()).await.unwrap();
                trickling.push(stream);
            }
        }
    }
    let trickle = tokio::spawn(async move {
        loop {
            for stream in &mut trickling {
                let _ = stream.write_all(b"X").await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    });

    // An honest post (the Rust reporter's report_now, which waits for its answer) behind all of them.
    let reporter =
        Reporter::new(endpoint.url(), None, Some(endpoint.token_file().to_owned())).unwrap();
    let began = std::time::Instant::now();
    let sent = tokio::time::timeout(
        std::time::Duration::from_secs(3),
        tokio::task::spawn_blocking(move || reporter.report_now(&Progress::new().percent(7))),
    )
    .await
    .unwrap_or_else(|_| {
        panic!("the post was not answered within 3 s (slow connections hold the slots)")
    })
    .unwrap();
    sent.unwrap_or_else(|e| panic!("after {:?}: {e}", began.elapsed()));
    assert_eq!(endpoint.latest().unwrap().progress_percentage, Some(7));

    // The oldest slow connection was closed to make room, long before its 5 s idle timeout.
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(std::time::Duration::from_secs(2), silent[0].read(&mut buf))
        .await
        .expect("the oldest slow connection is still open");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    trickle.abort();
    drop(stalled);
}

/// The public key of the MPI SSH Secret a plan of `job` resolved (read through a `secretKeyRef`).
fn mpi_public_key(dir: &std::path::Path) -> String {
    let yaml = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: keys, namespace: default}\n\
                spec:\n  runtimeRef: {name: deepspeed-distributed}\n  trainer:\n    numNodes: 1\n    command: [\"true\"]\n    \
                env: [{name: PUB, valueFrom: {secretKeyRef: {name: keys-mpi-ssh-auth, key: ssh-publickey}}}]\n";
    let plan = crate::common::plan(yaml, dir);
    plan.pods()
        .flat_map(|p| &p.containers)
        .flat_map(|c| &c.env)
        .find(|(k, _)| k == "PUB")
        .map(|(_, v)| v.clone())
        .expect("PUB in a container's env")
}

#[test]
fn every_local_run_gets_a_new_mpi_ssh_key() {
    // Issue 13: the key is not derived from the job's name (or anything else another user could know).
    let dir = tempfile::tempdir().unwrap();
    let first = mpi_public_key(&dir.path().join("1"));
    let second = mpi_public_key(&dir.path().join("2"));
    for key in [&first, &second] {
        assert!(key.starts_with("ecdsa-sha2-nistp521 AAAA"), "{key}");
    }
    assert_ne!(first, second);
}
