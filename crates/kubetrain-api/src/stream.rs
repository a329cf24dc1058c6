//! Reading a stream of YAML documents one at a time ([`DocumentStream`]), for files of any size: memory stays
//! flat in the number of documents, and a document larger than the API server accepts is skipped, not kept.
//!
//! ```
//! use kubetrain_api::stream::DocumentStream;
//!
//! let input = "a: 1\n---\nb: 2\n";
//! let mut documents = DocumentStream::new(input.as_bytes());
//! assert_eq!(documents.next().unwrap().unwrap().unwrap(), "a: 1\n");
//! assert_eq!(documents.next().unwrap().unwrap().unwrap(), "b: 2\n");
//! assert_eq!((documents.number(), documents.start_line(), documents.text_line()), (2, 2, 3));
//! assert!(documents.next().is_none());
//! ```
//!
//! [`parse_stream`] also parses each document, as [`crate::parse_documents`] does for a whole string.

use std::io::{self, BufRead};

use crate::{LocatedDocument, MAX_DOCUMENT_BYTES, ParseError};

/// A document over [`MAX_DOCUMENT_BYTES`], skipped without being kept; displays as the refusal `validate`,
/// `render` and `run` give.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", crate::document_too_large(*number, *line, *bytes))]
pub struct TooLarge {
    /// The document's number in the stream (1-based).
    pub number: usize,
    /// The line it starts on.
    pub line: usize,
    /// Its size in bytes.
    pub bytes: usize,
}

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

/// Why a document of a stream could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The stream could not be read (or is not UTF-8).
    #[error("reading the stream: {0}")]
    Io(#[from] io::Error),
    /// A document over [`MAX_DOCUMENT_BYTES`], skipped; the documents after it are still read.
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
    /// A document is not valid YAML or not a valid object; the documents after it are still read.
    #[error("document {number} (text from line {line}): {source}")]
    Parse {
        /// The document's number in the stream (1-based).
        number: usize,
        /// The line of the stream its text starts on (line numbers in `source` count from there).
        line: usize,
        /// What was wrong with it.
        #[source]
        source: ParseError,
    },
}

/// Reads and parses the documents of a YAML (or JSON) stream one at a time: the streaming form of
/// [`crate::parse_documents`] (empty and comment-only documents are skipped; `index` is the position among
/// the non-blank ones, as there).
///
/// ```
/// let input = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: a}\n\
///              spec: {runtimeRef: {name: torch-distributed}}\n---\n# nothing\n---\n[not, an, object]\n";
/// let results: Vec<_> = kubetrain_api::stream::parse_stream(input.as_bytes()).collect();
/// assert_eq!(results.len(), 2);
/// assert_eq!(results[0].as_ref().unwrap().document.name(), "a");
/// assert!(results[1].as_ref().unwrap_err().to_string().starts_with("document 3 (text from line 8)"));
/// ```
pub fn parse_stream<R: BufRead>(
    reader: R,
) -> impl Iterator<Item = Result<LocatedDocument, StreamError>> {
    let mut documents = DocumentStream::new(reader);
    let mut index = 0;
    std::iter::from_fn(move || {
        loop {
            let text = match documents.next()? {
                Err(error) => return Some(Err(error.into())),
                Ok(Err(too_large)) => return Some(Err(too_large.into())),
                Ok(Ok(text)) => text,
            };
            // As parse_documents: `index` counts every non-blank document, comment-only ones included.
            if text.trim().is_empty() {
                continue;
            }
            let this = index;
            index += 1;
            match crate::parse_documents(&text) {
                Err(source) => {
                    return Some(Err(StreamError::Parse {
                        number: documents.number(),
                        line: documents.text_line(),
                        source,
                    }));
                }
                Ok(mut parsed) => {
                    if let Some(mut document) = parsed.pop() {
                        document.index = this;
                        return Some(Ok(document));
                    }
                }
            }
        }
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
    }

    /// The streaming reader agrees with the whole-string one on every valid stream of the table.
    #[test]
    fn parse_stream_agrees_with_parse_documents() {
        let job = |name: &str| {
            format!(
                "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: {name}}}\n\
                 spec: {{runtimeRef: {{name: torch-distributed}}}}\n"
            )
        };
        let streams = [
            job("a"),
            format!("---\n{}---\n{}", job("a"), job("b")),
            format!("{}...\n---\n# only a comment\n---\n{}", job("a"), job("b")),
            format!("\n---\n\n---\n{}", job("c")),
            String::new(),
        ];
        for text in streams {
            let whole: Vec<(usize, String)> = crate::parse_documents(&text)
                .unwrap()
                .into_iter()
                .map(|d| (d.index, d.document.name().to_owned()))
                .collect();
            let streamed: Vec<(usize, String)> = parse_stream(text.as_bytes())
                .map(|d| d.unwrap())
                .map(|d| (d.index, d.document.name().to_owned()))
                .collect();
            assert_eq!(streamed, whole, "{text:?}");
        }
    }

    #[test]
    fn a_bad_document_is_reported_and_the_rest_still_read() {
        let text = "kind: [\n---\napiVersion: v1\nkind: ConfigMap\n";
        let results: Vec<_> = parse_stream(text.as_bytes()).collect();
        let error = results[0].as_ref().unwrap_err();
        assert!(
            matches!(
                error,
                StreamError::Parse {
                    number: 1,
                    line: 1,
                    ..
                }
            ),
            "{error}"
        );
        assert_eq!(results.len(), 2, "{results:?}");
    }
}
