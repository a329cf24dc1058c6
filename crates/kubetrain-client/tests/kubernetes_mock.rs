//! The Kubernetes backend against kube-rs's `tower_test` mock API server: every request the SDK makes is
//! checked (method, path, query, body) and answered like the API server would.

use std::time::Duration;

use futures_util::StreamExt;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kubetrain_client::{
    ClientError, JobStatus, KubernetesBackend, LogOptions, TrainOptions, Trainer, TrainerClient,
};
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// A check on a request body.
type BodyCheck = Box<dyn Fn(&Value) + Send + Sync>;

/// One expected request and its answer.
struct Expect {
    method: Method,
    /// Path and query the request must have (query compared decoded).
    uri: String,
    status: StatusCode,
    body: Value,
    /// Checks on the request body (for creates).
    check: Option<BodyCheck>,
}

fn expect(method: Method, uri: &str, status: u16, body: Value) -> Expect {
    Expect {
        method,
        uri: uri.to_string(),
        status: StatusCode::from_u16(status).unwrap(),
        body,
        check: None,
    }
}

fn not_found(what: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("{what} not found"), "reason": "NotFound", "code": 404})
}

/// The ApiServerVerifier: answers the scripted requests in order and fails on anything else.
fn serve(mut handle: Handle, script: Vec<Expect>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for (i, e) in script.into_iter().enumerate() {
            let (request, send) = handle
                .next_request()
                .await
                .unwrap_or_else(|| panic!("request {i} never came"));
            let uri = request.uri().clone();
            let got = percent_decode(uri.path_and_query().map(|p| p.as_str()).unwrap_or_default());
            assert_eq!(
                (request.method(), got.as_str()),
                (&e.method, e.uri.as_str()),
                "request {i}"
            );
            if let Some(check) = &e.check {
                let bytes = request.into_body().collect_bytes().await.unwrap();
                check(&serde_json::from_slice(&bytes).unwrap());
            }
            let body = match &e.body {
                Value::String(s) => s.clone().into_bytes(),
                v => serde_json::to_vec(v).unwrap(),
            };
            send.send_response(
                Response::builder()
                    .status(e.status)
                    .body(Body::from(body))
                    .unwrap(),
            );
        }
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

fn client() -> (TrainerClient<KubernetesBackend>, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let kube = kube::Client::new(service, "default");
    (
        TrainerClient::new(KubernetesBackend::new(kube, "team-a")),
        handle,
    )
}

const TRAINJOBS: &str = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs";
const PODS: &str = "/api/v1/namespaces/team-a/pods";

fn pods_query(job: &str) -> String {
    format!(
        "{PODS}?&labelSelector=jobset.sigs.k8s.io/jobset-name={job},jobset.sigs.k8s.io/replicatedjob-name in \
         (dataset-initializer,model-initializer,launcher,node)"
    )
}

fn runtime_json(name: &str) -> Value {
    let yaml = kubetrain_jobset::builtin::source(name).unwrap();
    serde_saphyr::from_str(yaml).unwrap()
}

fn trainjob_json(name: &str, conditions: Value) -> Value {
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": "2026-01-02T03:04:05Z"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
        "status": {"conditions": conditions}
    })
}

fn pod(job: &str, index: u32, phase: &str) -> Value {
    json!({
        "metadata": {"name": format!("{job}-node-0-{index}-abcde"), "namespace": "team-a",
            "labels": {"jobset.sigs.k8s.io/jobset-name": job, "jobset.sigs.k8s.io/replicatedjob-name": "node",
                       "batch.kubernetes.io/job-completion-index": index.to_string()}},
        "spec": {"containers": [{"name": "node", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": phase}
    })
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items})
}

/// The two requests `get_job("mnist")` makes: the TrainJob (with `conditions`) and its pods (one per
/// phase, indexes in order).
fn get_mnist(conditions: Value, phases: &[&str]) -> [Expect; 2] {
    let pods = phases
        .iter()
        .enumerate()
        .map(|(i, p)| pod("mnist", i as u32, p))
        .collect();
    [
        expect(
            Method::GET,
            &format!("{TRAINJOBS}/mnist"),
            200,
            trainjob_json("mnist", conditions),
        ),
        expect(
            Method::GET,
            &pods_query("mnist"),
            200,
            list("PodList", pods),
        ),
    ]
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
    let (client, handle) = client();
    let mut create = expect(
        Method::POST,
        &format!("{TRAINJOBS}?"),
        201,
        trainjob_json("mnist", json!([])),
    );
    create.check = Some(Box::new(|body: &Value| {
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
    }));
    let server = serve(
        handle,
        vec![
            expect(
                Method::GET,
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainingruntimes/torch-distributed",
                404,
                not_found("trainingruntimes"),
            ),
            expect(
                Method::GET,
                "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/torch-distributed",
                200,
                runtime_json("torch-distributed"),
            ),
            create,
        ],
    );
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
    server.await.unwrap();
}

#[tokio::test]
async fn train_with_a_missing_runtime_creates_nothing() {
    let (client, handle) = client();
    let server = serve(
        handle,
        vec![
            expect(
                Method::GET,
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainingruntimes/nope",
                404,
                not_found("x"),
            ),
            expect(
                Method::GET,
                "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/nope",
                404,
                not_found("x"),
            ),
        ],
    );
    let err = client
        .train_with(Some("nope"), None, None, &TrainOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientError::RuntimeNotFound(ref n) if n == "nope"),
        "{err:?}"
    );
    server.await.unwrap();
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
        let (client, handle) = client();
        let server = serve(handle, get_mnist(conditions.clone(), &phases).into());
        let job = client.get_job("mnist").await.unwrap();
        server.await.unwrap();
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
    let (client, handle) = client();
    let [mut job, pods] = get_mnist(json!([]), &["Running", "Running"]);
    job.body["status"]["trainerStatus"] = json!({
        "progressPercentage": 40, "estimatedRemainingSeconds": 600,
        "metrics": [{"name": "loss", "value": "0.25"}, {"name": "step", "value": "40"}],
        "lastUpdatedTime": "2026-12-01T14:00:00Z"});
    let server = serve(handle, vec![job, pods]);
    let job = client.get_job("mnist").await.unwrap();
    server.await.unwrap();
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
    let (client, handle) = client();
    let server = serve(
        handle,
        vec![expect(
            Method::GET,
            &format!("{TRAINJOBS}/ghost"),
            404,
            not_found("ghost"),
        )],
    );
    let err = client.get_job("ghost").await.unwrap_err();
    assert!(
        matches!(err, ClientError::NotFound(ref n) if n == "ghost"),
        "{err:?}"
    );
    server.await.unwrap();
}

#[tokio::test]
async fn wait_polls_until_complete() {
    let (client, handle) = client();
    let rounds = [
        (json!([]), vec!["Pending", "Pending"]),
        (json!([]), vec!["Running", "Running"]),
        (
            condition("Complete", "done"),
            vec!["Succeeded", "Succeeded"],
        ),
    ];
    let script = rounds
        .into_iter()
        .flat_map(|(conditions, phases)| get_mnist(conditions, &phases))
        .collect();
    let server = serve(handle, script);
    let job = wait_mnist_complete(&client, Duration::from_secs(10), Duration::from_millis(1))
        .await
        .unwrap();
    assert_eq!(job.status, JobStatus::Complete);
    server.await.unwrap();
}

#[tokio::test]
async fn wait_stops_at_failed_with_its_message() {
    let (client, handle) = client();
    let server = serve(
        handle,
        get_mnist(condition("Failed", "backoff limit"), &[]).into(),
    );
    let err = wait_mnist_complete(&client, Duration::from_secs(10), Duration::from_millis(1))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::JobFailed { message, .. } if message == "backoff limit"),
        "{err:?}"
    );
    server.await.unwrap();
}

#[tokio::test]
async fn wait_times_out_with_the_current_status() {
    let (client, handle) = client();
    let script = (0..2)
        .flat_map(|_| get_mnist(json!([]), &["Pending"]))
        .collect();
    let server = serve(handle, script);
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
    server.await.unwrap();
}

#[tokio::test]
async fn logs_follow_the_step_container() {
    let (client, handle) = client();
    let mut script = Vec::from(get_mnist(json!([]), &["Running", "Running"]));
    script.push(expect(
        Method::GET,
        &format!("{PODS}/mnist-node-0-1-abcde/log?&container=node&follow=true"),
        200,
        Value::String("epoch 1 loss 0.9\nepoch 2 loss 0.4\n".into()),
    ));
    let server = serve(handle, script);
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
    server.await.unwrap();
}

#[tokio::test]
async fn list_runtimes_skips_runtimes_without_a_framework_label() {
    let (client, handle) = client();
    let mut unlabelled = runtime_json("jax-distributed");
    unlabelled["metadata"]["labels"] = json!({});
    let server = serve(
        handle,
        vec![
            expect(
                Method::GET,
                "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes?",
                200,
                list(
                    "ClusterTrainingRuntimeList",
                    vec![runtime_json("torch-distributed"), unlabelled],
                ),
            ),
            expect(
                Method::GET,
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainingruntimes?",
                200,
                list("TrainingRuntimeList", vec![]),
            ),
        ],
    );
    let runtimes = client.list_runtimes().await.unwrap();
    server.await.unwrap();
    assert_eq!(runtimes.len(), 1);
    assert_eq!(runtimes[0].name, "torch-distributed");
    assert_eq!(runtimes[0].trainer.framework, "torch");
    assert_eq!(runtimes[0].trainer.num_nodes, 1);
}

#[tokio::test]
async fn delete_maps_not_found() {
    let (client, handle) = client();
    let server = serve(
        handle,
        vec![
            expect(
                Method::DELETE,
                &format!("{TRAINJOBS}/mnist?"),
                200,
                trainjob_json("mnist", json!([])),
            ),
            expect(
                Method::DELETE,
                &format!("{TRAINJOBS}/mnist?"),
                404,
                not_found("mnist"),
            ),
        ],
    );
    client.delete_job("mnist").await.unwrap();
    let err = client.delete_job("mnist").await.unwrap_err();
    assert!(matches!(err, ClientError::NotFound(_)), "{err:?}");
    server.await.unwrap();
}

#[tokio::test]
async fn the_train_builder_sends_the_function_command_and_every_option() {
    let (client, handle) = client();
    let mut create = expect(
        Method::POST,
        &format!("{TRAINJOBS}?"),
        201,
        trainjob_json("fn-job", json!([])),
    );
    create.check = Some(Box::new(|body: &Value| {
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
        assert_eq!(
            spec["runtimePatches"],
            json!([{"manager": "trainer.kubeflow.org/kubeflow-sdk", "trainingRuntimeSpec": {"template": {
                "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                    "nodeSelector": {"pool": "a100"}}}}}}]}}}}])
        );
        assert_eq!(body["metadata"]["annotations"], json!({"owner": "ml"}));
    }));
    let server = serve(
        handle,
        vec![
            expect(
                Method::GET,
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainingruntimes/torch-distributed",
                404,
                not_found("trainingruntimes"),
            ),
            expect(
                Method::GET,
                "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/torch-distributed",
                200,
                runtime_json("torch-distributed"),
            ),
            create,
        ],
    );
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
        .runtime_patch(patch)
        .await
        .unwrap();
    assert_eq!(name, "fn-job");
    server.await.unwrap();
}
