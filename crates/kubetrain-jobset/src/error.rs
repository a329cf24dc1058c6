//! Why a TrainJob could not be rendered.

use kubetrain_api::FieldError;
use kubetrain_merge::MergeError;

/// Why a TrainJob could not be rendered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RenderError {
    /// The TrainJob breaks rules `kubetrain validate` checks (the CRD schema and its CEL rules in every render
    /// entry point; also the webhook's rules in [`render_trainjob`](crate::render_trainjob)): every error,
    /// with its field path, as `validate` reports it.
    #[error("{}", invalid_summary(errors))]
    Invalid {
        /// The errors (never empty; warnings are not among them).
        errors: Vec<FieldError>,
    },
    /// The merge stage failed (runtime patches, resources, plugins).
    #[error(transparent)]
    Merge(#[from] MergeError),
    /// `runtimeRef` names an unsupported kind, or a runtime that does not exist.
    #[error("{path}: {}", source.short_message())]
    Runtime {
        /// The field path: `spec.runtimeRef.name` for a missing runtime, `spec.runtimeRef` otherwise.
        /// (The controller reports a missing runtime to the cluster in upstream's words, not with this.)
        path: &'static str,
        /// What the lookup found.
        #[source]
        source: kubetrain_api::catalog::LookupError,
    },
    /// The TrainJobStatus plugin is on but the status server's CA certificate is empty.
    #[error(
        "failed to find status server ca.crt in tls secret (the TrainJobStatus plugin needs the CA certificate of the operator's webhook Secret)"
    )]
    MissingStatusServerCaCert,
    /// A render plugin's component builder failed: its name and its error.
    #[error("plugin {plugin}: {source}")]
    Plugin {
        /// The plugin's name.
        plugin: String,
        /// What the plugin reported.
        #[source]
        source: Box<RenderError>,
    },
    /// The MPI hostfile would list more hosts than [`MAX_HOSTFILE_ENTRIES`].
    #[error(
        "spec.trainer.numNodes: the MPI hostfile would list {hosts} hosts; at most {MAX_HOSTFILE_ENTRIES} are supported"
    )]
    TooManyHosts {
        /// Hosts the hostfile would list.
        hosts: u64,
    },
}

/// `path: message` of the first error, and how many more there are.
fn invalid_summary(errors: &[FieldError]) -> String {
    let Some(first) = errors.first() else {
        return "invalid TrainJob".to_owned();
    };
    match errors.len() - 1 {
        0 => format!("{}: {}", first.path, first.message),
        more => format!(
            "{}: {} (and {more} more error{})",
            first.path,
            first.message,
            if more == 1 { "" } else { "s" }
        ),
    }
}

/// The most hosts an MPI hostfile may list (upstream has no limit; we refuse to build a file of gigabytes).
/// `kubetrain validate` refuses the same TrainJobs ([`kubetrain_api::constants::MAX_MPI_HOSTS`]).
pub const MAX_HOSTFILE_ENTRIES: u64 = kubetrain_api::constants::MAX_MPI_HOSTS;

impl RenderError {
    /// The TrainJob field path the error is about.
    pub fn field_path(&self) -> String {
        let text = self.text_without_plugin();
        text.split_once(": ")
            .map(|(p, _)| p.to_owned())
            .unwrap_or_default()
    }

    /// The message without the field path; `plugin <name>: ` first when a plugin failed.
    pub fn message(&self) -> String {
        let text = self.text_without_plugin();
        let message = text
            .split_once(": ")
            .map(|(_, m)| m.to_owned())
            .unwrap_or(text);
        match self.plugin() {
            Some(plugin) => format!("plugin {plugin}: {message}"),
            None => message,
        }
    }

    /// The plugin that failed, if a plugin did.
    pub fn plugin(&self) -> Option<&str> {
        match self {
            RenderError::Plugin { plugin, .. } => Some(plugin),
            RenderError::Merge(e) => e.plugin(),
            _ => None,
        }
    }

    /// The error's text without the `plugin <name>: ` prefix, so that it starts with the field path.
    fn text_without_plugin(&self) -> String {
        match self {
            RenderError::Plugin { source, .. } => source.text_without_plugin(),
            RenderError::Merge(e) => e.without_plugin().to_string(),
            RenderError::Invalid { errors } => invalid_summary(errors),
            other => other.to_string(),
        }
    }
}
