//! The crate's errors. A step that fails is a verdict in the report, not an error: [`Error`] is what keeps
//! a run from starting (the cluster cannot be reached), and [`StepFailure`] carries a step's reason from a
//! backend to the runner, which writes it into the report.

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Neither a kubeconfig nor a pod's ServiceAccount was found.
    #[error("no cluster configuration: {0}")]
    NoClusterConfig(#[source] kube::config::InferConfigError),
    /// The kubeconfig file could not be read or parsed.
    #[error("reading kubeconfig {source_name}: {error}")]
    ReadKubeconfig {
        /// The file, or `KUBECONFIG / ~/.kube/config`.
        source_name: String,
        /// What went wrong.
        #[source]
        error: kube::config::KubeconfigError,
    },
    /// The kubeconfig has no context of that name.
    #[error("kubeconfig {source_name}: no context {context:?} (it has {available})")]
    NoContext {
        /// The file, or `KUBECONFIG / ~/.kube/config`.
        source_name: String,
        /// The context asked for.
        context: String,
        /// The contexts it has, comma-separated.
        available: String,
    },
    /// The kubeconfig's context cannot be turned into a client configuration.
    #[error("kubeconfig {source_name}: {error}")]
    Kubeconfig {
        /// The file, or `KUBECONFIG / ~/.kube/config`.
        source_name: String,
        /// What went wrong.
        #[source]
        error: kube::config::KubeconfigError,
    },
    /// No client could be built for the API server.
    #[error("client for {url}: {error}")]
    Client {
        /// The API server's URL.
        url: String,
        /// What went wrong.
        #[source]
        error: kube::Error,
    },
}

/// Why a step could not measure what it measures: its message in the report (the step fails and, for
/// the queue, staging, benchmark and training steps, the ones after it are skipped).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct StepFailure(pub(crate) String);

impl From<String> for StepFailure {
    fn from(message: String) -> Self {
        StepFailure(message)
    }
}
