//! What a `kubetrain run` keeps of a run in its directory, so that `kubetrain get|list|logs|wait|delete
//! --local` can come back to it later, from another shell, also after `kubetrain run --detach`:
//!
//! | file | holds |
//! |---|---|
//! | `<run dir>/run.json` | the [`RunRecord`]: TrainJob, run id, the runner's identity and the run's token, status and message, every pod's phase, the last `trainerStatus`; rewritten (atomically) at every change, mode 0600 |
//! | `<run dir>/logs/<pod>.log` | every line the pod's containers wrote, as it was written, mode 0640 |
//!
//! Run directories live in the user's runs tree ([`super::tree`]: `<root>/<namespace>/<name>/<run id>`); a run
//! into a `--run-dir` elsewhere keeps the same files there, but `--local` commands only look under the root.
//!
//! A record names its runner by [`ProcessIdentity`] (pid, start time, boot, user), never by a bare pid: a
//! record that says the run is still going while that process is gone (killed with SIGKILL, machine
//! rebooted, its pid reused by another program) reads as `Failed` with the message `the run's process (pid
//! N) is gone`, and [`RunRecord::stop`] signals nothing but that process and the processes carrying the
//! run's token (`KUBETRAIN_LOCAL_RUN`). A record or run directory of another user is refused by [`read`].

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::exec::{PodPhase, RunEvent, RunSummary};
use super::identity::{ProcessIdentity, euid};
use super::plan::JobPlan;
use super::tree::check_owned;
use crate::types::{JobStatus, ProgressMetric, Step, TrainJobView, TrainerProgress, step_name};

/// The record's file name in the run directory.
pub(crate) const RECORD_FILE: &str = "run.json";
/// The directory of the pods' logs in the run directory.
pub const LOGS_DIR: &str = "logs";

pub use super::tree::runs_root;

/// The environment variable whose value, the run's token, every process of a run and its descendants carry:
/// how `kubetrain delete --local` finds what is left of a run after its runner is gone.
pub(crate) const RUN_TOKEN_ENV: &str = "KUBETRAIN_LOCAL_RUN";

/// One pod of a recorded run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodRecord {
    /// The pod (its host name).
    pub name: String,
    /// The SDK's step name (`node-0`, `dataset-initializer`, ...).
    pub step: String,
    /// `Pending`, `Running`, `Succeeded` or `Failed`.
    pub phase: String,
    /// How it ended (`exit code 0`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// `cpu`, `gpu` or `Unknown`.
    pub device: String,
    /// The device count.
    pub device_count: String,
}

/// The progress last reported, as recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgressRecord {
    /// Percentage done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_percentage: Option<i32>,
    /// Estimated seconds left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_remaining_seconds: Option<i32>,
    /// (name, value) of every metric, in order.
    #[serde(default)]
    pub metrics: Vec<(String, String)>,
    /// When it was reported (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated_time: Option<String>,
}

impl From<&TrainerProgress> for ProgressRecord {
    fn from(p: &TrainerProgress) -> Self {
        ProgressRecord {
            progress_percentage: p.progress_percentage,
            estimated_remaining_seconds: p.estimated_remaining_seconds,
            metrics: p
                .metrics
                .iter()
                .map(|m| (m.name.clone(), m.value.clone()))
                .collect(),
            last_updated_time: p.last_updated_time.clone(),
        }
    }
}

impl From<&ProgressRecord> for TrainerProgress {
    fn from(p: &ProgressRecord) -> Self {
        TrainerProgress {
            progress_percentage: p.progress_percentage,
            estimated_remaining_seconds: p.estimated_remaining_seconds,
            metrics: p
                .metrics
                .iter()
                .map(|(name, value)| ProgressMetric {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            last_updated_time: p.last_updated_time.clone(),
        }
    }
}

/// A run as recorded in `run.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// The TrainJob's namespace.
    pub namespace: String,
    /// The TrainJob's name.
    pub name: String,
    /// The run id.
    pub run_id: String,
    /// The run directory.
    pub run_dir: PathBuf,
    /// The process running it (`kubetrain run`); [`runner`](Self::runner) tells it from a later process with
    /// the same pid.
    pub pid: u32,
    /// The runner's identity: pid, start time, boot and user. A record without it (written by an older
    /// kubetrain) names no process that can be verified, so nothing is ever signalled for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<ProcessIdentity>,
    /// The run's token: the value of `KUBETRAIN_LOCAL_RUN` in every process of the run.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// `spec.runtimeRef.name`.
    pub runtime: String,
    /// Trainer pods.
    pub num_nodes: i32,
    /// When the run was planned (RFC 3339).
    pub created: String,
    /// `Created`, `Running`, `Complete` or `Failed`.
    pub status: String,
    /// Why it waits, or how it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it ended (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<String>,
    /// Every pod.
    pub pods: Vec<PodRecord>,
    /// What the training code last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trainer_status: Option<ProgressRecord>,
    /// Every restart of the run (and every shrink of an elastic run): cause, last checkpoint, step resumed
    /// from, work lost. Written when the run ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarts: Vec<super::exec::Restart>,
}

impl RunRecord {
    /// The record of `plan` before it starts, run by this process.
    pub fn of(plan: &JobPlan) -> Self {
        RunRecord {
            namespace: plan.namespace.clone(),
            name: plan.name.clone(),
            run_id: plan.run_id.clone(),
            run_dir: plan.run_dir.clone(),
            pid: std::process::id(),
            runner: ProcessIdentity::current(),
            token: plan.token.clone(),
            runtime: plan.runtime.clone(),
            num_nodes: plan
                .replicated_jobs
                .iter()
                .filter(|r| r.name == kubetrain_api::constants::NODE)
                .map(|r| r.pods.len() as i32)
                .sum(),
            created: k8s_openapi::jiff::Timestamp::now().to_string(),
            status: JobStatus::Created.as_str().to_owned(),
            message: None,
            finished: None,
            pods: plan
                .pods()
                .map(|p| PodRecord {
                    name: p.name.clone(),
                    step: step_name(&p.replicated_job, p.pod_index),
                    phase: PodPhase::Pending.as_str().to_owned(),
                    detail: None,
                    device: p.device.0.clone(),
                    device_count: p.device.1.clone(),
                })
                .collect(),
            trainer_status: None,
            restarts: Vec::new(),
        }
    }

    /// Names `pid` (a live process) as the run's runner: `kubetrain run --detach` starts the run in
    /// another process.
    pub fn set_runner(&mut self, pid: u32) {
        self.pid = pid;
        self.runner = ProcessIdentity::of(pid);
    }

    /// Whether the recorded runner is still alive and still the same process.
    fn runner_alive(&self) -> bool {
        self.runner
            .as_ref()
            .is_some_and(|r| r.pid == self.pid && r.is_alive())
    }

    /// Why the recorded status no longer holds, if it does not: the run was unfinished and its runner is
    /// gone.
    fn gone(&self) -> Option<String> {
        let recorded: JobStatus = self.status.parse().unwrap_or(JobStatus::Failed);
        if recorded.is_finished() || self.runner_alive() {
            return None;
        }
        Some(match self.runner {
            Some(_) => format!("the run's process (pid {}) is gone", self.pid),
            None => format!(
                "the run's process (pid {}) cannot be verified: the record has no start time (written by an \
                 older kubetrain); read as gone",
                self.pid
            ),
        })
    }

    /// The status, with a run whose process is gone read as `Failed`.
    pub fn status(&self) -> JobStatus {
        if self.gone().is_some() {
            return JobStatus::Failed;
        }
        self.status.parse().unwrap_or(JobStatus::Failed)
    }

    /// The message, with the same reading as [`status`](Self::status).
    pub fn message(&self) -> Option<String> {
        self.gone().or_else(|| self.message.clone())
    }

    /// The log file of `pod`.
    pub fn log_file(&self, pod: &str) -> PathBuf {
        self.run_dir.join(LOGS_DIR).join(format!("{pod}.log"))
    }

    /// The pod of a step (`node-0`, `launcher`, ...).
    pub fn pod_of_step(&self, step: &str) -> Option<&PodRecord> {
        self.pods.iter().find(|p| p.step == step)
    }

    /// The SDK's view of the run (what `kubetrain get --local` prints).
    pub fn view(&self) -> TrainJobView {
        TrainJobView {
            name: self.name.clone(),
            runtime: self.runtime.clone(),
            steps: self
                .pods
                .iter()
                .map(|p| Step {
                    name: p.step.clone(),
                    status: p.phase.clone(),
                    pod_name: p.name.clone(),
                    device: p.device.clone(),
                    device_count: p.device_count.clone(),
                })
                .collect(),
            num_nodes: self.num_nodes,
            creation_timestamp: Some(self.created.clone()),
            status: self.status(),
            message: self.message(),
            trainer_status: self.trainer_status.as_ref().map(TrainerProgress::from),
        }
    }

    /// Stops the run if it is still going: SIGTERM to its `kubetrain run` (which stops every pod, as
    /// Ctrl-C does), SIGKILL when it has not exited after `grace`; then SIGKILL to every process of this user
    /// that still carries the run's token. Only the recorded runner is signalled, and only while its pid,
    /// start time, boot and user all still match: after pid reuse nothing is. Returns once the runner is gone.
    pub fn stop(&self, grace: std::time::Duration) {
        use nix::sys::signal::Signal;
        let recorded: JobStatus = self.status.parse().unwrap_or(JobStatus::Failed);
        if let Some(runner) = self.runner.as_ref().filter(|r| r.pid == self.pid)
            && !recorded.is_finished()
            && runner.signal(Signal::SIGTERM)
        {
            let start = std::time::Instant::now();
            // Polling: the process is not our child, so there is no exit to wait for.
            while runner.is_alive() {
                if start.elapsed() > grace {
                    runner.signal(Signal::SIGKILL);
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        if !self.token.is_empty() {
            super::reaper::kill_run(&format!("{RUN_TOKEN_ENV}={}", self.token), euid());
        }
    }

    fn running_status(&self) -> JobStatus {
        let nodes: Vec<&PodRecord> = self
            .pods
            .iter()
            .filter(|p| p.step.starts_with("node-"))
            .collect();
        if !nodes.is_empty()
            && nodes
                .iter()
                .all(|p| p.phase == "Running" || p.phase == "Succeeded")
        {
            JobStatus::Running
        } else {
            JobStatus::Created
        }
    }
}

/// Reads `<dir>/run.json`. The directory and the record must belong to this user and neither may be a
/// symbolic link: a record planted by somebody else is refused (`PermissionDenied`, naming the owner). The
/// record's `runDir` is the directory it was read from, whatever the file says.
pub fn read(dir: &Path) -> io::Result<RunRecord> {
    check_owned(dir)?;
    let path = dir.join(RECORD_FILE);
    check_owned(&path)?;
    let text = std::fs::read(&path)?;
    let mut record: RunRecord = serde_json::from_slice(&text).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })?;
    record.run_dir = dir.to_path_buf();
    Ok(record)
}

/// The subdirectories of `dir` whose names are DNS labels (namespaces, TrainJob names) or run ids; the
/// tree's own `.queue` and `.ports` and anything else are not runs.
fn run_tree_dirs(dir: &Path, is_name: fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| e.file_name().to_str().is_some_and(is_name))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

fn is_label(name: &str) -> bool {
    super::tree::check_label("", name).is_ok()
}

/// Every recorded run under `root` (`<root>/<namespace>/<name>/<run id>/run.json`), oldest first
/// (run ids start with their UTC start time). Unreadable records and those of other users are skipped.
pub(crate) fn list(root: &Path) -> Vec<RunRecord> {
    let mut runs: Vec<RunRecord> = run_tree_dirs(root, is_label)
        .iter()
        .flat_map(|ns| run_tree_dirs(ns, is_label))
        .flat_map(|job| run_tree_dirs(&job, super::is_run_id))
        .filter_map(|run| read(&run).ok())
        .collect();
    runs.sort_by(|a, b| {
        (&a.run_id, &a.namespace, &a.name).cmp(&(&b.run_id, &b.namespace, &b.name))
    });
    runs
}

/// The latest run of every TrainJob under `root`, by namespace and name.
pub fn latest_runs(root: &Path) -> Vec<RunRecord> {
    let mut latest: BTreeMap<(String, String), RunRecord> = BTreeMap::new();
    for run in list(root) {
        latest.insert((run.namespace.clone(), run.name.clone()), run);
    }
    latest.into_values().collect()
}

/// The latest run of `namespace`/`name` under `root` (`None` also when either is not a DNS label: see
/// [`super::tree::job_dir`] for the reason).
pub fn latest(root: &Path, namespace: &str, name: &str) -> Option<RunRecord> {
    let job = super::tree::job_dir(root, namespace, name).ok()?;
    let mut runs: Vec<RunRecord> = run_tree_dirs(&job, super::is_run_id)
        .iter()
        .filter_map(|dir| read(dir).ok())
        .filter(|r| r.namespace == namespace && r.name == name)
        .collect();
    runs.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    runs.pop()
}

/// Writes `record` as its run's `run.json` unless the run has written one already (no clobbering: the
/// file is linked into place). `kubetrain run --detach` publishes the background run's first record this
/// way, so `kubetrain get --local` finds the run the moment `--detach` returns.
pub fn publish_initial(record: &RunRecord) -> io::Result<()> {
    let aside = record
        .run_dir
        .join(format!(".{RECORD_FILE}.{}", std::process::id()));
    write_private(&aside, &padded(record)?)?;
    let linked = std::fs::hard_link(&aside, record.run_dir.join(RECORD_FILE));
    let _ = std::fs::remove_file(&aside);
    match linked {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    super::tree::create_private_file(path)?.write_all(bytes)
}

/// The record as JSON followed by blank room: half its size and 4 KiB more, what the final record (every
/// pod's exit, the message, the end time) needs beyond the first one. JSON readers skip trailing
/// whitespace.
fn padded(record: &RunRecord) -> io::Result<Vec<u8>> {
    let mut text = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
    text.push(b'\n');
    let room = text.len() / 2 + 4096;
    text.resize(text.len() + room, b' ');
    Ok(text)
}

/// Writes `text` over the start of the existing file `path`, blanking the rest instead of truncating it (so
/// no block is freed and asked for again); fails when `text` does not fit.
fn overwrite_in_place(path: &Path, text: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    let size = usize::try_from(file.metadata()?.len()).unwrap_or(usize::MAX);
    if text.len() > size {
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            "the record no longer fits its file",
        ));
    }
    let mut whole = text.to_vec();
    whole.resize(size, b' ');
    file.write_all_at(&whole, 0)?;
    file.sync_data()
}

/// Keeps a run's record and logs up to date from its events.
#[derive(Debug)]
pub struct Recorder {
    record: RunRecord,
    logs: BTreeMap<String, File>,
}

impl Recorder {
    /// Starts the record of `plan` (written at once) and its `logs/` directory.
    pub fn new(plan: &JobPlan) -> io::Result<Self> {
        super::tree::create_private_dir(&plan.run_dir.join(LOGS_DIR))?;
        let recorder = Recorder {
            record: RunRecord::of(plan),
            logs: BTreeMap::new(),
        };
        recorder.write()?;
        Ok(recorder)
    }

    /// The record as it stands.
    pub fn record(&self) -> &RunRecord {
        &self.record
    }

    /// Replaces `run.json` atomically (written aside, then renamed); when that fails (a full disk, a run
    /// directory made read-only), overwrites the existing file in place, which needs neither a new block
    /// nor a directory entry as long as the record fits the room reserved when the file was made.
    fn write(&self) -> io::Result<()> {
        let path = self.record.run_dir.join(RECORD_FILE);
        let aside = self.record.run_dir.join(format!(".{RECORD_FILE}.new"));
        let text = padded(&self.record)?;
        let atomic = write_private(&aside, &text).and_then(|()| std::fs::rename(&aside, &path));
        match atomic {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = std::fs::remove_file(&aside);
                let compact = serde_json::to_vec_pretty(&self.record).map_err(io::Error::other)?;
                overwrite_in_place(&path, &compact).map_err(|_| e)
            }
        }
    }

    /// Notes why the run still waits (the local queue's reason).
    pub fn pending(&mut self, message: &str) -> io::Result<()> {
        self.record.message = Some(format!("Pending: {message}"));
        self.write()
    }

    /// Applies one event: a log line is appended to its pod's log, anything else rewrites the record.
    pub fn apply(&mut self, event: &RunEvent) -> io::Result<()> {
        let pod_phase =
            |record: &mut RunRecord, pod: &str, phase: PodPhase, detail: Option<&str>| {
                if let Some(p) = record.pods.iter_mut().find(|p| p.name == pod) {
                    p.phase = phase.as_str().to_owned();
                    p.detail = detail.map(str::to_owned);
                }
            };
        match event {
            RunEvent::Log(line) => {
                let file = match self.logs.entry(line.pod.clone()) {
                    std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::btree_map::Entry::Vacant(e) => e.insert(
                        std::os::unix::fs::OpenOptionsExt::mode(
                            std::fs::OpenOptions::new().create(true).append(true),
                            0o640,
                        )
                        .open(self.record.log_file(&line.pod))?,
                    ),
                };
                let mut bytes = line.line.clone().into_bytes();
                // A long line comes in pieces; only its last piece ends it.
                if !line.continued {
                    bytes.push(b'\n');
                }
                return file.write_all(&bytes);
            }
            RunEvent::Notice(_) => return Ok(()),
            RunEvent::PodStarted { pod } => {
                if self
                    .record
                    .message
                    .as_deref()
                    .is_some_and(|m| m.starts_with("Pending: "))
                {
                    self.record.message = None;
                }
                pod_phase(&mut self.record, pod, PodPhase::Running, None);
            }
            RunEvent::PodFinished { pod, phase, detail } => {
                pod_phase(&mut self.record, pod, *phase, Some(detail));
            }
            RunEvent::Restarting { attempt, reason } => {
                for p in &mut self.record.pods {
                    p.phase = PodPhase::Pending.as_str().to_owned();
                    p.detail = None;
                }
                self.record.message = Some(format!("restart {attempt}: {reason}"));
            }
            RunEvent::TrainerStatus(status) => {
                self.record.trainer_status = Some(ProgressRecord::from(status));
            }
        }
        self.record.status = self.record.running_status().as_str().to_owned();
        self.write()
    }

    /// Records how the run ended.
    pub fn finish(&mut self, summary: &RunSummary) -> io::Result<()> {
        for pod in &summary.pods {
            if let Some(p) = self.record.pods.iter_mut().find(|p| p.name == pod.name) {
                p.phase = pod.phase.as_str().to_owned();
                p.detail = pod.detail.clone();
            }
        }
        if let Some(status) = &summary.trainer_status {
            self.record.trainer_status = Some(ProgressRecord::from(status));
        }
        self.record.restarts.clone_from(&summary.restart_history);
        self.record.status = summary.status.as_str().to_owned();
        self.record.message = Some(summary.message.clone());
        self.record.finished = Some(k8s_openapi::jiff::Timestamp::now().to_string());
        self.write()
    }

    /// Records a run that ended before it started (refused or interrupted in the local queue).
    pub fn fail(&mut self, message: &str) -> io::Result<()> {
        self.record.status = JobStatus::Failed.as_str().to_owned();
        self.record.message = Some(message.to_owned());
        self.record.finished = Some(k8s_openapi::jiff::Timestamp::now().to_string());
        self.write()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_whose_process_is_gone_reads_as_failed() {
        let mut record = RunRecord {
            status: "Running".into(),
            pid: std::process::id(),
            runner: ProcessIdentity::current(),
            ..RunRecord::default()
        };
        assert_eq!(record.status(), JobStatus::Running);
        // pid 0 is the caller's process group for kill(2); a pid above pid_max never exists.
        record.pid = 4_194_305;
        record.runner = Some(ProcessIdentity {
            pid: 4_194_305,
            ..ProcessIdentity::current().unwrap()
        });
        assert_eq!(record.status(), JobStatus::Failed);
        assert_eq!(
            record.message().as_deref(),
            Some("the run's process (pid 4194305) is gone")
        );
        record.status = "Complete".into();
        assert_eq!(record.status(), JobStatus::Complete);
    }

    #[test]
    fn a_reused_pid_does_not_keep_a_dead_run_running() {
        // This process's pid, recorded with another start time: the pid of a dead runner, reused by us.
        let me = ProcessIdentity::current().unwrap();
        let record = RunRecord {
            status: "Running".into(),
            pid: me.pid,
            runner: Some(ProcessIdentity {
                start_ticks: me.start_ticks + 7,
                ..me.clone()
            }),
            ..RunRecord::default()
        };
        assert_eq!(record.status(), JobStatus::Failed);
        // Without an identity (an older record) the pid is never trusted.
        let legacy = RunRecord {
            runner: None,
            ..record.clone()
        };
        assert_eq!(legacy.status(), JobStatus::Failed);
        assert!(
            legacy.message().unwrap().contains("cannot be verified"),
            "{:?}",
            legacy.message()
        );
        // stop() of either signals nothing: this test process is still here to say so.
        record.stop(std::time::Duration::from_millis(10));
        legacy.stop(std::time::Duration::from_millis(10));
    }

    fn recorded_plan(dir: &Path) -> JobPlan {
        JobPlan {
            name: "job".into(),
            namespace: "default".into(),
            run_dir: dir.to_path_buf(),
            replicated_jobs: Vec::new(),
            success: (kubetrain_api::jobset::SuccessOperator::All, Vec::new()),
            max_restarts: 0,
            notices: Vec::new(),
            run_id: "r1".into(),
            token: "t".into(),
            ports: Vec::new(),
            lock: None,
            kueue_pod_sets: None,
            runtime: "torch-distributed".into(),
            active_deadline: None,
            elastic: None,
        }
    }

    #[test]
    fn the_end_is_recorded_when_the_record_cannot_be_replaced() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mut recorder = Recorder::new(&recorded_plan(dir.path())).unwrap();
        let mode = std::fs::metadata(dir.path().join(RECORD_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the record is private");
        // The aside file cannot be made (a directory holds its name, as a full disk or a read-only run
        // directory would refuse it; root bypasses permissions, a directory it cannot overwrite).
        std::fs::create_dir(dir.path().join(format!(".{RECORD_FILE}.new"))).unwrap();
        recorder
            .finish(&RunSummary {
                name: "job".into(),
                status: JobStatus::Complete,
                message: "jobset completed successfully".into(),
                cancelled: false,
                elapsed: std::time::Duration::from_secs(1),
                restarts: 0,
                restart_history: Vec::new(),
                pods: Vec::new(),
                trainer_status: None,
            })
            .expect("written in place");
        let read = read(dir.path()).unwrap();
        assert_eq!(read.status, "Complete");
        assert_eq!(
            read.message.as_deref(),
            Some("jobset completed successfully")
        );
    }

    #[test]
    fn a_record_of_another_user_or_behind_a_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        Recorder::new(&recorded_plan(&dir.path().join("run"))).unwrap();
        assert!(read(&dir.path().join("run")).is_ok());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("run"), &link).unwrap();
        let err = read(&link).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("symbolic link"), "{err}");
    }
}
