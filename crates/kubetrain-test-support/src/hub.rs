//! A minimal Hugging Face hub on loopback: repository info and `resolve` URLs, enough for `HF_ENDPOINT`, with
//! injected faults (500s, cut bodies), lying content and hidden sizes for the initializer's tests.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use kubetrain_initializer::Kind;

use crate::loopback::{ServerThread, to_hex};

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
        let thread = ServerThread::spawn(move || {
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
    if let Some(response) = injected_fault(&mut state, file_path, &content) {
        return response;
    }
    ranged(content, range.as_deref())
}

/// The failure injected for the next request of `file_path`, if one is left: a 500, or a response that
/// promises the whole file, sends half and breaks the connection.
fn injected_fault(
    state: &mut HubState,
    file_path: &str,
    content: &Bytes,
) -> Option<Response<HubBody>> {
    let fault = state.faults.get_mut(file_path)?;
    if fault.0 > 0 {
        fault.0 -= 1;
        return Some(full(StatusCode::INTERNAL_SERVER_ERROR, "injected failure"));
    }
    if fault.1 == 0 {
        return None;
    }
    fault.1 -= 1;
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
    Some(response)
}

/// The file, or from the offset an open `Range: bytes=<start>-` header asks for.
fn ranged(content: Bytes, range: Option<&str>) -> Response<HubBody> {
    let start = range
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
