//! An in-memory API server for running the controller without a cluster (feature `mock`): scale tests,
//! benchmarks and examples. It is a `tower_test` mock service behind a real [`kube::Client`], answering the
//! calls the controller makes the way the API server would:
//!
//! - `GET /version`, and discovery (`GET /apis/<group>/<version>`) for the kinds it serves;
//! - list (with `limit`/`continue` pages) and watch (held open, never sends events);
//! - get, server-side apply (`PATCH` with apply content type: the object is stored, status kept), JSON merge
//!   patch of `/status`, JSON merge patch of an object (a `metadata.resourceVersion` in the patch must match,
//!   else 409 Conflict, as on the API server), delete, and event creation;
//! - `TokenReview`s of the tokens registered with [`FakeApiServer::add_token`], with the API server's
//!   audience rules (the review's audiences must meet the token's; the answer lists the ones they share).
//!
//! Objects are stored as JSON bytes, keyed by API path. It does not validate, default, track managed fields or
//! garbage-collect; it counts requests by verb so callers can assert on traffic.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use kubetrain_controller::mock::FakeApiServer;
//!
//! let server = FakeApiServer::start();
//! server.insert(serde_json::json!({
//!     "apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": {"name": "settings", "namespace": "team-a"},
//! }));
//! let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
//!     kube::Api::namespaced(server.client(), "team-a");
//! assert!(cms.get_opt("settings").await.unwrap().is_some());
//! assert_eq!(server.stats().gets, 1);
//! # }
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;
type Pending = tower_test::mock::SendResponse<Response<Body>>;

/// Kinds served: (apiVersion, plural, kind, namespaced).
const SERVED: &[(&str, &str, &str, bool)] = &[
    (
        "trainer.kubeflow.org/v1alpha1",
        "trainjobs",
        "TrainJob",
        true,
    ),
    (
        "trainer.kubeflow.org/v1alpha1",
        "trainingruntimes",
        "TrainingRuntime",
        true,
    ),
    (
        "trainer.kubeflow.org/v1alpha1",
        "clustertrainingruntimes",
        "ClusterTrainingRuntime",
        false,
    ),
    ("jobset.x-k8s.io/v1alpha2", "jobsets", "JobSet", true),
    (
        "scheduling.x-k8s.io/v1alpha1",
        "podgroups",
        "PodGroup",
        true,
    ),
    (
        "scheduling.volcano.sh/v1beta1",
        "podgroups",
        "PodGroup",
        true,
    ),
    ("v1", "configmaps", "ConfigMap", true),
    ("v1", "secrets", "Secret", true),
    ("events.k8s.io/v1", "events", "Event", true),
];

/// Where an object lives: apiVersion, plural, namespace ("" when cluster-scoped), name.
type Key = (String, String, String, String);

/// Requests answered, by verb.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// `GET` of one object (found or not).
    pub gets: u64,
    /// List requests.
    pub lists: u64,
    /// Watch requests (held open).
    pub watches: u64,
    /// Server-side applies.
    pub applies: u64,
    /// Status merge patches.
    pub status_patches: u64,
    /// Merge patches of objects (not their status).
    pub merge_patches: u64,
    /// Deletes.
    pub deletes: u64,
    /// Events created.
    pub events: u64,
    /// Discovery requests.
    pub discovery: u64,
    /// TokenReviews.
    pub token_reviews: u64,
}

/// A ServiceAccount token the fake API server's TokenReview knows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FakeToken {
    /// The user it authenticates, e.g. `system:serviceaccount:team-a:default`.
    pub username: String,
    /// The audiences it was issued for.
    pub audiences: Vec<String>,
    /// Whether it has expired (reviews then fail as the API server's do).
    pub expired: bool,
}

#[derive(Default)]
struct Counters {
    gets: AtomicU64,
    lists: AtomicU64,
    watches: AtomicU64,
    applies: AtomicU64,
    status_patches: AtomicU64,
    merge_patches: AtomicU64,
    deletes: AtomicU64,
    events: AtomicU64,
    discovery: AtomicU64,
    token_reviews: AtomicU64,
}

#[derive(Default)]
struct State {
    objects: Mutex<BTreeMap<Key, Vec<u8>>>,
    tokens: Mutex<BTreeMap<String, FakeToken>>,
    counters: Counters,
    revision: AtomicU64,
}

/// The in-memory API server; cloning shares it.
#[derive(Clone)]
pub struct FakeApiServer {
    state: Arc<State>,
    client: Client,
}

impl std::fmt::Debug for FakeApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeApiServer")
            .field("stats", &self.stats())
            .finish()
    }
}

impl FakeApiServer {
    /// Starts serving on the current tokio runtime.
    pub fn start() -> Self {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let state = Arc::new(State::default());
        tokio::spawn(serve(handle, state.clone()));
        Self {
            state,
            client: Client::new(service, "default"),
        }
    }

    /// A client talking to this server.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Stores `object` (with `apiVersion`, `kind`, `metadata.name`, and `metadata.namespace` when namespaced) as if
    /// created; a `uid` and `resourceVersion` are filled in when missing. Unknown kinds are ignored.
    pub fn insert(&self, mut object: Value) {
        let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let Some(&(_, plural, _, namespaced)) = SERVED
            .iter()
            .find(|(v, _, k, _)| *v == api_version && *k == kind)
        else {
            return;
        };
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let namespace = if namespaced {
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned()
        } else {
            String::new()
        };
        self.state.stamp(&mut object, true);
        let bytes = serde_json::to_vec(&object).unwrap_or_default();
        self.state
            .objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((api_version, plural.to_owned(), namespace, name), bytes);
    }

    /// The stored object, if any.
    pub fn get(
        &self,
        api_version: &str,
        plural: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        let key = (
            api_version.into(),
            plural.into(),
            namespace.into(),
            name.into(),
        );
        let objects = self.state.objects.lock().unwrap_or_else(|e| e.into_inner());
        objects
            .get(&key)
            .and_then(|b| serde_json::from_slice(b).ok())
    }

    /// Makes TokenReviews of `token` answer for `identity`; unknown tokens are not authenticated.
    pub fn add_token(&self, token: impl Into<String>, identity: FakeToken) {
        self.state
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token.into(), identity);
    }

    /// Removes a stored object; returns whether it existed.
    pub fn remove(&self, api_version: &str, plural: &str, namespace: &str, name: &str) -> bool {
        let key = (
            api_version.into(),
            plural.into(),
            namespace.into(),
            name.into(),
        );
        let mut objects = self.state.objects.lock().unwrap_or_else(|e| e.into_inner());
        objects.remove(&key).is_some()
    }

    /// How many objects of `apiVersion`/`plural` are stored.
    pub fn count(&self, api_version: &str, plural: &str) -> usize {
        let objects = self.state.objects.lock().unwrap_or_else(|e| e.into_inner());
        objects
            .keys()
            .filter(|(v, p, _, _)| v == api_version && p == plural)
            .count()
    }

    /// Bytes of JSON held for all stored objects.
    pub fn stored_bytes(&self) -> usize {
        let objects = self.state.objects.lock().unwrap_or_else(|e| e.into_inner());
        objects.values().map(Vec::len).sum()
    }

    /// Requests answered so far.
    pub fn stats(&self) -> Stats {
        let c = &self.state.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            gets: get(&c.gets),
            lists: get(&c.lists),
            watches: get(&c.watches),
            applies: get(&c.applies),
            status_patches: get(&c.status_patches),
            merge_patches: get(&c.merge_patches),
            deletes: get(&c.deletes),
            events: get(&c.events),
            discovery: get(&c.discovery),
            token_reviews: get(&c.token_reviews),
        }
    }
}

impl State {
    fn stamp(&self, object: &mut Value, create: bool) {
        let rv = self.revision.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            if create || !meta.contains_key("uid") {
                meta.entry("uid")
                    .or_insert_with(|| json!(format!("uid-{rv}")));
            }
            meta.entry("creationTimestamp")
                .or_insert_with(|| json!("2026-01-01T00:00:00Z"));
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
    }
}

/// A request path, parsed.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// `/apis/<group>/<version>` or `/api/v1`.
    Discovery(String),
    /// A collection (namespace `None` = all namespaces or cluster-scoped).
    Collection {
        api_version: String,
        plural: String,
        namespace: Option<String>,
    },
    /// One object, optionally its `status` subresource.
    Object { key: Key, status: bool },
}

fn route(path: &str) -> Option<Route> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (api_version, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("v1".to_owned(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        rest => (None, rest),
    };
    Some(match rest {
        [] => Route::Discovery(api_version),
        [plural] => Route::Collection {
            api_version,
            plural: (*plural).to_owned(),
            namespace,
        },
        [plural, name] | [plural, name, "status"] => Route::Object {
            status: rest.len() == 3,
            key: (
                api_version,
                (*plural).to_owned(),
                namespace.unwrap_or_default(),
                (*name).to_owned(),
            ),
        },
        _ => return None,
    })
}

fn query(request: &Request<Body>, key: &str) -> Option<String> {
    request.uri().query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.to_owned())
    })
}

fn status_reply(code: u16, reason: &str, message: String) -> (StatusCode, Value) {
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

/// RFC 7386 merge of `patch` into `target`.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// The API server's answer to a TokenReview: the review with its `status` filled in.
fn token_review(tokens: &BTreeMap<String, FakeToken>, mut review: Value) -> Value {
    let token = review["spec"]["token"].as_str().unwrap_or_default();
    let wanted: Vec<String> = review["spec"]["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let status = match tokens.get(token) {
        None => {
            json!({"authenticated": false, "error": "[invalid bearer token, square/go-jose: error in cryptographic primitive]"})
        }
        Some(t) if t.expired => {
            json!({"authenticated": false, "error": "[invalid bearer token, service account token has expired]"})
        }
        Some(t) => {
            let shared: Vec<&String> = if wanted.is_empty() {
                t.audiences.iter().collect()
            } else {
                wanted.iter().filter(|a| t.audiences.contains(a)).collect()
            };
            if shared.is_empty() {
                json!({"authenticated": false, "error": format!(
                    "[invalid bearer token, token audiences {:?} is invalid for the target audiences {:?}]",
                    t.audiences, wanted)})
            } else {
                json!({"authenticated": true, "audiences": shared,
                       "user": {"username": t.username, "groups": ["system:serviceaccounts", "system:authenticated"]}})
            }
        }
    };
    review["status"] = status;
    review
}

/// `GET /version`: the Kubernetes release the e2e suite runs.
fn version() -> Value {
    json!({"major": "1", "minor": "35", "gitVersion": "v1.35.4", "gitCommit": "", "gitTreeState": "clean",
           "buildDate": "", "goVersion": "", "compiler": "gc", "platform": "linux/amd64"})
}

async fn serve(mut handle: Handle, state: Arc<State>) {
    // Watch requests are answered never: the watcher then waits, as on a quiet cluster.
    let mut held: Vec<Pending> = Vec::new();
    while let Some((request, send)) = handle.next_request().await {
        if request.method() == Method::GET && query(&request, "watch").as_deref() == Some("true") {
            state.counters.watches.fetch_add(1, Ordering::Relaxed);
            held.push(send);
            continue;
        }
        let (status, body) = answer(request, &state).await;
        send.send_response(
            Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&body).unwrap_or_default()))
                .unwrap_or_else(|_| Response::new(Body::empty())),
        );
    }
}

async fn answer(request: Request<Body>, state: &State) -> (StatusCode, Value) {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let limit = query(&request, "limit").and_then(|l| l.parse::<usize>().ok());
    let start = query(&request, "continue")
        .and_then(|c| c.parse::<usize>().ok())
        .unwrap_or(0);
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = request
        .into_body()
        .collect_bytes()
        .await
        .map(|b| b.to_vec())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let counters = &state.counters;
    let not_found = |what: &str| status_reply(404, "NotFound", format!("{what} not found"));

    if method == Method::GET && path == "/version" {
        return (StatusCode::OK, version());
    }
    match (method, route(&path)) {
        (Method::GET, Some(Route::Discovery(api_version))) => {
            counters.discovery.fetch_add(1, Ordering::Relaxed);
            let resources: Vec<Value> = SERVED
                .iter()
                .filter(|(v, ..)| *v == api_version)
                .map(|(_, plural, kind, namespaced)| {
                    json!({"name": plural, "singularName": "", "namespaced": namespaced, "kind": kind,
                           "verbs": ["create", "delete", "get", "list", "patch", "watch"]})
                })
                .collect();
            if resources.is_empty() {
                return not_found(&api_version);
            }
            (
                StatusCode::OK,
                json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": api_version,
                       "resources": resources}),
            )
        }
        (
            Method::GET,
            Some(Route::Collection {
                api_version,
                plural,
                namespace,
            }),
        ) => {
            counters.lists.fetch_add(1, Ordering::Relaxed);
            let objects = state.objects.lock().unwrap_or_else(|e| e.into_inner());
            let matching = objects.iter().filter(|((v, p, ns, _), _)| {
                *v == api_version && *p == plural && namespace.as_ref().is_none_or(|n| n == ns)
            });
            let page: Vec<Value> = matching
                .clone()
                .skip(start)
                .take(limit.unwrap_or(usize::MAX))
                .filter_map(|(_, b)| serde_json::from_slice(b).ok())
                .collect();
            let total = matching.count();
            let next = start + page.len();
            let mut metadata = json!({"resourceVersion": state.revision.load(Ordering::Relaxed).max(1).to_string()});
            if next < total {
                metadata["continue"] = json!(next.to_string());
            }
            let kind = SERVED
                .iter()
                .find(|(v, p, ..)| *v == api_version && *p == plural)
                .map_or("List", |(_, _, k, _)| k);
            (
                StatusCode::OK,
                json!({"kind": format!("{kind}List"), "apiVersion": api_version,
                       "metadata": metadata, "items": page}),
            )
        }
        (Method::POST, Some(Route::Collection { plural, .. })) if plural == "tokenreviews" => {
            counters.token_reviews.fetch_add(1, Ordering::Relaxed);
            let tokens = state.tokens.lock().unwrap_or_else(|e| e.into_inner());
            (StatusCode::CREATED, token_review(&tokens, body))
        }
        (Method::POST, Some(Route::Collection { plural, .. })) if plural == "events" => {
            counters.events.fetch_add(1, Ordering::Relaxed);
            (StatusCode::CREATED, body)
        }
        (Method::GET, Some(Route::Object { key, .. })) => {
            counters.gets.fetch_add(1, Ordering::Relaxed);
            let objects = state.objects.lock().unwrap_or_else(|e| e.into_inner());
            match objects
                .get(&key)
                .and_then(|b| serde_json::from_slice(b).ok())
            {
                Some(v) => (StatusCode::OK, v),
                None => not_found(&format!("{} {:?}", key.1, key.3)),
            }
        }
        (Method::PATCH, Some(Route::Object { key, status: false }))
            if content_type.starts_with("application/apply-patch") =>
        {
            counters.applies.fetch_add(1, Ordering::Relaxed);
            let mut objects = state.objects.lock().unwrap_or_else(|e| e.into_inner());
            let mut object = body;
            let existing: Option<Value> = objects
                .get(&key)
                .and_then(|b| serde_json::from_slice(b).ok());
            if let Some(old) = &existing {
                // Apply owns spec and metadata here; the status and uid stay the server's.
                if let Some(status) = old.get("status") {
                    object["status"] = status.clone();
                }
                if let Some(uid) = old["metadata"].get("uid") {
                    object["metadata"]["uid"] = uid.clone();
                }
            }
            state.stamp(&mut object, existing.is_none());
            objects.insert(key, serde_json::to_vec(&object).unwrap_or_default());
            (StatusCode::OK, object)
        }
        (Method::PATCH, Some(Route::Object { key, status: false }))
            if content_type.starts_with("application/merge-patch+json") =>
        {
            counters.merge_patches.fetch_add(1, Ordering::Relaxed);
            let mut objects = state.objects.lock().unwrap_or_else(|e| e.into_inner());
            let Some(mut object) = objects
                .get(&key)
                .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            else {
                return not_found(&format!("{} {:?}", key.1, key.3));
            };
            let expected = body["metadata"].get("resourceVersion");
            if expected.is_some_and(|v| *v != object["metadata"]["resourceVersion"]) {
                return status_reply(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {} {:?}: the object has been modified",
                        key.1, key.3
                    ),
                );
            }
            merge(&mut object, &body);
            state.stamp(&mut object, false);
            objects.insert(key, serde_json::to_vec(&object).unwrap_or_default());
            (StatusCode::OK, object)
        }
        (Method::PATCH, Some(Route::Object { key, status: true })) => {
            counters.status_patches.fetch_add(1, Ordering::Relaxed);
            let mut objects = state.objects.lock().unwrap_or_else(|e| e.into_inner());
            let Some(mut object) = objects
                .get(&key)
                .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            else {
                return not_found(&format!("{} {:?}", key.1, key.3));
            };
            if let Some(status) = body.get("status") {
                merge(
                    object
                        .as_object_mut()
                        .map(|o| o.entry("status").or_insert(json!({})))
                        .unwrap_or(&mut Value::Null),
                    status,
                );
            }
            state.stamp(&mut object, false);
            objects.insert(key, serde_json::to_vec(&object).unwrap_or_default());
            (StatusCode::OK, object)
        }
        (Method::DELETE, Some(Route::Object { key, .. })) => {
            counters.deletes.fetch_add(1, Ordering::Relaxed);
            let mut objects = state.objects.lock().unwrap_or_else(|e| e.into_inner());
            match objects.remove(&key) {
                Some(_) => (
                    StatusCode::OK,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
                ),
                None => not_found(&format!("{} {:?}", key.1, key.3)),
            }
        }
        (method, _) => status_reply(
            405,
            "MethodNotAllowed",
            format!("the fake API server does not serve {method} {path}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let key = |v: &str, p: &str, ns: &str, n: &str| (v.into(), p.into(), ns.into(), n.into());
        let cases = [
            ("/api/v1", Some(Route::Discovery("v1".into()))),
            (
                "/apis/jobset.x-k8s.io/v1alpha2",
                Some(Route::Discovery("jobset.x-k8s.io/v1alpha2".into())),
            ),
            (
                "/apis/trainer.kubeflow.org/v1alpha1/trainjobs",
                Some(Route::Collection {
                    api_version: "trainer.kubeflow.org/v1alpha1".into(),
                    plural: "trainjobs".into(),
                    namespace: None,
                }),
            ),
            (
                "/api/v1/namespaces/a/configmaps",
                Some(Route::Collection {
                    api_version: "v1".into(),
                    plural: "configmaps".into(),
                    namespace: Some("a".into()),
                }),
            ),
            (
                "/api/v1/namespaces/a/configmaps/x",
                Some(Route::Object {
                    key: key("v1", "configmaps", "a", "x"),
                    status: false,
                }),
            ),
            (
                "/apis/trainer.kubeflow.org/v1alpha1/namespaces/a/trainjobs/j/status",
                Some(Route::Object {
                    key: key("trainer.kubeflow.org/v1alpha1", "trainjobs", "a", "j"),
                    status: true,
                }),
            ),
            (
                "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/t",
                Some(Route::Object {
                    key: key(
                        "trainer.kubeflow.org/v1alpha1",
                        "clustertrainingruntimes",
                        "",
                        "t",
                    ),
                    status: false,
                }),
            ),
            ("/healthz", None),
        ];
        for (path, want) in cases {
            assert_eq!(route(path), want, "{path}");
        }
    }

    #[test]
    fn merge_patch_semantics() {
        let mut v = json!({"a": 1, "b": {"c": 2, "d": 3}});
        merge(&mut v, &json!({"a": null, "b": {"c": 5}, "e": [1]}));
        assert_eq!(v, json!({"b": {"c": 5, "d": 3}, "e": [1]}));
    }

    #[tokio::test]
    async fn lists_in_pages_and_applies_keep_status() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, ListParams, Patch, PatchParams};
        let server = FakeApiServer::start();
        for i in 0..5 {
            server.insert(json!({"apiVersion": "v1", "kind": "ConfigMap",
                                 "metadata": {"name": format!("c{i}"), "namespace": "a"}}));
        }
        let api: Api<ConfigMap> = Api::namespaced(server.client(), "a");
        let first = api.list(&ListParams::default().limit(2)).await.unwrap();
        assert_eq!(first.items.len(), 2);
        let token = first.metadata.continue_.clone().unwrap();
        let rest = api
            .list(&ListParams::default().limit(10).continue_token(&token))
            .await
            .unwrap();
        assert_eq!(rest.items.len(), 3);
        assert!(rest.metadata.continue_.is_none());

        let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c0", "namespace": "a"}, "data": {"k": "v"}}))
        .unwrap();
        let stored = api
            .patch("c0", &PatchParams::apply("m").force(), &Patch::Apply(&cm))
            .await
            .unwrap();
        assert_eq!(stored.data.unwrap()["k"], "v");
        assert_eq!(server.stats().applies, 1);
        assert_eq!(server.stats().lists, 2);
        assert!(api.get_opt("nope").await.unwrap().is_none());
    }
}
