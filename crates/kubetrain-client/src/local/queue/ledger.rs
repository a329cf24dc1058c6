//! The ledger file of the local queue: every run that is admitted or waiting on this machine, shared by all
//! processes through an exclusive `flock` on a lock file next to it.
//!
//! The ledger is JSON (`ledger.json`) and is replaced atomically (written to a temporary file, then
//! renamed), so a crash while writing never leaves half a ledger. Entries of processes that are gone are
//! reclaimed by whoever opens the ledger next.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use super::QueueError;
pub use super::entry::{Entry, EntryState, PodSetEntry};

/// The format version written into the ledger; another version is set aside and rebuilt.
pub const LEDGER_VERSION: u32 = 1;

/// The ledger's file name inside the queue directory.
pub const LEDGER_FILE: &str = "ledger.json";

/// The lock file's name inside the queue directory.
pub const LOCK_FILE: &str = "ledger.lock";

/// The whole ledger.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ledger {
    /// [`LEDGER_VERSION`].
    pub version: u32,
    /// The arrival number the next entry gets (arrival order is queue order).
    pub next_seq: u64,
    /// Admitted and waiting runs, in no particular order.
    pub entries: Vec<Entry>,
}

impl Ledger {
    /// An empty ledger of the current version.
    pub fn new() -> Self {
        Ledger {
            version: LEDGER_VERSION,
            next_seq: 1,
            entries: Vec::new(),
        }
    }

    /// The entry with this id.
    pub fn entry_mut(&mut self, id: &str) -> Option<&mut Entry> {
        self.entries.iter_mut().find(|e| e.id == id)
    }

    /// Waiting entries in queue order (arrival).
    pub fn waiting(&self) -> Vec<&Entry> {
        let mut w: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| e.state == EntryState::Waiting)
            .collect();
        w.sort_by_key(|e| e.seq);
        w
    }

    /// Takes the next arrival number.
    pub fn take_seq(&mut self) -> u64 {
        let floor = self.entries.iter().map(|e| e.seq + 1).max().unwrap_or(1);
        let seq = self.next_seq.max(floor);
        self.next_seq = seq + 1;
        seq
    }

    /// Removes entries whose process is gone; returns them.
    pub fn reclaim_dead(&mut self) -> Vec<Entry> {
        let (alive, dead): (Vec<Entry>, Vec<Entry>) = std::mem::take(&mut self.entries)
            .into_iter()
            .partition(|e| process_alive(e.pid, e.start_ticks));
        self.entries = alive;
        dead
    }
}

/// Whether `pid` still runs and is the process that started at `start_ticks` (when known). A zombie is
/// dead; a pid that is not a valid process id (0, above `i32::MAX`) is dead.
pub fn process_alive(pid: u32, start_ticks: Option<u64>) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        // kill(0, ...) would address our own process group: never a holder.
        return false;
    }
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) | Err(Errno::EPERM) => {}
        Err(_) => return false,
    }
    match crate::local::identity::state_and_start(pid) {
        Some((state, _)) if state == 'Z' || state == 'X' => false,
        Some((_, ticks)) => start_ticks.is_none_or(|t| t == ticks),
        None => true,
    }
}

/// The ledger in a directory, opened under its lock.
#[derive(Clone, Debug)]
pub struct LedgerDir {
    dir: PathBuf,
}

/// What a transaction found besides the ledger: a rebuilt ledger, reclaimed entries.
#[derive(Debug, Default)]
pub struct Housekeeping {
    /// One line per thing worth telling the user (ledger set aside, entries of dead processes reclaimed).
    pub notices: Vec<String>,
}

impl LedgerDir {
    /// The ledger in `dir` (created when first used).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        LedgerDir { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Locks the ledger, reads it (an unreadable one is set aside as `ledger.json.corrupt` and rebuilt
    /// empty), reclaims entries of dead processes, runs `f`, writes the ledger back when it changed, and
    /// unlocks.
    pub fn transact<T>(
        &self,
        f: impl FnOnce(&mut Ledger) -> T,
    ) -> Result<(T, Housekeeping), QueueError> {
        let io = |what: &str, path: &Path| {
            let what = what.to_string();
            let path = path.to_path_buf();
            move |source| QueueError::Io { what, path, source }
        };
        std::fs::create_dir_all(&self.dir)
            .map_err(io("creating the queue directory", &self.dir))?;
        let lock_path = self.dir.join(LOCK_FILE);
        let lock_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io("opening the queue lock", &lock_path))?;
        let lock = Flock::lock(lock_file, FlockArg::LockExclusive).map_err(|(_, errno)| {
            QueueError::Lock {
                path: lock_path.clone(),
                source: std::io::Error::from(errno),
            }
        })?;
        let result = self.transact_locked(f);
        // Unlocking a held flock on an open file cannot fail; closing the file would release it anyway.
        drop(lock);
        result
    }

    fn transact_locked<T>(
        &self,
        f: impl FnOnce(&mut Ledger) -> T,
    ) -> Result<(T, Housekeeping), QueueError> {
        let path = self.dir.join(LEDGER_FILE);
        let mut house = Housekeeping::default();
        let before = match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(QueueError::Io {
                    what: "reading the queue ledger".into(),
                    path,
                    source,
                });
            }
        };
        let mut ledger = match before.as_deref().map(parse) {
            None => Ledger::new(),
            Some(Ok(l)) => l,
            Some(Err(why)) => {
                let aside = self.dir.join(format!("{LEDGER_FILE}.corrupt"));
                std::fs::rename(&path, &aside).map_err(|source| QueueError::Io {
                    what: "setting the unreadable queue ledger aside".into(),
                    path: path.clone(),
                    source,
                })?;
                house.notices.push(format!(
                    "the local queue ledger {} was unreadable ({why}); it was moved to {} and rebuilt \
                     empty (runs admitted before are no longer counted)",
                    path.display(),
                    aside.display()
                ));
                Ledger::new()
            }
        };
        for dead in ledger.reclaim_dead() {
            house.notices.push(format!(
                "reclaimed the local queue entry of TrainJob {} (process {} is gone)",
                dead.job, dead.pid
            ));
        }
        let out = f(&mut ledger);
        let after = serde_json::to_vec_pretty(&ledger).map_err(|e| QueueError::Io {
            what: "encoding the queue ledger".into(),
            path: path.clone(),
            source: std::io::Error::other(e),
        })?;
        if before.as_deref() != Some(after.as_slice()) {
            write_atomically(&path, &after)?;
        }
        Ok((out, house))
    }
}

/// Parses a ledger; the error says what is wrong with it.
pub fn parse(bytes: &[u8]) -> Result<Ledger, LedgerError> {
    let ledger: Ledger = serde_json::from_slice(bytes)?;
    if ledger.version != LEDGER_VERSION {
        return Err(LedgerError::Version(ledger.version));
    }
    for (i, e) in ledger.entries.iter().enumerate() {
        for (j, p) in e.pod_sets.iter().enumerate() {
            if p.count < 0 {
                return Err(LedgerError::NegativeCount {
                    entry: i,
                    pod_set: j,
                    count: p.count,
                });
            }
            for (k, v) in &p.requests {
                kubetrain_kueue::quantity::Quantity::parse(v).map_err(|e| {
                    LedgerError::Quantity {
                        entry: i,
                        pod_set: j,
                        resource: k.clone(),
                        value: v.clone(),
                        reason: e.to_string(),
                    }
                })?;
            }
        }
    }
    Ok(ledger)
}

/// Why [`parse`] rejected a ledger.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// Not the ledger's JSON.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// Written by another version of the ledger format.
    #[error("version {0} where {LEDGER_VERSION} is expected")]
    Version(u32),
    /// A pod set with a negative pod count.
    #[error("entries[{entry}].podSets[{pod_set}].count: {count} is negative")]
    NegativeCount {
        /// Index of the entry.
        entry: usize,
        /// Index of the pod set in the entry.
        pod_set: usize,
        /// The count as written.
        count: i32,
    },
    /// A request that is not a Kubernetes quantity.
    #[error("entries[{entry}].podSets[{pod_set}].requests.{resource}: {value:?}: {reason}")]
    Quantity {
        /// Index of the entry.
        entry: usize,
        /// Index of the pod set in the entry.
        pod_set: usize,
        /// The resource name.
        resource: String,
        /// The value as written.
        value: String,
        /// Why it is not a quantity.
        reason: String,
    },
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), QueueError> {
    let tmp = path.with_extension(format!("json.tmp{}", std::process::id()));
    let err = |what: &str, source| QueueError::Io {
        what: what.into(),
        path: tmp.clone(),
        source,
    };
    let mut file = File::create(&tmp).map_err(|e| err("writing the queue ledger", e))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_data())
        .map_err(|e| err("writing the queue ledger", e))?;
    std::fs::rename(&tmp, path).map_err(|e| err("replacing the queue ledger", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_pid_zero_or_huge_is_not() {
        let me = std::process::id();
        let ticks = crate::local::identity::state_and_start(me).map(|(_, t)| t);
        assert!(process_alive(me, ticks));
        assert!(!process_alive(0, None));
        assert!(!process_alive(u32::MAX, None));
        if let Some(t) = ticks {
            assert!(
                !process_alive(me, Some(t + 1)),
                "a reused pid is not the holder"
            );
        }
    }

    #[test]
    fn seq_never_goes_back_below_existing_entries() {
        let mut l = Ledger::new();
        l.entries.push(Entry {
            id: "a".into(),
            job: "default/a".into(),
            seq: 41,
            pid: std::process::id(),
            start_ticks: None,
            state: EntryState::Waiting,
            queued_at_ms: 0,
            pod_sets: Vec::new(),
        });
        assert_eq!(l.take_seq(), 42);
        assert_eq!(l.take_seq(), 43);
    }

    #[test]
    fn wrong_versions_and_garbage_are_reported_not_panicked_on() {
        assert!(parse(b"{").unwrap_err().to_string().contains("EOF"));
        assert_eq!(
            parse(br#"{"version": 9, "nextSeq": 1, "entries": []}"#)
                .unwrap_err()
                .to_string(),
            "version 9 where 1 is expected"
        );
        assert!(parse(br#"{"version": 1, "nextSeq": 1, "entries": [{"id": 3}]}"#).is_err());
        let bad_quantity =
            br#"{"version": 1, "nextSeq": 2, "entries": [{"id": "x", "job": "default/x",
            "seq": 1, "pid": 1, "state": "admitted", "queuedAtMs": 0,
            "podSets": [{"name": "node", "count": 1, "requests": {"cpu": "lots"}}]}]}"#;
        let why = parse(bad_quantity).unwrap_err().to_string();
        assert!(
            why.starts_with("entries[0].podSets[0].requests.cpu: \"lots\""),
            "{why}"
        );
        assert_eq!(
            parse(br#"{"version": 1, "nextSeq": 1, "entries": []}"#).unwrap(),
            Ledger::new()
        );
    }
}
