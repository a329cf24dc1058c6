//! An in-memory API server for running the controller, the SDK and the CLI without a cluster: unit and
//! integration tests, scale tests, benchmarks and examples. It is a `tower_test` mock service behind a real [`kube::Client`], answering the
//! calls the controller makes the way the API server would:
//!
//! - `GET /version`, and discovery (`GET /apis/<group>/<version>`) for the kinds it serves;
//! - list (with `limit`/`continue` pages) and watch (held open, never sends events);
//! - get, server-side apply (`PATCH` with apply content type: the object is stored, status kept), JSON merge
//!   patch of `/status`, JSON merge patch of an object (a `metadata.resourceVersion` in the patch must match,
//!   else 409 Conflict, as on the API server), replace (`PUT`, with the same resourceVersion check), delete,
//!   and event creation;
//! - `TokenReview`s of the tokens registered with [`FakeApiServer::add_token`], with the API server's
//!   audience rules (the review's audiences must meet the token's; the answer lists the ones they share);
//! - create (`POST` to a collection: 201, or 409 AlreadyExists), list `labelSelector`s (`k=v`, `k!=v`,
//!   `k in (a,b)`, `k notin (a,b)`, `k`, `!k`), and pod logs (`GET .../pods/<name>/log?container=`) set
//!   with [`FakeApiServer::set_log`].
//!
//! Objects are stored as JSON bytes, keyed by API path. It does not validate, default, track managed fields or
//! garbage-collect; it counts requests by verb so callers can assert on traffic, records them when asked
//! ([`FakeApiServer::record_requests`]) so a test can check every request a component makes, in order, and
//! runs a hook before each answer ([`FakeApiServer::on_request`]) so a test can change the world between two
//! polls. For failures the store cannot produce, [`FakeApiServer::intercept`] answers chosen requests with a
//! canned reply (a 403, a missing API group); [`FakeApiServer::hold`] keeps chosen requests unanswered until
//! the test releases each one (a write in flight while others arrive). Errors carry the API server's
//! messages (`priorityclasses.scheduling.k8s.io "high" not found`), so code that passes them on can be
//! checked word for word.
//!
//! A process that needs a real endpoint (a command-line tool reading a kubeconfig) gets one with
//! [`FakeApiServer::serve`]: plain HTTP on a loopback port, in front of the same store.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use kubetrain_test_support::FakeApiServer;
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

use answer::answer;

mod answer;

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
        "optimizationjobs",
        "OptimizationJob",
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
    ("v1", "pods", "Pod", true),
    (
        "scheduling.k8s.io/v1",
        "priorityclasses",
        "PriorityClass",
        false,
    ),
    ("coordination.k8s.io/v1", "leases", "Lease", true),
    (
        "admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        false,
    ),
    (
        "admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        false,
    ),
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
    /// Objects created (`POST` to a collection, events and TokenReviews aside).
    pub creates: u64,
    /// Pod log requests.
    pub logs: u64,
    /// Replaces (`PUT` of an object).
    pub replaces: u64,
}

/// One request the server answered, as [`FakeApiServer::requests`] returns it.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// `GET`, `POST`, `PATCH`, `DELETE`, …
    pub method: String,
    /// The path and query, percent-decoded, empty query parameters dropped: e.g.
    /// `/api/v1/namespaces/a/pods?labelSelector=app in (x,y)`.
    pub uri: String,
    /// The JSON body (`Null` when there is none or it is not JSON).
    pub body: Value,
    /// The `Content-Type` header (empty when none): tells a server-side apply
    /// (`application/apply-patch+yaml`) from a merge patch (`application/merge-patch+json`).
    pub content_type: String,
}

/// A hook run before each answer; see [`FakeApiServer::on_request`].
type Hook = Arc<dyn Fn(&Recorded, &FakeApiServer) + Send + Sync>;

/// Canned replies; see [`FakeApiServer::intercept`].
type Intercept = Arc<dyn Fn(&Recorded) -> Option<(u16, Value)> + Send + Sync>;

/// Which requests to hold and where to hand them; see [`FakeApiServer::hold`].
struct Gate {
    holds: Box<dyn Fn(&Recorded) -> bool + Send + Sync>,
    to_test: tokio::sync::mpsc::UnboundedSender<HeldRequest>,
}

/// An API `Status` failure as the API server sends it, with its HTTP code: for
/// [`FakeApiServer::intercept`] replies, e.g. `api_status(403, "Forbidden", "... is forbidden")`.
pub fn api_status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

/// The requests held by [`FakeApiServer::hold`], in arrival order.
#[derive(Debug)]
pub struct Held(tokio::sync::mpsc::UnboundedReceiver<HeldRequest>);

impl Held {
    /// The next held request; waits until one arrives. `None` once the server is gone or another
    /// [`FakeApiServer::hold`] replaced this one.
    pub async fn next(&mut self) -> Option<HeldRequest> {
        self.0.recv().await
    }
}

/// One request the server holds unanswered; answered (from the store as it is then) when released or
/// dropped.
#[derive(Debug)]
pub struct HeldRequest {
    /// The request, as the request log shows it.
    pub request: Recorded,
    release: tokio::sync::oneshot::Sender<()>,
}

impl HeldRequest {
    /// Lets the server answer it.
    pub fn release(self) {
        let _ = self.release.send(());
    }
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
    creates: AtomicU64,
    logs: AtomicU64,
    replaces: AtomicU64,
}

#[derive(Default)]
struct State {
    objects: Mutex<BTreeMap<Key, Vec<u8>>>,
    tokens: Mutex<BTreeMap<String, FakeToken>>,
    /// Container logs by (namespace, pod, container).
    logs: Mutex<BTreeMap<(String, String, String), String>>,
    /// `None` until [`FakeApiServer::record_requests`].
    recorded: Mutex<Option<Vec<Recorded>>>,
    hook: Mutex<Option<Hook>>,
    intercept: Mutex<Option<Intercept>>,
    gate: Mutex<Option<Gate>>,
    counters: Counters,
    revision: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
        let server = Self {
            state,
            client: Client::new(service, "default"),
        };
        tokio::spawn(serve(handle, server.state.clone(), server.client.clone()));
        server
    }

    /// Records every request from now on ([`FakeApiServer::requests`]). Off by default: scale tests make
    /// millions.
    pub fn record_requests(&self) {
        lock(&self.state.recorded).get_or_insert_with(Vec::new);
    }

    /// The requests recorded since [`FakeApiServer::record_requests`], in the order they arrived.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state.recorded).clone().unwrap_or_default()
    }

    /// The requests recorded so far, emptying the log (recording goes on): a test checks a component's
    /// requests one step at a time.
    pub fn take_requests(&self) -> Vec<Recorded> {
        lock(&self.state.recorded)
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Answers each request `reply` returns `Some((code, body))` for with that status and JSON body instead
    /// of serving it (nothing is stored or counted): failures the store cannot produce, such as a 403 or a
    /// cluster without an API group. The request is still recorded and seen by [`FakeApiServer::on_request`].
    /// Replaces an earlier intercept. [`api_status`] builds the API server's failure bodies.
    pub fn intercept(
        &self,
        reply: impl Fn(&Recorded) -> Option<(u16, Value)> + Send + Sync + 'static,
    ) {
        *lock(&self.state.intercept) = Some(Arc::new(reply));
    }

    /// Holds every request `which` selects (watches aside) unanswered and hands it to the returned [`Held`];
    /// the server answers it once the test releases (or drops) it, from the store as it is then. Other
    /// requests are answered meanwhile, so a test can keep one write in flight and watch what the client
    /// does next. Replaces an earlier hold.
    pub fn hold(&self, which: impl Fn(&Recorded) -> bool + Send + Sync + 'static) -> Held {
        let (to_test, held) = tokio::sync::mpsc::unbounded_channel();
        *lock(&self.state.gate) = Some(Gate {
            holds: Box::new(which),
            to_test,
        });
        Held(held)
    }

    /// Runs `hook` with each request (recorded or not) before it is answered: a test changes the stored
    /// objects there to script what a polling client sees next, deterministically.
    pub fn on_request(&self, hook: impl Fn(&Recorded, &FakeApiServer) + Send + Sync + 'static) {
        *lock(&self.state.hook) = Some(Arc::new(hook));
    }

    /// Serves this server over plain HTTP on `127.0.0.1` (an ephemeral port), on the current tokio runtime,
    /// for clients outside the process: each request goes to the same store, log, intercepts and holds as
    /// [`FakeApiServer::client`]'s. Watches stay open, unanswered, as in process. Serving stops when the
    /// returned [`ServedApi`] is dropped (or [`ServedApi::stop`]ped).
    ///
    /// # Errors
    /// When no loopback port can be bound.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn serve(&self) -> std::io::Result<ServedApi> {
        let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let accepting = tokio::spawn(accept(listener, self.client.clone()));
        Ok(ServedApi { address, accepting })
    }

    /// Serves `text` as the log of `container` in pod `namespace/pod`.
    pub fn set_log(&self, namespace: &str, pod: &str, container: &str, text: impl Into<String>) {
        lock(&self.state.logs).insert(
            (namespace.into(), pod.into(), container.into()),
            text.into(),
        );
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
            creates: get(&c.creates),
            logs: get(&c.logs),
            replaces: get(&c.replaces),
        }
    }
}

/// A [`FakeApiServer`] served on a loopback port by [`FakeApiServer::serve`]; serving stops when it is
/// dropped.
#[derive(Debug)]
pub struct ServedApi {
    address: std::net::SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl ServedApi {
    /// The address it listens on (`127.0.0.1:<port>`).
    pub fn address(&self) -> std::net::SocketAddr {
        self.address
    }

    /// The server URL for a kubeconfig: `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// A kubeconfig whose current context `fake` reaches this server (cluster `fake` at [`ServedApi::url`],
    /// user `fake` with bearer token `fake`) in `namespace`.
    pub fn kubeconfig(&self, namespace: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: fake\n  cluster:\n    server: '{}'\n\
             users:\n- name: fake\n  user:\n    token: fake\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: '{}'\n\
             current-context: fake\n",
            self.url(),
            namespace.replace('\'', "''"),
        )
    }

    /// Writes [`ServedApi::kubeconfig`] to `path`, for a process given `KUBECONFIG=<path>`.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write_kubeconfig(
        &self,
        path: impl AsRef<std::path::Path>,
        namespace: &str,
    ) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig(namespace))
    }

    /// Stops serving and waits until the port is closed and every connection dropped.
    pub async fn stop(mut self) {
        self.accepting.abort();
        // The aborted task has dropped the listener and its connections once it is joined.
        let _ = (&mut self.accepting).await;
    }
}

impl Drop for ServedApi {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Accepts connections until aborted; aborting drops the connection set, which aborts every connection.
async fn accept(listener: tokio::net::TcpListener, client: Client) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                let client = client.clone();
                connections.spawn(async move {
                    let service = hyper::service::service_fn(move |request| forward(client.clone(), request));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One HTTP request from outside, answered by the in-process server through its client.
async fn forward(
    client: Client,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<http_body_util::Full<bytes::Bytes>>, std::convert::Infallible> {
    use http_body_util::BodyExt;
    let (parts, body) = request.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let answer = match client
        .send(Request::from_parts(parts, Body::from(bytes)))
        .await
    {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            Response::from_parts(parts, http_body_util::Full::new(bytes))
        }
        Err(error) => {
            let mut response = Response::new(http_body_util::Full::new(
                error.to_string().into_bytes().into(),
            ));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    };
    Ok(answer)
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
    /// A pod's `log` subresource.
    Log { key: Key },
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
        [plural, name, "log"] => Route::Log {
            key: (
                api_version,
                (*plural).to_owned(),
                namespace.unwrap_or_default(),
                (*name).to_owned(),
            ),
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

fn query<B>(request: &Request<B>, key: &str) -> Option<String> {
    query_pairs(request.uri().query().unwrap_or_default())
        .into_iter()
        .find_map(|(k, v)| (k == key).then_some(v))
}

/// `a=1&b=x%20y` → `[(a, 1), (b, x y)]`, form-decoded, empty pairs dropped: how the server reads a
/// request's query, for tests that check the queries in [`FakeApiServer::requests`].
pub fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `labels` satisfy a Kubernetes label selector (`k=v`, `k==v`, `k!=v`, `k in (a,b)`,
/// `k notin (a,b)`, `k`, `!k`, comma-separated); `None` when the selector cannot be read.
fn selects(selector: &str, labels: &serde_json::Map<String, Value>) -> Option<bool> {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    for term in terms.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
        let set = |rest: &str| -> Option<Vec<String>> {
            let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
            Some(inner.split(',').map(|v| v.trim().to_owned()).collect())
        };
        let ok = if let Some((k, v)) = term.split_once("!=") {
            label(k.trim()) != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            label(k.trim()) == Some(v.trim())
        } else if let Some((k, rest)) = term.split_once(" notin ") {
            let values = set(rest)?;
            label(k.trim()).is_none_or(|l| !values.iter().any(|v| v == l))
        } else if let Some((k, rest)) = term.split_once(" in ") {
            let values = set(rest)?;
            label(k.trim()).is_some_and(|l| values.iter().any(|v| v == l))
        } else if let Some(k) = term.strip_prefix('!') {
            label(k.trim()).is_none()
        } else {
            label(term).is_some()
        };
        if !ok {
            return Some(false);
        }
    }
    Some(true)
}

/// `plural.group` as the API server names a resource in messages (`configmaps` for the core group).
fn resource(api_version: &str, plural: &str) -> String {
    match api_version.rsplit_once('/') {
        Some((group, _)) => format!("{plural}.{group}"),
        None => plural.to_owned(),
    }
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

async fn serve(mut handle: Handle, state: Arc<State>, client: Client) {
    // The hook's view of the server; the client only lets the hook hand it on.
    let server = FakeApiServer {
        state: state.clone(),
        client,
    };
    // Watch requests are answered never: the watcher then waits, as on a quiet cluster.
    let mut held: Vec<Pending> = Vec::new();
    while let Some((request, send)) = handle.next_request().await {
        let (parts, body) = request.into_parts();
        let bytes = body
            .collect_bytes()
            .await
            .map(|b| b.to_vec())
            .unwrap_or_default();
        let hook = lock(&state.hook).clone();
        let recording = lock(&state.recorded).is_some();
        let watched = lock(&state.intercept).is_some() || lock(&state.gate).is_some();
        let recorded = (hook.is_some() || recording || watched).then(|| {
            let pairs = query_pairs(parts.uri.query().unwrap_or_default());
            let mut uri = percent_decode(parts.uri.path());
            for (i, (k, v)) in pairs.iter().enumerate() {
                uri.push(if i == 0 { '?' } else { '&' });
                uri.push_str(&format!("{k}={v}"));
            }
            Recorded {
                method: parts.method.to_string(),
                uri,
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                content_type: parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned(),
            }
        });
        if let Some(recorded) = &recorded {
            if let Some(hook) = hook {
                hook(recorded, &server);
            }
            if let Some(log) = lock(&state.recorded).as_mut() {
                log.push(recorded.clone());
            }
        }
        let request = Request::from_parts(parts, bytes);
        if request.method() == Method::GET && query(&request, "watch").as_deref() == Some("true") {
            state.counters.watches.fetch_add(1, Ordering::Relaxed);
            held.push(send);
            continue;
        }
        let gate = recorded.as_ref().and_then(|r| {
            lock(&state.gate)
                .as_ref()
                .filter(|g| (g.holds)(r))
                .map(|g| g.to_test.clone())
        });
        if let (Some(to_test), Some(recorded)) = (gate, &recorded) {
            let (release, released) = tokio::sync::oneshot::channel();
            let _ = to_test.send(HeldRequest {
                request: recorded.clone(),
                release,
            });
            let state = state.clone();
            let recorded = recorded.clone();
            // Released or dropped alike: the answer comes from the store as it is then.
            tokio::spawn(async move {
                let _ = released.await;
                send.send_response(respond(request, Some(&recorded), &state));
            });
            continue;
        }
        send.send_response(respond(request, recorded.as_ref(), &state));
    }
}

/// The answer to one (non-watch) request: an intercept's canned reply, a pod log, or the store's answer.
fn respond(
    request: Request<Vec<u8>>,
    recorded: Option<&Recorded>,
    state: &State,
) -> Response<Body> {
    let intercept = lock(&state.intercept).clone();
    let canned = intercept.zip(recorded).and_then(|(reply, r)| reply(r));
    let (status, body) = if let Some((code, body)) = canned {
        (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            serde_json::to_vec(&body).unwrap_or_default(),
        )
    } else if let (&Method::GET, Some(Route::Log { key })) =
        (request.method(), route(request.uri().path()))
    {
        state.counters.logs.fetch_add(1, Ordering::Relaxed);
        let container = query(&request, "container").unwrap_or_default();
        match lock(&state.logs).get(&(key.2.clone(), key.3.clone(), container)) {
            Some(text) => (StatusCode::OK, text.clone().into_bytes()),
            None => {
                let (status, body) =
                    status_reply(404, "NotFound", format!("pods {:?} not found", key.3));
                (status, serde_json::to_vec(&body).unwrap_or_default())
            }
        }
    } else {
        let (status, body) = answer(request, state);
        (status, serde_json::to_vec(&body).unwrap_or_default())
    };
    Response::builder()
        .status(status)
        .body(Body::from(body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

#[cfg(test)]
mod tests;
