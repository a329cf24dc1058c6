//! What to download and how: built from upstream's environment contract or in code.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::kind::Kind;
use crate::pattern::PatternSet;
use crate::uri::{StorageUri, UriError};

/// Files upstream's Hugging Face model initializer downloads at all (its `allow_patterns`).
pub const HF_MODEL_ALLOW_PATTERNS: &str = "*.json,*.safetensors,*.model,*.txt,*.gguf";
/// The public Hugging Face hub.
pub const DEFAULT_HF_ENDPOINT: &str = "https://huggingface.co";

/// S3 connection settings (`ENDPOINT`, `ACCESS_KEY_ID`, `SECRET_ACCESS_KEY`, `REGION`, `ROLE_ARN`).
///
/// Unset fields fall back to the usual `AWS_*` environment variables read by `object_store`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct S3Options {
    /// Endpoint URL of an S3-compatible server, e.g. `http://minio:9000` (path-style requests).
    pub endpoint: Option<String>,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Region; upstream defaults to `auto`, we default to `us-east-1` which S3-compatible servers
    /// accept and AWS redirects from.
    pub region: Option<String>,
    /// IAM role assumed through web identity (IRSA: needs `AWS_WEB_IDENTITY_TOKEN_FILE`).
    pub role_arn: Option<String>,
}

// Hand-written so secrets never reach logs.
impl fmt::Debug for S3Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Options")
            .field("endpoint", &self.endpoint)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("region", &self.region)
            .field("role_arn", &self.role_arn)
            .finish()
    }
}

/// Hugging Face hub settings (`ACCESS_TOKEN`, `HF_ENDPOINT`).
#[derive(Clone, PartialEq, Eq)]
pub struct HubOptions {
    /// Base URL of the hub or a mirror; [`DEFAULT_HF_ENDPOINT`] unless `HF_ENDPOINT` is set.
    pub endpoint: String,
    /// Token sent as `Authorization: Bearer …` (gated and private repositories).
    pub access_token: Option<String>,
    /// Branch, tag or commit to download; `main` by default.
    pub revision: String,
}

impl Default for HubOptions {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_HF_ENDPOINT.into(),
            access_token: None,
            revision: "main".into(),
        }
    }
}

impl fmt::Debug for HubOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HubOptions")
            .field("endpoint", &self.endpoint)
            .field(
                "access_token",
                &self.access_token.as_ref().map(|_| "<redacted>"),
            )
            .field("revision", &self.revision)
            .finish()
    }
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressMode {
    /// A bar when stderr is a terminal, periodic log lines otherwise.
    #[default]
    Auto,
    /// Always the bar (bytes, rate, ETA) on stderr.
    Bar,
    /// Periodic `tracing` log lines.
    Log,
    /// Nothing but the final summary.
    Off,
}

/// How hard to try: parallelism, retries and timeouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// Files downloaded at the same time.
    pub concurrency: usize,
    /// Attempts after the first one for a transient error (connection reset, 5xx, timeout).
    pub max_retries: u32,
    /// First backoff; doubled after each failed attempt, with jitter, capped at 30 s.
    pub initial_backoff: Duration,
    /// Time allowed to open a TCP connection.
    pub connect_timeout: Duration,
    /// Time allowed from sending a request (listing, `HEAD`, `GET`) to the first byte of its
    /// answer; a server that accepts the connection and never answers costs one retry.
    pub first_byte_timeout: Duration,
    /// Idle timeout: the longest pause between two chunks of an answer (a listing or a file)
    /// before the transfer counts as stalled and is retried, resuming where it stopped.
    pub read_timeout: Duration,
    /// Interval of the log lines in [`ProgressMode::Log`].
    pub log_interval: Duration,
    /// Flush each file to disk before renaming it into place, so even a power loss never leaves
    /// a file that looks whole but is not.
    pub sync_files: bool,
    /// Keep a multipart S3 object whose ETag cannot be checked (the server does not report the
    /// part count and no common part size explains it) as unverified, with a warning, instead
    /// of failing the run. Off by default: such a download may be corrupt.
    /// `KUBETRAIN_ACCEPT_UNVERIFIED_MULTIPART=true`, `--accept-unverified-multipart`.
    pub accept_unverified_multipart: bool,
    /// Permission bits of every downloaded file, set exactly (the umask does not apply):
    /// [`DEFAULT_FILE_MODE`] (`0640`, owner and group) unless changed. Directories the
    /// initializer creates get `0750` before the umask.
    pub file_mode: u32,
}

/// Default permission bits of downloaded files: read-write for the owner, read for the group,
/// nothing for others, so gated models and private datasets on a shared node are not readable by
/// every user. Pods that read them as another user share a group (`fsGroup`).
pub const DEFAULT_FILE_MODE: u32 = 0o640;

impl Default for Tuning {
    fn default() -> Self {
        Self {
            concurrency: 8,
            max_retries: 4,
            initial_backoff: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(60),
            log_interval: Duration::from_secs(10),
            sync_files: true,
            accept_unverified_multipart: false,
            file_mode: DEFAULT_FILE_MODE,
        }
    }
}

/// Everything one initializer run needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitConfig {
    /// Dataset or model.
    pub kind: Kind,
    /// Where to download from.
    pub storage_uri: StorageUri,
    /// Directory the files land in (created when missing).
    pub destination: PathBuf,
    /// Files to skip: matched against the object key and the path relative to the prefix (S3) or
    /// the repository path (Hugging Face).
    pub ignore_patterns: PatternSet,
    /// S3 settings, used for `s3://`.
    pub s3: S3Options,
    /// Hub settings, used for `hf://`.
    pub hub: HubOptions,
    /// Parallelism, retries, timeouts.
    pub tuning: Tuning,
    /// Progress display.
    pub progress: ProgressMode,
}

impl InitConfig {
    /// A configuration with upstream's defaults for `kind` (destination, ignore patterns).
    ///
    /// ```
    /// use kubetrain_initializer::{InitConfig, Kind, StorageUri};
    /// let uri = StorageUri::parse("hf://Qwen/Qwen2.5-1.5B-Instruct", Kind::Model).unwrap();
    /// let config = InitConfig::new(Kind::Model, uri);
    /// assert_eq!(config.destination, std::path::Path::new("/workspace/model"));
    /// assert!(config.ignore_patterns.matches("pytorch_model.bin"));
    /// ```
    pub fn new(kind: Kind, storage_uri: StorageUri) -> Self {
        Self {
            kind,
            storage_uri,
            destination: kind.default_destination(),
            ignore_patterns: kind.default_ignore_patterns(),
            s3: S3Options::default(),
            hub: HubOptions::default(),
            tuning: Tuning::default(),
            progress: ProgressMode::Auto,
        }
    }

    /// Reads upstream's environment contract through `lookup` (use `|k| std::env::var(k).ok()`
    /// for the process environment). Empty values count as unset, as upstream does.
    ///
    /// ```
    /// use kubetrain_initializer::{InitConfig, Kind, StorageUri};
    /// let env = [("STORAGE_URI", "s3://data/alpaca"), ("ENDPOINT", "http://127.0.0.1:9000"),
    ///            ("IGNORE_PATTERNS", "*.tmp")];
    /// let lookup = |key: &str| env.iter().find(|(k, _)| *k == key).map(|(_, v)| v.to_string());
    /// let config = InitConfig::from_lookup(Kind::Dataset, lookup).unwrap();
    /// assert_eq!(config.s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
    /// assert!(config.ignore_patterns.matches("a.tmp"));
    /// ```
    pub fn from_lookup(
        kind: Kind,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let get = |key: &str| lookup(key).filter(|v| !v.trim().is_empty());
        let uri = get(ENV_STORAGE_URI).ok_or(ConfigError::MissingStorageUri)?;
        let storage_uri = StorageUri::parse(&uri, kind)?;
        let mut config = Self::new(kind, storage_uri);
        // IGNORE_PATTERNS set but empty clears the model default, as upstream does.
        if let Some(list) = lookup(ENV_IGNORE_PATTERNS) {
            config.ignore_patterns = PatternSet::parse_list(&list);
        }
        config.s3 = S3Options {
            endpoint: get("ENDPOINT"),
            access_key_id: get("ACCESS_KEY_ID"),
            secret_access_key: get("SECRET_ACCESS_KEY"),
            region: get("REGION"),
            role_arn: get("ROLE_ARN"),
        };
        if let Some(endpoint) = get("HF_ENDPOINT") {
            config.hub.endpoint = endpoint;
        }
        config.hub.access_token = get("ACCESS_TOKEN").or_else(|| get("HF_TOKEN"));
        if let Some(value) = get(ENV_ACCEPT_UNVERIFIED_MULTIPART) {
            config.tuning.accept_unverified_multipart =
                parse_bool(ENV_ACCEPT_UNVERIFIED_MULTIPART, &value)?;
        }
        Ok(config)
    }

    /// [`InitConfig::from_lookup`] on the process environment.
    pub fn from_env(kind: Kind) -> Result<Self, ConfigError> {
        Self::from_lookup(kind, |key| std::env::var(key).ok())
    }
}

/// The env variable holding the URI to download (set by the trainer's initializer plugin).
pub const ENV_STORAGE_URI: &str = "STORAGE_URI";
/// The env variable holding comma-separated globs of files to skip.
pub const ENV_IGNORE_PATTERNS: &str = "IGNORE_PATTERNS";
/// Our addition to the contract: keep multipart S3 objects that cannot be verified
/// ([`Tuning::accept_unverified_multipart`]).
const ENV_ACCEPT_UNVERIFIED_MULTIPART: &str = "KUBETRAIN_ACCEPT_UNVERIFIED_MULTIPART";

/// A yes/no variable: `true`/`false` (also `1`/`0`, `yes`/`no`), any case.
fn parse_bool(variable: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(ConfigError::InvalidBool {
            variable,
            value: value.to_string(),
        }),
    }
}

/// Why a configuration could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Neither `--storage-uri` nor `STORAGE_URI` was given.
    #[error(
        "STORAGE_URI is not set: pass --storage-uri or set STORAGE_URI (s3://bucket/prefix or hf://org/name)"
    )]
    MissingStorageUri,
    /// The storage URI is malformed.
    #[error(transparent)]
    Uri(#[from] UriError),
    /// A yes/no variable has another value.
    #[error("{variable}={value:?} is not a yes/no value: set it to true or false")]
    InvalidBool {
        /// The env variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::MODEL_IGNORE_PATTERNS;

    fn lookup<'a>(env: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |key| {
            env.iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn env_contract() {
        let env = [
            ("STORAGE_URI", "hf://meta-llama/Llama-3.2-1B-Instruct"),
            ("ACCESS_TOKEN", "hf_secret"),
            ("HF_ENDPOINT", "http://127.0.0.1:8080"),
        ];
        let config = InitConfig::from_lookup(Kind::Model, lookup(&env)).unwrap();
        assert_eq!(config.hub.access_token.as_deref(), Some("hf_secret"));
        assert_eq!(config.hub.endpoint, "http://127.0.0.1:8080");
        assert_eq!(config.destination, PathBuf::from("/workspace/model"));
        assert_eq!(config.ignore_patterns.to_string(), MODEL_IGNORE_PATTERNS);
        assert!(
            !format!("{:?}", config).contains("hf_secret"),
            "token must not be printed"
        );

        let env = [
            ("STORAGE_URI", "s3://bkt/p"),
            ("ENDPOINT", "http://x:1"),
            ("ACCESS_KEY_ID", "ak"),
            ("SECRET_ACCESS_KEY", "sk"),
            ("REGION", ""),
            ("IGNORE_PATTERNS", ""),
        ];
        let config = InitConfig::from_lookup(Kind::Model, lookup(&env)).unwrap();
        assert_eq!(config.s3.region, None, "empty counts as unset");
        assert!(
            config.ignore_patterns.is_empty(),
            "explicit empty list clears the default"
        );
        assert!(!format!("{:?}", config.s3).contains("sk\""));
        assert_eq!(config.destination, PathBuf::from("/workspace/model"));

        let config =
            InitConfig::from_lookup(Kind::Dataset, lookup(&[("STORAGE_URI", "s3://bkt")])).unwrap();
        assert!(config.ignore_patterns.is_empty());
        assert_eq!(config.destination, PathBuf::from("/workspace/dataset"));
        assert!(!config.tuning.accept_unverified_multipart);

        let env = [
            ("STORAGE_URI", "s3://bkt"),
            ("KUBETRAIN_ACCEPT_UNVERIFIED_MULTIPART", "True"),
        ];
        let config = InitConfig::from_lookup(Kind::Dataset, lookup(&env)).unwrap();
        assert!(config.tuning.accept_unverified_multipart);
    }

    #[test]
    fn env_errors() {
        assert_eq!(
            InitConfig::from_lookup(Kind::Dataset, lookup(&[])).unwrap_err(),
            ConfigError::MissingStorageUri
        );
        let err = InitConfig::from_lookup(Kind::Dataset, lookup(&[("STORAGE_URI", "ftp://x/y")]))
            .unwrap_err();
        assert!(
            matches!(err, ConfigError::Uri(UriError::UnknownScheme { .. })),
            "{err:?}"
        );
        let env = [
            ("STORAGE_URI", "s3://bkt"),
            ("KUBETRAIN_ACCEPT_UNVERIFIED_MULTIPART", "sure"),
        ];
        let err = InitConfig::from_lookup(Kind::Dataset, lookup(&env)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "KUBETRAIN_ACCEPT_UNVERIFIED_MULTIPART=\"sure\" is not a yes/no value: set it to true or false"
        );
    }
}
