//! The download engine: list, skip what is already complete, fetch the rest in parallel into
//! temporary files, rename each into place when whole.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt, stream};

use crate::config::{InitConfig, Tuning};
use crate::error::{Attempt, InitError};
use crate::progress::Progress;
use crate::remote::{Checksum, RemoteFile};
use crate::retry::backoff;
use crate::source::{Listing, Source};
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
    Downloaded(u64),
    AlreadyPresent(u64),
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
    } = listing;
    if files.is_empty() {
        return Err(InitError::NothingToDownload {
            uri: config.storage_uri.to_string(),
            found,
            ignored,
        });
    }
    let destination = config.destination.clone();
    tokio::fs::create_dir_all(&destination)
        .await
        .map_err(|e| InitError::io("create directory", &destination, e))?;
    let sweep_dir = destination.clone();
    let swept = tokio::task::spawn_blocking(move || verify::sweep_partials(&sweep_dir))
        .await
        .map_err(|e| InitError::io("clean", &destination, std::io::Error::other(e)))?
        .map_err(|e| InitError::io("clean", &destination, e))?;
    if swept > 0 {
        tracing::info!(swept, "removed partial files of an interrupted run");
    }
    let total: u64 = files.iter().filter_map(|f| f.size).sum();
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
        files_already_present: 0,
        bytes_downloaded: 0,
        bytes_already_present: 0,
        elapsed: Duration::ZERO,
    };
    let concurrency = config.tuning.concurrency.max(1);
    let mut results = stream::iter(files.iter())
        .map(|file| download_one(&source, file, &destination, &config.tuning, &progress))
        .buffer_unordered(concurrency);
    // The first error ends the run; dropping the other downloads removes their partial files.
    while let Some(outcome) = results.try_next().await? {
        match outcome {
            Outcome::Downloaded(bytes) => {
                summary.files_downloaded += 1;
                summary.bytes_downloaded += bytes;
            }
            Outcome::AlreadyPresent(bytes) => {
                summary.files_already_present += 1;
                summary.bytes_already_present += bytes;
            }
        }
    }
    drop(results);
    progress.finish();
    summary.elapsed = start.elapsed();
    Ok(summary)
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

/// Removes the partial file unless the download completed (also when the future is dropped).
struct PartialFile {
    path: PathBuf,
    armed: bool,
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

async fn download_one(
    source: &Source,
    file: &RemoteFile,
    destination: &Path,
    tuning: &Tuning,
    progress: &Progress,
) -> Result<Outcome, InitError> {
    let final_path = file.local_path(destination);
    let mut file = file.clone();
    let local_len = tokio::fs::metadata(&final_path)
        .await
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    let mut complete = false;
    if local_len.is_some() && local_len == file.size {
        if file.checksum == Checksum::Unknown {
            // One HEAD per candidate, only on reruns: worth it to compare content, not just size.
            file.checksum = with_retries(tuning, source.endpoint(), Some(&file.key), || {
                source.checksum(&file)
            })
            .await?;
        }
        let check_dest = destination.to_path_buf();
        let check_file = file.clone();
        complete =
            tokio::task::spawn_blocking(move || verify::is_complete(&check_dest, &check_file))
                .await
                .unwrap_or(false);
    }
    if complete {
        let size = file.size.unwrap_or(0);
        progress.add(size);
        tracing::debug!(key = file.key, "already complete");
        return Ok(Outcome::AlreadyPresent(size));
    }
    if let Some(parent) = final_path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| InitError::io("create directory", parent, e))?;
    }
    let mut partial = PartialFile {
        path: verify::partial_path(&final_path),
        armed: true,
    };
    let mut writer = BatchWriter::create(&partial.path).await?;
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
    writer.finish(tuning.sync_files).await?;
    if let Checksum::Tag(tag) = &file.checksum {
        let record = verify::tag_path(destination, &file);
        if let Some(parent) = record.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| InitError::io("create directory", parent, e))?;
        }
        tokio::fs::write(&record, format!("{tag}\n"))
            .await
            .map_err(|e| InitError::io("write", &record, e))?;
    }
    tokio::fs::rename(&partial.path, &final_path)
        .await
        .map_err(|e| InitError::io("rename into place", &final_path, e))?;
    partial.armed = false;
    tracing::debug!(key = file.key, bytes = written, "downloaded");
    Ok(Outcome::Downloaded(written))
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
    if file.checksum == Checksum::Unknown {
        // Pins the version for resumed ranges and gives reruns something to compare.
        file.checksum = opened.checksum;
    }
    if opened.from_start && offset > 0 {
        progress.sub(offset);
        writer.restart().await?;
    }
    let mut body = opened.body;
    loop {
        let next = tokio::time::timeout(tuning.read_timeout, body.next())
            .await
            .map_err(|_| {
                Attempt::transient(format!(
                    "no data for {:?}, reconnecting",
                    tuning.read_timeout
                ))
            })?;
        let Some(chunk) = next else { break };
        let chunk = chunk?;
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
