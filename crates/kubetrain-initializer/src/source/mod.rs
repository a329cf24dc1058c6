//! Where files come from: S3 (through `object_store`) or the Hugging Face hub (its HTTP API).

use bytes::Bytes;
use futures_util::stream::BoxStream;

use crate::config::InitConfig;
use crate::error::{Attempt, InitError};
use crate::remote::{Checksum, RemoteFile};
use crate::uri::StorageUri;

pub(crate) mod hub;
mod hub_listing;
pub(crate) mod s3;

/// The body of one file, from some offset on.
pub(crate) type ByteStream = BoxStream<'static, Result<Bytes, Attempt>>;

/// What a source lists: the files to download, how many were skipped by ignore patterns and
/// how many were refused for unsafe names.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub(crate) files: Vec<RemoteFile>,
    pub(crate) found: usize,
    pub(crate) ignored: usize,
    pub(crate) refused: usize,
}

impl Listing {
    /// Adds a file, or skips one whose name is unsafe with the "refusing remote file" warning:
    /// one odd key does not stop the rest of the download.
    pub(crate) fn admit(&mut self, file: Result<RemoteFile, InitError>) {
        match file {
            Ok(file) => self.files.push(file),
            Err(err) => {
                tracing::warn!("{err}; skipped");
                self.refused += 1;
            }
        }
    }
}

/// An opened download.
pub(crate) struct Opened {
    pub(crate) body: ByteStream,
    /// The server ignored the requested offset and sends the whole file.
    pub(crate) from_start: bool,
    /// The checksum the response carries (S3 ETag), for sources whose listing lacks one.
    pub(crate) checksum: Checksum,
}

/// One of the supported sources (an enum, not a trait object: there are two and they are known).
pub(crate) enum Source {
    S3(s3::S3Source),
    Hub(hub::HubSource),
}

impl Source {
    pub(crate) fn new(config: &InitConfig) -> Result<Self, InitError> {
        ensure_crypto_provider();
        match &config.storage_uri {
            StorageUri::S3 { bucket, prefix } => {
                Ok(Self::S3(s3::S3Source::new(config, bucket, prefix)?))
            }
            StorageUri::HuggingFace { repo } => Ok(Self::Hub(hub::HubSource::new(config, repo)?)),
        }
    }

    /// The server asked, for error messages.
    pub(crate) fn endpoint(&self) -> &str {
        match self {
            Self::S3(s) => s.endpoint(),
            Self::Hub(h) => h.endpoint(),
        }
    }

    pub(crate) async fn list(&self) -> Result<Listing, Attempt> {
        match self {
            Self::S3(s) => s.list().await,
            Self::Hub(h) => h.list().await,
        }
    }

    /// Asks for the checksum of one file when the listing did not carry it (some S3-compatible
    /// servers list objects without ETags).
    pub(crate) async fn checksum(&self, file: &RemoteFile) -> Result<Checksum, Attempt> {
        match self {
            Self::S3(s) => s.checksum(file).await,
            Self::Hub(_) => Ok(Checksum::Unknown),
        }
    }

    /// The part sizes to check a multipart S3 ETag with; `None` for anything else.
    pub(crate) async fn part_sizes(
        &self,
        file: &RemoteFile,
    ) -> Result<Option<crate::integrity::PartSizes>, Attempt> {
        match self {
            Self::S3(s) => s.part_sizes(file).await,
            Self::Hub(_) => Ok(None),
        }
    }

    /// Whether a checksum mismatch is real: false for S3 objects whose ETag is not an MD5
    /// (SSE-KMS, SSE-C). Hub checksums are always content hashes.
    pub(crate) async fn etag_is_content_hash(&self, file: &RemoteFile) -> Result<bool, Attempt> {
        match self {
            Self::S3(s) => s.etag_is_content_hash(file).await,
            Self::Hub(_) => Ok(true),
        }
    }

    pub(crate) async fn open(&self, file: &RemoteFile, offset: u64) -> Result<Opened, Attempt> {
        match self {
            Self::S3(s) => s.open(file, offset).await,
            Self::Hub(h) => h.open(file, offset).await,
        }
    }
}

/// reqwest and object_store are built with `rustls-no-provider`: install `ring` unless the
/// program already chose a provider.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing the race to another thread installing one is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
