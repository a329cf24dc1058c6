//! Loopback servers for tests and benches (feature `testing`): a real S3 server (`s3s-fs`, files
//! under a directory) and a small Hugging Face hub (repository info and `resolve` URLs).
//!
//! Each server runs on its own thread and Tokio runtime on `127.0.0.1:0`, so it works from sync
//! and async tests alike, and stops when dropped.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::config::Kind;
use crate::verify::to_hex;

/// A server thread that stops when dropped.
struct ServerThread {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
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

/// Serves `service` over HTTP/1 on a loopback port from a thread of its own.
fn spawn_server<S>(
    make_service: impl FnOnce() -> S + Send + 'static,
) -> std::io::Result<ServerThread>
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
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(format!("loopback-server-{}", addr.port()))
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    eprintln!("loopback server: no runtime: {err}");
                    return;
                }
            };
            runtime.block_on(async move {
                let Ok(listener) = TcpListener::from_std(std_listener) else {
                    return;
                };
                let service = make_service();
                loop {
                    tokio::select! {
                        _ = &mut stop_rx => break,
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
    Ok(ServerThread {
        addr,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

/// An S3 server (`s3s-fs`) on loopback: buckets are directories below `root`, objects files.
///
/// ```
/// use kubetrain_initializer::testing::S3TestServer;
/// let root = tempfile::tempdir().unwrap();
/// let server = S3TestServer::start(root.path(), "AKID", "SECRET").unwrap();
/// server.create_bucket("data").unwrap();
/// assert!(server.endpoint().starts_with("http://127.0.0.1:"));
/// ```
pub struct S3TestServer {
    root: PathBuf,
    access_key: String,
    secret_key: String,
    thread: ServerThread,
}

impl S3TestServer {
    /// Starts the server with one access key.
    pub fn start(root: &Path, access_key: &str, secret_key: &str) -> std::io::Result<Self> {
        let fs =
            s3s_fs::FileSystem::new(root).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        let (ak, sk) = (access_key.to_string(), secret_key.to_string());
        let thread = spawn_server(move || {
            let mut builder = s3s::service::S3ServiceBuilder::new(fs);
            builder.set_auth(s3s::auth::SimpleAuth::from_single(ak, sk));
            BoxedService(builder.build())
        })?;
        Ok(Self {
            root: root.to_path_buf(),
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            thread,
        })
    }

    /// `http://127.0.0.1:<port>`.
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

    /// Creates a bucket (a directory below the root).
    pub fn create_bucket(&self, bucket: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(self.root.join(bucket))
    }

    /// An `object_store` client for this server, to upload fixtures (e.g. multipart objects).
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

/// Adapts `S3Service`'s body type to the one [`spawn_server`] serves.
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

/// One repository served by [`HubTestServer`].
#[derive(Debug, Clone)]
pub struct HubRepo {
    /// Model or dataset repository.
    pub kind: Kind,
    /// `org/name`.
    pub id: String,
    /// Commit id reported by the info endpoint and accepted by `resolve`.
    pub sha: String,
    /// Path and content of each file.
    pub files: Vec<(String, Vec<u8>)>,
    /// Paths listed as LFS files (checksum: SHA-256) rather than git blobs (checksum: SHA-1).
    pub lfs: Vec<String>,
    /// When set, requests must carry `Authorization: Bearer <token>` (a gated repository).
    pub token: Option<String>,
}

#[derive(Default)]
struct HubState {
    repos: Vec<HubRepo>,
    /// Remaining injected failures per file path: `(status 500 count, cut-body count)`.
    faults: HashMap<String, (u32, u32)>,
    /// `"GET <path> [range]"` per request, in order.
    log: Vec<String>,
    /// Content served instead of the listed one, per file path (a lying or broken hub).
    served: HashMap<String, Vec<u8>>,
    /// List files without `size` (and LFS files without `lfs.size`).
    hide_sizes: bool,
}

/// A minimal Hugging Face hub: `GET /api/{models,datasets}/<repo>/revision/<rev>` and
/// `GET /[datasets/]<repo>/resolve/<rev>/<path>` (with `Range`), enough for `HF_ENDPOINT`.
pub struct HubTestServer {
    state: Arc<Mutex<HubState>>,
    thread: ServerThread,
}

impl HubTestServer {
    /// Starts a hub serving `repos`.
    pub fn start(repos: Vec<HubRepo>) -> std::io::Result<Self> {
        let state = Arc::new(Mutex::new(HubState {
            repos,
            ..HubState::default()
        }));
        let shared = Arc::clone(&state);
        let thread = spawn_server(move || {
            hyper::service::service_fn(move |req: Request<Incoming>| {
                let state = Arc::clone(&shared);
                async move { Ok::<_, Infallible>(hub_response(&state, &req)) }
            })
        })?;
        Ok(Self { state, thread })
    }

    /// `http://127.0.0.1:<port>`, the value for `HF_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.thread.addr)
    }

    /// Makes the next `server_errors` downloads of `path` answer 500 and the `cut_bodies` after
    /// them break off halfway through the body.
    pub fn inject_faults(&self, path: &str, server_errors: u32, cut_bodies: u32) {
        if let Ok(mut state) = self.state.lock() {
            state
                .faults
                .insert(path.to_string(), (server_errors, cut_bodies));
        }
    }

    /// Serves `content` for `path` from now on while the listing keeps the checksum and size of
    /// the listed content: a hub (or a proxy in front of it) that sends something else.
    pub fn serve_instead(&self, path: &str, content: Vec<u8>) {
        if let Ok(mut state) = self.state.lock() {
            state.served.insert(path.to_string(), content);
        }
    }

    /// Lists files without their sizes from now on (only the checksums remain).
    pub fn hide_sizes(&self) {
        if let Ok(mut state) = self.state.lock() {
            state.hide_sizes = true;
        }
    }

    /// The requests served so far, as `"GET <path> <range header or ->"`.
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().map(|s| s.log.clone()).unwrap_or_default()
    }
}

type HubBody = BoxBody<Bytes, std::io::Error>;

fn full(status: StatusCode, body: impl Into<Bytes>) -> Response<HubBody> {
    let mut response = Response::new(
        Full::new(body.into())
            .map_err(|e: Infallible| match e {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
}

fn hub_response(state: &Mutex<HubState>, req: &Request<Incoming>) -> Response<HubBody> {
    let Ok(mut state) = state.lock() else {
        return full(StatusCode::INTERNAL_SERVER_ERROR, "poisoned");
    };
    let path = req.uri().path().to_string();
    let range = req
        .headers()
        .get(hyper::header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    state
        .log
        .push(format!("GET {path} {}", range.as_deref().unwrap_or("-")));
    let auth = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let authorized = |repo: &HubRepo| {
        repo.token
            .as_ref()
            .is_none_or(|t| auth.as_deref() == Some(format!("Bearer {t}").as_str()))
    };
    let decoded = percent_decode(&path);
    if let Some(rest) = decoded.strip_prefix("/api/") {
        let (kind, rest) = match rest.split_once('/') {
            Some(("models", rest)) => (Kind::Model, rest),
            Some(("datasets", rest)) => (Kind::Dataset, rest),
            _ => return full(StatusCode::NOT_FOUND, "{\"error\":\"not found\"}"),
        };
        let Some((id, _rev)) = rest.split_once("/revision/") else {
            return full(StatusCode::NOT_FOUND, "{\"error\":\"not found\"}");
        };
        let Some(repo) = state.repos.iter().find(|r| r.kind == kind && r.id == id) else {
            return full(
                StatusCode::NOT_FOUND,
                "{\"error\":\"Repository not found\"}",
            );
        };
        if !authorized(repo) {
            return full(
                StatusCode::UNAUTHORIZED,
                "{\"error\":\"Access to this repo is restricted\"}",
            );
        }
        return full(StatusCode::OK, repo_info(repo, state.hide_sizes));
    }
    let (kind, rest) = match decoded.strip_prefix("/datasets/") {
        Some(rest) => (Kind::Dataset, rest),
        None => (Kind::Model, decoded.trim_start_matches('/')),
    };
    let Some((id, rev_and_path)) = rest.split_once("/resolve/") else {
        return full(StatusCode::NOT_FOUND, "not found");
    };
    let Some((rev, file_path)) = rev_and_path.split_once('/') else {
        return full(StatusCode::NOT_FOUND, "not found");
    };
    let Some(repo) = state.repos.iter().find(|r| r.kind == kind && r.id == id) else {
        return full(StatusCode::NOT_FOUND, "Repository not found");
    };
    if !authorized(repo) {
        return full(
            StatusCode::UNAUTHORIZED,
            "Access to this repo is restricted",
        );
    }
    if rev != repo.sha && rev != "main" {
        return full(StatusCode::NOT_FOUND, "Revision not found");
    }
    let Some((_, content)) = repo.files.iter().find(|(p, _)| p == file_path) else {
        return full(StatusCode::NOT_FOUND, "Entry not found");
    };
    let content = Bytes::from(state.served.get(file_path).unwrap_or(content).clone());
    let file_path = file_path.to_string();
    if let Some(fault) = state.faults.get_mut(&file_path) {
        if fault.0 > 0 {
            fault.0 -= 1;
            return full(StatusCode::INTERNAL_SERVER_ERROR, "injected failure");
        }
        if fault.1 > 0 {
            fault.1 -= 1;
            // Promise the whole file, send half, then break the connection.
            let half = content.slice(..content.len() / 2);
            // The pause lets the first half reach the client before the connection breaks.
            let frames = futures_util::stream::once(async move { Ok(Frame::data(half)) }).chain(
                futures_util::stream::once(async {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    Err(std::io::Error::other("injected disconnect"))
                }),
            );
            let mut response = Response::new(BodyExt::boxed(StreamBody::new(frames)));
            response.headers_mut().insert(
                hyper::header::CONTENT_LENGTH,
                hyper::header::HeaderValue::from(content.len()),
            );
            return response;
        }
    }
    let start = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse::<usize>().ok());
    match start {
        Some(start) if start < content.len() => {
            let mut response = full(StatusCode::PARTIAL_CONTENT, content.slice(start..));
            if let Ok(value) = hyper::header::HeaderValue::from_str(&format!(
                "bytes {start}-{}/{}",
                content.len() - 1,
                content.len()
            )) {
                response
                    .headers_mut()
                    .insert(hyper::header::CONTENT_RANGE, value);
            }
            response
        }
        Some(_) => full(StatusCode::RANGE_NOT_SATISFIABLE, ""),
        None => full(StatusCode::OK, content),
    }
}

fn repo_info(repo: &HubRepo, hide_sizes: bool) -> String {
    use sha1::Digest as _;
    let siblings: Vec<serde_json::Value> = repo
        .files
        .iter()
        .map(|(path, content)| {
            let mut blob = sha1::Sha1::new();
            blob.update(format!("blob {}\0", content.len()).as_bytes());
            blob.update(content);
            let mut entry = serde_json::json!({
                "rfilename": path,
                "size": content.len(),
                "blobId": to_hex(&blob.finalize()),
            });
            if repo.lfs.contains(path) {
                let sha = to_hex(&sha2::Sha256::digest(content));
                entry["lfs"] =
                    serde_json::json!({ "sha256": sha, "size": content.len(), "pointerSize": 134 });
                // For LFS files the hub's blobId is the pointer's id, not the content's.
                entry["blobId"] = serde_json::json!("0".repeat(40));
            }
            if hide_sizes {
                if let Some(entry) = entry.as_object_mut() {
                    entry.remove("size");
                }
                if let Some(lfs) = entry.get_mut("lfs").and_then(|l| l.as_object_mut()) {
                    lfs.remove("size");
                }
            }
            entry
        })
        .collect();
    serde_json::json!({
        "id": repo.id,
        "sha": repo.sha,
        "private": repo.token.is_some(),
        "siblings": siblings,
    })
    .to_string()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(value) = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(value);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An S3 server that keeps its objects in memory and sends them in 1 MiB slices without copying:
/// for throughput measurements, where the server must not be the bottleneck.
///
/// Serves `ListObjectsV2`, `HeadObject` and `GetObject` (with ranges) of one bucket, with the
/// same signature checks as [`S3TestServer`].
pub struct MemoryS3Server {
    access_key: String,
    secret_key: String,
    thread: ServerThread,
}

impl MemoryS3Server {
    /// Starts a server whose `bucket` holds `objects` (key, content), each with the MD5 of its
    /// content as ETag.
    pub fn start(
        bucket: &str,
        objects: Vec<(String, Bytes)>,
        access_key: &str,
        secret_key: &str,
    ) -> std::io::Result<Self> {
        use md5::Digest as _;
        let objects = objects
            .into_iter()
            .map(|(key, data)| {
                let etag = to_hex(&md5::Md5::digest(&data));
                (key, data, etag)
            })
            .collect();
        Self::start_with_etags(bucket, objects, access_key, secret_key)
    }

    /// Starts a server whose `bucket` holds `objects` (key, content, ETag): any keys (folder
    /// markers, `..`, empty segments) and any ETags (multipart `<md5>-<N>`, or one that does
    /// not match the content).
    pub fn start_with_etags(
        bucket: &str,
        objects: Vec<(String, Bytes, String)>,
        access_key: &str,
        secret_key: &str,
    ) -> std::io::Result<Self> {
        let now = std::time::SystemTime::now();
        let objects = objects
            .into_iter()
            .map(|(key, data, etag)| (key, MemoryObject { data, etag }))
            .collect();
        let store = MemoryS3 {
            bucket: bucket.to_string(),
            objects: Arc::new(objects),
            modified: now,
        };
        let (ak, sk) = (access_key.to_string(), secret_key.to_string());
        let thread = spawn_server(move || {
            let mut builder = s3s::service::S3ServiceBuilder::new(store);
            builder.set_auth(s3s::auth::SimpleAuth::from_single(ak, sk));
            BoxedService(builder.build())
        })?;
        Ok(Self {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            thread,
        })
    }

    /// `http://127.0.0.1:<port>`.
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
}

struct MemoryObject {
    data: Bytes,
    etag: String,
}

struct MemoryS3 {
    bucket: String,
    objects: Arc<std::collections::BTreeMap<String, MemoryObject>>,
    modified: std::time::SystemTime,
}

impl MemoryS3 {
    fn object(&self, bucket: &str, key: &str) -> s3s::S3Result<&MemoryObject> {
        if bucket != self.bucket {
            return Err(s3s::s3_error!(NoSuchBucket));
        }
        self.objects
            .get(key)
            .ok_or_else(|| s3s::s3_error!(NoSuchKey))
    }
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait::async_trait]
impl s3s::S3 for MemoryS3 {
    async fn list_objects_v2(
        &self,
        req: s3s::S3Request<s3s::dto::ListObjectsV2Input>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::ListObjectsV2Output>> {
        let input = req.input;
        if input.bucket != self.bucket {
            return Err(s3s::s3_error!(NoSuchBucket));
        }
        let prefix = input.prefix.clone().unwrap_or_default();
        let contents: Vec<s3s::dto::Object> = self
            .objects
            .range(prefix.clone()..)
            .take_while(|(key, _)| key.starts_with(&prefix))
            .map(|(key, object)| s3s::dto::Object {
                key: Some(key.clone()),
                size: Some(to_i64(object.data.len())),
                e_tag: Some(s3s::dto::ETag::Strong(object.etag.clone())),
                last_modified: Some(self.modified.into()),
                ..Default::default()
            })
            .collect();
        let output = s3s::dto::ListObjectsV2Output {
            key_count: Some(i32::try_from(contents.len()).unwrap_or(i32::MAX)),
            is_truncated: Some(false),
            contents: (!contents.is_empty()).then_some(contents),
            name: Some(input.bucket),
            prefix: input.prefix,
            ..Default::default()
        };
        Ok(s3s::S3Response::new(output))
    }

    async fn head_object(
        &self,
        req: s3s::S3Request<s3s::dto::HeadObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::HeadObjectOutput>> {
        let object = self.object(&req.input.bucket, &req.input.key)?;
        Ok(s3s::S3Response::new(s3s::dto::HeadObjectOutput {
            content_length: Some(to_i64(object.data.len())),
            e_tag: Some(s3s::dto::ETag::Strong(object.etag.clone())),
            last_modified: Some(self.modified.into()),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: s3s::S3Request<s3s::dto::GetObjectInput>,
    ) -> s3s::S3Result<s3s::S3Response<s3s::dto::GetObjectOutput>> {
        let object = self.object(&req.input.bucket, &req.input.key)?;
        let len = object.data.len() as u64;
        let (range, content_range) = match &req.input.range {
            None => (0..len, None),
            Some(range) => {
                let r = range.check(len).map_err(|_| s3s::s3_error!(InvalidRange))?;
                let text = format!("bytes {}-{}/{len}", r.start, r.end.saturating_sub(1));
                (r, Some(text))
            }
        };
        let start = usize::try_from(range.start).unwrap_or(usize::MAX);
        let end = usize::try_from(range.end).unwrap_or(usize::MAX);
        let body = object.data.slice(start..end);
        const SLICE: usize = 1 << 20;
        let slices: Vec<Result<Bytes, std::io::Error>> = (0..body.len())
            .step_by(SLICE)
            .map(|at| Ok(body.slice(at..(at + SLICE).min(body.len()))))
            .collect();
        Ok(s3s::S3Response::new(s3s::dto::GetObjectOutput {
            body: Some(s3s::dto::StreamingBlob::wrap(futures_util::stream::iter(
                slices,
            ))),
            content_length: Some(to_i64(end - start)),
            content_range,
            e_tag: Some(s3s::dto::ETag::Strong(object.etag.clone())),
            last_modified: Some(self.modified.into()),
            ..Default::default()
        }))
    }
}
