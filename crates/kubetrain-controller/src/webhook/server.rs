//! The HTTPS server in front of [`Admission`]: routing by path, content type, body limits, status codes, and
//! the limits that keep slow or malicious clients from exhausting the operator ([`ServerLimits`]).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use rustls::crypto::CryptoProvider;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

use super::Route;
use super::admission::Admission;
use super::tls::{ReloadingCert, TlsSettings, server_config_with};
use crate::serving::{HttpResponse, Limits, respond, serve};

/// The largest AdmissionReview body accepted, 7 MiB: the API server refuses request bodies over 3 MiB
/// (`MaxRequestBodyBytes`), and a review carries the object and, on updates, the old object (at most 3 MiB
/// each as JSON) plus an envelope (user info, options) well under 1 MiB. Larger bodies get 413 without being
/// read (from `Content-Length`) or as soon as they pass the limit.
pub const MAX_BODY: usize = 7 * 1024 * 1024;

/// Bytes of each body read without drawing on the shared body budget: a TrainJob review is a few KiB, so
/// ordinary reviews never wait for the budget.
pub const FREE_BODY: usize = 32 * 1024;

/// What the webhook server allows one client and all clients together. The defaults bound the memory that
/// request bodies can hold to about `max_connections` × [`FREE_BODY`] + `body_budget` (32 + 32 MiB), however
/// slowly clients send.
///
/// ```
/// use kubetrain_controller::webhook::{MAX_BODY, ServerLimits};
///
/// let limits = ServerLimits::default();
/// assert_eq!(limits.request_deadline.as_secs(), 10);
/// assert_eq!(limits.max_body, MAX_BODY);
/// assert!(limits.body_budget >= limits.max_body);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections open at once (default 1,024). Past it a new connection displaces the oldest one still in
    /// its TLS handshake or request head; while every connection is being answered the server stops
    /// accepting, and further clients wait in the kernel's listen backlog until one ends.
    pub max_connections: usize,
    /// Connections open at once from one source address (default 512). Past it a new connection displaces
    /// that address's oldest one still in its head, or is closed at once when all of them are being
    /// answered. Keep it above the API server's concurrent admission calls (its
    /// `--max-mutating-requests-inflight` defaults to 200).
    pub max_per_source: usize,
    /// Time from the request head to the response, body read included (default 10 s, the API server's
    /// default and usual webhook timeout); a request over it gets 408 and its connection is closed.
    pub request_deadline: Duration,
    /// The largest body (default [`MAX_BODY`]); larger ones get 413.
    pub max_body: usize,
    /// Bytes that bodies may hold beyond their first [`FREE_BODY`] bytes, all requests together (default
    /// 32 MiB, raised to `max_body` if smaller). A request that needs more waits, within its deadline, for
    /// others to finish.
    pub body_budget: usize,
    /// Time from a request head's first byte (the connection's accept, TLS handshake included, for its
    /// first request) to its end (default 2.5 s); a slower head closes the connection.
    pub head_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request (default 120 s). Keep it above the
    /// client's own idle timeout (90 s for the API server) so that the client closes idle connections: a
    /// server closing one races the client's next request on it, which then fails half-written.
    pub idle_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_per_source: 512,
            request_deadline: Duration::from_secs(10),
            max_body: MAX_BODY,
            body_budget: 32 * 1024 * 1024,
            head_timeout: crate::serving::HEAD_TIMEOUT,
            idle_timeout: crate::serving::IDLE_TIMEOUT,
        }
    }
}

/// Why the webhook server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookError {
    /// The port could not be bound.
    #[error("cannot listen on {addr} for webhooks: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The TLS configuration was refused (no usable protocol versions with the provider).
    #[error("TLS configuration of the webhook server: {0}")]
    Tls(#[from] rustls::Error),
}

/// A bound, not yet serving HTTPS server for the admission webhooks.
pub struct WebhookServer {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    admission: Arc<Admission>,
    limits: ServerLimits,
}

impl WebhookServer {
    /// Binds `addr` and prepares TLS with `cert` (cryptography from `provider`, e.g. ring's default).
    pub async fn bind(
        addr: SocketAddr,
        cert: Arc<ReloadingCert>,
        provider: Arc<CryptoProvider>,
        admission: Admission,
    ) -> Result<Self, WebhookError> {
        Self::bind_with(addr, cert, provider, admission, &TlsSettings::default()).await
    }

    /// [`Self::bind`] with upstream's `tls` options (minimum version, cipher suites) applied. The
    /// certificate is looked up at every handshake, so a rotated one (files or
    /// [`ReloadingCert::set_pem`]) is served without a restart while open connections finish on theirs.
    pub async fn bind_with(
        addr: SocketAddr,
        cert: Arc<ReloadingCert>,
        provider: Arc<CryptoProvider>,
        admission: Admission,
        tls: &TlsSettings,
    ) -> Result<Self, WebhookError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| WebhookError::Bind { addr, source })?;
        let config = server_config_with(cert, provider, tls)?;
        Ok(Self {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            admission: Arc::new(admission),
            limits: ServerLimits::default(),
        })
    }

    /// Serves with `limits` instead of [`ServerLimits::default`].
    pub fn with_limits(mut self, limits: ServerLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes; open requests then get a short grace period.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let admission = self.admission;
        let limits = self.limits;
        let budget = Arc::new(Semaphore::new(
            limits
                .body_budget
                .max(limits.max_body)
                .min(Semaphore::MAX_PERMITS),
        ));
        let handler = move |request: Request<Incoming>| {
            let admission = Arc::clone(&admission);
            let budget = Arc::clone(&budget);
            async move { handle(&admission, request, limits.max_body, &budget).await }
        };
        let connections = Limits {
            max_connections: limits.max_connections,
            max_per_source: limits.max_per_source,
            request_deadline: limits.request_deadline,
            head_timeout: limits.head_timeout,
            idle_timeout: limits.idle_timeout,
        };
        serve(
            self.listener,
            Some(self.acceptor),
            handler,
            shutdown,
            connections,
        )
        .await;
    }
}

async fn handle(
    admission: &Admission,
    request: Request<Incoming>,
    max_body: usize,
    budget: &Arc<Semaphore>,
) -> HttpResponse {
    let Some(route) = Route::from_path(request.uri().path()) else {
        let known: Vec<&str> = Route::ALL.iter().map(|r| r.path()).collect();
        return text(
            StatusCode::NOT_FOUND,
            format!("no webhook at this path; served: {}", known.join(", ")),
        );
    };
    if request.method() != Method::POST {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "admission reviews are POSTed".to_owned(),
        );
    }
    // As controller-runtime: the API server sends JSON, anything else is a client error.
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    if !is_json(&content_type) {
        return text(
            StatusCode::BAD_REQUEST,
            format!("contentType={content_type}, expected application/json"),
        );
    }
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max_body as u64) {
        return too_large(max_body);
    }
    // The budget stays held until the review is answered: parsing needs the body and more.
    let (body, _budget) = match read_body(request.into_body(), max_body, budget).await {
        Ok(read) => read,
        Err(BodyError::TooLarge) => return too_large(max_body),
        Err(BodyError::Read(error)) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("request body unreadable: {error}"),
            );
        }
    };
    match admission.review(route, &body).await {
        Ok(review) => match encode(&review) {
            Ok(json) => respond(StatusCode::OK, "application/json", Bytes::from(json)),
            Err(error) => text(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
        },
        Err(error) => text(StatusCode::BAD_REQUEST, error.to_string()),
    }
}

/// The review as JSON, with the patch as base64 text: the API server reads `patch` as Go `[]byte`, whose
/// JSON form is base64 (kube-core writes a list of numbers, which Go also accepts but no Go webhook sends).
fn encode(review: &AdmissionReview<DynamicObject>) -> Result<Vec<u8>, serde_json::Error> {
    let mut value = serde_json::to_value(review)?;
    if let Some(patch) = value.pointer_mut("/response/patch")
        && let Some(bytes) = patch.as_array()
    {
        let bytes: Vec<u8> = bytes
            .iter()
            .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
            .collect();
        *patch = serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    serde_json::to_vec(&value)
}

/// Whether a `Content-Type` names JSON (`application/json`, parameters such as a charset allowed).
fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

fn too_large(max_body: usize) -> HttpResponse {
    text(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body over {max_body} bytes"),
    )
}

enum BodyError {
    TooLarge,
    Read(String),
}

/// Reads a body of at most `max_body` bytes, frame by frame, copying each frame (a frame shares hyper's read
/// buffer, which must not stay pinned while a slow client trickles). Bytes past the first [`FREE_BODY`] are
/// drawn from `budget` as they arrive (waiting when it is spent); the permits come back with the body.
async fn read_body(
    mut body: Incoming,
    max_body: usize,
    budget: &Arc<Semaphore>,
) -> Result<(Vec<u8>, Option<OwnedSemaphorePermit>), BodyError> {
    let mut out: Vec<u8> = Vec::new();
    let mut held: Option<OwnedSemaphorePermit> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let len = out.len().saturating_add(data.len());
        if len > max_body {
            return Err(BodyError::TooLarge);
        }
        let drawn = held.as_ref().map_or(0, OwnedSemaphorePermit::num_permits);
        let owed = len.saturating_sub(FREE_BODY).saturating_sub(drawn);
        if owed > 0 {
            let owed = u32::try_from(owed).map_err(|_| BodyError::TooLarge)?;
            let permit = Arc::clone(budget)
                .acquire_many_owned(owed)
                .await
                .map_err(|e| BodyError::Read(e.to_string()))?;
            match &mut held {
                Some(held) => held.merge(permit),
                None => held = Some(permit),
            }
        }
        out.extend_from_slice(&data);
    }
    Ok((out, held))
}

fn text(status: StatusCode, message: String) -> HttpResponse {
    respond(status, "text/plain; charset=utf-8", message)
}
