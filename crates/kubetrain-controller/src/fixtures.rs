//! Test fixtures (controller-rs style): TrainJob builders, and expected request sequences ([`Call`]) checked
//! against the in-memory API server's request log (`kubetrain_test_support::FakeApiServer`): each request's method,
//! path, query, content type and body, in order, and nothing else.

use std::sync::Arc;

use http::Method;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kubetrain_api::TrainJob;
use kubetrain_api::jobset::{JobSet, JobSetStatus, ReplicatedJobStatus};
use serde_json::{Value, json};

use crate::controller::Context;
use crate::leadership::Leadership;
use crate::metrics::ControllerMetrics;
use crate::settings::{FIELD_MANAGER, Settings};
use kubetrain_test_support::{FakeApiServer, api_status};

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

/// One expected request, checked against the fake API server's request log after the reconcile; it also
/// sets up what the server answers: the object a `GET` finds ([`Call::ok`]) or a failure ([`Call::fail`]).
/// Everything else is the fake's own answer (an apply stores and returns the object, a status patch
/// merges into the stored TrainJob, a missing object is 404).
pub(crate) struct Call {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    content_type: Option<&'static str>,
    checks: Vec<Check>,
    /// Stored before the reconcile, so that this `GET` finds it.
    stored: Option<Value>,
    /// Answered instead of the fake's own answer: (code, reason).
    fail: Option<(u16, String)>,
}

impl Call {
    fn new(method: Method, path: String) -> Self {
        Self {
            method,
            path,
            query: Vec::new(),
            content_type: None,
            checks: Vec::new(),
            stored: None,
            fail: None,
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
    /// `POST path` (the fake creates the object).
    pub(crate) fn post(path: String) -> Self {
        Self::new(Method::POST, path)
    }
    /// A server-side apply: `PATCH path?fieldManager=<ours>&force=true` with the apply content type.
    pub(crate) fn apply(path: String) -> Self {
        Self {
            query: vec![
                ("fieldManager".into(), FIELD_MANAGER.into()),
                ("force".into(), "true".into()),
            ],
            content_type: Some("application/apply-patch+yaml"),
            ..Self::new(Method::PATCH, path)
        }
    }
    /// A JSON merge patch of the status subresource by our field manager (of the TrainJob the scenario
    /// stores).
    pub(crate) fn merge_status(path: String) -> Self {
        Self {
            query: vec![("fieldManager".into(), FIELD_MANAGER.into())],
            content_type: Some("application/merge-patch+json"),
            ..Self::new(Method::PATCH, path)
        }
    }
    /// A JSON merge patch of an object (not its status) by our field manager.
    pub(crate) fn merge(path: String) -> Self {
        Self {
            query: vec![("fieldManager".into(), FIELD_MANAGER.into())],
            content_type: Some("application/merge-patch+json"),
            ..Self::new(Method::PATCH, path)
        }
    }
    /// A JSON patch (RFC 6902) by our field manager.
    pub(crate) fn json_patch(path: String) -> Self {
        Self {
            query: vec![("fieldManager".into(), FIELD_MANAGER.into())],
            content_type: Some("application/json-patch+json"),
            ..Self::new(Method::PATCH, path)
        }
    }
    /// The server holds `object` (at this call's path) when the reconcile starts.
    pub(crate) fn ok(mut self, object: Value) -> Self {
        self.stored = Some(object);
        self
    }
    /// Answer with an API `Status` failure.
    pub(crate) fn fail(mut self, code: u16, reason: &str) -> Self {
        self.fail = Some((code, reason.to_owned()));
        self
    }
    /// The server does not hold the object: the fake answers 404 NotFound (a name for readers).
    pub(crate) fn not_found(self) -> Self {
        self
    }
    /// Check the request body.
    pub(crate) fn check(mut self, check: impl Fn(&Value) + Send + Sync + 'static) -> Self {
        self.checks.push(Box::new(check));
        self
    }
}

/// The in-memory API server for a scenario, recording requests, with `job` stored (status patches merge
/// into it).
pub(crate) fn fake_server(job: &TrainJob) -> FakeApiServer {
    let server = FakeApiServer::start();
    server.insert(serde_json::to_value(job).expect("JSON"));
    server.record_requests();
    server
}

/// Sets `server` up for `calls`: stores the objects their `GET`s find, answers their failures.
pub(crate) fn prepare(server: &FakeApiServer, calls: &[Call]) {
    let mut failures = Vec::new();
    for call in calls {
        if let Some(object) = &call.stored {
            server.insert(object.clone());
        }
        if let Some((code, reason)) = &call.fail {
            failures.push((
                call.method.to_string(),
                call.path.clone(),
                *code,
                reason.clone(),
            ));
        }
    }
    server.intercept(move |r| {
        let path = r.uri.split_once('?').map_or(r.uri.as_str(), |(p, _)| p);
        failures
            .iter()
            .find(|(m, p, ..)| *m == r.method && p == path)
            .map(|(_, _, code, reason)| api_status(*code, reason, &format!("mock {reason}")))
    });
}

/// Checks the requests `server` recorded since the last check against `calls`: the same requests in the
/// same order (method, path, query, content type, body checks), and nothing else.
pub(crate) fn verify(server: &FakeApiServer, calls: &[Call]) {
    let requests = server.take_requests();
    for (i, call) in calls.iter().enumerate() {
        let Some(request) = requests.get(i) else {
            panic!("call {i} ({} {}) never came", call.method, call.path);
        };
        let (path, query) = request.uri.split_once('?').unwrap_or((&request.uri, ""));
        assert_eq!(
            (request.method.as_str(), path),
            (call.method.as_str(), call.path.as_str()),
            "call {i}"
        );
        let query = kubetrain_test_support::query_pairs(query);
        for pair in &call.query {
            assert!(
                query.contains(pair),
                "call {i}: query {query:?} lacks {pair:?}"
            );
        }
        if let Some(ct) = call.content_type {
            assert_eq!(request.content_type, ct, "call {i}: content type");
        }
        for check in &call.checks {
            check(&request.body);
        }
    }
    if let Some(extra) = requests.get(calls.len()) {
        panic!("unexpected call {} {}", extra.method, extra.uri);
    }
}

/// A reconcile context on `client` with default settings.
pub(crate) fn context(client: Client, leadership: Leadership) -> Arc<Context> {
    Arc::new(Context::new(
        client,
        Settings::default(),
        leadership,
        Arc::new(ControllerMetrics::default()),
    ))
}

/// `now - seconds`.
pub(crate) fn ago(seconds: i64) -> Time {
    Time(Timestamp::now() - SignedDuration::from_secs(seconds))
}

/// A TrainJob `<name>` in team-a on `torch-distributed`, created a minute ago.
pub(crate) fn trainjob(name: &str) -> TrainJob {
    let mut job: TrainJob = kubetrain_test_support::fixtures::trainjob(name)
        .namespace(NS)
        .uid(UID)
        .num_nodes(2)
        .typed();
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
