//! The operator's plain-HTTP endpoints for the kubelet and Prometheus: `/healthz` (liveness), `/readyz`
//! (readiness) and `/metrics` (Prometheus text format of a shared registry).
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

/// Each check's name and whether it passes, in registration order.
type Checks = Vec<(String, Arc<AtomicBool>)>;

/// One readiness check, flipped by the part of the operator it stands for.
#[derive(Clone, Debug)]
pub struct ReadyFlag(Arc<AtomicBool>);

impl ReadyFlag {
    /// Marks the check as passing (`true`) or failing.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Release);
    }
}

impl Health {
    /// No checks: ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a check named `name`, failing until its flag is set.
    pub fn check(&self, name: &str) -> ReadyFlag {
        let flag = Arc::new(AtomicBool::new(false));
        self.lock().push((name.to_owned(), Arc::clone(&flag)));
        ReadyFlag(flag)
    }

    /// Names of the checks that do not pass, in registration order.
    pub fn not_ready(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, flag)| !flag.load(Ordering::Acquire))
            .map(|(name, _)| name.clone())
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
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let registry = self.registry;
        let health = self.health;
        let handler = move |request: Request<Incoming>| {
            let answer = answer(&request, &registry, &health);
            async move { answer }
        };
        serve(self.listener, None, handler, shutdown, LIMITS).await;
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
