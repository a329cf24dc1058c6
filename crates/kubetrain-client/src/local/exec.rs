//! Runs a [`JobPlan`]: one process group per container, replicated jobs in `dependsOn` order, logs streamed
//! line by line, the JobSet success and failure policies applied, everything killed on failure or cancel.
//! When a container ends, every process it started ends with it, also those that left its process group
//! ([`super::reaper`]).
//!
//! Memory stays bounded whatever the pods write: each output stream is read through a fixed buffer, a line
//! longer than [`LOG_PIECE_BYTES`] comes as several [`LogLine`] pieces (all but the last `continued`), and
//! the event channel is bounded ([`EVENT_BUFFER`]), so a slow consumer slows the pods' pipes instead of
//! growing the runner.

use std::collections::VecDeque;
use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kubetrain_api::jobset::{DependsOnStatus, SuccessOperator};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::{mpsc, watch};

use super::plan::{JobPlan, PodPlan, ProcessPlan};
use super::reaper;
use crate::types::JobStatus;

/// Lines of each pod's log kept for the failure report.
pub const LOG_TAIL_LINES: usize = 20;

/// How long a process may take to exit after SIGTERM before it gets SIGKILL.
pub const TERMINATION_GRACE: Duration = Duration::from_secs(3);

/// The longest piece of a log line one [`RunEvent::Log`] carries; a longer line comes as several pieces, in
/// order, every one but the last marked [`LogLine::continued`].
pub const LOG_PIECE_BYTES: usize = 64 * 1024;

/// The capacity to give the event channel of [`execute`]: with pieces of at most [`LOG_PIECE_BYTES`], the
/// events waiting in it hold at most 16 MiB of log.
pub const EVENT_BUFFER: usize = 256;

/// The longest log line kept for the failure report ([`PodSummary::log_tail`]); longer ones are cut.
const TAIL_LINE_BYTES: usize = 2048;

/// The read buffer of each output stream of each container.
const READ_BUFFER: usize = 16 * 1024;

/// The phase of a local pod, named as Kubernetes names pod phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PodPhase {
    /// Waiting for its dependencies (or never started).
    Pending,
    /// Its processes run.
    Running,
    /// Every container exited with 0.
    Succeeded,
    /// A container failed, or the runner stopped it.
    Failed,
}

impl PodPhase {
    /// `Pending`, `Running`, `Succeeded` or `Failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            PodPhase::Pending => "Pending",
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
            PodPhase::Failed => "Failed",
        }
    }
}

/// One line a container wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// The pod.
    pub pod: String,
    /// The container.
    pub container: String,
    /// Whether it came from stderr.
    pub stderr: bool,
    /// The line, without its newline; a piece of it when [`continued`](Self::continued) or when the piece
    /// before was continued.
    pub line: String,
    /// The line goes on in the next piece of this container's stream (a line longer than
    /// [`LOG_PIECE_BYTES`]): no newline follows this piece in the pod's log.
    pub continued: bool,
}

/// What happens during a run, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunEvent {
    /// Something the user should know.
    Notice(String),
    /// A pod's processes were started.
    PodStarted {
        /// The pod.
        pod: String,
    },
    /// A log line.
    Log(LogLine),
    /// A pod ended.
    PodFinished {
        /// The pod.
        pod: String,
        /// `Succeeded` or `Failed`.
        phase: PodPhase,
        /// How it ended (`exit code 0`, `killed by signal 9`, ...).
        detail: String,
    },
    /// A pod failed and the whole run starts again (`failurePolicy.maxRestarts`).
    Restarting {
        /// The restart number, from 1.
        attempt: u32,
        /// Why.
        reason: String,
    },
    /// The training code reported progress to the run's status endpoint ([`super::status`]): the
    /// TrainJob's `status.trainerStatus` is now this.
    TrainerStatus(crate::types::TrainerProgress),
}

/// The end state of one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSummary {
    /// The pod.
    pub name: String,
    /// Its replicated job.
    pub replicated_job: String,
    /// Its last phase.
    pub phase: PodPhase,
    /// How it ended, if it did.
    pub detail: Option<String>,
    /// How long it ran.
    pub duration: Option<Duration>,
    /// Its last log lines.
    pub log_tail: Vec<String>,
}

/// The result of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSummary {
    /// The job.
    pub name: String,
    /// `Complete` or `Failed`.
    pub status: JobStatus,
    /// Why it ended.
    pub message: String,
    /// Whether it ended because it was cancelled (Ctrl-C).
    pub cancelled: bool,
    /// Wall time of the whole run.
    pub elapsed: Duration,
    /// Restarts of the whole run done (after failures and after disruptions).
    pub restarts: u32,
    /// Every restart in order, with its cause, the last checkpoint and the work lost; an elastic run's
    /// shrinks too ([`RestartScope::Shrink`]).
    pub restart_history: Vec<Restart>,
    /// Every pod of the last attempt.
    pub pods: Vec<PodSummary>,
    /// The last progress the training code reported (`status.trainerStatus`), if it reported.
    pub trainer_status: Option<crate::types::TrainerProgress>,
}

impl RunSummary {
    /// The first failed pod that was not stopped by the runner (the cause of a failure).
    pub fn failed_pod(&self) -> Option<&PodSummary> {
        self.pods
            .iter()
            .find(|p| p.phase == PodPhase::Failed && p.detail.as_deref() != Some(STOPPED))
    }
}

const STOPPED: &str = "stopped by the runner";

/// Upstream's message of `Failed / DeadlineExceeded`.
pub const DEADLINE_EXCEEDED_MESSAGE: &str = "TrainJob exceeded its active deadline";

struct PodState {
    phase: PodPhase,
    /// An elastic job went on without it (it was lost to a disruption): success no longer waits for it.
    removed: bool,
    started: Option<Instant>,
    duration: Option<Duration>,
    detail: Option<String>,
    tail: Arc<Mutex<VecDeque<String>>>,
}

impl PodState {
    /// Records the pod's end: its phase, how long it ran, and the detail the summary shows.
    fn finish(&mut self, ok: bool, detail: String) {
        self.phase = if ok {
            PodPhase::Succeeded
        } else {
            PodPhase::Failed
        };
        self.duration = self.started.map(|s| s.elapsed());
        self.detail = Some(detail);
    }
}

struct PodExit {
    ok: bool,
    detail: String,
    /// A container ended by a signal the runner did not send (SIGKILL, SIGTERM, SIGINT, SIGHUP): the local
    /// stand-in for a lost node or an evicted pod (a `DisruptionTarget` on a cluster).
    disrupted: bool,
}

enum Outcome {
    Complete,
    Failed(String),
    /// A pod failed: a real failure, which consumes the failure budget.
    PodFailed {
        pod: String,
        detail: String,
    },
    /// A pod was disrupted: the run restarts without consuming the failure budget.
    Disrupted {
        pod: String,
        detail: String,
    },
    /// A failure no restart can mend (an elastic job below its minimum).
    Fatal(String),
    Cancelled,
}

/// Why the run (or, for an elastic job, its group) restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RestartCause {
    /// A pod's process was killed by a signal the runner did not send: the local stand-in for a lost node
    /// or an evicted or preempted pod. It does not consume the failure budget.
    Disruption,
    /// A pod failed (a non-zero exit): it consumes the failure budget (`failurePolicy.maxRestarts`).
    Failure,
}

/// What restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RestartScope {
    /// Every pod was stopped and the run started again.
    Job,
    /// An elastic job lost a trainer pod and goes on with the others (they meet again at the elastic
    /// rendezvous and resume from the last checkpoint).
    Shrink {
        /// Trainer pods left.
        nodes: u32,
    },
}

/// One restart: its cause, the last checkpoint the training code reported before it (the
/// `kubetrain.dev/*` metrics of `trainerStatus`), the step resumed from after it, and the work lost.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Restart {
    /// The restart's number in the run, from 1.
    pub number: u32,
    /// Why.
    pub cause: RestartCause,
    /// What restarted.
    pub scope: RestartScope,
    /// The pod that failed or was disrupted.
    pub pod: String,
    /// How it ended (`killed by signal 9`, `exit code 3`).
    pub detail: String,
    /// Whether it consumed the failure budget.
    pub consumed_budget: bool,
    /// When it happened (RFC 3339).
    pub time: String,
    /// The step the training code last reported (`kubetrain.dev/step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The step of the last checkpoint it reported (`kubetrain.dev/checkpoint-step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_step: Option<u64>,
    /// When that checkpoint was written (`kubetrain.dev/checkpoint-time`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_time: Option<String>,
    /// The step the training resumed from afterwards (`kubetrain.dev/resumed-from-step` of the next report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from_step: Option<u64>,
    /// Steps between the checkpoint and the last reported step: trained again after the restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_steps: Option<u64>,
    /// Seconds between the checkpoint and the restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_seconds: Option<u64>,
    /// GPUs of the trainer pods that ran (the plan's `nvidia.com/gpu`/`amd.com/gpu` limits).
    pub gpus: u32,
    /// `lost_seconds × gpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_gpu_seconds: Option<u64>,
}

impl Restart {
    /// One line for people: the cause, the budget, the last checkpoint and the work lost.
    pub fn describe(&self) -> String {
        let cause = match self.cause {
            RestartCause::Disruption => format!(
                "disruption: pod {} was {} (not by the runner: a lost node or an evicted pod)",
                self.pod, self.detail
            ),
            RestartCause::Failure => format!("failure: pod {} failed ({})", self.pod, self.detail),
        };
        let what = match self.scope {
            RestartScope::Job => "every pod restarts".to_string(),
            RestartScope::Shrink { nodes } => {
                format!("the elastic job goes on with {nodes} node(s)")
            }
        };
        let budget = if self.consumed_budget {
            "consumes the failure budget"
        } else {
            "the failure budget is not consumed"
        };
        let checkpoint = match (self.checkpoint_step, &self.checkpoint_time) {
            (Some(step), Some(time)) => format!("last checkpoint: step {step} at {time}"),
            (Some(step), None) => format!("last checkpoint: step {step}"),
            _ => "no checkpoint reported".to_string(),
        };
        let mut lost = Vec::new();
        if let Some(steps) = self.lost_steps {
            lost.push(format!("{steps} steps"));
        }
        if let Some(seconds) = self.lost_seconds {
            lost.push(format!("{seconds} s"));
        }
        if let Some(gpu_seconds) = self.lost_gpu_seconds {
            lost.push(format!("{gpu_seconds} GPU-seconds ({} GPUs)", self.gpus));
        }
        let lost = if lost.is_empty() {
            String::new()
        } else {
            format!("; work lost: {}", lost.join(", "))
        };
        let resumed = self
            .resumed_from_step
            .map(|s| format!("; resumed from step {s}"))
            .unwrap_or_default();
        format!("{cause}; {what}, {budget}; {checkpoint}{lost}{resumed}")
    }
}

/// The `kubetrain.dev/*` metrics of a report.
#[derive(Default)]
struct Reported {
    step: Option<u64>,
    checkpoint_step: Option<u64>,
    checkpoint_time: Option<String>,
    resumed_from_step: Option<u64>,
}

impl Reported {
    fn of(p: Option<&crate::types::TrainerProgress>) -> Self {
        use kubetrain_api::constants as c;
        let Some(p) = p else {
            return Reported::default();
        };
        let get = |name: &str| {
            p.metrics
                .iter()
                .rev()
                .find(|m| m.name == name)
                .map(|m| m.value.trim().to_string())
        };
        let int = |name: &str| get(name).and_then(|v| v.parse::<u64>().ok());
        Reported {
            step: int(c::METRIC_STEP),
            checkpoint_step: int(c::METRIC_CHECKPOINT_STEP),
            checkpoint_time: get(c::METRIC_CHECKPOINT_TIME),
            resumed_from_step: int(c::METRIC_RESUMED_FROM_STEP),
        }
    }
}

/// What the run's restarts need: the reports of the training code, counted per restart.
#[derive(Default)]
struct Reports {
    /// Restarts so far: a report is filed under the count at the time it arrived.
    restarts: u32,
    latest: Option<(u32, crate::types::TrainerProgress)>,
}

/// GPUs of `pods` (their first container's `nvidia.com/gpu` or `amd.com/gpu` limit).
fn gpus<'a>(pods: impl Iterator<Item = &'a PodPlan>) -> u32 {
    pods.filter(|p| p.device.0 == "gpu")
        .filter_map(|p| p.device.1.trim().parse::<u32>().ok())
        .sum()
}

/// Builds a restart from the latest report, and gives the previous restart the step its run resumed from.
fn new_restart(
    reports: &Mutex<Reports>,
    history: &mut [Restart],
    cause: RestartCause,
    scope: RestartScope,
    (pod, detail): (String, String),
    gpus: u32,
) -> Restart {
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut reports = reports
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    fill_resumed(&reports, history);
    let latest = Reported::of(reports.latest.as_ref().map(|(_, p)| p));
    reports.restarts += 1;
    let lost_seconds = latest
        .checkpoint_time
        .as_deref()
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|t| u64::try_from(now.duration_since(t).as_secs()).unwrap_or(0));
    Restart {
        number: reports.restarts,
        cause,
        scope,
        pod,
        detail,
        consumed_budget: cause == RestartCause::Failure,
        time: now.to_string(),
        step: latest.step,
        checkpoint_step: latest.checkpoint_step,
        checkpoint_time: latest.checkpoint_time,
        resumed_from_step: None,
        lost_steps: match (latest.step, latest.checkpoint_step) {
            (Some(step), Some(ckpt)) => Some(step.saturating_sub(ckpt)),
            (Some(step), None) => Some(step),
            _ => None,
        },
        lost_seconds,
        gpus,
        lost_gpu_seconds: lost_seconds.map(|s| s * u64::from(gpus)),
    }
}

/// The last restart's `resumed_from_step`: from the latest report, if it arrived after that restart.
fn fill_resumed(reports: &Reports, history: &mut [Restart]) {
    if let (Some(last), Some((filed, p))) = (history.last_mut(), &reports.latest)
        && *filed == last.number
        && last.resumed_from_step.is_none()
    {
        last.resumed_from_step = Reported::of(Some(p)).resumed_from_step;
    }
}

/// Runs the plan until it completes, fails, passes its [`JobPlan::active_deadline`] (then it fails with
/// [`DEADLINE_EXCEEDED_MESSAGE`]) or `cancel` resolves, sending events to `events`.
///
/// `events` is bounded (give it [`EVENT_BUFFER`]): the pods' output is read no faster than the receiver
/// takes it, so the receiver should only do quick or disk-speed work (write the log files) and must keep
/// receiving until the run ends; a display that may stall belongs behind a channel of its own that drops.
/// Progress reports ([`RunEvent::TrainerStatus`]) are dropped rather than waited for when the channel is
/// full; [`RunSummary::trainer_status`] holds the last one.
///
/// The run's status endpoint ([`super::status`]) serves on loopback meanwhile; the containers of the trainer
/// replicated job (every container when none is labelled the trainer) get its `KUBEFLOW_TRAINER_SERVER_*`
/// env, and each accepted update is a [`RunEvent::TrainerStatus`].
pub async fn execute(
    plan: &JobPlan,
    events: &mpsc::Sender<RunEvent>,
    cancel: impl Future<Output = ()>,
) -> RunSummary {
    let start = Instant::now();
    for n in &plan.notices {
        let _ = events.send(RunEvent::Notice(n.clone())).await;
    }
    // The active deadline counts from the start, across restarts, as the operator's does.
    let deadline_passed = std::sync::atomic::AtomicBool::new(false);
    let stop = async {
        match plan.active_deadline {
            Some(limit) => tokio::select! {
                () = cancel => {}
                () = tokio::time::sleep_until(tokio::time::Instant::from_std(start + limit)) => {
                    deadline_passed.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            },
            None => cancel.await,
        }
    };
    let mut cancel = std::pin::pin!(stop);
    let mut restarts = 0;
    // Restarts after failures: the failure budget (`failurePolicy.maxRestarts`) bounds these only.
    let mut budget_used = 0;
    let mut history: Vec<Restart> = Vec::new();
    let reports = Arc::new(Mutex::new(Reports::default()));
    // The pods bind their ports now.
    for port in &plan.ports {
        port.release();
    }
    let run_id = if plan.run_id.is_empty() {
        super::run_lock::new_run_id()
    } else {
        plan.run_id.clone()
    };
    let (endpoint, status_env) = status_endpoint(plan, events, &reports).await;
    loop {
        let (outcome, pods) = run_once(
            plan,
            &run_id,
            &status_env,
            events,
            cancel.as_mut(),
            (&reports, &mut history),
        )
        .await;
        reaper::stop_orphans().await;
        let (status, message, cancelled) = match outcome {
            Outcome::Complete => (
                JobStatus::Complete,
                "jobset completed successfully".to_string(),
                false,
            ),
            Outcome::Cancelled if deadline_passed.load(std::sync::atomic::Ordering::Relaxed) => (
                JobStatus::Failed,
                format!("{DEADLINE_EXCEEDED_MESSAGE}: every pod was stopped"),
                false,
            ),
            Outcome::Cancelled => (
                JobStatus::Failed,
                "cancelled: every pod was stopped".to_string(),
                true,
            ),
            other => match after_failure(plan, other, &mut budget_used, (&reports, &mut history)) {
                Ok(reason) => {
                    restarts += 1;
                    let _ = events
                        .send(RunEvent::Restarting {
                            attempt: restarts,
                            reason,
                        })
                        .await;
                    continue;
                }
                Err(message) => (JobStatus::Failed, message, false),
            },
        };
        if let Ok(r) = reports.lock() {
            fill_resumed(&r, &mut history);
        }
        return RunSummary {
            name: plan.name.clone(),
            status,
            message,
            cancelled,
            elapsed: start.elapsed(),
            restarts,
            restart_history: history,
            pods,
            trainer_status: endpoint
                .as_ref()
                .ok()
                .and_then(|e| e.latest())
                .map(|s| crate::types::TrainerProgress::of(&s)),
        };
    }
}

/// The run's status endpoint and the env it gives the trainer; each accepted report is filed in `reports`
/// and sent as a [`RunEvent::TrainerStatus`].
async fn status_endpoint(
    plan: &JobPlan,
    events: &mpsc::Sender<RunEvent>,
    reports: &Arc<Mutex<Reports>>,
) -> (
    std::io::Result<super::status::StatusEndpoint>,
    Vec<(String, String)>,
) {
    let endpoint = {
        // Weak: a request still in flight when the run ends must not keep the event stream open.
        let events = events.downgrade();
        let reports = reports.clone();
        super::status::StatusEndpoint::start(&plan.namespace, &plan.name, &plan.run_dir, move |s| {
            if let Ok(mut r) = reports.lock() {
                r.latest = Some((r.restarts, crate::types::TrainerProgress::of(s)));
            }
            // Never waits: the endpoint must answer the training code at once.
            if let Some(events) = events.upgrade() {
                let _ = events.try_send(RunEvent::TrainerStatus(
                    crate::types::TrainerProgress::of(s),
                ));
            }
        })
        .await
    };
    let status_env = match &endpoint {
        Ok(endpoint) => endpoint.env(),
        Err(e) => {
            let _ = events
                .send(RunEvent::Notice(format!(
                    "no status endpoint for this run (progress reports will fail): {e}"
                )))
                .await;
            Vec::new()
        }
    };
    (endpoint, status_env)
}

/// After an attempt that did not complete and was not cancelled: `Ok(reason)` to restart the run (a
/// disruption always, a failure while the budget lasts), `Err(message)` to fail it.
fn after_failure(
    plan: &JobPlan,
    outcome: Outcome,
    budget_used: &mut u32,
    (reports, history): (&Mutex<Reports>, &mut Vec<Restart>),
) -> Result<String, String> {
    let job_restart = |history: &mut Vec<Restart>, cause, pod, detail| {
        let restart = new_restart(
            reports,
            history,
            cause,
            RestartScope::Job,
            (pod, detail),
            gpus(trainer_pods(plan)),
        );
        let reason = restart.describe();
        history.push(restart);
        reason
    };
    match outcome {
        Outcome::Disrupted { pod, detail } => {
            Ok(job_restart(history, RestartCause::Disruption, pod, detail))
        }
        Outcome::PodFailed { pod, detail } if *budget_used < plan.max_restarts => {
            *budget_used += 1;
            let reason = job_restart(history, RestartCause::Failure, pod, detail);
            Ok(format!(
                "{reason} ({budget_used} of failurePolicy.maxRestarts {})",
                plan.max_restarts
            ))
        }
        Outcome::PodFailed { pod, detail } => Err(format!("pod {pod} failed ({detail})")),
        Outcome::Failed(reason) if *budget_used < plan.max_restarts => {
            *budget_used += 1;
            Ok(reason)
        }
        Outcome::Failed(reason) | Outcome::Fatal(reason) => Err(reason),
        Outcome::Complete | Outcome::Cancelled => Err("the run ended".into()),
    }
}

fn satisfied(plan: &JobPlan, states: &[Vec<PodState>], dep: &str, status: DependsOnStatus) -> bool {
    let Some(r) = plan.replicated_jobs.iter().position(|r| r.name == dep) else {
        return false;
    };
    states[r].iter().all(|p| match status {
        DependsOnStatus::Ready => matches!(p.phase, PodPhase::Running | PodPhase::Succeeded),
        DependsOnStatus::Complete => p.phase == PodPhase::Succeeded,
    })
}

fn is_complete(plan: &JobPlan, states: &[Vec<PodState>]) -> bool {
    let (op, targets) = &plan.success;
    let is_target = |name: &str| targets.is_empty() || targets.iter().any(|t| t == name);
    // A Job (one replica of a replicated job) completes when all its pods succeeded.
    let mut jobs = plan
        .replicated_jobs
        .iter()
        .zip(states)
        .filter(|(r, _)| is_target(&r.name))
        .flat_map(|(r, st)| {
            let mut by_job: Vec<(i32, bool)> = Vec::new();
            for (pod, s) in r.pods.iter().zip(st).filter(|(_, s)| !s.removed) {
                let ok = s.phase == PodPhase::Succeeded;
                match by_job.iter_mut().find(|(j, _)| *j == pod.job_index) {
                    Some(slot) => slot.1 &= ok,
                    None => by_job.push((pod.job_index, ok)),
                }
            }
            by_job.into_iter().map(|(_, ok)| ok)
        });
    match op {
        SuccessOperator::All => jobs.all(|ok| ok),
        SuccessOperator::Any => jobs.any(|ok| ok),
    }
}

/// The trainer's pods (every pod when no replicated job is labelled the trainer).
fn trainer_pods(plan: &JobPlan) -> impl Iterator<Item = &PodPlan> {
    let any_trainer = plan.replicated_jobs.iter().any(|r| r.trainer);
    plan.replicated_jobs
        .iter()
        .filter(move |r| r.trainer || !any_trainer)
        .flat_map(|r| r.pods.iter())
}

async fn run_once(
    plan: &JobPlan,
    run_id: &str,
    status_env: &[(String, String)],
    events: &mpsc::Sender<RunEvent>,
    mut cancel: std::pin::Pin<&mut impl Future<Output = ()>>,
    (reports, history): (&Mutex<Reports>, &mut Vec<Restart>),
) -> (Outcome, Vec<PodSummary>) {
    let mut states = pending_states(plan);
    let mut started = vec![false; plan.replicated_jobs.len()];
    let (exit_tx, mut exit_rx) = mpsc::unbounded_channel::<((usize, usize), PodExit)>();
    let (kill_tx, kill_rx) = watch::channel(false);
    let mut running = 0usize;
    let any_trainer = plan.replicated_jobs.iter().any(|r| r.trainer);
    let outcome = 'run: loop {
        for (r, rjob) in plan.replicated_jobs.iter().enumerate() {
            if started[r]
                || !rjob
                    .depends_on
                    .iter()
                    .all(|(d, s)| satisfied(plan, &states, d, *s))
            {
                continue;
            }
            started[r] = true;
            for (p, pod) in rjob.pods.iter().enumerate() {
                // A stop during a large spawn takes effect between two pods, not after the last one.
                let started_event = events.send(RunEvent::PodStarted {
                    pod: pod.name.clone(),
                });
                tokio::select! {
                    biased;
                    () = cancel.as_mut() => break 'run Outcome::Cancelled,
                    _ = started_event => {}
                }
                let state = &mut states[r][p];
                state.phase = PodPhase::Running;
                state.started = Some(Instant::now());
                running += 1;
                let extra_env = if rjob.trainer || !any_trainer {
                    status_env.to_vec()
                } else {
                    Vec::new()
                };
                let (pod, events, kill, tx, tail, run_id) = (
                    pod.clone(),
                    events.clone(),
                    kill_rx.clone(),
                    exit_tx.clone(),
                    state.tail.clone(),
                    run_id.to_owned(),
                );
                tokio::spawn(async move {
                    let exit = run_pod(&run_id, &pod, &extra_env, &events, kill, tail).await;
                    let _ = tx.send(((r, p), exit));
                });
            }
        }
        if is_complete(plan, &states) {
            break Outcome::Complete;
        }
        if running == 0 {
            break never_started(plan, &started);
        }
        tokio::select! {
            Some(((r, p), exit)) = exit_rx.recv() => {
                running -= 1;
                states[r][p].finish(exit.ok, exit.detail.clone());
                let pod = &plan.replicated_jobs[r].pods[p].name;
                match elastic_loss(plan, &mut states, (r, p), &exit, events, (reports, history)).await {
                    Some(Ok(())) => continue,
                    Some(Err(fatal)) => break fatal,
                    None => {}
                }
                let _ = events.send(RunEvent::PodFinished { pod: pod.clone(), phase: states[r][p].phase, detail: exit.detail.clone() }).await;
                if !exit.ok {
                    let (pod, detail) = (pod.clone(), exit.detail.clone());
                    break if exit.disrupted {
                        Outcome::Disrupted { pod, detail }
                    } else {
                        Outcome::PodFailed { pod, detail }
                    };
                }
            }
            () = cancel.as_mut() => break Outcome::Cancelled,
        }
    };
    // Stop whatever still runs and collect its exit, so no process outlives the run.
    let _ = kill_tx.send(true);
    stop_the_rest(plan, &mut states, running, &mut exit_rx, events).await;
    (outcome, summaries(plan, states))
}

/// Collects the exits of the `running` pods left (the runner stopped them), so no process outlives the run.
async fn stop_the_rest(
    plan: &JobPlan,
    states: &mut [Vec<PodState>],
    mut running: usize,
    exit_rx: &mut mpsc::UnboundedReceiver<((usize, usize), PodExit)>,
    events: &mpsc::Sender<RunEvent>,
) {
    while running > 0 {
        let Some(((r, p), exit)) = exit_rx.recv().await else {
            break;
        };
        running -= 1;
        let state = &mut states[r][p];
        let detail = if exit.ok {
            exit.detail
        } else {
            STOPPED.to_string()
        };
        state.finish(exit.ok, detail);
        let _ = events
            .send(RunEvent::PodFinished {
                pod: plan.replicated_jobs[r].pods[p].name.clone(),
                phase: state.phase,
                detail: state.detail.clone().unwrap_or_default(),
            })
            .await;
    }
}

/// A trainer pod of an elastic job lost to a disruption: the job goes on without it while enough are left
/// (`Ok`, after the pod's end and the restart's notice are sent) or ends (`Err`). `None` for any other exit.
async fn elastic_loss(
    plan: &JobPlan,
    states: &mut [Vec<PodState>],
    (r, p): (usize, usize),
    exit: &PodExit,
    events: &mpsc::Sender<RunEvent>,
    log: (&Mutex<Reports>, &mut Vec<Restart>),
) -> Option<Result<(), Outcome>> {
    let rjob = &plan.replicated_jobs[r];
    let any_trainer = plan.replicated_jobs.iter().any(|r| r.trainer);
    let bounds = plan
        .elastic
        .filter(|_| !exit.ok && exit.disrupted && (rjob.trainer || !any_trainer))?;
    let pod = rjob.pods[p].name.clone();
    let shrunk = shrink(plan, states, (r, p), exit, bounds, log);
    let detail = match &shrunk {
        Ok(_) => states[r][p].detail.clone().unwrap_or_default(),
        Err(_) => exit.detail.clone(),
    };
    let _ = events
        .send(RunEvent::PodFinished {
            pod,
            phase: PodPhase::Failed,
            detail,
        })
        .await;
    Some(match shrunk {
        Ok(notice) => {
            let _ = events.send(RunEvent::Notice(notice)).await;
            Ok(())
        }
        Err(fatal) => Err(fatal),
    })
}

/// An elastic job lost trainer pod `(r, p)` to a disruption: goes on without it while at least `min`
/// trainer pods are left (the restart's notice), else fails ([`Outcome::Fatal`]).
fn shrink(
    plan: &JobPlan,
    states: &mut [Vec<PodState>],
    (r, p): (usize, usize),
    exit: &PodExit,
    (min, max): (u32, u32),
    (reports, history): (&Mutex<Reports>, &mut Vec<Restart>),
) -> Result<String, Outcome> {
    let any_trainer = plan.replicated_jobs.iter().any(|r| r.trainer);
    let pod = &plan.replicated_jobs[r].pods[p];
    let live: Vec<&PodPlan> = plan
        .replicated_jobs
        .iter()
        .zip(states.iter())
        .filter(|(rj, _)| rj.trainer || !any_trainer)
        .flat_map(|(rj, st)| rj.pods.iter().zip(st))
        // Pods still training or done training (the lost one is Failed by now).
        .filter(|(_, s)| !s.removed && matches!(s.phase, PodPhase::Running | PodPhase::Succeeded))
        .map(|(pod, _)| pod)
        .collect();
    let nodes = u32::try_from(live.len()).unwrap_or(u32::MAX);
    if nodes < min {
        return Err(Outcome::Fatal(format!(
            "elastic job below its minimum: pod {} was {} (a disruption) and {nodes} trainer pod(s) are \
             left, fewer than minNodes {min} (PET_NNODES={min}:{max})",
            pod.name, exit.detail
        )));
    }
    let restart = new_restart(
        reports,
        history,
        RestartCause::Disruption,
        RestartScope::Shrink { nodes },
        (pod.name.clone(), exit.detail.clone()),
        gpus(live.into_iter().chain(std::iter::once(pod))),
    );
    let state = &mut states[r][p];
    state.removed = true;
    state.detail = Some(format!(
        "{} (a disruption: the elastic job went on without it)",
        exit.detail
    ));
    let notice = format!("restart {}: {}", restart.number, restart.describe());
    history.push(restart);
    Ok(notice)
}

/// Every pod of the plan, pending.
fn pending_states(plan: &JobPlan) -> Vec<Vec<PodState>> {
    plan.replicated_jobs
        .iter()
        .map(|r| {
            r.pods
                .iter()
                .map(|_| PodState {
                    phase: PodPhase::Pending,
                    removed: false,
                    started: None,
                    duration: None,
                    detail: None,
                    tail: Arc::new(Mutex::new(VecDeque::new())),
                })
                .collect()
        })
        .collect()
}

/// The outcome of a run where nothing runs and some replicated jobs never started.
fn never_started(plan: &JobPlan, started: &[bool]) -> Outcome {
    let waiting: Vec<&str> = plan
        .replicated_jobs
        .iter()
        .zip(started)
        .filter(|(_, s)| !**s)
        .map(|(r, _)| r.name.as_str())
        .collect();
    Outcome::Failed(format!(
        "replicated jobs {} can never start: their dependencies did not reach the required status",
        waiting.join(", ")
    ))
}

/// The run's pods as the summary reports them, in plan order.
fn summaries(plan: &JobPlan, states: Vec<Vec<PodState>>) -> Vec<PodSummary> {
    plan.replicated_jobs
        .iter()
        .zip(states)
        .flat_map(|(rjob, st)| {
            rjob.pods.iter().zip(st).map(|(pod, s)| PodSummary {
                name: pod.name.clone(),
                replicated_job: pod.replicated_job.clone(),
                phase: s.phase,
                detail: s.detail,
                duration: s.duration,
                log_tail: s
                    .tail
                    .lock()
                    .map(|t| t.iter().cloned().collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

async fn run_pod(
    run_id: &str,
    pod: &PodPlan,
    extra_env: &[(String, String)],
    events: &mpsc::Sender<RunEvent>,
    kill: watch::Receiver<bool>,
    tail: Arc<Mutex<VecDeque<String>>>,
) -> PodExit {
    for init in &pod.init {
        let exit = run_process(run_id, pod, init, &[], events, kill.clone(), tail.clone()).await;
        if !exit.ok {
            return PodExit {
                ok: false,
                detail: format!("init container {}: {}", init.container, exit.detail),
                disrupted: exit.disrupted,
            };
        }
    }
    let exits = futures_util::future::join_all(pod.containers.iter().map(|c| {
        run_process(
            run_id,
            pod,
            c,
            extra_env,
            events,
            kill.clone(),
            tail.clone(),
        )
    }))
    .await;
    let multi = pod.containers.len() > 1;
    match pod.containers.iter().zip(&exits).find(|(_, e)| !e.ok) {
        Some((c, e)) => PodExit {
            ok: false,
            detail: if multi {
                format!("container {}: {}", c.container, e.detail)
            } else {
                e.detail.clone()
            },
            disrupted: e.disrupted,
        },
        None => PodExit {
            ok: true,
            detail: "exit code 0".into(),
            disrupted: false,
        },
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "ended".into(),
    }
}

fn signal_group(pid: Option<u32>, signal: Signal) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // ESRCH (the group is gone) is the normal case after a clean exit.
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

async fn run_process(
    run_id: &str,
    pod: &PodPlan,
    p: &ProcessPlan,
    extra_env: &[(String, String)],
    events: &mpsc::Sender<RunEvent>,
    mut kill: watch::Receiver<bool>,
    tail: Arc<Mutex<VecDeque<String>>>,
) -> PodExit {
    if *kill.borrow() {
        return PodExit {
            ok: false,
            detail: STOPPED.into(),
            disrupted: false,
        };
    }
    // Inherited by everything the container starts, so that all of it can be found and stopped.
    let marker = format!("{run_id}/{}/{}", pod.name, p.container);
    let mut cmd = Command::new(&p.program);
    cmd.args(&p.args)
        .env_clear()
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .envs(extra_env.iter().map(|(k, v)| (k, v)))
        .env(reaper::MARKER_ENV, &marker)
        .current_dir(&p.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that the whole tree it starts is stopped with it.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let detail = format!("cannot start {}: {e}", p.program.display());
            push_tail(&tail, &detail);
            return PodExit {
                ok: false,
                detail,
                disrupted: false,
            };
        }
    };
    let pid = child.id();
    reaper::register_root(pid);
    let readers = [
        child
            .stdout
            .take()
            .map(|s| spawn_reader(s, pod, p, false, events, &tail)),
        child
            .stderr
            .take()
            .map(|s| spawn_reader(s, pod, p, true, events, &tail)),
    ];
    let status = tokio::select! {
        status = child.wait() => status,
        _ = async { kill.wait_for(|k| *k).await.is_ok() } => {
            signal_group(pid, Signal::SIGTERM);
            reaper::signal_marked(&marker, Signal::SIGTERM);
            match tokio::time::timeout(TERMINATION_GRACE, child.wait()).await {
                Ok(status) => status,
                Err(_) => {
                    signal_group(pid, Signal::SIGKILL);
                    child.wait().await
                }
            }
        }
    };
    reaper::unregister_root(pid);
    // A container's leftover children end with it, as in a pod: its process group, then whatever left the
    // group but carries its marker (they may hold its output pipes open, too).
    signal_group(pid, Signal::SIGKILL);
    reaper::kill_marked(&marker).await;
    for reader in readers.into_iter().flatten() {
        let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
    }
    // Killed by a signal the runner did not send: a disruption (a lost node, an evicted pod).
    let stopped_by_runner = *kill.borrow();
    match status {
        Ok(s) => PodExit {
            ok: s.success(),
            detail: describe(s),
            disrupted: !stopped_by_runner
                && s.signal().is_some_and(|sig| {
                    [
                        Signal::SIGKILL,
                        Signal::SIGTERM,
                        Signal::SIGINT,
                        Signal::SIGHUP,
                    ]
                    .iter()
                    .any(|d| *d as i32 == sig)
                }),
        },
        Err(e) => PodExit {
            ok: false,
            detail: format!("waiting for the process: {e}"),
            disrupted: false,
        },
    }
}

fn push_tail(tail: &Mutex<VecDeque<String>>, line: &str) {
    if let Ok(mut t) = tail.lock() {
        if t.len() == LOG_TAIL_LINES {
            t.pop_front();
        }
        let cut = if line.len() > TAIL_LINE_BYTES {
            let mut end = TAIL_LINE_BYTES;
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}...", &line[..end])
        } else {
            line.to_string()
        };
        t.push_back(cut);
    }
}

/// Where to cut a full piece of a line: after the last whole UTF-8 character (a character split across
/// two pieces would turn into two replacement characters), unless the bytes are not UTF-8 anyway.
fn piece_end(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Err(e) if e.error_len().is_none() && e.valid_up_to() + 4 > bytes.len() => {
            e.valid_up_to().max(1)
        }
        _ => bytes.len(),
    }
}

fn spawn_reader(
    stream: impl AsyncRead + Unpin + Send + 'static,
    pod: &PodPlan,
    p: &ProcessPlan,
    stderr: bool,
    events: &mpsc::Sender<RunEvent>,
    tail: &Arc<Mutex<VecDeque<String>>>,
) -> tokio::task::JoinHandle<()> {
    let (pod, container, events, tail) = (
        pod.name.clone(),
        p.container.clone(),
        events.clone(),
        tail.clone(),
    );
    tokio::spawn(async move {
        // A fixed buffer and at most one piece of a line in memory, however long the line.
        let mut reader = BufReader::with_capacity(READ_BUFFER, stream);
        let mut piece: Vec<u8> = Vec::new();
        let send = |bytes: &[u8], continued: bool| {
            let mut line = String::from_utf8_lossy(bytes).into_owned();
            if !continued {
                let kept = line.trim_end_matches(['\n', '\r']).len();
                line.truncate(kept);
            }
            push_tail(&tail, &line);
            events.send(RunEvent::Log(LogLine {
                pod: pod.clone(),
                container: container.clone(),
                stderr,
                line,
                continued,
            }))
        };
        loop {
            let chunk = match reader.fill_buf().await {
                Ok([]) | Err(_) => break,
                Ok(chunk) => chunk,
            };
            let room = LOG_PIECE_BYTES - piece.len();
            let (taken, line_ends) = match chunk.iter().position(|b| *b == b'\n') {
                Some(i) if i < room => (i + 1, true),
                _ => (chunk.len().min(room), false),
            };
            piece.extend_from_slice(&chunk[..taken]);
            reader.consume(taken);
            let sent = if line_ends {
                let sent = send(&piece, false).await;
                piece.clear();
                sent
            } else if piece.len() >= LOG_PIECE_BYTES {
                let end = piece_end(&piece);
                let sent = send(&piece[..end], true).await;
                piece.drain(..end);
                sent
            } else {
                Ok(())
            };
            if sent.is_err() {
                // Nobody listens any more: keep draining the pipe so the process does not block on it.
                piece.clear();
                let _ = tokio::io::copy(&mut reader, &mut tokio::io::sink()).await;
                return;
            }
        }
        if !piece.is_empty() {
            let _ = send(&piece, false).await;
        }
    })
}
