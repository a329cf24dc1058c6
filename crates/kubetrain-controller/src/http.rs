//! The operator's plain-HTTP endpoints for the kubelet and Prometheus: `/healthz` (liveness), `/readyz`
//! (readiness) and `/metrics` (Prometheus text format of a shared registry). The metrics address may serve
//! HTTPS ([`Endpoints::with_tls`]) and check scrapers' tokens ([`Endpoints::with_auth`]).
//!
//! Liveness means the process still answers HTTP. Readiness means every registered check has passed; the
//! operator registers one per part that must be up before traffic may arrive (the webhook server listening
//! with its certificate loaded, the first Lease round answered by the API server). The Service sends webhook
//! calls only to ready pods, so a replica without a certificate never fails an admission.
//!
//! ```
//! use kubetrain_controller::http::Health;
//!
//! let health = Health::new();
//! let webhook = health.check("webhook");
//! assert_eq!(health.not_ready(), vec!["webhook".to_owned()]);
//! webhook.set(true);
//! assert!(health.not_ready().is_empty());
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::serving::{HttpResponse, Limits, respond, serve};

/// Probes and scrapes are few and quick: this many connections at once (16 from one address: the kubelet
/// probes from its node's), each request answered within 10 s.
const LIMITS: Limits = Limits {
    max_connections: 64,
    max_per_source: 16,
    request_deadline: std::time::Duration::from_secs(10),
    head_timeout: crate::serving::HEAD_TIMEOUT,
    idle_timeout: crate::serving::IDLE_TIMEOUT,
};

/// Content type of the OpenMetrics text that prometheus-client writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Named readiness checks; ready when all of them are.
#[derive(Clone, Debug, Default)]
pub struct Health {
    checks: Arc<Mutex<Checks>>,
}

/// Each check's name and flag, in registration order.
type Checks = Vec<(String, ReadyFlag)>;

/// One readiness check, flipped by the part of the operator it stands for.
#[derive(Clone, Debug)]
pub struct ReadyFlag(Arc<AtomicBool>, Arc<Mutex<String>>);

impl ReadyFlag {
    /// Marks the check as passing (`true`) or failing (without a reason).
    pub fn set(&self, ready: bool) {
        if ready {
            self.reason().clear();
        }
        self.0.store(ready, Ordering::Release);
    }

    /// Marks the check as failing for `reason`, which `/readyz` shows after the check's name.
    pub fn set_not_ready(&self, reason: &str) {
        reason.clone_into(&mut self.reason());
        self.0.store(false, Ordering::Release);
    }

    fn reason(&self) -> std::sync::MutexGuard<'_, String> {
        self.1.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Health {
    /// No checks: ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a check named `name`, failing until its flag is set.
    pub fn check(&self, name: &str) -> ReadyFlag {
        let flag = ReadyFlag(Arc::new(AtomicBool::new(false)), Arc::default());
        self.lock().push((name.to_owned(), flag.clone()));
        flag
    }

    /// Names of the checks that do not pass, in registration order, each followed by its reason in
    /// parentheses when it gave one.
    pub fn not_ready(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, flag)| !flag.0.load(Ordering::Acquire))
            .map(|(name, flag)| match flag.reason().as_str() {
                "" => name.clone(),
                reason => format!("{name} ({reason})"),
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Checks> {
        self.checks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A bound, not yet serving, endpoint for probes and metrics.
pub struct Endpoints {
    listener: TcpListener,
    registry: Arc<Registry>,
    health: Health,
    tls: Option<tokio_rustls::TlsAcceptor>,
    auth: Option<Arc<crate::metrics_auth::MetricsAuth>>,
}

impl Endpoints {
    /// Binds `addr`; `registry` is encoded on each scrape, `health` answers `/readyz`.
    pub async fn bind(
        addr: SocketAddr,
        registry: Arc<Registry>,
        health: Health,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        Ok(Self {
            listener,
            registry,
            health,
            tls: None,
            auth: None,
        })
    }

    /// Serves HTTPS with `tls` (upstream's `metrics.secureServing`) instead of plain HTTP.
    pub fn with_tls(mut self, tls: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(tokio_rustls::TlsAcceptor::from(tls));
        self
    }

    /// Answers `/metrics` only for callers `auth` allows (upstream's `metrics.auth.enabled`): 401 without
    /// an authenticated token, 403 when RBAC refuses it. Probes stay open.
    pub fn with_auth(mut self, auth: Arc<crate::metrics_auth::MetricsAuth>) -> Self {
        self.auth = Some(auth);
        self
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let registry = self.registry;
        let health = self.health;
        let auth = self.auth;
        let handler = move |request: Request<Incoming>| {
            let registry = Arc::clone(&registry);
            let health = health.clone();
            let auth = auth.clone();
            async move {
                if let Some(auth) = auth
                    && request.uri().path() == "/metrics"
                {
                    let header = request
                        .headers()
                        .get(http::header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok());
                    let verdict = auth
                        .check(header, request.method().as_str(), request.uri().path())
                        .await;
                    if verdict != crate::metrics_auth::ScrapeVerdict::Allowed {
                        let status = StatusCode::from_u16(verdict.status())
                            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                        return respond(
                            status,
                            "text/plain; charset=utf-8",
                            verdict.message() + "\n",
                        );
                    }
                }
                answer(&request, &registry, &health)
            }
        };
        serve(self.listener, self.tls, handler, shutdown, LIMITS).await;
    }
}

fn answer(request: &Request<Incoming>, registry: &Registry, health: &Health) -> HttpResponse {
    const TEXT: &str = "text/plain; charset=utf-8";
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return respond(StatusCode::METHOD_NOT_ALLOWED, TEXT, "GET only\n");
    }
    match request.uri().path() {
        "/healthz" | "/livez" => respond(StatusCode::OK, TEXT, "ok\n"),
        "/readyz" => {
            let failing = health.not_ready();
            if failing.is_empty() {
                respond(StatusCode::OK, TEXT, "ok\n")
            } else {
                let body = format!("not ready: {}\n", failing.join(", "));
                respond(StatusCode::SERVICE_UNAVAILABLE, TEXT, body)
            }
        }
        "/metrics" => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, registry) {
                Ok(()) => respond(StatusCode::OK, OPENMETRICS, text),
                Err(error) => respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    TEXT,
                    format!("encoding metrics failed: {error}\n"),
                ),
            }
        }
        _ => respond(
            StatusCode::NOT_FOUND,
            TEXT,
            "served: /healthz, /readyz, /metrics\n",
        ),
    }
}
