//! The builder-style calls of [`TrainerClient`]: `train()`, `wait_for_job()` with the SDK's defaults, and
//! `get_runtime_packages`.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use crate::backend::{Backend, TrainerClient};
use crate::build::{DEFAULT_RUNTIME, build_trainjob};
use crate::error::{ClientError, Result};
use crate::initializers::Initializer;
use crate::trainer::{FunctionTrainer, TrainerSpec, resources};
use crate::types::{JobStatus, LogOptions, Runtime, TrainJobView, TrainOptions};

/// How long [`wait_for_job`](TrainerClient::wait_for_job) waits unless told (the SDK's `timeout=600`).
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(600);

/// How often it polls unless told (the SDK's `polling_interval=2`).
pub const DEFAULT_POLLING_INTERVAL: Duration = Duration::from_secs(2);

/// The runtime of a `train` call: a name (looked up first) or a runtime already in hand.
#[derive(Clone, Debug, PartialEq)]
pub enum RuntimeChoice {
    /// Looked up with `get_runtime`.
    Name(String),
    /// Used as given (e.g. one from `get_runtime` with another command).
    Runtime(Box<Runtime>),
}

impl From<&str> for RuntimeChoice {
    fn from(s: &str) -> Self {
        RuntimeChoice::Name(s.to_string())
    }
}
impl From<String> for RuntimeChoice {
    fn from(s: String) -> Self {
        RuntimeChoice::Name(s)
    }
}
impl From<Runtime> for RuntimeChoice {
    fn from(r: Runtime) -> Self {
        RuntimeChoice::Runtime(Box::new(r))
    }
}
impl From<&Runtime> for RuntimeChoice {
    fn from(r: &Runtime) -> Self {
        RuntimeChoice::Runtime(Box::new(r.clone()))
    }
}

/// A `train` call being put together; `.send().await` (or `.await`) creates the TrainJob and returns its
/// name. Every setting has the SDK's default: runtime `torch-distributed`, the runtime's trainer, no
/// initializers, a generated name.
#[must_use = "a train request does nothing until it is sent (.send().await or .await)"]
pub struct TrainRequest<'a, B> {
    client: &'a TrainerClient<B>,
    runtime: Option<RuntimeChoice>,
    trainer: Option<TrainerSpec>,
    initializer: Option<Initializer>,
    options: TrainOptions,
}

impl<'a, B: Backend> TrainRequest<'a, B> {
    /// The runtime, by name or as a [`Runtime`].
    pub fn runtime(mut self, runtime: impl Into<RuntimeChoice>) -> Self {
        self.runtime = Some(runtime.into());
        self
    }

    /// The trainer: a [`Trainer`](crate::Trainer), [`FunctionTrainer`] or
    /// [`BuiltinTrainer`](crate::trainer::BuiltinTrainer).
    pub fn trainer(mut self, trainer: impl Into<TrainerSpec>) -> Self {
        self.trainer = Some(trainer.into());
        self
    }

    /// The dataset and model initializers.
    pub fn initializer(mut self, initializer: Initializer) -> Self {
        self.initializer = Some(initializer);
        self
    }

    /// Every option at once (replaces those set before).
    pub fn options(mut self, options: TrainOptions) -> Self {
        self.options = options;
        self
    }

    /// The job name (`Name`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.options.name = Some(name.into());
        self
    }

    /// Adds a label (`Labels`).
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.labels.insert(key.into(), value.into());
        self
    }

    /// Adds an annotation (`Annotations`).
    pub fn annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.annotations.insert(key.into(), value.into());
        self
    }

    /// A patch of the runtime (`RuntimePatch`; manager `trainer.kubeflow.org/kubeflow-sdk`).
    pub fn runtime_patch(mut self, patch: kubetrain_api::TrainingRuntimeSpecPatch) -> Self {
        self.options.runtime_patch = Some(patch);
        self
    }

    /// `spec.activeDeadlineSeconds` (`ActiveDeadlineSeconds`).
    pub fn active_deadline_seconds(mut self, seconds: i64) -> Self {
        self.options.active_deadline_seconds = Some(seconds);
        self
    }

    /// `spec.ttlSecondsAfterFinished` (KEP-2899): the operator deletes the job, its JobSet and pods this
    /// long after it finished (`0`: at once). The local runner keeps its records (docs/local-runner.md).
    pub fn ttl_seconds_after_finished(mut self, seconds: i32) -> Self {
        self.options.ttl_seconds_after_finished = Some(seconds);
        self
    }

    /// Replaces the trainer command (`TrainerCommand`; container trainers only).
    pub fn trainer_command<S: Into<String>, I: IntoIterator<Item = S>>(mut self, c: I) -> Self {
        self.options.trainer_command = Some(c.into_iter().map(Into::into).collect());
        self
    }

    /// Replaces the trainer args (`TrainerArgs`; container trainers only).
    pub fn trainer_args<S: Into<String>, I: IntoIterator<Item = S>>(mut self, a: I) -> Self {
        self.options.trainer_args = Some(a.into_iter().map(Into::into).collect());
        self
    }

    /// Builds the TrainJob without creating it (resolving a runtime name through the backend).
    pub async fn build(&self) -> Result<kubetrain_api::TrainJob> {
        let runtime = match &self.runtime {
            Some(RuntimeChoice::Runtime(r)) => (**r).clone(),
            Some(RuntimeChoice::Name(n)) => self.client.backend().get_runtime(n).await?,
            // Fail early with "runtime not found" rather than a job that can never render.
            None => self.client.backend().get_runtime(DEFAULT_RUNTIME).await?,
        };
        build_trainjob(
            &runtime,
            self.trainer.as_ref(),
            self.initializer.as_ref(),
            &self.options,
            self.client.backend().namespace(),
        )
    }

    /// Creates the TrainJob and returns its name.
    pub async fn send(self) -> Result<String> {
        let job = self.build().await?;
        let name = job.name().to_string();
        self.client.backend().create_job(job).await?;
        Ok(name)
    }
}

impl<'a, B: Backend + 'a> IntoFuture for TrainRequest<'a, B> {
    type Output = Result<String>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<String>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

type Callback<'a> = Box<dyn FnMut(&TrainJobView) + Send + 'a>;

/// A `wait_for_job_status` call: the SDK's defaults (status Complete, 600 s, every 2 s) unless set;
/// callbacks see the job after every poll.
#[must_use = "a wait does nothing until it is awaited"]
pub struct WaitRequest<'a, B> {
    client: &'a TrainerClient<B>,
    name: String,
    statuses: Vec<JobStatus>,
    timeout: Duration,
    interval: Duration,
    callbacks: Vec<Callback<'a>>,
}

impl<'a, B: Backend> WaitRequest<'a, B> {
    /// Waits for any of `statuses` (default: Complete).
    pub fn status<I: IntoIterator<Item = JobStatus>>(mut self, statuses: I) -> Self {
        self.statuses = statuses.into_iter().collect();
        self
    }

    /// Gives up after `timeout` (default 600 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Polls every `interval` (default 2 s); must be above zero and below the timeout.
    pub fn polling_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// Calls `callback` with the job after every poll (progress display, metrics).
    pub fn callback(mut self, callback: impl FnMut(&TrainJobView) + Send + 'a) -> Self {
        self.callbacks.push(Box::new(callback));
        self
    }

    /// Polls until the job reaches a wanted status. A Failed job is [`ClientError::JobFailed`] unless
    /// Failed is wanted; running past the timeout is [`ClientError::Timeout`].
    pub async fn send(mut self) -> Result<TrainJobView> {
        if self.statuses.is_empty() {
            return Err(ClientError::InvalidArgument(
                "wait: at least one status is needed (Created, Running, Complete, Failed)".into(),
            ));
        }
        if self.interval.is_zero() {
            return Err(ClientError::InvalidArgument(
                "wait: the polling interval must be above zero".into(),
            ));
        }
        if self.interval >= self.timeout {
            return Err(ClientError::InvalidArgument(format!(
                "wait: the polling interval ({:?}) must be less than the timeout ({:?})",
                self.interval, self.timeout
            )));
        }
        let start = Instant::now();
        loop {
            let job = self.client.get_job(&self.name).await?;
            for callback in &mut self.callbacks {
                callback(&job);
            }
            if job.status == JobStatus::Failed && !self.statuses.contains(&JobStatus::Failed) {
                return Err(ClientError::JobFailed {
                    name: self.name.clone(),
                    message: job.message.unwrap_or_else(|| "no message".into()),
                });
            }
            if self.statuses.contains(&job.status) {
                return Ok(job);
            }
            let elapsed = start.elapsed();
            if elapsed >= self.timeout {
                return Err(ClientError::Timeout {
                    name: self.name.clone(),
                    seconds: self.timeout.as_secs(),
                    wanted: self
                        .statuses
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join("|"),
                    current: job.status.to_string(),
                });
            }
            tokio::time::sleep(self.interval.min(self.timeout - elapsed)).await;
        }
    }
}

impl<'a, B: Backend + 'a> IntoFuture for WaitRequest<'a, B> {
    type Output = Result<TrainJobView>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<TrainJobView>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// What `get_runtime_packages` runs: the Python version, `pip list` and `nvidia-smi` when there is one.
const PRINT_PACKAGES: &str = r#"def print_packages():
    import shutil
    import subprocess
    import sys

    print(f"Python: {sys.version}")
    if shutil.which("pip"):
        print(subprocess.run(["pip", "list"], capture_output=True, text=True).stdout)
    else:
        print("Unable to get installed packages: pip command not found")
    if shutil.which("nvidia-smi"):
        print("Available GPUs on the single training node")
        print(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)
"#;

impl<B: Backend> TrainerClient<B> {
    /// Starts a `train` call (the Python SDK's `train(runtime=..., initializer=..., trainer=...,
    /// options=[...])`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), kubetrain_client::ClientError> {
    /// use kubetrain_client::{LocalProcessBackend, Trainer, TrainerClient, JobStatus};
    /// let runs = tempfile::tempdir().unwrap();
    /// let client = TrainerClient::new(LocalProcessBackend::new().with_runs_under(runs.path()).with_queue(None));
    /// let name = client.train()
    ///     .runtime("torch-distributed")
    ///     .trainer(Trainer::command(["true"]))
    ///     .label("team", "vision")
    ///     .await?;
    /// client.wait_for_job(&name).polling_interval(std::time::Duration::from_millis(50)).await?;
    /// # Ok(()) }
    /// ```
    pub fn train(&self) -> TrainRequest<'_, B> {
        TrainRequest {
            client: self,
            runtime: None,
            trainer: None,
            initializer: None,
            options: TrainOptions::default(),
        }
    }

    /// Starts a wait for the job `name` with the SDK's defaults: status Complete, timeout 600 s,
    /// polling every 2 s (`wait_for_job_status(name)`).
    pub fn wait_for_job(&self, name: &str) -> WaitRequest<'_, B> {
        WaitRequest {
            client: self,
            name: name.to_string(),
            statuses: vec![JobStatus::Complete],
            timeout: DEFAULT_WAIT_TIMEOUT,
            interval: DEFAULT_POLLING_INTERVAL,
            callbacks: Vec::new(),
        }
    }

    /// The Python version and packages of a runtime's image (`get_runtime_packages`): runs a one-node job
    /// of the runtime that prints them (`pip list`, and `nvidia-smi` where there is one), waits for it
    /// with the SDK's defaults, returns its log and deletes it. Works where the runtime's image can run
    /// Python: on a cluster, or locally when `python` is on `PATH`. TorchTune runtimes are refused, as in
    /// the SDK.
    pub async fn get_runtime_packages(&self, runtime: &Runtime) -> Result<Vec<String>> {
        if runtime.trainer.trainer_type == "builtin" {
            return Err(ClientError::InvalidArgument(format!(
                "get_runtime_packages: runtime {:?} has a built-in (TorchTune) trainer; packages can only be listed for custom-trainer runtimes",
                runtime.name
            )));
        }
        let mut runtime = runtime.clone();
        // mpirun as a single process.
        if runtime
            .trainer
            .command
            .first()
            .is_some_and(|c| c == "mpirun")
            && runtime.trainer.command.len() >= 3
        {
            runtime
                .trainer
                .command
                .splice(1..3, ["-np".to_string(), "1".to_string()]);
        }
        let mut trainer =
            FunctionTrainer::from_source(PRINT_PACKAGES, "print_packages")?.with_num_nodes(1);
        if runtime.trainer.device != "gpu" {
            trainer = trainer.with_resources(resources([("cpu", 1)])?);
        }
        let name = self
            .train()
            .runtime(runtime)
            .trainer(trainer)
            .send()
            .await?;
        let result = async {
            self.wait_for_job(&name).await?;
            let lines: Vec<Result<String>> = self
                .get_job_logs(&name, &LogOptions::default())
                .await?
                .collect()
                .await;
            lines.into_iter().collect::<Result<Vec<String>>>()
        }
        .await;
        let deleted = self.delete_job(&name).await;
        let lines = result?;
        deleted?;
        Ok(lines)
    }
}
