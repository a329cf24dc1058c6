//! Writes a download to its temporary file in large batches on the blocking pool, one batch in
//! flight while the next one is received (async file APIs cost one thread hop per small chunk).
//! The same blocking task feeds the bytes to the download's [`Verifier`], so hashing never runs
//! on the async threads.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::task::JoinHandle;

use crate::error::InitError;
use crate::integrity::Verifier;

/// Bytes gathered before a write is handed to the blocking pool.
const BATCH_BYTES: usize = 4 << 20;

/// The open file and the hash of what was written to it.
struct Sink {
    file: File,
    verifier: Verifier,
}

enum State {
    Idle(Box<Sink>),
    Writing(JoinHandle<std::io::Result<Box<Sink>>>),
    Broken,
}

pub(crate) struct BatchWriter {
    path: PathBuf,
    state: State,
    batch: Vec<Bytes>,
    batch_len: usize,
    len: u64,
}

impl BatchWriter {
    /// Writes into `file` (new and empty), shown as `path` in errors, hashing for `verifier`.
    pub(crate) fn new(path: &Path, file: File, verifier: Verifier) -> Self {
        Self {
            path: path.to_path_buf(),
            state: State::Idle(Box::new(Sink { file, verifier })),
            batch: Vec::new(),
            batch_len: 0,
            len: 0,
        }
    }

    /// Checks the download against `verifier` instead; only before the first byte.
    pub(crate) async fn set_verifier(&mut self, verifier: Verifier) -> Result<(), InitError> {
        if self.len == 0 {
            let mut sink = self.idle_sink().await?;
            sink.verifier = verifier;
            self.state = State::Idle(sink);
        }
        Ok(())
    }

    /// Bytes accepted so far.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) async fn write(&mut self, chunk: Bytes) -> Result<(), InitError> {
        self.len += chunk.len() as u64;
        self.batch_len += chunk.len();
        self.batch.push(chunk);
        if self.batch_len >= BATCH_BYTES {
            self.flush_batch().await?;
        }
        Ok(())
    }

    async fn flush_batch(&mut self) -> Result<(), InitError> {
        let mut sink = self.idle_sink().await?;
        let batch = std::mem::take(&mut self.batch);
        self.batch_len = 0;
        self.state = State::Writing(tokio::task::spawn_blocking(move || {
            for chunk in &batch {
                sink.file.write_all(chunk)?;
                sink.verifier.update(chunk);
            }
            Ok(sink)
        }));
        Ok(())
    }

    /// Waits for the write in flight and takes the sink.
    async fn idle_sink(&mut self) -> Result<Box<Sink>, InitError> {
        match std::mem::replace(&mut self.state, State::Broken) {
            State::Idle(sink) => Ok(sink),
            State::Writing(handle) => handle
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r)
                .map_err(|e| InitError::io("write", &self.path, e)),
            State::Broken => Err(InitError::io(
                "write",
                &self.path,
                std::io::Error::other("an earlier write failed"),
            )),
        }
    }

    /// Drops everything written: the server is sending the file again from the start.
    pub(crate) async fn restart(&mut self) -> Result<(), InitError> {
        self.batch.clear();
        self.batch_len = 0;
        let mut sink = self.idle_sink().await?;
        sink.file
            .set_len(0)
            .and_then(|()| sink.file.seek(SeekFrom::Start(0)).map(drop))
            .map_err(|e| InitError::io("truncate", &self.path, e))?;
        sink.verifier.reset();
        self.state = State::Idle(sink);
        self.len = 0;
        Ok(())
    }

    /// Writes what is left and, with `sync`, flushes the data to disk before the rename makes
    /// the file visible. Returns the file and the verifier that saw every byte of it.
    pub(crate) async fn finish(mut self, sync: bool) -> Result<(File, Verifier), InitError> {
        if !self.batch.is_empty() {
            self.flush_batch().await?;
        }
        let sink = self.idle_sink().await?;
        let Sink { file, verifier } = *sink;
        if sync {
            let path = self.path.clone();
            let file = tokio::task::spawn_blocking(move || file.sync_data().map(|()| file))
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r)
                .map_err(|e| InitError::io("sync", path, e))?;
            return Ok((file, verifier));
        }
        Ok((file, verifier))
    }
}
