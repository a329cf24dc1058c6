//! Checkpoints in S3 (`s3://bucket/prefix`): a [`CheckpointStore`] over `object_store`. An S3 PUT is
//! atomic (readers see the old object or the whole new one), and the checksum in every checkpoint
//! still guards against a damaged object.
//!
//! Settings as the initializers read them: `ENDPOINT` (an S3-compatible server, path-style),
//! `ACCESS_KEY_ID`, `SECRET_ACCESS_KEY`, `REGION`, then the usual `AWS_*` variables.

use std::io;

use futures_util::TryStreamExt;
use kubetrain_collective::checkpoint::CheckpointStore;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

/// S3 connection settings of a checkpoint store.
#[derive(Clone, Default)]
pub struct S3Settings {
    /// Endpoint URL (`http://127.0.0.1:9000`); AWS when unset.
    pub endpoint: Option<String>,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Region (default `us-east-1`).
    pub region: Option<String>,
}

impl std::fmt::Debug for S3Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Settings")
            .field("endpoint", &self.endpoint)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("region", &self.region)
            .finish()
    }
}

impl S3Settings {
    /// `ENDPOINT`, `ACCESS_KEY_ID`, `SECRET_ACCESS_KEY`, `REGION` from the environment (empty = unset).
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        S3Settings {
            endpoint: var("ENDPOINT"),
            access_key_id: var("ACCESS_KEY_ID"),
            secret_access_key: var("SECRET_ACCESS_KEY"),
            region: var("REGION"),
        }
    }
}

/// Checkpoints under `s3://bucket/prefix/`.
pub struct S3Store {
    store: AmazonS3,
    prefix: String,
    uri: String,
    runtime: tokio::runtime::Runtime,
}

impl S3Store {
    /// A store for `uri` (`s3://bucket[/prefix]`).
    pub fn new(uri: &str, settings: &S3Settings) -> io::Result<Self> {
        let rest = uri.strip_prefix("s3://").ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{uri:?} is not s3://bucket/prefix"),
            )
        })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{uri:?} names no bucket: write s3://bucket/prefix"),
            ));
        }
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let mut client =
            ClientOptions::new().with_connect_timeout(std::time::Duration::from_secs(10));
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_region(settings.region.as_deref().unwrap_or("us-east-1"))
            .with_retry(RetryConfig {
                max_retries: 2,
                ..RetryConfig::default()
            });
        if let Some(endpoint) = &settings.endpoint {
            client = client.with_allow_http(endpoint.starts_with("http://"));
            builder = builder
                .with_endpoint(endpoint.trim_end_matches('/'))
                .with_virtual_hosted_style_request(false);
        }
        if let (Some(id), Some(secret)) = (&settings.access_key_id, &settings.secret_access_key) {
            builder = builder
                .with_access_key_id(id)
                .with_secret_access_key(secret);
        }
        let store = builder
            .with_client_options(client)
            .build()
            .map_err(|e| io::Error::other(format!("S3 settings for {uri}: {e}")))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(S3Store {
            store,
            prefix: prefix.trim_matches('/').to_string(),
            uri: uri.trim_end_matches('/').to_string(),
            runtime,
        })
    }

    fn path(&self, name: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(name)
        } else {
            ObjectPath::from(format!("{}/{name}", self.prefix))
        }
    }
}

fn to_io(what: String, e: object_store::Error) -> io::Error {
    let kind = match e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("{what}: {e}"))
}

impl CheckpointStore for S3Store {
    fn location(&self) -> String {
        self.uri.clone()
    }

    fn put(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let path = self.path(name);
        self.runtime
            .block_on(self.store.put(&path, PutPayload::from(bytes.to_vec())))
            .map(|_| ())
            .map_err(|e| to_io(format!("PUT {}/{name}", self.uri), e))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let prefix = (!self.prefix.is_empty()).then(|| ObjectPath::from(self.prefix.as_str()));
        let metas: Vec<_> = self
            .runtime
            .block_on(self.store.list(prefix.as_ref()).try_collect())
            .map_err(|e| to_io(format!("listing {}", self.uri), e))?;
        Ok(metas
            .into_iter()
            .filter_map(|m| m.location.filename().map(str::to_string))
            .collect())
    }

    fn get(&self, name: &str) -> io::Result<Vec<u8>> {
        let path = self.path(name);
        self.runtime
            .block_on(async { self.store.get(&path).await?.bytes().await })
            .map(|b| b.to_vec())
            .map_err(|e| to_io(format!("GET {}/{name}", self.uri), e))
    }

    fn delete(&self, name: &str) -> io::Result<()> {
        let path = self.path(name);
        match self.runtime.block_on(self.store.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(to_io(format!("DELETE {}/{name}", self.uri), e)),
        }
    }
}

/// A store for a checkpoint location: `s3://…` or a directory.
pub fn open(location: &str, settings: &S3Settings) -> io::Result<Box<dyn CheckpointStore>> {
    if location.starts_with("s3://") {
        Ok(Box::new(S3Store::new(location, settings)?))
    } else {
        Ok(Box::new(kubetrain_collective::checkpoint::DirStore::new(
            location,
        )))
    }
}
