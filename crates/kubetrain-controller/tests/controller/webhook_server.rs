//! The admission webhooks end to end: a real HTTPS server on loopback with a self-signed certificate,
//! AdmissionReviews posted over TLS, and the runtime / JobSet / PriorityClass lookups answered by the
//! in-memory API server, whose request log shows exactly which reads each review made.

use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kubetrain_controller::webhook::{
    Admission, ReviewOutcome, Route, WebhookMetrics, WebhookServer,
};
use kubetrain_test_support::{FakeApiServer, api_status, builtin_runtime as builtin};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::support::{Tls, sent};

const NS: &str = "team-a";
const CLUSTER_RUNTIMES: &str = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes";
/// How long one step may take before the test gives up (generous: the machine may be loaded).
const PATIENCE: Duration = Duration::from_secs(60);

/// A webhook server on an ephemeral loopback port, the in-memory API server behind its client (recording
/// every request), and a TLS client that trusts the server's self-signed certificate.
struct Fixture {
    addr: SocketAddr,
    metrics: Arc<WebhookMetrics>,
    tls: Tls,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<()>,
}

fn fixed_now() -> Time {
    Time("2026-03-04T05:06:07Z".parse().unwrap())
}

impl Fixture {
    async fn start() -> (Self, FakeApiServer) {
        let tls = Tls::self_signed();
        let api = FakeApiServer::start();
        api.record_requests();
        let metrics =
            WebhookMetrics::register(&mut prometheus_client::registry::Registry::default());
        let admission = Admission::new(api.client())
            .with_clock(fixed_now)
            .with_metrics(metrics.clone());
        let server = WebhookServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            tls.cert.clone(),
            tls.provider.clone(),
            admission,
        )
        .await
        .unwrap();
        let addr = server.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));

        let fixture = Self {
            addr,
            metrics,
            tls,
            stop: Some(stop),
            served,
        };
        (fixture, api)
    }

    /// Sends one request over a fresh TLS connection; returns the status and the body.
    async fn send(&self, method: Method, path: &str, body: Vec<u8>) -> (StatusCode, Bytes) {
        let tls = self.tls.connect(self.addr, PATIENCE).await;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .unwrap();
        tokio::spawn(connection);
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body)
    }

    /// Posts an AdmissionReview to `route` and returns the review's `response`.
    async fn review(&self, route: Route, review: Value) -> Value {
        let (status, body) = self
            .send(
                Method::POST,
                route.path(),
                serde_json::to_vec(&review).unwrap(),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer["kind"], "AdmissionReview");
        assert_eq!(answer["response"]["uid"], review["request"]["uid"]);
        answer["response"].clone()
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.served.await.unwrap();
    }
}

/// `GET <path>`, one request-log line.
fn get(path: impl AsRef<str>) -> String {
    format!("GET {}", path.as_ref())
}

fn review(operation: &str, kind: &str, resource: &str, object: Value, old: Option<Value>) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": resource},
            "name": object["metadata"]["name"],
            "namespace": NS,
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": object,
            "oldObject": old,
        }
    })
}

fn trainjob(spec: Value) -> Value {
    kubetrain_test_support::fixtures::trainjob("llm")
        .namespace(NS)
        .spec(spec)
        .json()
}

fn message(response: &Value) -> &str {
    response["status"]["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_valid_trainjob_is_allowed_after_reading_its_cluster_runtime() {
    let (fx, api) = Fixture::start().await;
    api.insert(builtin("torch-distributed"));
    let job =
        trainjob(json!({"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}));
    let response = fx
        .review(
            Route::ValidateTrainJob,
            review("CREATE", "TrainJob", "trainjobs", job, None),
        )
        .await;
    assert_eq!(
        sent(&api),
        [get(format!("{CLUSTER_RUNTIMES}/torch-distributed"))]
    );
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("warnings").is_none(), "{response}");
    fx.stop().await;
}

#[tokio::test]
async fn every_error_is_reported_with_its_field_path() {
    let (fx, api) = Fixture::start().await;
    api.insert(builtin("torch-distributed"));
    let job = trainjob(json!({
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"numNodes": -1, "env": [{"name": "PET_NNODES", "value": "3"}]}
    }));
    let response = fx
        .review(
            Route::ValidateTrainJob,
            review("CREATE", "TrainJob", "trainjobs", job, None),
        )
        .await;
    assert_eq!(
        sent(&api),
        [get(format!("{CLUSTER_RUNTIMES}/torch-distributed"))]
    );
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    let message = message(&response);
    assert!(
        message.starts_with('[') && message.ends_with(']'),
        "{message}"
    );
    assert_eq!(
        fx.metrics
            .reviews(Route::ValidateTrainJob, ReviewOutcome::Denied),
        1
    );
    assert_eq!(
        fx.metrics
            .reviews(Route::ValidateTrainJob, ReviewOutcome::Allowed),
        0
    );
    assert!(
        message.contains("spec.trainer.numNodes: Invalid value: -1"),
        "{message}"
    );
    assert!(
        message.contains("spec.trainer.env")
            && message
                .contains("must not have reserved envs, invalid envs configured: [PET_NNODES]"),
        "{message}"
    );
    fx.stop().await;
}

#[tokio::test]
async fn a_missing_runtime_is_denied_with_upstreams_message() {
    let (fx, api) = Fixture::start().await;
    let job = trainjob(json!({"runtimeRef": {"name": "nope"}}));
    let response = fx
        .review(
            Route::ValidateTrainJob,
            review("CREATE", "TrainJob", "trainjobs", job, None),
        )
        .await;
    assert_eq!(sent(&api), [get(format!("{CLUSTER_RUNTIMES}/nope"))]);
    assert_eq!(response["allowed"], false);
    assert_eq!(
        message(&response),
        "spec.RuntimeRef: Invalid value: {\"name\":\"nope\",\"apiGroup\":\"trainer.kubeflow.org\",\"kind\":\"ClusterTrainingRuntime\"}: ClusterTrainingRuntime.trainer.kubeflow.org \"nope\" not found: specified clusterTrainingRuntime must be created before the TrainJob is created"
    );
    fx.stop().await;
}

#[tokio::test]
async fn a_namespaced_runtime_is_read_from_the_trainjobs_namespace() {
    let (fx, api) = Fixture::start().await;
    let mut runtime = builtin("torch-distributed");
    runtime["kind"] = json!("TrainingRuntime");
    runtime["metadata"] = json!({"name": "mine", "namespace": NS});
    api.insert(runtime);
    // A ClusterTrainingRuntime of the same name must not be the one read.
    let mut cluster = builtin("torch-distributed");
    cluster["metadata"]["name"] = json!("mine");
    api.insert(cluster);
    let job = trainjob(json!({"runtimeRef": {"name": "mine", "kind": "TrainingRuntime"}}));
    let response = fx
        .review(
            Route::ValidateTrainJob,
            review("CREATE", "TrainJob", "trainjobs", job, None),
        )
        .await;
    assert_eq!(
        sent(&api),
        [get(format!(
            "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainingruntimes/mine"
        ))]
    );
    assert_eq!(response["allowed"], true, "{response}");
    fx.stop().await;
}

#[tokio::test]
async fn an_unreadable_runtime_is_an_internal_error_not_an_allow() {
    let (fx, api) = Fixture::start().await;
    api.insert(builtin("torch-distributed"));
    api.intercept(|r| {
        r.uri
            .starts_with(CLUSTER_RUNTIMES)
            .then(|| api_status(403, "Forbidden", "clustertrainingruntimes is forbidden"))
    });
    let job = trainjob(json!({"runtimeRef": {"name": "torch-distributed"}}));
    let response = fx
        .review(
            Route::ValidateTrainJob,
            review("CREATE", "TrainJob", "trainjobs", job, None),
        )
        .await;
    assert_eq!(
        sent(&api),
        [get(format!("{CLUSTER_RUNTIMES}/torch-distributed"))]
    );
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 500);
    assert_eq!(
        fx.metrics
            .reviews(Route::ValidateTrainJob, ReviewOutcome::Error),
        1
    );
    assert!(
        message(&response).contains("cannot read runtime \"torch-distributed\""),
        "{response}"
    );
    fx.stop().await;
}

#[tokio::test]
async fn a_deprecated_runtime_passes_with_a_warning() {
    let (fx, api) = Fixture::start().await;
    let mut runtime = builtin("torch-distributed");
    runtime["metadata"]["labels"] = json!({"trainer.kubeflow.org/support": "deprecated"});
    api.insert(runtime);
    let job = trainjob(json!({"runtimeRef": {"name": "torch-distributed"}}));
    let response = fx
        .review(
            Route::ValidateTrainJob,
            review("CREATE", "TrainJob", "trainjobs", job, None),
        )
        .await;
    assert_eq!(
        sent(&api),
        [get(format!("{CLUSTER_RUNTIMES}/torch-distributed"))]
    );
    assert_eq!(response["allowed"], true);
    let warnings = response["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .starts_with("Referenced ClusterTrainingRuntime \"torch-distributed\" is deprecated"),
        "{warnings:?}"
    );
    fx.stop().await;
}

fn kueue_patch(node_selector: &str) -> Value {
    json!({
        "manager": "kueue.x-k8s.io/manager",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{
            "name": "node",
            "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": node_selector}}}}}
        }]}}}
    })
}

#[tokio::test]
async fn runtime_patches_change_only_while_suspended_and_not_while_the_jobset_runs() {
    let (fx, api) = Fixture::start().await;
    api.insert(builtin("torch-distributed"));
    let running = trainjob(
        json!({"runtimeRef": {"name": "torch-distributed"}, "runtimePatches": [kueue_patch("a")]}),
    );
    let mut changed = running.clone();
    changed["spec"]["runtimePatches"] = json!([kueue_patch("b")]);
    let reads = [
        get(format!("{CLUSTER_RUNTIMES}/torch-distributed")),
        get(format!(
            "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/llm"
        )),
    ];

    // Neither old nor new is suspended: forbidden.
    let response = fx
        .review(
            Route::ValidateTrainJob,
            review(
                "UPDATE",
                "TrainJob",
                "trainjobs",
                changed.clone(),
                Some(running.clone()),
            ),
        )
        .await;
    assert_eq!(sent(&api), reads);
    assert_eq!(response["allowed"], false);
    assert_eq!(
        message(&response),
        "spec.runtimePatches: Forbidden: RuntimePatches can only be modified when the TrainJob is suspended before or after the update"
    );

    // Suspended, but the JobSet still has an active job: forbidden, naming the job.
    let mut suspended_old = running.clone();
    suspended_old["spec"]["suspend"] = json!(true);
    let mut suspended_new = changed.clone();
    suspended_new["spec"]["suspend"] = json!(true);
    let update = review(
        "UPDATE",
        "TrainJob",
        "trainjobs",
        suspended_new,
        Some(suspended_old),
    );
    let jobset = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": NS},
        "spec": {"replicatedJobs": []},
        "status": {"replicatedJobsStatus": [
            {"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}
        ]}
    });
    api.insert(jobset);
    let response = fx.review(Route::ValidateTrainJob, update.clone()).await;
    assert_eq!(sent(&api), reads);
    assert_eq!(response["allowed"], false);
    assert!(
        message(&response).contains("ReplicatedJob node is still active"),
        "{response}"
    );

    // Suspended and no JobSet: allowed.
    assert!(api.remove("jobset.x-k8s.io/v1alpha2", "jobsets", NS, "llm"));
    let response = fx.review(Route::ValidateTrainJob, update).await;
    assert_eq!(sent(&api), reads);
    assert_eq!(response["allowed"], true, "{response}");
    fx.stop().await;
}

#[tokio::test]
async fn immutable_fields_are_enforced_on_update() {
    let (fx, api) = Fixture::start().await;
    api.insert(builtin("torch-distributed"));
    let old =
        trainjob(json!({"runtimeRef": {"name": "torch-distributed"}, "trainer": {"image": "a:1"}}));
    let mut new = old.clone();
    new["spec"]["trainer"] = json!({"image": "b:2"});
    let response = fx
        .review(
            Route::ValidateTrainJob,
            review("UPDATE", "TrainJob", "trainjobs", new, Some(old)),
        )
        .await;
    // Runtime patches are unchanged, so the JobSet is not read.
    assert_eq!(
        sent(&api),
        [get(format!("{CLUSTER_RUNTIMES}/torch-distributed"))]
    );
    assert_eq!(response["allowed"], false);
    assert!(
        message(&response).contains("spec.trainer")
            && message(&response).contains("field is immutable"),
        "{response}"
    );
    fx.stop().await;
}

#[tokio::test]
async fn turning_restart_on_disruption_on_after_creation_is_denied_with_its_path() {
    let (fx, api) = Fixture::start().await;
    api.insert(builtin("torch-distributed"));
    let old = trainjob(json!({"runtimeRef": {"name": "torch-distributed"}}));
    let mut new = old.clone();
    new["metadata"]["annotations"] = json!({"kubetrain.dev/restart-on-disruption": "true"});
    let response = fx
        .review(
            Route::ValidateTrainJob,
            review("UPDATE", "TrainJob", "trainjobs", new, Some(old)),
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert!(
        message(&response).contains(
            "metadata.annotations[kubetrain.dev/restart-on-disruption]: cannot be changed"
        ),
        "{response}"
    );
    fx.stop().await;
}

fn decode_patch(response: &Value) -> Value {
    use base64::Engine as _;
    let encoded = response["patch"].as_str().expect("a patch");
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[tokio::test]
async fn the_defaulter_stamps_runtime_patch_times_as_a_json_patch() {
    let (fx, api) = Fixture::start().await;
    let mut stamped = kueue_patch("a");
    stamped["manager"] = json!("example.com/other");
    stamped["time"] = json!("2025-01-01T00:00:00Z");
    let job = trainjob(json!({
        "runtimeRef": {"name": "torch-distributed"},
        "runtimePatches": [stamped, kueue_patch("a")]
    }));
    let response = fx
        .review(
            Route::MutateTrainJob,
            review("CREATE", "TrainJob", "trainjobs", job.clone(), None),
        )
        .await;
    assert_eq!(response["allowed"], true);
    assert_eq!(
        decode_patch(&response),
        json!([{"op": "add", "path": "/spec/runtimePatches/1/time", "value": "2026-03-04T05:06:07Z"}])
    );

    // Update with unchanged content: the old time is kept, even when the new object dropped it.
    let mut old = job.clone();
    old["spec"]["runtimePatches"][1]["time"] = json!("2025-06-01T00:00:00Z");
    let response = fx
        .review(
            Route::MutateTrainJob,
            review("UPDATE", "TrainJob", "trainjobs", job.clone(), Some(old)),
        )
        .await;
    assert_eq!(
        decode_patch(&response),
        json!([{"op": "add", "path": "/spec/runtimePatches/1/time", "value": "2025-06-01T00:00:00Z"}])
    );

    // Nothing to stamp: no patch at all.
    let bare = trainjob(json!({"runtimeRef": {"name": "torch-distributed"}}));
    let response = fx
        .review(
            Route::MutateTrainJob,
            review("CREATE", "TrainJob", "trainjobs", bare, None),
        )
        .await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
    assert_eq!(sent(&api), Vec::<String>::new(), "no API reads");
    fx.stop().await;
}

#[tokio::test]
async fn runtimes_are_validated_and_deprecation_warns_on_create_only() {
    let (fx, api) = Fixture::start().await;
    let mut runtime = builtin("torch-distributed");
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = json!(2);
    let response = fx
        .review(
            Route::ValidateClusterTrainingRuntime,
            review(
                "CREATE",
                "ClusterTrainingRuntime",
                "clustertrainingruntimes",
                runtime,
                None,
            ),
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert_eq!(
        message(&response),
        "spec.template.spec.replicatedJobs[0].replicas: Invalid value: 2: always must be 1"
    );

    let mut deprecated = builtin("torch-distributed");
    deprecated["metadata"]["labels"] = json!({"trainer.kubeflow.org/support": "deprecated"});
    let create = fx
        .review(
            Route::ValidateClusterTrainingRuntime,
            review(
                "CREATE",
                "ClusterTrainingRuntime",
                "clustertrainingruntimes",
                deprecated.clone(),
                None,
            ),
        )
        .await;
    assert_eq!(create["allowed"], true);
    assert_eq!(create["warnings"].as_array().map(Vec::len), Some(1));
    let update = fx
        .review(
            Route::ValidateClusterTrainingRuntime,
            review(
                "UPDATE",
                "ClusterTrainingRuntime",
                "clustertrainingruntimes",
                deprecated.clone(),
                Some(deprecated),
            ),
        )
        .await;
    assert_eq!(update["allowed"], true);
    assert!(update.get("warnings").is_none(), "{update}");

    let mut namespaced = builtin("torch-distributed");
    namespaced["kind"] = json!("TrainingRuntime");
    namespaced["metadata"] = json!({"name": "mine", "namespace": NS});
    namespaced["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["containers"][0]["name"] = json!("trainer");
    let create = review(
        "CREATE",
        "TrainingRuntime",
        "trainingruntimes",
        namespaced.clone(),
        None,
    );
    let response = fx.review(Route::ValidateTrainingRuntime, create).await;
    assert_eq!(response["allowed"], false);
    assert!(
        message(&response)
            .contains("must contain the required container for the ancestor: trainer"),
        "{response}"
    );
    // Upstream does not validate TrainingRuntime updates.
    let update = review(
        "UPDATE",
        "TrainingRuntime",
        "trainingruntimes",
        namespaced.clone(),
        Some(namespaced),
    );
    let response = fx.review(Route::ValidateTrainingRuntime, update).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(sent(&api), Vec::<String>::new(), "no API reads");
    fx.stop().await;
}

#[tokio::test]
async fn an_undecodable_object_is_denied_with_its_path() {
    let (fx, api) = Fixture::start().await;
    let job = trainjob(json!({"runtimeRef": {"name": "x"}, "trainer": {"numNodes": "many"}}));
    let response = fx
        .review(
            Route::MutateTrainJob,
            review("CREATE", "TrainJob", "trainjobs", job, None),
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 400);
    assert!(
        message(&response).contains("spec.trainer.numNodes"),
        "{response}"
    );
    assert_eq!(sent(&api), Vec::<String>::new(), "no API reads");
    fx.stop().await;
}

#[tokio::test]
async fn malformed_requests_get_http_errors_and_the_server_keeps_serving() {
    let (fx, api) = Fixture::start().await;
    let path = Route::ValidateTrainJob.path();
    let (status, body) = fx.send(Method::POST, path, b"{not json".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&body).contains("not an AdmissionReview"));
    assert_eq!(
        fx.metrics
            .reviews(Route::ValidateTrainJob, ReviewOutcome::BadRequest),
        1
    );

    let no_request = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
    let (status, _) = fx
        .send(Method::POST, path, serde_json::to_vec(&no_request).unwrap())
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, _) = fx.send(Method::GET, path, Vec::new()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);

    let (status, body) = fx.send(Method::POST, "/validate-v1-pod", Vec::new()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(String::from_utf8_lossy(&body).contains(Route::MutateTrainJob.path()));

    // Still serving after all of that.
    let response = fx
        .review(
            Route::ValidateTrainingRuntime,
            review(
                "DELETE",
                "TrainingRuntime",
                "trainingruntimes",
                json!({"metadata": {"name": "x"}}),
                None,
            ),
        )
        .await;
    assert_eq!(response["allowed"], true);
    assert_eq!(sent(&api), Vec::<String>::new(), "no API reads");
    fx.stop().await;
}

#[tokio::test]
async fn volcano_runtimes_need_existing_priority_classes() {
    let (fx, api) = Fixture::start().await;
    let mut runtime = builtin("torch-distributed");
    runtime["spec"]["podGroupPolicy"] = json!({"volcano": {}});
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["priorityClassName"] = json!("high");
    api.insert(runtime);
    let job = trainjob(json!({"runtimeRef": {"name": "torch-distributed"}}));
    let reads = [
        get(format!("{CLUSTER_RUNTIMES}/torch-distributed")),
        get("/apis/scheduling.k8s.io/v1/priorityclasses/high"),
    ];

    let response = fx
        .review(
            Route::ValidateTrainJob,
            review("CREATE", "TrainJob", "trainjobs", job.clone(), None),
        )
        .await;
    assert_eq!(sent(&api), reads);
    assert_eq!(response["allowed"], false);
    // The API server's NotFound message is passed on word for word.
    assert_eq!(
        message(&response),
        "spec.templateSpec.priorityClassName: Invalid value: \"high\": PriorityClass \"high\" doesn't exist: priorityclasses.scheduling.k8s.io \"high\" not found"
    );

    api.insert(
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                      "metadata": {"name": "high"}, "value": 1000}),
    );
    let response = fx
        .review(
            Route::ValidateTrainJob,
            review("CREATE", "TrainJob", "trainjobs", job, None),
        )
        .await;
    assert_eq!(sent(&api), reads);
    assert_eq!(response["allowed"], true, "{response}");
    fx.stop().await;
}
