//! A loopback S3 endpoint that serves a directory (feature `s3-server`).
//!
//! [`S3Server`] answers the S3 API (with SigV4 signature checks against one access key) on
//! `127.0.0.1:<port>`; buckets are the directories below a root and objects the files in them. It is
//! what `kubetrain acceptance --local` serves a plan's generated sample data from, so that the
//! initializer downloads it over real S3 requests, and what the initializer's own tests run against.
//!
//! It is **not** an object store for production: one access key, loopback only, plain HTTP, no
//! persistence guarantees beyond the files themselves, and no limits on requests or sizes. Point the
//! initializer at a real S3 service (or MinIO, Ceph RGW, ...) for anything but a local run.
//!
//! The server runs on a thread and Tokio runtime of its own, so it works from synchronous and
//! asynchronous callers alike, and stops when dropped.
//!
//! ```
//! use kubetrain_initializer::s3_server::S3Server;
//! let root = tempfile::tempdir()?;
//! let server = S3Server::start(root.path(), "AKID", "SECRET")?;
//! server.create_bucket("data")?;
//! std::fs::write(root.path().join("data/hello.txt"), "hi")?;
//! assert!(server.endpoint().starts_with("http://127.0.0.1:"));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::{BodyExt, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// A loopback S3 endpoint over a directory: buckets are directories below the root, objects files.
pub struct S3Server {
    root: Option<PathBuf>,
    access_key: String,
    secret_key: String,
    thread: ServerThread,
}

impl S3Server {
    /// Serves the directories below `root` as buckets, accepting requests signed with one access key.
    pub fn start(root: &Path, access_key: &str, secret_key: &str) -> std::io::Result<Self> {
        let fs =
            s3s_fs::FileSystem::new(root).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        let mut server = Self::with_backend(fs, access_key, secret_key)?;
        server.root = Some(root.to_path_buf());
        Ok(server)
    }

    /// Serves any `s3s` backend (for instance one that keeps its objects in memory, for throughput
    /// measurements) with the same signature checks. [`S3Server::create_bucket`] is the backend's
    /// business then.
    pub fn with_backend(
        backend: impl s3s::S3,
        access_key: &str,
        secret_key: &str,
    ) -> std::io::Result<Self> {
        let mut builder = s3s::service::S3ServiceBuilder::new(backend);
        builder.set_auth(s3s::auth::SimpleAuth::from_single(
            access_key.to_string(),
            secret_key.to_string(),
        ));
        let thread = ServerThread::spawn(BoxedService(builder.build()))?;
        Ok(Self {
            root: None,
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            thread,
        })
    }

    /// `http://127.0.0.1:<port>`, the value for `ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.thread.addr)
    }

    /// The accepted access key id.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// The accepted secret key.
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// Creates a bucket: a directory below the root. Fails with [`std::io::ErrorKind::Unsupported`] for a
    /// server started with [`S3Server::with_backend`].
    pub fn create_bucket(&self, bucket: &str) -> std::io::Result<()> {
        let Some(root) = &self.root else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "this S3 server serves a backend, not a directory: create buckets in the backend",
            ));
        };
        std::fs::create_dir_all(root.join(bucket))
    }

    /// An `object_store` client for this server, to upload objects (e.g. multipart ones).
    pub fn store(&self, bucket: &str) -> object_store::Result<object_store::aws::AmazonS3> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(bucket)
            .with_access_key_id(&self.access_key)
            .with_secret_access_key(&self.secret_key)
            .build()
    }
}

/// The server's thread, stopped and joined when dropped.
struct ServerThread {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerThread {
    /// Serves `service` over HTTP/1 on a loopback port from a thread of its own.
    fn spawn(service: BoxedService) -> std::io::Result<Self> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name(format!("s3-server-{}", addr.port()))
            .spawn(move || {
                runtime.block_on(accept(std_listener, service, stopped));
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

/// Accepts connections until `stopped` fires, one task per connection.
async fn accept(
    std_listener: std::net::TcpListener,
    service: BoxedService,
    mut stopped: oneshot::Receiver<()>,
) {
    let Ok(listener) = TcpListener::from_std(std_listener) else {
        return;
    };
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
}

/// `S3Service` with its body boxed, as hyper's connection serves it.
#[derive(Clone)]
struct BoxedService(s3s::service::S3Service);

impl hyper::service::Service<Request<Incoming>> for BoxedService {
    type Response = Response<BoxBody<Bytes, std::io::Error>>;
    type Error = s3s::HttpError;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move {
            let response = hyper::service::Service::call(&inner, req).await?;
            Ok(response.map(|body| {
                body.map_err(|e| std::io::Error::other(e.to_string()))
                    .boxed()
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_server_refuses_to_create_a_bucket_with_the_reason() {
        let root = std::env::temp_dir();
        let fs = s3s_fs::FileSystem::new(&root).unwrap();
        let server = S3Server::with_backend(fs, "AKID", "SECRET").unwrap();
        let err = server.create_bucket("data").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::Unsupported);
        assert!(
            err.to_string().contains("create buckets in the backend"),
            "{err}"
        );
    }
}
