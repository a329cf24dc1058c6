//! One run at a time per TrainJob: each run has its own directory (a run id under
//! `<runs tree>/<namespace>/<name>/`, see [`super::tree`]), and a second run of the same namespace/name while one is in
//! progress is refused (not queued) with an error naming the run in progress.
//!
//! The guard is an exclusive `flock` on `<dir>/.lock`, where `dir` is the job's runs directory (or the run
//! directory given with `--run-dir`, so that two runs into one directory are refused too); the holder writes
//! its process id and run directory into the file for the refusal message. The kernel drops the lock when
//! the process ends, however it ends.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::{Flock, FlockArg};

use super::error::PlanError;

/// The lock of a run in progress; dropping every clone releases it.
#[derive(Clone, Debug)]
pub struct RunLock {
    path: PathBuf,
    _lock: Arc<Flock<File>>,
}

impl PartialEq for RunLock {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

impl Eq for RunLock {}

impl RunLock {
    /// Takes the lock of `dir` for the run of `namespace/name` in `run_dir`, or refuses with
    /// [`PlanError::AlreadyRunning`] when another run holds it.
    pub fn acquire(
        dir: &Path,
        namespace: &str,
        name: &str,
        run_dir: &Path,
    ) -> Result<Self, PlanError> {
        let io = |source| PlanError::RunDir {
            dir: dir.to_path_buf(),
            source,
        };
        super::tree::create_private_dir(dir).map_err(io)?;
        let path = dir.join(".lock");
        let file = std::os::unix::fs::OpenOptionsExt::mode(&mut std::fs::OpenOptions::new(), 0o600)
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io)?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                let holder = format!(
                    "pid {}, run directory {}",
                    std::process::id(),
                    run_dir.display()
                );
                // The holder's description is a courtesy for the refusal message: failing to write it
                // does not stop the run.
                let _ = lock.set_len(0);
                let _ = lock.rewind();
                let _ = lock.write_all(holder.as_bytes());
                Ok(Self {
                    path,
                    _lock: Arc::new(lock),
                })
            }
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                if holder.is_empty() {
                    holder = format!("lock {}", path.display());
                }
                Err(PlanError::AlreadyRunning {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    holder,
                })
            }
            Err((_, errno)) => Err(io(std::io::Error::from(errno))),
        }
    }
}

/// A new run id: the UTC time and this process's id (`20261201T142530Z-4242`), with a counter when one
/// process starts several runs in the same second (`...-4242-1`).
pub fn new_run_id() -> String {
    static STARTED: AtomicU64 = AtomicU64::new(0);
    let n = STARTED.fetch_add(1, Ordering::Relaxed);
    let time = k8s_openapi::jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ");
    let pid = std::process::id();
    if n == 0 {
        format!("{time}-{pid}")
    } else {
        format!("{time}-{pid}-{n}")
    }
}
