//! S3 and S3-compatible servers through `object_store`.

use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, AwsAuthorizer};
use object_store::client::{HttpError, HttpErrorKind, HttpRequest, HttpRequestBody};
use object_store::path::Path as StorePath;
use object_store::{ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, RetryConfig};
use reqwest::{Method, Url};
use serde::Deserialize;

use super::{Listing, Opened};
use crate::config::InitConfig;
use crate::deadline::Limits;
use crate::error::{Attempt, InitError, chain, shorten};
use crate::integrity::{PartSizes, guess_part_sizes, multipart_etag};
use crate::pattern::PatternSet;
use crate::remote::{Checksum, RemoteFile};

/// One page of a `ListObjectsV2` answer, as far as we read it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListPage {
    #[serde(default)]
    contents: Vec<ListEntry>,
    #[serde(default)]
    is_truncated: bool,
    next_continuation_token: Option<String>,
}

/// One object of a listing, with its key exactly as stored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListEntry {
    key: String,
    size: u64,
    #[serde(rename = "ETag")]
    e_tag: Option<String>,
}

/// The largest `ListObjectsV2` page read (1,000 keys of up to 1,024 bytes each, as XML, fit
/// many times over): a server that sends more is not an S3 server.
const MAX_LIST_PAGE_BYTES: usize = 64 << 20;

const CREDENTIAL_HINT: &str = "check ACCESS_KEY_ID, SECRET_ACCESS_KEY, REGION and ROLE_ARN";

pub(crate) struct S3Source {
    store: AmazonS3,
    /// Signed requests object_store does not offer: listings with every key as stored, `HEAD`
    /// with headers (server-side encryption, part counts).
    http: reqwest::Client,
    region: String,
    bucket: String,
    prefix: String,
    endpoint: String,
    uri: String,
    ignore: PatternSet,
    limits: Limits,
}

impl S3Source {
    pub(crate) fn new(config: &InitConfig, bucket: &str, prefix: &str) -> Result<Self, InitError> {
        let options = &config.s3;
        let region = options.region.clone().unwrap_or_else(|| "us-east-1".into());
        let mut client = ClientOptions::new()
            .with_connect_timeout(config.tuning.connect_timeout)
            // The whole-request timeout would cut large downloads; stalls are caught per read.
            .with_timeout_disabled();
        // Picks up AWS_* variables (web identity, profile-less keys) like other AWS clients.
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_region(&region)
            // We retry ourselves, resuming from the bytes already written.
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            });
        let endpoint = match &options.endpoint {
            Some(raw) => {
                let url = reqwest::Url::parse(raw).map_err(|e| InitError::InvalidSetting {
                    setting: "ENDPOINT",
                    detail: format!("{raw:?} is not a URL ({e}); expected e.g. http://minio:9000"),
                })?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(InitError::InvalidSetting {
                        setting: "ENDPOINT",
                        detail: format!("{raw:?} must start with http:// or https://"),
                    });
                }
                client = client.with_allow_http(url.scheme() == "http");
                builder = builder
                    .with_endpoint(raw.trim_end_matches('/'))
                    .with_virtual_hosted_style_request(false);
                raw.trim_end_matches('/').to_string()
            }
            None => format!("https://s3.{region}.amazonaws.com"),
        };
        match (&options.access_key_id, &options.secret_access_key) {
            (Some(id), Some(secret)) => {
                builder = builder
                    .with_access_key_id(id)
                    .with_secret_access_key(secret);
            }
            (None, None) => {}
            (Some(_), None) | (None, Some(_)) => {
                return Err(InitError::InvalidSetting {
                    setting: "ACCESS_KEY_ID/SECRET_ACCESS_KEY",
                    detail: "set both or neither".into(),
                });
            }
        }
        if let Some(role) = &options.role_arn {
            if std::env::var_os("AWS_WEB_IDENTITY_TOKEN_FILE").is_none() {
                return Err(InitError::InvalidSetting {
                    setting: "ROLE_ARN",
                    detail:
                        "the role is assumed with web identity: set AWS_WEB_IDENTITY_TOKEN_FILE \
                             (IRSA does this), or use ACCESS_KEY_ID/SECRET_ACCESS_KEY"
                            .into(),
                });
            }
            builder = builder.with_config(AmazonS3ConfigKey::RoleArn, role);
        }
        let store =
            builder
                .with_client_options(client)
                .build()
                .map_err(|e| InitError::InvalidSetting {
                    setting: "S3 settings",
                    detail: chain(&e),
                })?;
        let http = reqwest::Client::builder()
            .connect_timeout(config.tuning.connect_timeout)
            .user_agent(concat!("kubetrain-initializer/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| InitError::InvalidSetting {
                setting: "HTTP client",
                detail: chain(&e),
            })?;
        Ok(Self {
            store,
            http,
            region,
            bucket: bucket.into(),
            prefix: prefix.into(),
            endpoint,
            uri: config.storage_uri.to_string(),
            ignore: config.ignore_patterns.clone(),
            limits: Limits::new(&config.tuning),
        })
    }

    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Sends a SigV4-signed request (object_store's signer and credentials) for `url`; `what`
    /// names it in timeout messages.
    async fn signed(
        &self,
        method: Method,
        url: Url,
        what: &str,
    ) -> Result<reqwest::Response, Attempt> {
        let credential = self
            .limits
            .answer("the credentials request", async {
                self.store
                    .credentials()
                    .get_credential()
                    .await
                    .map_err(|e| self.classify(e, None))
            })
            .await?;
        let mut request: HttpRequest = http::Request::builder()
            .method(method.clone())
            .uri(url.as_str())
            .body(HttpRequestBody::empty())
            .map_err(|e| Attempt::Fatal(self.protocol(e.to_string())))?;
        AwsAuthorizer::new(&credential, "s3", &self.region)
            .try_authorize(&mut request, None)
            .map_err(|e| self.classify(e, None))?;
        let mut builder = self.http.request(method, url);
        for (name, value) in request.headers() {
            builder = builder.header(name, value);
        }
        self.limits
            .answer(what, async {
                builder.send().await.map_err(|e| Attempt::Transient {
                    unreachable: e.is_connect(),
                    detail: chain(&e),
                })
            })
            .await
    }

    /// The bucket's URL, path-style as object_store addresses it.
    fn bucket_url(&self) -> Result<Url, Attempt> {
        Url::parse(&format!("{}/{}", self.endpoint, self.bucket))
            .map_err(|e| Attempt::Fatal(self.protocol(format!("bucket URL: {e}"))))
    }

    fn protocol(&self, detail: String) -> InitError {
        InitError::Protocol {
            endpoint: self.endpoint.clone(),
            detail,
        }
    }

    /// Classifies a non-2xx answer to a signed request as object_store would.
    async fn status_failure(&self, response: reqwest::Response, key: Option<&str>) -> Attempt {
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND && key.is_some() {
            return Attempt::Fatal(InitError::Transfer {
                key: key.unwrap_or_default().to_string(),
                attempts: 1,
                detail: "the object disappeared during the run".into(),
            });
        }
        let body = self.limits.error_text(response).await;
        let detail = if status.is_redirection() && !body.contains("<Code>") {
            "Received redirect without LOCATION, this normally indicates an incorrectly configured region".to_string()
        } else {
            shorten(&format!(
                "Server returned non-2xx status code: {status}: {body}"
            ))
        };
        if status == reqwest::StatusCode::NOT_FOUND && s3_error_code(&detail).is_none() {
            return Attempt::Fatal(InitError::BucketNotFound {
                bucket: self.bucket.clone(),
                endpoint: self.endpoint.clone(),
            });
        }
        self.classify_detail(detail, false)
    }

    /// Every object below the prefix, with keys exactly as stored (object_store's listing fails
    /// on keys it cannot represent, and drops the trailing `/` of folder markers).
    async fn list_raw(&self, prefix: &str) -> Result<Vec<ListEntry>, Attempt> {
        let mut entries = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut url = self.bucket_url()?;
            {
                let mut query = url.query_pairs_mut();
                query.append_pair("list-type", "2");
                if !prefix.is_empty() {
                    query.append_pair("prefix", prefix);
                }
                if let Some(token) = &token {
                    query.append_pair("continuation-token", token);
                }
            }
            let response = self.signed(Method::GET, url, "the object listing").await?;
            if !response.status().is_success() {
                return Err(self.status_failure(response, None).await);
            }
            let body = self
                .limits
                .read_body("the object listing", response, MAX_LIST_PAGE_BYTES)
                .await?;
            let body = String::from_utf8_lossy(&body);
            let page: ListPage = quick_xml::de::from_str(&body).map_err(|e| {
                Attempt::Fatal(self.protocol(format!("invalid ListObjectsV2 answer: {e}")))
            })?;
            entries.extend(page.contents);
            match page.next_continuation_token {
                Some(next) if page.is_truncated && !next.is_empty() => token = Some(next),
                _ => return Ok(entries),
            }
        }
    }

    pub(crate) async fn list(&self) -> Result<Listing, Attempt> {
        let prefix = StorePath::from(self.prefix.as_str());
        let base = prefix.as_ref().to_string();
        // The prefix is a directory: `alpaca` lists `alpaca/…`, not `alpaca-v2/…`.
        let dir_prefix = if base.is_empty() {
            String::new()
        } else {
            format!("{base}/")
        };
        let mut entries: Vec<(ListEntry, String)> = self
            .list_raw(&dir_prefix)
            .await?
            .into_iter()
            .map(|entry| {
                let relative = entry
                    .key
                    .strip_prefix(&dir_prefix)
                    .unwrap_or(&entry.key)
                    .to_string();
                (entry, relative)
            })
            .collect();
        if entries.is_empty() && !base.is_empty() {
            // `s3://bucket/path/file.bin` names one object, not a directory.
            let head = self
                .limits
                .answer("the HEAD of the prefix", async {
                    Ok(self.store.head(&prefix).await)
                })
                .await?;
            match head {
                Ok(meta) => {
                    let key = meta.location.as_ref().to_string();
                    let name = key.rsplit('/').next().unwrap_or(&key).to_string();
                    entries.push((
                        ListEntry {
                            key,
                            size: meta.size,
                            e_tag: meta.e_tag,
                        },
                        name,
                    ));
                }
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.classify(e, None)),
            }
        }
        let mut listing = Listing::default();
        for (entry, relative) in entries {
            let ListEntry { key, size, e_tag } = entry;
            if key.ends_with('/') && size == 0 {
                // A "folder marker" (the S3 console's "Create folder"): not a file.
                tracing::debug!(key, "skipped folder marker");
                continue;
            }
            listing.found += 1;
            // Upstream matches the full key; the relative path is what users see, so accept both.
            if self.ignore.matches(&key) || self.ignore.matches(&relative) {
                tracing::debug!(key, "skipped by IGNORE_PATTERNS");
                listing.ignored += 1;
                continue;
            }
            // Keys object_store cannot address as they are (empty segments, `.`/`..`) are
            // refused like names that would leave the destination.
            let addressable = StorePath::parse(&key).is_ok_and(|p| p.as_ref() == key);
            let checksum = e_tag
                .as_deref()
                .map_or(Checksum::Unknown, Checksum::from_etag);
            let file = if addressable {
                RemoteFile::new(key.clone(), relative, Some(size), checksum)
            } else {
                Err(InitError::UnsafePath { key: key.clone() })
            };
            listing.admit(file);
        }
        Ok(listing)
    }

    /// A `HEAD` of `key` (or of one part of it) with the headers object_store does not surface.
    async fn head_raw(
        &self,
        key: &str,
        part: Option<u32>,
    ) -> Result<reqwest::header::HeaderMap, Attempt> {
        let mut url = self.bucket_url()?;
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.extend(key.split('/'));
        }
        if let Some(part) = part {
            url.query_pairs_mut()
                .append_pair("partNumber", &part.to_string());
        }
        let response = self
            .signed(Method::HEAD, url, &format!("HEAD of {key}"))
            .await?;
        if !response.status().is_success() {
            return Err(self.status_failure(response, Some(key)).await);
        }
        Ok(response.headers().clone())
    }

    /// The part size of a multipart object: what the server reports for part 1 when it reports
    /// the part count, else the common sizes that give the ETag's number of parts.
    pub(crate) async fn part_sizes(&self, file: &RemoteFile) -> Result<Option<PartSizes>, Attempt> {
        let (Checksum::Tag(tag), Some(size)) = (&file.checksum, file.size) else {
            return Ok(None);
        };
        let Some((_, parts)) = multipart_etag(tag) else {
            return Ok(None);
        };
        let guessed = Some(PartSizes::Guessed(guess_part_sizes(size, parts)));
        let headers = match self.head_raw(&file.key, Some(1)).await {
            Ok(headers) => headers,
            // Servers without `partNumber` support: fall back to guessing.
            Err(Attempt::Fatal(err)) => {
                tracing::debug!(key = file.key, "no part size from the server: {err}");
                return Ok(guessed);
            }
            Err(transient) => return Err(transient),
        };
        let number = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if number("x-amz-mp-parts-count") == Some(u64::from(parts))
            && let Some(part_size) = number("content-length").filter(|&n| n > 0)
        {
            return Ok(Some(PartSizes::Exact(part_size)));
        }
        Ok(guessed)
    }

    /// Whether the object's ETag is the MD5 of its content: not under SSE-KMS or SSE-C.
    pub(crate) async fn etag_is_content_hash(&self, file: &RemoteFile) -> Result<bool, Attempt> {
        let headers = match self.head_raw(&file.key, None).await {
            Ok(headers) => headers,
            // Without the headers, the listed ETag stands.
            Err(Attempt::Fatal(_)) => return Ok(true),
            Err(transient) => return Err(transient),
        };
        let kms = headers
            .get("x-amz-server-side-encryption")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("aws:kms"));
        let customer_key = headers.contains_key("x-amz-server-side-encryption-customer-algorithm");
        Ok(!kms && !customer_key)
    }

    pub(crate) async fn open(&self, file: &RemoteFile, offset: u64) -> Result<Opened, Attempt> {
        let mut options = GetOptions::default();
        if offset > 0 {
            options.range = Some(GetRange::Offset(offset));
            // A resumed range must come from the same version of the object.
            options.if_match = match &file.checksum {
                Checksum::Md5(tag) | Checksum::Tag(tag) => Some(format!("\"{tag}\"")),
                _ => None,
            };
        }
        let location = StorePath::from(file.key.as_str());
        let result = self
            .limits
            .answer(&format!("GET of {}", file.key), async {
                self.store
                    .get_opts(&location, options)
                    .await
                    .map_err(|e| self.classify(e, Some(&file.key)))
            })
            .await?;
        let checksum = result
            .meta
            .e_tag
            .as_deref()
            .map_or(Checksum::Unknown, Checksum::from_etag);
        let classify_body = |e: object_store::Error| Attempt::transient(chain(&e));
        Ok(Opened {
            body: result.into_stream().map_err(classify_body).boxed(),
            from_start: false,
            checksum,
        })
    }

    pub(crate) async fn checksum(&self, file: &RemoteFile) -> Result<Checksum, Attempt> {
        let meta = self
            .limits
            .answer(&format!("HEAD of {}", file.key), async {
                self.store
                    .head(&StorePath::from(file.key.as_str()))
                    .await
                    .map_err(|e| self.classify(e, Some(&file.key)))
            })
            .await?;
        Ok(meta
            .e_tag
            .as_deref()
            .map_or(Checksum::Unknown, Checksum::from_etag))
    }

    /// Sorts object_store errors into retry-worthy and final ones; `key` is the object being
    /// read (`None` while listing).
    fn classify(&self, err: object_store::Error, key: Option<&str>) -> Attempt {
        use object_store::Error as E;
        match &err {
            E::NotFound { .. } if key.is_some() => Attempt::Fatal(InitError::Transfer {
                key: key.unwrap_or_default().to_string(),
                attempts: 1,
                detail: format!("the object disappeared during the run: {}", chain(&err)),
            }),
            E::NotFound { .. } => Attempt::Fatal(InitError::BucketNotFound {
                bucket: self.bucket.clone(),
                endpoint: self.endpoint.clone(),
            }),
            E::PermissionDenied { .. } | E::Unauthenticated { .. } => {
                let detail = chain(&err);
                Attempt::Fatal(InitError::AccessDenied {
                    uri: self.uri.clone(),
                    hint: CREDENTIAL_HINT,
                    detail: s3_error_code(&detail).unwrap_or(detail),
                })
            }
            E::Precondition { .. } => Attempt::Fatal(InitError::Protocol {
                endpoint: self.endpoint.clone(),
                detail: format!(
                    "the object changed during the download, run again: {}",
                    chain(&err)
                ),
            }),
            E::Generic { .. } => self.classify_detail(
                chain(&err),
                http_error_kind(&err) == Some(HttpErrorKind::Connect),
            ),
            _ => Attempt::Fatal(InitError::Protocol {
                endpoint: self.endpoint.clone(),
                detail: chain(&err),
            }),
        }
    }

    /// Sorts an error known only as text (status and S3 error code inside) into retry-worthy
    /// and final ones.
    fn classify_detail(&self, detail: String, unreachable: bool) -> Attempt {
        // object_store reports some statuses (403 on listing among them) only as text.
        let code = s3_error_code(&detail);
        if detail.contains("incorrectly configured region") {
            return Attempt::Fatal(InitError::InvalidSetting {
                setting: "REGION",
                detail: format!(
                    "bucket {:?} lives in another region: set REGION to it",
                    self.bucket
                ),
            });
        }
        match (status_code(&detail), code.as_deref()) {
            (_, Some("NoSuchBucket")) => Attempt::Fatal(InitError::BucketNotFound {
                bucket: self.bucket.clone(),
                endpoint: self.endpoint.clone(),
            }),
            (Some(401 | 403), _)
            | (
                _,
                Some(
                    "AccessDenied"
                    | "InvalidAccessKeyId"
                    | "SignatureDoesNotMatch"
                    | "ExpiredToken"
                    | "InvalidToken"
                    | "AuthorizationHeaderMalformed",
                ),
            ) => Attempt::Fatal(InitError::AccessDenied {
                uri: self.uri.clone(),
                hint: CREDENTIAL_HINT,
                detail: code.unwrap_or(detail),
            }),
            (Some(status), _) if (400..500).contains(&status) && status != 408 && status != 429 => {
                Attempt::Fatal(InitError::Protocol {
                    endpoint: self.endpoint.clone(),
                    detail,
                })
            }
            _ => Attempt::Transient {
                unreachable,
                detail,
            },
        }
    }
}

fn http_error_kind(err: &(dyn std::error::Error + 'static)) -> Option<HttpErrorKind> {
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(http) = e.downcast_ref::<HttpError>() {
            return Some(http.kind());
        }
        current = e.source();
    }
    None
}

/// The HTTP status in object_store's "Server returned non-2xx status code: 403 Forbidden" text.
fn status_code(text: &str) -> Option<u16> {
    let (_, rest) = text.split_once("status code: ")?;
    rest.get(..3)?.parse().ok()
}

/// The `<Code>…</Code>` of an S3 error document.
fn s3_error_code(text: &str) -> Option<String> {
    let (_, rest) = text.split_once("<Code>")?;
    let (code, _) = rest.split_once("</Code>")?;
    Some(code.trim().to_string()).filter(|c| !c.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_and_code_from_error_text() {
        let text = "Error performing GET http://x/b?list-type=2 in 2ms - Server returned non-2xx status code: \
                    403 Forbidden: <?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code></Error>";
        assert_eq!(status_code(text), Some(403));
        assert_eq!(
            s3_error_code(text).as_deref(),
            Some("SignatureDoesNotMatch")
        );
        assert_eq!(status_code("connection refused"), None);
        assert_eq!(s3_error_code("<Code></Code>"), None);
    }
}
