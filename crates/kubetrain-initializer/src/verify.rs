//! Deciding whether a local file is already complete: same size and same checksum.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use md5::Md5;
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::remote::{Checksum, RemoteFile};

/// Directory below the destination holding version tags of files whose checksum cannot be
/// computed locally (multipart S3 ETags).
pub(crate) const STATE_DIR: &str = ".kubetrain-initializer";

/// Suffix of files being written; they are renamed into place when complete.
pub(crate) const PARTIAL_SUFFIX: &str = ".kubetrain-partial";

/// Where `file`'s version tag is recorded.
pub(crate) fn tag_path(destination: &Path, file: &RemoteFile) -> PathBuf {
    let mut path = destination.join(STATE_DIR).join("tags");
    path.extend(file.relative_path.split('/').filter(|s| !s.is_empty()));
    path
}

/// The temporary name of a file being downloaded: hidden, next to its final name (same file
/// system, so the rename is atomic).
pub(crate) fn partial_path(final_path: &Path) -> PathBuf {
    let name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    final_path.with_file_name(format!(".{name}{PARTIAL_SUFFIX}"))
}

/// Whether the local copy of `file` is complete. Blocking: hashes the file.
pub(crate) fn is_complete(destination: &Path, file: &RemoteFile) -> bool {
    let path = file.local_path(destination);
    let Ok(meta) = std::fs::metadata(&path) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    match file.size {
        Some(size) if size != meta.len() => return false,
        None => return false,
        Some(_) => {}
    }
    let local = |kind| hex_digest(&path, kind);
    match &file.checksum {
        Checksum::Md5(want) => local(DigestKind::Md5).is_some_and(|got| &got == want),
        Checksum::Sha256(want) => local(DigestKind::Sha256).is_some_and(|got| &got == want),
        Checksum::GitSha1(want) => {
            local(DigestKind::GitSha1(meta.len())).is_some_and(|got| &got == want)
        }
        Checksum::Tag(want) => std::fs::read_to_string(tag_path(destination, file))
            .is_ok_and(|recorded| recorded.trim() == want),
        Checksum::Unknown => true,
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum DigestKind {
    Md5,
    Sha256,
    /// Git blob id of a file of this size.
    GitSha1(u64),
}

/// Hex digest of a file; `None` when it cannot be read.
pub(crate) fn hex_digest(path: &Path, kind: DigestKind) -> Option<String> {
    let mut file = File::open(path).ok()?;
    match kind {
        DigestKind::Md5 => digest_reader::<Md5>(&mut file, b""),
        DigestKind::Sha256 => digest_reader::<Sha256>(&mut file, b""),
        DigestKind::GitSha1(size) => {
            digest_reader::<Sha1>(&mut file, format!("blob {size}\0").as_bytes())
        }
    }
}

fn digest_reader<D: Digest>(reader: &mut impl Read, header: &[u8]) -> Option<String> {
    let mut hasher = D::new();
    hasher.update(header);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Some(to_hex(&hasher.finalize()))
}

/// Lower-case hex.
pub(crate) fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// Removes `*.kubetrain-partial` files left by an interrupted run. Blocking.
pub(crate) fn sweep_partials(dir: &Path) -> std::io::Result<usize> {
    let mut removed = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(0);
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        let name = entry.file_name();
        if kind.is_dir() && name != STATE_DIR {
            removed += sweep_partials(&entry.path())?;
        } else if kind.is_file() && name.to_string_lossy().ends_with(PARTIAL_SUFFIX) {
            std::fs::remove_file(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_known_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello\n").unwrap();
        assert_eq!(
            hex_digest(&path, DigestKind::Md5).unwrap(),
            "b1946ac92492d2347c6235b4d2611184"
        );
        assert_eq!(
            hex_digest(&path, DigestKind::Sha256).unwrap(),
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        );
        // `git hash-object` of "hello\n".
        assert_eq!(
            hex_digest(&path, DigestKind::GitSha1(6)).unwrap(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        assert_eq!(
            hex_digest(&dir.path().join("missing"), DigestKind::Md5),
            None
        );
    }

    #[test]
    fn completeness() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/f"), b"hello\n").unwrap();
        let file = |size, checksum| RemoteFile::new("k", "a/f", size, checksum).unwrap();
        let md5 = "b1946ac92492d2347c6235b4d2611184".to_string();
        assert!(is_complete(
            dir.path(),
            &file(Some(6), Checksum::Md5(md5.clone()))
        ));
        assert!(!is_complete(dir.path(), &file(Some(7), Checksum::Md5(md5))));
        assert!(!is_complete(
            dir.path(),
            &file(Some(6), Checksum::Md5("0".repeat(32)))
        ));
        assert!(is_complete(dir.path(), &file(Some(6), Checksum::Unknown)));
        assert!(!is_complete(dir.path(), &file(None, Checksum::Unknown)));
        let tagged = file(Some(6), Checksum::Tag("abc-2".into()));
        assert!(!is_complete(dir.path(), &tagged), "no record yet");
        let record = tag_path(dir.path(), &tagged);
        std::fs::create_dir_all(record.parent().unwrap()).unwrap();
        std::fs::write(&record, "abc-2\n").unwrap();
        assert!(is_complete(dir.path(), &tagged));
        assert!(!is_complete(
            dir.path(),
            &file(Some(6), Checksum::Tag("abc-3".into()))
        ));
    }

    #[test]
    fn sweeps_only_partials() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("x/y")).unwrap();
        let keep = dir.path().join("x/y/data.json");
        let partial = partial_path(&keep);
        assert_eq!(partial, dir.path().join("x/y/.data.json.kubetrain-partial"));
        std::fs::write(&keep, b"{}").unwrap();
        std::fs::write(&partial, b"{").unwrap();
        assert_eq!(sweep_partials(dir.path()).unwrap(), 1);
        assert!(keep.exists() && !partial.exists());
    }
}
