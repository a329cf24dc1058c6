//! Test fixtures (controller-rs style): TrainJob builders and the `ApiServerVerifier`, a `tower_test` mock API
//! server that expects an exact sequence of calls, checks each one's method, path, query and body, and answers
//! as the API server would.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::client::Body;
use kubetrain_api::TrainJob;
use kubetrain_api::jobset::{JobSet, JobSetStatus, ReplicatedJobStatus};
use serde_json::{Value, json};

use crate::controller::Context;
use crate::leadership::Leadership;
use crate::metrics::Metrics;
use crate::settings::{FIELD_MANAGER, Settings};

pub(crate) type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

pub(crate) const NS: &str = "team-a";
pub(crate) const UID: &str = "5f0c6a1e-0000-4000-8000-000000000001";

/// `/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/<name>`.
pub(crate) fn jobset_path(name: &str) -> String {
    format!("/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS}/jobsets/{name}")
}
/// `/api/v1/namespaces/team-a/configmaps/<name>`.
pub(crate) fn configmap_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/configmaps/{name}")
}
/// `/api/v1/namespaces/team-a/secrets/<name>`.
pub(crate) fn secret_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/secrets/{name}")
}
/// `/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/<name>`.
pub(crate) fn cluster_runtime_path(name: &str) -> String {
    format!("/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/{name}")
}
/// `/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/<name>/status`.
pub(crate) fn status_path(name: &str) -> String {
    format!("/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{name}/status")
}
/// `/apis/events.k8s.io/v1/namespaces/team-a/events`.
pub(crate) fn events_path() -> String {
    format!("/apis/events.k8s.io/v1/namespaces/{NS}/events")
}

/// A body check.
type Check = Box<dyn Fn(&Value) + Send + Sync>;

/// How the mock answers.
enum Reply {
    Json(StatusCode, Value),
    /// 200 with the request body (as SSA and POST answer), plus server-set uid/resourceVersion.
    Echo,
}

/// One expected call.
pub(crate) struct Call {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    content_type: Option<&'static str>,
    checks: Vec<Check>,
    reply: Reply,
}

impl Call {
    fn new(method: Method, path: String) -> Self {
        Self {
            method,
            path,
            query: Vec::new(),
            content_type: None,
            checks: Vec::new(),
            reply: Reply::Json(StatusCode::OK, json!({})),
        }
    }
    /// `GET path`.
    pub(crate) fn get(path: String) -> Self {
        Self::new(Method::GET, path)
    }
    /// `DELETE path`.
    pub(crate) fn delete(path: String) -> Self {
        Self::new(Method::DELETE, path)
    }
    /// `POST path`, answered with the request body.
    pub(crate) fn post(path: String) -> Self {
        Self {
            reply: Reply::Echo,
            ..Self::new(Method::POST, path)
        }
    }
    /// A server-side apply: `PATCH path?fieldManager=<ours>&force=true` with the apply content type, answered
    /// with the request body.
    pub(crate) fn apply(path: String) -> Self {
        Self {
            query: vec![
                ("fieldManager".into(), FIELD_MANAGER.into()),
                ("force".into(), "true".into()),
            ],
            content_type: Some("application/apply-patch+yaml"),
            reply: Reply::Echo,
            ..Self::new(Method::PATCH, path)
        }
    }
    /// A JSON merge patch of the status subresource by our field manager, answered with `{}`.
    pub(crate) fn merge_status(path: String) -> Self {
        // The API server answers with the whole TrainJob.
        let name = path.rsplit('/').nth(1).unwrap_or_default().to_owned();
        Self {
            query: vec![("fieldManager".into(), FIELD_MANAGER.into())],
            content_type: Some("application/merge-patch+json"),
            ..Self::new(Method::PATCH, path)
        }
        .ok(
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                   "metadata": {"name": name, "namespace": NS, "uid": UID},
                   "spec": {"runtimeRef": {"name": "torch-distributed"}}}),
        )
    }
    /// Answer 200 with `body`.
    pub(crate) fn ok(mut self, body: Value) -> Self {
        self.reply = Reply::Json(StatusCode::OK, body);
        self
    }
    /// Answer with an API `Status` failure.
    pub(crate) fn fail(mut self, code: u16, reason: &str) -> Self {
        self.reply = Reply::Json(
            StatusCode::from_u16(code).expect("valid code"),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": format!("mock {reason}"), "reason": reason, "code": code}),
        );
        self
    }
    /// Answer 404 NotFound.
    pub(crate) fn not_found(self) -> Self {
        self.fail(404, "NotFound")
    }
    /// Check the request body.
    pub(crate) fn check(mut self, check: impl Fn(&Value) + Send + Sync + 'static) -> Self {
        self.checks.push(Box::new(check));
        self
    }
}

/// The mock API server side of a test client.
pub(crate) struct ApiServerVerifier(pub(crate) Handle);

impl ApiServerVerifier {
    /// Serves `calls` in order (panicking on any mismatch), then hands the handle back so the test can check
    /// that nothing else is called.
    pub(crate) fn run(self, calls: Vec<Call>) -> tokio::task::JoinHandle<Handle> {
        let mut handle = self.0;
        tokio::spawn(async move {
            for (i, call) in calls.into_iter().enumerate() {
                let (request, send) =
                    tokio::time::timeout(Duration::from_secs(5), handle.next_request())
                        .await
                        .unwrap_or_else(|_| {
                            panic!("call {i} ({} {}) never came", call.method, call.path)
                        })
                        .unwrap_or_else(|| panic!("client gone before call {i}"));
                assert_eq!(
                    (request.method(), request.uri().path()),
                    (&call.method, call.path.as_str()),
                    "call {i}"
                );
                let query = crate::mock::query_pairs(request.uri().query().unwrap_or_default());
                for pair in &call.query {
                    assert!(
                        query.contains(pair),
                        "call {i}: query {query:?} lacks {pair:?}"
                    );
                }
                if let Some(ct) = call.content_type {
                    let got = request
                        .headers()
                        .get(http::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok());
                    assert_eq!(got, Some(ct), "call {i}: content type");
                }
                let bytes = request.into_body().collect_bytes().await.expect("body");
                let body: Value = if bytes.is_empty() {
                    Value::Null
                } else {
                    serde_json::from_slice(&bytes).expect("JSON body")
                };
                for check in &call.checks {
                    check(&body);
                }
                let (status, reply) = match call.reply {
                    Reply::Json(status, v) => (status, v),
                    Reply::Echo => {
                        let mut v = body;
                        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                            meta.entry("uid").or_insert_with(|| json!("child-uid"));
                            meta.insert("resourceVersion".into(), json!("2"));
                        }
                        (StatusCode::OK, v)
                    }
                };
                send.send_response(
                    Response::builder()
                        .status(status)
                        .body(Body::from(serde_json::to_vec(&reply).expect("JSON")))
                        .expect("response"),
                );
            }
            handle
        })
    }
}

/// Asserts the client makes no further call.
pub(crate) async fn assert_silent(handle: &mut Handle) {
    if let Ok(Some((request, _))) =
        tokio::time::timeout(Duration::from_millis(50), handle.next_request()).await
    {
        panic!("unexpected call {} {}", request.method(), request.uri());
    }
}

/// A mock-backed client and its verifier.
pub(crate) fn mock_client() -> (Client, ApiServerVerifier) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, NS), ApiServerVerifier(handle))
}

/// A reconcile context on `client` with default settings.
pub(crate) fn context(client: Client, leadership: Leadership) -> Arc<Context> {
    Arc::new(Context::new(
        client,
        Settings::default(),
        leadership,
        Arc::new(Metrics::default()),
    ))
}

/// `now - seconds`.
pub(crate) fn ago(seconds: i64) -> Time {
    Time(Timestamp::now() - SignedDuration::from_secs(seconds))
}

/// A TrainJob `<name>` in team-a on `torch-distributed`, created a minute ago.
pub(crate) fn trainjob(name: &str) -> TrainJob {
    let mut job: TrainJob = serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NS, "uid": UID},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}},
    }))
    .expect("valid TrainJob");
    job.metadata.creation_timestamp = Some(ago(60));
    job
}

/// Builders on a test TrainJob.
pub(crate) trait TrainJobFixture: Sized {
    /// `spec.suspend`.
    fn suspend(self, suspend: bool) -> Self;
    /// A status with these conditions.
    fn conditions(self, conditions: Vec<Condition>) -> Self;
    /// `spec.runtimeRef` = `{name, kind}`.
    fn runtime(self, name: &str, kind: &str) -> Self;
    /// A runtime patch of `manager` adding `nodeSelector` to the `node` pods.
    fn node_selector_patch(self, manager: &str, key: &str, value: &str) -> Self;
    /// `spec.activeDeadlineSeconds`, created `created_ago` seconds ago.
    fn deadline(self, seconds: i64, created_ago: i64) -> Self;
    /// `spec.managedBy`.
    fn managed_by(self, manager: &str) -> Self;
}

impl TrainJobFixture for TrainJob {
    fn suspend(mut self, suspend: bool) -> Self {
        self.spec.suspend = Some(suspend);
        self
    }
    fn conditions(mut self, conditions: Vec<Condition>) -> Self {
        self.status.get_or_insert_with(Default::default).conditions = conditions;
        self
    }
    fn runtime(mut self, name: &str, kind: &str) -> Self {
        self.spec.runtime_ref.name = name.to_owned();
        self.spec.runtime_ref.kind = Some(kind.to_owned());
        self
    }
    fn node_selector_patch(mut self, manager: &str, key: &str, value: &str) -> Self {
        let patch = serde_json::from_value(json!({
            "manager": manager,
            "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {"spec": {"template": {"spec": {"nodeSelector": {key: value}}}}}
            }]}}}
        }))
        .expect("valid runtime patch");
        self.spec.runtime_patches.push(patch);
        self
    }
    fn deadline(mut self, seconds: i64, created_ago: i64) -> Self {
        self.spec.active_deadline_seconds = Some(seconds);
        self.metadata.creation_timestamp = Some(ago(created_ago));
        self
    }
    fn managed_by(mut self, manager: &str) -> Self {
        self.spec.managed_by = Some(manager.to_owned());
        self
    }
}

/// A condition `type_=status` with `reason`, changed `at`.
pub(crate) fn condition(type_: &str, status: &str, reason: &str, at: Time) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: format!("{type_} {reason}"),
        last_transition_time: at,
        observed_generation: None,
    }
}

/// A built-in runtime as the API server would return it.
pub(crate) fn cluster_runtime_json(name: &str) -> Value {
    let runtime = kubetrain_jobset::builtin::runtimes()
        .into_iter()
        .find(|r| r.name() == name)
        .unwrap_or_else(|| panic!("no built-in runtime {name}"));
    let mut v = serde_json::to_value(runtime).expect("JSON");
    v["metadata"]["uid"] = json!("runtime-uid");
    v["metadata"]["resourceVersion"] = json!("7");
    v
}

/// The snapshot ConfigMap the controller would have written for `job` on `runtime`.
pub(crate) fn snapshot_json(job: &TrainJob, runtime: &str) -> Value {
    let fetched: kubetrain_api::ClusterTrainingRuntime =
        serde_json::from_value(cluster_runtime_json(runtime)).expect("runtime");
    let cm = crate::reconcile::snapshot_config_map(
        job,
        &crate::reconcile::FetchedRuntime::Cluster(Box::new(fetched)),
    )
    .expect("snapshot");
    serde_json::to_value(cm).expect("JSON")
}

/// The controller owner reference of `job`'s children, as JSON.
pub(crate) fn owner_json(job: &TrainJob) -> Value {
    serde_json::to_value(OwnerReference {
        api_version: "trainer.kubeflow.org/v1alpha1".into(),
        kind: "TrainJob".into(),
        name: job.name().to_owned(),
        uid: UID.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
    .expect("JSON")
}

/// A JobSet for `job` as the API server holds it: `suspend`, optional terminal condition, job counts.
pub(crate) fn jobset_json(
    job: &TrainJob,
    suspend: bool,
    terminal: Option<Condition>,
    active: i32,
) -> Value {
    let mut js = JobSet::new(job.name(), Default::default());
    js.metadata.namespace = Some(NS.into());
    js.metadata.uid = Some("jobset-uid".into());
    js.spec.suspend = Some(suspend);
    js.status = Some(JobSetStatus {
        conditions: terminal.into_iter().collect(),
        replicated_jobs_status: vec![ReplicatedJobStatus {
            name: "node".into(),
            active,
            ..Default::default()
        }],
        ..Default::default()
    });
    let mut v = serde_json::to_value(js).expect("JSON");
    v["metadata"]["ownerReferences"] = json!([owner_json(job)]);
    v
}
