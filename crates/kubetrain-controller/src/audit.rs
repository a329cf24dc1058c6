//! Structured audit lines: one JSON object per line for each TrainJob submission, admission decision, runtime
//! change and Secret a TrainJob references, written by the admission webhook when the operator runs with
//! `--audit-log FILE` (or `-` for stderr).
//!
//! ```json
//! {"time":"2026-01-02T03:04:05Z","action":"deny","kind":"TrainJob","namespace":"team-a","name":"j","user":"alice","details":{"reasons":["spec...privileged: ..."]}}
//! ```
//!
//! Secret *names* and the fields that reference them are logged, never their values (the webhook never reads
//! a Secret).
//!
//! ```
//! use kubetrain_controller::audit::{AuditAction, AuditLine, AuditLog};
//!
//! let (log, buffer) = AuditLog::in_memory();
//! log.record(&AuditLine::new(AuditAction::Submit, "TrainJob", Some("team-a"), "j", "alice"));
//! let lines = buffer.lines();
//! assert_eq!(lines[0]["action"], "submit");
//! assert_eq!(lines[0]["user"], "alice");
//! ```

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{EnvVar, PodSpec, Volume};
use kubetrain_api::{TrainJob, TrainingRuntimeSpec};
use serde::Serialize;

/// What an audit line records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditAction {
    /// A TrainJob was submitted (an admission review of a create).
    Submit,
    /// The admission webhook admitted a TrainJob or runtime.
    Admit,
    /// The admission webhook denied a TrainJob or runtime; `details.reasons` says why.
    Deny,
    /// A TrainingRuntime or ClusterTrainingRuntime was created or updated.
    RuntimeChange,
    /// A submitted TrainJob's pods reference Secrets; `details.secrets` names them and where.
    SecretReference,
}

/// One audit line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditLine {
    /// When, RFC 3339 in UTC.
    pub time: String,
    /// What happened.
    pub action: AuditAction,
    /// Kind of the object (`TrainJob`, `TrainingRuntime`, `ClusterTrainingRuntime`).
    pub kind: String,
    /// Namespace of the object (absent for cluster-scoped objects).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the object.
    pub name: String,
    /// Who asked (the admission request's `userInfo.username`).
    pub user: String,
    /// Action-specific details (an empty object when there are none).
    pub details: serde_json::Value,
}

impl AuditLine {
    /// A line stamped now, with no details.
    pub fn new(
        action: AuditAction,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        user: &str,
    ) -> Self {
        Self {
            time: k8s_openapi::jiff::Timestamp::now()
                .round(k8s_openapi::jiff::Unit::Second)
                .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
                .to_string(),
            action,
            kind: kind.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
            user: user.to_owned(),
            details: serde_json::Value::Object(serde_json::Map::new()),
        }
    }

    /// The same line with `details`.
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = details;
        self
    }
}

/// Where audit lines go: a file (appended to), stderr, or memory (tests).
pub struct AuditLog {
    out: Mutex<Box<dyn Write + Send>>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").finish_non_exhaustive()
    }
}

/// The lines an [`AuditLog::in_memory`] log received.
#[derive(Clone, Debug, Default)]
pub struct AuditBuffer(Arc<Mutex<Vec<u8>>>);

impl AuditBuffer {
    /// Every line written so far, parsed.
    pub fn lines(&self) -> Vec<serde_json::Value> {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

impl Write for AuditBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut bytes) = self.0.lock() {
            bytes.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl AuditLog {
    /// The log `target` names: `-` is stderr, anything else a file created or appended to.
    ///
    /// # Errors
    ///
    /// The file cannot be opened for appending.
    pub fn open(target: &Path) -> std::io::Result<Self> {
        if target == Path::new("-") {
            return Ok(Self::to_writer(std::io::stderr()));
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(target)?;
        Ok(Self::to_writer(file))
    }

    /// A log writing to `out`.
    pub fn to_writer(out: impl Write + Send + 'static) -> Self {
        Self {
            out: Mutex::new(Box::new(out)),
        }
    }

    /// A log kept in memory, and the handle that reads it back.
    pub fn in_memory() -> (Self, AuditBuffer) {
        let buffer = AuditBuffer::default();
        (Self::to_writer(buffer.clone()), buffer)
    }

    /// Writes `line` as one JSON line and flushes; a failure is logged, never fatal.
    pub fn record(&self, line: &AuditLine) {
        let Ok(mut text) = serde_json::to_string(line) else {
            return;
        };
        text.push('\n');
        let Ok(mut out) = self.out.lock() else {
            return;
        };
        if let Err(error) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            tracing::warn!(%error, "writing the audit log failed");
        }
    }
}

/// A Secret that a TrainJob's pods reference, and the field that references it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct SecretReference {
    /// Name of the Secret (in the TrainJob's namespace).
    pub secret: String,
    /// Dotted path of the field that names it (the runtime's fields are prefixed `<Kind>/<name>:`).
    pub path: String,
}

fn reference(secret: &str, path: String) -> SecretReference {
    SecretReference {
        secret: secret.to_owned(),
        path,
    }
}

/// The Secrets of an env list at `path` (`...env`): `valueFrom.secretKeyRef`.
fn env_secrets(env: &[EnvVar], path: &str) -> Vec<SecretReference> {
    env.iter()
        .enumerate()
        .filter_map(|(i, var)| {
            let key = var.value_from.as_ref()?.secret_key_ref.as_ref()?;
            Some(reference(
                &key.name,
                format!("{path}[{i}].valueFrom.secretKeyRef"),
            ))
        })
        .collect()
}

/// The Secrets of a volume list at `path` (`...volumes`): secret volumes and projected secrets.
fn volume_secrets(volumes: &[Volume], path: &str) -> Vec<SecretReference> {
    let mut found = Vec::new();
    for (v, volume) in volumes.iter().enumerate() {
        if let Some(name) = volume
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref())
        {
            found.push(reference(name, format!("{path}[{v}].secret.secretName")));
        }
        let sources = volume.projected.as_ref().and_then(|p| p.sources.as_ref());
        for (s, source) in sources.into_iter().flatten().enumerate() {
            if let Some(secret) = &source.secret {
                found.push(reference(
                    &secret.name,
                    format!("{path}[{v}].projected.sources[{s}].secret"),
                ));
            }
        }
    }
    found
}

/// The Secrets a pod spec at `path` references: container and init-container env and envFrom, volumes and
/// image pull secrets.
pub(crate) fn pod_spec_secrets(spec: &PodSpec, path: &str) -> Vec<SecretReference> {
    let mut found = volume_secrets(
        spec.volumes.as_deref().unwrap_or_default(),
        &format!("{path}.volumes"),
    );
    let lists = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or_default(),
        ),
        ("containers", &spec.containers),
    ];
    for (list, containers) in lists {
        for (c, container) in containers.iter().enumerate() {
            let at = format!("{path}.{list}[{c}]");
            found.extend(env_secrets(
                container.env.as_deref().unwrap_or_default(),
                &format!("{at}.env"),
            ));
            for (e, source) in container.env_from.iter().flatten().enumerate() {
                if let Some(secret) = &source.secret_ref {
                    found.push(reference(
                        &secret.name,
                        format!("{at}.envFrom[{e}].secretRef"),
                    ));
                }
            }
        }
    }
    for (i, secret) in spec.image_pull_secrets.iter().flatten().enumerate() {
        found.push(reference(
            &secret.name,
            format!("{path}.imagePullSecrets[{i}]"),
        ));
    }
    found
}

/// The Secrets a TrainJob's pods reference: its own fields (trainer and initializer env, initializer
/// `secretRef`, runtime-patch volumes, env and image pull secrets) and, when `runtime` (`(kind, name, spec)`)
/// is known, the runtime's pod templates.
pub(crate) fn trainjob_secrets(
    job: &TrainJob,
    runtime: Option<(&str, &str, &TrainingRuntimeSpec)>,
) -> Vec<SecretReference> {
    let mut found = Vec::new();
    if let Some(trainer) = &job.spec.trainer {
        found.extend(env_secrets(&trainer.env, "spec.trainer.env"));
    }
    if let Some(initializer) = &job.spec.initializer {
        for (role, source) in [
            ("dataset", &initializer.dataset),
            ("model", &initializer.model),
        ] {
            let Some(source) = source else { continue };
            found.extend(env_secrets(
                &source.env,
                &format!("spec.initializer.{role}.env"),
            ));
            if let Some(secret) = &source.secret_ref {
                found.push(reference(
                    &secret.name,
                    format!("spec.initializer.{role}.secretRef"),
                ));
            }
        }
    }
    found.extend(patch_secrets(job));
    if let Some((kind, name, spec)) = runtime {
        for (index, replicated) in spec.template.spec.replicated_jobs.iter().enumerate() {
            let Some(pod) = replicated.pod_spec() else {
                continue;
            };
            let path = format!(
                "{kind}/{name}:{}",
                kubetrain_tenancy::risk::runtime_pod_spec_path(index)
            );
            found.extend(pod_spec_secrets(pod, &path));
        }
    }
    found.sort();
    found.dedup();
    found
}

/// The Secrets of a TrainJob's runtime patches.
fn patch_secrets(job: &TrainJob) -> Vec<SecretReference> {
    let mut found = Vec::new();
    for (p, patch) in job.spec.runtime_patches.iter().enumerate() {
        let jobs = patch
            .training_runtime_spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .and_then(|t| t.spec.as_ref())
            .and_then(|s| s.replicated_jobs.as_ref());
        for (j, replicated) in jobs.into_iter().flatten().enumerate() {
            let Some(spec) = replicated
                .template
                .as_ref()
                .and_then(|t| t.spec.as_ref())
                .and_then(|s| s.template.as_ref())
                .and_then(|t| t.spec.as_ref())
            else {
                continue;
            };
            let path = format!(
                "spec.runtimePatches[{p}].trainingRuntimeSpec.template.spec.replicatedJobs[{j}].template.spec.template.spec"
            );
            found.extend(volume_secrets(
                spec.volumes.as_deref().unwrap_or_default(),
                &format!("{path}.volumes"),
            ));
            let lists = [
                ("initContainers", spec.init_containers.as_deref()),
                ("containers", spec.containers.as_deref()),
            ];
            for (list, containers) in lists {
                for (c, container) in containers.unwrap_or_default().iter().enumerate() {
                    let env = container.env.as_deref().unwrap_or_default();
                    found.extend(env_secrets(env, &format!("{path}.{list}[{c}].env")));
                }
            }
            for (i, secret) in spec.image_pull_secrets.iter().flatten().enumerate() {
                found.push(reference(
                    &secret.name,
                    format!("{path}.imagePullSecrets[{i}]"),
                ));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests;
