//! What a source lists: remote files with their size and checksum, and where each one lands.

use std::path::{Component, Path, PathBuf};

use crate::error::InitError;
use crate::staging::STATE_DIR;

/// How a remote file's content can be checked, used to decide whether a local copy is complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checksum {
    /// Hex MD5 of the content (the ETag of a single-part S3 upload).
    Md5(String),
    /// Hex SHA-256 of the content (Hugging Face LFS files).
    Sha256(String),
    /// Git blob id, hex SHA-1 of `blob <size>\0<content>` (Hugging Face non-LFS files).
    GitSha1(String),
    /// An opaque version tag (multipart S3 ETag): compared with the tag recorded when the file
    /// was downloaded.
    Tag(String),
    /// Nothing to compare; the size decides.
    Unknown,
}

impl Checksum {
    /// Classifies an S3 ETag: a bare 32-digit hex value is the MD5 of the content, anything
    /// else (multipart `md5-N`, SSE-KMS) only identifies a version.
    ///
    /// ```
    /// use kubetrain_initializer::Checksum;
    /// assert_eq!(
    ///     Checksum::from_etag("\"9e107d9d372bb6826bd81d3542a419d6\""),
    ///     Checksum::Md5("9e107d9d372bb6826bd81d3542a419d6".into())
    /// );
    /// assert_eq!(Checksum::from_etag("\"abc-3\""), Checksum::Tag("abc-3".into()));
    /// ```
    pub fn from_etag(etag: &str) -> Self {
        let tag = etag.trim().trim_start_matches("W/").trim_matches('"');
        if tag.is_empty() {
            Checksum::Unknown
        } else if tag.len() == 32 && tag.bytes().all(|b| b.is_ascii_hexdigit()) {
            Checksum::Md5(tag.to_ascii_lowercase())
        } else {
            Checksum::Tag(tag.to_string())
        }
    }
}

/// One file to download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFile {
    /// The object key (S3) or repository path (Hugging Face).
    pub key: String,
    /// Path below the destination, `/`-separated, checked to stay inside it.
    pub relative_path: String,
    /// Size in bytes, when the source reports it.
    pub size: Option<u64>,
    /// How to verify a local copy.
    pub checksum: Checksum,
}

impl RemoteFile {
    /// Builds a file entry, rejecting relative paths that would escape the destination or have
    /// empty segments.
    ///
    /// ```
    /// use kubetrain_initializer::{Checksum, RemoteFile};
    /// assert!(RemoteFile::new("p/a/b.txt", "a/b.txt", Some(3), Checksum::Unknown).is_ok());
    /// assert!(RemoteFile::new("p/../../etc/passwd", "../../etc/passwd", None, Checksum::Unknown).is_err());
    /// ```
    pub fn new(
        key: impl Into<String>,
        relative_path: impl Into<String>,
        size: Option<u64>,
        checksum: Checksum,
    ) -> Result<Self, InitError> {
        let key = key.into();
        let relative_path = relative_path.into();
        if !is_safe_relative(&relative_path) {
            return Err(InitError::UnsafePath { key });
        }
        if let Some(reason) = unusable_name(&relative_path) {
            return Err(InitError::UnusableName { key, reason });
        }
        Ok(Self {
            key,
            relative_path,
            size,
            checksum,
        })
    }

    /// Where this file lands below `destination`.
    pub fn local_path(&self, destination: &Path) -> PathBuf {
        let mut path = destination.to_path_buf();
        path.extend(self.relative_path.split('/').filter(|s| !s.is_empty()));
        path
    }
}

/// The longest file name (one path segment) Linux file systems accept, in bytes (`NAME_MAX`).
const MAX_NAME_BYTES: usize = 255;

/// Why a safe relative path still cannot be written: a segment longer than a file name may be,
/// or a first segment that is the initializer's own state directory (where files are staged
/// and version tags kept: a remote file there could replace one being written).
fn unusable_name(path: &str) -> Option<String> {
    if path.split('/').next() == Some(STATE_DIR) {
        return Some(format!(
            "{STATE_DIR:?} at the top of the destination is reserved for the initializer's own state; skipped"
        ));
    }
    let long = path.split('/').find(|part| part.len() > MAX_NAME_BYTES)?;
    let start: String = long.chars().take(40).collect();
    Some(format!(
        "its name {start:?}… is {} bytes long, more than the {MAX_NAME_BYTES} bytes a file name may have; skipped",
        long.len()
    ))
}

/// Only plain names: no `..`, no root, no empty path or empty segment (`a//b` would land on the
/// same file as `a/b`), no NUL, no backslash tricks.
fn is_safe_relative(path: &str) -> bool {
    if path.is_empty() || path.contains('\0') || path.contains('\\') || path.starts_with('/') {
        return false;
    }
    let mut any = false;
    for part in path.split('/') {
        if part.is_empty() {
            return false;
        }
        let mut components = Path::new(part).components();
        match (components.next(), components.next()) {
            (Some(Component::Normal(_)), None) => any = true,
            _ => return false,
        }
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_paths() {
        let table = [
            ("a", true),
            ("a/b/c.json", true),
            ("a//b", false),
            ("a/", false),
            ("", false),
            ("/etc/passwd", false),
            ("../x", false),
            ("a/../../x", false),
            ("a/./b", false),
            ("a\\..\\b", false),
            ("/", false),
            ("a/\0", false),
        ];
        for (path, want) in table {
            assert_eq!(is_safe_relative(path), want, "{path:?}");
        }
        let file = RemoteFile::new("k", "a/b/c", None, Checksum::Unknown).unwrap();
        let unusable = |path: &str| RemoteFile::new("k", path, None, Checksum::Unknown).is_err();
        assert!(unusable(".kubetrain-initializer/partial/0.part"));
        assert!(unusable(".kubetrain-initializer"));
        assert!(
            !unusable("a/.kubetrain-initializer/x"),
            "reserved at the top only"
        );
        assert!(!unusable(&"a".repeat(255)));
        assert!(
            unusable(&format!("d/{}", "é".repeat(128))),
            "bytes, not characters"
        );
        assert!(!unusable(".x.kubetrain-partial"), "no reserved suffix");
        assert_eq!(file.local_path(Path::new("/d")), PathBuf::from("/d/a/b/c"));
    }

    #[test]
    fn etags() {
        assert_eq!(Checksum::from_etag(""), Checksum::Unknown);
        assert_eq!(Checksum::from_etag("W/\"x\""), Checksum::Tag("x".into()));
        assert_eq!(
            Checksum::from_etag("9E107D9D372BB6826BD81D3542A419D6"),
            Checksum::Md5("9e107d9d372bb6826bd81d3542a419d6".into())
        );
    }
}
