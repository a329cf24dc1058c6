//! What the TrainJob webhook reads from the cluster: the referenced runtime and, for runtime-patch updates,
//! the TrainJob's JobSet. Reads only; every replica answers webhooks, leader or not.
//!
//! Runtimes come from a [`RuntimeCache`] (watches of both runtime kinds, as controller-runtime's cached
//! client) when the admission has one; a runtime the cache does not hold (not synced yet, or created a moment
//! ago) and every other read is a live GET. At most [`MAX_LIVE_READS`] live GETs run at once, so a burst of
//! reviews cannot open an unbounded number of connections to the API server.

use std::future::Future;
use std::sync::Arc;

use futures_util::StreamExt as _;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client};
use kubetrain_api::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, GROUP, SYSTEM_PRIORITY_CLASSES, TRAINING_RUNTIME_KIND,
};
use kubetrain_api::jobset::JobSet;
use kubetrain_api::{
    ClusterTrainingRuntime, FieldError, PodGroupPolicySource, RuntimeCatalog, TrainJob,
    TrainingRuntime,
};
use tokio::sync::Semaphore;

/// Live GETs the webhooks run at once; further reads wait for one to finish.
pub const MAX_LIVE_READS: usize = 16;

/// Both runtime kinds, kept current by watches (kube's reflector stores), for the webhooks to read without a
/// request per review. Needs `list` and `watch` on both (see [`super::required_rules`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use kubetrain_test_support::FakeApiServer;
/// use kubetrain_controller::webhook::RuntimeCache;
///
/// let apiserver = FakeApiServer::start();
/// let (cache, watches) = RuntimeCache::new(apiserver.client());
/// tokio::spawn(watches);
/// cache.wait_until_ready().await;
/// assert_eq!(cache.len(), 0);
/// # }
/// ```
#[derive(Clone)]
pub struct RuntimeCache {
    cluster: Store<ClusterTrainingRuntime>,
    namespaced: Store<TrainingRuntime>,
}

impl RuntimeCache {
    /// The cache and the watches that fill it: the cache is empty until the returned future runs (spawn it;
    /// it runs until dropped, re-listing after errors with kube's default backoff).
    pub fn new(client: Client) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (cluster, cluster_writer) = reflector::store();
        let (namespaced, namespaced_writer) = reflector::store();
        let config = watcher::Config::default();
        let clusters = reflector::reflector(
            cluster_writer,
            watcher(
                Api::<ClusterTrainingRuntime>::all(client.clone()),
                config.clone(),
            ),
        )
        .default_backoff()
        .for_each(|_| std::future::ready(()));
        let namespaceds = reflector::reflector(
            namespaced_writer,
            watcher(Api::<TrainingRuntime>::all(client), config),
        )
        .default_backoff()
        .for_each(|_| std::future::ready(()));
        let run = async move {
            futures_util::future::join(clusters, namespaceds).await;
        };
        (
            Self {
                cluster,
                namespaced,
            },
            run,
        )
    }

    /// Waits until both kinds have been listed once.
    pub async fn wait_until_ready(&self) {
        let _ = self.cluster.wait_until_ready().await;
        let _ = self.namespaced.wait_until_ready().await;
    }

    /// Runtimes held, both kinds together.
    pub fn len(&self) -> usize {
        self.cluster.len() + self.namespaced.len()
    }

    /// Whether the cache holds no runtime.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn cluster(&self, name: &str) -> Option<ClusterTrainingRuntime> {
        self.cluster
            .get(&ObjectRef::new(name))
            .map(|r| r.as_ref().clone())
    }

    fn namespaced(&self, namespace: &str, name: &str) -> Option<TrainingRuntime> {
        self.namespaced
            .get(&ObjectRef::new(name).within(namespace))
            .map(|r| r.as_ref().clone())
    }
}

/// Reads runtimes and JobSets through a kube client, runtimes from a [`RuntimeCache`] when it has one.
#[derive(Clone)]
pub(crate) struct ClusterReader {
    client: Client,
    cache: Option<RuntimeCache>,
    live: Arc<Semaphore>,
}

impl ClusterReader {
    /// A reader using `client` for every read (at most `MAX_LIVE_READS`, 16, at once).
    pub fn new(client: Client) -> Self {
        Self {
            client,
            cache: None,
            live: Arc::new(Semaphore::new(MAX_LIVE_READS)),
        }
    }

    /// Reads runtimes from `cache` first.
    pub fn with_cache(mut self, cache: RuntimeCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Runs one live read, waiting while [`MAX_LIVE_READS`] others run.
    async fn live<T>(
        &self,
        read: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        let _slot = self.live.acquire().await;
        read.await
    }

    /// A catalog holding the runtime `job` references (in the job's namespace for a TrainingRuntime), or
    /// nothing when it does not exist or is of an unsupported kind: the validation rules then report it.
    pub async fn catalog_for(&self, job: &TrainJob) -> Result<RuntimeCatalog, kube::Error> {
        let mut catalog = RuntimeCatalog::new();
        let reference = &job.spec.runtime_ref;
        if reference.api_group_or_default() != GROUP {
            return Ok(catalog);
        }
        let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
        match reference.kind_or_default() {
            CLUSTER_TRAINING_RUNTIME_KIND => {
                let cached = self.cache.as_ref().and_then(|c| c.cluster(&reference.name));
                let runtime = match cached {
                    Some(runtime) => Some(runtime),
                    None => {
                        let api: Api<ClusterTrainingRuntime> = Api::all(self.client.clone());
                        self.live(api.get_opt(&reference.name)).await?
                    }
                };
                if let Some(runtime) = runtime {
                    catalog.add_cluster(runtime);
                }
            }
            TRAINING_RUNTIME_KIND => {
                let cached = self
                    .cache
                    .as_ref()
                    .and_then(|c| c.namespaced(namespace, &reference.name));
                let runtime = match cached {
                    Some(runtime) => Some(runtime),
                    None => {
                        let api: Api<TrainingRuntime> =
                            Api::namespaced(self.client.clone(), namespace);
                        self.live(api.get_opt(&reference.name)).await?
                    }
                };
                if let Some(mut runtime) = runtime {
                    runtime.metadata.namespace = Some(namespace.to_owned());
                    catalog.add_namespaced(runtime);
                }
            }
            _ => {}
        }
        Ok(catalog)
    }

    /// Upstream's Volcano rule that needs the cluster: with a Volcano pod-group policy, each replicated job's
    /// `priorityClassName` must name an existing PriorityClass. As upstream, the two system classes end the
    /// check at once. The names are read from the runtime's template (runtime patches are not overlaid).
    pub async fn priority_class_errors(
        &self,
        job: &TrainJob,
        catalog: &RuntimeCatalog,
    ) -> Result<Vec<FieldError>, kube::Error> {
        let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
        let Ok(runtime) = catalog.lookup(&job.spec.runtime_ref, namespace) else {
            return Ok(Vec::new());
        };
        let spec = runtime.spec();
        let volcano = spec
            .pod_group_policy
            .as_ref()
            .and_then(|p| p.source.as_ref())
            .is_some_and(|s| matches!(s, PodGroupPolicySource::Volcano(_)));
        if !volcano {
            return Ok(Vec::new());
        }
        let api: Api<PriorityClass> = Api::all(self.client.clone());
        let mut errors = Vec::new();
        for replicated in &spec.template.spec.replicated_jobs {
            let Some(name) = replicated
                .template
                .spec
                .as_ref()
                .and_then(|job| job.template.spec.as_ref())
                .and_then(|pod| pod.priority_class_name.as_deref())
            else {
                continue;
            };
            if SYSTEM_PRIORITY_CLASSES.contains(&name) {
                break;
            }
            if self.live(api.get_opt(name)).await?.is_none() {
                errors.push(FieldError::error(
                    "spec.templateSpec.priorityClassName",
                    format!(
                        "Invalid value: {name:?}: PriorityClass {name:?} doesn't exist: priorityclasses.scheduling.k8s.io {name:?} not found"
                    ),
                ));
            }
        }
        Ok(errors)
    }

    /// The JobSet the controller rendered for `job`, if it exists (same name and namespace).
    pub async fn jobset_of(&self, job: &TrainJob) -> Result<Option<JobSet>, kube::Error> {
        let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
        let api = Api::<JobSet>::namespaced(self.client.clone(), namespace);
        self.live(api.get_opt(job.name())).await
    }
}
