//! Deciding whether a local file is already complete: same size and same checksum.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

use md5::Md5;
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::error::InitError;
use crate::remote::{Checksum, RemoteFile};
use crate::safe_fs::{Dir, split_parent};
use crate::staging::{STATE_DIR, Staging};

/// Where `file`'s version tag (multipart S3 ETags, whose checksum cannot be computed locally)
/// is recorded, relative to the destination.
pub(crate) fn tag_relative(file: &RemoteFile) -> String {
    format!("{STATE_DIR}/tags/{}", file.relative_path)
}

/// Records `tag` as the version of `file` (multipart ETags), below the destination `root`,
/// written in `staging` first. Blocking.
pub(crate) fn write_tag(
    root: &Dir,
    staging: &Staging,
    file: &RemoteFile,
    tag: &str,
) -> Result<(), InitError> {
    use std::io::Write as _;
    let relative = tag_relative(file);
    let (parent, name) = split_parent(&relative);
    let Some(dir) = root.open_dir(parent, true)? else {
        return Ok(());
    };
    let staged = staging.reserve();
    let mut record = staging
        .dir()
        .create_file(&staged, crate::config::DEFAULT_FILE_MODE)?;
    record
        .write_all(format!("{tag}\n").as_bytes())
        .map_err(|e| InitError::io("write", staging.dir().path().join(&staged), e))?;
    staging.dir().move_to(&staged, &dir, name)
}

/// Opens the local copy of `relative` below `root` for reading, never through a link.
pub(crate) fn open_local(root: &Dir, relative: &str) -> Option<File> {
    let (parent, name) = split_parent(relative);
    root.open_dir(parent, false).ok()??.open_file(name)
}

/// Whether the local copy of `file` is complete. Blocking: hashes the file. A symbolic link (at
/// the file or any directory above it) is never complete: the download replaces it.
pub(crate) fn is_complete(root: &Dir, file: &RemoteFile) -> bool {
    let Some(mut local) = open_local(root, &file.relative_path) else {
        return false;
    };
    let Ok(meta) = local.metadata() else {
        return false;
    };
    match file.size {
        Some(size) if size != meta.len() => return false,
        None => return false,
        Some(_) => {}
    }
    let mut digest = |kind| hex_digest(&mut local, kind);
    match &file.checksum {
        Checksum::Md5(want) => digest(DigestKind::Md5).is_some_and(|got| &got == want),
        Checksum::Sha256(want) => digest(DigestKind::Sha256).is_some_and(|got| &got == want),
        Checksum::GitSha1(want) => {
            digest(DigestKind::GitSha1(meta.len())).is_some_and(|got| &got == want)
        }
        Checksum::Tag(want) => open_local(root, &tag_relative(file)).is_some_and(|mut record| {
            let mut recorded = String::new();
            record.read_to_string(&mut recorded).is_ok() && recorded.trim() == want
        }),
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

/// Hex digest of an open file from its start; `None` when it cannot be read.
pub(crate) fn hex_digest(file: &mut File, kind: DigestKind) -> Option<String> {
    file.seek(SeekFrom::Start(0)).ok()?;
    match kind {
        DigestKind::Md5 => digest_reader::<Md5>(file, b""),
        DigestKind::Sha256 => digest_reader::<Sha256>(file, b""),
        DigestKind::GitSha1(size) => {
            digest_reader::<Sha1>(file, format!("blob {size}\0").as_bytes())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_known_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello\n").unwrap();
        let mut file = File::open(&path).unwrap();
        assert_eq!(
            hex_digest(&mut file, DigestKind::Md5).unwrap(),
            "b1946ac92492d2347c6235b4d2611184"
        );
        assert_eq!(
            hex_digest(&mut file, DigestKind::Sha256).unwrap(),
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        );
        // `git hash-object` of "hello\n".
        assert_eq!(
            hex_digest(&mut file, DigestKind::GitSha1(6)).unwrap(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
    }

    #[test]
    fn completeness() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/f"), b"hello\n").unwrap();
        let root = Dir::open_root(dir.path()).unwrap();
        let file = |size, checksum| RemoteFile::new("k", "a/f", size, checksum).unwrap();
        let md5 = "b1946ac92492d2347c6235b4d2611184".to_string();
        assert!(is_complete(
            &root,
            &file(Some(6), Checksum::Md5(md5.clone()))
        ));
        assert!(!is_complete(
            &root,
            &file(Some(7), Checksum::Md5(md5.clone()))
        ));
        assert!(!is_complete(
            &root,
            &file(Some(6), Checksum::Md5("0".repeat(32)))
        ));
        assert!(is_complete(&root, &file(Some(6), Checksum::Unknown)));
        assert!(!is_complete(&root, &file(None, Checksum::Unknown)));
        let tagged = file(Some(6), Checksum::Tag("abc-2".into()));
        assert!(!is_complete(&root, &tagged), "no record yet");
        let (staging, _) = Staging::open(&root).unwrap();
        write_tag(&root, &staging, &tagged, "abc-2").unwrap();
        assert!(is_complete(&root, &tagged));
        assert!(!is_complete(
            &root,
            &file(Some(6), Checksum::Tag("abc-3".into()))
        ));
        // A link to a complete file elsewhere is not a complete file here.
        std::fs::create_dir_all(dir.path().join("b")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("a/f"), dir.path().join("b/f")).unwrap();
        let linked = RemoteFile::new("k", "b/f", Some(6), Checksum::Md5(md5)).unwrap();
        assert!(!is_complete(&root, &linked));
    }
}
