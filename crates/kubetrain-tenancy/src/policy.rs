//! The training policy: which pod privileges and image registries TrainJobs and training runtimes may use.
//!
//! A `TrainingPolicy` (`apiVersion: kubetrain.dev/v1alpha1`) is a YAML document, read from a file or from the
//! `policy.yaml` key of a ConfigMap; no CRD is involved. With a policy in force, every [`RiskKind`] is refused
//! unless an exception allows it for the namespace or the runtime, and images must come from the listed
//! registries (when `spec.registries` is set). The full reference is `docs/training-policy.md`.
//!
//! ```
//! use kubetrain_tenancy::policy::{Subject, TrainingPolicy};
//! use kubetrain_tenancy::risk::runtime_risks;
//!
//! let policy = TrainingPolicy::from_yaml(r#"
//! apiVersion: kubetrain.dev/v1alpha1
//! kind: TrainingPolicy
//! metadata: {name: gpu-cluster}
//! spec:
//!   registries: [ghcr.io/kubeflow/]
//!   exceptions:
//!     - namespaces: [infra]
//!       allow: {hostNetwork: true}
//! "#).unwrap();
//! let subject = Subject::namespace("team-a");
//! assert!(policy.image_allowed("ghcr.io/kubeflow/trainer/torchtune-trainer", &subject));
//! assert!(!policy.image_allowed("docker.io/pytorch/pytorch", &subject));
//!
//! let error = TrainingPolicy::from_yaml("apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec:\n  exceptions:\n    - allow: {privilegd: true}\n").unwrap_err();
//! assert!(error.to_string().starts_with("spec.exceptions[0].allow.privilegd: unknown field `privilegd`"), "{error}");
//! ```

mod evaluate;
mod image;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde::{Deserialize, Serialize};

use crate::risk::{Risk, RiskKind, capability_name, is_device_path};

pub(crate) use image::{image_matches, normalize_image};

/// `apiVersion` of the training policy.
pub const API_VERSION: &str = "kubetrain.dev/v1alpha1";
/// `kind` of the training policy.
pub const KIND: &str = "TrainingPolicy";
/// The ConfigMap key that holds the policy document.
pub const CONFIGMAP_KEY: &str = "policy.yaml";
/// Name of the ConfigMap the operator reads the policy from by default (in its own namespace).
pub const DEFAULT_CONFIGMAP: &str = "kubetrain-training-policy";

/// The training policy document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrainingPolicy {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always [`KIND`].
    pub kind: String,
    /// Name (used in denial messages) and any other metadata.
    #[serde(default)]
    pub metadata: PolicyMetadata,
    /// The rules.
    #[serde(default)]
    pub spec: PolicySpec,
}

/// Metadata of a policy: its name and free-form labels and annotations.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyMetadata {
    /// Name of the policy, quoted in denials (`default` when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Labels (not interpreted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations (not interpreted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The rules of a policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicySpec {
    /// Image prefixes every TrainJob and runtime may pull from (e.g. `ghcr.io/kubeflow/`, `nvcr.io/nvidia/`).
    /// Unset: any registry. Set (even empty): only these, plus what an exception's `allow.registries` adds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registries: Option<Vec<String>>,
    /// What is allowed beyond the defaults, and for whom.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exceptions: Vec<Exception>,
}

/// An exception: what `allow` permits, for the namespaces and runtimes it selects.
///
/// It applies when the namespace part matches (the namespace is in `namespaces` or its labels match
/// `namespaceSelector`; either suffices; no namespace part means any namespace) and the runtime part matches
/// (one of `runtimes` matches; none listed means any runtime). An exception that selects nothing applies
/// everywhere.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Exception {
    /// A name for messages (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespaces by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespaces by label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Runtimes by kind and name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<RuntimeSelector>,
    /// What is allowed.
    #[serde(default)]
    pub allow: Allow,
}

/// Selects runtimes by name and, optionally, kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuntimeSelector {
    /// `ClusterTrainingRuntime` or `TrainingRuntime`; unset: either.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The runtime's name; `*` for any.
    pub name: String,
}

/// What an exception allows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Allow {
    /// Privileged containers (and Windows host processes).
    #[serde(default)]
    pub privileged: bool,
    /// `allowPrivilegeEscalation: true`.
    #[serde(default)]
    pub privilege_escalation: bool,
    /// `hostNetwork: true` and container `hostPort`s.
    #[serde(default)]
    pub host_network: bool,
    /// `hostPID: true`.
    #[serde(default, rename = "hostPID")]
    pub host_pid: bool,
    /// `hostIPC: true`.
    #[serde(default, rename = "hostIPC")]
    pub host_ipc: bool,
    /// Host path prefixes that `hostPath` volumes outside `/dev` may mount; `*` for any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_paths: Vec<String>,
    /// Device access: `/dev` path prefixes, capability names (`SYS_ADMIN`, `IPC_LOCK`) and extended resource
    /// names (`rdma/hca`, `amd.com/gpu`); `*` for any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// Image prefixes allowed in addition to `spec.registries`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub registries: Vec<String>,
}

/// Why a policy document was not read.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// Not YAML.
    #[error("not YAML: {0}")]
    Yaml(String),
    /// A field has the wrong type or name, at its path.
    #[error("{path}: {message}")]
    Field {
        /// Dotted path of the field.
        path: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

impl PolicyError {
    fn field(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Field {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Who a TrainJob or runtime belongs to, for matching exceptions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subject {
    /// The namespace (none for a ClusterTrainingRuntime).
    pub namespace: Option<String>,
    /// The namespace's labels (`None`: not known; a namespace selector then does not match).
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// The runtime's kind and name (the TrainJob's referenced runtime, or the runtime itself).
    pub runtime: Option<(String, String)>,
}

impl Subject {
    /// A subject in `namespace`, with no runtime and unknown labels.
    pub fn namespace(namespace: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            ..Self::default()
        }
    }

    /// The same subject with the namespace's labels.
    pub fn with_labels(mut self, labels: BTreeMap<String, String>) -> Self {
        self.namespace_labels = Some(labels);
        self
    }

    /// The same subject with a runtime.
    pub fn with_runtime(mut self, kind: impl Into<String>, name: impl Into<String>) -> Self {
        self.runtime = Some((kind.into(), name.into()));
        self
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(namespace) = &self.namespace {
            parts.push(format!("namespace {namespace:?}"));
        }
        if let Some((kind, name)) = &self.runtime {
            parts.push(format!("runtime {kind}/{name}"));
        }
        if parts.is_empty() {
            "this object".to_owned()
        } else {
            parts.join(" or ")
        }
    }
}

impl TrainingPolicy {
    /// Reads a policy from YAML: a `TrainingPolicy` document, or a ConfigMap whose `policy.yaml` key holds one
    /// (so the file `kubectl apply`s is also the file `kubetrain validate --policy` reads).
    pub fn from_yaml(text: &str) -> Result<Self, PolicyError> {
        let value =
            kubetrain_yaml::fast::from_str(text).map_err(|e| PolicyError::Yaml(e.to_string()))?;
        let kind = value.get("kind").and_then(serde_json::Value::as_str);
        if kind == Some("ConfigMap") {
            let data = value
                .get("data")
                .and_then(|d| d.get(CONFIGMAP_KEY))
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| {
                    PolicyError::field(
                        format!("data.{CONFIGMAP_KEY}"),
                        "the ConfigMap holds no policy; put the TrainingPolicy document under this key",
                    )
                })?;
            return Self::from_yaml(data).map_err(|e| match e {
                PolicyError::Field { path, message } => {
                    PolicyError::field(format!("data.{CONFIGMAP_KEY}: {path}"), message)
                }
                other => other,
            });
        }
        Self::from_value(value)
    }

    /// Reads a policy from a JSON value, checking `apiVersion`, `kind`, every field name and the lists.
    pub fn from_value(value: serde_json::Value) -> Result<Self, PolicyError> {
        let policy: TrainingPolicy = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            PolicyError::field(
                if path == "." { String::new() } else { path },
                e.inner().to_string(),
            )
        })?;
        policy.check()?;
        Ok(policy)
    }

    fn check(&self) -> Result<(), PolicyError> {
        if self.api_version != API_VERSION {
            return Err(PolicyError::field(
                "apiVersion",
                format!("must be {API_VERSION}, not {:?}", self.api_version),
            ));
        }
        if self.kind != KIND {
            return Err(PolicyError::field(
                "kind",
                format!("must be {KIND}, not {:?}", self.kind),
            ));
        }
        for (index, exception) in self.spec.exceptions.iter().enumerate() {
            exception.check(&format!("spec.exceptions[{index}]"))?;
        }
        let registries = self.spec.registries.iter().flatten();
        for (index, prefix) in registries.enumerate() {
            check_prefix(prefix, &format!("spec.registries[{index}]"))?;
        }
        Ok(())
    }

    /// The policy's name for messages.
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("default")
    }

    /// Whether matching exceptions needs the namespace's labels (some exception has a namespace selector).
    pub fn needs_namespace_labels(&self) -> bool {
        self.spec
            .exceptions
            .iter()
            .any(|e| e.namespace_selector.is_some())
    }

    /// The exceptions that apply to `subject`.
    pub fn exceptions_for<'a>(
        &'a self,
        subject: &'a Subject,
    ) -> impl Iterator<Item = &'a Exception> + 'a {
        self.spec
            .exceptions
            .iter()
            .filter(move |e| e.applies_to(subject))
    }

    /// Whether `risk` is allowed for `subject`.
    pub fn allows(&self, risk: &Risk, subject: &Subject) -> bool {
        self.exceptions_for(subject).any(|e| e.allow.permits(risk))
    }

    /// Whether `image` comes from a registry the policy allows for `subject`.
    pub fn image_allowed(&self, image: &str, subject: &Subject) -> bool {
        let Some(registries) = &self.spec.registries else {
            return true;
        };
        let image = normalize_image(image);
        registries.iter().any(|p| image_matches(&image, p))
            || self
                .exceptions_for(subject)
                .any(|e| e.allow.registries.iter().any(|p| image_matches(&image, p)))
    }

    /// A policy that allows everything (every exception flag, `*` in every list, any registry).
    pub fn allow_all() -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: KIND.to_owned(),
            metadata: PolicyMetadata::default(),
            spec: PolicySpec {
                registries: Some(vec!["*".to_owned()]),
                exceptions: vec![Exception {
                    allow: Allow {
                        privileged: true,
                        privilege_escalation: true,
                        host_network: true,
                        host_pid: true,
                        host_ipc: true,
                        host_paths: vec!["*".to_owned()],
                        devices: vec!["*".to_owned()],
                        registries: vec![],
                    },
                    ..Exception::default()
                }],
            },
        }
    }
}

fn check_prefix(prefix: &str, path: &str) -> Result<(), PolicyError> {
    if prefix.trim().is_empty() {
        return Err(PolicyError::field(
            path,
            "an empty prefix would match every image; write \"*\" to allow any registry",
        ));
    }
    Ok(())
}

impl Exception {
    fn check(&self, path: &str) -> Result<(), PolicyError> {
        for (index, selector) in self.runtimes.iter().enumerate() {
            if let Some(kind) = &selector.kind
                && kind != kubetrain_api::constants::CLUSTER_TRAINING_RUNTIME_KIND
                && kind != kubetrain_api::constants::TRAINING_RUNTIME_KIND
            {
                return Err(PolicyError::field(
                    format!("{path}.runtimes[{index}].kind"),
                    format!("must be ClusterTrainingRuntime or TrainingRuntime, not {kind:?}"),
                ));
            }
            if selector.name.is_empty() {
                return Err(PolicyError::field(
                    format!("{path}.runtimes[{index}].name"),
                    "must name a runtime, or be \"*\" for any",
                ));
            }
        }
        if let Some(selector) = &self.namespace_selector {
            let expressions = selector.match_expressions.iter().flatten();
            for (index, requirement) in expressions.enumerate() {
                check_requirement(
                    requirement,
                    &format!("{path}.namespaceSelector.matchExpressions[{index}]"),
                )?;
            }
        }
        for (index, prefix) in self.allow.registries.iter().enumerate() {
            check_prefix(prefix, &format!("{path}.allow.registries[{index}]"))?;
        }
        for (list, entries) in [
            ("hostPaths", &self.allow.host_paths),
            ("devices", &self.allow.devices),
        ] {
            for (index, entry) in entries.iter().enumerate() {
                if entry.trim().is_empty() {
                    return Err(PolicyError::field(
                        format!("{path}.allow.{list}[{index}]"),
                        "must not be empty; write \"*\" to allow any",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether this exception applies to `subject`.
    pub fn applies_to(&self, subject: &Subject) -> bool {
        let namespace_part = self.namespaces.is_empty() && self.namespace_selector.is_none();
        let namespace_ok = namespace_part
            || subject.namespace.as_ref().is_some_and(|ns| {
                self.namespaces.iter().any(|n| n == ns)
                    || match (&self.namespace_selector, &subject.namespace_labels) {
                        (Some(selector), Some(labels)) => selector_matches(selector, labels),
                        _ => false,
                    }
            });
        let runtime_ok = self.runtimes.is_empty()
            || subject.runtime.as_ref().is_some_and(|(kind, name)| {
                self.runtimes.iter().any(|s| {
                    s.kind.as_ref().is_none_or(|k| k == kind) && (s.name == "*" || &s.name == name)
                })
            });
        namespace_ok && runtime_ok
    }
}

fn check_requirement(
    requirement: &LabelSelectorRequirement,
    path: &str,
) -> Result<(), PolicyError> {
    let values = requirement.values.as_ref().map_or(0, Vec::len);
    match requirement.operator.as_str() {
        "In" | "NotIn" if values == 0 => Err(PolicyError::field(
            format!("{path}.values"),
            "In and NotIn need at least one value",
        )),
        "Exists" | "DoesNotExist" if values > 0 => Err(PolicyError::field(
            format!("{path}.values"),
            "Exists and DoesNotExist take no values",
        )),
        "In" | "NotIn" | "Exists" | "DoesNotExist" => Ok(()),
        other => Err(PolicyError::field(
            format!("{path}.operator"),
            format!("must be In, NotIn, Exists or DoesNotExist, not {other:?}"),
        )),
    }
}

/// Whether `labels` match a Kubernetes label selector (matchLabels and matchExpressions, all of them).
pub(crate) fn selector_matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> bool {
    let exact = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions = selector.match_expressions.iter().flatten().all(|r| {
        let value = labels.get(&r.key);
        let listed = |v: &String| r.values.iter().flatten().any(|x| x == v);
        match r.operator.as_str() {
            "In" => value.is_some_and(listed),
            "NotIn" => !value.is_some_and(listed),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    exact && expressions
}

impl Allow {
    /// Whether this allowance covers `risk`.
    pub fn permits(&self, risk: &Risk) -> bool {
        match risk.kind {
            RiskKind::Privileged => self.privileged,
            RiskKind::PrivilegeEscalation => self.privilege_escalation,
            RiskKind::HostNetwork => self.host_network,
            RiskKind::HostPid => self.host_pid,
            RiskKind::HostIpc => self.host_ipc,
            RiskKind::HostPath => self.host_paths.iter().any(|p| path_under(&risk.subject, p)),
            RiskKind::Device => self
                .devices
                .iter()
                .any(|entry| device_matches(&risk.subject, entry)),
            RiskKind::Image => {
                let image = normalize_image(&risk.subject);
                self.registries.iter().any(|p| image_matches(&image, p))
            }
        }
    }
}

/// Whether host path `path` is `prefix` or below it (`*` matches any path).
pub(crate) fn path_under(path: &str, prefix: &str) -> bool {
    if prefix == "*" {
        return true;
    }
    let prefix = prefix.trim_end_matches('/');
    let path = path.trim_end_matches('/');
    prefix.is_empty()
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether a device subject (a `/dev` path, a capability or a resource name) matches an `allow.devices` entry.
fn device_matches(subject: &str, entry: &str) -> bool {
    if entry == "*" {
        return true;
    }
    if is_device_path(subject) || subject.starts_with('/') {
        return entry.starts_with('/') && path_under(subject, entry);
    }
    subject == entry || (!subject.contains('/') && capability_name(entry) == subject)
}

#[cfg(test)]
mod tests;
