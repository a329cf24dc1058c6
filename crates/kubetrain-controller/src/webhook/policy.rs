//! The training policy at admission: where it comes from (a file read at start, or a ConfigMap watched so that
//! a change applies without a restart) and the denials it adds to the TrainJob and runtime reviews.
//!
//! Without a policy the webhooks behave as upstream's. A ConfigMap that holds no valid policy denies every
//! TrainJob and runtime review with the parse error (fail closed: a typo never switches the policy off
//! silently); deleting the ConfigMap returns to upstream's behaviour.
//!
//! ```
//! use kubetrain_controller::webhook::PolicyGate;
//!
//! let gate = PolicyGate::none();
//! assert!(gate.current().unwrap().is_none());
//! gate.apply_text(Some("apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\n"));
//! assert!(gate.current().unwrap().is_some());
//! gate.apply_text(Some("kind: Nonsense\n"));
//! assert!(gate.current().unwrap_err().contains("apiVersion"));
//! gate.apply_text(None);
//! assert!(gate.current().unwrap().is_none());
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, RwLock};

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use kubetrain_api::catalog::DEFAULT_NAMESPACE;
use kubetrain_api::{FieldError, RuntimeCatalog, TrainJob, TrainingRuntimeSpec};
use kubetrain_tenancy::policy::{CONFIGMAP_KEY, TrainingPolicy};

/// What the gate holds now.
#[derive(Clone, Debug)]
enum Current {
    /// No policy: upstream's behaviour.
    None,
    /// A valid policy.
    Policy(Arc<TrainingPolicy>),
    /// The source holds something that is not a valid policy: why.
    Invalid(String),
}

/// The training policy the webhooks enforce, shared by every review and swapped by the ConfigMap watch.
#[derive(Clone)]
pub struct PolicyGate {
    current: Arc<RwLock<Current>>,
    /// Where the policy comes from, for messages (`ConfigMap ns/name`, `file path`).
    source: Arc<str>,
    /// Reads namespace labels for namespace selectors (none: selectors never match).
    client: Option<Client>,
}

impl std::fmt::Debug for PolicyGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyGate")
            .field("source", &self.source)
            .field("current", &self.current.read().map(|c| c.clone()).ok())
            .finish_non_exhaustive()
    }
}

impl PolicyGate {
    /// No policy (upstream's behaviour) until one is applied.
    pub fn none() -> Self {
        Self {
            current: Arc::new(RwLock::new(Current::None)),
            source: Arc::from("policy"),
            client: None,
        }
    }

    /// Always `policy`.
    pub fn fixed(policy: TrainingPolicy) -> Self {
        let gate = Self::none();
        gate.set(Current::Policy(Arc::new(policy)));
        gate
    }

    /// The policy in the file at `path` (a TrainingPolicy document or a ConfigMap holding one).
    ///
    /// # Errors
    ///
    /// The file cannot be read or holds no valid policy: the message names the file and the field.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--training-policy {}: {e}", path.display()))?;
        let policy = TrainingPolicy::from_yaml(&text)
            .map_err(|e| format!("--training-policy {}: {e}", path.display()))?;
        let mut gate = Self::fixed(policy);
        gate.source = Arc::from(format!("file {}", path.display()));
        Ok(gate)
    }

    /// The policy in ConfigMap `namespace/name` (key `policy.yaml`), and the watch that keeps it current
    /// (spawn it; it runs until dropped, re-listing after errors). Until the watch has listed, there is no
    /// policy. Needs `get`, `list` and `watch` on ConfigMaps in `namespace`.
    pub fn watch_configmap(
        client: Client,
        namespace: &str,
        name: &str,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let mut gate = Self::none();
        gate.source = Arc::from(format!("ConfigMap {namespace}/{name}"));
        let api = Api::<ConfigMap>::namespaced(client, namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let wanted = name.to_owned();
        let updater = gate.clone();
        let watch = async move {
            let mut seen_in_list = false;
            watcher(api, config)
                .default_backoff()
                .for_each(|event| {
                    updater.on_event(event, &wanted, &mut seen_in_list);
                    std::future::ready(())
                })
                .await;
        };
        (gate, watch)
    }

    fn on_event(
        &self,
        event: Result<watcher::Event<ConfigMap>, watcher::Error>,
        wanted: &str,
        seen_in_list: &mut bool,
    ) {
        let is_wanted = |cm: &ConfigMap| cm.metadata.name.as_deref() == Some(wanted);
        match event {
            Ok(watcher::Event::Init) => *seen_in_list = false,
            Ok(watcher::Event::InitApply(cm)) if is_wanted(&cm) => {
                *seen_in_list = true;
                self.apply_configmap(Some(&cm));
            }
            Ok(watcher::Event::InitDone) if !*seen_in_list => self.apply_configmap(None),
            Ok(watcher::Event::Apply(cm)) if is_wanted(&cm) => self.apply_configmap(Some(&cm)),
            Ok(watcher::Event::Delete(cm)) if is_wanted(&cm) => self.apply_configmap(None),
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, source = %self.source, "watching the training policy failed")
            }
        }
    }

    /// Reads namespace labels through `client` for exceptions with a `namespaceSelector` (needs `get` on
    /// namespaces; without it, or when the read fails, such selectors do not match).
    pub fn with_namespace_reads(mut self, client: Client) -> Self {
        self.client = Some(client);
        self
    }

    fn set(&self, current: Current) {
        if let Ok(mut slot) = self.current.write() {
            *slot = current;
        }
    }

    /// Applies a ConfigMap's `policy.yaml` (`None`: the ConfigMap is gone, so no policy).
    pub fn apply_configmap(&self, configmap: Option<&ConfigMap>) {
        match configmap {
            None => self.apply_text(None),
            Some(cm) => match cm.data.as_ref().and_then(|d| d.get(CONFIGMAP_KEY)) {
                Some(text) => self.apply_text(Some(text)),
                None => self.set_invalid(format!(
                    "{} has no key {CONFIGMAP_KEY}: put the TrainingPolicy document there, or delete the ConfigMap",
                    self.source
                )),
            },
        }
    }

    /// Applies a policy document (`None`: no policy).
    pub fn apply_text(&self, text: Option<&str>) {
        let Some(text) = text else {
            tracing::info!(source = %self.source, "no training policy: upstream's admission rules only");
            self.set(Current::None);
            return;
        };
        match TrainingPolicy::from_yaml(text) {
            Ok(policy) => {
                tracing::info!(source = %self.source, policy = policy.name(), exceptions = policy.spec.exceptions.len(), "training policy loaded");
                self.set(Current::Policy(Arc::new(policy)));
            }
            Err(error) => self.set_invalid(format!("{} {CONFIGMAP_KEY}: {error}", self.source)),
        }
    }

    fn set_invalid(&self, message: String) {
        tracing::error!(%message, "the training policy is invalid: TrainJob and runtime reviews are denied until it is fixed or removed");
        self.set(Current::Invalid(message));
    }

    /// The policy in force (`None`: no policy), or why the source holds no valid one.
    ///
    /// # Errors
    ///
    /// The source holds something that is not a valid policy.
    pub fn current(&self) -> Result<Option<Arc<TrainingPolicy>>, String> {
        match self.current.read().map(|c| c.clone()) {
            Ok(Current::None) => Ok(None),
            Ok(Current::Policy(policy)) => Ok(Some(policy)),
            Ok(Current::Invalid(message)) => Err(message),
            Err(_) => Err("the training policy lock is poisoned".to_owned()),
        }
    }

    async fn namespace_labels(
        &self,
        policy: &TrainingPolicy,
        namespace: Option<&str>,
    ) -> Option<BTreeMap<String, String>> {
        let (client, namespace) = (self.client.as_ref()?, namespace?);
        if !policy.needs_namespace_labels() {
            return None;
        }
        match Api::<Namespace>::all(client.clone()).get(namespace).await {
            Ok(ns) => Some(ns.metadata.labels.unwrap_or_default()),
            Err(error) => {
                tracing::warn!(%error, namespace, "reading the namespace's labels for the training policy failed");
                None
            }
        }
    }

    /// The policy's denials of a TrainJob create (or update: only what `old` did not have already), judged
    /// with the runtime it references from `catalog`.
    pub async fn trainjob_denials(
        &self,
        job: &TrainJob,
        old: Option<&TrainJob>,
        catalog: &RuntimeCatalog,
    ) -> Vec<FieldError> {
        let policy = match self.current() {
            Ok(Some(policy)) => policy,
            Ok(None) => return Vec::new(),
            Err(message) => return vec![FieldError::error("", invalid(&message))],
        };
        let namespace = job
            .metadata
            .namespace
            .as_deref()
            .unwrap_or(DEFAULT_NAMESPACE);
        let labels = self.namespace_labels(&policy, Some(namespace)).await;
        let runtime = catalog.lookup(&job.spec.runtime_ref, namespace).ok();
        let denials = policy.evaluate_trainjob(job, runtime, labels.as_ref());
        match old {
            Some(old) => only_new(
                denials,
                &policy.evaluate_trainjob(old, runtime, labels.as_ref()),
            ),
            None => denials,
        }
    }

    /// The policy's denials of a runtime create (or update: only what `old` did not have already).
    pub async fn runtime_denials(
        &self,
        kind: &str,
        name: &str,
        namespace: Option<&str>,
        spec: &TrainingRuntimeSpec,
        old: Option<&TrainingRuntimeSpec>,
    ) -> Vec<FieldError> {
        let policy = match self.current() {
            Ok(Some(policy)) => policy,
            Ok(None) => return Vec::new(),
            Err(message) => return vec![FieldError::error("", invalid(&message))],
        };
        let labels = self.namespace_labels(&policy, namespace).await;
        let denials = policy.evaluate_runtime(kind, name, namespace, spec, labels.as_ref());
        match old {
            Some(old) => only_new(
                denials,
                &policy.evaluate_runtime(kind, name, namespace, old, labels.as_ref()),
            ),
            None => denials,
        }
    }
}

fn invalid(message: &str) -> String {
    format!(
        "the training policy is invalid, so nothing is admitted until it is fixed or removed: {message} \
         (check it with kubetrain validate --policy FILE)"
    )
}

/// The denials of `new` that `old` did not have (same path and message): an update may keep what was
/// admitted before the policy changed, but not add to it.
fn only_new(new: Vec<FieldError>, old: &[FieldError]) -> Vec<FieldError> {
    new.into_iter().filter(|d| !old.contains(d)).collect()
}

/// Where the operator reads the training policy from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TrainingPolicySource {
    /// ConfigMap [`DEFAULT_CONFIGMAP`](kubetrain_tenancy::policy::DEFAULT_CONFIGMAP) in the operator's
    /// namespace, watched (absent: no policy).
    #[default]
    DefaultConfigMap,
    /// A ConfigMap, watched (absent: no policy).
    ConfigMap {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A file, read once at start.
    File(std::path::PathBuf),
    /// No policy at all (nothing watched).
    Off,
}

impl std::str::FromStr for TrainingPolicySource {
    type Err = String;

    /// `NAMESPACE/NAME` (a ConfigMap), or `none` (no policy).
    fn from_str(text: &str) -> Result<Self, String> {
        if text == "none" {
            return Ok(Self::Off);
        }
        match text.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(Self::ConfigMap {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                })
            }
            _ => Err(format!(
                "{text:?} is not NAMESPACE/NAME (e.g. kubeflow-system/kubetrain-training-policy), nor `none`"
            )),
        }
    }
}

/// The operator's admission extras: the training policy's source and the audit log.
#[derive(Clone, Debug, Default)]
pub(crate) struct AdmissionSetup {
    /// Where the policy comes from.
    pub policy: TrainingPolicySource,
    /// Audit lines (none: events only).
    pub audit_log: Option<Arc<crate::audit::AuditLog>>,
    /// A `TrainJobSubmitted` event for every admitted TrainJob; `false` (the default) keeps it for those that
    /// reference Secrets, so a TrainJob costs no more API requests than upstream's
    /// ([`super::AdmissionAudit::without_submission_events`]).
    pub all_submission_events: bool,
}

/// A boxed watch future.
type Watch = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

impl AdmissionSetup {
    /// The gate (and the watch that feeds it, to spawn) and the audit, for an operator in `namespace` whose
    /// events are reported as `reporter`.
    ///
    /// # Errors
    ///
    /// A policy file that cannot be read or is not a valid policy.
    pub fn start(
        &self,
        client: &Client,
        namespace: &str,
        reporter: kube::runtime::events::Reporter,
    ) -> Result<(PolicyGate, Option<Watch>, super::AdmissionAudit), String> {
        let (gate, watch): (PolicyGate, Option<Watch>) = match &self.policy {
            TrainingPolicySource::Off => (PolicyGate::none(), None),
            TrainingPolicySource::File(path) => (PolicyGate::from_file(path)?, None),
            TrainingPolicySource::DefaultConfigMap => {
                let name = kubetrain_tenancy::policy::DEFAULT_CONFIGMAP;
                let (gate, watch) = PolicyGate::watch_configmap(client.clone(), namespace, name);
                (gate, Some(Box::pin(watch)))
            }
            TrainingPolicySource::ConfigMap { namespace, name } => {
                let (gate, watch) = PolicyGate::watch_configmap(client.clone(), namespace, name);
                (gate, Some(Box::pin(watch)))
            }
        };
        let mut audit = super::AdmissionAudit::events(client.clone(), reporter);
        if let Some(log) = &self.audit_log {
            audit = audit.with_log(log.clone());
        }
        if !self.all_submission_events {
            audit = audit.without_submission_events();
        }
        Ok((gate.with_namespace_reads(client.clone()), watch, audit))
    }
}
