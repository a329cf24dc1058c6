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
    /// Restarts done.
    pub restarts: u32,
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
}

enum Outcome {
    Complete,
    Failed(String),
    Cancelled,
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
    // The pods bind their ports now.
    for port in &plan.ports {
        port.release();
    }
    let run_id = if plan.run_id.is_empty() {
        super::run_lock::new_run_id()
    } else {
        plan.run_id.clone()
    };
    let endpoint = {
        // Weak: a request still in flight when the run ends must not keep the event stream open.
        let events = events.downgrade();
        super::status::StatusEndpoint::start(&plan.namespace, &plan.name, &plan.run_dir, move |s| {
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
    loop {
        let (outcome, pods) = run_once(plan, &run_id, &status_env, events, cancel.as_mut()).await;
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
            Outcome::Failed(reason) if restarts < plan.max_restarts => {
                restarts += 1;
                let _ = events
                    .send(RunEvent::Restarting {
                        attempt: restarts,
                        reason,
                    })
                    .await;
                continue;
            }
            Outcome::Failed(reason) => (JobStatus::Failed, reason, false),
        };
        return RunSummary {
            name: plan.name.clone(),
            status,
            message,
            cancelled,
            elapsed: start.elapsed(),
            restarts,
            pods,
            trainer_status: endpoint
                .as_ref()
                .ok()
                .and_then(|e| e.latest())
                .map(|s| crate::types::TrainerProgress::of(&s)),
        };
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
            for (pod, s) in r.pods.iter().zip(st) {
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

async fn run_once(
    plan: &JobPlan,
    run_id: &str,
    status_env: &[(String, String)],
    events: &mpsc::Sender<RunEvent>,
    mut cancel: std::pin::Pin<&mut impl Future<Output = ()>>,
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
                let state = &mut states[r][p];
                state.finish(exit.ok, exit.detail.clone());
                let pod = &plan.replicated_jobs[r].pods[p].name;
                let _ = events.send(RunEvent::PodFinished { pod: pod.clone(), phase: state.phase, detail: exit.detail.clone() }).await;
                if !exit.ok {
                    break Outcome::Failed(format!("pod {pod} failed ({})", exit.detail));
                }
            }
            () = cancel.as_mut() => break Outcome::Cancelled,
        }
    };
    // Stop whatever still runs and collect its exit, so no process outlives the run.
    let _ = kill_tx.send(true);
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
    (outcome, summaries(plan, states))
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
        },
        None => PodExit {
            ok: true,
            detail: "exit code 0".into(),
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
            return PodExit { ok: false, detail };
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
    match status {
        Ok(s) => PodExit {
            ok: s.success(),
            detail: describe(s),
        },
        Err(e) => PodExit {
            ok: false,
            detail: format!("waiting for the process: {e}"),
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
