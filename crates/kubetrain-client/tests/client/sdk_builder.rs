//! The builder-style SDK calls on real local runs: `train()` with every trainer kind, `wait_for_job()`
//! with its defaults, validation and callbacks, the options' rules, and `get_runtime_packages`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use kubetrain_client::client::{DEFAULT_POLLING_INTERVAL, DEFAULT_WAIT_TIMEOUT};
use kubetrain_client::trainer::{FunctionTrainer, PyValue, TorchTuneConfig};
use kubetrain_client::{
    ClientError, JobStatus, LocalProcessBackend, LogOptions, Trainer, TrainerClient,
};

fn client(dir: &tempfile::TempDir) -> TrainerClient<LocalProcessBackend> {
    TrainerClient::new(
        LocalProcessBackend::new()
            .with_runs_under(dir.path())
            .with_queue(None),
    )
}

const FAST: Duration = Duration::from_millis(50);

async fn logs(client: &TrainerClient<LocalProcessBackend>, name: &str) -> Vec<String> {
    client
        .get_job_logs(name, &LogOptions::default())
        .await
        .unwrap()
        .map(|l| l.unwrap())
        .collect()
        .await
}

fn python_on_path() -> bool {
    std::process::Command::new("python")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_wait_defaults_are_the_sdks() {
    assert_eq!(DEFAULT_WAIT_TIMEOUT, Duration::from_secs(600));
    assert_eq!(DEFAULT_POLLING_INTERVAL, Duration::from_secs(2));
}

#[tokio::test]
async fn train_builder_and_wait_with_callbacks() {
    let dir = tempfile::tempdir().unwrap();
    let client = client(&dir);
    let name = client
        .train()
        .runtime("torch-distributed")
        .trainer(Trainer::command(["sh", "-c", "echo hi from $PET_NODE_RANK"]).with_num_nodes(2))
        .name("built")
        .label("team", "vision")
        .await
        .unwrap();
    assert_eq!(name, "built");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let job = client
        .wait_for_job(&name)
        .polling_interval(FAST)
        .timeout(Duration::from_secs(60))
        .callback(move |job| record.lock().unwrap().push(job.status))
        .await
        .unwrap();
    assert_eq!(job.status, JobStatus::Complete);
    let seen = seen.lock().unwrap().clone();
    // One call per poll, the last one with the status that ended the wait.
    assert_eq!(seen.last(), Some(&JobStatus::Complete), "{seen:?}");
    assert_eq!(logs(&client, &name).await, ["hi from 0"]);
}

#[tokio::test]
async fn wait_arguments_are_checked_before_polling() {
    let dir = tempfile::tempdir().unwrap();
    let client = client(&dir);
    // No job of that name exists: the argument errors come first.
    let cases = [
        (
            client.wait_for_job("none").polling_interval(Duration::ZERO),
            "wait: the polling interval must be above zero",
        ),
        (
            client
                .wait_for_job("none")
                .timeout(Duration::from_secs(1))
                .polling_interval(Duration::from_secs(1)),
            "wait: the polling interval (1s) must be less than the timeout (1s)",
        ),
        (
            client.wait_for_job("none").status([]),
            "wait: at least one status is needed (Created, Running, Complete, Failed)",
        ),
    ];
    for (wait, want) in cases {
        assert_eq!(wait.await.unwrap_err().to_string(), want);
    }
    let err = client.wait_for_job("none").await.unwrap_err();
    assert!(matches!(err, ClientError::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn trainers_and_options_are_checked_against_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let client = client(&dir);
    let function = FunctionTrainer::from_source("def f():\n    pass\n", "f").unwrap();
    let cases: Vec<(kubetrain_client::TrainRequest<'_, _>, &str)> = vec![
        (
            client
                .train()
                .trainer(function.clone())
                .trainer_command(["python"]),
            "options.trainer_command/trainer_args: only with a container trainer (Trainer); a CustomTrainer builds its own command and args",
        ),
        (
            client.train().trainer(TorchTuneConfig::default()),
            "trainer: a BuiltinTrainer can't be used with runtime \"torch-distributed\" (framework torch, custom trainer); use a builtin (TorchTune) runtime",
        ),
        (
            client
                .train()
                .runtime("torchtune-llama3.2-1b")
                .trainer(function),
            "trainer: a CustomTrainer can't be used with runtime \"torchtune-llama3.2-1b\" (framework torchtune, builtin trainer); use a custom runtime",
        ),
        (
            client.train().active_deadline_seconds(0),
            "options.active_deadline_seconds: must be a positive integer (minimum 1), got 0",
        ),
        (
            client.train().ttl_seconds_after_finished(-1),
            "options.ttl_seconds_after_finished: must be 0 or more seconds, got -1",
        ),
    ];
    for (request, want) in cases {
        assert_eq!(request.await.unwrap_err().to_string(), want);
    }
    assert!(
        client.list_jobs(None).await.unwrap().is_empty(),
        "nothing was created"
    );
}

#[tokio::test]
async fn a_function_trainer_runs_as_the_runtime_would_run_it() {
    if !python_on_path() {
        eprintln!("skipped: no `python` on PATH (the plain runtimes' entrypoint)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let client = client(&dir);
    // As with the SDK, only the function travels: imports go inside it.
    let code = "import sys\n\ndef train(lr, layers):\n    import os\n    print('lr', lr, 'layers', layers, 'rank', os.environ.get('DMLC_TASK_ID'))\n";
    let trainer = FunctionTrainer::from_source(code, "train")
        .unwrap()
        .with_func_args([
            ("lr", PyValue::from(0.001)),
            ("layers", vec![64, 32].into()),
        ]);
    // xgboost-distributed's SDK entrypoint is `python <file>` (no torchrun needed here).
    let name = client
        .train()
        .runtime("xgboost-distributed")
        .trainer(trainer)
        .await
        .unwrap();
    client
        .wait_for_job(&name)
        .polling_interval(FAST)
        .await
        .unwrap();
    assert_eq!(
        logs(&client, &name).await,
        ["lr 0.001 layers [64, 32] rank 0"]
    );
}

#[tokio::test]
async fn runtime_packages_come_from_a_job_that_is_deleted_after() {
    if !python_on_path() {
        eprintln!("skipped: no `python` on PATH (the plain runtimes' entrypoint)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let client = client(&dir);
    let runtime = client.get_runtime("xgboost-distributed").await.unwrap();
    let lines = client.get_runtime_packages(&runtime).await.unwrap();
    assert!(lines[0].starts_with("Python: 3."), "{lines:?}");
    assert!(client.list_jobs(None).await.unwrap().is_empty());

    let tune = client.get_runtime("torchtune-llama3.2-1b").await.unwrap();
    let err = client.get_runtime_packages(&tune).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "get_runtime_packages: runtime \"torchtune-llama3.2-1b\" has a built-in (TorchTune) trainer; packages can only be listed for custom-trainer runtimes"
    );
}
