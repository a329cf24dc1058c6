//! S3 and S3-compatible servers through `object_store`.

use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::client::{HttpError, HttpErrorKind};
use object_store::path::Path as StorePath;
use object_store::{ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, RetryConfig};

use super::{Listing, Opened};
use crate::config::InitConfig;
use crate::error::{Attempt, InitError, chain};
use crate::pattern::PatternSet;
use crate::remote::{Checksum, RemoteFile};

const CREDENTIAL_HINT: &str = "check ACCESS_KEY_ID, SECRET_ACCESS_KEY, REGION and ROLE_ARN";

pub(crate) struct S3Source {
    store: AmazonS3,
    bucket: String,
    prefix: String,
    endpoint: String,
    uri: String,
    ignore: PatternSet,
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
        Ok(Self {
            store,
            bucket: bucket.into(),
            prefix: prefix.into(),
            endpoint,
            uri: config.storage_uri.to_string(),
            ignore: config.ignore_patterns.clone(),
        })
    }

    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub(crate) async fn list(&self) -> Result<Listing, Attempt> {
        let prefix = StorePath::from(self.prefix.as_str());
        let base = prefix.as_ref().to_string();
        let mut metas: Vec<object_store::ObjectMeta> = self
            .store
            .list((!base.is_empty()).then_some(&prefix))
            .map_err(|e| self.classify(e, None))
            .try_collect()
            .await?;
        let mut single = false;
        if metas.is_empty() && !base.is_empty() {
            // `s3://bucket/path/file.bin` names one object, not a directory.
            match self.store.head(&prefix).await {
                Ok(meta) => {
                    metas.push(meta);
                    single = true;
                }
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.classify(e, None)),
            }
        }
        let mut listing = Listing::default();
        for meta in metas {
            let key = meta.location.as_ref().to_string();
            let relative = if single {
                key.rsplit('/').next().unwrap_or(&key).to_string()
            } else {
                key.strip_prefix(base.as_str())
                    .unwrap_or(&key)
                    .trim_start_matches('/')
                    .to_string()
            };
            listing.found += 1;
            // Upstream matches the full key; the relative path is what users see, so accept both.
            if self.ignore.matches(&key) || self.ignore.matches(&relative) {
                tracing::debug!(key, "skipped by IGNORE_PATTERNS");
                listing.ignored += 1;
                continue;
            }
            let checksum = meta
                .e_tag
                .as_deref()
                .map_or(Checksum::Unknown, Checksum::from_etag);
            listing
                .files
                .push(RemoteFile::new(key, relative, Some(meta.size), checksum)?);
        }
        Ok(listing)
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
            .store
            .get_opts(&location, options)
            .await
            .map_err(|e| self.classify(e, Some(&file.key)))?;
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
            .store
            .head(&StorePath::from(file.key.as_str()))
            .await
            .map_err(|e| self.classify(e, Some(&file.key)))?;
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
            E::Generic { .. } => {
                let detail = chain(&err);
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
                    (Some(status), _)
                        if (400..500).contains(&status) && status != 408 && status != 429 =>
                    {
                        Attempt::Fatal(InitError::Protocol {
                            endpoint: self.endpoint.clone(),
                            detail,
                        })
                    }
                    _ => Attempt::Transient {
                        unreachable: http_error_kind(&err) == Some(HttpErrorKind::Connect),
                        detail,
                    },
                }
            }
            _ => Attempt::Fatal(InitError::Protocol {
                endpoint: self.endpoint.clone(),
                detail: chain(&err),
            }),
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
