//! Verifying a download against the checksum its source lists, while the bytes stream in.
//!
//! | listed checksum | computed over the received bytes |
//! |---|---|
//! | hub LFS `sha256` | SHA-256 |
//! | hub `blobId` | SHA-1 of `blob <size>\0<content>` (git's blob id); when the size is not listed, over the finished file |
//! | S3 single-part ETag (32 hex digits) | MD5 |
//! | S3 multipart ETag `<hex>-<N>` | MD5 of the concatenated MD5s of the parts, for the part size the server reports or, failing that, each common part size that gives `N` parts |

use md5::Md5;
use sha1::Sha1;
use sha2::{Digest, Sha256};

use crate::remote::{Checksum, RemoteFile};
use crate::verify::to_hex;

/// How a multipart object's part size is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PartSizes {
    /// The server said so (`HEAD ?partNumber=1`): a mismatch is a mismatch.
    Exact(u64),
    /// Common sizes that give the listed number of parts: a mismatch may be a wrong guess.
    Guessed(Vec<u64>),
}

/// Common multipart part sizes: the AWS CLI and SDKs (8 MiB), the S3 minimum many tools use
/// (5 MiB), and the powers of two up to 1 GiB that tools pick for large files.
const COMMON_PART_SIZES_MIB: [u64; 10] = [5, 8, 10, 16, 32, 50, 64, 128, 256, 512];

/// Guesses part sizes for a `size`-byte object uploaded in `parts` parts: the common sizes that
/// give that many parts, and an even split rounded up to a whole MiB; at most four.
pub(crate) fn guess_part_sizes(size: u64, parts: u32) -> Vec<u64> {
    const MIB: u64 = 1 << 20;
    let parts = u64::from(parts);
    let fits = |part: u64| part > 0 && size.div_ceil(part) == parts;
    let mut sizes: Vec<u64> = COMMON_PART_SIZES_MIB
        .iter()
        .map(|mib| mib * MIB)
        .chain([1 << 30, size.div_ceil(parts.max(1)).div_ceil(MIB) * MIB])
        .filter(|&part| fits(part))
        // Every size from the object's own size up splits it the same way (one part).
        .map(|part| part.min(size.max(1)))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes.truncate(4);
    sizes
}

/// Parses a multipart ETag `<32 hex>-<N>`.
pub(crate) fn multipart_etag(tag: &str) -> Option<(String, u32)> {
    let (hex, parts) = tag.split_once('-')?;
    let parts: u32 = parts.parse().ok().filter(|&n| n > 0)?;
    (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| (hex.to_ascii_lowercase(), parts))
}

/// The outcome of a download's check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The bytes match the listed checksum.
    Verified,
    /// Nothing could be compared; the reason is logged.
    Unverified(String),
    /// A multipart ETag no known part size explains: corruption cannot be told from an unusual
    /// part size, because the server does not report it.
    UnverifiableMultipart(String),
    /// The bytes do not match.
    Mismatch {
        algorithm: &'static str,
        expected: String,
        actual: String,
    },
    /// A git blob id of a file whose size was not listed: hash the finished file.
    HashFinishedFile { expected: String },
}

/// One multipart part-size hypothesis.
#[derive(Clone)]
struct Parts {
    part_size: u64,
    current: Md5,
    in_part: u64,
    digests: Md5,
    count: u32,
}

impl Parts {
    fn new(part_size: u64) -> Self {
        Self {
            part_size,
            current: Md5::new(),
            in_part: 0,
            digests: Md5::new(),
            count: 0,
        }
    }

    fn update(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let room = self.part_size - self.in_part;
            let take = usize::try_from(room).map_or(data.len(), |room| room.min(data.len()));
            self.current.update(&data[..take]);
            self.in_part += take as u64;
            data = &data[take..];
            if self.in_part == self.part_size {
                self.close_part();
            }
        }
    }

    fn close_part(&mut self) {
        let digest = std::mem::replace(&mut self.current, Md5::new()).finalize();
        self.digests.update(digest);
        self.count += 1;
        self.in_part = 0;
    }

    fn finish(mut self) -> String {
        if self.in_part > 0 {
            self.close_part();
        }
        format!("{}-{}", to_hex(&self.digests.finalize()), self.count)
    }
}

#[derive(Clone)]
enum Check {
    None(String),
    /// A multipart ETag whose part size is neither reported nor guessable.
    UnknownParts(String),
    Md5(String, Md5),
    Sha256(String, Sha256),
    GitSha1(String, Sha1),
    GitSha1Unsized(String),
    Multipart {
        expected: String,
        exact: bool,
        candidates: Vec<Parts>,
    },
}

/// Hashes a download as it is written; reset when the download starts over.
#[derive(Clone)]
pub(crate) struct Verifier {
    initial: Check,
    check: Check,
}

impl Verifier {
    /// The check for `file`, as listed (its checksum and size); `parts` for multipart ETags.
    pub(crate) fn new(file: &RemoteFile, parts: Option<&PartSizes>) -> Self {
        let check = match &file.checksum {
            Checksum::Md5(want) => Check::Md5(want.clone(), Md5::new()),
            Checksum::Sha256(want) => Check::Sha256(want.clone(), Sha256::new()),
            Checksum::GitSha1(want) => match file.size {
                Some(size) => {
                    let mut hasher = Sha1::new();
                    hasher.update(format!("blob {size}\0").as_bytes());
                    Check::GitSha1(want.clone(), hasher)
                }
                None => Check::GitSha1Unsized(want.clone()),
            },
            Checksum::Tag(tag) => match (multipart_etag(tag), parts) {
                (Some(_), Some(PartSizes::Exact(size))) if *size > 0 => Check::Multipart {
                    expected: tag.to_ascii_lowercase(),
                    exact: true,
                    candidates: vec![Parts::new(*size)],
                },
                (Some(_), Some(PartSizes::Guessed(sizes))) if !sizes.is_empty() => {
                    Check::Multipart {
                        expected: tag.to_ascii_lowercase(),
                        exact: false,
                        candidates: sizes.iter().map(|&s| Parts::new(s)).collect(),
                    }
                }
                (Some((_, n)), _) => Check::UnknownParts(format!(
                    "its multipart ETag ({n} parts) cannot be checked: the part size is unknown"
                )),
                (None, _) => Check::None(format!(
                    "its ETag {tag:?} is not a content hash (server-side encryption or a custom server)"
                )),
            },
            Checksum::Unknown => Check::None("the source lists no checksum for it".into()),
        };
        Self {
            initial: check.clone(),
            check,
        }
    }

    /// Feeds received bytes, in order.
    pub(crate) fn update(&mut self, data: &[u8]) {
        match &mut self.check {
            Check::None(_) | Check::UnknownParts(_) | Check::GitSha1Unsized(_) => {}
            Check::Md5(_, h) => h.update(data),
            Check::Sha256(_, h) => h.update(data),
            Check::GitSha1(_, h) => h.update(data),
            Check::Multipart { candidates, .. } => {
                for parts in candidates {
                    parts.update(data);
                }
            }
        }
    }

    /// Forgets the bytes fed so far (the download starts over).
    pub(crate) fn reset(&mut self) {
        self.check = self.initial.clone();
    }

    /// The verdict over everything fed.
    pub(crate) fn finish(self) -> Verdict {
        let compare = |algorithm, expected: String, actual: String| {
            if actual.eq_ignore_ascii_case(&expected) {
                Verdict::Verified
            } else {
                Verdict::Mismatch {
                    algorithm,
                    expected,
                    actual,
                }
            }
        };
        match self.check {
            Check::None(reason) => Verdict::Unverified(reason),
            Check::UnknownParts(reason) => Verdict::UnverifiableMultipart(reason),
            Check::Md5(want, h) => compare("md5", want, to_hex(&h.finalize())),
            Check::Sha256(want, h) => compare("sha256", want, to_hex(&h.finalize())),
            Check::GitSha1(want, h) => compare("git blob sha1", want, to_hex(&h.finalize())),
            Check::GitSha1Unsized(expected) => Verdict::HashFinishedFile { expected },
            Check::Multipart {
                expected,
                exact,
                candidates,
            } => {
                let sizes: Vec<u64> = candidates.iter().map(|p| p.part_size).collect();
                let actual: Vec<String> = candidates.into_iter().map(Parts::finish).collect();
                if actual.contains(&expected) {
                    Verdict::Verified
                } else if exact {
                    Verdict::Mismatch {
                        algorithm: "multipart etag",
                        expected,
                        actual: actual.join(", "),
                    }
                } else {
                    let mib: Vec<String> = sizes
                        .iter()
                        .map(|s| format!("{:.1} MiB", *s as f64 / f64::from(1u32 << 20)))
                        .collect();
                    Verdict::UnverifiableMultipart(format!(
                        "its multipart ETag matches none of the guessed part sizes ({}); the server does not report the part size",
                        mib.join(", ")
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(size: Option<u64>, checksum: Checksum) -> RemoteFile {
        RemoteFile::new("k", "k", size, checksum).unwrap()
    }

    fn run(verifier: &mut Verifier, chunks: &[&[u8]]) -> Verdict {
        for chunk in chunks {
            verifier.update(chunk);
        }
        verifier.clone().finish()
    }

    #[test]
    fn single_hashes_match_and_mismatch() {
        let md5 = "b1946ac92492d2347c6235b4d2611184".to_string();
        let mut v = Verifier::new(&file(Some(6), Checksum::Md5(md5.clone())), None);
        assert_eq!(run(&mut v, &[b"hel", b"lo\n"]), Verdict::Verified);
        v.reset();
        assert!(matches!(
            run(&mut v, &[b"hello?"]),
            Verdict::Mismatch {
                algorithm: "md5",
                ..
            }
        ));
        let sha = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03".to_string();
        let mut v = Verifier::new(&file(Some(6), Checksum::Sha256(sha)), None);
        assert_eq!(run(&mut v, &[b"hello\n"]), Verdict::Verified);
        let blob = "ce013625030ba8dba906f756967f9e9ca394464a".to_string();
        let mut v = Verifier::new(&file(Some(6), Checksum::GitSha1(blob.clone())), None);
        assert_eq!(run(&mut v, &[b"hello\n"]), Verdict::Verified);
        let mut v = Verifier::new(&file(None, Checksum::GitSha1(blob.clone())), None);
        assert_eq!(
            run(&mut v, &[b"hello\n"]),
            Verdict::HashFinishedFile { expected: blob }
        );
        let mut v = Verifier::new(&file(Some(6), Checksum::Unknown), None);
        assert!(matches!(run(&mut v, &[b"x"]), Verdict::Unverified(_)));
    }

    fn multipart_tag(data: &[u8], part: usize) -> String {
        let mut all = Md5::new();
        let chunks: Vec<&[u8]> = data.chunks(part).collect();
        for chunk in &chunks {
            all.update(Md5::digest(chunk));
        }
        format!("{}-{}", to_hex(&all.finalize()), chunks.len())
    }

    #[test]
    fn multipart_etags() {
        let data: Vec<u8> = (0..(11u32 << 20) + 5).map(|i| (i % 251) as u8).collect();
        let tag = multipart_tag(&data, 5 << 20);
        assert_eq!(multipart_etag(&tag).unwrap().1, 3);
        let remote = file(Some(data.len() as u64), Checksum::Tag(tag.clone()));
        let guesses = guess_part_sizes(data.len() as u64, 3);
        assert!(guesses.contains(&(5 << 20)), "{guesses:?}");
        let mut v = Verifier::new(&remote, Some(&PartSizes::Guessed(guesses.clone())));
        // Odd chunk sizes straddle part boundaries.
        let chunks: Vec<&[u8]> = data.chunks(777_777).collect();
        assert_eq!(run(&mut v, &chunks), Verdict::Verified);
        let mut tampered = data.clone();
        tampered[6 << 20] ^= 1;
        let chunks: Vec<&[u8]> = tampered.chunks(1 << 20).collect();
        let mut v = Verifier::new(&remote, Some(&PartSizes::Guessed(guesses)));
        assert!(matches!(
            run(&mut v, &chunks),
            Verdict::UnverifiableMultipart(_)
        ));
        let mut v = Verifier::new(&remote, Some(&PartSizes::Exact(5 << 20)));
        assert!(matches!(
            run(&mut v, &chunks),
            Verdict::Mismatch {
                algorithm: "multipart etag",
                ..
            }
        ));
        let mut v = Verifier::new(&remote, None);
        assert!(matches!(
            run(&mut v, &chunks),
            Verdict::UnverifiableMultipart(_)
        ));
        assert_eq!(multipart_etag("abc-2"), None);
        assert_eq!(multipart_etag(&format!("{}-0", "a".repeat(32))), None);
        assert_eq!(guess_part_sizes(100, 1), vec![100]);
    }
}
