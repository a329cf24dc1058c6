//! Multi-document YAML streams: split a whole string ([`split_documents`]) or read a stream of any size one
//! document at a time ([`DocumentStream`], [`parse_stream`]), with the lines each document starts on, the
//! API server's size limit ([`MAX_DOCUMENT_BYTES`]) and syntax errors located in the whole stream
//! ([`yaml_error`]).
//!
//! ```
//! use kubetrain_yaml::DocumentStream;
//!
//! let input = "a: 1\n---\nb: 2\n";
//! let mut documents = DocumentStream::new(input.as_bytes());
//! assert_eq!(documents.next().unwrap().unwrap().unwrap(), "a: 1\n");
//! assert_eq!(documents.next().unwrap().unwrap().unwrap(), "b: 2\n");
//! assert_eq!((documents.number(), documents.start_line(), documents.text_line()), (2, 2, 3));
//! assert!(documents.next().is_none());
//! ```

use std::fmt;
use std::io::{self, BufRead};

use serde_json::Value;

/// The largest document read, 3 MiB: the API server refuses request bodies over 3 MiB
/// (`MaxRequestBodyBytes`), so no larger object can exist in a cluster. Readers refuse larger documents with
/// [`document_too_large`]'s message.
pub const MAX_DOCUMENT_BYTES: usize = 3 * 1024 * 1024;

/// The refusal of a document over [`MAX_DOCUMENT_BYTES`]: its number (from 1), first line and size.
///
/// ```
/// assert_eq!(
///     kubetrain_yaml::document_too_large(2, 5, 4_000_000),
///     "document 2 (from line 5) is 4000000 bytes: over the 3 MiB (3145728 bytes) the API server accepts for one object"
/// );
/// ```
pub fn document_too_large(number: usize, line: usize, bytes: usize) -> String {
    format!(
        "document {number} (from line {line}) is {bytes} bytes: over the 3 MiB ({MAX_DOCUMENT_BYTES} bytes) the API server accepts for one object"
    )
}

/// A YAML syntax error of one document, located in the lines of the whole stream: `line 6 column 7: unclosed
/// bracket '['`. `first_line` is the line the document's text starts on, as [`split_documents`] gives it.
/// serde-saphyr's own rendering adds a source snippet that names the text `<input>` and counts lines from
/// the document's start, which points a user with a file of many documents to the wrong place.
///
/// ```
/// let text = "a: 1\n---\nb: [unclosed\n";
/// let (line, piece) = kubetrain_yaml::split_documents(text)[1];
/// let error = serde_saphyr::from_str::<serde_json::Value>(piece).unwrap_err();
/// assert_eq!(kubetrain_yaml::yaml_error(&error, line), "line 3 column 4: unclosed bracket '['");
/// ```
pub fn yaml_error(error: &serde_saphyr::Error, first_line: usize) -> String {
    let text = error.without_snippet().to_string();
    let text = text.trim().trim_start_matches("error: ");
    // The message without serde-saphyr's own position (` at line L, column C`, counted in the document).
    let message = text
        .rsplit_once(" at line ")
        .filter(|(_, position)| {
            position
                .split_once(", column ")
                .is_some_and(|(line, column)| {
                    [line, column]
                        .iter()
                        .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
        })
        .map_or(text, |(message, _)| message);
    match error.location().filter(|l| l.line() > 0) {
        Some(location) => format!(
            "line {} column {}: {message}",
            location.line() as usize + first_line - 1,
            location.column()
        ),
        None => message.to_owned(),
    }
}

/// The documents of a YAML stream with the line each starts on (1-based): split at `---` lines (content
/// after `--- ` belongs to the new document) and ended by `...` lines. YAML forbids these markers at the
/// start of a line inside any scalar, so the split never cuts a value. Empty pieces are included.
///
/// ```
/// let docs = kubetrain_yaml::split_documents("a: 1\n---\nb: |\n  --- text\n");
/// assert_eq!(docs.len(), 2);
/// assert_eq!((docs[1].0, docs[1].1.trim()), (2, "b: |\n  --- text"));
/// ```
pub fn split_documents(text: &str) -> Vec<(usize, &str)> {
    let mut documents = Vec::new();
    let (mut start, mut start_line, mut offset) = (0usize, 1usize, 0usize);
    for (index, raw) in text.split_inclusive('\n').enumerate() {
        let content = raw.trim_end_matches(['\n', '\r']);
        let opens = content == "---" || content.starts_with("--- ") || content.starts_with("---\t");
        let closes = content == "..." || content.starts_with("... ");
        if opens || closes {
            documents.push((start_line, &text[start..offset]));
            if opens {
                start = offset + 3;
                start_line = index + 1;
            } else {
                start = offset + raw.len();
                start_line = index + 2;
            }
        }
        offset += raw.len();
    }
    documents.push((start_line, &text[start.min(text.len())..]));
    documents
}

/// A document over [`MAX_DOCUMENT_BYTES`], skipped without being kept; displays as [`document_too_large`]'s
/// refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLarge {
    /// The document's number in the stream (1-based).
    pub number: usize,
    /// The line it starts on.
    pub line: usize,
    /// Its size in bytes.
    pub bytes: usize,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&document_too_large(self.number, self.line, self.bytes))
    }
}

impl std::error::Error for TooLarge {}

/// Splits a YAML stream into documents at `---` lines without reading it all. Lines are appended straight to
/// the document's buffer (no string per line); the text is checked as UTF-8 once per document. A document
/// over [`MAX_DOCUMENT_BYTES`] is skipped to its end without being kept (memory stays flat)
/// and comes out as `Err(`[`TooLarge`]`)`.
pub struct DocumentStream<R> {
    lines: R,
    pending: Option<Vec<u8>>,
    done: bool,
    /// Lines read so far, and the line the current document starts on.
    line: usize,
    pending_start_line: usize,
    /// Documents returned so far.
    number: usize,
    /// The line the document returned last starts on (its `---` line), and the line its text starts on
    /// (the `---` line itself when content follows the marker, `--- {a: 1}`).
    start_line: usize,
    text_line: usize,
    /// The text line of the document being read.
    pending_text_line: usize,
}

impl<R: BufRead> DocumentStream<R> {
    /// Reads documents from `lines` one at a time.
    pub fn new(lines: R) -> Self {
        Self {
            lines,
            pending: Some(Vec::new()),
            done: false,
            line: 0,
            pending_start_line: 1,
            number: 0,
            start_line: 1,
            text_line: 1,
            pending_text_line: 1,
        }
    }

    /// The text of a finished document, or its refusal when it was too large.
    fn finish(&mut self, doc: Vec<u8>, skipped: usize) -> io::Result<Result<String, TooLarge>> {
        self.number += 1;
        self.start_line = self.pending_start_line;
        self.text_line = self.pending_text_line;
        if skipped > 0 {
            return Ok(Err(TooLarge {
                number: self.number,
                line: self.pending_start_line,
                bytes: skipped,
            }));
        }
        String::from_utf8(doc).map(Ok).map_err(|_| not_utf8())
    }
}

/// The error `BufRead::read_line` gives for text that is not UTF-8.
fn not_utf8() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "stream did not contain valid UTF-8",
    )
}

impl<R: BufRead> Iterator for DocumentStream<R> {
    type Item = io::Result<Result<String, TooLarge>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut doc = self.pending.take().unwrap_or_default();
        // Bytes of a document over the limit, counted while it is skipped.
        let mut skipped = 0usize;
        loop {
            if skipped == 0 && doc.len() > MAX_DOCUMENT_BYTES {
                skipped = doc.len();
                doc.clear();
            } else if skipped > 0 {
                // Only the line being read is kept, to find the next marker.
                skipped += doc.len();
                doc.clear();
            }
            let start = doc.len();
            match self.lines.read_until(b'\n', &mut doc) {
                Err(e) => return Some(Err(e)),
                Ok(0) => {
                    self.done = true;
                    return Some(self.finish(doc, skipped));
                }
                Ok(_) => self.line += 1,
            }
            let line = &doc[start..];
            if !(line.starts_with(b"---") || line.starts_with(b"...")) {
                continue;
            }
            let Ok(line) = std::str::from_utf8(line) else {
                return Some(Err(not_utf8()));
            };
            let trimmed = line.trim_end();
            if trimmed == "---" || trimmed.starts_with("--- ") {
                // Content after the marker (`--- {a: 1}`) belongs to the next document.
                let rest = trimmed[3..].trim_start();
                let marker_line = self.line;
                let text_line = if rest.is_empty() {
                    marker_line + 1
                } else {
                    marker_line
                };
                self.pending = Some(if rest.is_empty() {
                    Vec::new()
                } else {
                    format!("{rest}\n").into_bytes()
                });
                doc.truncate(start);
                let finished = self.finish(doc, skipped);
                self.pending_start_line = marker_line;
                self.pending_text_line = text_line;
                return Some(finished);
            }
            if trimmed == "..." {
                doc.truncate(start);
            }
        }
    }
}

impl<R> DocumentStream<R> {
    /// Documents returned so far: the number of the last one (1-based).
    pub fn number(&self) -> usize {
        self.number
    }

    /// The line the last document starts on (its `---` line; 1 for the first).
    pub fn start_line(&self) -> usize {
        self.start_line
    }

    /// The line the last document's text starts on (the `---` line itself for `--- {a: 1}`).
    pub fn text_line(&self) -> usize {
        self.text_line
    }
}

/// One document of a stream, read as JSON data by [`parse_stream`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StreamDocument {
    /// Its number in the stream (from 1; empty documents count).
    pub number: usize,
    /// The line it starts on (its `---` line; 1 for the first).
    pub line: usize,
    /// The line its text starts on (the `---` line itself for `--- {a: 1}`).
    pub text_line: usize,
    /// Its content.
    pub value: Value,
}

/// Why a document of a stream could not be read by [`parse_stream`].
#[derive(Debug)]
#[non_exhaustive]
pub enum ParseStreamError {
    /// The stream could not be read (or is not UTF-8); nothing more is read.
    Io(io::Error),
    /// A document over [`MAX_DOCUMENT_BYTES`], skipped; the documents after it are still read.
    TooLarge(TooLarge),
    /// A document is not valid YAML; the documents after it are still read.
    Syntax {
        /// The document's number in the stream (from 1).
        number: usize,
        /// The line it starts on.
        line: usize,
        /// The line its text starts on (lines in `source` count from there).
        text_line: usize,
        /// serde-saphyr's error.
        source: serde_saphyr::Error,
    },
}

impl fmt::Display for ParseStreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "reading the stream: {e}"),
            Self::TooLarge(e) => e.fmt(f),
            Self::Syntax {
                number,
                line,
                text_line,
                source,
            } => write!(
                f,
                "invalid YAML: document {number} (from line {line}): {}",
                yaml_error(source, *text_line)
            ),
        }
    }
}

impl std::error::Error for ParseStreamError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(e) => Some(e),
            Self::TooLarge(e) => Some(e),
            Self::Syntax { source, .. } => Some(source),
        }
    }
}

impl From<io::Error> for ParseStreamError {
    fn from(error: io::Error) -> Self {
        Self::Io(error)
    }
}

impl From<TooLarge> for ParseStreamError {
    fn from(error: TooLarge) -> Self {
        Self::TooLarge(error)
    }
}

/// Reads the documents of a YAML (or JSON) stream one at a time as JSON data, with the lines they start on:
/// memory stays flat in the number of documents. Each document is read by the fast reader
/// ([`crate::fast::from_str`]: the same value and errors as serde-saphyr, faster on plain manifests).
/// Empty, comment-only and `null` documents are skipped; a document that is too large or not YAML is reported
/// and the ones after it are still read; a read error (or text that is not UTF-8) ends the stream.
///
/// ```
/// use kubetrain_yaml::{ParseStreamError, parse_stream};
///
/// let input = "kind: ConfigMap\nmetadata: {name: a}\n---\n# nothing\n---\nkind: [unclosed\n---\n- 1\n";
/// let mut documents = parse_stream(input.as_bytes());
/// let first = documents.next().unwrap().unwrap();
/// assert_eq!((first.number, first.line, first.value["metadata"]["name"].as_str()), (1, 1, Some("a")));
/// let error = documents.next().unwrap().unwrap_err();
/// assert!(matches!(error, ParseStreamError::Syntax { number: 3, .. }));
/// assert_eq!(error.to_string(), "invalid YAML: document 3 (from line 5): line 6 column 7: unclosed bracket '['");
/// assert_eq!(documents.next().unwrap().unwrap().value, serde_json::json!([1]));
/// assert!(documents.next().is_none());
/// ```
pub fn parse_stream<R: BufRead>(
    reader: R,
) -> impl Iterator<Item = Result<StreamDocument, ParseStreamError>> {
    let mut documents = DocumentStream::new(reader);
    let mut failed = false;
    std::iter::from_fn(move || {
        while !failed {
            let text = match documents.next()? {
                Err(error) => {
                    failed = true;
                    return Some(Err(error.into()));
                }
                Ok(Err(too_large)) => return Some(Err(too_large.into())),
                Ok(Ok(text)) => text,
            };
            if text.trim().is_empty() {
                continue;
            }
            let (number, line, text_line) = (
                documents.number(),
                documents.start_line(),
                documents.text_line(),
            );
            match crate::fast::from_str(&text) {
                Ok(Value::Null) => continue,
                Ok(value) => {
                    return Some(Ok(StreamDocument {
                        number,
                        line,
                        text_line,
                        value,
                    }));
                }
                Err(source) => {
                    return Some(Err(ParseStreamError::Syntax {
                        number,
                        line,
                        text_line,
                        source,
                    }));
                }
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_split_at_markers() {
        let input = "a: 1\n---\nb: 2\n--- {c: 3}\n...\n---\n";
        let docs: Vec<String> = DocumentStream::new(input.as_bytes())
            .map(|d| d.unwrap().unwrap())
            .collect();
        assert_eq!(docs, ["a: 1\n", "b: 2\n", "{c: 3}\n", ""]);
    }

    #[test]
    fn whole_strings_split_at_markers_with_their_first_line() {
        let text = "a: 1\n---\nb: 2\n--- {c: 3}\n...\n---\nd: |\n  --- not a marker\n";
        let docs = split_documents(text);
        let bodies: Vec<&str> = docs.iter().map(|(_, d)| d.trim()).collect();
        assert_eq!(
            bodies,
            ["a: 1", "b: 2", "{c: 3}", "", "d: |\n  --- not a marker"]
        );
        let lines: Vec<usize> = docs.iter().map(|(line, _)| *line).collect();
        assert_eq!(lines, [1, 2, 4, 6, 6]);
    }

    /// The streaming splitter and the whole-string one find the same documents (the stream gives the text
    /// after a `--- ` marker a line of its own and drops what a `...` line ends).
    #[test]
    fn the_stream_and_the_string_split_alike() {
        for text in [
            "a: 1\n---\nb: 2\n",
            "---\na: 1\n---\n\n---\nb: [1, 2]\n",
            "a: 1\n...\n---\nb: 2\n...\n",
            "--- {a: 1}\n--- {b: 2}\n",
            "a: |\n  --- not a marker\n  ... nor this\n",
            "",
        ] {
            let whole: Vec<Value> = split_documents(text)
                .into_iter()
                .filter(|(_, piece)| !piece.trim().is_empty())
                .map(|(_, piece)| serde_saphyr::from_str(piece).unwrap())
                .collect();
            let streamed: Vec<Value> = parse_stream(text.as_bytes())
                .map(|d| d.unwrap().value)
                .collect();
            assert_eq!(streamed, whole, "{text:?}");
        }
    }

    #[test]
    fn a_document_over_the_api_servers_limit_is_skipped_not_kept() {
        let big = format!("a: \"{}\"\n", "x".repeat(MAX_DOCUMENT_BYTES));
        let input = format!("b: 1\n---\n{big}---\nc: 2\n");
        let docs: Vec<Result<String, TooLarge>> = DocumentStream::new(input.as_bytes())
            .map(|d| d.unwrap())
            .collect();
        assert_eq!(docs[0].as_deref(), Ok("b: 1\n"));
        let refusal = docs[1].as_ref().unwrap_err().to_string();
        assert!(
            refusal.starts_with("document 2 (from line 2) is ")
                && refusal.contains("over the 3 MiB"),
            "{refusal}"
        );
        assert_eq!(docs[2].as_deref(), Ok("c: 2\n"));
        let parsed: Vec<String> = parse_stream(input.as_bytes())
            .map(|d| match d {
                Ok(d) => d.value.to_string(),
                Err(ParseStreamError::TooLarge(e)) => format!("too large: {}", e.number),
                Err(e) => panic!("{e}"),
            })
            .collect();
        assert_eq!(parsed, [r#"{"b":1}"#, "too large: 2", r#"{"c":2}"#]);
    }

    #[test]
    fn syntax_errors_are_located_in_the_stream_and_the_rest_is_read() {
        let text = "a: 1\n---\n\nkind: [\n--- {b: 2}\n";
        let results: Vec<_> = parse_stream(text.as_bytes()).collect();
        assert_eq!(results.len(), 3, "{results:?}");
        let error = results[1].as_ref().unwrap_err();
        assert!(
            matches!(
                error,
                ParseStreamError::Syntax {
                    number: 2,
                    line: 2,
                    text_line: 3,
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("invalid YAML: document 2 (from line 2): line 4 column "),
            "{error}"
        );
        let last = results[2].as_ref().unwrap();
        assert_eq!((last.number, last.line, last.text_line), (3, 5, 5));
    }

    #[test]
    fn text_that_is_not_utf8_ends_the_stream() {
        let text: &[u8] = b"a: 1\n---\nb: \xff\n---\nc: 3\n";
        let results: Vec<_> = parse_stream(text).collect();
        assert_eq!(results.len(), 2, "{results:?}");
        assert!(matches!(results[1], Err(ParseStreamError::Io(_))));
    }
}
