//! Bounded waits on the network: a server that accepts a connection and then never answers, or
//! stops sending halfway, costs one timeout and a retry (with its log line), never a hang.
//!
//! Three limits ([`crate::Tuning`]): opening the TCP connection (`connect_timeout`, set on the
//! HTTP clients), the answer's first byte (`first_byte_timeout`: from sending a request to its
//! status line and headers) and every later pause (`read_timeout`: between two chunks of a body).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};

use crate::error::{Attempt, chain};

/// The limits of one source's requests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// From sending a request to the answer's headers.
    pub(crate) first_byte: Duration,
    /// Longest pause between two chunks of a body.
    pub(crate) idle: Duration,
}

impl Limits {
    pub(crate) fn new(tuning: &crate::config::Tuning) -> Self {
        Self {
            first_byte: tuning.first_byte_timeout,
            idle: tuning.read_timeout,
        }
    }

    /// Waits for the answer to `what` (`"the repository listing"`, `"GET of config.json"`) for at most the
    /// first-byte limit; past it the attempt is transient (retried with a log line).
    pub(crate) async fn answer<T>(
        &self,
        what: &str,
        request: impl Future<Output = Result<T, Attempt>>,
    ) -> Result<T, Attempt> {
        tokio::time::timeout(self.first_byte, request)
            .await
            .map_err(|_| {
                Attempt::transient(format!(
                    "no answer to {what} within {:?} (first-byte timeout)",
                    self.first_byte
                ))
            })?
    }

    /// The next chunk of a body, waiting at most the idle limit.
    pub(crate) async fn next_chunk<S, T>(
        &self,
        what: &str,
        body: &mut S,
    ) -> Result<Option<T>, Attempt>
    where
        S: Stream<Item = Result<T, Attempt>> + Unpin,
    {
        match tokio::time::timeout(self.idle, body.next()).await {
            Ok(Some(chunk)) => chunk.map(Some),
            Ok(None) => Ok(None),
            Err(_) => Err(Attempt::transient(format!(
                "no data for {:?} while reading {what} (idle timeout), reconnecting",
                self.idle
            ))),
        }
    }

    /// A whole (small) body: every pause bounded by the idle limit, at most `max` bytes.
    pub(crate) async fn read_body(
        &self,
        what: &str,
        response: reqwest::Response,
        max: usize,
    ) -> Result<Bytes, Attempt> {
        let mut body = response
            .bytes_stream()
            .map(|chunk| chunk.map_err(|e| Attempt::transient(chain(&e))));
        let mut out = BytesMut::new();
        while let Some(chunk) = self.next_chunk(what, &mut body).await? {
            if out.len() + chunk.len() > max {
                return Err(Attempt::transient(format!(
                    "{what} is larger than {max} bytes"
                )));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out.freeze())
    }

    /// The text of an error answer, for messages: empty when it does not come in time.
    pub(crate) async fn error_text(&self, response: reqwest::Response) -> String {
        const MAX: usize = 64 << 10;
        self.read_body("an error answer", response, MAX)
            .await
            .map(|body| String::from_utf8_lossy(&body).into_owned())
            .unwrap_or_default()
    }
}
