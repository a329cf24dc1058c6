//! Progress reporting from inside a TrainJob: the Rust counterpart of the Python SDK's
//! `kubeflow.trainer.update_trainjob_status` (SDK 0.5.0), sending the same request to the operator's status
//! server, which writes it into the TrainJob's `status.trainerStatus`.
//!
//! The TrainJobStatus plugin gives every trainer container three env vars; without
//! [`ENV_SERVER_URL`] the reporter does nothing (not in a TrainJob, or the feature is off):
//!
//! | variable | holds |
//! |---|---|
//! | `KUBEFLOW_TRAINER_SERVER_URL` | the status endpoint, `https://<service>.<namespace>.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status` |
//! | `KUBEFLOW_TRAINER_SERVER_CA_CERT` | path of the CA certificate that signed the server's (system roots when unset or missing, as the SDK) |
//! | `KUBEFLOW_TRAINER_SERVER_TOKEN` | path of the projected ServiceAccount token (re-read every 5 minutes: the kubelet rotates it) |
//!
//! As the SDK: progress is clamped to 0..=100, the remaining time to ≥ 0, metric values become strings and
//! only the first [`MAX_METRICS`] metrics are sent; `lastUpdatedTime` is the local UTC time (when
//! [`Reporter::report`] was called); a successful update starts a [`MIN_UPDATE_INTERVAL`] (5 s) window in
//! which further [`Reporter::report`] calls send nothing (a failed one does not). [`Reporter::report_now`]
//! ignores the window, for a last update.
//!
//! Unlike the SDK, whose `update_trainjob_status` posts on the caller's thread (`requests` with
//! `timeout=5`: up to 5 s to connect and 5 s between bytes of the answer, on every call while the server
//! does not answer), [`Reporter::report`] never waits for the network: a background thread sends, one
//! request at a time, each bounded by [`TIMEOUT`] as a whole, and the queue holds one update (a newer one
//! replaces one not yet sent). A slow or stalled status endpoint costs the training loop nothing; only
//! [`Reporter::report_now`] waits for its answer (at most about [`TIMEOUT`]).
//!
//! ```no_run
//! use kubetrain_client::progress::{Progress, Reporter};
//!
//! # fn main() -> Result<(), kubetrain_client::progress::ReportError> {
//! // None outside a TrainJob: training code calls it unconditionally.
//! let reporter = Reporter::from_env()?;
//! for step in 0..100 {
//!     let loss = 1.0 / f64::from(step + 1);
//!     if let Some(reporter) = &reporter {
//!         let update = Progress::new()
//!             .percent(step + 1)
//!             .remaining_seconds(i64::from(99 - step))
//!             .metric("loss", loss)
//!             .metric("step", step);
//!         // Never waits for the network; throttled to one request per 5 s. Errors (including an earlier
//!         // update's failed delivery) are for the caller to log.
//!         if let Err(error) = reporter.report(&update) {
//!             eprintln!("progress update: {error}");
//!         }
//!     }
//! }
//! // The last update: sent whatever the throttle says, and waited for (at most about 5 s).
//! if let Some(reporter) = &reporter {
//!     reporter.report_now(&Progress::new().percent(100).remaining_seconds(0))?;
//! }
//! # Ok(()) }
//! ```

use std::fmt::Display;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

/// The status endpoint's URL (upstream's env name).
pub const ENV_SERVER_URL: &str = "KUBEFLOW_TRAINER_SERVER_URL";
/// Path of the CA certificate of the status server.
pub const ENV_CA_CERT: &str = "KUBEFLOW_TRAINER_SERVER_CA_CERT";
/// Path of the ServiceAccount token.
pub const ENV_TOKEN: &str = "KUBEFLOW_TRAINER_SERVER_TOKEN";
/// Shortest time between two updates sent by [`Reporter::report`] (the SDK's `_MIN_UPDATE_INTERVAL_SECONDS`).
pub const MIN_UPDATE_INTERVAL: Duration = Duration::from_secs(5);
/// How long a token read from its file is reused (the SDK's `_TOKEN_CACHE_TTL_SECONDS`).
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(300);
/// Most metrics sent in one update (the SDK's limit and the CRD's `maxItems`).
pub const MAX_METRICS: usize = 256;
/// How long one request may take, connect, write and read together (the SDK's `timeout=5` bounds each
/// phase, and each read, instead; a server trickling its answer could hold it far longer). Requests run
/// off the caller's thread, so this bounds how stale an update can get behind a stalled one, not training.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// The largest answer read.
const MAX_RESPONSE: u64 = 64 * 1024;

/// One progress update: all fields optional, metrics in the order given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Progress {
    /// Percentage done (clamped to 0..=100 when sent).
    pub progress_percent: Option<i64>,
    /// Estimated seconds left (clamped to ≥ 0 when sent).
    pub estimated_remaining_seconds: Option<i64>,
    /// Metrics as name and value text.
    pub metrics: Vec<(String, String)>,
}

impl Progress {
    /// An empty update.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the percentage done.
    pub fn percent(mut self, percent: impl Into<i64>) -> Self {
        self.progress_percent = Some(percent.into());
        self
    }

    /// Sets the estimated seconds left.
    pub fn remaining_seconds(mut self, seconds: impl Into<i64>) -> Self {
        self.estimated_remaining_seconds = Some(seconds.into());
        self
    }

    /// Adds a metric; its value is sent as text (`Display`), as the SDK's `str(value)`.
    pub fn metric(mut self, name: impl Into<String>, value: impl Display) -> Self {
        self.metrics.push((name.into(), value.to_string()));
        self
    }

    /// Adds kubetrain's step metric ([`kubetrain_api::constants::METRIC_STEP`]): the steps done.
    pub fn step(self, step: u64) -> Self {
        self.metric(kubetrain_api::constants::METRIC_STEP, step)
    }

    /// Adds kubetrain's checkpoint metrics: the step of the last checkpoint written
    /// ([`kubetrain_api::constants::METRIC_CHECKPOINT_STEP`]) and when, RFC 3339
    /// ([`kubetrain_api::constants::METRIC_CHECKPOINT_TIME`]). The operator and `kubetrain run` read them to
    /// tell what a restart loses.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use kubetrain_client::progress::Progress;
    ///
    /// let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_600_000);
    /// let p = Progress::new().step(120).checkpoint(100, at).resumed_from_step(50);
    /// assert_eq!(p.metrics, [
    ///     ("kubetrain.dev/step".to_string(), "120".to_string()),
    ///     ("kubetrain.dev/checkpoint-step".into(), "100".into()),
    ///     ("kubetrain.dev/checkpoint-time".into(), "2025-12-01T14:40:00Z".into()),
    ///     ("kubetrain.dev/resumed-from-step".into(), "50".into()),
    /// ]);
    /// ```
    pub fn checkpoint(self, step: u64, written: SystemTime) -> Self {
        self.metric(kubetrain_api::constants::METRIC_CHECKPOINT_STEP, step)
            .metric(
                kubetrain_api::constants::METRIC_CHECKPOINT_TIME,
                rfc3339(written),
            )
    }

    /// Adds kubetrain's resume metric ([`kubetrain_api::constants::METRIC_RESUMED_FROM_STEP`]): the step the
    /// checkpoint a restarted trainer loaded was written at. Report it only after a restart.
    pub fn resumed_from_step(self, step: u64) -> Self {
        self.metric(kubetrain_api::constants::METRIC_RESUMED_FROM_STEP, step)
    }
}

/// `time` as RFC 3339 in UTC to the second (`2025-12-01T14:40:00Z`), as Kubernetes writes times.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let (days, secs) = (since.as_secs() / 86_400, since.as_secs() % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The request body for `progress` at time `now`, exactly as the SDK builds it:
/// `{"trainerStatus": {"lastUpdatedTime": ..., "progressPercentage": ..., "estimatedRemainingSeconds": ...,
/// "metrics": [{"name": ..., "value": ...}]}}` with the time as Python's `datetime.isoformat()` writes it.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use kubetrain_client::progress::{Progress, request_body};
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_micros(1_764_600_000_123_456);
/// let body = request_body(&Progress::new().percent(140).metric("loss", 0.25), now);
/// assert_eq!(body, serde_json::json!({"trainerStatus": {
///     "lastUpdatedTime": "2025-12-01T14:40:00.123456+00:00",
///     "progressPercentage": 100,
///     "metrics": [{"name": "loss", "value": "0.25"}]}}));
/// ```
pub fn request_body(progress: &Progress, now: SystemTime) -> Value {
    let mut status = serde_json::Map::new();
    status.insert("lastUpdatedTime".into(), json!(isoformat(now)));
    if let Some(p) = progress.progress_percent {
        status.insert("progressPercentage".into(), json!(p.clamp(0, 100)));
    }
    if let Some(s) = progress.estimated_remaining_seconds {
        status.insert("estimatedRemainingSeconds".into(), json!(s.max(0)));
    }
    if !progress.metrics.is_empty() {
        let metrics: Vec<Value> = progress
            .metrics
            .iter()
            .take(MAX_METRICS)
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        status.insert("metrics".into(), Value::Array(metrics));
    }
    json!({ "trainerStatus": status })
}

/// `datetime.now(timezone.utc).isoformat()`: microseconds when not zero, `+00:00`.
fn isoformat(now: SystemTime) -> String {
    let since = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let (days, secs) = (since.as_secs() / 86_400, since.as_secs() % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    let micros = since.subsec_micros();
    let fraction = if micros == 0 {
        String::new()
    } else {
        format!(".{micros:06}")
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{fraction}+00:00",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Why an update was not delivered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The URL or the CA certificate cannot be used.
    #[error("status reporter configuration: {0}")]
    Config(String),
    /// No token: the token file is missing, unreadable or empty.
    #[error("no token to authenticate the status update (read from {0:?})")]
    NoToken(Option<PathBuf>),
    /// Connecting, TLS, sending or reading failed.
    #[error("sending the status update to {url}: {source}")]
    Io {
        /// The endpoint.
        url: String,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// The server answered with an error (its `metav1.Status` message is in `body`).
    #[error("status update refused with HTTP {status}: {body}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// The answer's body (at most 500 characters).
        body: String,
    },
    /// [`Reporter::report`]: an earlier update was not delivered (why is inside); this one was queued.
    #[error("an earlier status update was not delivered: {0}")]
    Earlier(Box<ReportError>),
}

/// What [`Reporter::report`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Handed to the background sender (replacing an update it had not sent yet).
    Queued,
    /// Within [`MIN_UPDATE_INTERVAL`] of the last accepted update: nothing was sent.
    Throttled,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Endpoint {
    tls: bool,
    host: String,
    port: u16,
    path: String,
}

impl Endpoint {
    fn parse(url: &str) -> Result<Self, ReportError> {
        let bad = || ReportError::Config(format!("{ENV_SERVER_URL}={url:?} is not an http(s) URL"));
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(bad());
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad())?,
                None if after.is_empty() => default_port,
                None => return Err(bad()),
            };
            (host.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), port.parse().map_err(|_| bad())?),
                None => (authority.to_owned(), default_port),
            }
        };
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            tls,
            host,
            port,
            path: path.to_owned(),
        })
    }

    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("{host}:{}", self.port)
    }
}

/// One update waiting for the sender.
struct Job {
    id: u64,
    body: Vec<u8>,
    token: String,
    /// Subject to the [`MIN_UPDATE_INTERVAL`] window ([`Reporter::report`]), not [`Reporter::report_now`].
    throttled: bool,
}

#[derive(Default)]
struct State {
    last_posted: Option<Instant>,
    token: Option<(String, Instant)>,
    /// The queue of one: a newer update replaces it.
    queued: Option<Job>,
    /// The id of the last update queued.
    last_id: u64,
    /// The id of the last update whose delivery ended (sent, failed, or dropped as throttled).
    finished: u64,
    /// The last failed delivery not yet returned to a caller, with its update's id.
    failure: Option<(u64, ReportError)>,
    /// A sender thread runs.
    sending: bool,
    /// The reporter was dropped: the sender ends once the queue is empty.
    closed: bool,
}

/// What the reporter and its sender thread share.
struct Inner {
    url: String,
    endpoint: Endpoint,
    token_file: Option<PathBuf>,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
    state: Mutex<State>,
    /// Wakes the sender: an update was queued, or the reporter was dropped.
    work: Condvar,
    /// Wakes [`Reporter::report_now`] and [`Reporter::flush`]: a delivery ended.
    done: Condvar,
}

/// Sends progress updates to one status endpoint, from a background thread (see the [module docs](self)).
/// Cheap to share between threads (`&self` methods). Dropping it lets the sender finish the update it
/// holds and end; [`Reporter::flush`] first, to wait for that.
pub struct Reporter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter")
            .field("url", &self.inner.url)
            .field("token_file", &self.inner.token_file)
            .finish_non_exhaustive()
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.inner.lock().closed = true;
        self.inner.work.notify_all();
    }
}

impl Reporter {
    /// The reporter the env describes, or `None` when [`ENV_SERVER_URL`] is unset or empty.
    pub fn from_env() -> Result<Option<Self>, ReportError> {
        let Some(url) = std::env::var(ENV_SERVER_URL).ok().filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let path = |name| std::env::var_os(name).map(PathBuf::from);
        Self::new(&url, path(ENV_CA_CERT), path(ENV_TOKEN)).map(Some)
    }

    /// A reporter posting to `url`, trusting the CA certificate(s) in `ca_file` (system roots when `None`
    /// or missing, as the SDK), authenticating with the token in `token_file`.
    pub fn new(
        url: &str,
        ca_file: Option<PathBuf>,
        token_file: Option<PathBuf>,
    ) -> Result<Self, ReportError> {
        let endpoint = Endpoint::parse(url)?;
        let tls = if endpoint.tls {
            Some(Arc::new(client_config(ca_file.filter(|f| f.exists()))?))
        } else {
            None
        };
        Ok(Self {
            inner: Arc::new(Inner {
                url: url.to_owned(),
                endpoint,
                token_file,
                tls,
                timeout: TIMEOUT,
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                done: Condvar::new(),
            }),
        })
    }

    /// This reporter with another per-request timeout (tests shorten it).
    #[cfg(test)]
    fn with_timeout(mut self, timeout: Duration) -> Self {
        Arc::get_mut(&mut self.inner)
            .expect("no sender yet")
            .timeout = timeout;
        self
    }

    /// Queues `progress` for the background sender unless an update was accepted less than
    /// [`MIN_UPDATE_INTERVAL`] ago; never waits for the network. An update still queued when the sender
    /// gets to it after a newer one was accepted is dropped, as the window would have.
    ///
    /// `Err(ReportError::NoToken)` when nothing was queued; `Err(ReportError::Earlier(why))` when this
    /// update was queued but an earlier one failed (each failure is returned once).
    pub fn report(&self, progress: &Progress) -> Result<Sent, ReportError> {
        if self
            .inner
            .lock()
            .last_posted
            .is_some_and(|at| at.elapsed() < MIN_UPDATE_INTERVAL)
        {
            return Ok(Sent::Throttled);
        }
        let (_, failure) = self.queue(progress, true)?;
        match failure {
            Some(error) => Err(ReportError::Earlier(Box::new(error))),
            None => Ok(Sent::Queued),
        }
    }

    /// Sends `progress` whatever the throttle says (e.g. the last update of a run) and waits for its answer,
    /// at most about [`TIMEOUT`] (behind a request already on the wire that does not end, it stays queued
    /// and the wait ends with a `TimedOut` error).
    pub fn report_now(&self, progress: &Progress) -> Result<(), ReportError> {
        let (id, _) = self.queue(progress, false)?;
        let limit = self.inner.timeout + Duration::from_millis(500);
        let mut state = self.inner.wait_until(limit, |s| s.finished >= id);
        if state.finished < id {
            return Err(ReportError::Io {
                url: self.inner.url.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {limit:?}"),
                ),
            });
        }
        // A newer update that replaced this one before it was sent answers for it.
        match state.failure.take_if(|(failed, _)| *failed >= id) {
            Some((_, error)) => Err(error),
            None => Ok(()),
        }
    }

    /// Waits until every queued update was delivered (or failed), at most `limit`; `true` when none is
    /// left, e.g. before the process exits after a last [`Reporter::report`].
    pub fn flush(&self, limit: Duration) -> bool {
        let state = self.inner.wait_until(limit, |s| s.finished >= s.last_id);
        state.finished >= state.last_id
    }

    /// Queues the update (replacing one not sent yet) and starts the sender if none runs; returns the
    /// update's id and the failure of an earlier one, if any.
    fn queue(
        &self,
        progress: &Progress,
        throttled: bool,
    ) -> Result<(u64, Option<ReportError>), ReportError> {
        let token = self.inner.token()?;
        let body = serde_json::to_vec(&request_body(progress, SystemTime::now()))
            .map_err(|e| ReportError::Config(e.to_string()))?;
        let mut state = self.inner.lock();
        if !state.sending {
            let inner = self.inner.clone();
            std::thread::Builder::new()
                .name("kubetrain-progress".into())
                .spawn(move || inner.send_loop())
                .map_err(|source| ReportError::Io {
                    url: self.inner.url.clone(),
                    source,
                })?;
            state.sending = true;
        }
        state.last_id += 1;
        let id = state.last_id;
        // A report_now update replaced by a report keeps its exemption from the window.
        let throttled = throttled && state.queued.as_ref().is_none_or(|q| q.throttled);
        state.queued = Some(Job {
            id,
            body,
            token,
            throttled,
        });
        let failure = state.failure.take().map(|(_, error)| error);
        drop(state);
        self.inner.work.notify_all();
        Ok((id, failure))
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits on [`Inner::done`] until `ready` or `limit` has passed; returns the state, locked.
    fn wait_until(&self, limit: Duration, ready: impl Fn(&State) -> bool) -> MutexGuard<'_, State> {
        let deadline = Instant::now() + limit;
        let mut state = self.lock();
        while !ready(&state) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .done
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        state
    }

    /// The sender thread: one queued update at a time, until the reporter is dropped and the queue empty.
    fn send_loop(&self) {
        loop {
            let job = {
                let mut state = self.lock();
                loop {
                    if let Some(job) = state.queued.take() {
                        break job;
                    }
                    if state.closed {
                        state.sending = false;
                        return;
                    }
                    state = self.work.wait(state).unwrap_or_else(|e| e.into_inner());
                }
            };
            let moot = job.throttled
                && self
                    .lock()
                    .last_posted
                    .is_some_and(|at| at.elapsed() < MIN_UPDATE_INTERVAL);
            let result = if moot {
                Ok(false)
            } else {
                self.deliver(&job).map(|()| true)
            };
            let mut state = self.lock();
            state.finished = job.id;
            match result {
                Ok(true) => state.last_posted = Some(Instant::now()),
                Ok(false) => {}
                Err(error) => state.failure = Some((job.id, error)),
            }
            drop(state);
            self.done.notify_all();
        }
    }

    fn deliver(&self, job: &Job) -> Result<(), ReportError> {
        let (status, answer) =
            self.post(&job.body, &job.token)
                .map_err(|source| ReportError::Io {
                    url: self.url.clone(),
                    source,
                })?;
        if status != 200 {
            return Err(ReportError::Http {
                status,
                body: answer.chars().take(500).collect(),
            });
        }
        Ok(())
    }

    fn token(&self) -> Result<String, ReportError> {
        if let Some((token, read)) = &self.lock().token
            && read.elapsed() < TOKEN_CACHE_TTL
        {
            return Ok(token.clone());
        }
        let no_token = || ReportError::NoToken(self.token_file.clone());
        let file = self.token_file.as_ref().ok_or_else(no_token)?;
        let token = std::fs::read_to_string(file).map_err(|_| no_token())?;
        let token = token.trim().to_owned();
        if token.is_empty() {
            return Err(no_token());
        }
        self.lock().token = Some((token.clone(), Instant::now()));
        Ok(token)
    }

    /// One `POST` over a fresh connection (`Connection: close`), all of it within [`Inner::timeout`];
    /// returns the status and the body.
    fn post(&self, body: &[u8], token: &str) -> std::io::Result<(u16, String)> {
        let deadline = Instant::now() + self.timeout;
        let e = &self.endpoint;
        let addr = (e.host.as_str(), e.port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{} has no address", e.host)))?;
        let tcp = TcpStream::connect_timeout(&addr, left(deadline)?)?;
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\nUser-Agent: kubetrain-reporter\r\n\r\n",
            e.path,
            e.host_header(),
            body.len()
        );
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        let socket = Deadline {
            tcp: tcp.try_clone()?,
            at: deadline,
        };
        let raw = match &self.tls {
            None => exchange(tcp, &request, &socket)?,
            Some(config) => {
                let name = match e.host.parse::<IpAddr>() {
                    Ok(ip) => ServerName::IpAddress(ip.into()),
                    Err(_) => ServerName::try_from(e.host.clone())
                        .map_err(|err| std::io::Error::other(err.to_string()))?,
                };
                let connection = rustls::ClientConnection::new(config.clone(), name)
                    .map_err(std::io::Error::other)?;
                exchange(rustls::StreamOwned::new(connection, tcp), &request, &socket)?
            }
        };
        parse_response(&raw)
    }
}

/// Time left until `deadline`, or a `TimedOut` error when none is.
fn left(deadline: Instant) -> std::io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no complete answer in time",
        ));
    }
    Ok(left)
}

/// A request's socket and its deadline: before each write and read, the socket's timeouts are set to the
/// time left, so a peer that trickles bytes cannot hold the request past the deadline.
struct Deadline {
    tcp: TcpStream,
    at: Instant,
}

impl Deadline {
    fn arm(&self) -> std::io::Result<()> {
        let left = left(self.at)?;
        self.tcp.set_read_timeout(Some(left))?;
        self.tcp.set_write_timeout(Some(left))
    }
}

/// Writes `request` and reads the answer until its `Content-Length` is complete or the peer closes, all
/// before `deadline`.
fn exchange(
    mut stream: impl Read + Write,
    request: &[u8],
    deadline: &Deadline,
) -> std::io::Result<Vec<u8>> {
    deadline.arm()?;
    stream.write_all(request)?;
    deadline.arm()?;
    stream.flush()?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        deadline.arm()?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            // A peer closing without TLS close_notify after a complete answer is fine.
            Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => break,
            Err(err) => return Err(err),
        }
        if raw.len() as u64 > MAX_RESPONSE || response_complete(&raw) {
            break;
        }
    }
    Ok(raw)
}

fn header_end(raw: &[u8]) -> Option<usize> {
    raw.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn content_length(head: &str) -> Option<usize> {
    head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

fn response_complete(raw: &[u8]) -> bool {
    let Some(end) = header_end(raw) else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]);
    content_length(&head).is_some_and(|len| raw.len() >= end + len)
}

fn parse_response(raw: &[u8]) -> std::io::Result<(u16, String)> {
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP/1.1 answer");
    let end = header_end(raw).ok_or_else(bad)?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(bad)?;
    let mut body = &raw[end..];
    if let Some(len) = content_length(&head) {
        body = &body[..len.min(body.len())];
    }
    Ok((status, String::from_utf8_lossy(body).into_owned()))
}

fn client_config(ca_file: Option<PathBuf>) -> Result<rustls::ClientConfig, ReportError> {
    let mut roots = rustls::RootCertStore::empty();
    match &ca_file {
        Some(file) => {
            let certs = CertificateDer::pem_file_iter(file)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    ReportError::Config(format!("CA certificate {}: {e}", file.display()))
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(ReportError::Config(format!(
                    "no CA certificate in {}",
                    file.display()
                )));
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
        }
    }
    let provider = crypto_provider()?;
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ReportError::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The crate's TLS provider feature (`ring` first), else the process-wide default.
fn crypto_provider() -> Result<Arc<rustls::crypto::CryptoProvider>, ReportError> {
    #[cfg(feature = "ring")]
    return Ok(Arc::new(rustls::crypto::ring::default_provider()));
    #[cfg(all(feature = "aws-lc-rs", not(feature = "ring")))]
    return Ok(Arc::new(rustls::crypto::aws_lc_rs::default_provider()));
    #[cfg(not(any(feature = "ring", feature = "aws-lc-rs")))]
    rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .ok_or_else(|| {
            ReportError::Config(
                "no TLS provider: enable kubetrain-client's `ring` or `aws-lc-rs` feature, or install a \
                 rustls CryptoProvider with CryptoProvider::install_default"
                    .into(),
            )
        })
}

static GLOBAL: OnceLock<Option<Reporter>> = OnceLock::new();

/// The SDK's `update_trainjob_status` contract for Rust training code: safe to call anywhere, never fails,
/// never waits for the network. `true` when the update was queued for the background sender ([`Sent::Queued`]);
/// `false` outside a TrainJob, within the 5 s window, without a token, or when an earlier update could not be
/// delivered (this one is queued all the same). One reporter per process, configured from the env on the
/// first call; the process may exit before its last update is sent: use a [`Reporter`] and
/// [`Reporter::report_now`] (or [`Reporter::flush`]) for a last update.
///
/// ```
/// use kubetrain_client::progress::{Progress, update_trainjob_status};
///
/// // Outside a TrainJob (no KUBEFLOW_TRAINER_SERVER_URL) nothing is sent.
/// if std::env::var_os("KUBEFLOW_TRAINER_SERVER_URL").is_none() {
///     assert!(!update_trainjob_status(&Progress::new().percent(10)));
/// }
/// ```
pub fn update_trainjob_status(progress: &Progress) -> bool {
    let reporter = GLOBAL.get_or_init(|| Reporter::from_env().ok().flatten());
    matches!(
        reporter.as_ref().map(|r| r.report(progress)),
        Some(Ok(Sent::Queued))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let e = Endpoint::parse("https://svc.ns.svc:10443/apis/x/status").unwrap();
        assert_eq!(
            (e.tls, e.host.as_str(), e.port, e.path.as_str()),
            (true, "svc.ns.svc", 10443, "/apis/x/status")
        );
        let e = Endpoint::parse("http://[::1]:8080/p").unwrap();
        assert_eq!((e.tls, e.host.as_str(), e.port), (false, "::1", 8080));
        assert_eq!(e.host_header(), "[::1]:8080");
        let e = Endpoint::parse("https://example.com").unwrap();
        assert_eq!((e.port, e.path.as_str()), (443, "/"));
        for bad in [
            "ftp://x/",
            "svc:1/p",
            "https://:1/p",
            "https://h:port/p",
            "https://[::1/p",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn isoformat_as_python() {
        let at = |micros: u64| isoformat(SystemTime::UNIX_EPOCH + Duration::from_micros(micros));
        assert_eq!(at(0), "1970-01-01T00:00:00+00:00");
        assert_eq!(at(951_782_400_000_001), "2000-02-29T00:00:00.000001+00:00");
        assert_eq!(
            at(1_798_761_599_500_000),
            "2026-12-31T23:59:59.500000+00:00"
        );
    }

    #[test]
    fn the_sdks_clamping_and_truncation() {
        let mut p = Progress::new().percent(-5).remaining_seconds(-1);
        for i in 0..300 {
            p = p.metric(format!("m{i}"), i);
        }
        let body = request_body(&p, SystemTime::UNIX_EPOCH);
        let status = &body["trainerStatus"];
        assert_eq!(status["progressPercentage"], 0);
        assert_eq!(status["estimatedRemainingSeconds"], 0);
        assert_eq!(status["metrics"].as_array().unwrap().len(), MAX_METRICS);
        assert_eq!(
            status["metrics"][255],
            json!({"name": "m255", "value": "255"})
        );
        let empty = request_body(&Progress::new(), SystemTime::UNIX_EPOCH);
        assert_eq!(
            empty,
            json!({"trainerStatus": {"lastUpdatedTime": "1970-01-01T00:00:00+00:00"}})
        );
    }

    #[test]
    fn a_trickled_answer_is_cut_at_the_request_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/p", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            // An answer head that never ends, a byte every 20 ms: every read gets something.
            let mut bytes = b"HTTP/1.1 200 OK\r\nX-Slow: "
                .iter()
                .copied()
                .chain(std::iter::repeat(b'x'));
            while stream.write_all(&[bytes.next().unwrap()]).is_ok() {
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "t").unwrap();
        let timeout = Duration::from_millis(300);
        let reporter = Reporter::new(&url, None, Some(token))
            .unwrap()
            .with_timeout(timeout);
        let began = Instant::now();
        assert_eq!(reporter.report(&Progress::new()).unwrap(), Sent::Queued);
        // Per-read timeouts alone never end this request (the old reporter's); the whole one does.
        assert!(reporter.flush(Duration::from_secs(5)), "still sending");
        assert!(began.elapsed() >= timeout, "{:?}", began.elapsed());
        match reporter.report(&Progress::new()) {
            Err(ReportError::Earlier(error)) => match *error {
                ReportError::Io { source, .. } => assert!(
                    matches!(
                        source.kind(),
                        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                    ),
                    "{source}"
                ),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn responses() {
        let raw = b"HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\ncontent-length: 4\r\n\r\n{}\n\nextra";
        assert!(response_complete(raw));
        assert_eq!(parse_response(raw).unwrap(), (403, "{}\n\n".to_owned()));
        assert!(!response_complete(
            b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}"
        ));
        assert!(parse_response(b"garbage").is_err());
    }
}
