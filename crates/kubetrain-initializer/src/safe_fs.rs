//! Writes confined to the destination directory. Every directory below the destination is opened
//! relative to its parent with `O_NOFOLLOW | O_DIRECTORY`, and files with `O_NOFOLLOW`, so a
//! symbolic link planted inside the destination is refused, never followed: no file lands outside
//! it, whatever the link points to. The destination itself may be a link (it is configuration).
//!
//! Blocking: call from the blocking pool.

use std::fs::{File, Permissions};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, renameat};
use nix::sys::stat::{Mode, SFlag, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use crate::error::InitError;

/// Mode of the directories the initializer creates below the destination (before the umask).
pub(crate) const DIR_MODE: u32 = 0o750;

/// An open directory at or below the destination.
#[derive(Debug)]
pub(crate) struct Dir {
    fd: OwnedFd,
    /// For messages only; never used to open anything.
    path: PathBuf,
}

impl Dir {
    /// Opens the destination directory itself (following a link there, which is configuration).
    pub(crate) fn open_root(path: &Path) -> Result<Self, InitError> {
        let fd = openat(
            nix::fcntl::AT_FDCWD,
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| InitError::io("open directory", path, e.into()))?;
        Ok(Self {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The display path of this directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the directory `relative` (`/`-separated plain names) below this one, one component
    /// at a time without following links. Missing directories are created when `create` is set
    /// (mode [`DIR_MODE`]), else `Ok(None)`.
    pub(crate) fn open_dir(&self, relative: &str, create: bool) -> Result<Option<Dir>, InitError> {
        let mut current: Option<Dir> = None;
        for name in relative.split('/').filter(|s| !s.is_empty()) {
            let parent = current.as_ref().unwrap_or(self);
            let path = parent.path.join(name);
            let open = || {
                openat(
                    &parent.fd,
                    name,
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
            };
            let fd = match open() {
                Ok(fd) => fd,
                Err(Errno::ENOENT) if create => {
                    match mkdirat(&parent.fd, name, Mode::from_bits_truncate(DIR_MODE)) {
                        // Another download may have created it meanwhile.
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(InitError::io("create directory", path, e.into())),
                    }
                    open().map_err(|e| parent.refusal(name, e))?
                }
                Err(Errno::ENOENT) => return Ok(None),
                Err(e) => return Err(parent.refusal(name, e)),
            };
            current = Some(Dir { fd, path });
        }
        match current {
            Some(dir) => Ok(Some(dir)),
            None => Ok(Some(Dir {
                fd: self
                    .fd
                    .try_clone()
                    .map_err(|e| InitError::io("open directory", &self.path, e))?,
                path: self.path.clone(),
            })),
        }
    }

    /// Explains why `name` could not be opened as a directory.
    fn refusal(&self, name: &str, err: Errno) -> InitError {
        let path = self.path.join(name);
        match self.kind(name) {
            Some(kind) if kind == SFlag::S_IFLNK => InitError::UnsafeDestination {
                path,
                detail:
                    "it is a symbolic link inside the destination, and downloads never follow links"
                        .into(),
            },
            Some(kind) if kind != SFlag::S_IFDIR => InitError::UnsafeDestination {
                path,
                detail: "it exists and is not a directory".into(),
            },
            _ => InitError::io("open directory", path, err.into()),
        }
    }

    /// The file type of `name` in this directory, without following a link.
    fn kind(&self, name: &str) -> Option<SFlag> {
        fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .ok()
            .map(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT)
    }

    /// Opens the regular file `name` for reading; `None` when it is missing, a link or not a
    /// regular file.
    pub(crate) fn open_file(&self, name: &str) -> Option<File> {
        let fd = openat(
            &self.fd,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
            Mode::empty(),
        )
        .ok()?;
        let file = File::from(fd);
        file.metadata().ok()?.is_file().then_some(file)
    }

    /// Creates `name` afresh (whatever was there, link or file, is removed first) for writing
    /// (and reading back),
    /// with exactly `mode` (the umask does not apply).
    pub(crate) fn create_file(&self, name: &str, mode: u32) -> Result<File, InitError> {
        let path = self.path.join(name);
        self.remove(name)?;
        let fd = openat(
            &self.fd,
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )
        .map_err(|e| InitError::io("create", &path, e.into()))?;
        let file = File::from(fd);
        file.set_permissions(Permissions::from_mode(mode))
            .map_err(|e| InitError::io("set the mode of", &path, e))?;
        Ok(file)
    }

    /// Removes the file (or link) `name`; a missing one is fine.
    pub(crate) fn remove(&self, name: &str) -> Result<(), InitError> {
        match unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(InitError::io("remove", self.path.join(name), e.into())),
        }
    }

    /// Renames `from` in this directory to `to` in `target` (atomic on one file system; a link
    /// at `to` is replaced, not followed).
    pub(crate) fn move_to(&self, from: &str, target: &Dir, to: &str) -> Result<(), InitError> {
        renameat(&self.fd, from, &target.fd, to)
            .map_err(|e| InitError::io("rename into place", target.path.join(to), e.into()))
    }
}

/// Splits a checked relative path into its directory part and file name.
pub(crate) fn split_parent(relative: &str) -> (&str, &str) {
    let trimmed = relative.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some((dir, name)) => (dir, name),
        None => ("", trimmed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};

    #[test]
    fn creates_directories_and_files_below_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = Dir::open_root(dir.path()).unwrap();
        let sub = root.open_dir("a/b", true).unwrap().unwrap();
        assert_eq!(sub.path(), dir.path().join("a/b"));
        let mut file = sub.create_file("f", 0o640).unwrap();
        file.write_all(b"x").unwrap();
        let meta = std::fs::metadata(dir.path().join("a/b/f")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o640);
        sub.move_to("f", &sub, "g").unwrap();
        let mut text = String::new();
        sub.open_file("g")
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "x");
        assert!(sub.open_file("f").is_none());
        assert!(root.open_dir("missing/x", false).unwrap().is_none());
        assert_eq!(split_parent("a/b/c.json"), ("a/b", "c.json"));
        assert_eq!(split_parent("c.json"), ("", "c.json"));
    }

    #[test]
    fn refuses_links_at_every_component() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("a/link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("f"), dir.path().join("a/file-link"))
            .unwrap();
        let root = Dir::open_root(dir.path()).unwrap();
        let err = root.open_dir("a/link/deeper", true).unwrap_err();
        assert!(
            err.to_string().contains("a/link") && err.to_string().contains("symbolic link"),
            "{err}"
        );
        assert!(root.open_dir("a/link", false).is_err());
        let a = root.open_dir("a", false).unwrap().unwrap();
        // Reading never follows a link; writing replaces the link itself.
        assert!(a.open_file("file-link").is_none());
        a.create_file("file-link", 0o640).unwrap();
        assert!(!outside.path().join("f").exists());
        assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
    }
}
