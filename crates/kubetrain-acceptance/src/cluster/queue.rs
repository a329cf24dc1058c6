//! Step 1 on a cluster: the plan's runtimes applied, leftovers of an earlier run removed, the bench
//! TrainJob created in the plan's queue and its admission awaited on watches.

use std::time::Instant;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::FIELD_MANAGER;
use super::api::{Ctx, api_error, read_workload, resource};
use crate::error::StepFailure;
use crate::runner::Queued;
use crate::steps::Steps;

/// Applies one of `spec.runtimes` (server-side apply; a TrainingRuntime into the run's namespace).
async fn apply_runtime(ctx: &Ctx<'_>, runtime: &Value) -> Result<(), StepFailure> {
    let kind = runtime.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = runtime
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let (plural, namespaced) = match kind {
        "TrainingRuntime" => ("trainingruntimes", true),
        "ClusterTrainingRuntime" => ("clustertrainingruntimes", false),
        other => {
            return Err(StepFailure(format!(
                "spec.runtimes: {other:?} is not a TrainingRuntime or ClusterTrainingRuntime"
            )));
        }
    };
    let ar = resource("trainer.kubeflow.org", "v1alpha1", kind, plural);
    let mut doc = runtime.clone();
    let api: Api<DynamicObject> = if namespaced {
        doc["metadata"]["namespace"] = json!(ctx.ns);
        Api::namespaced_with(ctx.client.clone(), &ctx.ns, &ar)
    } else {
        Api::all_with(ctx.client.clone(), &ar)
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(name, &params, &Patch::Apply(&doc))
        .await
        .map(|_| ())
        .map_err(|e| StepFailure(format!("applying {kind} {name}: {}", api_error(&e))))
}

/// The runtimes, then a clean slate: the TrainJobs named `names` that an earlier run of this plan
/// left are deleted (a note each); one that is not the run's stops the step.
pub(super) async fn prepare(
    ctx: &Ctx<'_>,
    names: &[&str],
    steps: &mut Steps<'_>,
) -> Result<(), StepFailure> {
    for r in &ctx.plan.spec.runtimes {
        apply_runtime(ctx, r).await?;
    }
    let deadline = Instant::now() + ctx.plan.spec.cluster.step_timeout.0;
    for name in names {
        if ctx.remove_leftover(name, deadline).await? {
            let ns = &ctx.ns;
            steps.note(&format!(
                "note: deleted TrainJob {ns}/{name} left by an earlier run"
            ));
        }
    }
    Ok(())
}

/// The admission in words, from the Kueue Workload: `(admission, Admitted's reason and message)`.
fn admission(workload: &Result<Option<super::view::WorkloadView>, String>) -> (String, String) {
    match workload {
        Ok(Some(w)) => {
            let flavors = if w.flavors.is_empty() {
                "?".into()
            } else {
                w.flavors.join(", ")
            };
            let queue = w.cluster_queue.as_deref().unwrap_or("?");
            let note = w.admitted.as_ref();
            (
                format!("admitted by ClusterQueue {queue} (flavor {flavors})"),
                note.map(|(_, reason, message)| format!("{reason}: {message}"))
                    .unwrap_or_default(),
            )
        }
        Ok(None) => (
            "not queued by Kueue (no Workload): the operator started it at once".to_string(),
            String::new(),
        ),
        Err(e) => (
            format!("admitted; the Kueue Workload is unreadable: {e}"),
            String::new(),
        ),
    }
}

/// Creates the bench TrainJob `bench_job` (named `bench`) and waits for its admission.
pub(super) async fn submit(
    ctx: &Ctx<'_>,
    bench_job: &Value,
    bench: &str,
) -> Result<Queued, StepFailure> {
    let spec = &ctx.plan.spec;
    let timeout = spec
        .thresholds
        .max_queue_wait
        .map_or(spec.cluster.step_timeout.0, |d| d.0);
    let since = Instant::now();
    ctx.create(bench_job).await?;
    let admitted = ctx.wait_admitted(bench, since, since + timeout).await;
    let wait = since.elapsed().as_secs_f64();
    let workload = read_workload(&ctx.client, &ctx.ns, bench).await;
    let (admission, note) = admission(&workload);
    let measurements = json!({
        "queue": spec.queue.name.as_deref().unwrap_or("none"),
        "namespace": ctx.ns,
        "trainJob": bench,
        "waitSeconds": wait,
        "workload": workload.as_ref().ok().cloned().flatten(),
        "admission": if admitted.is_ok() { admission.clone() } else { "not admitted".into() },
        "admissionReason": note,
    });
    let ns = &ctx.ns;
    Ok(Queued {
        since,
        wait,
        admitted: admitted.map(|_| {
            let wait = crate::units::duration(wait);
            format!("TrainJob {ns}/{bench} {admission} after {wait}")
        }),
        measurements,
    })
}
