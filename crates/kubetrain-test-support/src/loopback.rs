//! Plain HTTP/1 servers on a loopback port, each on a thread and Tokio runtime of its own, so that they
//! serve synchronous and asynchronous tests alike; they stop when dropped.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// A server thread, stopped and joined when dropped.
pub(crate) struct ServerThread {
    pub(crate) addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    /// Serves the service `make_service` builds (on the server's runtime) on `127.0.0.1:0`.
    pub(crate) fn spawn<S>(
        make_service: impl FnOnce() -> S + Send + 'static,
    ) -> std::io::Result<Self>
    where
        S: hyper::service::Service<
                Request<Incoming>,
                Response = Response<BoxBody<Bytes, std::io::Error>>,
            > + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (stop, mut stopped) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name(format!("loopback-server-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(async move {
                    let Ok(listener) = TcpListener::from_std(std_listener) else {
                        return;
                    };
                    let service = make_service();
                    loop {
                        tokio::select! {
                            _ = &mut stopped => break,
                            accepted = listener.accept() => {
                                let Ok((socket, _)) = accepted else { continue };
                                let _ = socket.set_nodelay(true);
                                let service = service.clone();
                                tokio::spawn(async move {
                                    let _ = hyper::server::conn::http1::Builder::new()
                                        .serve_connection(TokioIo::new(socket), service)
                                        .await;
                                });
                            }
                        }
                    }
                });
                runtime.shutdown_background();
            })?;
        Ok(Self {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Lower-case hexadecimal, as checksums are listed.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}
