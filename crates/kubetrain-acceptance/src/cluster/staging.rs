//! Step 2 on a cluster: the JobSet's initializer Jobs are watched to their end; the bytes are what the
//! bench pods report they found in `/workspace` before they bench.

use std::collections::BTreeMap;
use std::time::Instant;

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::api::{Ctx, as_value, trainer_status, watch_until};
use super::view::{finished, job_condition, replicated_job_names};
use super::{JOBSET_NAME, REPLICATED_JOB};
use crate::error::StepFailure;
use crate::metrics::{self, TrainerMetrics};
use crate::plan::format_duration;
use crate::report::StagingPoint;
use crate::runner::Staged;

const INITIALIZERS: [&str; 2] = ["dataset-initializer", "model-initializer"];

/// The initializer replicated jobs of the bench TrainJob's JobSet; none fails the step.
async fn initializers(ctx: &Ctx<'_>, bench: &str) -> Result<Vec<&'static str>, StepFailure> {
    let jobset = ctx.jobset(bench).await?;
    let rjobs = replicated_job_names(&jobset);
    let inits: Vec<&str> = INITIALIZERS
        .into_iter()
        .filter(|i| rjobs.iter().any(|r| r == i))
        .collect();
    if inits.is_empty() {
        return Err(StepFailure(format!(
            "JobSet {}/{bench} has no dataset-initializer or model-initializer replicated job (it has {}), so nothing stages spec.dataset and spec.model: name a runtime with initializers (examples/acceptance/cluster.yaml carries one)",
            ctx.ns,
            rjobs.join(", ")
        )));
    }
    Ok(inits)
}

fn of_replicated_job<'j>(jobs: impl Iterator<Item = &'j Job>, rjob: &str) -> Vec<&'j Job> {
    jobs.filter(|j| j.labels().get(REPLICATED_JOB).map(String::as_str) == Some(rjob))
        .collect()
}

/// Whether every initializer's Jobs are complete (`Err` when one failed), noting when each completed.
fn all_complete(
    jobs: &BTreeMap<String, Job>,
    inits: &[&str],
    done_at: &mut BTreeMap<String, f64>,
    admitted_at: Instant,
) -> Result<bool, String> {
    let mut all = true;
    for init in inits {
        let of = of_replicated_job(jobs.values(), init);
        if of.is_empty() {
            all = false;
        }
        for j in of {
            if let Some(why) = job_condition(j, "Failed") {
                return Err(format!("Job {} failed: {why}", j.name_any()));
            }
            if job_condition(j, "Complete").is_some() {
                done_at
                    .entry(init.to_string())
                    .or_insert_with(|| admitted_at.elapsed().as_secs_f64());
            } else {
                all = false;
            }
        }
    }
    Ok(all)
}

/// Watches the initializer Jobs until all are complete; returns them and when each initializer
/// completed (seconds after `admitted_at`).
async fn await_initializers(
    ctx: &Ctx<'_>,
    bench: &str,
    inits: &[&str],
    since: Instant,
    admitted_at: Instant,
) -> Result<(BTreeMap<String, Job>, BTreeMap<String, f64>), StepFailure> {
    let step_timeout = ctx.plan.spec.cluster.step_timeout.0;
    let jobs_api: Api<Job> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let selector = watcher::Config::default().labels(&format!("{JOBSET_NAME}={bench}"));
    let mut done_at: BTreeMap<String, f64> = BTreeMap::new();
    let staged = watch_until(
        jobs_api,
        selector,
        since + step_timeout,
        |m| match all_complete(m, inits, &mut done_at, admitted_at) {
            Err(e) => Some(Err(e)),
            Ok(all) => all.then(|| Ok(m.clone())),
        },
    )
    .await;
    match staged {
        Ok(Ok(jobs)) => Ok((jobs, done_at)),
        Ok(Err(e)) => Err(StepFailure(format!("storage unreachable or refused: {e}"))),
        Err(to) => Err(StepFailure(format!(
            "step 2 (staging): the initializer Jobs of {}/{bench} did not finish within spec.cluster.stepTimeout ({}){}",
            ctx.ns,
            format_duration(step_timeout),
            to.suffix("; ")
        ))),
    }
}

/// The bench TrainJob's first trainerStatus (the bytes staged), or nothing once it ended without one.
async fn first_report(ctx: &Ctx<'_>, bench: &str, since: Instant) -> TrainerMetrics {
    let deadline = since + ctx.plan.spec.cluster.step_timeout.0;
    let status = ctx
        .watch_job(bench, deadline, |o| {
            let status = trainer_status(o);
            (!status.is_null() || finished(&as_value(o)).is_some()).then_some(status)
        })
        .await
        .unwrap_or(Value::Null);
    TrainerMetrics::from_trainer_status(&status)
}

/// The Jobs' `startTime` and `completionTime`, by Job name.
fn job_times(jobs: &BTreeMap<String, Job>, inits: &[&str]) -> BTreeMap<String, Value> {
    let mut times = BTreeMap::new();
    for init in inits {
        for j in of_replicated_job(jobs.values(), init) {
            let st = j.status.as_ref();
            let start = st
                .and_then(|s| s.start_time.as_ref())
                .map(|x| x.0.to_string());
            let end = st
                .and_then(|s| s.completion_time.as_ref())
                .map(|x| x.0.to_string());
            times.insert(
                j.name_any(),
                json!({"startTime": start, "completionTime": end}),
            );
        }
    }
    times
}

/// Step 2: the initializers' Jobs to their end, the bytes the bench pods report.
pub(super) async fn stage(
    ctx: &Ctx<'_>,
    bench: &str,
    admitted_at: Instant,
) -> Result<Staged, StepFailure> {
    let since = Instant::now();
    let inits = initializers(ctx, bench).await?;
    let (jobs, done_at) = await_initializers(ctx, bench, &inits, since, admitted_at).await?;
    let reported = first_report(ctx, bench, since).await;
    let points: Vec<(&str, Option<u64>, f64)> = inits
        .iter()
        .map(|init| {
            let (key, metric) = if *init == "dataset-initializer" {
                ("dataset", metrics::DATASET_BYTES)
            } else {
                ("model", metrics::MODEL_BYTES)
            };
            let seconds = done_at.get(*init).copied().unwrap_or(0.0).max(1e-3);
            (key, reported.u64(metric), seconds)
        })
        .collect();
    Ok(staged(&points, &inits, job_times(&jobs, &inits)))
}

/// The staging result of the sources `(name, bytes reported, seconds)`.
fn staged(
    points: &[(&str, Option<u64>, f64)],
    inits: &[&str],
    job_times: BTreeMap<String, Value>,
) -> Staged {
    let staging: Vec<StagingPoint> = points
        .iter()
        .map(|(name, bytes, seconds)| StagingPoint {
            name: (*name).into(),
            bytes: bytes.unwrap_or(0),
            files: 0,
            seconds: *seconds,
            mbps: bytes.unwrap_or(0) as f64 / 1e6 / seconds,
        })
        .collect();
    let known = points.iter().all(|p| p.1.is_some());
    let total_bytes: u64 = points.iter().filter_map(|p| p.1).sum();
    let total_secs = points.iter().map(|p| p.2).fold(0.0, f64::max);
    let mbps = known.then(|| total_bytes as f64 / 1e6 / total_secs);
    let measurements = json!({"sources": staging, "bytes": known.then_some(total_bytes), "seconds": total_secs, "mbps": mbps, "jobs": job_times});
    let inits = inits.join(" and ");
    let message = match mbps {
        Some(mbps) => {
            format!(
                "{} staged by {inits} in {} at {}",
                crate::units::bytes(total_bytes),
                crate::units::duration(total_secs),
                crate::units::mbps(mbps)
            )
        }
        None => {
            format!(
                "{inits} complete after {} (bytes not reported by the trainer)",
                crate::units::duration(total_secs)
            )
        }
    };
    Staged {
        points: staging,
        mbps,
        message,
        measurements,
        failed: false,
    }
}
