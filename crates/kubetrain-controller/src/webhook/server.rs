//! The HTTPS server in front of [`Admission`]: routing by path, body limits, status codes.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use rustls::crypto::CryptoProvider;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::Route;
use super::admission::Admission;
use super::tls::{ReloadingCert, server_config};
use crate::serving::{HttpResponse, respond, serve};

/// The API server sends whole objects; 8 MiB is well above etcd's 1.5 MiB object limit times two (object
/// and old object) plus the review's envelope.
const MAX_BODY: usize = 8 * 1024 * 1024;

/// Why the webhook server could not start.
#[derive(Debug, thiserror::Error)]
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
}

impl WebhookServer {
    /// Binds `addr` and prepares TLS with `cert` (cryptography from `provider`, e.g. ring's default).
    pub async fn bind(
        addr: SocketAddr,
        cert: Arc<ReloadingCert>,
        provider: Arc<CryptoProvider>,
        admission: Admission,
    ) -> Result<Self, WebhookError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| WebhookError::Bind { addr, source })?;
        let config = server_config(cert, provider)?;
        Ok(Self {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            admission: Arc::new(admission),
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes; open requests then get a short grace period.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let admission = self.admission;
        let handler = move |request: Request<Incoming>| {
            let admission = Arc::clone(&admission);
            async move { handle(&admission, request).await }
        };
        serve(self.listener, Some(self.acceptor), handler, shutdown).await;
    }
}

async fn handle(admission: &Admission, request: Request<Incoming>) -> HttpResponse {
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
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(error) => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body unreadable or over {MAX_BODY} bytes: {error}"),
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

fn text(status: StatusCode, message: String) -> HttpResponse {
    respond(status, "text/plain; charset=utf-8", message)
}
