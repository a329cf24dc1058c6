//! The staging directory, `<destination>/.kubetrain-initializer/partial/`: every file (and every
//! version tag) is written there under a name only this run makes (`<n>.part`), then renamed
//! into its final place. The state directory is reserved (remote files below it are refused), so
//! no remote name can ever be, or replace, a file being written, and a crash leaves its
//! leftovers in one place the next run empties. Blocking: call from the blocking pool.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::InitError;
use crate::safe_fs::Dir;

/// Directory below the destination that belongs to the initializer (version tags, staging).
/// Remote files whose path starts with it are refused.
pub(crate) const STATE_DIR: &str = ".kubetrain-initializer";

/// Where files are written before they are renamed into place, relative to the destination.
const STAGING_DIR: &str = ".kubetrain-initializer/partial";

/// The open staging directory and the next free name in it.
#[derive(Debug)]
pub(crate) struct Staging {
    dir: Dir,
    next: AtomicU64,
}

impl Staging {
    /// Opens (creating) the staging directory below `root` and empties it: whatever is there
    /// was left by an interrupted run. Returns it and the number of files removed.
    pub(crate) fn open(root: &Dir) -> Result<(Self, usize), InitError> {
        let dir = root.open_dir(STAGING_DIR, true)?.ok_or_else(|| {
            InitError::io(
                "create directory",
                root.path().join(STAGING_DIR),
                std::io::ErrorKind::NotFound.into(),
            )
        })?;
        let mut removed = 0;
        let entries =
            std::fs::read_dir(dir.path()).map_err(|e| InitError::io("clean", dir.path(), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| InitError::io("clean", dir.path(), e))?;
            // Unlinked through the directory's descriptor: only names in it are touched.
            if let Some(name) = entry.file_name().to_str() {
                dir.remove(name)?;
                removed += 1;
            }
        }
        let staging = Self {
            dir,
            next: AtomicU64::new(0),
        };
        Ok((staging, removed))
    }

    /// A fresh name in the staging directory, never handed out twice by this run.
    pub(crate) fn reserve(&self) -> String {
        format!("{}.part", self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// The staging directory.
    pub(crate) fn dir(&self) -> &Dir {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_empties_and_hands_out_fresh_names() {
        let dest = tempfile::tempdir().unwrap();
        let staged = dest.path().join(STAGING_DIR);
        std::fs::create_dir_all(&staged).unwrap();
        std::fs::write(staged.join("7.part"), b"half").unwrap();
        std::fs::write(dest.path().join(".a.kubetrain-partial"), b"a remote file").unwrap();
        let root = Dir::open_root(dest.path()).unwrap();
        let (staging, removed) = Staging::open(&root).unwrap();
        assert_eq!(removed, 1);
        assert!(std::fs::read_dir(&staged).unwrap().next().is_none());
        assert!(
            dest.path().join(".a.kubetrain-partial").exists(),
            "only the staging dir is emptied"
        );
        let names: Vec<String> = (0..3).map(|_| staging.reserve()).collect();
        assert_eq!(names, ["0.part", "1.part", "2.part"]);
        assert_eq!(staging.dir().path(), staged);
    }
}
