//! The backend trait and the [`TrainerClient`] over it.

use std::time::{Duration, Instant};

use futures_util::stream::BoxStream;
use kubetrain_api::TrainJob;

use crate::error::{ClientError, Result};
use crate::types::{
    Event, Initializer, JobStatus, LogOptions, Runtime, TrainJobView, TrainOptions, Trainer,
};

/// A stream of log lines.
pub type LogStream = BoxStream<'static, Result<String>>;

/// Where TrainJobs run: Kubernetes ([`KubernetesBackend`](crate::KubernetesBackend)) or local processes
/// ([`LocalProcessBackend`](crate::LocalProcessBackend)).
#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    /// The namespace TrainJobs are created in.
    fn namespace(&self) -> &str;
    /// Every runtime with a `trainer.kubeflow.org/framework` label.
    async fn list_runtimes(&self) -> Result<Vec<Runtime>>;
    /// One runtime: the namespaced TrainingRuntime first, else the ClusterTrainingRuntime.
    async fn get_runtime(&self, name: &str) -> Result<Runtime>;
    /// Creates (starts) `job`.
    async fn create_job(&self, job: TrainJob) -> Result<()>;
    /// Every TrainJob, optionally only those of one runtime.
    async fn list_jobs(&self, runtime: Option<&str>) -> Result<Vec<TrainJobView>>;
    /// One TrainJob with its steps.
    async fn get_job(&self, name: &str) -> Result<TrainJobView>;
    /// The log of one step; with `follow`, the stream ends when the step ends.
    async fn get_job_logs(&self, name: &str, options: &LogOptions) -> Result<LogStream>;
    /// Events of the TrainJob and its pods, oldest first.
    async fn get_job_events(&self, name: &str) -> Result<Vec<Event>>;
    /// Deletes the TrainJob (its pods go with it).
    async fn delete_job(&self, name: &str) -> Result<()>;
}

/// The SDK: Kubeflow's `TrainerClient`, over any [`Backend`].
#[derive(Clone, Debug)]
pub struct TrainerClient<B> {
    backend: B,
}

impl<B: Backend> TrainerClient<B> {
    /// A client over `backend`.
    pub fn new(backend: B) -> Self {
        TrainerClient { backend }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Creates a TrainJob with positional arguments and returns its name; the builder
    /// [`train`](Self::train) is the same call with every trainer kind and option.
    pub async fn train_with(
        &self,
        runtime: Option<&str>,
        trainer: Option<&Trainer>,
        initializer: Option<&Initializer>,
        options: &TrainOptions,
    ) -> Result<String> {
        let mut request = self.train().options(options.clone());
        if let Some(r) = runtime {
            request = request.runtime(r);
        }
        if let Some(t) = trainer {
            request = request.trainer(t.clone());
        }
        if let Some(i) = initializer {
            request = request.initializer(i.clone());
        }
        request.send().await
    }

    /// Every runtime with a framework label.
    pub async fn list_runtimes(&self) -> Result<Vec<Runtime>> {
        self.backend.list_runtimes().await
    }

    /// One runtime.
    pub async fn get_runtime(&self, name: &str) -> Result<Runtime> {
        self.backend.get_runtime(name).await
    }

    /// Every TrainJob (of `runtime`, if given).
    pub async fn list_jobs(&self, runtime: Option<&str>) -> Result<Vec<TrainJobView>> {
        self.backend.list_jobs(runtime).await
    }

    /// One TrainJob.
    pub async fn get_job(&self, name: &str) -> Result<TrainJobView> {
        self.backend.get_job(name).await
    }

    /// The log lines of one step.
    pub async fn get_job_logs(&self, name: &str, options: &LogOptions) -> Result<LogStream> {
        self.backend.get_job_logs(name, options).await
    }

    /// Events of the TrainJob and its pods.
    pub async fn get_job_events(&self, name: &str) -> Result<Vec<Event>> {
        self.backend.get_job_events(name).await
    }

    /// Deletes the TrainJob.
    pub async fn delete_job(&self, name: &str) -> Result<()> {
        self.backend.delete_job(name).await
    }

    /// Polls [`get_job`](Self::get_job) every `interval` until the job reaches one of `wanted`. A Failed job
    /// is an error unless Failed is wanted; running past `timeout` is an error.
    pub async fn wait_for_job_status(
        &self,
        name: &str,
        wanted: &[JobStatus],
        timeout: Duration,
        interval: Duration,
    ) -> Result<TrainJobView> {
        if wanted.is_empty() {
            return Err(ClientError::InvalidArgument(
                "wait needs at least one status".into(),
            ));
        }
        let start = Instant::now();
        loop {
            let job = self.get_job(name).await?;
            if wanted.contains(&job.status) {
                return Ok(job);
            }
            if job.status == JobStatus::Failed {
                return Err(ClientError::JobFailed {
                    name: name.to_string(),
                    message: job.message.unwrap_or_else(|| "no message".into()),
                });
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Err(ClientError::Timeout {
                    name: name.to_string(),
                    seconds: timeout.as_secs(),
                    wanted: wanted
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join("|"),
                    current: job.status.to_string(),
                });
            }
            tokio::time::sleep(interval.min(timeout - elapsed)).await;
        }
    }
}
