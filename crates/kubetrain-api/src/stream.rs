//! Reading a stream of trainer objects one document at a time ([`parse_stream`]), for files of any size: memory
//! stays flat in the number of documents, and a document larger than the API server accepts is skipped, not
//! kept.
//!
//! The splitting itself is `kubetrain-yaml`'s (`kubetrain_yaml::DocumentStream`; [`TooLarge`], which a
//! [`StreamError`] carries, is re-exported from it), and `kubetrain_yaml::parse_stream` reads any YAML stream
//! as JSON data.

use std::io::{self, BufRead};

use crate::{LocatedDocument, ParseError};

use kubetrain_yaml::DocumentStream;
/// A document over `kubetrain_yaml::MAX_DOCUMENT_BYTES` (3 MiB), re-exported from `kubetrain-yaml` (its home):
/// [`StreamError::TooLarge`] carries it.
pub use kubetrain_yaml::TooLarge;

/// Why a document of a stream could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The stream could not be read (or is not UTF-8).
    #[error("reading the stream: {0}")]
    Io(#[from] io::Error),
    /// A document over `kubetrain_yaml::MAX_DOCUMENT_BYTES`, skipped; the documents after it are still read.
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
