//! The runs tree of one user: where `kubetrain run` keeps its runs and `--local` commands find them.
//!
//! ```text
//! <root>/                        0700, owned by the user: $KUBETRAIN_RUNS_DIR, or $TMPDIR/kubetrain-runs-<uid>
//!   .queue/                      the local queue's ledger (local::queue)
//!   .ports/                      the port reservations (local::reserve_port)
//!   <namespace>/<name>/          0700; .lock refuses a second run of the job while one is in progress
//!     <run id>/                  0700: run.json (0600), trainjob.yaml (0600), logs/ (0640 files), workspace/
//! ```
//!
//! The root is per user so that no user can plant a record another user's `--local` commands would act on,
//! read another's TrainJob (its inline env may hold secrets) or lock another out. A root that is a symbolic
//! link, belongs to another user, or can be written by others is refused, never repaired: somebody else made
//! it. Namespaces and names become path components only after they are checked as DNS labels, so `../x` or
//! `/etc` never leaves the root.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::identity::euid;

/// The environment variable that moves the runs tree.
pub const RUNS_DIR_ENV: &str = "KUBETRAIN_RUNS_DIR";

/// The runs tree of this user: `$KUBETRAIN_RUNS_DIR`, or `$TMPDIR/kubetrain-runs-<uid>`. Only a path: the runner
/// creates it (mode 0700) when a run starts; see [`existing_root`].
pub fn runs_root() -> PathBuf {
    match std::env::var_os(RUNS_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => std::env::temp_dir().join(format!("kubetrain-runs-{}", euid())),
    }
}

/// Why `path` may not hold this user's runs, if it may not: not a directory, a symbolic link, another
/// user's, or writable by others.
fn unsafe_because(path: &Path, meta: &std::fs::Metadata) -> Option<String> {
    let me = euid();
    if meta.file_type().is_symlink() {
        return Some(format!(
            "{} is a symbolic link; a runs tree must be a directory of your own",
            path.display()
        ));
    }
    if !meta.is_dir() {
        return Some(format!("{} is not a directory", path.display()));
    }
    if meta.uid() != me {
        return Some(format!(
            "{} belongs to uid {}, not to you (uid {me}): somebody else made it",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Some(format!(
            "{} can be written by other users (mode {:o}); `chmod 700` it if it is yours",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    None
}

fn refused(why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("refusing the runs tree: {why} (set {RUNS_DIR_ENV} to a directory of your own)"),
    )
}

/// The runs tree, created `0700` when missing; an error when it exists but is not safely this user's.
pub(crate) fn ensure_root() -> io::Result<PathBuf> {
    let root = runs_root();
    if let Some(parent) = root.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(&root) {
        Ok(()) => {
            // The umask may have taken bits away, never added: set the mode whole anyway.
            std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))?;
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&root)?;
    match unsafe_because(&root, &meta) {
        Some(why) => Err(refused(why)),
        None => Ok(root),
    }
}

/// The runs tree if it exists (`None` when no run was ever made); an error when it is not safely this
/// user's. Reading commands use this, so that they never create the tree.
pub fn existing_root() -> io::Result<Option<PathBuf>> {
    let root = runs_root();
    match std::fs::symlink_metadata(&root) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
        Ok(meta) => match unsafe_because(&root, &meta) {
            Some(why) => Err(refused(why)),
            None => Ok(Some(root)),
        },
    }
}

/// Checks that `value` (a namespace or a TrainJob name, as `what` says) is a DNS label (RFC 1123: at most 63
/// lowercase letters, digits and '-', starting and ending with a letter or digit), as Kubernetes requires of
/// both, before it becomes a path component.
pub(crate) fn check_label(what: &str, value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {value:?} is not a DNS label (at most 63 lowercase letters, digits and '-', starting and \
             ending with a letter or digit)"
        ))
    }
}

/// `<root>/<namespace>/<name>` after both are checked as DNS labels.
pub fn job_dir(root: &Path, namespace: &str, name: &str) -> Result<PathBuf, String> {
    check_label("namespace", namespace)?;
    check_label("TrainJob name", name)?;
    Ok(root.join(namespace).join(name))
}

/// Creates `dir` and its missing parents with mode `0700`.
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Creates `path` afresh with mode 0600 (a run's record, its TrainJob, its token and output may hold secrets):
/// whatever was there is removed first, and a new file is made without following a link.
pub fn create_private_file(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Whether `path` (not followed if it is a link) belongs to this user; `Err` says whose it is.
pub fn check_owned(path: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    let me = euid();
    if meta.file_type().is_symlink() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is a symbolic link, not a file of a run: refusing it",
                path.display()
            ),
        ));
    }
    if meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {}, not to you (uid {me}): not a run of yours, refusing it",
                path.display(),
                meta.uid()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_that_could_leave_the_root_are_refused() {
        for bad in [
            "", "..", ".", "../x", "/etc", "a/b", "A", "-a", "a-", "a_b", "a.b", "a b",
        ] {
            assert!(check_label("name", bad).is_err(), "{bad:?} was accepted");
        }
        assert!(check_label("name", &"a".repeat(64)).is_err());
        for good in ["a", "mnist", "a-1", "0", &"a".repeat(63)] {
            assert_eq!(check_label("name", good), Ok(()), "{good:?}");
        }
        let err = job_dir(Path::new("/r"), "../../etc", "x").unwrap_err();
        assert!(
            err.starts_with("namespace \"../../etc\" is not a DNS label"),
            "{err}"
        );
        assert_eq!(
            job_dir(Path::new("/r"), "default", "mnist"),
            Ok(PathBuf::from("/r/default/mnist"))
        );
    }

    #[test]
    fn a_tree_others_can_write_or_a_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let why = unsafe_because(&open, &std::fs::symlink_metadata(&open).unwrap()).unwrap();
        assert!(
            why.contains("can be written by other users (mode 777)"),
            "{why}"
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let why = unsafe_because(&link, &std::fs::symlink_metadata(&link).unwrap()).unwrap();
        assert!(why.contains("is a symbolic link"), "{why}");
        let mine = dir.path().join("mine");
        create_private_dir(&mine).unwrap();
        assert_eq!(
            unsafe_because(&mine, &std::fs::symlink_metadata(&mine).unwrap()),
            None
        );
        assert_eq!(
            std::fs::metadata(&mine).unwrap().mode() & 0o777,
            0o700,
            "created private"
        );
    }
}
