//! The download engine: list, skip what is already complete, fetch the rest in parallel into
//! temporary files, rename each into place when whole.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt, stream};

use crate::config::{InitConfig, Tuning};
use crate::deadline::Limits;
use crate::error::{Attempt, InitError};
use crate::integrity::{Verdict, Verifier};
use crate::progress::Progress;
use crate::remote::{Checksum, RemoteFile};
use crate::retry::backoff;
use crate::safe_fs::{Dir, split_parent};
use crate::source::{Listing, Source};
use crate::staging::Staging;
use crate::verify;
use crate::writer::BatchWriter;

/// What a finished run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Where the files are.
    pub destination: PathBuf,
    /// Files listed by the source (before ignore patterns).
    pub files_found: usize,
    /// Files skipped by ignore (or, for Hugging Face models, allow) patterns.
    pub files_ignored: usize,
    /// Files downloaded in this run.
    pub files_downloaded: usize,
    /// Files downloaded in this run whose content could not be checked (the source lists no
    /// checksum, or an S3 ETag that is not a content hash); each is named in a warning. Every
    /// other downloaded file matched its listed checksum.
    pub files_unverified: usize,
    /// Remote files skipped because their names are unsafe (`..`, absolute, empty segments);
    /// each is named in a "refusing remote file" warning.
    pub files_refused: usize,
    /// Files already complete from an earlier run (same size and checksum).
    pub files_already_present: usize,
    /// Bytes downloaded in this run (retried ranges counted once).
    pub bytes_downloaded: u64,
    /// Bytes of the files already present.
    pub bytes_already_present: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
}

enum Outcome {
    Downloaded {
        bytes: u64,
        verified: bool,
    },
    AlreadyPresent(u64),
    /// The file system refused the file's name as too long: skipped with a warning.
    Refused,
}

/// Runs one initializer: see [`crate::initialize`].
pub(crate) async fn run(config: &InitConfig) -> Result<Summary, InitError> {
    let start = Instant::now();
    let source = Source::new(config)?;
    let listing = with_retries(&config.tuning, source.endpoint(), None, || source.list()).await?;
    let Listing {
        files,
        found,
        ignored,
        refused,
    } = listing;
    if files.is_empty() {
        return Err(InitError::NothingToDownload {
            uri: config.storage_uri.to_string(),
            found,
            ignored,
        });
    }
    let total = listed_bytes(&files).ok_or_else(|| InitError::Protocol {
        endpoint: source.endpoint().to_string(),
        detail: "the listed file sizes add up to more than 2^64 bytes: the listing is corrupt"
            .into(),
    })?;
    let destination = config.destination.clone();
    tokio::fs::create_dir_all(&destination)
        .await
        .map_err(|e| InitError::io("create directory", &destination, e))?;
    let root_path = destination.clone();
    let root = tokio::task::spawn_blocking(move || Dir::open_root(&root_path))
        .await
        .map_err(|e| InitError::io("open directory", &destination, std::io::Error::other(e)))??;
    let root = Arc::new(root);
    let (staging, swept) = {
        let root = Arc::clone(&root);
        blocking("clean", &destination, move || Staging::open(&root)).await?
    };
    let staging = Arc::new(staging);
    if swept > 0 {
        tracing::info!(swept, "removed partial files of an interrupted run");
    }
    tracing::info!(
        uri = %config.storage_uri,
        destination = %destination.display(),
        files = files.len(),
        ignored,
        bytes = total,
        "downloading {} {}",
        config.kind,
        config.storage_uri
    );
    let progress = Progress::start(
        config.progress,
        format!("{} {}", config.kind, config.storage_uri),
        total,
        config.tuning.log_interval,
    );
    let mut summary = Summary {
        destination: destination.clone(),
        files_found: found,
        files_ignored: ignored,
        files_downloaded: 0,
        files_unverified: 0,
        files_refused: refused,
        files_already_present: 0,
        bytes_downloaded: 0,
        bytes_already_present: 0,
        elapsed: Duration::ZERO,
    };
    let concurrency = config.tuning.concurrency.max(1);
    let (source, root, staging, shown) = (&source, &root, &staging, &progress);
    let mut results = stream::iter(files.iter())
        .map(|file| async move {
            match download_one(source, file, root, staging, &config.tuning, shown).await {
                // A file system with shorter names than the listing allows: skip this one.
                Err(err) if err.is_name_too_long() => {
                    tracing::warn!("refusing remote file {:?}: {err}; skipped", file.key);
                    Ok(Outcome::Refused)
                }
                other => other,
            }
        })
        .buffer_unordered(concurrency);
    // The first error ends the run; dropping the other downloads removes their partial files.
    while let Some(outcome) = results.try_next().await? {
        match outcome {
            Outcome::Downloaded { bytes, verified } => {
                summary.files_downloaded += 1;
                summary.files_unverified += usize::from(!verified);
                summary.bytes_downloaded += bytes;
            }
            Outcome::AlreadyPresent(bytes) => {
                summary.files_already_present += 1;
                summary.bytes_already_present += bytes;
            }
            Outcome::Refused => summary.files_refused += 1,
        }
    }
    drop(results);
    progress.finish();
    summary.elapsed = start.elapsed();
    Ok(summary)
}

/// The sum of the listed sizes; `None` when it does not fit in 64 bits (a lying listing).
fn listed_bytes(files: &[RemoteFile]) -> Option<u64> {
    files
        .iter()
        .filter_map(|f| f.size)
        .try_fold(0u64, u64::checked_add)
}

/// Retries `attempt` on transient errors with backoff; maps the last failure to an error.
async fn with_retries<T, F, Fut>(
    tuning: &Tuning,
    endpoint: &str,
    key: Option<&str>,
    mut attempt: F,
) -> Result<T, InitError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Attempt>>,
{
    let mut retry = 0;
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(failure) => pause_or_fail(tuning, &mut retry, failure, endpoint, key).await?,
        }
    }
}

/// After a failed attempt: waits out the backoff when another attempt is allowed, else returns
/// the error to report.
async fn pause_or_fail(
    tuning: &Tuning,
    retry: &mut u32,
    failure: Attempt,
    endpoint: &str,
    key: Option<&str>,
) -> Result<(), InitError> {
    let (unreachable, detail) = match failure {
        Attempt::Fatal(err) => return Err(err),
        Attempt::Transient {
            unreachable,
            detail,
        } => (unreachable, detail),
    };
    if *retry >= tuning.max_retries {
        let attempts = *retry + 1;
        return Err(match key {
            Some(key) if !unreachable => InitError::Transfer {
                key: key.to_string(),
                attempts,
                detail,
            },
            _ => InitError::Unreachable {
                endpoint: endpoint.to_string(),
                attempts,
                detail,
            },
        });
    }
    *retry += 1;
    let pause = backoff(tuning.initial_backoff, *retry);
    tracing::warn!(
        retry = *retry,
        ?pause,
        "{}: {detail}",
        key.unwrap_or(endpoint)
    );
    tokio::time::sleep(pause).await;
    Ok(())
}

/// Removes the staged file unless the download completed (also when the future is dropped).
struct PartialFile {
    staging: Arc<Staging>,
    name: String,
    armed: bool,
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.staging.dir().remove(&self.name);
        }
    }
}

/// Runs blocking file-system work on the blocking pool.
async fn blocking<T: Send + 'static>(
    what: &'static str,
    path: &std::path::Path,
    work: impl FnOnce() -> Result<T, InitError> + Send + 'static,
) -> Result<T, InitError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| InitError::io(what, path, std::io::Error::other(e)))?
}

/// Whether a file of this name and the listed size is already in place with the right content (a rerun).
/// Fills in `file`'s checksum with one HEAD when the listing had none: worth it to compare content, not just
/// size.
async fn already_complete(
    source: &Source,
    file: &mut RemoteFile,
    root: &Arc<Dir>,
    tuning: &Tuning,
    final_path: &Path,
) -> Result<bool, InitError> {
    let local_len = {
        let (root, relative) = (Arc::clone(root), file.relative_path.clone());
        blocking("inspect", final_path, move || {
            Ok(verify::open_local(&root, &relative)
                .and_then(|f| f.metadata().ok())
                .map(|m| m.len()))
        })
        .await?
    };
    if local_len.is_none() || local_len != file.size {
        return Ok(false);
    }
    if file.checksum == Checksum::Unknown {
        file.checksum = with_retries(tuning, source.endpoint(), Some(&file.key), || {
            source.checksum(file)
        })
        .await?;
    }
    let (root, check_file) = (Arc::clone(root), file.clone());
    Ok(blocking("verify", final_path, move || {
        Ok(verify::is_complete(&root, &check_file))
    })
    .await
    .unwrap_or(false))
}

async fn download_one(
    source: &Source,
    file: &RemoteFile,
    root: &Arc<Dir>,
    staging: &Arc<Staging>,
    tuning: &Tuning,
    progress: &Progress,
) -> Result<Outcome, InitError> {
    let final_path = file.local_path(root.path());
    let mut file = file.clone();
    let (parent, name) = split_parent(&file.relative_path);
    let (parent, name) = (parent.to_string(), name.to_string());
    if already_complete(source, &mut file, root, tuning, &final_path).await? {
        let size = file.size.unwrap_or(0);
        progress.add(size);
        tracing::debug!(key = file.key, "already complete");
        return Ok(Outcome::AlreadyPresent(size));
    }
    let parts = with_retries(tuning, source.endpoint(), Some(&file.key), || {
        source.part_sizes(&file)
    })
    .await?;
    let staged = staging.reserve();
    let mode = tuning.file_mode;
    let handle = {
        let (staging, staged) = (Arc::clone(staging), staged.clone());
        blocking("create", &final_path, move || {
            staging.dir().create_file(&staged, mode)
        })
        .await?
    };
    let mut partial = PartialFile {
        staging: Arc::clone(staging),
        name: staged.clone(),
        armed: true,
    };
    let partial_path = staging.dir().path().join(&staged);
    let mut writer = BatchWriter::new(&partial_path, handle, Verifier::new(&file, parts.as_ref()));
    let mut retry = 0;
    while let Err(failure) = fetch_into(source, &mut file, &mut writer, tuning, progress).await {
        pause_or_fail(
            tuning,
            &mut retry,
            failure,
            source.endpoint(),
            Some(&file.key),
        )
        .await?;
    }
    let written = writer.len();
    let (mut handle, verifier) = writer.finish(tuning.sync_files).await?;
    let mut verdict = verifier.finish();
    if let Verdict::HashFinishedFile { expected } = verdict {
        // A git blob id needs the size first; it was not listed, so hash the finished file.
        verdict = blocking("verify", &partial_path, move || {
            let actual = verify::hex_digest(&mut handle, verify::DigestKind::GitSha1(written))
                .unwrap_or_default();
            Ok(if actual == expected {
                Verdict::Verified
            } else {
                Verdict::Mismatch {
                    algorithm: "git blob sha1",
                    expected,
                    actual,
                }
            })
        })
        .await?;
    }
    // Dropping `partial` on an error removes the file: nothing of it is kept.
    let verified = judge(verdict, source, &file, tuning).await?;
    let tag = match &file.checksum {
        Checksum::Tag(tag) => Some(tag.clone()),
        _ => None,
    };
    let (root, staging, done) = (Arc::clone(root), Arc::clone(staging), file.clone());
    blocking("rename into place", &final_path, move || {
        let dir = root.open_dir(&parent, true)?.ok_or_else(|| {
            InitError::io(
                "create directory",
                root.path().join(&parent),
                std::io::ErrorKind::NotFound.into(),
            )
        })?;
        if let Some(tag) = tag {
            verify::write_tag(&root, &staging, &done, &tag)?;
        }
        staging.dir().move_to(&staged, &dir, &name)
    })
    .await?;
    partial.armed = false;
    tracing::debug!(key = file.key, bytes = written, verified, "downloaded");
    Ok(Outcome::Downloaded {
        bytes: written,
        verified,
    })
}

/// Whether a finished download is kept as verified (`true`), kept unverified with a warning
/// (`false`), or refused. A mismatch, or a multipart ETag the part sizes cannot explain, is
/// refused unless the ETag is not a content hash (SSE-KMS, SSE-C: asked with a `HEAD`); the
/// latter is kept when [`Tuning::accept_unverified_multipart`] says so.
async fn judge(
    verdict: Verdict,
    source: &Source,
    file: &RemoteFile,
    tuning: &Tuning,
) -> Result<bool, InitError> {
    let refusal = match verdict {
        Verdict::Verified => return Ok(true),
        Verdict::Unverified(reason) => {
            tracing::warn!(key = file.key, "{} not verified: {reason}", file.key);
            return Ok(false);
        }
        Verdict::HashFinishedFile { .. } => return Ok(false),
        Verdict::Mismatch {
            algorithm,
            expected,
            actual,
        } => InitError::ChecksumMismatch {
            key: file.key.clone(),
            algorithm,
            expected,
            actual,
        },
        Verdict::UnverifiableMultipart(reason) => InitError::UnverifiedMultipart {
            key: file.key.clone(),
            reason,
        },
    };
    let content_hash = with_retries(tuning, source.endpoint(), Some(&file.key), || {
        source.etag_is_content_hash(file)
    })
    .await?;
    if !content_hash {
        tracing::warn!(
            key = file.key,
            "{} not verified: its ETag is not an MD5 (server-side encryption with KMS or customer keys)",
            file.key
        );
        return Ok(false);
    }
    match refusal {
        InitError::UnverifiedMultipart { reason, .. } if tuning.accept_unverified_multipart => {
            tracing::warn!(
                key = file.key,
                "{} not verified: {reason}; kept because unverified multipart objects are accepted",
                file.key
            );
            Ok(false)
        }
        refusal => Err(refusal),
    }
}

/// One attempt: continues from the bytes already written.
async fn fetch_into(
    source: &Source,
    file: &mut RemoteFile,
    writer: &mut BatchWriter,
    tuning: &Tuning,
    progress: &Progress,
) -> Result<(), Attempt> {
    let offset = writer.len();
    if file.size.is_some_and(|size| offset >= size) && offset > 0 {
        return Ok(());
    }
    let opened = source.open(file, offset).await?;
    if file.checksum == Checksum::Unknown && opened.checksum != Checksum::Unknown {
        // Pins the version for resumed ranges and gives reruns something to compare.
        file.checksum = opened.checksum;
        if offset == 0 {
            // Nothing received yet: check the download against it too. The listing had no
            // ETag, so a multipart one needs its part size now.
            let parts = source.part_sizes(file).await?;
            writer
                .set_verifier(Verifier::new(file, parts.as_ref()))
                .await?;
        }
    }
    if opened.from_start && offset > 0 {
        progress.sub(offset);
        writer.restart().await?;
    }
    let mut body = opened.body;
    let limits = Limits::new(tuning);
    while let Some(chunk) = limits.next_chunk(&file.key, &mut body).await? {
        let len = chunk.len() as u64;
        writer.write(chunk).await?;
        progress.add(len);
        if let Some(size) = file.size
            && writer.len() > size
        {
            progress.sub(writer.len());
            writer.restart().await?;
            return Err(Attempt::transient(format!(
                "server sent more than the listed {size} bytes; the file changed, starting over"
            )));
        }
    }
    match file.size {
        Some(size) if writer.len() < size => Err(Attempt::transient(format!(
            "connection closed after {} of {size} bytes",
            writer.len()
        ))),
        _ => Ok(()),
    }
}
