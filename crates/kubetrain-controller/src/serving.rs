//! One accept loop for the operator's two servers (the HTTPS webhook and the plain-HTTP health and metrics
//! endpoint): HTTP/1.1 over hyper, optional TLS, and a graceful stop that lets in-flight requests finish.

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
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

/// What every handler answers with.
pub(crate) type HttpResponse = Response<Full<Bytes>>;

/// How long a client may take for the TLS handshake or to send the request head.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long in-flight requests may run after the stop signal.
const GRACE: Duration = Duration::from_secs(10);

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
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = HttpResponse> + Send + 'static,
{
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    connections.spawn(connection(stream, tls.clone(), handler.clone(), stop_rx.clone()));
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

async fn connection<H, Fut>(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    handler: H,
    stop: watch::Receiver<bool>,
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = HttpResponse> + Send + 'static,
{
    match tls {
        Some(acceptor) => match tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(stream)).await
        {
            Ok(Ok(stream)) => drive(TokioIo::new(stream), handler, stop).await,
            Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
            Err(_) => tracing::debug!("TLS handshake timed out"),
        },
        None => drive(TokioIo::new(stream), handler, stop).await,
    }
}

async fn drive<I, H, Fut>(io: I, handler: H, mut stop: watch::Receiver<bool>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = HttpResponse> + Send + 'static,
{
    let service = service_fn(move |request| {
        let handler = handler.clone();
        async move { Ok::<_, Infallible>(handler(request).await) }
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(CLIENT_TIMEOUT)
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
