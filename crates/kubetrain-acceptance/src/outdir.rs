//! Where a run writes, so that no run deletes or overwrites anything it did not create.
//!
//! `--out DIR` is a report directory the tool owns: one it created, or an empty one it adopted, marked
//! by a [`MARKER`] file. A non-empty directory without the marker is refused, and so is a symbolic
//! link. Every run writes into a fresh directory inside it, `<UTC time>-<n>`, created exclusively, and
//! [`LATEST`] (a symbolic link) names the newest, replaced atomically; earlier runs stay as they were.
//! Nothing here ever removes a file.

use std::io;
use std::path::{Component, Path, PathBuf};

/// The file that marks a report directory as the tool's.
pub const MARKER: &str = ".kubetrain-acceptance";
/// The symbolic link to the newest run directory.
pub const LATEST: &str = "latest";

/// Why a report directory cannot be used: the path and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{}: {why}", path.display())]
pub struct OutDirError {
    path: PathBuf,
    why: String,
}

fn refuse(path: &Path, why: impl Into<String>) -> OutDirError {
    OutDirError {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

fn io_error(path: &Path, e: io::Error) -> OutDirError {
    refuse(path, e.to_string())
}

/// Makes `out` the tool's report directory (creating it, or adopting it when it is empty) and creates
/// a fresh run directory in it; returns the run directory.
pub fn create_run_dir(out: &Path) -> Result<PathBuf, OutDirError> {
    claim(out)?;
    let stamp = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    fresh_dir(out, &stamp)
}

/// Points [`LATEST`] in `out` at `run` (a directory in `out`): a new link renamed over the old one, so
/// a reader sees the previous run or this one, never neither. A `latest` that is not a symbolic link is
/// someone else's and is left alone (an error).
pub fn link_latest(out: &Path, run: &Path) -> Result<(), OutDirError> {
    let name = run
        .file_name()
        .ok_or_else(|| refuse(run, "names no directory"))?;
    let latest = out.join(LATEST);
    if let Ok(m) = std::fs::symlink_metadata(&latest)
        && !m.file_type().is_symlink()
    {
        return Err(refuse(
            &latest,
            "exists and is not a symbolic link: left as it is",
        ));
    }
    // A temporary name no other run uses at the same time; an existing one is skipped, never removed.
    for n in 0..100 {
        let tmp = out.join(format!(".{LATEST}.{}.{n}", std::process::id()));
        match std::os::unix::fs::symlink(name, &tmp) {
            Ok(()) => return std::fs::rename(&tmp, &latest).map_err(|e| io_error(&latest, e)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error(&tmp, e)),
        }
    }
    Err(refuse(out, "no free temporary name for the latest link"))
}

/// Resolves a relative location (`a/../b` is `b`) without touching the file system and refuses one that
/// leaves the directory it is relative to, names that directory itself, or is absolute.
pub(crate) fn resolve_inside(location: &str) -> Result<PathBuf, String> {
    let mut parts = Vec::new();
    for c in Path::new(location).components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(format!(
                        "{location:?} leaves the run directory once `..` is resolved: give a path inside it (e.g. \"checkpoints\") or an absolute directory"
                    ));
                }
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("{location:?} is absolute, not relative"));
            }
        }
    }
    if parts.is_empty() {
        return Err(format!(
            "{location:?} names the run directory itself: give a subdirectory (e.g. \"checkpoints\")"
        ));
    }
    Ok(parts.iter().collect())
}

/// Makes `out` ours: refuses a symbolic link, a non-directory and a non-empty unmarked directory.
fn claim(out: &Path) -> Result<(), OutDirError> {
    match std::fs::symlink_metadata(out) {
        Ok(m) if m.file_type().is_symlink() => Err(refuse(
            out,
            "is a symbolic link, and the report is never written through one: give the directory it points to, or a new path",
        )),
        Ok(m) if !m.is_dir() => Err(refuse(out, "exists and is not a directory")),
        Ok(_) => {
            if is_marked(out) {
                return Ok(());
            }
            let mut entries = std::fs::read_dir(out).map_err(|e| io_error(out, e))?;
            if entries.next().is_some() {
                return Err(refuse(
                    out,
                    format!(
                        "is not empty and has no {MARKER} file, so kubetrain acceptance did not create it; a run writes only into a report directory of its own: give a new or empty directory"
                    ),
                ));
            }
            mark(out)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            create_missing(out)?;
            mark(out)
        }
        Err(e) => Err(io_error(out, e)),
    }
}

fn is_marked(out: &Path) -> bool {
    std::fs::symlink_metadata(out.join(MARKER)).is_ok_and(|m| m.file_type().is_file())
}

/// Creates `out` and its missing parents one by one, each exclusively: a path that appears meanwhile
/// (a symbolic link included) is an error, never followed.
fn create_missing(out: &Path) -> Result<(), OutDirError> {
    let mut missing = Vec::new();
    let mut p = out;
    while std::fs::symlink_metadata(p).is_err_and(|e| e.kind() == io::ErrorKind::NotFound) {
        missing.push(p);
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => break,
        }
    }
    for dir in missing.iter().rev() {
        std::fs::create_dir(dir).map_err(|e| io_error(dir, e))?;
    }
    Ok(())
}

fn mark(out: &Path) -> Result<(), OutDirError> {
    let path = out.join(MARKER);
    let text = format!(
        "kubetrain acceptance report directory: each run writes a new <UTC time>-<n> directory here, and `{LATEST}` links the newest.\n"
    );
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .and_then(|mut f| io::Write::write_all(&mut f, text.as_bytes()))
        .map_err(|e| io_error(&path, e))
}

/// Creates `<stamp>-<n>` in `out` with the first `n` not taken.
fn fresh_dir(out: &Path, stamp: &str) -> Result<PathBuf, OutDirError> {
    for n in 1..=1000 {
        let dir = out.join(format!("{stamp}-{n}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error(&dir, e)),
        }
    }
    Err(refuse(
        out,
        format!("1000 run directories {stamp}-<n> exist already"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_new_path_is_created_marked_and_gets_a_run_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("a/b/report");
        let run = create_run_dir(&out).unwrap();
        assert!(run.is_dir() && run.parent() == Some(out.as_path()));
        assert!(is_marked(&out));
    }

    #[test]
    fn reruns_get_new_directories_and_latest_names_the_newest() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("report");
        let first = create_run_dir(&out).unwrap();
        std::fs::write(first.join("acceptance.json"), "first").unwrap();
        link_latest(&out, &first).unwrap();
        let second = create_run_dir(&out).unwrap();
        assert_ne!(first, second);
        link_latest(&out, &second).unwrap();
        assert_eq!(
            std::fs::read_to_string(first.join("acceptance.json")).unwrap(),
            "first"
        );
        assert_eq!(
            std::fs::read_link(out.join(LATEST)).unwrap(),
            second.file_name().unwrap()
        );
        assert_eq!(names(&out).len(), 4, "{:?}", names(&out)); // marker, two runs, latest
    }

    #[test]
    fn the_same_second_gets_the_next_number() {
        let tmp = tempfile::tempdir().unwrap();
        let a = fresh_dir(tmp.path(), "20260101T000000Z").unwrap();
        let b = fresh_dir(tmp.path(), "20260101T000000Z").unwrap();
        assert!(a.ends_with("20260101T000000Z-1") && b.ends_with("20260101T000000Z-2"));
    }

    #[test]
    fn an_empty_directory_is_adopted() {
        let tmp = tempfile::tempdir().unwrap();
        create_run_dir(tmp.path()).unwrap();
        assert!(is_marked(tmp.path()));
    }

    #[test]
    fn a_non_empty_directory_without_the_marker_is_refused_and_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("run")).unwrap();
        std::fs::write(tmp.path().join("run/thesis.tex"), "mine").unwrap();
        let err = create_run_dir(tmp.path()).unwrap_err().to_string();
        assert!(
            err.contains("is not empty and has no .kubetrain-acceptance"),
            "{err}"
        );
        assert_eq!(names(tmp.path()), ["run"]);
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("run/thesis.tex")).unwrap(),
            "mine"
        );
    }

    #[test]
    fn a_marker_that_is_a_symlink_does_not_make_a_directory_ours() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(tmp.path().join("elsewhere"), "").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("elsewhere"), out.join(MARKER)).unwrap();
        assert!(create_run_dir(&out).is_err());
    }

    #[test]
    fn a_symlinked_out_is_refused_and_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = create_run_dir(&link).unwrap_err().to_string();
        assert!(err.contains("is a symbolic link"), "{err}");
        assert!(names(&target).is_empty());
        // Dangling: the link is not created through either.
        let dangling = tmp.path().join("dangling");
        std::os::unix::fs::symlink(tmp.path().join("nowhere"), &dangling).unwrap();
        assert!(create_run_dir(&dangling).is_err());
        assert!(!tmp.path().join("nowhere").exists());
    }

    #[test]
    fn a_file_as_out_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let err = create_run_dir(&file).unwrap_err().to_string();
        assert!(err.contains("not a directory"), "{err}");
    }

    #[test]
    fn a_latest_that_is_not_a_link_is_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let run = create_run_dir(tmp.path()).unwrap();
        std::fs::write(tmp.path().join(LATEST), "notes").unwrap();
        assert!(link_latest(tmp.path(), &run).is_err());
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(LATEST)).unwrap(),
            "notes"
        );
    }

    #[test]
    fn relative_locations_resolve_inside_or_are_refused() {
        for (location, want) in [
            ("ckpt", Ok("ckpt")),
            ("./a/../ckpt/", Ok("ckpt")),
            ("a/b/../c", Ok("a/c")),
            ("../ckpt", Err("leaves the run directory")),
            ("a/../../ckpt", Err("leaves the run directory")),
            ("a/../..", Err("leaves the run directory")),
            (".", Err("names the run directory itself")),
            ("a/..", Err("names the run directory itself")),
            ("/abs", Err("is absolute")),
        ] {
            match (resolve_inside(location), want) {
                (Ok(p), Ok(w)) => assert_eq!(p, Path::new(w), "{location}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{location}: {e}"),
                (got, _) => panic!("{location}: {got:?}"),
            }
        }
    }
}
