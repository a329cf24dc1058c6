//! The HTTPS server: upstream's routing, middleware order and answers around [`Authenticator`],
//! [`kubetrain_api::status_update`] and [`Coalescer`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use rustls::crypto::CryptoProvider;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::auth::{AuthVerdict, Authenticator};
use super::coalesce::{Coalescer, WriteOutcome};
use super::metrics::{StatusMetrics, StatusPostOutcome};
use super::{FIELD_MANAGER, MAX_BODY, MAX_CONNECTIONS, MAX_JOBS, MAX_PER_SOURCE, REQUEST_DEADLINE};
use crate::serving::{HttpResponse, Limits, respond, serve};
use crate::webhook::tls::{ReloadingCert, server_config};
use kubetrain_api::status_update::{echo, failure, invalid_message, merge_patch, parse, validate};

/// Why the status server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatusServerError {
    /// The port could not be bound.
    #[error("cannot listen on {addr} for the status server: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The TLS configuration was refused.
    #[error("TLS configuration of the status server: {0}")]
    Tls(#[from] rustls::Error),
}

struct Shared {
    auth: Authenticator,
    writes: Coalescer,
    metrics: Arc<StatusMetrics>,
}

/// A bound, not yet serving status server.
pub struct StatusServer {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    client: kube::Client,
    metrics: Arc<StatusMetrics>,
    max_jobs: usize,
}

impl std::fmt::Debug for StatusServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusServer")
            .field("addr", &self.listener.local_addr().ok())
            .finish_non_exhaustive()
    }
}

impl StatusServer {
    /// Binds `addr` and prepares TLS with `cert` (the webhook's certificate, as upstream); tokens are
    /// reviewed and statuses written with `client`.
    pub async fn bind(
        addr: SocketAddr,
        cert: Arc<ReloadingCert>,
        provider: Arc<CryptoProvider>,
        client: kube::Client,
    ) -> Result<Self, StatusServerError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| StatusServerError::Bind { addr, source })?;
        let config = server_config(cert, provider)?;
        Ok(Self {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            client,
            metrics: Arc::new(StatusMetrics::unregistered()),
            max_jobs: MAX_JOBS,
        })
    }

    /// Records requests in `metrics` (from [`StatusMetrics::register`]).
    pub fn with_metrics(mut self, metrics: Arc<StatusMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Tracks at most `max_jobs` TrainJobs writing at once instead of [`MAX_JOBS`] (further ones get 429).
    pub fn with_max_jobs(mut self, max_jobs: usize) -> Self {
        self.max_jobs = max_jobs;
        self
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes; open requests then get a short grace period.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let metrics = self.metrics.clone();
        let superseded = metrics.clone();
        let shared = Arc::new(Shared {
            auth: Authenticator::new(self.client.clone()),
            writes: Coalescer::new(self.client, FIELD_MANAGER, self.max_jobs, move || {
                superseded.supersede()
            }),
            metrics,
        });
        let handler = move |request: Request<Incoming>| {
            let shared = Arc::clone(&shared);
            async move {
                let started = Instant::now();
                let (verdict, response) = handle(&shared, request).await;
                shared.metrics.observe(verdict, started.elapsed());
                response
            }
        };
        let limits = Limits {
            max_connections: MAX_CONNECTIONS,
            max_per_source: MAX_PER_SOURCE,
            request_deadline: REQUEST_DEADLINE,
            head_timeout: crate::serving::HEAD_TIMEOUT,
            idle_timeout: crate::serving::IDLE_TIMEOUT,
        };
        serve(
            self.listener,
            Some(self.acceptor),
            handler,
            shutdown,
            limits,
        )
        .await;
    }
}

/// The TrainJob a path names: `/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status`.
///
/// ```
/// use kubetrain_controller::status_server::job_of;
///
/// let path = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/mnist/status";
/// assert_eq!(job_of(path), Some(("team", "mnist")));
/// assert_eq!(job_of(&format!("{path}/")), None);
/// assert_eq!(job_of("/apis/trainer.kubeflow.org/v1alpha1/namespaces//trainjobs/mnist/status"), None);
/// ```
pub fn job_of(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/apis/trainer.kubeflow.org/v1alpha1/namespaces/")?;
    let (namespace, rest) = rest.split_once('/')?;
    let name = rest.strip_prefix("trainjobs/")?.strip_suffix("/status")?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains('/')).then_some((namespace, name))
}

fn status(code: StatusCode, reason: &str, message: &str) -> HttpResponse {
    respond(
        code,
        "application/json",
        failure(message, reason, code.as_u16()),
    )
}

/// Upstream's order: body size (from `Content-Length`), route, token, body, write.
async fn handle(shared: &Shared, request: Request<Incoming>) -> (StatusPostOutcome, HttpResponse) {
    let too_large = || {
        (
            StatusPostOutcome::TooLarge,
            status(
                StatusCode::PAYLOAD_TOO_LARGE,
                "RequestEntityTooLarge",
                "Payload too large",
            ),
        )
    };
    let declared = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return too_large();
    }
    let path = request.uri().path().to_owned();
    let job = job_of(&path).filter(|_| request.method() == Method::POST);
    let Some((namespace, name)) = job else {
        return (
            StatusPostOutcome::NotFound,
            status(StatusCode::NOT_FOUND, "NotFound", "Not found"),
        );
    };
    let header = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match shared.auth.authorize(header, namespace, name).await {
        Ok(AuthVerdict::Allowed) => {}
        Ok(AuthVerdict::Denied(why)) => {
            tracing::debug!(%namespace, %name, %why, "status update refused");
            return (
                StatusPostOutcome::Forbidden,
                status(StatusCode::FORBIDDEN, "Forbidden", "Forbidden"),
            );
        }
        Err(error) => {
            tracing::warn!(%namespace, %name, %error, "cannot review a status update's token");
            return internal();
        }
    }
    let body: Bytes = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(error)
            if error
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            return too_large();
        }
        Err(_) => return invalid_payload(),
    };
    let Ok(update) = parse(&body) else {
        return invalid_payload();
    };
    let Some(update) = update else {
        return (
            StatusPostOutcome::Empty,
            respond(StatusCode::OK, "application/json", echo(None)),
        );
    };
    let errors = validate(&update);
    if !errors.is_empty() {
        return invalid(&invalid_message(name, &errors));
    }
    match shared
        .writes
        .submit(namespace, name, merge_patch(&update))
        .await
    {
        Ok(WriteOutcome::Written) => (
            StatusPostOutcome::Written,
            respond(StatusCode::OK, "application/json", echo(Some(&update))),
        ),
        Ok(WriteOutcome::Invalid(message)) => invalid(&message),
        Ok(WriteOutcome::NotFound) => (
            StatusPostOutcome::NotFound,
            status(StatusCode::NOT_FOUND, "NotFound", "Train job not found"),
        ),
        Ok(WriteOutcome::Failed(_)) => internal(),
        Err(_busy) => {
            let mut response = status(
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                "Too many TrainJobs are updating their status; retry later",
            );
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
            (StatusPostOutcome::Busy, response)
        }
    }
}

fn invalid(message: &str) -> (StatusPostOutcome, HttpResponse) {
    (
        StatusPostOutcome::Invalid,
        status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message),
    )
}

fn invalid_payload() -> (StatusPostOutcome, HttpResponse) {
    invalid("Invalid payload")
}

fn internal() -> (StatusPostOutcome, HttpResponse) {
    (
        StatusPostOutcome::Error,
        status(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "Internal error",
        ),
    )
}
