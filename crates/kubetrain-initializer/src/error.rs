//! The error of a whole initializer run: one line that says what failed and, where possible, the fix.

use std::path::PathBuf;

use crate::config::ConfigError;

/// Why an initializer run failed. Nothing partial is left behind when one of these is returned:
/// files still being written are removed, finished files stay (a rerun skips them).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// The configuration (storage URI, env) is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A setting cannot be used, e.g. a malformed endpoint URL.
    #[error("invalid {setting}: {detail}")]
    InvalidSetting {
        /// The env variable or option at fault.
        setting: &'static str,
        /// What is wrong and how to fix it.
        detail: String,
    },
    /// The S3 bucket does not exist.
    #[error("bucket {bucket:?} does not exist at {endpoint}: check STORAGE_URI and ENDPOINT")]
    BucketNotFound {
        /// The bucket name.
        bucket: String,
        /// The endpoint asked.
        endpoint: String,
    },
    /// The server refused the credentials.
    #[error("access denied to {uri}: {hint} ({detail})")]
    AccessDenied {
        /// The storage URI.
        uri: String,
        /// Which settings to check.
        hint: &'static str,
        /// The server's answer, shortened.
        detail: String,
    },
    /// The Hugging Face repository does not exist, or is gated or private for this token.
    #[error(
        "repository {uri} not found at {endpoint}, or it is private or gated: check the name, or set ACCESS_TOKEN to a token that can read it"
    )]
    RepoNotFound {
        /// The storage URI.
        uri: String,
        /// The hub endpoint asked.
        endpoint: String,
    },
    /// The endpoint could not be reached after all retries.
    #[error("cannot reach {endpoint} after {attempts} attempts: {detail}")]
    Unreachable {
        /// The endpoint.
        endpoint: String,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        detail: String,
    },
    /// Nothing below the URI (after ignore patterns) to download.
    #[error(
        "nothing to download from {uri}: {found} files found, {ignored} skipped by IGNORE_PATTERNS"
    )]
    NothingToDownload {
        /// The storage URI.
        uri: String,
        /// Files listed.
        found: usize,
        /// Files skipped by the ignore patterns.
        ignored: usize,
    },
    /// A remote file name would land outside the destination (`..`, absolute paths).
    #[error("refusing remote file {key:?}: its path would leave the destination directory")]
    UnsafePath {
        /// The offending key or repository path.
        key: String,
    },
    /// A remote file's name cannot be used below the destination: a segment is longer than a
    /// file name may be, or it lies in the initializer's own state directory. The file is
    /// skipped with this as its warning; the rest downloads.
    #[error("refusing remote file {key:?}: {reason}")]
    UnusableName {
        /// The offending key or repository path.
        key: String,
        /// Why, and what happens instead.
        reason: String,
    },
    /// A downloaded file's content does not match the checksum the source lists for it. Nothing
    /// is kept: the partial file is removed.
    #[error(
        "downloaded {key} does not match its listed {algorithm} (expected {expected}, got {actual}): the server sent other content than it lists; nothing was kept"
    )]
    ChecksumMismatch {
        /// The object key or repository path.
        key: String,
        /// `md5`, `sha256`, `git blob sha1` or `multipart etag`.
        algorithm: &'static str,
        /// The checksum the listing (or the object's ETag) gives.
        expected: String,
        /// The checksum of the bytes received.
        actual: String,
    },
    /// A multipart S3 object could not be verified: no part size explains its ETag and the
    /// server does not report the part count, so corruption cannot be told from an unusual part
    /// size. Nothing is kept unless [`crate::Tuning::accept_unverified_multipart`] is set.
    #[error(
        "cannot verify {key}: {reason}, so corruption in transit cannot be told from an unusual part size; nothing was kept. To keep such files unverified, pass --accept-unverified-multipart or set KUBETRAIN_ACCEPT_UNVERIFIED_MULTIPART=true"
    )]
    UnverifiedMultipart {
        /// The object key.
        key: String,
        /// Which part sizes were tried.
        reason: String,
    },
    /// A path below the destination cannot be written safely (a symbolic link or a non-directory
    /// where a directory is needed): files are never written through links.
    #[error("refusing to write {path}: {detail}")]
    UnsafeDestination {
        /// The path below the destination.
        path: PathBuf,
        /// What is in the way.
        detail: String,
    },
    /// A file could not be downloaded after all retries.
    #[error("downloading {key} failed after {attempts} attempts: {detail}")]
    Transfer {
        /// The object key or repository path.
        key: String,
        /// Attempts made.
        attempts: u32,
        /// The last error.
        detail: String,
    },
    /// The server answered something this client does not understand.
    #[error("unexpected answer from {endpoint}: {detail}")]
    Protocol {
        /// The endpoint.
        endpoint: String,
        /// What was wrong.
        detail: String,
    },
    /// A local file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

impl InitError {
    /// Whether the file system refused a name as too long (`ENAMETOOLONG`): some accept fewer
    /// than the 255 bytes the listing allows.
    pub(crate) fn is_name_too_long(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.raw_os_error() == Some(nix::libc::ENAMETOOLONG))
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// One failed attempt: retried when transient, returned at once when fatal.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// Worth retrying (connection refused or reset, timeouts, 5xx, a short body).
    Transient {
        /// Whether the server could not be reached at all (no connection).
        unreachable: bool,
        /// What happened.
        detail: String,
    },
    /// Retrying cannot help.
    Fatal(InitError),
}

impl Attempt {
    pub(crate) fn transient(detail: impl Into<String>) -> Self {
        Self::Transient {
            unreachable: false,
            detail: detail.into(),
        }
    }
}

impl From<InitError> for Attempt {
    fn from(err: InitError) -> Self {
        Self::Fatal(err)
    }
}

/// Joins an error and its sources into one line.
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let line = inner.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = inner.source();
    }
    shorten(&text)
}

/// Keeps error lines readable when servers send whole XML documents.
pub(crate) fn shorten(text: &str) -> String {
    const MAX: usize = 300;
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= MAX {
        one_line
    } else {
        let cut: String = one_line.chars().take(MAX).collect();
        format!("{cut}…")
    }
}
