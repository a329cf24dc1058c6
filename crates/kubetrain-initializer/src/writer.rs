//! Writes a download to its temporary file in large batches on the blocking pool, one batch in
//! flight while the next one is received (async file APIs cost one thread hop per small chunk).

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::task::JoinHandle;

use crate::error::InitError;

/// Bytes gathered before a write is handed to the blocking pool.
const BATCH_BYTES: usize = 4 << 20;

enum State {
    Idle(File),
    Writing(JoinHandle<std::io::Result<File>>),
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
    /// Creates (or truncates) the file.
    pub(crate) async fn create(path: &Path) -> Result<Self, InitError> {
        let owned = path.to_path_buf();
        let file = tokio::task::spawn_blocking(move || File::create(owned))
            .await
            .map_err(|e| InitError::io("create", path, std::io::Error::other(e)))?
            .map_err(|e| InitError::io("create", path, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            state: State::Idle(file),
            batch: Vec::new(),
            batch_len: 0,
            len: 0,
        })
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
        let mut file = self.idle_file().await?;
        let batch = std::mem::take(&mut self.batch);
        self.batch_len = 0;
        self.state = State::Writing(tokio::task::spawn_blocking(move || {
            for chunk in &batch {
                file.write_all(chunk)?;
            }
            Ok(file)
        }));
        Ok(())
    }

    /// Waits for the write in flight and takes the file.
    async fn idle_file(&mut self) -> Result<File, InitError> {
        match std::mem::replace(&mut self.state, State::Broken) {
            State::Idle(file) => Ok(file),
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
        let mut file = self.idle_file().await?;
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(drop))
            .map_err(|e| InitError::io("truncate", &self.path, e))?;
        self.state = State::Idle(file);
        self.len = 0;
        Ok(())
    }

    /// Writes what is left and, with `sync`, flushes the data to disk before the rename makes
    /// the file visible.
    pub(crate) async fn finish(mut self, sync: bool) -> Result<(), InitError> {
        if !self.batch.is_empty() {
            self.flush_batch().await?;
        }
        let file = self.idle_file().await?;
        if sync {
            let path = self.path.clone();
            tokio::task::spawn_blocking(move || file.sync_data())
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r)
                .map_err(|e| InitError::io("sync", path, e))?;
        }
        Ok(())
    }
}
