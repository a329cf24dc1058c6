//! The errors of the local queue: its ledger, Kueue's model of it, and the wait for admission.

use std::path::PathBuf;

use super::Pending;
use super::decide::DecideError;
use crate::local::capacity::CapacityError;

/// Errors of the local queue.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The job needs more of a resource that cannot be shared (GPUs) than the capacity holds: it would
    /// wait forever (Kueue's message).
    #[error("the TrainJob cannot run on this machine: {0}")]
    NeverFits(Box<CapacityError>),
    /// Reading, writing or creating the ledger failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: String,
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The ledger's lock could not be taken.
    #[error("locking the local queue {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Kueue's model of the queue could not be built (the message says which object).
    #[error(transparent)]
    Model(Box<DecideError>),
    /// The run was not admitted in time.
    #[error("TrainJob {job} was not admitted within {:.1}s: {pending}", waited.as_secs_f64())]
    Timeout {
        /// `namespace/name` of the TrainJob.
        job: String,
        /// How long it waited.
        waited: std::time::Duration,
        /// Why it still waits.
        pending: Pending,
    },
}
