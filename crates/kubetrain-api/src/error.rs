//! Field-path errors shared by parsing, CEL validation and the webhook rules.

use std::fmt;

/// Whether a finding rejects the object or only warns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// The object is rejected.
    Error,
    /// The object is accepted; the user should know (e.g. a deprecated runtime).
    Warning,
}

/// One finding about one field of one object.
///
/// Displays as `<Kind>/<name>: <field.path>: <message>`, the format `kubetrain validate` prints and the
/// controller's webhook returns. Objects without a name show as `<Kind>/<document N>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Kind of the object (`TrainJob`, `ClusterTrainingRuntime`, …), or `document` when it is unknown.
    pub kind: String,
    /// Name of the object, or `#<index>` (the document's position in its file) when it has none.
    pub name: String,
    /// Dotted field path, e.g. `spec.trainer.numNodes` (empty for the whole object).
    pub path: String,
    /// What is wrong and, where possible, how to fix it.
    pub message: String,
    /// Error or warning.
    pub severity: Severity,
}

impl FieldError {
    /// An error at `path`.
    pub fn error(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: String::new(),
            name: String::new(),
            path: path.into(),
            message: message.into(),
            severity: Severity::Error,
        }
    }

    /// A warning at `path`.
    pub fn warning(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            severity: Severity::Warning,
            ..Self::error(path, message)
        }
    }

    /// The same finding, attributed to the object `kind`/`name`.
    pub fn on(mut self, kind: &str, name: &str) -> Self {
        self.kind = kind.to_owned();
        self.name = name.to_owned();
        self
    }

    /// Whether this finding rejects the object.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.kind.is_empty() {
            "document"
        } else {
            &self.kind
        };
        write!(f, "{kind}/{}: ", self.name)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for FieldError {}
