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
#[non_exhaustive]
pub enum LookupError {
    /// The reference names a kind the trainer does not serve.
    #[error("unsupported runtime: {0}")]
    Unsupported(String),
    /// No runtime of that kind and name.
    #[error("{resource} {name:?} not found")]
    NotFound {
        /// Kind with group, as upstream's webhook prints it (controller-runtime's cache reader names the kind,
        /// not the resource: `ClusterTrainingRuntime.trainer.kubeflow.org "x" not found`).
        resource: &'static str,
        /// Name looked up.
        name: String,
        /// Where it was looked up and what is there (boxed: errors that carry this one stay small).
        scope: Box<LookupScope>,
    },
}

/// Where a runtime was looked up and which runtimes are there, for "did you mean".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookupScope {
    /// The TrainJob's namespace, for a TrainingRuntime (`None` for a ClusterTrainingRuntime).
    pub namespace: Option<String>,
    /// Names of the runtimes of that kind the TrainJob could have named, sorted.
    pub available: Vec<String>,
}

/// Runtime lists longer than this (in characters) are not spelled out in [`LookupError::short_message`].
const SHORT_LIST: usize = 100;

impl LookupError {
    /// A short message for people reading `validate`, `render` or `run` output: the name, a "did you
    /// mean" when a known runtime is a likely typo of it, and the available runtimes when they are few.
    /// [`Display`](std::fmt::Display) keeps upstream's wording, which the webhook reports to the cluster.
    pub fn short_message(&self) -> String {
        let LookupError::NotFound {
            resource,
            name,
            scope,
        } = self
        else {
            return self.to_string();
        };
        let LookupScope {
            namespace,
            available,
        } = &**scope;
        let kind = resource.split('.').next().unwrap_or(resource);
        let mut message = format!("{kind} {name:?} not found");
        if let Some(ns) = namespace {
            message.push_str(&format!(" in namespace {ns}"));
        }
        if let Some(candidate) = crate::document::closest(name, available.iter()) {
            message.push_str(&format!("; did you mean {candidate:?}?"));
        } else if available.is_empty() {
            match namespace {
                Some(ns) => message.push_str(&format!("; namespace {ns} has no {kind}")),
                None => message.push_str(&format!("; no {kind} is known")),
            }
        } else {
            let list = available.join(", ");
            if list.len() <= SHORT_LIST {
                message.push_str(&format!("; available: {list}"));
            } else {
                message.push_str(&format!("; none of the {} known is close", available.len()));
            }
        }
        message
    }
}

/// `runtime` with its CRD defaults, as the API server stores it. The typed runtime always serializes and
/// reads back, and defaults are typed values of the schema, so the fallback (the runtime as given) is not
/// expected to be taken.
fn stored<T: crate::crd::CrdSchema + Clone>(runtime: &T) -> T {
    crate::crd::with_defaults(runtime).unwrap_or_else(|_| runtime.clone())
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
    ///
    /// A document is what a file holds, not what the API server stores: the runtime is stored here as the API
    /// server would store it, with its CRD's schema defaults filled in ([`crate::crd::with_defaults`]:
    /// `replicas: 1` and `groupName: default` on every replicatedJob, the MPI and pod-group defaults, …), so
    /// that a TrainJob resolved against it renders as the controller renders it against the stored runtime.
    /// [`add_cluster`](Self::add_cluster) and [`add_namespaced`](Self::add_namespaced) keep a runtime as given
    /// (one read from the API server is defaulted already).
    pub fn add_document(&mut self, document: &Document) -> bool {
        match document {
            Document::ClusterTrainingRuntime(r) => self.add_cluster(stored(r)),
            Document::TrainingRuntime(r) => self.add_namespaced(stored(r)),
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
                    resource: "ClusterTrainingRuntime.trainer.kubeflow.org",
                    name: name.to_owned(),
                    scope: Box::new(LookupScope {
                        namespace: None,
                        available: self.cluster_names().map(str::to_owned).collect(),
                    }),
                })
        } else {
            self.namespaced
                .get(&(namespace.to_owned(), name.to_owned()))
                .map(RuntimeEntry::Namespaced)
                .ok_or_else(|| LookupError::NotFound {
                    resource: "TrainingRuntime.trainer.kubeflow.org",
                    name: name.to_owned(),
                    scope: Box::new(LookupScope {
                        namespace: Some(namespace.to_owned()),
                        available: self
                            .namespaced_names(namespace)
                            .map(str::to_owned)
                            .collect(),
                    }),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MLPolicySource, PodGroupPolicySource, RuntimeRef, parse_documents};

    const RUNTIMES: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: mpi}
spec:
  mlPolicy: {numNodes: 2, mpi: {}}
  podGroupPolicy: {coscheduling: {}}
  template:
    spec:
      replicatedJobs:
        - name: launcher
          template: {spec: {template: {spec: {containers: [{name: node, image: x, ports: [{containerPort: 22}]}]}}}}
        - name: node
          replicas: 3
          groupName: workers
          template: {spec: {template: {spec: {containers: [{name: node, image: x}]}}}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: plain, namespace: team}
spec:
  template:
    spec:
      replicatedJobs:
        - name: node
          template: {spec: {template: {spec: {containers: [{name: node, image: x}]}}}}
";

    fn catalog() -> RuntimeCatalog {
        let mut catalog = RuntimeCatalog::new();
        for doc in parse_documents(RUNTIMES).expect("fixture parses") {
            assert!(catalog.add_document(&doc.document));
        }
        catalog
    }

    fn spec<'a>(catalog: &'a RuntimeCatalog, kind: &str, name: &str) -> &'a TrainingRuntimeSpec {
        let reference = RuntimeRef {
            kind: Some(kind.into()),
            ..RuntimeRef::cluster(name)
        };
        catalog.lookup(&reference, "team").expect("runtime").spec()
    }

    #[test]
    fn a_missing_runtime_gets_a_short_message_with_did_you_mean() {
        // (kind, name, short message): a typo, a name close to nothing, a namespace without runtimes.
        let cases = [
            (
                CLUSTER_TRAINING_RUNTIME_KIND,
                "mpj",
                r#"ClusterTrainingRuntime "mpj" not found; did you mean "mpi"?"#,
            ),
            (
                CLUSTER_TRAINING_RUNTIME_KIND,
                "torch-distributed",
                r#"ClusterTrainingRuntime "torch-distributed" not found; available: mpi"#,
            ),
            (
                TRAINING_RUNTIME_KIND,
                "plane",
                r#"TrainingRuntime "plane" not found in namespace team; did you mean "plain"?"#,
            ),
        ];
        let catalog = catalog();
        for (kind, name, want) in cases {
            let reference = RuntimeRef {
                kind: Some(kind.into()),
                ..RuntimeRef::cluster(name)
            };
            let err = catalog.lookup(&reference, "team").unwrap_err();
            assert_eq!(err.short_message(), want, "{kind} {name}");
        }
        let elsewhere = RuntimeRef {
            kind: Some(TRAINING_RUNTIME_KIND.into()),
            ..RuntimeRef::cluster("plain")
        };
        let err = catalog.lookup(&elsewhere, "other").unwrap_err();
        assert_eq!(
            err.short_message(),
            r#"TrainingRuntime "plain" not found in namespace other; namespace other has no TrainingRuntime"#
        );
        // Upstream's wording stays in Display, for the webhook.
        assert_eq!(
            err.to_string(),
            r#"TrainingRuntime.trainer.kubeflow.org "plain" not found"#
        );
    }

    #[test]
    fn a_long_runtime_list_is_not_spelled_out() {
        let mut catalog = RuntimeCatalog::new();
        for i in 0..20 {
            let mut runtime = ClusterTrainingRuntime::default();
            runtime.metadata.name = Some(format!("team-runtime-number-{i:02}"));
            catalog.add_cluster(runtime);
        }
        let err = catalog
            .lookup(&RuntimeRef::cluster("zzz"), "team")
            .unwrap_err();
        assert_eq!(
            err.short_message(),
            r#"ClusterTrainingRuntime "zzz" not found; none of the 20 known is close"#
        );
    }

    #[test]
    fn documents_are_stored_with_crd_defaults_as_the_api_server_stores_them() {
        let catalog = catalog();
        let mpi = spec(&catalog, CLUSTER_TRAINING_RUNTIME_KIND, "mpi");
        let jobs: Vec<_> = mpi
            .template
            .spec
            .replicated_jobs
            .iter()
            .map(|j| (j.name.as_str(), j.replicas, j.group_name.as_deref()))
            .collect();
        // Absent fields get the default; values written in the file stay.
        assert_eq!(
            jobs,
            [
                ("launcher", Some(1), Some("default")),
                ("node", Some(3), Some("workers"))
            ]
        );
        let Some(MLPolicySource::Mpi(policy)) =
            mpi.ml_policy.as_ref().and_then(|p| p.source.as_ref())
        else {
            panic!("an MPI policy")
        };
        assert_eq!(
            (
                policy.num_proc_per_node,
                policy.ssh_auth_mount_path.as_deref(),
                policy.run_launcher_as_node
            ),
            (Some(1), Some("/root/.ssh"), Some(false))
        );
        let Some(PodGroupPolicySource::Coscheduling(gang)) = mpi
            .pod_group_policy
            .as_ref()
            .and_then(|p| p.source.as_ref())
        else {
            panic!("a coscheduling policy")
        };
        assert_eq!(gang.schedule_timeout_seconds, Some(60));
        // Core-type defaults inside the JobSet template too (the CRD declares `protocol: TCP` on ports).
        let launcher = mpi.template.spec.replicated_jobs[0]
            .template
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("a pod spec");
        let port = &launcher.containers[0].ports.as_ref().expect("ports")[0];
        assert_eq!(port.protocol.as_deref(), Some("TCP"));

        let plain = spec(&catalog, TRAINING_RUNTIME_KIND, "plain");
        let job = &plain.template.spec.replicated_jobs[0];
        assert_eq!(
            (job.replicas, job.group_name.as_deref()),
            (Some(1), Some("default"))
        );
        assert!(plain.ml_policy.is_none(), "no policy is invented");
    }

    #[test]
    fn runtimes_added_as_objects_are_kept_as_given() {
        let mut catalog = RuntimeCatalog::new();
        for doc in parse_documents(RUNTIMES).expect("fixture parses") {
            match doc.document {
                Document::ClusterTrainingRuntime(r) => catalog.add_cluster(*r),
                Document::TrainingRuntime(r) => catalog.add_namespaced(*r),
                _ => {}
            }
        }
        let mpi = spec(&catalog, CLUSTER_TRAINING_RUNTIME_KIND, "mpi");
        assert_eq!(mpi.template.spec.replicated_jobs[0].replicas, None);
    }

    #[test]
    fn defaulting_a_stored_runtime_changes_nothing() {
        let catalog = catalog();
        for entry in catalog.entries() {
            if let RuntimeEntry::Cluster(r) = entry {
                assert_eq!(&crate::crd::with_defaults(r).expect("defaults"), r);
            }
        }
    }
}
