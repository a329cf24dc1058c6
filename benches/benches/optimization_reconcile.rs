//! The OptimizationJob controller's overhead per trial (issue 33): whole searches of [`TRIALS`] trials, at most
//! [`PARALLEL`] at a time, driven through `kubetrain_controller::optimization::reconcile` and kube's client
//! against the in-memory API server (`kubetrain_test_support::FakeApiServer`), as the controller's own tests
//! drive it. One iteration is one search from scratch: reconcile (the controller lists the trials and creates
//! the missing ones), mark every unfinished trial `Complete` with its `loss` in `status.trainerStatus.metrics`
//! (what the trainer's status report writes), and again, until the job is `Complete` with `status.result`.
//!
//! - `random_n20_p5`: the `random` algorithm.
//! - `tpe_n20_p5`: TPE (annotation `kubetrain.dev/search-algorithm: tpe`; 10 random start-up trials, then the
//!   Parzen estimators on the finished ones).
//!
//! The time per trial is the time per iteration divided by [`TRIALS`] (criterion's throughput line gives
//! trials per second). Before measuring, one search of each prints the API requests the controller made,
//! by verb, and per trial.
//!
//! `cargo bench -p kubetrain-benches --bench optimization_reconcile`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kubetrain_api::OptimizationJob;
use kubetrain_api::optimizationjob::annotations::{SEARCH_ALGORITHM, TRIAL_PARAMETERS};
use kubetrain_api::optimizationjob::trial_name;
use kubetrain_controller::optimization::{Context, OptimizationMetrics, reconcile};
use kubetrain_controller::{Leadership, Settings};
use kubetrain_test_support::{FakeApiServer, Stats};
use serde_json::{Value, json};

const V1: &str = "trainer.kubeflow.org/v1alpha1";
const NS: &str = "team-a";
/// `numTrials`.
const TRIALS: u32 = 20;
/// `parallelTrials`.
const PARALLEL: u32 = 5;

/// The OptimizationJob, as a user would apply it: `lr` log-uniform, `batch-size` categorical.
fn job_json(name: &str, tpe: bool) -> Value {
    let annotations = if tpe {
        json!({ SEARCH_ALGORITHM: "tpe" })
    } else {
        json!({})
    };
    json!({
        "apiVersion": V1, "kind": "OptimizationJob",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                     "annotations": annotations},
        "spec": {
            "objectives": [{"metric": "loss"}],
            "searchAlgorithm": {"random": {"seed": 7}},
            "parameters": [
                {"name": "lr", "searchSpace": {"logUniform": {"min": "1e-5", "max": "1e-1"}}},
                {"name": "batch-size", "searchSpace": {"categorical": {"choices": ["16", "32", "64"]}}}
            ],
            "numTrials": TRIALS, "parallelTrials": PARALLEL,
            "trainJobTemplate": {"spec": {"runtimeRef": {"name": "torch-distributed"}}}
        }
    })
}

/// The loss a trial reports: a bowl in `log10 lr` with its minimum at `lr = 1e-3`.
fn loss_of(trial: &Value) -> f64 {
    let parameters: serde_json::Map<String, Value> = trial["metadata"]["annotations"]
        [TRIAL_PARAMETERS]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let lr: f64 = parameters
        .get("lr")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    1.0 + (lr.log10() + 3.0).powi(2)
}

/// Marks `trial` `Complete` with its loss, if it exists and has not finished.
fn finish(server: &FakeApiServer, trial: &str) {
    let Some(mut object) = server.get(V1, "trainjobs", NS, trial) else {
        return;
    };
    if !object["status"].is_null() {
        return;
    }
    let loss = loss_of(&object);
    object["status"] = json!({
        "conditions": [{"type": "Complete", "status": "True", "reason": "Done", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "trainerStatus": {"metrics": [{"name": "loss", "value": loss.to_string()}],
                          "lastUpdatedTime": "2026-01-01T00:00:00Z"}
    });
    server.insert(object);
}

/// Whether the stored job has a condition `Complete` or `Failed` that is `True`.
fn finished(job: &Value) -> bool {
    job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
}

/// One search from scratch; panics unless it ends `Complete` with a result.
async fn search(server: &FakeApiServer, ctx: &Arc<Context>, name: &str, tpe: bool) {
    let trials: Vec<String> = (0..TRIALS).map(|i| trial_name(name, i)).collect();
    for trial in &trials {
        server.remove(V1, "trainjobs", NS, trial);
    }
    server.insert(job_json(name, tpe));
    // numTrials / parallelTrials rounds and the one that writes the result; the rest is headroom.
    for _ in 0..=2 * TRIALS {
        let stored = server
            .get(V1, "optimizationjobs", NS, name)
            .expect("job stored");
        if finished(&stored) {
            assert!(
                stored["status"]["result"]["trainJobName"].is_string(),
                "{stored}"
            );
            let made = trials
                .iter()
                .filter(|t| server.get(V1, "trainjobs", NS, t).is_some());
            assert_eq!(made.count(), TRIALS as usize, "trials of {name}");
            return;
        }
        let job: OptimizationJob = serde_json::from_value(stored).expect("typed job");
        reconcile(Arc::new(job), ctx.clone())
            .await
            .expect("reconciled");
        for trial in &trials {
            finish(server, trial);
        }
    }
    panic!("the search {name} did not finish");
}

/// Every request in `stats`, and a line by verb.
fn requests(stats: Stats) -> (u64, String) {
    let by_verb = [
        ("get", stats.gets),
        ("list", stats.lists),
        ("watch", stats.watches),
        ("apply", stats.applies),
        ("status patch", stats.status_patches),
        ("merge patch", stats.merge_patches),
        ("replace", stats.replaces),
        ("delete", stats.deletes),
        ("create", stats.creates),
        ("event", stats.events),
        ("discovery", stats.discovery),
        ("token review", stats.token_reviews),
        ("log", stats.logs),
    ];
    let total = by_verb.iter().map(|(_, n)| n).sum();
    let shown: Vec<String> = by_verb
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(verb, n)| format!("{verb} {n}"))
        .collect();
    (total, shown.join(", "))
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();

    let mut group = c.benchmark_group("optimization_reconcile");
    group.throughput(Throughput::Elements(u64::from(TRIALS)));
    for (id, tpe) in [("random", false), ("tpe", true)] {
        // A server of its own: its counters hold this algorithm's first search alone.
        let server = FakeApiServer::start();
        let ctx = Arc::new(Context::new(
            server.client(),
            Settings::default(),
            Leadership::always(),
            OptimizationMetrics::default(),
        ));
        let name = format!("{id}-sweep");
        rt.block_on(search(&server, &ctx, &name, tpe));
        let (total, by_verb) = requests(server.stats());
        println!(
            "optimization_reconcile/{id}: {total} API requests for {TRIALS} trials ({:.2} per trial): {by_verb}",
            total as f64 / f64::from(TRIALS)
        );
        group.bench_function(format!("{id}_n{TRIALS}_p{PARALLEL}"), |b| {
            b.iter(|| rt.block_on(search(&server, black_box(&ctx), &name, tpe)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
