//! Errors of loading and checking Kueue objects.

use std::fmt;

/// One problem in one object, printed as `<Kind>/<name>: <field.path>: <message>` like
/// `kubetrain validate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupFieldError {
    /// Object kind, e.g. `ClusterQueue`.
    pub kind: String,
    /// Object name (`namespace/name` for namespaced objects).
    pub name: String,
    /// Field path, e.g. `spec.resourceGroups[0].flavors[0].resources[0].nominalQuota`.
    pub path: String,
    /// What is wrong and, where possible, how to fix it.
    pub message: String,
}

impl fmt::Display for SetupFieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}: {}: {}",
            self.kind, self.name, self.path, self.message
        )
    }
}

/// Why a set of YAML documents could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The text is not YAML.
    #[error("{source_name}: invalid YAML: {message}")]
    Yaml {
        /// File name or `<input>`.
        source_name: String,
        /// Parser message with location.
        message: String,
    },
    /// A document is not an object with `apiVersion` and `kind`.
    #[error("{source_name}: document {index}: {message}")]
    Document {
        /// File name or `<input>`.
        source_name: String,
        /// Zero-based document index in the stream.
        index: usize,
        /// What is missing.
        message: String,
    },
    /// One or more objects break the API schema or Kueue's webhook rules.
    #[error("{}", join_errors(.0))]
    Invalid(Vec<SetupFieldError>),
}

fn join_errors(errors: &[SetupFieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}
