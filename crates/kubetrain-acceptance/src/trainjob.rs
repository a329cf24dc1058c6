//! What both modes change in the plan's TrainJob: the benchmark's command and the training env. One
//! definition, so that a local run measures what a cluster run does.

use serde_json::{Value, json};

use crate::plan::Plan;

/// The bench pods' command, from the plan's benchmark settings.
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

/// The env the training pods get from the plan: where, how often and how many checkpoints to keep, and how
/// long to train; `checkpoint_dir` is the plan's location as the pods see it.
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

/// The trainer of a TrainJob (`spec.trainer`), made an object when it is not one.
pub(crate) fn trainer_mut(job: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !job["spec"]["trainer"].is_object() {
        job["spec"]["trainer"] = json!({});
    }
    job["spec"]["trainer"]
        .as_object_mut()
        .expect("just made an object")
}
