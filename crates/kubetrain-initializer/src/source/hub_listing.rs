//! The hub's repository info, parsed as it streams in: each entry of `siblings` is handed over as
//! soon as it is complete, so a listing of a million files is never held whole in memory (only
//! the files kept), and a listing that stalls halfway ends in the idle timeout, not a hang.

use std::fmt;
use std::io::Read;

use bytes::{Buf as _, Bytes};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One file of the repository, as far as we read it.
#[derive(Debug, Deserialize)]
pub(super) struct Sibling {
    pub(super) rfilename: String,
    pub(super) size: Option<u64>,
    #[serde(rename = "blobId")]
    pub(super) blob_id: Option<String>,
    pub(super) lfs: Option<Lfs>,
}

/// The LFS part of a sibling.
#[derive(Debug, Deserialize)]
pub(super) struct Lfs {
    pub(super) sha256: Option<String>,
    pub(super) size: Option<u64>,
}

/// Parses repository info from `reader`, calling `on_sibling` for each file in order; returns
/// the commit (`sha`). Blocking: run on the blocking pool.
pub(super) fn parse(
    reader: impl Read,
    on_sibling: impl FnMut(Sibling),
) -> serde_json::Result<Option<String>> {
    let mut on_sibling = on_sibling;
    let mut deserializer = serde_json::Deserializer::from_reader(reader);
    let sha = InfoSeed(&mut on_sibling).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(sha.filter(|s| !s.is_empty()))
}

/// Reads the chunks an async task sends, blocking for each (call from the blocking pool only).
pub(super) struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl ChannelReader {
    pub(super) fn new(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Self {
        Self {
            rx,
            current: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(chunk) => self.current = chunk,
                // The sender is gone: the body ended (or the download gave up, which it reports).
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current.advance(n);
        Ok(n)
    }
}

/// The top-level object: `sha` kept, `siblings` streamed, the rest skipped.
struct InfoSeed<'a, F>(&'a mut F);

impl<'de, F: FnMut(Sibling)> DeserializeSeed<'de> for InfoSeed<'_, F> {
    type Value = Option<String>;

    fn deserialize<D: de::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, F: FnMut(Sibling)> Visitor<'de> for InfoSeed<'_, F> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the hub's repository info object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut sha = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "sha" => sha = map.next_value::<Option<String>>()?,
                "siblings" => map.next_value_seed(SiblingsSeed(&mut *self.0))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(sha)
    }
}

/// The `siblings` array (or `null`), one element at a time.
struct SiblingsSeed<'a, F>(&'a mut F);

impl<'de, F: FnMut(Sibling)> DeserializeSeed<'de> for SiblingsSeed<'_, F> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, F: FnMut(Sibling)> Visitor<'de> for SiblingsSeed<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of files (siblings)")
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(sibling) = seq.next_element::<Sibling>()? {
            (self.0)(sibling);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sha_and_siblings_in_any_order() {
        let body = br#"{"id":"org/x","siblings":[{"rfilename":"a.json","size":3,"blobId":"ab"},
            {"rfilename":"w.safetensors","lfs":{"sha256":"CD","size":9}}],"cardData":{"k":[1,2]},"sha":"c0ffee"}"#;
        let mut names = Vec::new();
        let sha = parse(&body[..], |s| {
            names.push((s.rfilename, s.size, s.lfs.and_then(|l| l.size)))
        })
        .unwrap();
        assert_eq!(sha.as_deref(), Some("c0ffee"));
        assert_eq!(
            names,
            [
                ("a.json".into(), Some(3), None),
                ("w.safetensors".into(), None, Some(9))
            ]
        );
        assert_eq!(
            parse(&br#"{"siblings":null,"sha":""}"#[..], |_| panic!()).unwrap(),
            None
        );
        assert!(parse(&br#"{"siblings":[{"size":1}]}"#[..], |_| {}).is_err());
        assert!(parse(&br#"{"sha":"x"} trailing"#[..], |_| {}).is_err());
    }

    /// A reader that hands out `head` and then fails, as a connection that breaks off would.
    struct BreaksOff<'a>(&'a [u8]);

    impl Read for BreaksOff<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(std::io::Error::other("the rest never came"));
            }
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn each_file_is_handed_over_before_the_rest_of_the_body_arrives() {
        let head =
            br#"{"sha":"c0ffee","siblings":[{"rfilename":"first.json"},{"rfilename":"second"#;
        let mut seen = Vec::new();
        let err = parse(BreaksOff(head), |s| seen.push(s.rfilename)).unwrap_err();
        assert!(err.is_io(), "{err}");
        assert_eq!(seen, ["first.json"]);
    }

    #[test]
    fn the_channel_reader_ends_when_the_sender_is_gone() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.try_send(Bytes::from_static(b"ab")).unwrap();
        tx.try_send(Bytes::from_static(b"c")).unwrap();
        drop(tx);
        let mut text = String::new();
        ChannelReader::new(rx).read_to_string(&mut text).unwrap();
        assert_eq!(text, "abc");
    }
}
