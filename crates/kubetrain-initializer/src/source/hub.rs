//! The Hugging Face hub through its HTTP API: repository info, then `resolve` URLs per file.
//!
//! `GET {endpoint}/api/{models|datasets}/{repo}/revision/{revision}?blobs=true` lists the files
//! with sizes and checksums and pins the commit; each file is then read from
//! `{endpoint}/[datasets/]{repo}/resolve/{commit}/{path}`, so one run sees one commit.

use std::sync::OnceLock;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use reqwest::header::{AUTHORIZATION, RANGE};
use reqwest::{Client, StatusCode, Url};

use super::hub_listing::{self, ChannelReader, Sibling};
use super::{Listing, Opened};
use crate::config::{HF_MODEL_ALLOW_PATTERNS, InitConfig};
use crate::deadline::Limits;
use crate::error::{Attempt, InitError, chain, shorten};
use crate::kind::Kind;
use crate::pattern::PatternSet;
use crate::remote::{Checksum, RemoteFile};

pub(crate) struct HubSource {
    client: Client,
    endpoint: Url,
    endpoint_text: String,
    repo: String,
    kind: Kind,
    revision: String,
    token: Option<String>,
    uri: String,
    ignore: PatternSet,
    /// Upstream's model initializer downloads only these (weights as safetensors, configs, tokenizers).
    allow: Option<PatternSet>,
    /// The commit the listing came from.
    commit: OnceLock<String>,
    limits: Limits,
}

/// Chunks of the listing in flight between the network and the parser.
const LISTING_CHUNKS_IN_FLIGHT: usize = 8;

impl HubSource {
    pub(crate) fn new(config: &InitConfig, repo: &str) -> Result<Self, InitError> {
        let raw = config.hub.endpoint.trim_end_matches('/');
        let endpoint = Url::parse(raw)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && !u.cannot_be_a_base())
            .ok_or_else(|| InitError::InvalidSetting {
                setting: "HF_ENDPOINT",
                detail: format!(
                    "{raw:?} is not an http(s) URL; expected e.g. https://huggingface.co"
                ),
            })?;
        let client = Client::builder()
            .connect_timeout(config.tuning.connect_timeout)
            .user_agent(concat!("kubetrain-initializer/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| InitError::InvalidSetting {
                setting: "HTTP client",
                detail: chain(&e),
            })?;
        let allow =
            (config.kind == Kind::Model).then(|| PatternSet::parse_list(HF_MODEL_ALLOW_PATTERNS));
        Ok(Self {
            client,
            endpoint_text: raw.to_string(),
            endpoint,
            repo: repo.to_string(),
            kind: config.kind,
            revision: config.hub.revision.clone(),
            token: config.hub.access_token.clone(),
            uri: config.storage_uri.to_string(),
            ignore: config.ignore_patterns.clone(),
            allow,
            commit: OnceLock::new(),
            limits: Limits::new(&config.tuning),
        })
    }

    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint_text
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.endpoint.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty();
            for segment in segments {
                // Repository ids and file paths contain `/`: each part is its own segment.
                path.extend(segment.split('/'));
            }
        }
        url
    }

    fn request(&self, url: Url) -> reqwest::RequestBuilder {
        let request = self.client.get(url);
        match &self.token {
            Some(token) => request.header(AUTHORIZATION, format!("Bearer {token}")),
            None => request,
        }
    }

    pub(crate) async fn list(&self) -> Result<Listing, Attempt> {
        let api = match self.kind {
            Kind::Dataset => "datasets",
            Kind::Model => "models",
        };
        let mut url = self.url(&["api", api, &self.repo, "revision", &self.revision]);
        url.query_pairs_mut().append_pair("blobs", "true");
        let response = self
            .limits
            .answer("the repository listing", async {
                self.request(url)
                    .send()
                    .await
                    .map_err(|e| self.transport(&e))
            })
            .await?;
        let status = response.status();
        if !status.is_success() {
            let body = self.limits.error_text(response).await;
            return Err(self.status_error(status, &body, None));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(LISTING_CHUNKS_IN_FLIGHT);
        let (allow, ignore) = (self.allow.clone(), self.ignore.clone());
        let parser = tokio::task::spawn_blocking(move || {
            let mut listing = Listing::default();
            hub_listing::parse(ChannelReader::new(rx), |sibling| {
                admit(&mut listing, sibling, allow.as_ref(), &ignore);
            })
            .map(|sha| (sha, listing))
        });
        let fed = self.feed_listing(response, tx).await;
        let parsed = parser
            .await
            .map_err(|e| Attempt::Fatal(self.protocol(format!("listing parser: {e}"))))?;
        // A stalled or broken body explains a parse error, so it is reported first.
        fed?;
        let (sha, listing) = parsed.map_err(|e| {
            Attempt::Fatal(
                self.protocol(format!("repository info is not the hub's JSON shape: {e}")),
            )
        })?;
        if let Some(sha) = sha {
            let _ = self.commit.set(sha);
        }
        Ok(listing)
    }

    /// Passes the listing's body to the parser chunk by chunk, each pause bounded by the idle
    /// timeout; dropping `tx` at the end tells the parser the body is complete.
    async fn feed_listing(
        &self,
        response: reqwest::Response,
        tx: tokio::sync::mpsc::Sender<Bytes>,
    ) -> Result<(), Attempt> {
        let mut body = response
            .bytes_stream()
            .map(|chunk| chunk.map_err(|e| self.transport(&e)));
        while let Some(chunk) = self
            .limits
            .next_chunk("the repository listing", &mut body)
            .await?
        {
            if tx.send(chunk).await.is_err() {
                // The parser stopped early (malformed JSON): it says why.
                break;
            }
        }
        Ok(())
    }

    fn protocol(&self, detail: String) -> InitError {
        InitError::Protocol {
            endpoint: self.endpoint_text.clone(),
            detail,
        }
    }

    pub(crate) async fn open(&self, file: &RemoteFile, offset: u64) -> Result<Opened, Attempt> {
        let commit = self
            .commit
            .get()
            .map_or(self.revision.as_str(), String::as_str);
        let url = match self.kind {
            Kind::Dataset => self.url(&["datasets", &self.repo, "resolve", commit, &file.key]),
            Kind::Model => self.url(&[&self.repo, "resolve", commit, &file.key]),
        };
        let mut request = self.request(url);
        if offset > 0 {
            request = request.header(RANGE, format!("bytes={offset}-"));
        }
        let response = self
            .limits
            .answer(&format!("GET of {}", file.key), async {
                request.send().await.map_err(|e| self.transport(&e))
            })
            .await?;
        let status = response.status();
        let from_start = match status {
            StatusCode::PARTIAL_CONTENT => false,
            StatusCode::OK => true,
            _ => {
                let body = self.limits.error_text(response).await;
                return Err(self.status_error(status, &body, Some(&file.key)));
            }
        };
        let body = response
            .bytes_stream()
            .map_err(|e| Attempt::transient(chain(&e)))
            .boxed();
        Ok(Opened {
            body,
            from_start,
            checksum: Checksum::Unknown,
        })
    }

    fn transport(&self, err: &reqwest::Error) -> Attempt {
        Attempt::Transient {
            unreachable: err.is_connect(),
            detail: chain(err),
        }
    }

    fn status_error(&self, status: StatusCode, body: &str, key: Option<&str>) -> Attempt {
        let detail = format!("HTTP {status}: {}", shorten(body));
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            return Attempt::transient(detail);
        }
        match (status, key) {
            (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, _) if self.token.is_some() => {
                Attempt::Fatal(InitError::AccessDenied {
                    uri: self.uri.clone(),
                    hint: "check ACCESS_TOKEN, and that it was granted access to this repository",
                    detail,
                })
            }
            (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND, None) => {
                Attempt::Fatal(InitError::RepoNotFound {
                    uri: self.uri.clone(),
                    endpoint: self.endpoint_text.clone(),
                })
            }
            (_, Some(key)) => Attempt::Fatal(InitError::Transfer {
                key: key.to_string(),
                attempts: 1,
                detail,
            }),
            (_, None) => Attempt::Fatal(InitError::Protocol {
                endpoint: self.endpoint_text.clone(),
                detail,
            }),
        }
    }
}

/// Sorts one listed file: skipped by the allow and ignore patterns, or admitted with its size
/// and checksum (LFS SHA-256, else the git blob id).
fn admit(listing: &mut Listing, sibling: Sibling, allow: Option<&PatternSet>, ignore: &PatternSet) {
    let path = sibling.rfilename;
    listing.found += 1;
    let allowed = allow.is_none_or(|allow| allow.matches(&path));
    if !allowed || ignore.matches(&path) {
        tracing::debug!(path, "skipped by allow or ignore patterns");
        listing.ignored += 1;
        return;
    }
    let size = sibling.lfs.as_ref().and_then(|l| l.size).or(sibling.size);
    let checksum = match (sibling.lfs.and_then(|l| l.sha256), sibling.blob_id) {
        (Some(sha256), _) => Checksum::Sha256(sha256.to_ascii_lowercase()),
        (None, Some(blob)) => Checksum::GitSha1(blob.to_ascii_lowercase()),
        (None, None) => Checksum::Unknown,
    };
    listing.admit(RemoteFile::new(path.clone(), path, size, checksum));
}
