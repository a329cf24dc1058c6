//! One accept loop for the operator's two servers (the HTTPS webhook and the plain-HTTP health and metrics
//! endpoint): HTTP/1.1 over hyper, optional TLS, and a graceful stop that lets in-flight requests finish.
//!
//! Slow or malicious clients are bounded three ways: a request head must end within [`Limits::head_timeout`]
//! of its first byte (of the connection's accept, TLS handshake included, for the first request); each
//! request (body read included) must be answered within its deadline ([`Limits::request_deadline`], or the
//! client gets 408 and the connection closes); and at most [`Limits::max_connections`] connections are open
//! at once, [`Limits::max_per_source`] from one address. A connection past a cap takes the place of the
//! oldest one still in its head ([`slots`]): clients that trickle their heads and reconnect when cut only
//! displace each other, and a request sent at once is answered. While every connection is being answered,
//! the server stops accepting, so further clients wait in the kernel's listen backlog (back-pressure) until
//! one ends; nothing is allocated for them.
//!
//! Between requests a keep-alive connection may idle for [`Limits::idle_timeout`], longer than the 90 s after
//! which Go's HTTP client (the API server calling webhooks) drops idle connections: closing an idle
//! connection is a race with a client that is just sending its next request on it, and the API server does
//! not retry a `POST` that failed half-written ("broken pipe"), so the client must be the one that closes.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// What every handler answers with.
pub(crate) type HttpResponse = Response<Full<Bytes>>;

mod slots;

use slots::Slots;

/// [`Limits::head_timeout`] of every server: the head of a request within 2.5 s of its first byte. Clients
/// in the cluster (the API server, trainer pods, the kubelet) send a head in one write; a trickling client
/// holds its slot this long at most.
pub(crate) const HEAD_TIMEOUT: Duration = Duration::from_millis(2500);
/// [`Limits::idle_timeout`] of every server: longer than Go's 90 s `IdleConnTimeout`, so the client closes
/// an idle connection before the server does.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// How long in-flight requests may run after the stop signal.
const GRACE: Duration = Duration::from_secs(10);
/// hyper's read buffer per connection (its default is about 400 KiB), which also bounds the request head:
/// heads are small and bodies are read frame by frame, so a larger buffer only multiplies what each open
/// connection may hold. One TLS record carries at most 16 KiB.
const READ_BUFFER: usize = 16 * 1024;

/// How many clients a server serves at once and how long each request may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Connections open at once; past it a new one displaces the oldest still in its head, and while all
    /// are being answered further clients wait in the listen backlog.
    pub max_connections: usize,
    /// Connections open at once from one source address; past it a new one displaces that address's
    /// oldest still in its head, or is closed at once when all of them are being answered.
    pub max_per_source: usize,
    /// From the request head being read to the response: body read and handling together.
    pub request_deadline: Duration,
    /// From a request head's first byte (the connection's accept, for its first request) to its end.
    pub head_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
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
    let slots = Slots::new(
        limits.max_connections,
        limits.max_per_source,
        slots::SHED_AFTER,
    );
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Room first: while every connection is being answered, nothing is accepted (back-pressure).
        tokio::select! {
            () = &mut shutdown => break,
            () = slots.room() => {}
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let (phase, phases) = watch::channel(Phase::Head(Instant::now()));
                    // None: the caps are taken by requests being answered; the stream is closed at once.
                    if let Some((ticket, closed)) = slots.admit(peer.ip(), phases) {
                        let served = connection(stream, tls.clone(), handler.clone(), stop_rx.clone(), phase, Arc::clone(&slots), limits);
                        connections.spawn(async move {
                            let _ticket = ticket;
                            tokio::select! {
                                _ = closed => tracing::debug!("closed to make room for a newer connection"),
                                () = served => {}
                            }
                        });
                    }
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

/// One connection, its `phase` starting in [`Phase::Head`] at the accept: the TLS handshake and the first
/// request head end within the head timeout of it.
async fn connection<H, Fut>(
    stream: TcpStream,
    tls: Option<TlsAcceptor>,
    handler: H,
    stop: watch::Receiver<bool>,
    phase: watch::Sender<Phase>,
    slots: Arc<Slots>,
    limits: Limits,
) where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = HttpResponse> + Send + 'static,
{
    let Some(tls) = tls else {
        return drive(stream, handler, stop, phase, slots, limits).await;
    };
    let accepted = match *phase.borrow() {
        Phase::Head(since) => since,
        Phase::Idle | Phase::Busy => Instant::now(),
    };
    match tokio::time::timeout_at(accepted + limits.head_timeout, tls.accept(stream)).await {
        Ok(Ok(stream)) => drive(stream, handler, stop, phase, slots, limits).await,
        Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
        Err(_) => tracing::debug!("TLS handshake not complete within the head timeout"),
    }
}

async fn drive<S, H, Fut>(
    stream: S,
    handler: H,
    mut stop: watch::Receiver<bool>,
    phase: watch::Sender<Phase>,
    slots: Arc<Slots>,
    limits: Limits,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = HttpResponse> + Send + 'static,
{
    let deadline = limits.request_deadline;
    let phases = phase.subscribe();
    let io = TokioIo::new(Watched {
        inner: stream,
        phase: phase.clone(),
    });
    let service = service_fn(move |request| {
        // The head is complete: from here the request deadline bounds the request.
        phase.send_replace(Phase::Busy);
        let answer = tokio::time::timeout(deadline, handler(request));
        let phase = phase.clone();
        let slots = Arc::clone(&slots);
        async move {
            let answer = answer.await;
            phase.send_replace(Phase::Idle);
            slots.request_done();
            Ok::<_, Infallible>(answer.unwrap_or_else(|_| {
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
    // hyper's header timer starts when it waits for a head, idle time included: it is the idle bound here,
    // and `slow_head` the bound on a head once it has begun.
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout)
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
        () = slow_head(phases, limits.head_timeout) => {
            tracing::debug!(timeout = ?limits.head_timeout, "request head not complete in time; closing");
            return;
        }
        _ = stop.wait_for(|stop| *stop) => connection.as_mut().graceful_shutdown(),
    }
    let _ = connection.await;
}

/// Where a connection is between requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the next request; nothing of it has arrived.
    Idle,
    /// A request head is arriving, since this instant.
    Head(Instant),
    /// A request is being answered.
    Busy,
}

/// Resolves when a request head has been arriving for longer than `limit`; never otherwise.
async fn slow_head(mut phases: watch::Receiver<Phase>, limit: Duration) {
    loop {
        let phase = *phases.borrow_and_update();
        if let Phase::Head(since) = phase {
            tokio::select! {
                () = tokio::time::sleep_until(since + limit) => {
                    if *phases.borrow() == phase {
                        return;
                    }
                }
                changed = phases.changed() => if changed.is_err() {
                    std::future::pending::<()>().await;
                },
            }
        } else if phases.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A connection's stream that marks the first byte after an idle period as the start of a request head.
struct Watched<S> {
    inner: S,
    phase: watch::Sender<Phase>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.phase.send_if_modified(|phase| {
                let idle = *phase == Phase::Idle;
                if idle {
                    *phase = Phase::Head(Instant::now());
                }
                idle
            });
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
