//! The errors of the SDK. The local runner's own errors (feature `local`) live next to what raises them:
//! [`local::PlanError`](crate::local::PlanError) (the plan of a local run) and
//! [`local::queue::QueueError`](crate::local::queue::QueueError) (the local queue).

#[cfg(feature = "local")]
use crate::local::error::PlanError;
#[cfg(feature = "local")]
use crate::local::queue::QueueError;

/// Errors of the [`TrainerClient`](crate::TrainerClient) and its backends.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No TrainJob of that name.
    #[error("TrainJob {0:?} not found")]
    NotFound(String),
    /// No runtime of that name.
    #[error("runtime {0:?} not found (list them with `kubetrain runtimes`)")]
    RuntimeNotFound(String),
    /// A TrainJob of that name exists already.
    #[error("TrainJob {0:?} already exists")]
    AlreadyExists(String),
    /// The request itself is wrong (bad status name, unknown step, invalid option).
    #[error("{0}")]
    InvalidArgument(String),
    /// The TrainJob breaks validation rules (CEL or webhook), one message per rule.
    #[error("the TrainJob is invalid:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
    /// The job needs more of a resource that cannot be shared (GPUs) than this machine has (Kueue's message).
    #[error("the TrainJob cannot run on this machine: {0}")]
    DoesNotFit(String),
    /// The TrainJob failed while waiting for another status.
    #[error("TrainJob {name:?} failed: {message}")]
    JobFailed {
        /// The job.
        name: String,
        /// The Failed condition's message (or the local runner's reason).
        message: String,
    },
    /// The wait ran out of time.
    #[error(
        "timed out after {seconds}s waiting for TrainJob {name:?} to reach {wanted}; it is {current}"
    )]
    Timeout {
        /// The job.
        name: String,
        /// Seconds waited.
        seconds: u64,
        /// The statuses waited for.
        wanted: String,
        /// The status at the end of the wait.
        current: String,
    },
    /// The TrainJob could not be planned as local processes.
    #[cfg(feature = "local")]
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A Kubernetes API call failed.
    #[cfg(feature = "kubernetes")]
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The kubeconfig or in-cluster config could not be loaded.
    #[error("Kubernetes config: {0}")]
    Config(String),
    /// The local queue failed (its ledger could not be read or written, or the wait timed out).
    #[cfg(feature = "local")]
    #[error(transparent)]
    Queue(QueueError),
    /// A local I/O operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

#[cfg(feature = "local")]
impl From<QueueError> for ClientError {
    /// A job that can never fit is [`ClientError::DoesNotFit`]; the rest is [`ClientError::Queue`].
    fn from(e: QueueError) -> Self {
        match e {
            QueueError::NeverFits(why) => ClientError::DoesNotFit(why.to_string()),
            other => ClientError::Queue(other),
        }
    }
}

impl ClientError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        ClientError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result of the SDK.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;
