//! The error type of communicators.

use std::io;
use std::time::Duration;

use crate::rendezvous::RendezvousError;

/// Why a collective (or forming a communicator) failed. After any error other than
/// [`CollectiveError::InvalidArgument`] the communicator is aborted and every later call fails fast.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectiveError {
    /// The call itself is wrong (buffer lengths, root or peer out of range); nothing was sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A peer made no progress within the communicator's timeout (dead, stalled, or calling another collective).
    #[error(
        "rank {rank}: timed out after {waited:?} waiting for rank {peer} during {during} \
         (the peer is dead, stalled, or called a different collective; raise the timeout if it is just slow)"
    )]
    Timeout {
        /// This rank.
        rank: usize,
        /// The rank it waited for.
        peer: usize,
        /// How long it waited.
        waited: Duration,
        /// The operation in progress.
        during: String,
    },
    /// A peer's connection closed or its process exited.
    #[error("rank {rank}: lost rank {peer} during {during}: {reason}")]
    PeerLost {
        /// This rank.
        rank: usize,
        /// The rank that is gone.
        peer: usize,
        /// The operation in progress.
        during: String,
        /// What was observed (connection reset, process exited, ...).
        reason: String,
    },
    /// Another rank failed and aborted the communicator.
    #[error("rank {rank}: communicator aborted by a peer during {during} (see that rank's error)")]
    Aborted {
        /// This rank.
        rank: usize,
        /// The operation in progress.
        during: String,
    },
    /// This communicator already failed; create a new one.
    #[error("communicator already failed: {0}")]
    Poisoned(String),
    /// The ranks disagree about the collective being run (different operation, length or type).
    #[error(
        "rank {rank}: protocol mismatch with rank {peer}: {detail} (do all ranks call the same collectives with the same lengths?)"
    )]
    Protocol {
        /// This rank.
        rank: usize,
        /// The peer whose message did not fit.
        peer: usize,
        /// What did not match.
        detail: String,
    },
    /// Forming the communicator failed (environment or store).
    #[error(transparent)]
    Rendezvous(#[from] RendezvousError),
    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The backend cannot do this (data type, operator or feature).
    #[error("{backend} backend: {what} is not supported")]
    Unsupported {
        /// `cpu` or `nccl`.
        backend: &'static str,
        /// What was asked for.
        what: String,
    },
    /// The NCCL backend failed (library missing, no GPU, CUDA error, NCCL result code, watchdog).
    #[cfg(feature = "nccl")]
    #[error(transparent)]
    Nccl(#[from] crate::nccl::NcclError),
}

impl CollectiveError {
    /// Wraps an I/O error with what was being done.
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        CollectiveError::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = CollectiveError> = std::result::Result<T, E>;
