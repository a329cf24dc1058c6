//! Dataset and model initializers for TrainJobs: `s3://` and `hf://` into the shared workspace.
//!
//! Part of [kubetrain](https://github.com/kubetrain/kubetrain), Kubeflow Trainer V2 in Rust. Upstream
//! runs a `dataset-initializer` and a `model-initializer` container once per TrainJob; both read
//! `STORAGE_URI` and a few more variables and download into `/workspace/dataset` or
//! `/workspace/model` on a volume every training node mounts. This crate does the same, with the
//! same environment contract:
//!
//! | variable | used for |
//! |---|---|
//! | `STORAGE_URI` | `s3://bucket/prefix` or `hf://org/name` |
//! | `IGNORE_PATTERNS` | comma-separated `fnmatch` globs of files to skip (models: `*.msgpack,*.h5,*.bin,*.pt,*.pth` by default) |
//! | `ENDPOINT`, `ACCESS_KEY_ID`, `SECRET_ACCESS_KEY`, `REGION`, `ROLE_ARN` | S3 |
//! | `ACCESS_TOKEN`, `HF_ENDPOINT` | Hugging Face hub (token, mirror) |
//!
//! Files are written in a staging directory of the initializer's own
//! (`<destination>/.kubetrain-initializer/partial/`) and renamed into place when complete, so a
//! crash never leaves a half file under the final name and no remote name can collide with a
//! file being written. Every download is checked against the checksum its
//! source lists (hub SHA-256 / git blob id, S3 ETag MD5 or multipart ETag) while it streams in;
//! a mismatch fails the run and keeps nothing. A rerun skips files whose size and checksum
//! already match. Files are written `0640` ([`DEFAULT_FILE_MODE`]) and never through a
//! symbolic link inside the destination; remote names that would leave it are skipped with a
//! warning. Downloads run in parallel with a bound, never wait for ever (connect, first-byte and
//! idle timeouts), retry transient errors with backoff (resuming from the bytes already written)
//! and report progress.
//!
//! Feature `s3-server` (off by default) adds the module `s3_server`: a loopback S3 endpoint serving a directory,
//! which `kubetrain acceptance --local` serves its sample data from (not a production object store).
//!
//! ```no_run
//! use kubetrain_initializer::{InitConfig, Kind, initialize_blocking};
//!
//! // Inside an initializer container: everything comes from the environment.
//! let config = InitConfig::from_env(Kind::Dataset)?;
//! let summary = initialize_blocking(&config)?;
//! println!("{} files in {}", summary.files_downloaded, summary.destination.display());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Configuring in code instead:
//!
//! ```
//! use kubetrain_initializer::{InitConfig, Kind, StorageUri};
//! let uri = StorageUri::parse("s3://datasets/alpaca", Kind::Dataset)?;
//! let mut config = InitConfig::new(Kind::Dataset, uri);
//! config.destination = "/tmp/alpaca".into();
//! config.s3.endpoint = Some("http://127.0.0.1:9000".into());
//! config.tuning.concurrency = 4;
//! # Ok::<(), kubetrain_initializer::UriError>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod config;
mod deadline;
mod download;
mod error;
mod integrity;
mod kind;
mod pattern;
mod progress;
mod remote;
mod retry;
mod safe_fs;
mod source;
mod staging;
mod uri;
mod verify;
mod writer;

#[cfg(feature = "s3-server")]
#[cfg_attr(docsrs, doc(cfg(feature = "s3-server")))]
pub mod s3_server;

pub use config::{
    ConfigError, DEFAULT_FILE_MODE, DEFAULT_HF_ENDPOINT, ENV_IGNORE_PATTERNS, ENV_STORAGE_URI,
    HF_MODEL_ALLOW_PATTERNS, HubOptions, InitConfig, ProgressMode, S3Options, Tuning,
};
pub use download::Summary;
pub use error::InitError;
pub use kind::{DATASET_PATH, Kind, MODEL_IGNORE_PATTERNS, MODEL_PATH};
pub use pattern::{Pattern, PatternSet};
pub use remote::{Checksum, RemoteFile};
pub use uri::{StorageUri, UriError};

/// Downloads everything `config` names into `config.destination`.
///
/// Must run inside a Tokio runtime with the time and I/O drivers enabled.
pub async fn initialize(config: &InitConfig) -> Result<Summary, InitError> {
    download::run(config).await
}

/// [`initialize`] on a runtime of its own, for synchronous callers such as the CLI.
pub fn initialize_blocking(config: &InitConfig) -> Result<Summary, InitError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| InitError::io("start", "the async runtime", e))?;
    runtime.block_on(initialize(config))
}

// The README's example is compiled and run with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
