//! The seven steps on this machine, for real: the local queue (Kueue's model of this machine), the
//! initializers against an S3 source, the collective benchmark and the trainer as the TrainJob's own
//! pods (local processes through the local runner), a pod deleted with SIGKILL and the run restarted
//! as JobSet's `failurePolicy` would, resuming from the checkpoint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use kubetrain_client::local::queue::LocalQueue;
use kubetrain_client::local::{self, LocalOptions, RunEvent, RunSummary};
use kubetrain_collective::checkpoint;
use kubetrain_initializer::{InitConfig, Kind, ProgressMode, StorageUri};
use serde_json::{Value, json};

use crate::cost::{self, Usage};
use crate::plan::{Plan, StorageSpec, format_duration};
use crate::report::{
    BenchPoint, Check, Host, Report, StagingPoint, StepReport, TrainEvent, TrainPoint, Verdict,
};

/// Names of the seven steps, in order.
pub const STEPS: [(&str, &str); 7] = [
    ("queue", "submit the TrainJob through the queue"),
    (
        "staging",
        "fetch the dataset sample and the base model weights",
    ),
    ("benchmark", "all-reduce benchmark across the job's pods"),
    ("training", "train for the window, writing checkpoints"),
    (
        "restore",
        "delete a pod, restart, resume from the checkpoint",
    ),
    (
        "labels",
        "export GPU, network, storage, queue and cost labels",
    ),
    ("cost", "effective cost per unit vs the baseline"),
];

/// How to run.
#[derive(Debug, Clone)]
pub struct LocalRun {
    /// This run's own directory, new and empty (see [`crate::outdir`]): the report (`acceptance.json`,
    /// `acceptance.html`, `labels.txt`), the pods' `run/`, relative checkpoint locations.
    pub out_dir: PathBuf,
    /// The `kubetrain` binary the pods run.
    pub kubetrain_exe: PathBuf,
}

/// Collects the steps as they finish.
pub(crate) struct Steps<'a> {
    pub(crate) done: Vec<StepReport>,
    pub(crate) progress: &'a mut (dyn FnMut(&str) + Send),
}

impl Steps<'_> {
    pub(crate) fn finish(
        &mut self,
        started: Instant,
        message: String,
        measurements: Value,
        checks: Vec<Check>,
        failed: bool,
    ) -> bool {
        let index = self.done.len();
        let (name, title) = STEPS[index];
        let verdict = if failed || checks.iter().any(|c| !c.pass) {
            Verdict::Fail
        } else {
            Verdict::Pass
        };
        let mut line = format!("[{}/7] {name}: {} — {message}", index + 1, verdict.label());
        for c in checks.iter().filter(|c| !c.pass) {
            line.push_str(&format!(
                "; {} wants {}, measured {}",
                c.threshold, c.wanted, c.measured
            ));
        }
        (self.progress)(&line);
        self.done.push(StepReport {
            index: index as u8 + 1,
            name: name.into(),
            title: title.into(),
            verdict,
            message,
            seconds: started.elapsed().as_secs_f64(),
            measurements,
            checks,
        });
        verdict == Verdict::Pass
    }

    pub(crate) fn skip_rest(&mut self, why: &str) {
        while self.done.len() < STEPS.len() {
            let index = self.done.len();
            let (name, title) = STEPS[index];
            (self.progress)(&format!("[{}/7] {name}: SKIPPED — {why}", index + 1));
            self.done.push(StepReport {
                index: index as u8 + 1,
                name: name.into(),
                title: title.into(),
                verdict: Verdict::Skipped,
                message: why.into(),
                seconds: 0.0,
                measurements: Value::Null,
                checks: Vec::new(),
            });
        }
    }
}

pub(crate) fn check_max(
    threshold: &str,
    max: Option<f64>,
    measured: f64,
    unit: &str,
) -> Option<Check> {
    max.map(|m| Check {
        threshold: threshold.into(),
        wanted: format!("≤ {m} {unit}"),
        measured: format!("{measured:.3} {unit}"),
        pass: measured <= m,
    })
}

pub(crate) fn check_min(
    threshold: &str,
    min: Option<f64>,
    measured: f64,
    unit: &str,
) -> Option<Check> {
    min.map(|m| Check {
        threshold: threshold.into(),
        wanted: format!("≥ {m} {unit}"),
        measured: format!("{measured:.3} {unit}"),
        pass: measured >= m,
    })
}

/// The TrainJob (and runtimes) as a YAML stream for the local runner, with the trainer's command or
/// env changed by `edit`.
fn job_yaml(plan: &Plan, edit: impl FnOnce(&mut Value)) -> String {
    let mut job = plan.spec.train_job.clone();
    edit(&mut job);
    let mut docs: Vec<String> = plan
        .spec
        .runtimes
        .iter()
        .map(|r| serde_json::to_string(r).unwrap_or_default())
        .collect();
    docs.push(serde_json::to_string(&job).unwrap_or_default());
    docs.join("\n---\n")
}

/// The bench pods' command, from the plan's benchmark settings: one definition for both modes, so a local
/// run measures what a cluster run does.
pub(crate) fn bench_command(plan: &Plan) -> Value {
    let b = &plan.spec.benchmark;
    json!([
        "kubetrain",
        "collective",
        "bench",
        "--backend",
        b.backend,
        "--op",
        "all_reduce",
        "--min-bytes",
        b.min_bytes.0.to_string(),
        "--max-bytes",
        b.max_bytes.0.to_string(),
        "--iters",
        b.iters.to_string(),
        "--warmup",
        b.warmup.to_string(),
        "--output",
        "json"
    ])
}

/// Where the checkpoints go: `s3://…` and absolute directories as written; a relative directory inside
/// `run_dir` once `..` is resolved, or an error when it would leave it.
fn checkpoint_location(location: &str, run_dir: &Path) -> Result<String, String> {
    if location.starts_with("s3://") || Path::new(location).is_absolute() {
        return Ok(location.to_string());
    }
    let inside = crate::outdir::resolve_inside(location)?;
    Ok(run_dir.join(inside).display().to_string())
}

/// The env the training pods get from the plan: where, how often and how many checkpoints to keep, and how
/// long to train; `checkpoint_dir` is the plan's location as the pods see it. One list for both modes.
pub(crate) fn training_env(plan: &Plan, checkpoint_dir: &str) -> Vec<Value> {
    let spec = &plan.spec;
    let mut env = vec![
        ("KUBETRAIN_CHECKPOINT_DIR", checkpoint_dir.to_string()),
        (
            "KUBETRAIN_CHECKPOINT_EVERY",
            spec.checkpoint.every_steps.to_string(),
        ),
        (
            "KUBETRAIN_CHECKPOINT_KEEP",
            spec.checkpoint.keep.to_string(),
        ),
        (
            "KUBETRAIN_TRAIN_SECONDS",
            format!("{}", spec.training.window.0.as_secs_f64()),
        ),
    ];
    if let Some(d) = spec.training.step_delay {
        env.push(("KUBETRAIN_STEP_DELAY_MS", d.0.as_millis().to_string()));
    }
    env.into_iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect()
}

/// The benchmark step's TrainJob (and runtimes) for the local runner: the plan's job running [`bench_command`].
fn bench_job_yaml(plan: &Plan) -> String {
    job_yaml(plan, |job| {
        trainer_mut(job).insert("command".into(), bench_command(plan));
    })
}

fn trainer_mut(job: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !job["spec"]["trainer"].is_object() {
        job["spec"]["trainer"] = json!({});
    }
    job["spec"]["trainer"]
        .as_object_mut()
        .expect("just made an object")
}

/// Runs `plan` (prepared) to the end, handing every event to `on_event` with the time since start.
async fn run_plan(
    plan: &local::JobPlan,
    stop: &Stop,
    mut on_event: impl FnMut(&RunEvent, f64),
) -> RunSummary {
    let (tx, mut rx) = tokio::sync::mpsc::channel(local::exec::EVENT_BUFFER);
    let start = Instant::now();
    let exec = async move {
        let summary = local::execute(plan, &tx, stop.wait()).await;
        drop(tx);
        summary
    };
    let consume = async {
        while let Some(event) = rx.recv().await {
            on_event(&event, start.elapsed().as_secs_f64());
        }
    };
    let (summary, ()) = tokio::join!(exec, consume);
    summary
}

/// Ctrl-C or SIGTERM: every pod is stopped and the remaining steps are skipped.
#[derive(Clone)]
struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    /// Listens for SIGINT and SIGTERM from now on (a later signal is not lost between phases).
    fn install() -> Stop {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            let _ = tx.send(true);
        });
        Stop(rx)
    }

    fn stopped(&self) -> bool {
        *self.0.borrow()
    }

    async fn wait(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|v| *v).await;
    }
}

/// SIGKILLs every process of `pod` (what a forced pod deletion does to its containers).
fn kill_pod(pod: &str) -> usize {
    let needle = format!("/{pod}/");
    let mut killed = 0;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let me = std::process::id() as i32;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let marked = env.split(|b| *b == 0).any(|var| {
            std::str::from_utf8(var).is_ok_and(|v| {
                v.strip_prefix("KUBETRAIN_LOCAL_CONTAINER=")
                    .is_some_and(|m| m.contains(&needle))
            })
        });
        if marked
            && nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .is_ok()
        {
            killed += 1;
        }
    }
    killed
}

/// Deterministic file content for a loopback source.
fn generated(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Stages one source with the initializer; a loopback source is started first.
async fn stage(
    name: &str,
    kind: Kind,
    spec: &StorageSpec,
    dest: &Path,
    scratch: &Path,
) -> Result<
    (
        StagingPoint,
        Option<kubetrain_initializer::testing::S3TestServer>,
    ),
    String,
> {
    let uri = StorageUri::parse(&spec.uri, kind).map_err(|e| format!("spec.{name}.uri: {e}"))?;
    let mut config = InitConfig::new(kind, uri);
    config.destination = dest.to_path_buf();
    config.progress = ProgressMode::Off;
    config.ignore_patterns = Default::default();
    config.tuning.max_retries = 1;
    config.tuning.connect_timeout = Duration::from_secs(3);
    config.tuning.initial_backoff = Duration::from_millis(200);
    config.s3.endpoint = spec.endpoint.clone();
    let mut server = None;
    if let Some(lb) = &spec.loopback {
        let root = scratch.join(name);
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        let s = kubetrain_initializer::testing::S3TestServer::start(
            &root,
            "acceptance",
            "acceptance-secret",
        )
        .map_err(|e| format!("starting the loopback S3 server: {e}"))?;
        let rest = spec.uri.trim_start_matches("s3://");
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        s.create_bucket(bucket)
            .map_err(|e| format!("loopback bucket: {e}"))?;
        let dir = root.join(bucket).join(prefix);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for i in 0..lb.files {
            let file = dir.join(format!("part-{i:05}.bin"));
            std::fs::write(&file, generated(u64::from(i) + 1, lb.file_size.0 as usize))
                .map_err(|e| format!("{}: {e}", file.display()))?;
        }
        config.s3.endpoint = Some(s.endpoint());
        config.s3.access_key_id = Some(s.access_key().into());
        config.s3.secret_access_key = Some(s.secret_key().into());
        server = Some(s);
    }
    let summary = kubetrain_initializer::initialize(&config)
        .await
        .map_err(|e| format!("{name} from {}: {e}", spec.uri))?;
    let seconds = summary.elapsed.as_secs_f64().max(1e-6);
    let bytes = summary.bytes_downloaded + summary.bytes_already_present;
    Ok((
        StagingPoint {
            name: name.into(),
            bytes,
            files: (summary.files_downloaded + summary.files_already_present) as u64,
            seconds,
            mbps: bytes as f64 / 1e6 / seconds,
        },
        server,
    ))
}

/// What the training phase observed.
#[derive(Default)]
struct TrainingLog {
    points: Vec<(f64, u64, f64, u32)>,
    checkpoints: Vec<(f64, u64, u64, f64, String)>,
    warnings: Vec<String>,
    resumed: Option<(f64, u64, String)>,
    kill_at: Option<f64>,
    killed_processes: usize,
    restart_at: Option<f64>,
    corrupted: Option<String>,
    other_errors: Vec<String>,
}

fn parse_step(line: &str) -> Option<(u64, f64)> {
    let rest = line.strip_prefix("step")?.trim_start();
    let (step, rest) = rest.split_once(char::is_whitespace)?;
    let loss = rest.trim().strip_prefix("loss")?.trim();
    Some((step.parse().ok()?, loss.parse().ok()?))
}

/// `checkpoint: wrote NAME (step N, B bytes, X ms) to LOC`.
fn parse_checkpoint(line: &str) -> Option<(String, u64, u64, f64)> {
    let rest = line.strip_prefix("checkpoint: wrote ")?;
    let (name, rest) = rest.split_once(" (step ")?;
    let (step, rest) = rest.split_once(", ")?;
    let (bytes, rest) = rest.split_once(" bytes, ")?;
    let (ms, _) = rest.split_once(" ms)")?;
    Some((
        name.into(),
        step.parse().ok()?,
        bytes.parse().ok()?,
        ms.parse().ok()?,
    ))
}

/// `resumed from checkpoint NAME at step N (loss L)`.
fn parse_resumed(line: &str) -> Option<(String, u64)> {
    let rest = line.strip_prefix("resumed from checkpoint ")?;
    let (name, rest) = rest.split_once(" at step ")?;
    let step = rest.split_whitespace().next()?;
    Some((name.into(), step.parse().ok()?))
}

/// Damages the newest checkpoint in a directory store (the fault-injection knob of the plan).
fn corrupt_newest(store: &dyn checkpoint::CheckpointStore) -> Option<String> {
    let mut names: Vec<(u64, String)> = store
        .list()
        .ok()?
        .into_iter()
        .filter_map(|n| checkpoint::step_of(&n).map(|s| (s, n)))
        .collect();
    names.sort();
    let (_, name) = names.pop()?;
    let mut bytes = store.get(&name).ok()?;
    let last = bytes.len().checked_sub(2)?;
    bytes[last] ^= 0x5a;
    store.put(&name, &bytes).ok()?;
    Some(name)
}

/// Runs the seven steps; `progress` gets one line per step (and a few notes).
pub async fn run(plan: &Plan, opts: &LocalRun, progress: &mut (dyn FnMut(&str) + Send)) -> Report {
    let run_started = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let stop = Stop::install();
    let mut steps = Steps {
        done: Vec::new(),
        progress,
    };
    let mut report = Report {
        format: "kubetrain.io/acceptance-report/v1".into(),
        name: plan.metadata.name.clone(),
        mode: "local".into(),
        passed: false,
        started_unix,
        seconds: 0.0,
        versions: json!({"kubetrain": env!("CARGO_PKG_VERSION"), "reportFormat": "v1"}),
        host: Host::this_machine(),
        steps: Vec::new(),
        training: Vec::new(),
        events: Vec::new(),
        benchmark: Vec::new(),
        staging: Vec::new(),
        queue_wait_seconds: None,
        interrupted: false,
        cost: None,
        labels: BTreeMap::new(),
        plan: plan.clone(),
    };
    let spec = &plan.spec;
    let th = &spec.thresholds;
    // `out_dir` is this run's own fresh directory (`outdir::create_run_dir`): nothing in it to clear.
    let run_dir = opts.out_dir.join("run");
    let options = LocalOptions {
        run_dir: Some(run_dir.clone()),
        kubetrain_exe: Some(opts.kubetrain_exe.clone()),
        remap_ports: true,
        ..LocalOptions::default()
    };
    let catalog = kubetrain_jobset::builtin::catalog();

    // 1. Queue.
    let t = Instant::now();
    let bench_yaml = bench_job_yaml(plan);
    let bench_plan = match local::prepare(&bench_yaml, &catalog, &options) {
        Ok(p) => p,
        Err(e) => {
            steps.finish(
                t,
                format!("the TrainJob cannot be planned: {e}"),
                Value::Null,
                vec![],
                true,
            );
            steps.skip_rest("the queue step failed");
            return finish(report, steps.done, run_started);
        }
    };
    let mut capacity = kubetrain_client::local::capacity::Capacity::of_this_machine();
    for (k, v) in &spec.queue.capacity {
        match (k.as_str(), v.parse::<u64>()) {
            ("cpu", Ok(n)) => capacity.cpu = n,
            ("gpu", Ok(n)) => capacity.gpus = n,
            ("memory", _) => capacity.memory = crate::plan::parse_size(v).ok().or(capacity.memory),
            _ => {}
        }
    }
    let queue_dir = spec
        .queue
        .dir
        .as_ref()
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("KUBETRAIN_QUEUE_DIR").map(PathBuf::from))
        .unwrap_or_else(LocalQueue::default_dir);
    let queue =
        LocalQueue::new(&queue_dir, capacity.clone()).with_timeout(th.max_queue_wait.map(|d| d.0));
    let mut pending_reasons: Vec<String> = Vec::new();
    let ticket = match queue.enqueue(&bench_plan) {
        Ok(mut ticket) => {
            let waited = tokio::select! {
                w = ticket.wait(|p| {
                    let r = p.to_string();
                    if pending_reasons.last() != Some(&r) {
                        pending_reasons.push(r);
                    }
                }) => w.map_err(|e| e.to_string()),
                () = stop.wait() => Err("interrupted while waiting in the queue".to_string()),
            };
            waited.map(|()| ticket)
        }
        Err(e) => Err(e.to_string()),
    };
    let wait = t.elapsed().as_secs_f64();
    report.queue_wait_seconds = Some(wait);
    let queue_name = spec.queue.name.clone().unwrap_or_else(|| "local".into());
    let measurements = json!({
        "queue": queue_name,
        "ledger": queue_dir.display().to_string(),
        "capacity": {"cpu": capacity.cpu, "memory": capacity.memory, "gpu": capacity.gpus},
        "waitSeconds": wait,
        "pendingReasons": pending_reasons,
        "admission": if ticket.is_ok() { "admitted by ClusterQueue local on ResourceFlavor this-machine" } else { "not admitted" },
    });
    let checks: Vec<Check> = check_max(
        "spec.thresholds.maxQueueWait",
        th.max_queue_wait.map(|d| d.0.as_secs_f64()),
        wait,
        "s",
    )
    .into_iter()
    .collect();
    let mut ticket = match ticket {
        Ok(ticket) => {
            let msg = format!(
                "admitted by ClusterQueue local (flavor this-machine) after {wait:.1}s{}",
                pending_reasons
                    .first()
                    .map(|r| format!("; waited: {r}"))
                    .unwrap_or_default()
            );
            if !steps.finish(t, msg, measurements, checks, false) {
                steps.skip_rest("the queue step failed");
                return finish(report, steps.done, run_started);
            }
            ticket
        }
        Err(why) => {
            report.interrupted = stop.stopped();
            steps.finish(t, why, measurements, checks, true);
            steps.skip_rest("the job was not admitted");
            return finish(report, steps.done, run_started);
        }
    };

    let body = async {
        let admitted_at = Instant::now();
        // 2. Staging.
        let t = Instant::now();
        let workspace = run_dir.join("workspace");
        let scratch = opts.out_dir.join("loopback-sources");
        let mut staged = Vec::new();
        let mut failure = None;
        let mut servers = Vec::new();
        for (name, kind, s) in [
            ("dataset", Kind::Dataset, &spec.dataset),
            ("model", Kind::Model, &spec.model),
        ] {
            match stage(name, kind, s, &workspace.join(name), &scratch).await {
                Ok((point, server)) => {
                    staged.push(point);
                    servers.extend(server);
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        drop(servers);
        report.staging = staged.clone();
        let total_bytes: u64 = staged.iter().map(|s| s.bytes).sum();
        let total_secs: f64 = staged.iter().map(|s| s.seconds).sum();
        let mbps = if total_secs > 0.0 {
            total_bytes as f64 / 1e6 / total_secs
        } else {
            0.0
        };
        let measurements =
            json!({"sources": staged, "bytes": total_bytes, "seconds": total_secs, "mbps": mbps});
        let checks: Vec<Check> = if failure.is_none() {
            check_min(
                "spec.thresholds.minStagingMbps",
                th.min_staging_mbps,
                mbps,
                "MB/s",
            )
            .into_iter()
            .collect()
        } else {
            Vec::new()
        };
        let msg = match &failure {
            Some(e) => format!("storage unreachable or refused: {e}"),
            None => format!(
                "{} bytes in {} files at {mbps:.1} MB/s into the job's /workspace",
                total_bytes,
                staged.iter().map(|s| s.files).sum::<u64>()
            ),
        };
        if !steps.finish(t, msg, measurements, checks, failure.is_some()) {
            steps.skip_rest("the staging step failed");
            return (admitted_at.elapsed(), None);
        }

        // 3. Benchmark in the job's pods.
        let t = Instant::now();
        let mut rows = Vec::new();
        let mut bench_notes = Vec::new();
        let summary = run_plan(&bench_plan, &stop, |event, _| match event {
            RunEvent::Log(l) if !l.stderr && l.pod.ends_with("-0-0") => {
                if let Ok(v) = serde_json::from_str::<Value>(&l.line)
                    && v.get("op").is_some()
                {
                    rows.push(BenchPoint {
                        size: v["bytes"].as_u64().unwrap_or(0),
                        count: v["count"].as_u64().unwrap_or(0),
                        time_us: v["time_us"].as_f64().unwrap_or(0.0),
                        algbw: v["algbw_gbps"].as_f64().unwrap_or(0.0),
                        busbw: v["busbw_gbps"].as_f64().unwrap_or(0.0),
                        wrong: v["wrong"].as_u64().unwrap_or(0),
                    });
                }
            }
            RunEvent::Log(l) if l.stderr => bench_notes.push(format!("{}: {}", l.pod, l.line)),
            _ => {}
        })
        .await;
        drop(bench_plan);
        report.benchmark = rows.clone();
        let last = rows.last().cloned();
        let wrong: u64 = rows.iter().map(|r| r.wrong).sum();
        let failed =
            summary.status != kubetrain_client::JobStatus::Complete || rows.is_empty() || wrong > 0;
        let busbw = last.as_ref().map_or(0.0, |r| r.busbw);
        let checks: Vec<Check> = if failed {
            Vec::new()
        } else {
            check_min(
                "spec.thresholds.minBusbwGbps",
                th.min_busbw_gbps,
                busbw,
                "GB/s",
            )
            .into_iter()
            .collect()
        };
        let msg = if failed {
            format!(
                "the benchmark pods did not finish cleanly: {} ({} rows, {wrong} wrong elements){}",
                summary.message,
                rows.len(),
                bench_notes
                    .last()
                    .map(|n| format!("; last stderr: {n}"))
                    .unwrap_or_default()
            )
        } else {
            format!(
                "all_reduce over {} pods: busbw {busbw:.3} GB/s at {} bytes, {} sizes, 0 wrong",
                plan.num_nodes(),
                last.as_ref().map_or(0, |r| r.size),
                rows.len()
            )
        };
        let measurements = json!({"rows": rows, "busbwAtMaxGbps": busbw, "pods": plan.num_nodes(), "backend": spec.benchmark.backend});
        if !steps.finish(t, msg, measurements, checks, failed) {
            steps.skip_rest("the benchmark step failed");
            return (admitted_at.elapsed(), None);
        }

        // 4 + 5. Training with checkpoints, the pod deletion and the restore.
        let t = Instant::now();
        let location = match checkpoint_location(&spec.checkpoint.location, &opts.out_dir) {
            Ok(l) => l,
            Err(e) => {
                steps.finish(
                    t,
                    format!("spec.checkpoint.location: {e}"),
                    Value::Null,
                    vec![],
                    true,
                );
                steps.skip_rest("the training step failed");
                return (admitted_at.elapsed(), None);
            }
        };
        let store = match crate::s3store::open(&location, &crate::s3store::S3Settings::from_env()) {
            Ok(s) => s,
            Err(e) => {
                steps.finish(
                    t,
                    format!("checkpoint location {location}: {e}"),
                    Value::Null,
                    vec![],
                    true,
                );
                steps.skip_rest("the training step failed");
                return (admitted_at.elapsed(), None);
            }
        };
        // A fresh run starts from step 0. A relative location is inside this run's new directory, so
        // empty; checkpoints anywhere else are the user's: the run refuses to start and deletes nothing.
        match store.list() {
            Ok(names) => {
                let old: Vec<String> = names
                    .into_iter()
                    .filter(|n| checkpoint::step_of(n).is_some())
                    .collect();
                if !old.is_empty() {
                    steps.finish(
                        t,
                        format!("checkpoint location {location} already holds {} checkpoints (e.g. {}): the test must start from step 0, so point spec.checkpoint.location at an empty location", old.len(), old[0]),
                        Value::Null,
                        vec![],
                        true,
                    );
                    steps.skip_rest("the training step failed");
                    return (admitted_at.elapsed(), None);
                }
            }
            Err(e) => {
                steps.finish(
                    t,
                    format!("checkpoint location {location} cannot be listed: {e}"),
                    Value::Null,
                    vec![],
                    true,
                );
                steps.skip_rest("the training step failed");
                return (admitted_at.elapsed(), None);
            }
        }
        let train_yaml = job_yaml(plan, |job| {
            let env = trainer_mut(job).entry("env").or_insert_with(|| json!([]));
            if let Some(list) = env.as_array_mut() {
                list.extend(training_env(plan, &location));
            }
        });
        let mut train_plan = match local::prepare(&train_yaml, &catalog, &options) {
            Ok(p) => p,
            Err(e) => {
                steps.finish(
                    t,
                    format!("the TrainJob cannot be planned: {e}"),
                    Value::Null,
                    vec![],
                    true,
                );
                steps.skip_rest("the training step failed");
                return (admitted_at.elapsed(), None);
            }
        };
        // JobSet's failurePolicy: the deleted pod fails the run, which starts again once.
        train_plan.max_restarts = train_plan.max_restarts.max(1);
        let rank0 = train_plan
            .pods()
            .next()
            .map(|p| p.name.clone())
            .unwrap_or_default();
        let victim = train_plan
            .pods()
            .nth(spec.pod_deletion.pod_index as usize)
            .map(|p| p.name.clone())
            .unwrap_or_default();
        let mut log = TrainingLog::default();
        let mut attempt = 1u32;
        let corrupt = spec.pod_deletion.corrupt_newest_checkpoint;
        let summary = run_plan(&train_plan, &stop, |event, now| match event {
            RunEvent::Log(l) if l.pod == rank0 => {
                if let Some((step, loss)) = parse_step(&l.line) {
                    log.points.push((now, step, loss, attempt));
                } else if let Some((name, step, bytes, ms)) = parse_checkpoint(&l.line) {
                    log.checkpoints.push((now, step, bytes, ms, name));
                    if log.kill_at.is_none()
                        && log.checkpoints.len() as u32 >= spec.pod_deletion.after_checkpoints
                    {
                        log.killed_processes = kill_pod(&victim);
                        log.kill_at = Some(now);
                        if corrupt {
                            log.corrupted = corrupt_newest(store.as_ref());
                        }
                    }
                } else if let Some((name, step)) = parse_resumed(&l.line) {
                    log.resumed = Some((now, step, name));
                } else if let Some(w) = l.line.strip_prefix("warning: ") {
                    log.warnings.push(w.to_string());
                } else if l.line.starts_with("error") {
                    log.other_errors.push(l.line.clone());
                }
            }
            RunEvent::Restarting { .. } => {
                attempt = 2;
                log.restart_at = Some(now);
            }
            _ => {}
        })
        .await;
        drop(train_plan);
        let sps_per_step = spec.training.samples_per_step as f64;
        // Throughput per half-second bucket of each attempt.
        let mut points = Vec::new();
        let mut prev: Option<(f64, u64, u32)> = None;
        for &(t, step, loss, a) in &log.points {
            let mut sps = 0.0;
            match prev {
                Some((pt, ps, pa)) if pa == a && t - pt >= 0.5 => {
                    sps = (step - ps) as f64 * sps_per_step / (t - pt);
                    prev = Some((t, step, a));
                }
                Some((_, _, pa)) if pa == a => {}
                _ => prev = Some((t, step, a)),
            }
            points.push(TrainPoint {
                t,
                step,
                loss,
                samples_per_second: sps,
                attempt: a,
            });
        }
        for (t, step, bytes, ms, name) in &log.checkpoints {
            report.events.push(TrainEvent {
                t: *t,
                kind: "checkpoint".into(),
                label: format!("{name} (step {step}, {bytes} bytes, {ms:.1} ms)"),
            });
        }
        if let Some(k) = log.kill_at {
            report.events.push(TrainEvent {
                t: k,
                kind: "deletion".into(),
                label: format!(
                    "pod {victim} deleted (SIGKILL to {} processes)",
                    log.killed_processes
                ),
            });
        }
        if let Some((t, step, name)) = &log.resumed {
            report.events.push(TrainEvent {
                t: *t,
                kind: "resumed".into(),
                label: format!("resumed from {name} at step {step}"),
            });
        }
        report.training = points.clone();
        let first: Vec<&TrainPoint> = points.iter().filter(|p| p.attempt == 1).collect();
        let second: Vec<&TrainPoint> = points.iter().filter(|p| p.attempt == 2).collect();
        let rate = |ps: &[&TrainPoint]| -> f64 {
            match (ps.first(), ps.last()) {
                (Some(a), Some(b)) if b.t > a.t => {
                    (b.step - a.step) as f64 * sps_per_step / (b.t - a.t)
                }
                _ => 0.0,
            }
        };
        let sps1 = rate(&first);
        let sps2 = rate(&second);
        let sps = if second.len() >= 2 { sps2 } else { sps1 };
        let ckpt_bytes = log.checkpoints.last().map_or(0, |c| c.2);
        let ckpt_ms: Vec<f64> = log.checkpoints.iter().map(|c| c.3).collect();
        let mean_ms = if ckpt_ms.is_empty() {
            0.0
        } else {
            ckpt_ms.iter().sum::<f64>() / ckpt_ms.len() as f64
        };
        let complete = summary.status == kubetrain_client::JobStatus::Complete;
        let train_failed = log.points.is_empty() || log.checkpoints.is_empty();
        let measurements = json!({
            "windowSeconds": spec.training.window.0.as_secs_f64(),
            "steps": log.points.last().map_or(0, |p| p.1 + 1),
            "samplesPerStep": spec.training.samples_per_step,
            "samplesPerSecond": sps,
            "samplesPerSecondBeforeDeletion": sps1,
            "samplesPerSecondAfterRestore": sps2,
            "firstLoss": log.points.first().map(|p| p.2),
            "lastLoss": log.points.last().map(|p| p.2),
            "checkpoints": log.checkpoints.len(),
            "checkpointBytes": ckpt_bytes,
            "checkpointWriteMsMean": mean_ms,
            "checkpointLocation": location,
        });
        let checks: Vec<Check> = check_min(
            "spec.thresholds.minSamplesPerSecond",
            th.min_samples_per_second,
            sps,
            "samples/s",
        )
        .into_iter()
        .collect();
        let msg = if train_failed {
            format!(
                "the trainer wrote {} steps and {} checkpoints: {}{}",
                log.points.len(),
                log.checkpoints.len(),
                summary.message,
                log.other_errors
                    .last()
                    .map(|e| format!("; {e}"))
                    .unwrap_or_default()
            )
        } else {
            format!(
                "{} steps, loss {:.3e} → {:.3e}, {sps:.0} samples/s; {} checkpoints of {ckpt_bytes} bytes, {mean_ms:.1} ms each",
                log.points.last().map_or(0, |p| p.1 + 1),
                log.points.first().map_or(0.0, |p| p.2),
                log.points.last().map_or(0.0, |p| p.2),
                log.checkpoints.len()
            )
        };
        let train_ok = steps.finish(t, msg, measurements, checks, train_failed);

        // 5. Restore.
        let t5 = Instant::now();
        let kill_at = log.kill_at;
        let newest_before_kill = kill_at.and_then(|k| {
            log.checkpoints
                .iter()
                .filter(|c| c.0 <= k)
                .map(|c| c.1)
                .max()
        });
        let resumed_step = log.resumed.as_ref().map(|r| r.1);
        let first_after = second.first().map(|p| (p.t, p.step));
        let restore_seconds = match (kill_at, first_after) {
            (Some(k), Some((t, _))) => Some(t - k),
            _ => None,
        };
        let mut why = None;
        if kill_at.is_none() {
            why = Some(format!(
                "the trainer ended before checkpoint #{} was written, so no pod was deleted: lengthen spec.training.window or lower spec.podDeletion.afterCheckpoints",
                spec.pod_deletion.after_checkpoints
            ));
        } else if log.restart_at.is_none() {
            why = Some(format!(
                "the job did not restart after pod {victim} was deleted: {}",
                summary.message
            ));
        } else if resumed_step.is_none() {
            why = Some(format!(
                "training restarted from step 0, not from a checkpoint{}",
                log.warnings
                    .last()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            ));
        } else if resumed_step != newest_before_kill {
            why = Some(format!(
                "resumed from step {}, but the newest checkpoint written before the deletion holds step {}{}",
                resumed_step.unwrap_or(0),
                newest_before_kill.unwrap_or(0),
                log.warnings
                    .first()
                    .map(|w| format!(": {w}"))
                    .unwrap_or_default()
            ));
        } else if first_after.map(|f| f.1) != resumed_step {
            why = Some(format!(
                "the first step after the restart was {:?}, not the checkpoint's step {:?}",
                first_after.map(|f| f.1),
                resumed_step
            ));
        } else if !complete {
            why = Some(format!(
                "the restarted job did not complete: {}",
                summary.message
            ));
        }
        let measurements = json!({
            "deletedPod": victim,
            "killedProcesses": log.killed_processes,
            "deletedAtSeconds": kill_at,
            "newestCheckpointStepBeforeDeletion": newest_before_kill,
            "resumed_from_step": resumed_step,
            "resumedFrom": log.resumed.as_ref().map(|r| r.2.clone()),
            "firstStepAfterRestart": first_after.map(|f| f.1),
            "restoreSeconds": restore_seconds,
            "skippedCheckpoints": log.warnings,
            "corruptedForTest": log.corrupted,
            "jobStatus": summary.status.to_string(),
            "restarts": summary.restarts,
        });
        let checks: Vec<Check> = restore_seconds
            .and_then(|r| {
                check_max(
                    "spec.thresholds.maxRestoreTime",
                    th.max_restore_time.map(|d| d.0.as_secs_f64()),
                    r,
                    "s",
                )
            })
            .into_iter()
            .collect();
        let msg = match &why {
            Some(w) => w.clone(),
            None => format!(
                "deleted pod {victim} after checkpoint step {}; restarted and resumed_from_step {} (not 0) in {:.1}s",
                newest_before_kill.unwrap_or(0),
                resumed_step.unwrap_or(0),
                restore_seconds.unwrap_or(0.0)
            ),
        };
        let restore_ok = steps.finish(t5, msg, measurements, checks, why.is_some());
        if !(train_ok && restore_ok) {
            // The labels and the cost are still worth having: continue.
        }
        let held = admitted_at.elapsed();
        let lost = match (kill_at, newest_before_kill, restore_seconds) {
            (Some(k), Some(step), Some(r)) => {
                let ck_t = log
                    .checkpoints
                    .iter()
                    .find(|c| c.1 == step)
                    .map_or(k, |c| c.0);
                (k - ck_t) + r
            }
            _ => 0.0,
        };
        let accepted = log
            .points
            .last()
            .map_or(0, |p| p.1 + 1)
            .saturating_mul(spec.training.samples_per_step);
        (
            held,
            Some((
                Usage {
                    nodes: plan.num_nodes(),
                    held_seconds: held.as_secs_f64(),
                    lost_seconds: lost,
                    accepted_samples: accepted,
                },
                busbw,
                mbps,
                wait,
            )),
        )
    };
    let (_, usage) = ticket.hold_while(body).await;
    drop(ticket);
    if stop.stopped() {
        report.interrupted = true;
        steps.skip_rest("interrupted (Ctrl-C or SIGTERM): every pod was stopped");
        return finish(report, steps.done, run_started);
    }
    let Some((usage, busbw, mbps, wait)) = usage else {
        return finish(report, steps.done, run_started);
    };

    labels_and_cost(
        plan,
        &opts.out_dir,
        "local",
        &mut steps,
        &mut report,
        &usage,
        busbw,
        mbps,
        wait,
    );
    finish(report, steps.done, run_started)
}

/// Steps 6 and 7, the same in both modes: the labels (written to `labels.txt` in `out_dir`) and the
/// effective cost per unit against the baseline (`default_queue` labels a plan without `spec.queue.name`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn labels_and_cost(
    plan: &Plan,
    out_dir: &Path,
    default_queue: &str,
    steps: &mut Steps<'_>,
    report: &mut Report,
    usage: &Usage,
    busbw: f64,
    mbps: f64,
    wait: f64,
) {
    let spec = &plan.spec;
    let th = &spec.thresholds;
    // 7 (computed first: the labels carry it). 6. Labels.
    let t6 = Instant::now();
    let breakdown = cost::compute(&spec.cost, &spec.baseline, usage);
    let mut labels = spec.labels.clone();
    let fmt = |v: f64| {
        if v.is_finite() {
            format!("{v:.4}")
        } else {
            "inf".into()
        }
    };
    let derived = [
        ("kubetrain.io/acceptance-plan", plan.metadata.name.clone()),
        (
            "kubetrain.io/gpu-count",
            usage
                .nodes
                .saturating_mul(u64::from(spec.cost.gpus_per_node))
                .to_string(),
        ),
        ("kubetrain.io/gpu-hours", fmt(breakdown.gpu_hours)),
        ("kubetrain.io/network-busbw-gbps", fmt(busbw)),
        (
            "kubetrain.io/network-backend",
            spec.benchmark.backend.clone(),
        ),
        ("kubetrain.io/storage-staging-mbps", fmt(mbps)),
        (
            "kubetrain.io/storage-checkpoint",
            if spec.checkpoint.location.starts_with("s3://") {
                "s3".into()
            } else {
                "directory".into()
            },
        ),
        (
            "kubetrain.io/queue",
            spec.queue
                .name
                .clone()
                .unwrap_or_else(|| default_queue.into()),
        ),
        ("kubetrain.io/queue-wait-seconds", fmt(wait)),
        (
            "kubetrain.io/cost-per-unit",
            fmt(breakdown.effective_cost_per_unit),
        ),
        (
            "kubetrain.io/cost-vs-baseline",
            fmt(breakdown.ratio_to_baseline),
        ),
        ("kubetrain.io/cost-currency", spec.cost.currency.clone()),
    ];
    for (k, v) in derived {
        labels.insert(k.into(), v);
    }
    let bad: Vec<String> = labels
        .iter()
        .filter(|(_, v)| {
            v.len() > 63
                || !v
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        })
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    let text: String = labels.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    let written = std::fs::write(out_dir.join("labels.txt"), text);
    report.labels = labels.clone();
    let msg = match (&written, bad.is_empty()) {
        (Err(e), _) => format!("writing labels.txt: {e}"),
        (Ok(()), false) => format!("not valid Kubernetes label values: {}", bad.join(", ")),
        (Ok(()), true) => format!(
            "{} labels (GPU, network, storage, queue, cost) in labels.txt",
            labels.len()
        ),
    };
    let failed = written.is_err() || !bad.is_empty();
    steps.finish(
        t6,
        msg,
        json!({"labels": labels, "file": "labels.txt"}),
        vec![],
        failed,
    );

    let t7 = Instant::now();
    let checks: Vec<Check> = check_max(
        "spec.thresholds.maxCostPerUnit",
        th.max_cost_per_unit,
        breakdown.effective_cost_per_unit,
        &breakdown.currency,
    )
    .into_iter()
    .collect();
    let msg = format!(
        "{:.4} {} per {} (total {:.4} over {:.3} units) vs {} at {:.4}: {:.2}× the baseline",
        breakdown.effective_cost_per_unit,
        breakdown.currency,
        breakdown.unit,
        breakdown.total,
        breakdown.accepted_units,
        breakdown.baseline_name,
        breakdown.baseline_per_unit,
        breakdown.ratio_to_baseline
    );
    let measurements = json!({"usage": usage, "breakdown": breakdown, "formula": "(compute + network + storage + support + idle + failed_runs + operations) / accepted_workload_units"});
    steps.finish(t7, msg, measurements, checks, false);
    report.cost = Some(breakdown);
}

pub(crate) fn finish(mut report: Report, steps: Vec<StepReport>, started: Instant) -> Report {
    report.passed = steps.len() == STEPS.len() && steps.iter().all(|s| s.verdict == Verdict::Pass);
    report.steps = steps;
    report.seconds = started.elapsed().as_secs_f64();
    report.labels.insert(
        "kubetrain.io/acceptance-result".into(),
        if report.passed {
            "passed".into()
        } else {
            "failed".into()
        },
    );
    report
}

/// `1.5s`-style duration for messages.
pub fn fmt_duration(d: Duration) -> String {
    format_duration(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_locations_stay_inside_the_run_directory() {
        let run = Path::new("/r/20260101T000000Z-1");
        assert_eq!(
            checkpoint_location("a/../ckpt", run).unwrap(),
            "/r/20260101T000000Z-1/ckpt"
        );
        assert!(checkpoint_location("../../home/me/ckpt", run).is_err());
        assert_eq!(
            checkpoint_location("/data/ckpt", run).unwrap(),
            "/data/ckpt"
        );
        assert_eq!(checkpoint_location("s3://b/p", run).unwrap(), "s3://b/p");
    }

    #[test]
    fn trainer_lines_parse() {
        assert_eq!(parse_step("step   12  loss 0.031250"), Some((12, 0.03125)));
        assert_eq!(
            parse_checkpoint(
                "checkpoint: wrote ckpt-0000000050.ktckpt (step 50, 812 bytes, 1.3 ms) to /x"
            ),
            Some(("ckpt-0000000050.ktckpt".into(), 50, 812, 1.3))
        );
        assert_eq!(
            parse_resumed("resumed from checkpoint ckpt-0000000050.ktckpt at step 50 (loss 0.1)"),
            Some(("ckpt-0000000050.ktckpt".into(), 50))
        );
        assert_eq!(parse_step("train-demo: 2 ranks"), None);
    }

    #[test]
    fn the_local_bench_job_runs_the_command_a_cluster_run_gives_its_bench_job() {
        let plan = Plan::from_yaml(&crate::plan::tests::MINIMAL.replace(
            "  training:",
            "  benchmark: {minBytes: 64, maxBytes: 1Ki, iters: 4, warmup: 1}\n  training:",
        ))
        .unwrap();
        let yaml = bench_job_yaml(&plan);
        let job: Value = serde_json::from_str(yaml.rsplit("\n---\n").next().unwrap()).unwrap();
        let command = &job["spec"]["trainer"]["command"];
        let expected = json!([
            "kubetrain",
            "collective",
            "bench",
            "--backend",
            "cpu",
            "--op",
            "all_reduce",
            "--min-bytes",
            "64",
            "--max-bytes",
            "1024",
            "--iters",
            "4",
            "--warmup",
            "1",
            "--output",
            "json"
        ]);
        assert_eq!(command, &expected);
        let (cluster_bench, _) = crate::cluster::trainjobs_of(&plan, "team");
        assert_eq!(command, &cluster_bench["spec"]["trainer"]["command"]);
        // Everything else is the plan's TrainJob as written.
        assert_eq!(job["spec"]["trainer"]["numNodes"], 2);
        assert_eq!(job["metadata"]["name"], "t");
    }
}
