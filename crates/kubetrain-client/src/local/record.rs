//! What a `kubetrain run` keeps of a run in its directory, so that `kubetrain get|list|logs|wait|delete
//! --local` can come back to it later, from another shell, also after `kubetrain run --detach`:
//!
//! | file | holds |
//! |---|---|
//! | `<run dir>/run.json` | the [`RunRecord`]: TrainJob, run id, the runner's pid, status and message, every pod's phase, the last `trainerStatus`; rewritten (atomically) at every change |
//! | `<run dir>/logs/<pod>.log` | every line the pod's containers wrote, as it was written |
//!
//! Run directories live under [`runs_root`] (`$TMPDIR/kubetrain-runs/<namespace>/<name>/<run id>`); a run
//! into a `--run-dir` elsewhere keeps the same files there, but `--local` commands only look under the root.
//! A record that says the run is still going while its process is gone (killed with SIGKILL, machine
//! rebooted) reads as `Failed` with the message `the run's process (pid N) is gone`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::exec::{PodPhase, RunEvent, RunSummary};
use super::plan::JobPlan;
use crate::types::{JobStatus, ProgressMetric, Step, TrainJobView, TrainerProgress, step_name};

/// The record's file name in the run directory.
pub const RECORD_FILE: &str = "run.json";
/// The directory of the pods' logs in the run directory.
pub const LOGS_DIR: &str = "logs";

/// `$TMPDIR/kubetrain-runs`: where every run directory lives by default.
pub fn runs_root() -> PathBuf {
    std::env::temp_dir().join("kubetrain-runs")
}

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
    /// The process running it (`kubetrain run`).
    pub pid: u32,
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
        }
    }

    /// The status, with a run whose process is gone read as `Failed`.
    pub fn status(&self) -> JobStatus {
        let recorded = self.status.parse().unwrap_or(JobStatus::Failed);
        if !recorded.is_finished() && !process_alive(self.pid) {
            return JobStatus::Failed;
        }
        recorded
    }

    /// The message, with the same reading as [`status`](Self::status).
    pub fn message(&self) -> Option<String> {
        let recorded: JobStatus = self.status.parse().unwrap_or(JobStatus::Failed);
        if !recorded.is_finished() && !process_alive(self.pid) {
            return Some(format!("the run's process (pid {}) is gone", self.pid));
        }
        self.message.clone()
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
    /// Ctrl-C does), SIGKILL when it has not exited after `grace`. Returns once the process is gone.
    pub fn stop(&self, grace: std::time::Duration) {
        use nix::sys::signal::{Signal, kill};
        let recorded: JobStatus = self.status.parse().unwrap_or(JobStatus::Failed);
        let Ok(raw) = i32::try_from(self.pid) else {
            return;
        };
        if recorded.is_finished() || raw <= 0 {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(raw);
        if kill(pid, Signal::SIGTERM).is_err() {
            return;
        }
        let start = std::time::Instant::now();
        // Polling: the process is not our child, so there is no exit to wait for.
        while process_alive(self.pid) {
            if start.elapsed() > grace {
                let _ = kill(pid, Signal::SIGKILL);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
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

/// Whether process `pid` exists (`kill(pid, 0)`; a process of another user counts).
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    ) {
        return false;
    }
    // A zombie has ended; it only waits for whoever adopted it to collect its exit.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat
        .rsplit_once(") ")
        .is_some_and(|(_, rest)| rest.starts_with('Z'))
}

/// Reads `<dir>/run.json`.
pub fn read(dir: &Path) -> io::Result<RunRecord> {
    let text = std::fs::read(dir.join(RECORD_FILE))?;
    serde_json::from_slice(&text).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", dir.join(RECORD_FILE).display()),
        )
    })
}

/// Every recorded run under `root` (`<root>/<namespace>/<name>/<run id>/run.json`), oldest first
/// (run ids start with their UTC start time). Unreadable records are skipped.
pub fn list(root: &Path) -> Vec<RunRecord> {
    let dirs = |dir: &Path| -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        out.sort();
        out
    };
    let mut runs: Vec<RunRecord> = dirs(root)
        .iter()
        .flat_map(|ns| dirs(ns))
        .flat_map(|job| dirs(&job))
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

/// The latest run of `namespace`/`name` under `root`.
pub fn latest(root: &Path, namespace: &str, name: &str) -> Option<RunRecord> {
    let job = root.join(namespace).join(name);
    let mut runs: Vec<RunRecord> = std::fs::read_dir(&job)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| read(&e.path()).ok())
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
    let text = serde_json::to_vec_pretty(record).map_err(io::Error::other)?;
    std::fs::write(&aside, text)?;
    let linked = std::fs::hard_link(&aside, record.run_dir.join(RECORD_FILE));
    let _ = std::fs::remove_file(&aside);
    match linked {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
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
        std::fs::create_dir_all(plan.run_dir.join(LOGS_DIR))?;
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

    fn write(&self) -> io::Result<()> {
        let path = self.record.run_dir.join(RECORD_FILE);
        let aside = self.record.run_dir.join(format!(".{RECORD_FILE}.new"));
        let text = serde_json::to_vec_pretty(&self.record).map_err(io::Error::other)?;
        std::fs::write(&aside, text)?;
        std::fs::rename(aside, path)
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
                        std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(self.record.log_file(&line.pod))?,
                    ),
                };
                let mut bytes = line.line.clone().into_bytes();
                bytes.push(b'\n');
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
            ..RunRecord::default()
        };
        assert_eq!(record.status(), JobStatus::Running);
        // pid 0 is the caller's process group for kill(2); a pid above pid_max never exists.
        record.pid = 4_194_305;
        assert_eq!(record.status(), JobStatus::Failed);
        assert_eq!(
            record.message().as_deref(),
            Some("the run's process (pid 4194305) is gone")
        );
        record.status = "Complete".into();
        assert_eq!(record.status(), JobStatus::Complete);
    }
}
