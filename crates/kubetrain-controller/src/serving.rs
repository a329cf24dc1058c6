//! One accept loop for the operator's two servers (the HTTPS webhook and the plain-HTTP health and metrics
//! endpoint): HTTP/1.1 over hyper, optional TLS, and a graceful stop that lets in-flight requests finish.
//!
//! Slow or malicious clients are bounded three ways: the TLS handshake and the request head must arrive
//! within 10 s; each request (body read included) must be answered within its deadline
//! ([`Limits::request_deadline`], or the client gets 408 and the connection closes); and at most
//! [`Limits::max_connections`] connections are open at once. Past the cap the server stops accepting, so
//! further clients wait in the kernel's listen backlog (back-pressure) until a connection ends; nothing is
//! allocated for them.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// What every handler answers with.
pub(crate) type HttpResponse = Response<Full<Bytes>>;

/// How long a client may take for the TLS handshake or to send the request head.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long in-flight requests may run after the stop signal.
const GRACE: Duration = Duration::from_secs(10);
/// hyper's read buffer per connection (its default is about 400 KiB), which also bounds the request head:
/// heads are small and bodies are read frame by frame, so a larger buffer only multiplies what each open
/// connection may hold. One TLS record carries at most 16 KiB.
const READ_BUFFER: usize = 16 * 1024;

/// How many clients a server serves at once and how long each request may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Connections open at once; further clients wait in the listen backlog until one ends.
    pub max_connections: usize,
    /// From the request head being read to the response: body read and handling together.
    pub request_deadline: Duration,
}

/// A response with a status, a content type and a body.
pub(crate) fn respond(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> HttpResponse {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    if let Ok(value) = http::HeaderValue::from_str(content_type) {
        response
            .headers_mut()
            .insert(http::header::CONTENT_TYPE, value);
    }
    response
}

/// Serves `handler` on every connection accepted from `listener` until `shutdown` completes, then stops
/// accepting and gives open requests [`GRACE`] to finish.
pub(crate) async fn serve<H, Fut>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: H,
    shutdown: impl Future<Output = ()>,
    limits: Limits,
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = HttpResponse> + Send + 'static,
{
    let (stop_tx, stop_rx) = watch::channel(false);
    let slots = std::sync::Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // A free connection slot first: while none is free, nothing is accepted (back-pressure).
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = std::sync::Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let deadline = limits.request_deadline;
                    connections.spawn(connection(stream, tls.clone(), handler.clone(), stop_rx.clone(), slot, deadline));
                }
                Err(error) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("requests still running after the grace period were cut off");
        connections.abort_all();
    }
}

/// One connection, holding its `_slot` until it ends.
async fn connection<H, Fut>(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    handler: H,
    stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
    deadline: Duration,
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = HttpResponse> + Send + 'static,
{
    match tls {
        Some(acceptor) => match tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(stream)).await
        {
            Ok(Ok(stream)) => drive(TokioIo::new(stream), handler, stop, deadline).await,
            Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
            Err(_) => tracing::debug!("TLS handshake timed out"),
        },
        None => drive(TokioIo::new(stream), handler, stop, deadline).await,
    }
}

async fn drive<I, H, Fut>(io: I, handler: H, mut stop: watch::Receiver<bool>, deadline: Duration)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = HttpResponse> + Send + 'static,
{
    let service = service_fn(move |request| {
        let answer = tokio::time::timeout(deadline, handler(request));
        async move {
            Ok::<_, Infallible>(answer.await.unwrap_or_else(|_| {
                tracing::debug!(?deadline, "request not complete by its deadline");
                let mut response = respond(
                    StatusCode::REQUEST_TIMEOUT,
                    "text/plain; charset=utf-8",
                    format!("request not complete within {} s\n", deadline.as_secs_f64()),
                );
                response.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
                response
            }))
        }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(CLIENT_TIMEOUT)
        .max_buf_size(READ_BUFFER)
        .serve_connection(io, service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "connection ended with an error");
            }
            return;
        }
        _ = stop.wait_for(|stop| *stop) => connection.as_mut().graceful_shutdown(),
    }
    let _ = connection.await;
}
