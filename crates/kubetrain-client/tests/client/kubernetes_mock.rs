//! The Kubernetes backend against kubetrain-controller's in-memory API server (`FakeApiServer`, feature
//! `mock`): every request the SDK makes is recorded and checked (method, path, decoded query, body), and the
//! server answers as the API server would.

use std::time::Duration;

use futures_util::StreamExt;
use kubetrain_client::{
    ClientError, JobStatus, KubernetesBackend, LogOptions, TrainOptions, Trainer, TrainerClient,
};
use kubetrain_test_support::FakeApiServer;
use kubetrain_test_support::fixtures::trainjob;
use serde_json::{Value, json};

/// A client in namespace team-a on a fresh fake API server that records requests.
fn client() -> (TrainerClient<KubernetesBackend>, FakeApiServer) {
    let server = FakeApiServer::start();
    server.record_requests();
    (
        TrainerClient::new(KubernetesBackend::new(server.client(), "team-a")),
        server,
    )
}

/// The requests `server` answered, as `METHOD uri` lines.
fn requests(server: &FakeApiServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect()
}

/// The body of the one `POST` the server saw.
fn created(server: &FakeApiServer) -> Value {
    let posts: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posts.len(), 1, "{posts:?}");
    posts[0].body.clone()
}

const TRAINJOBS: &str = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs";
const PODS: &str = "/api/v1/namespaces/team-a/pods";
const RUNTIME_LOOKUP: [&str; 2] = [
    "GET /apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainingruntimes/torch-distributed",
    "GET /apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/torch-distributed",
];

fn pods_query(job: &str) -> String {
    format!(
        "GET {PODS}?labelSelector=jobset.sigs.k8s.io/jobset-name={job},jobset.sigs.k8s.io/replicatedjob-name in \
         (dataset-initializer,model-initializer,launcher,node)"
    )
}

/// The requests of `times` calls of `get_job(job)`: the TrainJob, then its pods, each time.
fn get_requests_n(job: &str, times: usize) -> Vec<String> {
    (0..times)
        .flat_map(|_| [format!("GET {TRAINJOBS}/{job}"), pods_query(job)])
        .collect()
}

/// The requests of one `get_job(job)`.
fn get_requests(job: &str) -> Vec<String> {
    get_requests_n(job, 1)
}

fn runtime_json(name: &str) -> Value {
    let yaml = kubetrain_jobset::builtin::source(name).unwrap();
    serde_saphyr::from_str(yaml).unwrap()
}

fn trainjob_json(name: &str, conditions: Value) -> Value {
    trainjob(name)
        .namespace("team-a")
        .created("2026-01-02T03:04:05Z")
        .num_nodes(2)
        .conditions(conditions)
        .json()
}

fn pod(job: &str, index: u32, phase: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{job}-node-0-{index}-abcde"), "namespace": "team-a",
            "labels": {"jobset.sigs.k8s.io/jobset-name": job, "jobset.sigs.k8s.io/replicatedjob-name": "node",
                       "batch.kubernetes.io/job-completion-index": index.to_string()}},
        "spec": {"containers": [{"name": "node", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": phase}
    })
}

/// Stores TrainJob mnist (with `conditions`) and one pod per phase (indexes in order), replacing the
/// pods stored before; a pod of another job and another namespace are stored too, which the label
/// selector and the namespace must leave out.
fn set_mnist(server: &FakeApiServer, conditions: Value, phases: &[&str]) {
    server.insert(trainjob_json("mnist", conditions));
    for i in 0..4 {
        server.remove("v1", "pods", "team-a", &format!("mnist-node-0-{i}-abcde"));
    }
    for (i, phase) in phases.iter().enumerate() {
        server.insert(pod("mnist", i as u32, phase));
    }
    server.insert(pod("other", 0, "Running"));
    let mut elsewhere = pod("mnist", 9, "Running");
    elsewhere["metadata"]["namespace"] = json!("team-b");
    server.insert(elsewhere);
}

/// Waits for mnist to be Complete, polling every `every`.
async fn wait_mnist_complete(
    client: &TrainerClient<KubernetesBackend>,
    timeout: Duration,
    every: Duration,
) -> Result<kubetrain_client::TrainJobView, ClientError> {
    client
        .wait_for_job_status("mnist", &[JobStatus::Complete], timeout, every)
        .await
}

fn condition(kind: &str, message: &str) -> Value {
    json!([{"type": kind, "status": "True", "reason": kind, "message": message,
            "lastTransitionTime": "2026-01-02T03:05:00Z"}])
}

#[tokio::test]
async fn train_creates_the_trainjob_the_sdk_would() {
    let (client, server) = client();
    server.insert(runtime_json("torch-distributed"));
    let trainer = Trainer::command(["torchrun", "train.py"])
        .with_num_nodes(4)
        .with_env("EPOCHS", "3");
    let options = TrainOptions {
        name: Some("mnist".into()),
        labels: [("team".to_string(), "vision".to_string())].into(),
        ..TrainOptions::default()
    };
    let name = client
        .train_with(None, Some(&trainer), None, &options)
        .await
        .unwrap();
    assert_eq!(name, "mnist");
    assert_eq!(
        requests(&server),
        [
            RUNTIME_LOOKUP[0],
            RUNTIME_LOOKUP[1],
            format!("POST {TRAINJOBS}").as_str()
        ]
    );
    {
        let body = created(&server);
        assert_eq!(body["apiVersion"], "trainer.kubeflow.org/v1alpha1");
        assert_eq!(body["kind"], "TrainJob");
        assert_eq!(body["metadata"]["name"], "mnist");
        assert_eq!(body["metadata"]["namespace"], "team-a");
        assert_eq!(body["metadata"]["labels"], json!({"team": "vision"}));
        // The name and the kind of the runtime get_runtime found, as the Python SDK 0.5.0 sends them.
        assert_eq!(
            body["spec"]["runtimeRef"],
            json!({"name": "torch-distributed", "kind": "ClusterTrainingRuntime"})
        );
        assert_eq!(
            body["spec"]["trainer"]["command"],
            json!(["torchrun", "train.py"])
        );
        assert_eq!(body["spec"]["trainer"]["numNodes"], 4);
        assert_eq!(
            body["spec"]["trainer"]["env"],
            json!([{"name": "EPOCHS", "value": "3"}])
        );
    }
    // It is there: a second train of the same name is AlreadyExists.
    assert!(
        server
            .get(
                "trainer.kubeflow.org/v1alpha1",
                "trainjobs",
                "team-a",
                "mnist"
            )
            .is_some()
    );
    let err = client
        .train_with(None, Some(&trainer), None, &options)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::AlreadyExists(ref n) if n == "mnist"),
        "{err:?}"
    );
}

#[tokio::test]
async fn train_with_a_missing_runtime_creates_nothing() {
    let (client, server) = client();
    let err = client
        .train_with(Some("nope"), None, None, &TrainOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::RuntimeNotFound(ref n) if n == "nope"),
        "{err:?}"
    );
    assert_eq!(
        requests(&server),
        [
            "GET /apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainingruntimes/nope",
            "GET /apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/nope",
        ]
    );
    assert_eq!(
        server.count("trainer.kubeflow.org/v1alpha1", "trainjobs"),
        0
    );
}

#[tokio::test]
async fn get_job_maps_conditions_and_pods_to_statuses() {
    // (conditions, pod phases, expected status)
    let table = [
        (json!([]), vec!["Pending", "Running"], JobStatus::Created),
        (json!([]), vec![], JobStatus::Created),
        (json!([]), vec!["Running", "Running"], JobStatus::Running),
        (json!([]), vec!["Succeeded", "Running"], JobStatus::Running),
        (
            condition("Complete", "done"),
            vec!["Succeeded", "Succeeded"],
            JobStatus::Complete,
        ),
        (
            condition("Failed", "node-1 OOM"),
            vec!["Failed", "Running"],
            JobStatus::Failed,
        ),
    ];
    for (conditions, phases, want) in table {
        let (client, server) = client();
        set_mnist(&server, conditions.clone(), &phases);
        let job = client.get_job("mnist").await.unwrap();
        assert_eq!(requests(&server), get_requests("mnist"));
        assert_eq!(job.status, want, "{conditions} {phases:?}");
        assert_eq!(job.num_nodes, 2);
        assert_eq!(
            job.creation_timestamp.as_deref(),
            Some("2026-01-02T03:04:05Z")
        );
        assert_eq!(job.steps.len(), phases.len());
        for (i, step) in job.steps.iter().enumerate() {
            assert_eq!(step.name, format!("node-{i}"));
            assert_eq!(step.status, phases[i]);
            assert_eq!(
                (step.device.as_str(), step.device_count.as_str()),
                ("gpu", "2")
            );
        }
        if want == JobStatus::Failed {
            assert_eq!(job.message.as_deref(), Some("node-1 OOM"));
        }
    }
}

#[tokio::test]
async fn get_job_returns_the_trainer_status_the_training_code_reported() {
    let (client, server) = client();
    set_mnist(&server, json!([]), &["Running", "Running"]);
    let mut job = trainjob_json("mnist", json!([]));
    job["status"]["trainerStatus"] = json!({
        "progressPercentage": 40, "estimatedRemainingSeconds": 600,
        "metrics": [{"name": "loss", "value": "0.25"}, {"name": "step", "value": "40"}],
        "lastUpdatedTime": "2026-12-01T14:00:00Z"});
    server.insert(job);
    let job = client.get_job("mnist").await.unwrap();
    assert_eq!(requests(&server), get_requests("mnist"));
    let progress = job.trainer_status.expect("trainerStatus");
    assert_eq!(progress.progress_percentage, Some(40));
    assert_eq!(progress.estimated_remaining_seconds, Some(600));
    assert_eq!(progress.metrics[1].name, "step");
    assert_eq!(
        progress.summary(),
        "40% done, about 600 s left; loss=0.25 step=40 (reported 2026-12-01T14:00:00Z)"
    );
}

#[tokio::test]
async fn get_job_of_a_missing_job_is_not_found() {
    let (client, server) = client();
    let err = client.get_job("ghost").await.unwrap_err();
    assert!(
        matches!(err, ClientError::NotFound(ref n) if n == "ghost"),
        "{err:?}"
    );
    assert_eq!(requests(&server), [format!("GET {TRAINJOBS}/ghost")]);
}

#[tokio::test]
async fn wait_polls_until_complete() {
    let (client, server) = client();
    // Each poll of the TrainJob sees the next round: the hook runs before the server answers.
    let rounds = [
        (json!([]), vec!["Pending", "Pending"]),
        (json!([]), vec!["Running", "Running"]),
        (
            condition("Complete", "done"),
            vec!["Succeeded", "Succeeded"],
        ),
    ];
    let polls = std::sync::atomic::AtomicUsize::new(0);
    let job_uri = format!("{TRAINJOBS}/mnist");
    server.on_request(move |request, server| {
        if request.method == "GET" && request.uri == job_uri {
            let round = polls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let (conditions, phases) = &rounds[round.min(rounds.len() - 1)];
            set_mnist(server, conditions.clone(), phases);
        }
    });
    let job = wait_mnist_complete(&client, Duration::from_secs(10), Duration::from_millis(1))
        .await
        .unwrap();
    assert_eq!(job.status, JobStatus::Complete);
    assert_eq!(requests(&server), get_requests_n("mnist", 3));
}

#[tokio::test]
async fn wait_stops_at_failed_with_its_message() {
    let (client, server) = client();
    set_mnist(&server, condition("Failed", "backoff limit"), &[]);
    let err = wait_mnist_complete(&client, Duration::from_secs(10), Duration::from_millis(1))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::JobFailed { message, .. } if message == "backoff limit"),
        "{err:?}"
    );
    assert_eq!(requests(&server), get_requests("mnist"));
}

#[tokio::test]
async fn wait_times_out_with_the_current_status() {
    let (client, server) = client();
    set_mnist(&server, json!([]), &["Pending"]);
    let err = wait_mnist_complete(
        &client,
        Duration::from_millis(30),
        Duration::from_millis(30),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, ClientError::Timeout { current, .. } if current == "Created"),
        "{err:?}"
    );
    // It polled (at least once, as often as the timer allowed) and did nothing else.
    let seen = requests(&server);
    assert!(!seen.is_empty() && seen.len().is_multiple_of(2), "{seen:?}");
    assert_eq!(seen, get_requests_n("mnist", seen.len() / 2));
}

#[tokio::test]
async fn logs_follow_the_step_container() {
    let (client, server) = client();
    set_mnist(&server, json!([]), &["Running", "Running"]);
    server.set_log("team-a", "mnist-node-0-0-abcde", "node", "not this pod\n");
    server.set_log(
        "team-a",
        "mnist-node-0-1-abcde",
        "node",
        "epoch 1 loss 0.9\nepoch 2 loss 0.4\n",
    );
    let options = LogOptions {
        step: "node-1".into(),
        follow: true,
    };
    let lines: Vec<String> = client
        .get_job_logs("mnist", &options)
        .await
        .unwrap()
        .map(|l| l.unwrap())
        .collect()
        .await;
    assert_eq!(lines, ["epoch 1 loss 0.9", "epoch 2 loss 0.4"]);
    let mut want = get_requests("mnist");
    want.push(format!(
        "GET {PODS}/mnist-node-0-1-abcde/log?container=node&follow=true"
    ));
    assert_eq!(requests(&server), want);
}

#[tokio::test]
async fn list_runtimes_skips_runtimes_without_a_framework_label() {
    let (client, server) = client();
    let mut unlabelled = runtime_json("jax-distributed");
    unlabelled["metadata"]["labels"] = json!({});
    server.insert(runtime_json("torch-distributed"));
    server.insert(unlabelled);
    let runtimes = client.list_runtimes().await.unwrap();
    assert_eq!(
        requests(&server),
        [
            "GET /apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes",
            "GET /apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainingruntimes",
        ]
    );
    assert_eq!(runtimes.len(), 1);
    assert_eq!(runtimes[0].name, "torch-distributed");
    assert_eq!(runtimes[0].trainer.framework, "torch");
    assert_eq!(runtimes[0].trainer.num_nodes, 1);
}

#[tokio::test]
async fn delete_maps_not_found() {
    let (client, server) = client();
    server.insert(trainjob_json("mnist", json!([])));
    client.delete_job("mnist").await.unwrap();
    assert_eq!(
        server.count("trainer.kubeflow.org/v1alpha1", "trainjobs"),
        0
    );
    let err = client.delete_job("mnist").await.unwrap_err();
    assert!(matches!(err, ClientError::NotFound(_)), "{err:?}");
    let delete = format!("DELETE {TRAINJOBS}/mnist");
    assert_eq!(requests(&server), [delete.clone(), delete]);
}

#[tokio::test]
async fn the_train_builder_sends_the_function_command_and_every_option() {
    let (client, server) = client();
    server.insert(runtime_json("torch-distributed"));
    let trainer =
        kubetrain_client::FunctionTrainer::from_source("def train(lr):\n    print(lr)\n", "train")
            .unwrap()
            .with_func_args([("lr", kubetrain_client::trainer::PyValue::from(0.1))])
            .with_resources(kubetrain_client::trainer::resources([("gpu", 1)]).unwrap());
    let patch = serde_json::from_value(
        json!({"template": {"spec": {"replicatedJobs": [{"name": "node",
        "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a100"}}}}}}]}}}),
    )
    .unwrap();
    let name = client
        .train()
        .runtime("torch-distributed")
        .trainer(trainer)
        .name("fn-job")
        .annotation("owner", "ml")
        .active_deadline_seconds(600)
        .ttl_seconds_after_finished(300)
        .runtime_patch(patch)
        .await
        .unwrap();
    assert_eq!(name, "fn-job");
    assert_eq!(
        requests(&server),
        [
            RUNTIME_LOOKUP[0],
            RUNTIME_LOOKUP[1],
            format!("POST {TRAINJOBS}").as_str()
        ]
    );
    {
        let body = created(&server);
        let spec = &body["spec"];
        assert_eq!(
            spec["runtimeRef"],
            json!({"name": "torch-distributed", "kind": "ClusterTrainingRuntime"})
        );
        let command = spec["trainer"]["command"].as_array().unwrap();
        assert_eq!(command[..2], [json!("bash"), json!("-c")]);
        let script = command[2].as_str().unwrap();
        assert!(
            script.contains("def train(lr):\n    print(lr)\n\ntrain(**{'lr': 0.1})\n"),
            "{script}"
        );
        assert!(script.ends_with("torchrun \"train.py\""), "{script}");
        assert_eq!(
            spec["trainer"]["resourcesPerNode"]["limits"],
            json!({"nvidia.com/gpu": "1"})
        );
        assert_eq!(spec["activeDeadlineSeconds"], 600);
        assert_eq!(spec["ttlSecondsAfterFinished"], 300);
        assert_eq!(
            spec["runtimePatches"],
            json!([{"manager": "trainer.kubeflow.org/kubeflow-sdk", "trainingRuntimeSpec": {"template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                    "nodeSelector": {"pool": "a100"}}}}}}]}}}}])
        );
        assert_eq!(body["metadata"]["annotations"], json!({"owner": "ml"}));
    }
}
