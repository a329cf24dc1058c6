//! The local runner's TrainJob status endpoint: the operator's status server (upstream v2.3
//! `pkg/statusserver`), served on loopback for one run, so training code that reports progress
//! ([`crate::progress`], the Python SDK's `update_trainjob_status`) works unchanged under `kubetrain run`.
//!
//! The path, the request body, its validation and the answers are the operator's
//! ([`kubetrain_api::status_update`]: the same functions); what differs is the transport and the credential:
//!
//! | | operator | local runner |
//! |---|---|---|
//! | URL | `https://<service>.<ns>.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status` | `http://127.0.0.1:<free port>/apis/...` (the same path) |
//! | `KUBEFLOW_TRAINER_SERVER_CA_CERT` | the CA of the webhook certificate | empty: plain HTTP on loopback, nothing to verify (the SDK and [`crate::progress`] then use no CA) |
//! | `KUBEFLOW_TRAINER_SERVER_TOKEN` | a projected ServiceAccount token, audience = the TrainJob | `<run dir>/status-token`: 32 random bytes (hex) made for this run, mode 0600 |
//! | written to | `status.trainerStatus` (JSON merge patch) | the run's latest status ([`StatusEndpoint::latest`]), exactly what the merge patch would leave ([`status_update::applied`]) |
//!
//! Answers, in upstream's order: `Content-Length` over 64 KiB → 413; not `POST` to a TrainJob status path
//! → 404; a token other than the run's, or a path of another TrainJob → 403; body not an
//! `UpdateTrainJobStatusRequest` → 422 `Invalid payload`; no `trainerStatus` → 200, nothing stored; the CRD's
//! rules broken → 422 with the API server's message; stored → 200, the request echoed. A request without
//! `Content-Length` (chunked) gets 411.
//!
//! Slow or idle clients cannot starve the pods' posts (issue 38). One request per connection
//! (`Connection: close`), and each connection is closed when:
//! - nothing arrived 5 s after it was accepted;
//! - its request head is not complete 5 s after the head's first byte (trickling a byte
//!   now and then does not extend it);
//! - it is not answered 10 s after it was accepted (a trickled body);
//! - it is the oldest connection whose request is still being read, when a new connection would exceed
//!   [`MAX_PER_SOURCE`] connections from its source address or 256 in all.
//!
//! The last rule is what keeps a post prompt: the endpoint never stops accepting (a full server that only
//! waited would leave a new post in the listen backlog behind the slow ones, for up to their deadline), and
//! an honest client writes its whole request right after connecting, so it is read, answered and gone long
//! before newer connections could push it out. Answers being written are never dropped. On loopback every
//! pod shares `127.0.0.1`, so the per-source cap bounds what one address (one user on the machine) can hold,
//! and the global cap bounds the memory of a client spreading over `127.0.0.0/8`.

use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubetrain_api::TrainerStatus;
use kubetrain_api::status_update::{self, MAX_METRICS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The largest request body (upstream's `maxBodySize`, 64 KiB).
pub(crate) const MAX_BODY: usize = 64 * 1024;
/// The largest request head (request line and headers).
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Time from a connection's accept to its answer (bounds a trickled body).
pub(crate) const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// Time from a request head's first byte to its end. The SDK and [`crate::progress`] write the whole
/// request (at most 16 KiB of head and 64 KiB of body, on loopback) in one go, so their heads arrive in
/// microseconds; 5 s leaves room for a machine whose cores are all busy training, frees a slow-loris slot
/// twice as fast as the operator's 10 s, and equals the SDK's own 5 s timeout: a client this slow has given
/// up on its answer anyway.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Time from a connection's accept to its first byte. One request per connection, and honest clients write
/// it right after connecting: a connection that says nothing for this long only holds a slot (there is no
/// keep-alive to wait for, unlike the operator's idle timeout).
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections open at once from one source address. A pod posts one request at a time (the SDK is
/// synchronous, [`crate::progress`] has one request in flight), and honest requests are read within
/// microseconds, so this is far above what the pods of one machine hold at once; past it, the source's
/// oldest connection still being read is closed.
pub const MAX_PER_SOURCE: usize = 64;
/// Connections open at once in all (each holds at most [`MAX_HEAD`] + [`MAX_BODY`] bytes: about 20 MiB
/// together); past it, the oldest connection still being read is closed.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// The token file's name in the run directory.
pub(crate) const TOKEN_FILE: &str = "status-token";

// The SDK truncates to the CRD's limit; the endpoint checks the same number.
const _: () = assert!(MAX_METRICS == crate::progress::MAX_METRICS);

/// `/apis/trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status`, upstream's path.
pub(crate) fn status_path(namespace: &str, name: &str) -> String {
    format!("/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status")
}

/// A TrainJob status path's (namespace, name), `None` for any other path.
fn job_of(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/apis/trainer.kubeflow.org/v1alpha1/namespaces/")?;
    let (namespace, rest) = rest.split_once('/')?;
    let name = rest.strip_prefix("trainjobs/")?.strip_suffix("/status")?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains('/')).then_some((namespace, name))
}

/// One request as the endpoint sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// `POST`, `GET`, ...
    pub method: &'a str,
    /// The request target's path (the query is ignored).
    pub path: &'a str,
    /// The `Authorization` header.
    pub authorization: Option<&'a str>,
    /// The declared `Content-Length`.
    pub content_length: Option<u64>,
    /// The body (at most 64 KiB are ever read).
    pub body: &'a [u8],
}

/// The answer to one request: HTTP status, body, and the status to store when the update was accepted.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// The HTTP status.
    pub code: u16,
    /// The JSON body (a `metav1.Status` for errors, the echoed request for 200).
    pub body: Vec<u8>,
    /// What the TrainJob's `status.trainerStatus` becomes.
    pub stored: Option<TrainerStatus>,
}

fn failure(code: u16, reason: &str, message: &str) -> Answer {
    Answer {
        code,
        body: status_update::failure(message, reason, code),
        stored: None,
    }
}

/// Answers `request` for the run of `namespace`/`name` whose token is `token`, as the operator's status
/// server answers (see the [module docs](self)).
///
/// ```
/// use kubetrain_client::local::status::{Request, answer};
///
/// let path = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/demo/status";
/// let body = br#"{"trainerStatus": {"progressPercentage": 40, "lastUpdatedTime": "2026-12-01T14:00:00.5+00:00"}}"#;
/// let request = Request { method: "POST", path, authorization: Some("Bearer t0ken"),
///                         content_length: Some(body.len() as u64), body };
/// let ok = answer(&request, "default", "demo", "t0ken");
/// assert_eq!(ok.code, 200);
/// assert_eq!(ok.stored.unwrap().progress_percentage, Some(40));
/// let forged = Request { authorization: Some("Bearer guess"), ..request };
/// assert_eq!(answer(&forged, "default", "demo", "t0ken").code, 403);
/// ```
pub fn answer(request: &Request<'_>, namespace: &str, name: &str, token: &str) -> Answer {
    let too_large = || failure(413, "RequestEntityTooLarge", "Payload too large");
    if request.content_length.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large();
    }
    let Some(target) = job_of(request.path).filter(|_| request.method == "POST") else {
        return failure(404, "NotFound", "Not found");
    };
    let bearer = request
        .authorization
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim);
    // A token is for one TrainJob: the run's token on another job's path is refused as a cluster refuses a
    // token of another audience.
    if !bearer.is_some_and(|b| constant_time_eq(b.as_bytes(), token.as_bytes()))
        || target != (namespace, name)
    {
        return failure(403, "Forbidden", "Forbidden");
    }
    if request.body.len() > MAX_BODY {
        return too_large();
    }
    let Ok(update) = status_update::parse(request.body) else {
        return failure(422, "Invalid", "Invalid payload");
    };
    let Some(update) = update else {
        return Answer {
            code: 200,
            body: status_update::echo(None),
            stored: None,
        };
    };
    let errors = status_update::validate(&update);
    if !errors.is_empty() {
        return failure(
            422,
            "Invalid",
            &status_update::invalid_message(name, &errors),
        );
    }
    Answer {
        code: 200,
        body: status_update::echo(Some(&update)),
        stored: Some(status_update::applied(&update)),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A running endpoint; stops serving when dropped.
#[derive(Debug)]
pub struct StatusEndpoint {
    url: String,
    token_file: PathBuf,
    latest: watch::Receiver<Option<TrainerStatus>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StatusEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A fresh token: 32 bytes of OS randomness, hex.
fn new_token() -> io::Result<String> {
    use rand_core::RngCore;
    let mut bytes = [0u8; 32];
    rand_core::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(io::Error::other)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl StatusEndpoint {
    /// Serves the status endpoint of `namespace`/`name` on a free loopback port, with a new token written
    /// to `<dir>/status-token` (mode 0600). `on_update` is called with every stored status, in order.
    pub async fn start(
        namespace: &str,
        name: &str,
        dir: &Path,
        on_update: impl Fn(&TrainerStatus) + Send + Sync + 'static,
    ) -> io::Result<Self> {
        Self::start_with(namespace, name, dir, on_update, Limits::default()).await
    }

    /// [`StatusEndpoint::start`] with other limits (tests shorten the timeouts).
    pub(crate) async fn start_with(
        namespace: &str,
        name: &str,
        dir: &Path,
        on_update: impl Fn(&TrainerStatus) + Send + Sync + 'static,
        limits: Limits,
    ) -> io::Result<Self> {
        let token = new_token()?;
        let token_file = dir.join(TOKEN_FILE);
        write_private(&token_file, &token)?;
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let url = format!("http://127.0.0.1:{port}{}", status_path(namespace, name));
        let (tx, latest) = watch::channel(None);
        let shared = Arc::new(Shared {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            token,
            latest: tx,
            on_update: Box::new(on_update),
            slots: Mutex::new(Slots::new(limits.max_connections, limits.max_per_source)),
            limits,
        });
        let task = tokio::spawn(serve(listener, shared));
        Ok(StatusEndpoint {
            url,
            token_file,
            latest,
            task,
        })
    }

    /// The endpoint's URL (`KUBEFLOW_TRAINER_SERVER_URL`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The token file (`KUBEFLOW_TRAINER_SERVER_TOKEN`).
    pub fn token_file(&self) -> &Path {
        &self.token_file
    }

    /// The env the trainer's processes get: the URL, an empty CA certificate path (plain HTTP) and the
    /// token file.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (crate::progress::ENV_SERVER_URL.to_owned(), self.url.clone()),
            (crate::progress::ENV_CA_CERT.to_owned(), String::new()),
            (
                crate::progress::ENV_TOKEN.to_owned(),
                self.token_file.display().to_string(),
            ),
        ]
    }

    /// The last stored status, `None` before the first accepted update.
    pub fn latest(&self) -> Option<TrainerStatus> {
        self.latest.borrow().clone()
    }
}

fn write_private(path: &Path, text: &str) -> io::Result<()> {
    use std::io::Write;
    super::tree::create_private_file(path)?.write_all(text.as_bytes())
}

type OnUpdate = Box<dyn Fn(&TrainerStatus) + Send + Sync>;

/// The endpoint's bounds on slow and idle clients (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// From a request head's first byte to its end.
    pub head_timeout: Duration,
    /// From the accept to the first byte.
    pub idle_timeout: Duration,
    /// From the accept to the answer.
    pub request_deadline: Duration,
    /// Connections open at once in all.
    pub max_connections: usize,
    /// Connections open at once from one source address.
    pub max_per_source: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            head_timeout: HEAD_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            request_deadline: REQUEST_DEADLINE,
            max_connections: MAX_CONNECTIONS,
            max_per_source: MAX_PER_SOURCE,
        }
    }
}

struct Shared {
    namespace: String,
    name: String,
    token: String,
    latest: watch::Sender<Option<TrainerStatus>>,
    on_update: OnUpdate,
    slots: Mutex<Slots>,
    limits: Limits,
}

impl Shared {
    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One open connection in [`Slots`].
#[derive(Debug)]
struct Slot {
    source: IpAddr,
    /// Its request was read whole: it is being answered, and is never closed to make room.
    read: bool,
    /// Dropped to close the connection (its task waits on the receiver).
    _close: oneshot::Sender<()>,
}

/// The open connections, oldest first (ids grow with each accept), and the caps on them.
#[derive(Debug)]
struct Slots {
    next: u64,
    open: BTreeMap<u64, Slot>,
    max_connections: usize,
    max_per_source: usize,
}

impl Slots {
    fn new(max_connections: usize, max_per_source: usize) -> Self {
        Self {
            next: 0,
            open: BTreeMap::new(),
            max_connections: max_connections.max(1),
            max_per_source: max_per_source.max(1),
        }
    }

    /// Admits a connection from `source`, closing (dropping `close` of) the oldest connections still being
    /// read as the caps require. `None` when the caps leave no room: every connection in the way is being
    /// answered, and those end within the request deadline.
    fn admit(&mut self, source: IpAddr, close: oneshot::Sender<()>) -> Option<u64> {
        if self.open.values().filter(|s| s.source == source).count() >= self.max_per_source {
            self.close_oldest_unread(|s| s.source == source)?;
        }
        if self.open.len() >= self.max_connections {
            self.close_oldest_unread(|_| true)?;
        }
        let id = self.next;
        self.next += 1;
        self.open.insert(
            id,
            Slot {
                source,
                read: false,
                _close: close,
            },
        );
        Some(id)
    }

    fn close_oldest_unread(&mut self, from: impl Fn(&Slot) -> bool) -> Option<()> {
        let (&id, _) = self.open.iter().find(|(_, s)| !s.read && from(s))?;
        self.open.remove(&id);
        Some(())
    }

    fn mark_read(&mut self, id: u64) {
        if let Some(slot) = self.open.get_mut(&id) {
            slot.read = true;
        }
    }

    fn remove(&mut self, id: u64) {
        self.open.remove(&id);
    }
}

/// Frees a connection's slot when its task ends, however it ends.
struct SlotGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.shared.slots().remove(self.id);
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    // Dropped with the serve task (the endpoint's drop aborts it): every open connection ends with it.
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(_) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (close, closed) = oneshot::channel();
        // Never a wait for a free slot here: a full endpoint makes room (see the module docs).
        let Some(id) = shared.slots().admit(peer.ip(), close) else {
            continue; // every slot in the way is being answered: this one is closed at once
        };
        let shared = shared.clone();
        connections.spawn(async move {
            let guard = SlotGuard {
                shared: &shared,
                id,
            };
            let accepted = Instant::now();
            tokio::select! {
                // Closed to make room for a newer connection.
                _ = closed => {}
                _ = tokio::time::timeout(
                    shared.limits.request_deadline,
                    connection(stream, &shared, id, accepted),
                ) => {}
            }
            drop(guard);
        });
    }
}

/// Serves one request (`Connection: close`).
async fn connection(
    mut stream: TcpStream,
    shared: &Shared,
    id: u64,
    accepted: Instant,
) -> io::Result<()> {
    let mut raw = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    // Until the first byte, the idle timeout; from it, the head timeout (not renewed by later bytes).
    let mut head_deadline = accepted + shared.limits.idle_timeout;
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if raw.len() > MAX_HEAD {
            return write_answer(&mut stream, &failure(431, "BadRequest", "Header too large"))
                .await;
        }
        let Ok(n) = tokio::time::timeout_at(head_deadline, stream.read(&mut chunk)).await else {
            return Ok(()); // too slow: closed without an answer, as the operator does
        };
        let n = n?;
        if n == 0 {
            return Ok(());
        }
        if raw.is_empty() {
            head_deadline = Instant::now() + shared.limits.head_timeout;
        }
        raw.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let target = request_line.next().unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default().to_owned();
    let header = |wanted: &str| {
        head.split("\r\n").skip(1).find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case(wanted)
                .then(|| value.trim().to_owned())
        })
    };
    let authorization = header("authorization");
    let chunked = header("transfer-encoding").is_some_and(|t| !t.eq_ignore_ascii_case("identity"));
    let content_length = match header("content-length") {
        Some(text) => match text.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return write_answer(
                    &mut stream,
                    &failure(400, "BadRequest", "Bad Content-Length"),
                )
                .await;
            }
        },
        None => None,
    };
    if chunked {
        return write_answer(
            &mut stream,
            &failure(411, "LengthRequired", "Content-Length required"),
        )
        .await;
    }
    let wanted = content_length.unwrap_or(0).min(MAX_BODY as u64 + 1) as usize;
    let mut body = raw[head_end..].to_vec();
    // Read no further than the declared length and the limit (answer() refuses larger bodies first).
    if content_length.is_none_or(|n| n <= MAX_BODY as u64) {
        while body.len() < wanted {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(wanted);
    }
    shared.slots().mark_read(id);
    let request = Request {
        method: &method,
        path: &path,
        authorization: authorization.as_deref(),
        content_length,
        body: &body,
    };
    let answer = answer(&request, &shared.namespace, &shared.name, &shared.token);
    if let Some(status) = &answer.stored {
        shared.latest.send_replace(Some(status.clone()));
        (shared.on_update)(status);
    }
    write_answer(&mut stream, &answer).await
}

async fn write_answer(stream: &mut TcpStream, answer: &Answer) -> io::Result<()> {
    let reason = match answer.code {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        411 => "Length Required",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    };
    let head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        answer.code,
        answer.body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&answer.body).await?;
    stream.flush().await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/job/status";

    fn ask(method: &str, path: &str, auth: Option<&str>, body: &str) -> Answer {
        let request = Request {
            method,
            path,
            authorization: auth,
            content_length: Some(body.len() as u64),
            body: body.as_bytes(),
        };
        answer(&request, "ns", "job", "secret")
    }

    /// (method, path, authorization, body) -> (HTTP status, text in the answer).
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, &'a str, u16, &'a str);

    #[test]
    fn answers_as_the_operator() {
        let ok = Some("Bearer secret");
        let good = r#"{"trainerStatus": {"progressPercentage": 5, "lastUpdatedTime": "2026-01-01T00:00:00.7Z"}}"#;
        let other = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/other/status";
        let table: &[Case] = &[
            ("POST", PATH, ok, good, 200, ""),
            ("GET", PATH, ok, good, 404, "NotFound"),
            ("POST", "/apis/x", ok, good, 404, "NotFound"),
            ("POST", PATH, None, good, 403, "Forbidden"),
            ("POST", PATH, Some("Bearer secre"), good, 403, "Forbidden"),
            ("POST", PATH, Some("secret"), good, 403, "Forbidden"),
            ("POST", other, ok, good, 403, "Forbidden"),
            ("POST", PATH, ok, "{", 422, "Invalid payload"),
            ("POST", PATH, ok, "{}", 200, ""),
            (
                "POST",
                PATH,
                ok,
                r#"{"trainerStatus": {"progressPercentage": 101, "lastUpdatedTime": "2026-01-01T00:00:00Z"}}"#,
                422,
                "TrainJob.trainer.kubeflow.org \\\"job\\\" is invalid: status.trainerStatus.progressPercentage",
            ),
            (
                "POST",
                PATH,
                ok,
                r#"{"trainerStatus": {"progressPercentage": 1}}"#,
                422,
                "lastUpdatedTime is required",
            ),
        ];
        for (method, path, auth, body, code, reason) in table {
            let a = ask(method, path, *auth, body);
            let text = String::from_utf8_lossy(&a.body);
            assert_eq!(a.code, *code, "{method} {path} {auth:?} {body}: {text}");
            assert!(text.contains(reason), "{text} lacks {reason}");
            assert_eq!(a.stored.is_some(), *body == good && a.code == 200);
        }
        let stored = ask("POST", PATH, ok, good).stored.unwrap();
        assert_eq!(
            stored.last_updated_time.unwrap().0.to_string(),
            "2026-01-01T00:00:00Z"
        );
    }

    #[test]
    fn oversized_bodies_are_refused_before_reading() {
        let big = format!(
            r#"{{"trainerStatus": {{"metrics": [{{"name": "x", "value": "{}"}}]}}}}"#,
            "1".repeat(MAX_BODY)
        );
        assert_eq!(ask("POST", PATH, Some("Bearer secret"), &big).code, 413);
        // Declared too large: refused whatever the path or token.
        let request = Request {
            method: "POST",
            path: "/",
            authorization: None,
            content_length: Some(MAX_BODY as u64 + 1),
            body: b"",
        };
        assert_eq!(answer(&request, "ns", "job", "secret").code, 413);
    }

    #[test]
    fn a_full_endpoint_closes_the_oldest_connection_still_being_read() {
        let [a, b, c]: [IpAddr; 3] =
            ["127.0.0.1", "127.0.0.2", "127.0.0.3"].map(|ip| ip.parse().unwrap());
        let mut slots = Slots::new(4, 2);
        // The receivers of the admitted connections, by id.
        let open = std::cell::RefCell::new(BTreeMap::new());
        let admit = |slots: &mut Slots, source| {
            let (close, closed) = oneshot::channel();
            let id = slots.admit(source, close)?;
            open.borrow_mut().insert(id, closed);
            Some(id)
        };
        let closed = |slots: &Slots, ids: &[u64]| {
            let gone: Vec<u64> = open
                .borrow_mut()
                .iter_mut()
                .filter_map(|(id, r)| {
                    matches!(r.try_recv(), Err(oneshot::error::TryRecvError::Closed)).then_some(*id)
                })
                .collect();
            assert_eq!(gone, ids, "closed so far (open: {:?})", slots.open.keys());
        };
        assert_eq!(admit(&mut slots, a), Some(0));
        assert_eq!(admit(&mut slots, a), Some(1));
        slots.mark_read(0);
        // A's cap (2): its oldest connection still being read (1) makes room; 0 is being answered.
        assert_eq!(admit(&mut slots, a), Some(2));
        closed(&slots, &[1]);
        assert_eq!(admit(&mut slots, b), Some(3));
        assert_eq!(admit(&mut slots, b), Some(4));
        closed(&slots, &[1]);
        // The global cap (4): the oldest unread connection of any source (2, from A) makes room.
        assert_eq!(admit(&mut slots, c), Some(5));
        closed(&slots, &[1, 2]);
        // B's cap: B's oldest (3), not A's 0.
        assert_eq!(admit(&mut slots, b), Some(6));
        closed(&slots, &[1, 2, 3]);
        // Every connection in the way is being answered: the newcomer is refused, nothing is closed.
        for id in [4, 5, 6] {
            slots.mark_read(id);
        }
        assert_eq!(admit(&mut slots, c), None);
        closed(&slots, &[1, 2, 3]);
        // A connection that ended frees its slot.
        slots.remove(4);
        assert_eq!(admit(&mut slots, c), Some(7));
        assert_eq!(slots.open.keys().copied().collect::<Vec<_>>(), [0, 5, 6, 7]);
    }

    async fn quick(limits: Limits) -> (StatusEndpoint, tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = StatusEndpoint::start_with("ns", "job", dir.path(), |_| {}, limits)
            .await
            .unwrap();
        let address = endpoint.url()["http://".len()..]
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        (endpoint, dir, address)
    }

    /// Waits (at most `guard`) for the endpoint to close `stream`: end of file or a reset.
    async fn closed_within(stream: &mut (impl AsyncReadExt + Unpin), guard: Duration) {
        let mut buf = [0u8; 256];
        match tokio::time::timeout(guard, stream.read(&mut buf)).await {
            Err(_) => panic!("the connection is still open after {guard:?}"),
            Ok(Ok(0) | Err(_)) => {}
            Ok(Ok(_)) => panic!("an answer to an incomplete head"),
        }
    }

    #[tokio::test]
    async fn a_head_that_trickles_is_cut_at_the_head_timeout() {
        let head_timeout = Duration::from_millis(300);
        // Only the head timeout can end this connection within the guard below.
        let (_endpoint, _dir, address) = quick(Limits {
            head_timeout,
            idle_timeout: Duration::from_secs(60),
            request_deadline: Duration::from_secs(60),
            ..Limits::default()
        })
        .await;
        let began = Instant::now();
        let (mut read, mut write) = TcpStream::connect(&address).await.unwrap().into_split();
        // A byte every 20 ms of a head that never ends: each read succeeds, the head never completes.
        let trickle = tokio::spawn(async move {
            write
                .write_all(b"POST / HTTP/1.1\r\nX-Slow: ")
                .await
                .unwrap();
            while write.write_all(b"x").await.is_ok() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        // The old endpoint cut a connection only at its 10 s deadline.
        closed_within(&mut read, Duration::from_secs(5)).await;
        assert!(began.elapsed() >= head_timeout, "{:?}", began.elapsed());
        trickle.abort();
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_at_the_idle_timeout() {
        let idle_timeout = Duration::from_millis(300);
        let (_endpoint, _dir, address) = quick(Limits {
            idle_timeout,
            head_timeout: Duration::from_secs(60),
            request_deadline: Duration::from_secs(60),
            ..Limits::default()
        })
        .await;
        let began = Instant::now();
        let mut silent = TcpStream::connect(&address).await.unwrap();
        closed_within(&mut silent, Duration::from_secs(5)).await;
        assert!(began.elapsed() >= idle_timeout, "{:?}", began.elapsed());
    }

    #[test]
    fn tokens_are_fresh_hex() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    }
}
