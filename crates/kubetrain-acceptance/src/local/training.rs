//! Steps 4 and 5 in local mode: the production command trains with the checkpoint env; rank 0's lines
//! give the steps, the checkpoints and the resume. Once the planned checkpoints are written, every
//! process of the victim pod gets SIGKILL (a forced pod deletion), the job restarts once as JobSet's
//! `failurePolicy` would, and the trainer must resume from the newest checkpoint.

use std::path::Path;
use std::time::Instant;

use kubetrain_client::JobStatus;
use kubetrain_client::local::{JobPlan, RunEvent, RunSummary};
use kubetrain_collective::checkpoint::{self, CheckpointStore};
use serde_json::{Value, json};

use super::stop::{Stop, run_plan};
use crate::cost::BilledUsage;
use crate::error::StepFailure;
use crate::plan::Plan;
use crate::report::{TrainEvent, TrainPoint};
use crate::runner::{Restored, Trained, mean};
use crate::trainjob::{trainer_mut, training_env};

/// The training job, ready to run.
pub(super) struct TrainingJob {
    plan: JobPlan,
    store: Box<dyn CheckpointStore>,
    location: String,
    /// The pod whose lines are read (node rank 0).
    rank0: String,
    /// The pod to delete (`spec.podDeletion.podIndex`).
    victim: String,
}

/// What the training run observed.
#[derive(Default)]
pub(super) struct TrainingLog {
    /// (t, step, loss, attempt).
    points: Vec<(f64, u64, f64, u32)>,
    /// (t, step, bytes, write ms, name).
    checkpoints: Vec<(f64, u64, u64, f64, String)>,
    warnings: Vec<String>,
    /// (t, step, checkpoint name).
    resumed: Option<(f64, u64, String)>,
    kill_at: Option<f64>,
    killed_processes: usize,
    restart_at: Option<f64>,
    corrupted: Option<String>,
    other_errors: Vec<String>,
}

/// The training job's run: what it printed and how it ended.
pub(super) struct TrainingRun {
    log: TrainingLog,
    summary: RunSummary,
    location: String,
    victim: String,
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

/// Opens the checkpoint location, which must hold no checkpoint: a fresh run starts from step 0. A
/// relative location is inside this run's new directory, so empty; checkpoints anywhere else are the
/// user's: the run refuses to start and deletes nothing.
fn open_empty_store(location: &str) -> Result<Box<dyn CheckpointStore>, StepFailure> {
    let settings = crate::s3store::S3Settings::from_env();
    let store = crate::s3store::open(location, &settings)
        .map_err(|e| StepFailure(format!("checkpoint location {location}: {e}")))?;
    let names = store.list().map_err(|e| {
        StepFailure(format!(
            "checkpoint location {location} cannot be listed: {e}"
        ))
    })?;
    let old: Vec<String> = names
        .into_iter()
        .filter(|n| checkpoint::step_of(n).is_some())
        .collect();
    if let Some(first) = old.first() {
        return Err(StepFailure(format!(
            "checkpoint location {location} already holds {} checkpoints (e.g. {first}): the test must start from step 0, so point spec.checkpoint.location at an empty location",
            old.len()
        )));
    }
    Ok(store)
}

/// The training TrainJob, planned by `prepare` (the production command with the checkpoint env), and
/// its empty checkpoint location.
pub(super) fn prepare(
    plan: &Plan,
    out_dir: &Path,
    prepare: impl FnOnce(&str) -> Result<JobPlan, StepFailure>,
) -> Result<TrainingJob, StepFailure> {
    let spec = &plan.spec;
    let location = checkpoint_location(&spec.checkpoint.location, out_dir)
        .map_err(|e| StepFailure(format!("spec.checkpoint.location: {e}")))?;
    let store = open_empty_store(&location)?;
    let yaml = super::job_yaml(plan, |job| {
        let env = trainer_mut(job).entry("env").or_insert_with(|| json!([]));
        if let Some(list) = env.as_array_mut() {
            list.extend(training_env(plan, &location));
        }
    });
    let mut job = prepare(&yaml)?;
    // JobSet's failurePolicy: the deleted pod fails the run, which starts again once.
    job.max_restarts = job.max_restarts.max(1);
    let pod = |i: usize| {
        job.pods()
            .nth(i)
            .map(|p| p.name.clone())
            .unwrap_or_default()
    };
    let (rank0, victim) = (pod(0), pod(spec.pod_deletion.pod_index as usize));
    Ok(TrainingJob {
        plan: job,
        store,
        location,
        rank0,
        victim,
    })
}

/// `step N loss L`.
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

/// SIGKILLs every process of `pod` (what a forced pod deletion does to its containers).
fn kill_pod(pod: &str) -> usize {
    let needle = format!("/{pod}/");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let me = std::process::id() as i32;
    let pids = entries.flatten().filter_map(|entry| {
        let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
        (pid != me).then_some(pid)
    });
    let marked = pids.filter(|pid| {
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            return false;
        };
        env.split(|b| *b == 0).any(|var| {
            std::str::from_utf8(var).is_ok_and(|v| {
                v.strip_prefix("KUBETRAIN_LOCAL_CONTAINER=")
                    .is_some_and(|m| m.contains(&needle))
            })
        })
    });
    marked
        .filter(|pid| {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .is_ok()
        })
        .count()
}

/// Damages the newest checkpoint in a store (the fault-injection knob of the plan).
fn corrupt_newest(store: &dyn CheckpointStore) -> Option<String> {
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

impl TrainingLog {
    /// Reads one line of rank 0 at `now`; deletes the victim once `after` checkpoints are written.
    fn line(&mut self, line: &str, now: f64, attempt: u32, job: &TrainingJob, plan: &Plan) {
        if let Some((step, loss)) = parse_step(line) {
            self.points.push((now, step, loss, attempt));
        } else if let Some((name, step, bytes, ms)) = parse_checkpoint(line) {
            self.checkpoints.push((now, step, bytes, ms, name));
            let after = plan.spec.pod_deletion.after_checkpoints;
            if self.kill_at.is_none() && self.checkpoints.len() as u32 >= after {
                self.killed_processes = kill_pod(&job.victim);
                self.kill_at = Some(now);
                if plan.spec.pod_deletion.corrupt_newest_checkpoint {
                    self.corrupted = corrupt_newest(job.store.as_ref());
                }
            }
        } else if let Some((name, step)) = parse_resumed(line) {
            self.resumed = Some((now, step, name));
        } else if let Some(w) = line.strip_prefix("warning: ") {
            self.warnings.push(w.to_string());
        } else if line.starts_with("error") {
            self.other_errors.push(line.to_string());
        }
    }
}

/// Runs the training job to its end (both attempts).
pub(super) async fn run(plan: &Plan, job: TrainingJob, stop: &Stop) -> TrainingRun {
    let mut log = TrainingLog::default();
    let mut attempt = 1u32;
    let summary = run_plan(&job.plan, stop, |event, now| match event {
        RunEvent::Log(l) if l.pod == job.rank0 => log.line(&l.line, now, attempt, &job, plan),
        RunEvent::Restarting { .. } => {
            attempt = 2;
            log.restart_at = Some(now);
        }
        _ => {}
    })
    .await;
    TrainingRun {
        log,
        summary,
        location: job.location,
        victim: job.victim,
    }
}

/// The training points with the throughput per half-second bucket of each attempt.
fn points(log: &TrainingLog, samples_per_step: f64) -> Vec<TrainPoint> {
    let mut points = Vec::new();
    let mut prev: Option<(f64, u64, u32)> = None;
    for &(t, step, loss, a) in &log.points {
        let mut sps = 0.0;
        match prev {
            Some((pt, ps, pa)) if pa == a && t - pt >= 0.5 => {
                sps = (step - ps) as f64 * samples_per_step / (t - pt);
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
    points
}

/// The checkpoints, the deletion and the resume on the training time axis.
fn events(log: &TrainingLog, victim: &str) -> Vec<TrainEvent> {
    let mut events: Vec<TrainEvent> = log
        .checkpoints
        .iter()
        .map(|(t, step, bytes, ms, name)| TrainEvent {
            t: *t,
            kind: "checkpoint".into(),
            label: format!(
                "{name} (step {step}, {}, {})",
                crate::units::bytes(*bytes),
                crate::units::duration(ms / 1000.0)
            ),
        })
        .collect();
    if let Some(k) = log.kill_at {
        events.push(TrainEvent {
            t: k,
            kind: "deletion".into(),
            label: format!(
                "pod {victim} deleted (SIGKILL to {} processes)",
                log.killed_processes
            ),
        });
    }
    if let Some((t, step, name)) = &log.resumed {
        events.push(TrainEvent {
            t: *t,
            kind: "resumed".into(),
            label: format!("resumed from {name} at step {step}"),
        });
    }
    events
}

/// Samples per second from the first to the last point of one attempt.
fn rate(points: &[&TrainPoint], samples_per_step: f64) -> f64 {
    match (points.first(), points.last()) {
        (Some(a), Some(b)) if b.t > a.t => {
            (b.step - a.step) as f64 * samples_per_step / (b.t - a.t)
        }
        _ => 0.0,
    }
}

/// Step 4's throughput (after the restore when it has two points, else before), message and
/// measurements; `failed` when no step or no checkpoint was seen.
fn training_result(
    plan: &Plan,
    run: &TrainingRun,
    points: &[TrainPoint],
) -> (f64, String, Value, bool) {
    let spec = &plan.spec;
    let (log, per_step) = (&run.log, spec.training.samples_per_step as f64);
    let first: Vec<&TrainPoint> = points.iter().filter(|p| p.attempt == 1).collect();
    let second: Vec<&TrainPoint> = points.iter().filter(|p| p.attempt == 2).collect();
    let (sps1, sps2) = (rate(&first, per_step), rate(&second, per_step));
    let sps = if second.len() >= 2 { sps2 } else { sps1 };
    let ckpt_bytes = log.checkpoints.last().map_or(0, |c| c.2);
    let ckpt_ms: Vec<f64> = log.checkpoints.iter().map(|c| c.3).collect();
    let mean_ms = mean(&ckpt_ms);
    let steps = log.points.last().map_or(0, |p| p.1 + 1);
    let (first_loss, last_loss) = (
        log.points.first().map(|p| p.2),
        log.points.last().map(|p| p.2),
    );
    let failed = log.points.is_empty() || log.checkpoints.is_empty();
    let measurements = json!({
        "windowSeconds": spec.training.window.0.as_secs_f64(),
        "steps": steps,
        "samplesPerStep": spec.training.samples_per_step,
        "samplesPerSecond": sps,
        "samplesPerSecondBeforeDeletion": sps1,
        "samplesPerSecondAfterRestore": sps2,
        "firstLoss": first_loss,
        "lastLoss": last_loss,
        "checkpoints": log.checkpoints.len(),
        "checkpointBytes": ckpt_bytes,
        "checkpointWriteMsMean": mean_ms,
        "checkpointLocation": run.location,
    });
    let message = if failed {
        let last_error = log.other_errors.last().map(|e| format!("; {e}"));
        format!(
            "the trainer wrote {} steps and {} checkpoints: {}{}",
            log.points.len(),
            log.checkpoints.len(),
            run.summary.message,
            last_error.unwrap_or_default()
        )
    } else {
        format!(
            "{steps} steps, loss {} → {}, {}; {} checkpoints of {}, {} each",
            crate::units::number(first_loss.unwrap_or(0.0)),
            crate::units::number(last_loss.unwrap_or(0.0)),
            crate::units::samples_per_second(sps),
            log.checkpoints.len(),
            crate::units::bytes(ckpt_bytes),
            crate::units::duration(mean_ms / 1000.0)
        )
    };
    (sps, message, measurements, failed)
}

/// The step of the newest checkpoint written before the deletion.
fn newest_before_kill(log: &TrainingLog) -> Option<u64> {
    let k = log.kill_at?;
    log.checkpoints
        .iter()
        .filter(|c| c.0 <= k)
        .map(|c| c.1)
        .max()
}

/// Why step 5 failed, in the order the run can go wrong; `None` when the restore is proven.
fn restore_failure(plan: &Plan, run: &TrainingRun, first_after: Option<u64>) -> Option<String> {
    let (log, victim, summary) = (&run.log, &run.victim, &run.summary);
    let resumed_step = log.resumed.as_ref().map(|r| r.1);
    let newest = newest_before_kill(log);
    if log.kill_at.is_none() {
        Some(format!(
            "the trainer ended before checkpoint #{} was written, so no pod was deleted: lengthen spec.training.window or lower spec.podDeletion.afterCheckpoints",
            plan.spec.pod_deletion.after_checkpoints
        ))
    } else if log.restart_at.is_none() {
        Some(format!(
            "the job did not restart after pod {victim} was deleted: {}",
            summary.message
        ))
    } else if resumed_step.is_none() {
        let warning = log.warnings.last().map(|w| format!(" ({w})"));
        Some(format!(
            "training restarted from step 0, not from a checkpoint{}",
            warning.unwrap_or_default()
        ))
    } else if resumed_step != newest {
        let warning = log.warnings.first().map(|w| format!(": {w}"));
        Some(format!(
            "resumed from step {}, but the newest checkpoint written before the deletion holds step {}{}",
            resumed_step.unwrap_or(0),
            newest.unwrap_or(0),
            warning.unwrap_or_default()
        ))
    } else if first_after != resumed_step {
        Some(format!(
            "the first step after the restart was {first_after:?}, not the checkpoint's step {resumed_step:?}"
        ))
    } else if summary.status != JobStatus::Complete {
        Some(format!(
            "the restarted job did not complete: {}",
            summary.message
        ))
    } else {
        None
    }
}

/// Step 5: the deletion, the restart and the resume.
fn restore_result(plan: &Plan, run: &TrainingRun, points: &[TrainPoint]) -> Restored {
    let log = &run.log;
    let first_after = points
        .iter()
        .find(|p| p.attempt == 2)
        .map(|p| (p.t, p.step));
    let seconds = match (log.kill_at, first_after) {
        (Some(k), Some((t, _))) => Some(t - k),
        _ => None,
    };
    let newest = newest_before_kill(log);
    let resumed_step = log.resumed.as_ref().map(|r| r.1);
    let measurements = json!({
        "deletedPod": run.victim,
        "killedProcesses": log.killed_processes,
        "deletedAtSeconds": log.kill_at,
        "newestCheckpointStepBeforeDeletion": newest,
        "resumed_from_step": resumed_step,
        "resumedFrom": log.resumed.as_ref().map(|r| r.2.clone()),
        "firstStepAfterRestart": first_after.map(|f| f.1),
        "restoreSeconds": seconds,
        "skippedCheckpoints": log.warnings,
        "corruptedForTest": log.corrupted,
        "jobStatus": run.summary.status.to_string(),
        "restarts": run.summary.restarts,
    });
    let message = format!(
        "deleted pod {} after checkpoint step {}; restarted and resumed_from_step {} (not 0) in {}",
        run.victim,
        newest.unwrap_or(0),
        resumed_step.unwrap_or(0),
        crate::units::duration(seconds.unwrap_or(0.0))
    );
    Restored {
        seconds,
        failure: restore_failure(plan, run, first_after.map(|f| f.1)),
        message,
        measurements,
    }
}

/// What the job held for the cost: *lost* is from the last checkpoint before the deletion to the
/// deletion plus the restore; the accepted samples count each step once.
fn usage(plan: &Plan, log: &TrainingLog, restore_seconds: Option<f64>, held: f64) -> BilledUsage {
    let lost = match (log.kill_at, newest_before_kill(log), restore_seconds) {
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
    let steps = log.points.last().map_or(0, |p| p.1 + 1);
    BilledUsage {
        nodes: plan.num_nodes(),
        held_seconds: held,
        lost_seconds: lost,
        accepted_samples: steps.saturating_mul(plan.spec.training.samples_per_step),
    }
}

/// Steps 4 and 5 from the run; `since` is when step 4 began, `admitted_at` when the queue admitted
/// the job.
pub(super) fn judge(
    plan: &Plan,
    run: TrainingRun,
    since: Instant,
    admitted_at: Instant,
) -> Trained {
    let points = points(&run.log, plan.spec.training.samples_per_step as f64);
    let (samples_per_second, message, measurements, failed) = training_result(plan, &run, &points);
    let restore = restore_result(plan, &run, &points);
    let usage = usage(
        plan,
        &run.log,
        restore.seconds,
        admitted_at.elapsed().as_secs_f64(),
    );
    Trained {
        since,
        events: events(&run.log, &run.victim),
        points,
        samples_per_second,
        failed,
        message,
        measurements,
        restore,
        usage,
    }
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
}
