//! The errors of the SDK, one enum per concern.

use std::path::PathBuf;

/// Why a TrainJob could not be turned into local processes (the JobSet → process plan step).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The TrainJob could not be rendered against its runtime.
    #[error("rendering the TrainJob: {0}")]
    Render(#[from] kubetrain_jobset::RenderError),
    /// `runtimeRef` names a runtime that is neither given nor built in.
    #[error("spec.runtimeRef: {0}")]
    Runtime(String),
    /// The render produced no JobSet (it only does so for a running, already applied JobSet).
    #[error("the render produced no JobSet")]
    NoJobSet,
    /// A container has no command: locally there is no image whose entrypoint could run.
    #[error(
        "{path}: the container has no command; the image's entrypoint cannot run locally (set trainer.command)"
    )]
    NoCommand {
        /// Field path of the container in the JobSet.
        path: String,
    },
    /// An env var takes its value from a source the local runner cannot provide.
    #[error("{path}: {reason}")]
    Env {
        /// Field path of the env var in the JobSet.
        path: String,
        /// What is missing and how to fix it.
        reason: String,
    },
    /// `dependsOn` names a replicated job that does not exist or forms a cycle.
    #[error("{path}: {reason}")]
    DependsOn {
        /// Field path of the dependency.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The run directory could not be prepared.
    #[error("preparing the run directory {dir}: {source}")]
    RunDir {
        /// The directory.
        dir: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Another run of the same TrainJob (namespace and name) is in progress on this machine.
    #[error(
        "TrainJob {namespace}/{name} is already running on this machine ({holder}); a second run of the same \
         namespace/name is refused, not queued: wait for it to end or stop it, or give this one another \
         metadata.name"
    )]
    AlreadyRunning {
        /// The namespace.
        namespace: String,
        /// The name.
        name: String,
        /// The run in progress: its process id and run directory, as far as known.
        holder: String,
    },
    /// No free loopback port could be found for a pod port.
    #[error("finding a free loopback port for pod port {port}: {source}")]
    Port {
        /// The declared container port.
        port: i32,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Errors of the local queue (`crate::local::queue`, feature `local`).
#[cfg(feature = "local")]
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The job needs more of a resource that cannot be shared (GPUs) than the capacity holds: it would
    /// wait forever (Kueue's message).
    #[error("the TrainJob cannot run on this machine: {0}")]
    NeverFits(Box<crate::local::capacity::CapacityError>),
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
    Model(Box<crate::local::queue::decide::DecideError>),
    /// The run was not admitted in time.
    #[error("TrainJob {job} was not admitted within {:.1}s: {pending}", waited.as_secs_f64())]
    Timeout {
        /// `namespace/name` of the TrainJob.
        job: String,
        /// How long it waited.
        waited: std::time::Duration,
        /// Why it still waits.
        pending: crate::local::queue::Pending,
    },
}

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
