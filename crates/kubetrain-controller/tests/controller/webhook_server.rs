//! The admission webhooks end to end: a real HTTPS server on loopback with a self-signed certificate,
//! AdmissionReviews posted over TLS, and the runtime / JobSet lookups answered by a mock API server.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::client::Body;
use kubetrain_controller::webhook::metrics::Verdict;
use kubetrain_controller::webhook::tls::{CERT_FILE, KEY_FILE, ReloadingCert};
use kubetrain_controller::webhook::{Admission, Route, WebhookMetrics, WebhookServer};
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio_rustls::TlsConnector;
use tower_test::mock::Handle;

const NS: &str = "team-a";
const CLUSTER_RUNTIMES: &str = "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes";

/// A webhook server on an ephemeral loopback port, the mock API server behind its client, and a TLS client
/// that trusts the server's self-signed certificate.
struct Fixture {
    addr: SocketAddr,
    metrics: Arc<WebhookMetrics>,
    connector: TlsConnector,
    stop: Option<oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<()>,
    _certs: tempfile::TempDir,
}

fn fixed_now() -> Time {
    Time("2026-03-04T05:06:07Z".parse().unwrap())
}

impl Fixture {
    async fn start() -> (Self, ApiServer) {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = tempfile::tempdir().unwrap();
        let pair = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(certs.path().join(CERT_FILE), pair.cert.pem()).unwrap();
        std::fs::write(
            certs.path().join(KEY_FILE),
            pair.signing_key.serialize_pem(),
        )
        .unwrap();
        let cert = Arc::new(ReloadingCert::from_dir(certs.path(), provider.clone()).unwrap());

        let (service, apiserver) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let metrics =
            WebhookMetrics::register(&mut prometheus_client::registry::Registry::default());
        let admission = Admission::new(client)
            .with_clock(fixed_now)
            .with_metrics(metrics.clone());
        let server = WebhookServer::bind(
            "127.0.0.1:0".parse().unwrap(),
            cert,
            provider.clone(),
            admission,
        )
        .await
        .unwrap();
        let addr = server.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));

        let mut roots = rustls::RootCertStore::empty();
        roots.add(pair.cert.der().clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let fixture = Self {
            addr,
            metrics,
            connector: TlsConnector::from(Arc::new(config)),
            stop: Some(stop),
            served,
            _certs: certs,
        };
        (fixture, ApiServer(apiserver))
    }

    /// Sends one request over a fresh TLS connection; returns the status and the body.
    async fn send(&self, method: Method, path: &str, body: Vec<u8>) -> (StatusCode, Bytes) {
        let tcp = TcpStream::connect(self.addr).await.unwrap();
        let tls = self
            .connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .expect("TLS handshake with the webhook's certificate");
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

/// The mock API server behind the webhook's kube client.
struct ApiServer(Handle<Request<Body>, Response<Body>>);

impl ApiServer {
    /// Answers the next API call, checking its method and path.
    async fn expect(&mut self, method: &str, path: impl AsRef<str>, status: u16, body: Value) {
        let path = path.as_ref();
        let (request, send) =
            tokio::time::timeout(std::time::Duration::from_secs(5), self.0.next_request())
                .await
                .unwrap_or_else(|_| panic!("expected {method} {path}, nothing came"))
                .expect("the client is alive");
        assert_eq!(request.method().as_str(), method);
        assert_eq!(request.uri().path(), path);
        send.send_response(
            Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap(),
        );
    }
}

fn not_found(resource: &str, name: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{resource} \"{name}\" not found"), "reason": "NotFound", "code": 404
    })
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
    json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "llm", "namespace": NS},
        "spec": spec,
    })
}

fn builtin(name: &str) -> Value {
    let runtime = kubetrain_jobset::builtin::runtimes()
        .into_iter()
        .find(|r| r.name() == name)
        .unwrap();
    serde_json::to_value(runtime).unwrap()
}

fn message(response: &Value) -> &str {
    response["status"]["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_valid_trainjob_is_allowed_after_reading_its_cluster_runtime() {
    let (fx, mut api) = Fixture::start().await;
    let job =
        trainjob(json!({"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}));
    let posted = fx.review(
        Route::ValidateTrainJob,
        review("CREATE", "TrainJob", "trainjobs", job, None),
    );
    let answered = api.expect(
        "GET",
        format!("{CLUSTER_RUNTIMES}/torch-distributed"),
        200,
        builtin("torch-distributed"),
    );
    let (response, ()) = tokio::join!(posted, answered);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("warnings").is_none(), "{response}");
    fx.stop().await;
}

#[tokio::test]
async fn every_error_is_reported_with_its_field_path() {
    let (fx, mut api) = Fixture::start().await;
    let job = trainjob(json!({
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"numNodes": -1, "env": [{"name": "PET_NNODES", "value": "3"}]}
    }));
    let posted = fx.review(
        Route::ValidateTrainJob,
        review("CREATE", "TrainJob", "trainjobs", job, None),
    );
    let answered = api.expect(
        "GET",
        format!("{CLUSTER_RUNTIMES}/torch-distributed"),
        200,
        builtin("torch-distributed"),
    );
    let (response, ()) = tokio::join!(posted, answered);
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 403);
    let message = message(&response);
    assert!(
        message.starts_with('[') && message.ends_with(']'),
        "{message}"
    );
    assert_eq!(
        fx.metrics.reviews(Route::ValidateTrainJob, Verdict::Denied),
        1
    );
    assert_eq!(
        fx.metrics
            .reviews(Route::ValidateTrainJob, Verdict::Allowed),
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
    let (fx, mut api) = Fixture::start().await;
    let job = trainjob(json!({"runtimeRef": {"name": "nope"}}));
    let posted = fx.review(
        Route::ValidateTrainJob,
        review("CREATE", "TrainJob", "trainjobs", job, None),
    );
    let answered = api.expect(
        "GET",
        format!("{CLUSTER_RUNTIMES}/nope"),
        404,
        not_found("clustertrainingruntimes.trainer.kubeflow.org", "nope"),
    );
    let (response, ()) = tokio::join!(posted, answered);
    assert_eq!(response["allowed"], false);
    assert_eq!(
        message(&response),
        "spec.RuntimeRef: Invalid value: {\"name\":\"nope\",\"apiGroup\":\"trainer.kubeflow.org\",\"kind\":\"ClusterTrainingRuntime\"}: ClusterTrainingRuntime.trainer.kubeflow.org \"nope\" not found: specified clusterTrainingRuntime must be created before the TrainJob is created"
    );
    fx.stop().await;
}

#[tokio::test]
async fn a_namespaced_runtime_is_read_from_the_trainjobs_namespace() {
    let (fx, mut api) = Fixture::start().await;
    let mut runtime = builtin("torch-distributed");
    runtime["kind"] = json!("TrainingRuntime");
    runtime["metadata"] = json!({"name": "mine", "namespace": NS});
    let job = trainjob(json!({"runtimeRef": {"name": "mine", "kind": "TrainingRuntime"}}));
    let posted = fx.review(
        Route::ValidateTrainJob,
        review("CREATE", "TrainJob", "trainjobs", job, None),
    );
    let answered = api.expect(
        "GET",
        format!("/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainingruntimes/mine"),
        200,
        runtime,
    );
    let (response, ()) = tokio::join!(posted, answered);
    assert_eq!(response["allowed"], true, "{response}");
    fx.stop().await;
}

#[tokio::test]
async fn an_unreadable_runtime_is_an_internal_error_not_an_allow() {
    let (fx, mut api) = Fixture::start().await;
    let job = trainjob(json!({"runtimeRef": {"name": "torch-distributed"}}));
    let posted = fx.review(
        Route::ValidateTrainJob,
        review("CREATE", "TrainJob", "trainjobs", job, None),
    );
    let answered = api.expect(
        "GET",
        format!("{CLUSTER_RUNTIMES}/torch-distributed"),
        403,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
               "message": "clustertrainingruntimes is forbidden", "code": 403}),
    );
    let (response, ()) = tokio::join!(posted, answered);
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 500);
    assert_eq!(
        fx.metrics.reviews(Route::ValidateTrainJob, Verdict::Error),
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
    let (fx, mut api) = Fixture::start().await;
    let mut runtime = builtin("torch-distributed");
    runtime["metadata"]["labels"] = json!({"trainer.kubeflow.org/support": "deprecated"});
    let job = trainjob(json!({"runtimeRef": {"name": "torch-distributed"}}));
    let posted = fx.review(
        Route::ValidateTrainJob,
        review("CREATE", "TrainJob", "trainjobs", job, None),
    );
    let answered = api.expect(
        "GET",
        format!("{CLUSTER_RUNTIMES}/torch-distributed"),
        200,
        runtime,
    );
    let (response, ()) = tokio::join!(posted, answered);
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
    let (fx, mut api) = Fixture::start().await;
    let running = trainjob(
        json!({"runtimeRef": {"name": "torch-distributed"}, "runtimePatches": [kueue_patch("a")]}),
    );
    let mut changed = running.clone();
    changed["spec"]["runtimePatches"] = json!([kueue_patch("b")]);
    let jobset_path = format!("/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/llm");

    // Neither old nor new is suspended: forbidden.
    let posted = fx.review(
        Route::ValidateTrainJob,
        review(
            "UPDATE",
            "TrainJob",
            "trainjobs",
            changed.clone(),
            Some(running.clone()),
        ),
    );
    let answered = async {
        api.expect(
            "GET",
            format!("{CLUSTER_RUNTIMES}/torch-distributed"),
            200,
            builtin("torch-distributed"),
        )
        .await;
        api.expect(
            "GET",
            &jobset_path,
            404,
            not_found("jobsets.jobset.x-k8s.io", "llm"),
        )
        .await;
    };
    let (response, ()) = tokio::join!(posted, answered);
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
    let posted = fx.review(Route::ValidateTrainJob, update.clone());
    let answered = async {
        api.expect(
            "GET",
            format!("{CLUSTER_RUNTIMES}/torch-distributed"),
            200,
            builtin("torch-distributed"),
        )
        .await;
        api.expect("GET", &jobset_path, 200, jobset).await;
    };
    let (response, ()) = tokio::join!(posted, answered);
    assert_eq!(response["allowed"], false);
    assert!(
        message(&response).contains("ReplicatedJob node is still active"),
        "{response}"
    );

    // Suspended and no JobSet: allowed.
    let posted = fx.review(Route::ValidateTrainJob, update);
    let answered = async {
        api.expect(
            "GET",
            format!("{CLUSTER_RUNTIMES}/torch-distributed"),
            200,
            builtin("torch-distributed"),
        )
        .await;
        api.expect(
            "GET",
            &jobset_path,
            404,
            not_found("jobsets.jobset.x-k8s.io", "llm"),
        )
        .await;
    };
    let (response, ()) = tokio::join!(posted, answered);
    assert_eq!(response["allowed"], true, "{response}");
    fx.stop().await;
}

#[tokio::test]
async fn immutable_fields_are_enforced_on_update() {
    let (fx, mut api) = Fixture::start().await;
    let old =
        trainjob(json!({"runtimeRef": {"name": "torch-distributed"}, "trainer": {"image": "a:1"}}));
    let mut new = old.clone();
    new["spec"]["trainer"] = json!({"image": "b:2"});
    let posted = fx.review(
        Route::ValidateTrainJob,
        review("UPDATE", "TrainJob", "trainjobs", new, Some(old)),
    );
    // Runtime patches are unchanged, so the JobSet is not read.
    let answered = api.expect(
        "GET",
        format!("{CLUSTER_RUNTIMES}/torch-distributed"),
        200,
        builtin("torch-distributed"),
    );
    let (response, ()) = tokio::join!(posted, answered);
    assert_eq!(response["allowed"], false);
    assert!(
        message(&response).contains("spec.trainer")
            && message(&response).contains("field is immutable"),
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
    let (fx, _api) = Fixture::start().await;
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
    fx.stop().await;
}

#[tokio::test]
async fn runtimes_are_validated_and_deprecation_warns_on_create_only() {
    let (fx, _api) = Fixture::start().await;
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
    fx.stop().await;
}

#[tokio::test]
async fn an_undecodable_object_is_denied_with_its_path() {
    let (fx, _api) = Fixture::start().await;
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
    fx.stop().await;
}

#[tokio::test]
async fn malformed_requests_get_http_errors_and_the_server_keeps_serving() {
    let (fx, _api) = Fixture::start().await;
    let path = Route::ValidateTrainJob.path();
    let (status, body) = fx.send(Method::POST, path, b"{not json".to_vec()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(String::from_utf8_lossy(&body).contains("not an AdmissionReview"));
    assert_eq!(
        fx.metrics
            .reviews(Route::ValidateTrainJob, Verdict::BadRequest),
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
    fx.stop().await;
}

#[tokio::test]
async fn volcano_runtimes_need_existing_priority_classes() {
    let (fx, mut api) = Fixture::start().await;
    let mut runtime = builtin("torch-distributed");
    runtime["spec"]["podGroupPolicy"] = json!({"volcano": {}});
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        ["priorityClassName"] = json!("high");
    let job = trainjob(json!({"runtimeRef": {"name": "torch-distributed"}}));
    let priority = "/apis/scheduling.k8s.io/v1/priorityclasses/high";

    let posted = fx.review(
        Route::ValidateTrainJob,
        review("CREATE", "TrainJob", "trainjobs", job.clone(), None),
    );
    let answered = async {
        api.expect(
            "GET",
            format!("{CLUSTER_RUNTIMES}/torch-distributed"),
            200,
            runtime.clone(),
        )
        .await;
        api.expect(
            "GET",
            priority,
            404,
            not_found("priorityclasses.scheduling.k8s.io", "high"),
        )
        .await;
    };
    let (response, ()) = tokio::join!(posted, answered);
    assert_eq!(response["allowed"], false);
    assert_eq!(
        message(&response),
        "spec.templateSpec.priorityClassName: Invalid value: \"high\": PriorityClass \"high\" doesn't exist: priorityclasses.scheduling.k8s.io \"high\" not found"
    );

    let posted = fx.review(
        Route::ValidateTrainJob,
        review("CREATE", "TrainJob", "trainjobs", job, None),
    );
    let answered = async {
        api.expect(
            "GET",
            format!("{CLUSTER_RUNTIMES}/torch-distributed"),
            200,
            runtime.clone(),
        )
        .await;
        let class = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": "high"}, "value": 1000});
        api.expect("GET", priority, 200, class).await;
    };
    let (response, ()) = tokio::join!(posted, answered);
    assert_eq!(response["allowed"], true, "{response}");
    fx.stop().await;
}
