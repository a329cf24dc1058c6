//! A set of known runtimes that TrainJobs are resolved against, as the webhook and controller do on a cluster.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::constants::{CLUSTER_TRAINING_RUNTIME_KIND, GROUP, TRAINING_RUNTIME_KIND};
use crate::document::Document;
use crate::{ClusterTrainingRuntime, RuntimeRef, TrainingRuntime, TrainingRuntimeSpec};

/// Namespace of objects that do not name one (what `kubectl apply` would use).
pub const DEFAULT_NAMESPACE: &str = "default";

/// Known runtimes: cluster-scoped by name, namespaced by namespace and name.
#[derive(Clone, Debug, Default)]
pub struct RuntimeCatalog {
    cluster: BTreeMap<String, ClusterTrainingRuntime>,
    namespaced: BTreeMap<(String, String), TrainingRuntime>,
}

/// A runtime found in a [`RuntimeCatalog`].
#[derive(Clone, Copy, Debug)]
pub enum RuntimeEntry<'a> {
    /// A ClusterTrainingRuntime.
    Cluster(&'a ClusterTrainingRuntime),
    /// A TrainingRuntime.
    Namespaced(&'a TrainingRuntime),
}

impl<'a> RuntimeEntry<'a> {
    /// The runtime's spec.
    pub fn spec(self) -> &'a TrainingRuntimeSpec {
        match self {
            Self::Cluster(r) => &r.spec,
            Self::Namespaced(r) => &r.spec,
        }
    }
    /// The runtime's metadata.
    pub fn metadata(self) -> &'a ObjectMeta {
        match self {
            Self::Cluster(r) => &r.metadata,
            Self::Namespaced(r) => &r.metadata,
        }
    }
    /// `ClusterTrainingRuntime` or `TrainingRuntime`.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Cluster(_) => CLUSTER_TRAINING_RUNTIME_KIND,
            Self::Namespaced(_) => TRAINING_RUNTIME_KIND,
        }
    }
    /// The runtime's name.
    pub fn name(self) -> &'a str {
        self.metadata().name.as_deref().unwrap_or_default()
    }
    /// Value of a runtime label.
    pub fn label(self, key: &str) -> Option<&'a str> {
        self.metadata()
            .labels
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }
}

/// Why a runtime reference did not resolve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The reference names a kind the trainer does not serve.
    #[error("unsupported runtime: {0}")]
    Unsupported(String),
    /// No runtime of that kind and name.
    #[error("{resource} {name:?} not found")]
    NotFound {
        /// Plural resource with group, as Kubernetes prints it.
        resource: &'static str,
        /// Name looked up.
        name: String,
    },
}

impl RuntimeCatalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a cluster runtime.
    pub fn add_cluster(&mut self, runtime: ClusterTrainingRuntime) {
        self.cluster.insert(runtime.name().to_owned(), runtime);
    }

    /// Adds a cluster runtime unless one of the same name is known (for built-in defaults).
    pub fn add_cluster_if_absent(&mut self, runtime: ClusterTrainingRuntime) {
        self.cluster
            .entry(runtime.name().to_owned())
            .or_insert(runtime);
    }

    /// Adds (or replaces) a namespaced runtime; without a namespace it lands in `default`.
    pub fn add_namespaced(&mut self, runtime: TrainingRuntime) {
        let namespace = runtime
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
        self.namespaced
            .insert((namespace, runtime.name().to_owned()), runtime);
    }

    /// Adds the document if it is a runtime; returns whether it was.
    pub fn add_document(&mut self, document: &Document) -> bool {
        match document {
            Document::ClusterTrainingRuntime(r) => self.add_cluster((**r).clone()),
            Document::TrainingRuntime(r) => self.add_namespaced((**r).clone()),
            _ => return false,
        }
        true
    }

    /// Resolves a TrainJob's runtime reference from the TrainJob's namespace.
    pub fn lookup(
        &self,
        runtime_ref: &RuntimeRef,
        namespace: &str,
    ) -> Result<RuntimeEntry<'_>, LookupError> {
        let group = runtime_ref.api_group_or_default();
        let kind = runtime_ref.kind_or_default();
        if group != GROUP || ![CLUSTER_TRAINING_RUNTIME_KIND, TRAINING_RUNTIME_KIND].contains(&kind)
        {
            return Err(LookupError::Unsupported(runtime_ref.group_kind()));
        }
        let name = runtime_ref.name.as_str();
        if kind == CLUSTER_TRAINING_RUNTIME_KIND {
            self.cluster
                .get(name)
                .map(RuntimeEntry::Cluster)
                .ok_or_else(|| LookupError::NotFound {
                    resource: "clustertrainingruntimes.trainer.kubeflow.org",
                    name: name.to_owned(),
                })
        } else {
            self.namespaced
                .get(&(namespace.to_owned(), name.to_owned()))
                .map(RuntimeEntry::Namespaced)
                .ok_or_else(|| LookupError::NotFound {
                    resource: "trainingruntimes.trainer.kubeflow.org",
                    name: name.to_owned(),
                })
        }
    }

    /// Names of the cluster runtimes, sorted.
    pub fn cluster_names(&self) -> impl Iterator<Item = &str> {
        self.cluster.keys().map(String::as_str)
    }

    /// Names of the namespaced runtimes in `namespace`, sorted.
    pub fn namespaced_names<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a str> + 'a {
        self.namespaced
            .keys()
            .filter(move |(ns, _)| ns == namespace)
            .map(|(_, name)| name.as_str())
    }

    /// Every runtime, cluster ones first.
    pub fn entries(&self) -> impl Iterator<Item = RuntimeEntry<'_>> {
        self.cluster
            .values()
            .map(RuntimeEntry::Cluster)
            .chain(self.namespaced.values().map(RuntimeEntry::Namespaced))
    }
}
