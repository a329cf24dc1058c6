//! The Kubernetes backend: TrainJobs, runtimes, pods, logs and events through the API server (kube-rs).

// How pods and conditions become steps and statuses: public for tests, hidden from the docs.
#[doc(hidden)]
pub mod status;

use futures_util::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event as K8sEvent, Pod};
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use kube::{Api, Client};
use kubetrain_api::{ClusterTrainingRuntime, TrainJob, TrainingRuntime};

use crate::backend::{Backend, LogStream};
use crate::error::{ClientError, Result};
use crate::types::{Event, LogOptions, Runtime, TrainJobView, runtime_view};
use status::{job_view, pod_selector, step_of};

/// TrainJobs on a Kubernetes cluster.
///
/// ```no_run
/// # async fn demo() -> Result<(), kubetrain_client::ClientError> {
/// use kubetrain_client::{KubernetesBackend, TrainerClient};
/// // kubeconfig (KUBECONFIG, ~/.kube/config) or the in-cluster service account.
/// let client = TrainerClient::new(KubernetesBackend::try_default().await?);
/// for job in client.list_jobs(None).await? {
///     println!("{} {}", job.name, job.status);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KubernetesBackend {
    client: Client,
    namespace: String,
    cluster_url: Option<String>,
}

/// How [`KubernetesBackend::from_config`] connects: the Python SDK's `KubernetesBackendConfig`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubernetesBackendConfig {
    /// The namespace of TrainJobs (default: the context's, else `default`).
    pub namespace: Option<String>,
    /// The kubeconfig file (default: `KUBECONFIG`, else `~/.kube/config`).
    pub config_file: Option<std::path::PathBuf>,
    /// The kubeconfig context (default: the current context).
    pub context: Option<String>,
}

impl std::fmt::Debug for KubernetesBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesBackend")
            .field("namespace", &self.namespace)
            .field("cluster_url", &self.cluster_url)
            .finish_non_exhaustive()
    }
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

impl KubernetesBackend {
    /// A backend over `client`, creating and reading TrainJobs in `namespace`.
    pub fn new(client: Client, namespace: impl Into<String>) -> Self {
        KubernetesBackend {
            client,
            namespace: namespace.into(),
            cluster_url: None,
        }
    }

    /// Connects with the kubeconfig (or the in-cluster config) and its default namespace.
    pub async fn try_default() -> Result<Self> {
        let config = kube::Config::infer()
            .await
            .map_err(|e| ClientError::Config(e.to_string()))?;
        let namespace = config.default_namespace.clone();
        let url = config.cluster_url.to_string();
        let client = Client::try_from(config)?;
        let mut backend = Self::new(client, namespace);
        backend.cluster_url = Some(url);
        Ok(backend)
    }

    /// Connects as the Python SDK's `KubernetesBackend(KubernetesBackendConfig(...))`: the kubeconfig file
    /// `config_file` (else `KUBECONFIG` / `~/.kube/config`) with its context `context` (else the current
    /// one) when either is given; otherwise the kubeconfig or, inside a pod, the service account. The
    /// namespace is `namespace`, else the context's, else `default`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use kubetrain_client::{KubernetesBackend, KubernetesBackendConfig, backend::Backend};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("config");
    /// std::fs::write(&path, r#"
    /// apiVersion: v1
    /// kind: Config
    /// clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
    /// users: [{name: u, user: {token: t}}]
    /// contexts:
    ///   - {name: a, context: {cluster: c, user: u, namespace: team-a}}
    ///   - {name: b, context: {cluster: c, user: u, namespace: team-b}}
    /// current-context: a
    /// "#).unwrap();
    /// let config = KubernetesBackendConfig { config_file: Some(path.clone()), context: Some("b".into()), ..Default::default() };
    /// let backend = KubernetesBackend::from_config(&config).await.unwrap();
    /// assert_eq!(backend.namespace(), "team-b");
    /// assert_eq!(backend.cluster_url(), Some("https://127.0.0.1:6443/"));
    ///
    /// // The current context, and an explicit namespace over the context's.
    /// let current = KubernetesBackendConfig { config_file: Some(path.clone()), ..Default::default() };
    /// assert_eq!(KubernetesBackend::from_config(&current).await.unwrap().namespace(), "team-a");
    /// let ns = KubernetesBackendConfig { namespace: Some("x".into()), ..current };
    /// assert_eq!(KubernetesBackend::from_config(&ns).await.unwrap().namespace(), "x");
    ///
    /// let config = KubernetesBackendConfig { config_file: Some(path.clone()), context: Some("c".into()), ..Default::default() };
    /// let err = KubernetesBackend::from_config(&config).await.unwrap_err();
    /// assert_eq!(err.to_string(), format!("Kubernetes config: kubeconfig {}: no context \"c\" (it has a, b)", path.display()));
    /// # }
    /// ```
    pub async fn from_config(config: &KubernetesBackendConfig) -> Result<Self> {
        let options = kube::config::KubeConfigOptions {
            context: config.context.clone(),
            ..Default::default()
        };
        if config.config_file.is_none() && config.context.is_none() {
            return Ok(Self::try_default()
                .await?
                .with_namespace_opt(&config.namespace));
        }
        let (kubeconfig, source) = match &config.config_file {
            Some(path) => (
                kube::config::Kubeconfig::read_from(path),
                path.display().to_string(),
            ),
            None => (
                kube::config::Kubeconfig::read(),
                "KUBECONFIG / ~/.kube/config".to_string(),
            ),
        };
        let kubeconfig = kubeconfig
            .map_err(|e| ClientError::Config(format!("reading kubeconfig {source}: {e}")))?;
        if let Some(context) = &config.context
            && !kubeconfig.contexts.iter().any(|c| &c.name == context)
        {
            let names: Vec<&str> = kubeconfig
                .contexts
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            return Err(ClientError::Config(format!(
                "kubeconfig {source}: no context {context:?} (it has {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )));
        }
        let kube_config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| ClientError::Config(format!("kubeconfig {source}: {e}")))?;
        let namespace = config
            .namespace
            .clone()
            .unwrap_or_else(|| kube_config.default_namespace.clone());
        let url = kube_config.cluster_url.to_string();
        let client = Client::try_from(kube_config)?;
        let mut backend = Self::new(client, namespace);
        backend.cluster_url = Some(url);
        Ok(backend)
    }

    fn with_namespace_opt(self, namespace: &Option<String>) -> Self {
        match namespace {
            Some(n) => self.with_namespace(n.clone()),
            None => self,
        }
    }

    /// The API server's URL, when the backend was built from a config.
    pub fn cluster_url(&self) -> Option<&str> {
        self.cluster_url.as_deref()
    }

    /// Uses another namespace.
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The kube client, for resources beyond TrainJobs (OptimizationJobs: [`crate::optimize`]).
    pub fn kube_client(&self) -> &Client {
        &self.client
    }

    /// The namespace jobs are created and read in.
    pub fn namespace_name(&self) -> &str {
        &self.namespace
    }

    fn jobs(&self) -> Api<TrainJob> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    async fn pods_of(&self, name: &str) -> Result<Vec<Pod>> {
        let lp = ListParams::default().labels(&pod_selector(name));
        Ok(self.pods().list(&lp).await?.items)
    }

    async fn job(&self, name: &str) -> Result<TrainJob> {
        self.jobs()
            .get_opt(name)
            .await?
            .ok_or_else(|| ClientError::NotFound(name.to_string()))
    }
}

#[async_trait::async_trait]
impl Backend for KubernetesBackend {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    async fn list_runtimes(&self) -> Result<Vec<Runtime>> {
        let cluster: Api<ClusterTrainingRuntime> = Api::all(self.client.clone());
        let namespaced: Api<TrainingRuntime> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let mut out: Vec<Runtime> = cluster
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter_map(|r| runtime_view("ClusterTrainingRuntime", &r.metadata, &r.spec))
            .collect();
        out.extend(
            namespaced
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter_map(|r| runtime_view("TrainingRuntime", &r.metadata, &r.spec)),
        );
        Ok(out)
    }

    async fn get_runtime(&self, name: &str) -> Result<Runtime> {
        let namespaced: Api<TrainingRuntime> =
            Api::namespaced(self.client.clone(), &self.namespace);
        if let Some(r) = namespaced.get_opt(name).await? {
            return runtime_view("TrainingRuntime", &r.metadata, &r.spec)
                .ok_or_else(|| ClientError::RuntimeNotFound(name.to_string()));
        }
        let cluster: Api<ClusterTrainingRuntime> = Api::all(self.client.clone());
        let r = cluster
            .get_opt(name)
            .await?
            .ok_or_else(|| ClientError::RuntimeNotFound(name.to_string()))?;
        runtime_view("ClusterTrainingRuntime", &r.metadata, &r.spec)
            .ok_or_else(|| ClientError::RuntimeNotFound(name.to_string()))
    }

    async fn create_job(&self, job: TrainJob) -> Result<()> {
        let name = job.name().to_string();
        match self.jobs().create(&PostParams::default(), &job).await {
            Ok(_) => Ok(()),
            Err(e) if status_code(&e) == Some(409) => Err(ClientError::AlreadyExists(name)),
            Err(e) => Err(e.into()),
        }
    }

    async fn list_jobs(&self, runtime: Option<&str>) -> Result<Vec<TrainJobView>> {
        let jobs = self.jobs().list(&ListParams::default()).await?.items;
        let mut out = Vec::new();
        for job in jobs
            .iter()
            .filter(|j| runtime.is_none_or(|r| j.spec.runtime_ref.name == r))
        {
            let pods = self.pods_of(job.name()).await?;
            out.push(job_view(job, &pods));
        }
        Ok(out)
    }

    async fn get_job(&self, name: &str) -> Result<TrainJobView> {
        let job = self.job(name).await?;
        let pods = self.pods_of(name).await?;
        Ok(job_view(&job, &pods))
    }

    async fn get_job_logs(&self, name: &str, options: &LogOptions) -> Result<LogStream> {
        let job = self.job(name).await?;
        let pods = self.pods_of(name).await?;
        let step = pods
            .iter()
            .find_map(|p| step_of(&job, p).filter(|s| s.name == options.step))
            .ok_or_else(|| {
                ClientError::InvalidArgument(format!(
                    "TrainJob {name:?} has no step {:?}",
                    options.step
                ))
            })?;
        // The container is the step without its `-<index>` (node-3 → node).
        let container = match step.name.rsplit_once('-') {
            Some((base, idx)) if idx.bytes().all(|b| b.is_ascii_digit()) => base.to_string(),
            _ => step.name.clone(),
        };
        let lp = LogParams {
            container: Some(container),
            follow: options.follow,
            ..LogParams::default()
        };
        let reader = self.pods().log_stream(&step.pod_name, &lp).await?;
        Ok(reader
            .lines()
            .map_err(|e| ClientError::io("reading the pod log", e))
            .boxed())
    }

    async fn get_job_events(&self, name: &str) -> Result<Vec<Event>> {
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &self.namespace);
        let prefix = format!("{name}-");
        let mut events: Vec<(Option<String>, Event)> = api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                let n = e.involved_object.name.as_deref().unwrap_or_default();
                n == name || n.starts_with(&prefix)
            })
            .map(|e| {
                let time = e
                    .last_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()));
                let event = Event {
                    involved_object: format!(
                        "{}/{}",
                        e.involved_object.kind.clone().unwrap_or_default(),
                        e.involved_object.name.clone().unwrap_or_default()
                    ),
                    reason: e.reason.clone().unwrap_or_default(),
                    message: e.message.clone().unwrap_or_default(),
                    event_type: e.type_.clone().unwrap_or_default(),
                    time: time.clone(),
                };
                (time, event)
            })
            .collect();
        events.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(events.into_iter().map(|(_, e)| e).collect())
    }

    async fn delete_job(&self, name: &str) -> Result<()> {
        match self.jobs().delete(name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(e) if status_code(&e) == Some(404) => Err(ClientError::NotFound(name.to_string())),
            Err(e) => Err(e.into()),
        }
    }
}
