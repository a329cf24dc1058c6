//! Checkpoints of the demo trainer: model weights, optimizer state and step, written atomically and
//! checksummed, so a restarted job resumes from the newest checkpoint that is whole.
//!
//! A checkpoint is one object named `ckpt-<step, 10 digits>.ktckpt`: a header line
//! `KTCKPT v1 sha256=<hex> len=<bytes>` and a JSON payload ([`Checkpoint`]) whose floats are stored as
//! their IEEE-754 bit patterns, so a restore is bit-exact. Where it lives is a [`CheckpointStore`]:
//! [`DirStore`] (a directory: written to a hidden temporary file, synced, renamed, the directory synced)
//! here; object stores (S3 puts are atomic) implement the same trait elsewhere.
//!
//! [`load_latest`] tries checkpoints newest first and returns the first whose length, checksum and
//! format hold; every one it skips (partial write, flipped byte, foreign file) comes back as a warning,
//! and is never loaded.
//!
//! ```
//! use kubetrain_collective::checkpoint::{Checkpoint, DirStore, load_latest, save};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = DirStore::new(dir.path());
//! let ckpt = Checkpoint::new(40, vec![0.5, -1.0], 0.9, vec![0.1, 0.2], 0.03);
//! save(&store, &ckpt, 3).unwrap();
//! let (found, warnings) = load_latest(&store).unwrap();
//! assert_eq!(found.unwrap().1, ckpt);
//! assert!(warnings.is_empty());
//! ```

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The payload's format name.
pub const FORMAT: &str = "kubetrain-checkpoint/v1";
/// First bytes of every checkpoint object.
pub const MAGIC: &str = "KTCKPT v1";
/// File name suffix of checkpoint objects.
pub const SUFFIX: &str = ".ktckpt";

/// Model and optimizer state after `step` completed steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// Completed steps: training resumes at this step index.
    pub step: u64,
    /// Model weights (the demo's: features then bias).
    pub model: Vec<f64>,
    /// SGD momentum factor the velocity was built with.
    pub momentum: f64,
    /// Optimizer state: SGD momentum velocity, one per weight.
    pub velocity: Vec<f64>,
    /// Loss of the last completed step.
    pub loss: f64,
}

impl Checkpoint {
    /// A checkpoint of `model` and the optimizer's `velocity` after `step` steps.
    pub fn new(step: u64, model: Vec<f64>, momentum: f64, velocity: Vec<f64>, loss: f64) -> Self {
        Checkpoint {
            step,
            model,
            momentum,
            velocity,
            loss,
        }
    }

    /// The object's bytes: header line, then the JSON payload.
    pub fn encode(&self) -> Vec<u8> {
        let payload = Payload {
            format: FORMAT.into(),
            step: self.step,
            model: bits(&self.model),
            optimizer: OptimizerState {
                kind: "sgd-momentum".into(),
                momentum: self.momentum.to_bits(),
                velocity: bits(&self.velocity),
            },
            loss: self.loss.to_bits(),
        };
        // Serializing plain integers and strings cannot fail.
        let body = serde_json::to_vec(&payload).unwrap_or_default();
        let digest = hex(&Sha256::digest(&body));
        let mut out = format!("{MAGIC} sha256={digest} len={}\n", body.len()).into_bytes();
        out.extend_from_slice(&body);
        out
    }

    /// Reads an object written by [`Checkpoint::encode`]; the error says what does not hold.
    pub fn decode(bytes: &[u8]) -> Result<Self, CheckpointError> {
        let newline = bytes
            .iter()
            .position(|&b| b == b'\n')
            .ok_or(CheckpointError::NoHeader)?;
        let header =
            std::str::from_utf8(&bytes[..newline]).map_err(|_| CheckpointError::HeaderNotText)?;
        let rest = header
            .strip_prefix(MAGIC)
            .ok_or(CheckpointError::NotACheckpoint)?;
        let mut digest = None;
        let mut len = None;
        for field in rest.split_whitespace() {
            if let Some(v) = field.strip_prefix("sha256=") {
                digest = Some(v.to_string());
            } else if let Some(v) = field.strip_prefix("len=") {
                len = v.parse::<usize>().ok();
            }
        }
        let (Some(digest), Some(len)) = (digest, len) else {
            return Err(CheckpointError::HeaderFields);
        };
        let body = &bytes[newline + 1..];
        if body.len() != len {
            return Err(CheckpointError::Length {
                payload: body.len(),
                header: len,
            });
        }
        let actual = hex(&Sha256::digest(body));
        if actual != digest {
            return Err(CheckpointError::Checksum {
                header: digest,
                payload: actual,
            });
        }
        let p: Payload = serde_json::from_slice(body).map_err(CheckpointError::Payload)?;
        if p.format != FORMAT {
            return Err(CheckpointError::Format(p.format));
        }
        if p.optimizer.kind != "sgd-momentum" {
            return Err(CheckpointError::Optimizer(p.optimizer.kind));
        }
        if p.optimizer.velocity.len() != p.model.len() {
            return Err(CheckpointError::Velocities {
                velocities: p.optimizer.velocity.len(),
                weights: p.model.len(),
            });
        }
        Ok(Checkpoint {
            step: p.step,
            model: floats(&p.model),
            momentum: f64::from_bits(p.optimizer.momentum),
            velocity: floats(&p.optimizer.velocity),
            loss: f64::from_bits(p.loss),
        })
    }
}

/// Why [`Checkpoint::decode`] rejected an object.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// No newline: not a checkpoint, or the header itself was cut short.
    #[error("no header line (not a checkpoint, or written partially)")]
    NoHeader,
    /// The header line is not UTF-8.
    #[error("header is not text")]
    HeaderNotText,
    /// The header does not start with [`MAGIC`].
    #[error("header does not start with {MAGIC:?}")]
    NotACheckpoint,
    /// The header lacks its checksum or length.
    #[error("header lacks sha256= or len=")]
    HeaderFields,
    /// The payload's length differs from the header's.
    #[error("payload is {payload} bytes, header says {header} (partially written)")]
    Length {
        /// Bytes after the header line.
        payload: usize,
        /// The header's `len=`.
        header: usize,
    },
    /// The payload's SHA-256 differs from the header's.
    #[error("sha256 mismatch: header {header}, payload {payload} (corrupt)")]
    Checksum {
        /// The header's `sha256=`.
        header: String,
        /// The payload's digest.
        payload: String,
    },
    /// The payload is not the expected JSON.
    #[error("payload is not valid: {0}")]
    Payload(#[source] serde_json::Error),
    /// The payload names another format.
    #[error("format {0:?}, expected {FORMAT:?}")]
    Format(String),
    /// The optimizer state is not SGD with momentum.
    #[error("optimizer {0:?}, expected \"sgd-momentum\"")]
    Optimizer(String),
    /// The optimizer state does not match the model's size.
    #[error("optimizer has {velocities} velocities for {weights} weights")]
    Velocities {
        /// Velocities in the optimizer state.
        velocities: usize,
        /// Weights in the model.
        weights: usize,
    },
}

#[derive(Serialize, Deserialize)]
struct Payload {
    format: String,
    step: u64,
    model: Vec<u64>,
    optimizer: OptimizerState,
    loss: u64,
}

#[derive(Serialize, Deserialize)]
struct OptimizerState {
    kind: String,
    momentum: u64,
    velocity: Vec<u64>,
}

fn bits(v: &[f64]) -> Vec<u64> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn floats(v: &[u64]) -> Vec<f64> {
    v.iter().map(|&x| f64::from_bits(x)).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The object name of the checkpoint after `step` steps.
pub fn object_name(step: u64) -> String {
    format!("ckpt-{step:010}{SUFFIX}")
}

/// The step of a checkpoint object name; `None` for any other name (temporary files included).
pub fn step_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("ckpt-")?.strip_suffix(SUFFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Where checkpoints are kept. `put` must be atomic: a reader sees the whole object or none.
pub trait CheckpointStore {
    /// Where, for messages (`/path/to/dir`, `s3://bucket/prefix`).
    fn location(&self) -> String;
    /// Stores `bytes` under `name`, replacing any object of that name, atomically.
    fn put(&self, name: &str, bytes: &[u8]) -> io::Result<()>;
    /// Every object name (not only checkpoints); an absent location lists nothing.
    fn list(&self) -> io::Result<Vec<String>>;
    /// The object's bytes.
    fn get(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Removes the object (absent is fine).
    fn delete(&self, name: &str) -> io::Result<()>;
}

/// Checkpoints as files of one directory (created on first write).
#[derive(Debug, Clone)]
pub struct DirStore {
    dir: PathBuf,
}

impl DirStore {
    /// A store in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DirStore { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl CheckpointStore for DirStore {
    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn put(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        // Hidden and per process: never listed as a checkpoint, never shared by two writers.
        let tmp = self.dir.join(format!(".{name}.tmp-{}", std::process::id()));
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, self.dir.join(name))?;
            // The rename itself must survive a crash.
            std::fs::File::open(&self.dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry?;
            if entry.file_type()?.is_file()
                && let Some(name) = entry.file_name().to_str()
            {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }

    fn get(&self, name: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.dir.join(name))
    }

    fn delete(&self, name: &str) -> io::Result<()> {
        match std::fs::remove_file(self.dir.join(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// What [`save`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    /// Object name.
    pub name: String,
    /// Its size in bytes.
    pub bytes: usize,
    /// Time to encode and store it.
    pub elapsed: Duration,
    /// Older checkpoints removed to keep the newest `keep`.
    pub pruned: Vec<String>,
}

/// Writes `ckpt` and keeps only the newest `keep` checkpoints (`0` keeps all).
pub fn save(store: &dyn CheckpointStore, ckpt: &Checkpoint, keep: usize) -> io::Result<Saved> {
    let started = Instant::now();
    let bytes = ckpt.encode();
    let name = object_name(ckpt.step);
    store.put(&name, &bytes).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("writing checkpoint {name} to {}: {e}", store.location()),
        )
    })?;
    let elapsed = started.elapsed();
    let mut pruned = Vec::new();
    if keep > 0 {
        let mut steps: Vec<(u64, String)> = store
            .list()?
            .into_iter()
            .filter_map(|n| step_of(&n).map(|s| (s, n)))
            .collect();
        steps.sort();
        let excess = steps.len().saturating_sub(keep);
        for (_, old) in steps.into_iter().take(excess) {
            store.delete(&old)?;
            pruned.push(old);
        }
    }
    Ok(Saved {
        name,
        bytes: bytes.len(),
        elapsed,
        pruned,
    })
}

/// What [`load_latest`] found: the newest whole checkpoint (object name and content), if any, and a
/// warning for each newer one that was skipped.
pub type Latest = (Option<(String, Checkpoint)>, Vec<String>);

/// The newest checkpoint that is whole, and a warning for each newer one that was skipped;
/// `Ok((None, _))` when there is none. Only listing the store is an error.
pub fn load_latest(store: &dyn CheckpointStore) -> io::Result<Latest> {
    let mut candidates: Vec<(u64, String)> = store
        .list()?
        .into_iter()
        .filter_map(|n| step_of(&n).map(|s| (s, n)))
        .collect();
    candidates.sort_by(|a, b| b.cmp(a));
    let mut warnings = Vec::new();
    for (step, name) in candidates {
        let loaded = store
            .get(&name)
            .map_err(|e| format!("cannot read it: {e}"))
            .and_then(|b| Checkpoint::decode(&b).map_err(|e| e.to_string()));
        match loaded {
            Ok(ckpt) if ckpt.step == step => return Ok((Some((name, ckpt)), warnings)),
            Ok(ckpt) => warnings.push(format!(
                "skipping checkpoint {name} in {}: it holds step {}, its name says {step}",
                store.location(),
                ckpt.step
            )),
            Err(why) => warnings.push(format!(
                "skipping checkpoint {name} in {}: {why}",
                store.location()
            )),
        }
    }
    Ok((None, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(step: u64) -> Checkpoint {
        Checkpoint::new(
            step,
            vec![0.1, -2.5, f64::MIN_POSITIVE, 1.0 / 3.0],
            0.9,
            vec![1e-300, 0.0, -0.0, 7.25],
            0.125,
        )
    }

    #[test]
    fn round_trip_is_bit_exact() {
        let c = sample(7);
        let back = Checkpoint::decode(&c.encode()).unwrap();
        assert_eq!(back, c);
        assert_eq!(back.velocity[2].to_bits(), (-0.0f64).to_bits());
    }

    #[test]
    fn names() {
        assert_eq!(object_name(42), "ckpt-0000000042.ktckpt");
        assert_eq!(step_of("ckpt-0000000042.ktckpt"), Some(42));
        for bad in [
            ".ckpt-0000000042.ktckpt.tmp-1",
            "ckpt-.ktckpt",
            "ckpt-12a.ktckpt",
            "model.bin",
        ] {
            assert_eq!(step_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn damaged_objects_are_refused_with_the_reason() {
        let good = sample(3).encode();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "truncated",
                good[..good.len() - 5].to_vec(),
                "partially written",
            ),
            ("empty", Vec::new(), "no header line"),
            ("header only", good[..40].to_vec(), "no header line"),
            ("foreign", b"hello\nworld".to_vec(), "does not start with"),
            (
                "flipped byte",
                {
                    let mut b = good.clone();
                    let last = b.len() - 3;
                    b[last] ^= 0x01;
                    b
                },
                "sha256 mismatch",
            ),
        ];
        for (what, bytes, want) in cases {
            let err = Checkpoint::decode(&bytes).unwrap_err().to_string();
            assert!(err.contains(want), "{what}: {err}");
        }
    }

    #[test]
    fn newest_valid_wins_and_damaged_ones_are_skipped_with_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::new(dir.path().join("ckpt"));
        assert_eq!(load_latest(&store).unwrap().0, None);
        for step in [10, 20, 30] {
            save(&store, &sample(step), 0).unwrap();
        }
        // 30 is truncated (a crash mid-copy), 20 has a flipped byte, a temp file is lying around.
        let p30 = store.dir().join(object_name(30));
        let b = std::fs::read(&p30).unwrap();
        std::fs::write(&p30, &b[..b.len() / 2]).unwrap();
        let p20 = store.dir().join(object_name(20));
        let mut b = std::fs::read(&p20).unwrap();
        let i = b.len() - 2;
        b[i] ^= 0x40;
        std::fs::write(&p20, &b).unwrap();
        std::fs::write(
            store.dir().join(".ckpt-0000000040.ktckpt.tmp-9"),
            b"partial",
        )
        .unwrap();
        let (found, warnings) = load_latest(&store).unwrap();
        let (name, ckpt) = found.unwrap();
        assert_eq!((name.as_str(), ckpt.step), ("ckpt-0000000010.ktckpt", 10));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].contains("ckpt-0000000030.ktckpt")
                && warnings[0].contains("partially written")
        );
        assert!(
            warnings[1].contains("ckpt-0000000020.ktckpt")
                && warnings[1].contains("sha256 mismatch")
        );
    }

    #[test]
    fn save_prunes_to_keep_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::new(dir.path());
        for step in 1..=5 {
            save(&store, &sample(step), 2).unwrap();
        }
        let mut names = store.list().unwrap();
        names.sort();
        assert_eq!(names, [object_name(4), object_name(5)]);
    }
}
