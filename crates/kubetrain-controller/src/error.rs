//! Why a reconcile failed. Every variant names a metric label (see [`Error::metric_label`]) so that errors are
//! counted by kind.

use kubetrain_jobset::RenderError;

/// A reconcile (or controller start-up) error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A call to the API server failed.
    #[error("{action}: {source}")]
    Kube {
        /// What the controller was doing, e.g. `applying JobSet team-a/mnist`.
        action: String,
        /// The client error (an API `Status` for rejected requests).
        #[source]
        source: Box<kube::Error>,
    },
    /// The TrainJob's runtime does not exist (upstream: "TrainingRuntime specified in TrainJob is not found").
    #[error("{message}")]
    RuntimeNotFound {
        /// Upstream's message, e.g. `not found ClusterTrainingRuntime specified in TrainJob: ...`.
        message: String,
    },
    /// `runtimeRef` names a kind the controller does not serve (upstream: "unsupported runtime: <kind.group>").
    #[error("unsupported runtime: {0}")]
    UnsupportedRuntime(String),
    /// The runtime snapshot ConfigMap exists but cannot be used.
    #[error("invalid runtime snapshot: {0}")]
    Snapshot(String),
    /// The TrainJob could not be rendered into objects.
    #[error(transparent)]
    Render(#[from] RenderError),
    /// An object could not be serialized for the API server.
    #[error("serializing {what}: {source}")]
    Serialize {
        /// What was serialized.
        what: String,
        /// The serializer error.
        #[source]
        source: serde_json::Error,
    },
    /// The JobSet of a running TrainJob is gone (upstream returns the NotFound error and retries).
    #[error("jobsets.jobset.x-k8s.io {0:?} not found")]
    JobSetMissing(String),
    /// The watch on TrainJobs (or on a child kind) failed; reported by [`crate::run`] only at start-up.
    #[error("controller start-up: {0}")]
    Startup(String),
}

impl Error {
    /// Wraps a client error with what the controller was doing.
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            action: action.into(),
            source: Box::new(source),
        }
    }

    /// Whether the API server answered 409 Conflict (another writer changed the object first).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Kube { source, .. } if matches!(&**source, kube::Error::Api(s) if s.is_conflict()))
    }

    /// The value of the `kind` label of `kubetrain_trainjob_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube { source, .. } => match &**source {
                kube::Error::Api(s) if s.is_conflict() => "conflict",
                kube::Error::Api(s) if s.is_not_found() => "not_found",
                kube::Error::Api(s) if s.is_forbidden() => "forbidden",
                kube::Error::Api(s) if s.is_invalid() => "invalid",
                kube::Error::Api(_) => "api",
                _ => "transport",
            },
            Self::RuntimeNotFound { .. } => "runtime_not_found",
            Self::UnsupportedRuntime(_) => "unsupported_runtime",
            Self::Snapshot(_) => "snapshot",
            Self::Render(_) => "render",
            Self::Serialize { .. } => "serialize",
            Self::JobSetMissing(_) => "jobset_missing",
            Self::Startup(_) => "startup",
        }
    }
}

/// Every value [`Error::metric_label`] returns: `kubetrain_trainjob_reconcile_errors_total` starts a series at 0
/// for each, so that rates over it (the `KubetrainReconcileErrors` alert, the platform dashboard) have series
/// before the first error.
pub(crate) const METRIC_LABELS: &[&str] = &[
    "conflict",
    "not_found",
    "forbidden",
    "invalid",
    "api",
    "transport",
    "runtime_not_found",
    "unsupported_runtime",
    "snapshot",
    "render",
    "serialize",
    "jobset_missing",
    "startup",
];

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, reason: &str) -> Error {
        let mut status = Status::failure("boom", reason);
        status.code = code;
        Error::kube("applying", kube::Error::Api(status.boxed()))
    }

    #[test]
    fn labels_name_the_kind_of_failure() {
        let cases = [
            (api(409, "Conflict"), "conflict", true),
            (api(404, "NotFound"), "not_found", false),
            (api(403, "Forbidden"), "forbidden", false),
            (api(422, "Invalid"), "invalid", false),
            (api(500, "InternalError"), "api", false),
            (Error::Snapshot("x".into()), "snapshot", false),
            (
                Error::RuntimeNotFound {
                    message: "m".into(),
                },
                "runtime_not_found",
                false,
            ),
        ];
        for (error, label, conflict) in cases {
            assert_eq!(error.metric_label(), label, "{error}");
            assert!(
                METRIC_LABELS.contains(&label),
                "{label} is not in METRIC_LABELS"
            );
            assert_eq!(error.is_conflict(), conflict, "{error}");
        }
    }

    #[test]
    fn messages_say_what_was_being_done() {
        let e = api(409, "Conflict");
        assert!(e.to_string().starts_with("applying: "), "{e}");
        assert_eq!(
            Error::UnsupportedRuntime("Foo.example.com".into()).to_string(),
            "unsupported runtime: Foo.example.com"
        );
    }
}
