//! Parsing `STORAGE_URI`: `s3://bucket/prefix` and `hf://org/name`.

use std::fmt;

use crate::kind::Kind;

/// Why a storage URI was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UriError {
    /// The text has no `scheme://` part.
    #[error("STORAGE_URI {uri:?} is not a URI: expected s3://bucket/prefix or hf://org/name")]
    NotAUri {
        /// The rejected text.
        uri: String,
    },
    /// The scheme is neither `s3` nor `hf`.
    #[error("STORAGE_URI {uri:?} has unsupported scheme {scheme:?}: expected \"s3\" or \"hf\"")]
    UnknownScheme {
        /// The rejected text.
        uri: String,
        /// The scheme found before `://`.
        scheme: String,
    },
    /// `s3://` without a bucket name.
    #[error("STORAGE_URI {uri:?} names no bucket: expected s3://bucket/prefix")]
    MissingBucket {
        /// The rejected text.
        uri: String,
    },
    /// The bucket name breaks the S3 naming rules.
    #[error(
        "STORAGE_URI {uri:?} has invalid bucket name {bucket:?}: use 3-63 characters from a-z, 0-9, '.', '-'"
    )]
    InvalidBucket {
        /// The rejected text.
        uri: String,
        /// The bucket name found.
        bucket: String,
    },
    /// `hf://` without a repository id.
    #[error("STORAGE_URI {uri:?} names no repository: expected hf://org/name")]
    MissingRepo {
        /// The rejected text.
        uri: String,
    },
    /// A model repository id with more than two segments.
    #[error("STORAGE_URI {uri:?} is not a model repository id: expected hf://org/name")]
    InvalidRepo {
        /// The rejected text.
        uri: String,
    },
}

/// A parsed `STORAGE_URI`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageUri {
    /// `s3://bucket/prefix`: every object below `prefix`.
    S3 {
        /// The bucket name.
        bucket: String,
        /// The key prefix without leading `/` (may be empty: the whole bucket).
        prefix: String,
    },
    /// `hf://org/name`: a Hugging Face hub repository.
    HuggingFace {
        /// The repository id, `org/name` (or a legacy single-segment `name`).
        repo: String,
    },
}

impl StorageUri {
    /// Parses a storage URI for a dataset or a model initializer.
    ///
    /// Datasets follow upstream and use only the first two segments of `hf://org/name/...` as the
    /// repository id; models take the whole path, which must be `org/name`.
    ///
    /// ```
    /// use kubetrain_initializer::{Kind, StorageUri};
    /// let uri = StorageUri::parse("s3://data/alpaca/v1", Kind::Dataset).unwrap();
    /// assert_eq!(uri, StorageUri::S3 { bucket: "data".into(), prefix: "alpaca/v1".into() });
    /// let uri = StorageUri::parse("hf://meta-llama/Llama-3.2-1B-Instruct", Kind::Model).unwrap();
    /// assert_eq!(uri, StorageUri::HuggingFace { repo: "meta-llama/Llama-3.2-1B-Instruct".into() });
    /// assert!(StorageUri::parse("gs://bucket/x", Kind::Model).is_err());
    /// ```
    pub fn parse(uri: &str, kind: Kind) -> Result<Self, UriError> {
        let trimmed = uri.trim();
        let Some((scheme, rest)) = trimmed.split_once("://") else {
            return Err(UriError::NotAUri { uri: uri.into() });
        };
        if scheme.is_empty() {
            return Err(UriError::NotAUri { uri: uri.into() });
        }
        match scheme.to_ascii_lowercase().as_str() {
            "s3" => parse_s3(uri, rest),
            "hf" => parse_hf(uri, rest, kind),
            _ => Err(UriError::UnknownScheme {
                uri: uri.into(),
                scheme: scheme.into(),
            }),
        }
    }
}

fn parse_s3(uri: &str, rest: &str) -> Result<StorageUri, UriError> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(UriError::MissingBucket { uri: uri.into() });
    }
    if !valid_bucket(bucket) {
        return Err(UriError::InvalidBucket {
            uri: uri.into(),
            bucket: bucket.into(),
        });
    }
    Ok(StorageUri::S3 {
        bucket: bucket.into(),
        prefix: prefix.trim_start_matches('/').into(),
    })
}

/// S3 bucket naming rules (the subset that matters for building URLs safely).
fn valid_bucket(bucket: &str) -> bool {
    (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && bucket.as_bytes()[0].is_ascii_alphanumeric()
        && bucket.as_bytes()[bucket.len() - 1].is_ascii_alphanumeric()
}

fn parse_hf(uri: &str, rest: &str, kind: Kind) -> Result<StorageUri, UriError> {
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    if segments.is_empty() {
        return Err(UriError::MissingRepo { uri: uri.into() });
    }
    if segments
        .iter()
        .any(|s| *s == "." || *s == ".." || !s.bytes().all(valid_repo_byte))
    {
        return Err(UriError::InvalidRepo { uri: uri.into() });
    }
    let repo = match kind {
        // Upstream's dataset initializer keeps netloc + the first path segment.
        Kind::Dataset => segments
            .iter()
            .take(2)
            .copied()
            .collect::<Vec<_>>()
            .join("/"),
        Kind::Model if segments.len() <= 2 => segments.join("/"),
        Kind::Model => return Err(UriError::InvalidRepo { uri: uri.into() }),
    };
    Ok(StorageUri::HuggingFace { repo })
}

/// Characters the hub allows in repository ids.
fn valid_repo_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
}

impl fmt::Display for StorageUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageUri::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            StorageUri::HuggingFace { repo } => write!(f, "hf://{repo}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let ok = [
            ("s3://bkt/a/b", Kind::Dataset, "s3://bkt/a/b"),
            ("s3://bkt", Kind::Dataset, "s3://bkt/"),
            ("s3://bkt/", Kind::Model, "s3://bkt/"),
            ("S3://bkt//x", Kind::Model, "s3://bkt/x"),
            (
                "hf://tatsu-lab/alpaca",
                Kind::Dataset,
                "hf://tatsu-lab/alpaca",
            ),
            (
                "hf://tatsu-lab/alpaca/extra/x",
                Kind::Dataset,
                "hf://tatsu-lab/alpaca",
            ),
            ("hf://gpt2", Kind::Model, "hf://gpt2"),
            (
                "hf://Qwen/Qwen2.5-1.5B-Instruct",
                Kind::Model,
                "hf://Qwen/Qwen2.5-1.5B-Instruct",
            ),
        ];
        for (input, kind, want) in ok {
            let got = StorageUri::parse(input, kind).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(got.to_string(), want, "{input}");
        }
        type Check = fn(&UriError) -> bool;
        let bad: [(&str, Check); 8] = [
            ("bucket/prefix", |e| matches!(e, UriError::NotAUri { .. })),
            ("://x", |e| matches!(e, UriError::NotAUri { .. })),
            (
                "gs://b/x",
                |e| matches!(e, UriError::UnknownScheme { scheme, .. } if scheme == "gs"),
            ),
            ("s3:///prefix", |e| {
                matches!(e, UriError::MissingBucket { .. })
            }),
            ("s3://Bad_Bucket/x", |e| {
                matches!(e, UriError::InvalidBucket { .. })
            }),
            ("hf://", |e| matches!(e, UriError::MissingRepo { .. })),
            ("hf://org/name/extra", |e| {
                matches!(e, UriError::InvalidRepo { .. })
            }),
            ("hf://org/../x", |e| {
                matches!(e, UriError::InvalidRepo { .. })
            }),
        ];
        for (input, check) in bad {
            let err = StorageUri::parse(input, Kind::Model).expect_err(input);
            assert!(check(&err), "{input}: {err:?}");
            assert!(err.to_string().contains("STORAGE_URI"), "{err}");
        }
    }
}
