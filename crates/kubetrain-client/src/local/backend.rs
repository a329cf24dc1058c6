//! [`LocalProcessBackend`]: the [`Backend`] whose TrainJobs run as processes on this machine.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kubetrain_api::{RuntimeCatalog, TrainJob};
use tokio::sync::{mpsc, watch};

use super::capacity::Capacity;
use super::exec::{PodPhase, PodSummary, RunEvent, RunSummary, execute};
use super::plan::JobPlan;
use super::queue::{LocalQueue, Pending, QueueState, Ticket};
use super::{LocalOptions, prepare_job};
use crate::backend::{Backend, LogStream};
use crate::error::{ClientError, Result};
use crate::types::{
    Event, JobStatus, LogOptions, Runtime, Step, TrainJobView, runtime_view, step_name,
};

/// Runs TrainJobs as local processes (see the [module docs](super)); runtimes come from a catalog (by
/// default the built-in ones).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), kubetrain_client::ClientError> {
/// use std::time::Duration;
/// use kubetrain_client::{JobStatus, LocalProcessBackend, TrainOptions, Trainer, TrainerClient};
///
/// let dir = tempfile::tempdir().unwrap();
/// let client = TrainerClient::new(LocalProcessBackend::new().with_runs_under(dir.path()));
/// let trainer = Trainer::command(["sh", "-c", "echo rank $PET_NODE_RANK of $PET_NNODES"]).with_num_nodes(2);
/// let name = client.train().trainer(trainer).await?;
/// let job = client
///     .wait_for_job_status(&name, &[JobStatus::Complete], Duration::from_secs(30), Duration::from_millis(50))
///     .await?;
/// assert_eq!(job.steps.len(), 2);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LocalProcessBackend {
    namespace: String,
    catalog: RuntimeCatalog,
    options: LocalOptions,
    runs_under: Option<std::path::PathBuf>,
    capacity: Option<Capacity>,
    queue: Option<LocalQueue>,
    jobs: Arc<Mutex<BTreeMap<String, Arc<LocalJob>>>>,
}

impl Default for LocalProcessBackend {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug)]
struct LocalJob {
    job: TrainJob,
    plan: JobPlan,
    created: Timestamp,
    state: Mutex<LocalState>,
    /// Bumped on every change, so log followers wake up.
    version: watch::Sender<u64>,
    cancel: watch::Sender<bool>,
    run: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[derive(Debug, Default)]
struct LocalState {
    /// Why the job still waits in the local queue.
    pending: Option<Pending>,
    pods: BTreeMap<String, PodPhase>,
    logs: BTreeMap<String, Vec<String>>,
    /// Pods whose last log line came in pieces and has not ended yet.
    open_lines: std::collections::BTreeSet<String>,
    events: Vec<Event>,
    summary: Option<RunSummary>,
    /// The last progress the training code reported.
    trainer_status: Option<crate::types::TrainerProgress>,
}

impl LocalProcessBackend {
    /// A backend with the built-in runtimes, namespace `default`, `kubetrain` run from `PATH`, jobs queued
    /// in the [shared local queue](LocalQueue::shared) of this machine's capacity.
    pub fn new() -> Self {
        let queue = LocalQueue::shared();
        LocalProcessBackend {
            namespace: "default".into(),
            catalog: kubetrain_jobset::builtin::catalog(),
            options: LocalOptions::default(),
            runs_under: None,
            capacity: Some(queue.capacity().clone()),
            queue: Some(queue),
            jobs: Arc::default(),
        }
    }

    /// Uses `catalog` for runtimes.
    pub fn with_catalog(mut self, catalog: RuntimeCatalog) -> Self {
        self.catalog = catalog;
        self
    }

    /// Uses `options` for every run (a set `run_dir` is the parent of the jobs' run directories).
    pub fn with_options(mut self, options: LocalOptions) -> Self {
        self.options = options;
        self
    }

    /// Puts each job's run directory at `<dir>/<job name>`.
    pub fn with_runs_under(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.runs_under = Some(dir.into());
        self
    }

    /// Checks jobs against `capacity` (default: this machine) with
    /// [`capacity::check`](super::capacity::check): GPU shortfalls are refused, CPU and memory ones noted;
    /// the local queue (if any) holds `capacity` too. `None` checks nothing and queues nothing.
    pub fn with_capacity(mut self, capacity: Option<Capacity>) -> Self {
        self.queue = match &capacity {
            Some(c) => self.queue.map(|q| q.with_capacity(c.clone())),
            None => None,
        };
        self.capacity = capacity;
        self
    }

    /// Queues jobs in `queue` (default: [`LocalQueue::shared`]) before they start: a job that does not fit
    /// next to the admitted ones waits, its view's message says why (`Pending: ...`) and a `Pending` event
    /// is recorded whenever the reason or position changes. `None` starts every job at once (still
    /// checked against the capacity). The queue's capacity becomes the backend's.
    pub fn with_queue(mut self, queue: Option<LocalQueue>) -> Self {
        if let Some(q) = &queue {
            self.capacity = Some(q.capacity().clone());
        }
        self.queue = queue;
        self
    }

    fn job(&self, name: &str) -> Result<Arc<LocalJob>> {
        self.jobs
            .lock()
            .ok()
            .and_then(|j| j.get(name).cloned())
            .ok_or_else(|| ClientError::NotFound(name.to_string()))
    }
}

fn event(object: String, reason: &str, message: String, warning: bool) -> Event {
    Event {
        involved_object: object,
        reason: reason.to_string(),
        message,
        event_type: if warning { "Warning" } else { "Normal" }.to_string(),
        time: Some(Timestamp::now().to_string()),
    }
}

impl LocalJob {
    /// Waits in the local queue, keeping the pending reason and position in the state (and an event at
    /// every change of them).
    async fn queue(
        &self,
        mut ticket: Ticket,
    ) -> std::result::Result<Ticket, crate::local::queue::QueueError> {
        let object = format!("TrainJob/{}", self.plan.name);
        ticket
            .wait(|pending| {
                let Ok(mut st) = self.state.lock() else {
                    return;
                };
                if st.pending.as_ref() == Some(pending) {
                    return;
                }
                st.events
                    .push(event(object.clone(), "Pending", pending.to_string(), false));
                st.pending = Some(pending.clone());
                drop(st);
                self.version.send_modify(|v| *v += 1);
            })
            .await?;
        if let Ok(mut st) = self.state.lock()
            && st.pending.take().is_some()
        {
            st.events.push(event(
                object,
                "Admitted",
                "admitted by the local queue".into(),
                false,
            ));
        }
        self.version.send_modify(|v| *v += 1);
        Ok(ticket)
    }

    /// The summary of a job that never started (its wait in the queue failed).
    fn not_started(&self, message: String, elapsed: std::time::Duration) -> RunSummary {
        RunSummary {
            name: self.plan.name.clone(),
            status: JobStatus::Failed,
            message,
            cancelled: false,
            elapsed,
            restarts: 0,
            restart_history: Vec::new(),
            trainer_status: None,
            pods: self
                .plan
                .pods()
                .map(|p| PodSummary {
                    name: p.name.clone(),
                    replicated_job: p.replicated_job.clone(),
                    phase: PodPhase::Pending,
                    detail: None,
                    duration: None,
                    log_tail: Vec::new(),
                })
                .collect(),
        }
    }

    fn apply(&self, e: RunEvent) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        match e {
            RunEvent::Notice(n) => {
                let object = format!("TrainJob/{}", self.plan.name);
                st.events.push(event(object, "Notice", n, false));
            }
            RunEvent::PodStarted { pod } => {
                st.pods.insert(pod.clone(), PodPhase::Running);
                st.events.push(event(
                    format!("Pod/{pod}"),
                    "Started",
                    "started the pod's processes".into(),
                    false,
                ));
            }
            RunEvent::Log(line) => {
                let open = st.open_lines.contains(&line.pod);
                let lines = st.logs.entry(line.pod.clone()).or_default();
                // The pieces of a long line join into it again.
                match lines.last_mut() {
                    Some(last) if open => last.push_str(&line.line),
                    _ => lines.push(line.line),
                }
                if line.continued {
                    st.open_lines.insert(line.pod);
                } else {
                    st.open_lines.remove(&line.pod);
                }
            }
            RunEvent::PodFinished { pod, phase, detail } => {
                st.pods.insert(pod.clone(), phase);
                let failed = phase == PodPhase::Failed;
                let reason = if failed { "Failed" } else { "Completed" };
                st.events
                    .push(event(format!("Pod/{pod}"), reason, detail, failed));
            }
            RunEvent::TrainerStatus(status) => st.trainer_status = Some(status),
            RunEvent::Restarting { attempt, reason } => {
                st.pods.clear();
                let object = format!("JobSet/{}", self.plan.name);
                st.events.push(event(
                    object,
                    "Restarting",
                    format!("restart {attempt}: {reason}"),
                    true,
                ));
            }
        }
        drop(st);
        self.version.send_modify(|v| *v += 1);
    }

    fn finish(&self, summary: RunSummary) {
        if let Ok(mut st) = self.state.lock() {
            let warning = summary.status == JobStatus::Failed;
            let object = format!("TrainJob/{}", self.plan.name);
            st.events.push(event(
                object,
                summary.status.as_str(),
                summary.message.clone(),
                warning,
            ));
            st.summary = Some(summary);
        }
        self.version.send_modify(|v| *v += 1);
    }

    fn view(&self) -> TrainJobView {
        let st = self.state.lock().ok();
        let phase = |pod: &str| {
            st.as_ref()
                .and_then(|s| s.pods.get(pod).copied())
                .unwrap_or(PodPhase::Pending)
        };
        let steps: Vec<Step> = self
            .plan
            .pods()
            .map(|p| Step {
                name: step_name(&p.replicated_job, p.pod_index),
                status: phase(&p.name).as_str().to_string(),
                pod_name: p.name.clone(),
                device: p.device.0.clone(),
                device_count: p.device.1.clone(),
            })
            .collect();
        let summary = st.as_ref().and_then(|s| s.summary.as_ref());
        let status = match summary {
            Some(s) => s.status,
            None => {
                let nodes: Vec<&Step> = steps
                    .iter()
                    .filter(|s| s.name.starts_with("node-"))
                    .collect();
                if !nodes.is_empty()
                    && nodes
                        .iter()
                        .all(|s| s.status == "Running" || s.status == "Succeeded")
                {
                    JobStatus::Running
                } else {
                    JobStatus::Created
                }
            }
        };
        let pending = st.as_ref().and_then(|s| s.pending.as_ref());
        TrainJobView {
            name: self.plan.name.clone(),
            runtime: self.job.spec.runtime_ref.name.clone(),
            num_nodes: self
                .plan
                .replicated_jobs
                .iter()
                .filter(|r| r.name == "node")
                .map(|r| r.pods.len() as i32)
                .sum(),
            steps,
            creation_timestamp: Some(self.created.to_string()),
            status,
            message: summary
                .map(|s| s.message.clone())
                .or_else(|| pending.map(|p| format!("Pending: {p}"))),
            trainer_status: st.as_ref().and_then(|s| s.trainer_status.clone()),
        }
    }
}

#[async_trait::async_trait]
impl Backend for LocalProcessBackend {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    async fn list_runtimes(&self) -> Result<Vec<Runtime>> {
        Ok(self
            .catalog
            .entries()
            .filter_map(|e| runtime_view(e.kind(), e.metadata(), e.spec()))
            .collect())
    }

    async fn get_runtime(&self, name: &str) -> Result<Runtime> {
        let runtime_ref = kubetrain_api::RuntimeRef {
            name: name.to_string(),
            ..Default::default()
        };
        let namespaced = kubetrain_api::RuntimeRef {
            kind: Some(kubetrain_api::constants::TRAINING_RUNTIME_KIND.into()),
            ..runtime_ref.clone()
        };
        let entry = self
            .catalog
            .lookup(&namespaced, &self.namespace)
            .or_else(|_| self.catalog.lookup(&runtime_ref, &self.namespace))
            .map_err(|_| ClientError::RuntimeNotFound(name.to_string()))?;
        runtime_view(entry.kind(), entry.metadata(), entry.spec())
            .ok_or_else(|| ClientError::RuntimeNotFound(name.to_string()))
    }

    async fn create_job(&self, job: TrainJob) -> Result<()> {
        let name = job.name().to_string();
        if self.jobs.lock().is_ok_and(|j| j.contains_key(&name)) {
            return Err(ClientError::AlreadyExists(name));
        }
        let mut options = self.options.clone();
        if let Some(dir) = &self.runs_under {
            options.run_dir = Some(dir.join(&name));
        }
        let mut plan = prepare_job(&job, &self.catalog, &options)?;
        let mut ticket = None;
        let mut state = LocalState::default();
        if let Some(queue) = &self.queue {
            let mut t = queue.enqueue(&plan)?;
            // Asked once now, so the job's view says why it waits from the start.
            if let QueueState::Pending(p) = t.poll()? {
                let object = format!("TrainJob/{}", plan.name);
                state
                    .events
                    .push(event(object, "Pending", p.to_string(), false));
                state.pending = Some(p);
            }
            plan.notices.extend(t.take_notices());
            ticket = Some(t);
        } else if let Some(capacity) = &self.capacity {
            match super::capacity::check(&plan, capacity) {
                Ok(Some(warning)) => plan.notices.push(warning),
                Ok(None) => {}
                Err(why) => return Err(ClientError::DoesNotFit(why.to_string())),
            }
        }
        let (cancel, mut cancel_rx) = watch::channel(false);
        let local = Arc::new(LocalJob {
            job,
            plan,
            created: Timestamp::now(),
            state: Mutex::new(state),
            version: watch::channel(0).0,
            cancel,
            run: tokio::sync::Mutex::new(None),
        });
        let runner = local.clone();
        let handle = tokio::spawn(async move {
            let (tx, mut rx) = mpsc::channel(super::exec::EVENT_BUFFER);
            let forward = {
                let job = runner.clone();
                tokio::spawn(async move {
                    while let Some(e) = rx.recv().await {
                        job.apply(e);
                    }
                })
            };
            // Holding the ticket (and booking it again should the ledger be rebuilt) holds the job's
            // share of the machine until the run ends.
            let admitted = match ticket {
                Some(t) => {
                    let start = std::time::Instant::now();
                    tokio::select! {
                        admitted = runner.queue(t) => match admitted {
                            Ok(t) => Some(t),
                            Err(e) => {
                                drop(tx);
                                let _ = forward.await;
                                runner.finish(runner.not_started(e.to_string(), start.elapsed()));
                                return;
                            }
                        },
                        // Deleted while waiting: nothing started, nothing to report.
                        () = async { let _ = cancel_rx.wait_for(|c| *c).await; } => return,
                    }
                }
                None => None,
            };
            let cancelled = async move {
                let _ = cancel_rx.wait_for(|c| *c).await;
            };
            let summary = match admitted {
                Some(mut ticket) => {
                    ticket
                        .hold_while(execute(&runner.plan, &tx, cancelled))
                        .await
                }
                None => execute(&runner.plan, &tx, cancelled).await,
            };
            drop(tx);
            let _ = forward.await;
            runner.finish(summary);
        });
        *local.run.lock().await = Some(handle);
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.insert(name, local);
        }
        Ok(())
    }

    async fn list_jobs(&self, runtime: Option<&str>) -> Result<Vec<TrainJobView>> {
        let jobs: Vec<Arc<LocalJob>> = self
            .jobs
            .lock()
            .map(|j| j.values().cloned().collect())
            .unwrap_or_default();
        Ok(jobs
            .iter()
            .map(|j| j.view())
            .filter(|v| runtime.is_none_or(|r| v.runtime == r))
            .collect())
    }

    async fn get_job(&self, name: &str) -> Result<TrainJobView> {
        Ok(self.job(name)?.view())
    }

    async fn get_job_logs(&self, name: &str, options: &LogOptions) -> Result<LogStream> {
        let job = self.job(name)?;
        let pod = job
            .plan
            .pods()
            .find(|p| step_name(&p.replicated_job, p.pod_index) == options.step)
            .map(|p| p.name.clone())
            .ok_or_else(|| {
                ClientError::InvalidArgument(format!(
                    "TrainJob {name:?} has no step {:?}",
                    options.step
                ))
            })?;
        let follow = options.follow;
        let version = job.version.subscribe();
        // Yields the lines from `offset` on; waits for more while following and the pod still runs.
        let stream = futures_util::stream::unfold(
            (job, version, 0usize),
            move |(job, mut version, offset)| {
                let pod = pod.clone();
                async move {
                    loop {
                        let (lines, done) = {
                            let st = job.state.lock().ok()?;
                            let lines: Vec<String> = st
                                .logs
                                .get(&pod)
                                .map(|l| l[offset.min(l.len())..].to_vec())
                                .unwrap_or_default();
                            let ended = matches!(
                                st.pods.get(&pod),
                                Some(PodPhase::Succeeded | PodPhase::Failed)
                            );
                            (lines, st.summary.is_some() || ended)
                        };
                        if !lines.is_empty() {
                            let next = offset + lines.len();
                            return Some((
                                futures_util::stream::iter(lines.into_iter().map(Ok)),
                                (job, version, next),
                            ));
                        }
                        if !follow || done {
                            return None;
                        }
                        version.changed().await.ok()?;
                    }
                }
            },
        )
        .flatten();
        Ok(stream.boxed())
    }

    async fn get_job_events(&self, name: &str) -> Result<Vec<Event>> {
        let job = self.job(name)?;
        Ok(job
            .state
            .lock()
            .map(|s| s.events.clone())
            .unwrap_or_default())
    }

    async fn delete_job(&self, name: &str) -> Result<()> {
        let job = self.job(name)?;
        let _ = job.cancel.send(true);
        if let Some(handle) = job.run.lock().await.take() {
            let _ = handle.await;
        }
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.remove(name);
        }
        Ok(())
    }
}
