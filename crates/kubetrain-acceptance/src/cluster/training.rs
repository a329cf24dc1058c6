//! Steps 4 and 5 on a cluster: the production TrainJob's `trainerStatus` is watched until the planned
//! checkpoint is reported (phase A), a trainer pod is deleted through the API, the restarted trainer
//! must report `resumed_from_step` and a step past it (phase B), and the job ends (phase C).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};

use super::api::{Ctx, api_error, as_value, trainer_status};
use super::view::{finished, trainer_replicated_job};
use super::{COMPLETION_INDEX, JOB_INDEX, JOBSET_NAME, REPLICATED_JOB};
use crate::cost::BilledUsage;
use crate::error::StepFailure;
use crate::metrics::{TrainerMetrics, TrainerSample};
use crate::plan::format_duration;
use crate::report::{TrainEvent, TrainPoint};
use crate::runner::{Restored, Trained, mean};
use crate::steps::Steps;

/// What the training watch saw, in order.
#[derive(Default)]
pub(super) struct TrainLog {
    points: Vec<TrainPoint>,
    /// checkpoint step → (t, bytes, write ms), first report of each.
    checkpoints: BTreeMap<u64, (f64, Option<u64>, Option<f64>)>,
    last: TrainerSample,
    max_step_before: u64,
    last_updated: Option<String>,
}

impl TrainLog {
    pub(super) fn observe(&mut self, status: &Value, t: f64, attempt: u32) -> TrainerSample {
        let updated = status
            .get("lastUpdatedTime")
            .map(|v| v.to_string())
            .unwrap_or_default();
        let sample = TrainerSample::of(&TrainerMetrics::from_trainer_status(status));
        let same = self.last_updated.as_deref() == Some(updated.as_str()) && sample == self.last;
        if status.is_null() || same {
            return sample;
        }
        self.last_updated = Some(updated);
        self.last = sample;
        if let Some(step) = sample.step {
            self.points.push(TrainPoint {
                t,
                step,
                loss: sample.loss.unwrap_or(f64::NAN),
                samples_per_second: sample.samples_per_second.unwrap_or(0.0),
                attempt,
            });
            if attempt == 1 {
                self.max_step_before = self.max_step_before.max(step);
            }
        }
        if let Some(c) = sample.checkpoint_step {
            self.checkpoints.entry(c).or_insert((
                t,
                sample.checkpoint_bytes,
                sample.checkpoint_write_ms,
            ));
        }
        sample
    }
}

/// The training run as watched.
struct Watched {
    log: TrainLog,
    /// Seconds the training TrainJob waited for its admission.
    train_wait: f64,
    started: Instant,
    /// Why the restore is not proven (set by the first phase that went wrong).
    why: Option<String>,
    /// The deleted pod and when (seconds since training started).
    victim: String,
    kill_at: Option<f64>,
    /// When the restarted trainer stepped past `resumed_from_step`, and that step.
    resumed: Option<(f64, u64)>,
    /// How the job ended: complete, and the condition's message.
    ended: Option<(bool, String)>,
    /// The newest checkpoint step reported before the deletion.
    ckpt_before: Option<u64>,
}

impl Watched {
    fn now(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

/// Phase A: trains until the reported checkpoint step reaches `spec.podDeletion.afterCheckpoints` ×
/// `spec.checkpoint.everySteps`, then deletes the trainer pod.
async fn phase_a(ctx: &Ctx<'_>, job: &str, w: &mut Watched) {
    let spec = &ctx.plan.spec;
    let window = spec.training.window.0;
    let step_timeout = spec.cluster.step_timeout.0;
    let target =
        u64::from(spec.pod_deletion.after_checkpoints).saturating_mul(spec.checkpoint.every_steps);
    let started = w.started;
    let log = &mut w.log;
    let reached = ctx
        .watch_job(job, Instant::now() + window + step_timeout, |o| {
            let s = log.observe(&trainer_status(o), started.elapsed().as_secs_f64(), 1);
            if s.checkpoint_step.is_some_and(|c| c >= target) {
                return Some(None);
            }
            finished(&as_value(o)).map(Some)
        })
        .await;
    match reached {
        Ok(None) => delete_trainer_pod(ctx, job, w).await,
        Ok(Some(end)) => {
            w.why = Some(format!(
                "the trainer reported checkpoint_step {} and the job ended ({}) before checkpoint step {target} (spec.podDeletion.afterCheckpoints × spec.checkpoint.everySteps), so no pod was deleted: lengthen spec.training.window or lower spec.podDeletion.afterCheckpoints",
                w.log.last.checkpoint_step.unwrap_or(0),
                end.1
            ));
            w.ended = Some(end);
        }
        Err(to) => {
            w.why = Some(format!(
                "step 5 (restore): the trainer did not report checkpoint_step ≥ {target} within the window plus spec.cluster.stepTimeout ({}); last reported: step {:?}, checkpoint_step {:?}{}",
                format_duration(window + step_timeout),
                w.log.last.step,
                w.log.last.checkpoint_step,
                to.suffix("; ")
            ));
        }
    }
}

/// Deletes the trainer's pod `spec.podDeletion.podIndex` (job index 0) through the API.
async fn delete_trainer_pod(ctx: &Ctx<'_>, job: &str, w: &mut Watched) {
    let ns = &ctx.ns;
    let index = ctx.plan.spec.pod_deletion.pod_index;
    let trainer = match ctx.jobset(job).await {
        Ok(js) => trainer_replicated_job(&js),
        Err(e) => {
            w.why = Some(e);
            String::new()
        }
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let selector = format!(
        "{JOBSET_NAME}={job},{REPLICATED_JOB}={trainer},{JOB_INDEX}=0,{COMPLETION_INDEX}={index}"
    );
    let list = match pods.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list,
        Err(e) => {
            w.why = Some(format!("listing pods {selector}: {}", api_error(&e)));
            return;
        }
    };
    let Some(pod) = list.items.first() else {
        if w.why.is_none() {
            w.why = Some(format!(
                "no pod matches {selector} in {ns}: the trainer pod {index} was not found"
            ));
        }
        return;
    };
    w.victim = pod.name_any();
    match pods.delete(&w.victim, &DeleteParams::default()).await {
        Ok(_) => w.kill_at = Some(w.now()),
        Err(e) => w.why = Some(format!("deleting pod {ns}/{}: {}", w.victim, api_error(&e))),
    }
}

/// Phase B: the restarted trainer reports `resumed_from_step` and steps past it.
async fn phase_b(ctx: &Ctx<'_>, job: &str, w: &mut Watched) {
    let step_timeout = ctx.plan.spec.cluster.step_timeout.0;
    let max_before = w.log.max_step_before;
    let started = w.started;
    let log = &mut w.log;
    let resumed = ctx
        .watch_job(job, Instant::now() + step_timeout, |o| {
            let s = log.observe(&trainer_status(o), started.elapsed().as_secs_f64(), 2);
            if let Some((false, e)) = finished(&as_value(o)) {
                return Some(Err(format!("the TrainJob failed after the pod deletion: {e}")));
            }
            match (s.resumed_from_step, s.step) {
                (Some(r), Some(step)) if step > r => Some(Ok(r)),
                (None, Some(step)) if step < max_before => Some(Err(format!(
                    "training restarted from step {step} (below step {max_before} reached before the deletion) without reporting resumed_from_step: it did not resume from a checkpoint"
                ))),
                _ => None,
            }
        })
        .await;
    match resumed {
        Ok(Ok(r)) => w.resumed = Some((w.now(), r)),
        Ok(Err(e)) => w.why = Some(e),
        Err(to) => {
            w.why = Some(format!(
                "step 5 (restore): after pod {} was deleted the trainer did not report resumed_from_step and a step past it within spec.cluster.stepTimeout ({}); last reported: step {:?}, resumed_from_step {:?}{}",
                w.victim,
                format_duration(step_timeout),
                w.log.last.step,
                w.log.last.resumed_from_step,
                to.suffix("; ")
            ));
        }
    }
}

/// Phase C: the job ends (the window after the restart).
async fn phase_c(ctx: &Ctx<'_>, job: &str, w: &mut Watched) {
    let spec = &ctx.plan.spec;
    let limit: Duration = spec.training.window.0 + spec.cluster.step_timeout.0;
    let attempt = if w.kill_at.is_some() { 2 } else { 1 };
    let started = w.started;
    let log = &mut w.log;
    let ended = ctx
        .watch_job(job, Instant::now() + limit, |o| {
            log.observe(&trainer_status(o), started.elapsed().as_secs_f64(), attempt);
            finished(&as_value(o))
        })
        .await;
    w.ended = Some(ended.unwrap_or_else(|to| {
        let message = format!(
            "did not finish within the window plus spec.cluster.stepTimeout ({}){}",
            format_duration(limit),
            to.suffix("; ")
        );
        (false, message)
    }));
}

/// Creates the training TrainJob `train_job` (named `job`), waits for its admission and watches it
/// through the three phases.
async fn watch_training(
    ctx: &Ctx<'_>,
    train_job: &Value,
    job: &str,
    steps: &mut Steps<'_>,
) -> Result<Watched, StepFailure> {
    let spec = &ctx.plan.spec;
    let since = Instant::now();
    ctx.create(train_job).await?;
    let queue_timeout = spec
        .thresholds
        .max_queue_wait
        .map_or(spec.cluster.step_timeout.0, |d| d.0);
    let train_wait = ctx
        .wait_admitted(job, since, since + queue_timeout)
        .await
        .map_err(|e| StepFailure(format!("step 4 (training): {e}")))?;
    let mut w = Watched {
        log: TrainLog::default(),
        train_wait,
        started: Instant::now(),
        why: None,
        victim: String::new(),
        kill_at: None,
        resumed: None,
        ended: None,
        ckpt_before: None,
    };
    phase_a(ctx, job, &mut w).await;
    w.ckpt_before = w.log.checkpoints.keys().next_back().copied();
    if let Some(k) = w.kill_at {
        steps.note(&format!(
            "note: deleted pod {}/{} at checkpoint_step {} (t={k:.1}s)",
            ctx.ns,
            w.victim,
            w.log.last.checkpoint_step.unwrap_or(0)
        ));
        phase_b(ctx, job, &mut w).await;
    }
    if w.ended.is_none() {
        phase_c(ctx, job, &mut w).await;
    }
    Ok(w)
}

/// The checkpoints, the deletion and the resume on the training time axis.
fn events(w: &Watched) -> Vec<TrainEvent> {
    let mut events: Vec<TrainEvent> = w
        .log
        .checkpoints
        .iter()
        .map(|(step, (t, bytes, ms))| TrainEvent {
            t: *t,
            kind: "checkpoint".into(),
            label: format!(
                "checkpoint step {step}{}{}",
                bytes
                    .map(|b| format!(", {}", crate::units::bytes(b)))
                    .unwrap_or_default(),
                ms.map(|m| format!(", {}", crate::units::duration(m / 1000.0)))
                    .unwrap_or_default()
            ),
        })
        .collect();
    if let Some(k) = w.kill_at {
        events.push(TrainEvent {
            t: k,
            kind: "deletion".into(),
            label: format!("pod {} deleted through the API", w.victim),
        });
    }
    if let Some((t, r)) = w.resumed {
        events.push(TrainEvent {
            t,
            kind: "resumed".into(),
            label: format!("resumed from checkpoint step {r}"),
        });
    }
    events
}

/// Step 4's throughput (the last reported after the restore, else before), message and measurements;
/// `failed` when no step or no checkpoint was reported.
fn training_result(ctx: &Ctx<'_>, job: &str, w: &Watched) -> (f64, String, Value, bool) {
    let spec = &ctx.plan.spec;
    let log = &w.log;
    let sps_of = |attempt: u32| {
        log.points
            .iter()
            .rev()
            .find(|p| p.attempt == attempt && p.samples_per_second > 0.0)
            .map_or(0.0, |p| p.samples_per_second)
    };
    let (sps1, sps2) = (sps_of(1), sps_of(2));
    let sps = if sps2 > 0.0 { sps2 } else { sps1 };
    let final_step = log.points.last().map_or(0, |p| p.step);
    let ckpt_bytes = log
        .checkpoints
        .values()
        .rev()
        .find_map(|c| c.1)
        .unwrap_or(0);
    let ms: Vec<f64> = log.checkpoints.values().filter_map(|c| c.2).collect();
    let (first_loss, last_loss) = (
        log.points.first().map(|p| p.loss),
        log.points.last().map(|p| p.loss),
    );
    let failed = log.points.is_empty() || log.checkpoints.is_empty();
    let measurements = json!({
        "trainJob": job,
        "queueWaitSeconds": w.train_wait,
        "windowSeconds": spec.training.window.0.as_secs_f64(),
        "steps": final_step,
        "samplesPerStep": spec.training.samples_per_step,
        "samplesPerSecond": sps,
        "samplesPerSecondBeforeDeletion": sps1,
        "samplesPerSecondAfterRestore": sps2,
        "firstLoss": first_loss,
        "lastLoss": last_loss,
        "checkpoints": log.checkpoints.len(),
        "checkpointBytes": ckpt_bytes,
        "checkpointWriteMsMean": mean(&ms),
        "checkpointLocation": spec.checkpoint.location,
        "statusUpdates": log.points.len(),
    });
    let message = if failed {
        let end = w.ended.as_ref().map_or("", |e| e.1.as_str());
        format!(
            "the trainer of {}/{job} reported {} updates with a step and {} checkpoints through trainerStatus (it must report step and checkpoint_step){}",
            ctx.ns,
            log.points.len(),
            log.checkpoints.len(),
            if end.is_empty() {
                String::new()
            } else {
                format!("; the job: {end}")
            }
        )
    } else {
        format!(
            "{final_step} steps, loss {} → {}, {}; {} checkpoints reported, the last {}",
            crate::units::number(first_loss.unwrap_or(0.0)),
            crate::units::number(last_loss.unwrap_or(0.0)),
            crate::units::samples_per_second(sps),
            log.checkpoints.len(),
            crate::units::bytes(ckpt_bytes)
        )
    };
    (sps, message, measurements, failed)
}

/// Step 5: the deletion and the resume, judged.
fn restore_result(w: &Watched) -> Restored {
    let (complete, end_message) = w.ended.clone().unwrap_or((false, String::new()));
    let resumed_step = w.resumed.map(|r| r.1);
    let seconds = match (w.kill_at, w.resumed) {
        (Some(k), Some((r, _))) => Some(r - k),
        _ => None,
    };
    let mut failure = w.why.clone();
    if failure.is_none() {
        if resumed_step == Some(0) || resumed_step < w.ckpt_before {
            failure = Some(format!(
                "resumed_from_step {}, but the trainer had reported checkpoint step {} before the deletion",
                resumed_step.unwrap_or(0),
                w.ckpt_before.unwrap_or(0)
            ));
        } else if !complete {
            failure = Some(format!("the restarted job did not complete: {end_message}"));
        }
    }
    let message = format!(
        "deleted pod {} after checkpoint step {}; restarted and resumed_from_step {} (not 0), stepping again after {}",
        w.victim,
        w.ckpt_before.unwrap_or(0),
        resumed_step.unwrap_or(0),
        crate::units::duration(seconds.unwrap_or(0.0))
    );
    let measurements = json!({
        "deletedPod": w.victim,
        "deletedAtSeconds": w.kill_at,
        "newestCheckpointStepBeforeDeletion": w.ckpt_before,
        "resumed_from_step": resumed_step,
        "restoreSeconds": seconds,
        "jobStatus": if complete { "Complete" } else { "Failed" },
        "jobMessage": end_message,
    });
    Restored {
        seconds,
        failure,
        message,
        measurements,
    }
}

/// What the job held for the cost: *lost* is from the last checkpoint reported before the deletion to
/// the deletion plus the restore; the accepted samples count each step once.
fn usage(ctx: &Ctx<'_>, w: &Watched, restore_seconds: Option<f64>, held: f64) -> BilledUsage {
    let lost = match (w.kill_at, restore_seconds) {
        (Some(k), Some(r)) => {
            let ck_t = w
                .log
                .checkpoints
                .values()
                .map(|c| c.0)
                .filter(|c| *c <= k)
                .fold(0.0, f64::max);
            (k - ck_t) + r
        }
        _ => 0.0,
    };
    let final_step = w.log.points.last().map_or(0, |p| p.step);
    BilledUsage {
        nodes: ctx.plan.num_nodes(),
        held_seconds: held,
        lost_seconds: lost,
        accepted_samples: final_step.saturating_mul(ctx.plan.spec.training.samples_per_step),
    }
}

/// Steps 4 and 5: the training TrainJob `train_job` (named `job`) watched and judged; `admitted_at` is
/// when the bench TrainJob was admitted (the cost's *held* time starts there).
pub(super) async fn train(
    ctx: &Ctx<'_>,
    train_job: &Value,
    job: &str,
    admitted_at: Instant,
    steps: &mut Steps<'_>,
) -> Result<Trained, StepFailure> {
    let since = Instant::now();
    let w = watch_training(ctx, train_job, job, steps).await?;
    let held = admitted_at.elapsed().as_secs_f64();
    let (samples_per_second, message, measurements, failed) = training_result(ctx, job, &w);
    let restore = restore_result(&w);
    let usage = usage(ctx, &w, restore.seconds, held);
    Ok(Trained {
        since,
        points: w.log.points.clone(),
        events: events(&w),
        samples_per_second,
        failed,
        message,
        measurements,
        restore,
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_training_log_keeps_changes_and_first_checkpoint_reports() {
        let mut log = TrainLog::default();
        let status = |step: u64, ckpt: u64, at: &str| {
            json!({"lastUpdatedTime": at, "metrics": [
                {"name": "step", "value": step.to_string()},
                {"name": "loss", "value": "0.5"},
                {"name": "checkpoint_step", "value": ckpt.to_string()}]})
        };
        log.observe(&status(5, 0, "a"), 1.0, 1);
        log.observe(&status(5, 0, "a"), 1.5, 1);
        log.observe(&status(25, 20, "b"), 2.0, 1);
        log.observe(&status(26, 20, "c"), 3.0, 1);
        log.observe(&Value::Null, 3.5, 1);
        assert_eq!(log.points.len(), 3);
        assert_eq!(log.max_step_before, 26);
        assert_eq!(log.checkpoints.keys().copied().collect::<Vec<_>>(), [20]);
        assert_eq!(log.checkpoints[&20].0, 2.0);
    }
}
