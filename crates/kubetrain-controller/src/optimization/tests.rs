//! The OptimizationJob reconcile against the in-memory API server: trials created up to `parallelTrials` and
//! `numTrials`, a restart that resumes without repeating an index, the best trial in `status.result`, failed
//! trials counted, early stopping, and a spec that cannot be searched.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::runtime::controller::Action;
use kubetrain_api::OptimizationJob;
use kubetrain_api::optimizationjob::optimization_conditions::{COMPLETE, CREATED, FAILED, RUNNING};
use kubetrain_test_support::FakeApiServer;
use serde_json::{Value, json};

use super::*;

const V1: &str = "trainer.kubeflow.org/v1alpha1";
const NS: &str = "team-a";

fn job_json(num: u32, parallel: u32, extra: Value) -> Value {
    let mut job = json!({
        "apiVersion": V1, "kind": "OptimizationJob",
        "metadata": {"name": "sweep", "namespace": NS, "uid": "uid-sweep"},
        "spec": {
            "objectives": [{"metric": "loss"}],
            "searchAlgorithm": {"random": {"seed": 7}},
            "parameters": [
                {"name": "lr", "searchSpace": {"logUniform": {"min": "1e-4", "max": "1e-1"}}},
                {"name": "batch-size", "searchSpace": {"categorical": {"choices": ["16", "32", "64"]}}}
            ],
            "numTrials": num, "parallelTrials": parallel,
            "trainJobTemplate": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"runtimeRef": {"name": "torch-distributed"}}
            }
        }
    });
    merge(&mut job, extra);
    job
}

fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p,
    }
}

fn context(server: &FakeApiServer) -> Arc<Context> {
    Arc::new(Context::new(
        server.client(),
        Settings::default(),
        Leadership::always(),
        OptimizationMetrics::default(),
    ))
}

fn stored_job(server: &FakeApiServer) -> Arc<OptimizationJob> {
    let value = server
        .get(V1, "optimizationjobs", NS, "sweep")
        .expect("job stored");
    Arc::new(serde_json::from_value(value).expect("typed job"))
}

fn trial(server: &FakeApiServer, index: u32) -> Option<Value> {
    server.get(V1, "trainjobs", NS, &format!("sweep-{index}"))
}

fn trial_count(server: &FakeApiServer) -> usize {
    server.count(V1, "trainjobs")
}

/// Finishes trial `index`: `Complete` (or `Failed`) with `loss` in its trainerStatus.
fn finish(server: &FakeApiServer, index: u32, condition: &str, loss: Option<f64>) {
    let mut object = trial(server, index).expect("trial exists");
    let metrics: Vec<Value> = loss
        .map(|l| json!({"name": "loss", "value": l.to_string()}))
        .into_iter()
        .collect();
    object["status"] = json!({
        "conditions": [{"type": condition, "status": "True", "reason": "Done", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "trainerStatus": {"metrics": metrics, "lastUpdatedTime": "2026-01-01T00:00:00Z"}
    });
    server.insert(object);
}

async fn reconcile_once(server: &FakeApiServer, ctx: &Arc<Context>) -> Action {
    reconcile(stored_job(server), ctx.clone())
        .await
        .expect("reconciled")
}

fn condition(server: &FakeApiServer, type_: &str) -> Option<(String, String)> {
    let job = server.get(V1, "optimizationjobs", NS, "sweep")?;
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

fn env_of(trial: &Value) -> Vec<(String, String)> {
    trial["spec"]["trainer"]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or_default().to_owned(),
                e["value"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[tokio::test]
async fn creates_at_most_parallel_trials_owned_and_labelled() {
    let server = FakeApiServer::start();
    server.insert(job_json(4, 2, json!({})));
    let ctx = context(&server);
    reconcile_once(&server, &ctx).await;
    assert_eq!(trial_count(&server), 2);
    // Reconciling again creates nothing while both run.
    reconcile_once(&server, &ctx).await;
    assert_eq!(trial_count(&server), 2);
    assert_eq!(ctx.metrics().created(), 2);
    assert_eq!(ctx.metrics().trials(NS, "sweep", "Pending"), 2);

    let first = trial(&server, 0).expect("sweep-0");
    assert_eq!(first["metadata"]["labels"]["team"], "a");
    assert_eq!(
        first["metadata"]["labels"]["trainer.kubeflow.org/optimization-job"],
        "sweep"
    );
    assert_eq!(
        first["metadata"]["labels"]["trainer.kubeflow.org/trial-index"],
        "0"
    );
    let owner = &first["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["kind"].as_str(),
            owner["uid"].as_str(),
            owner["controller"].as_bool()
        ),
        (Some("OptimizationJob"), Some("uid-sweep"), Some(true))
    );
    let env = env_of(&first);
    let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["KUBEFLOW_TRAINER_OPT_BATCH_SIZE", "KUBEFLOW_TRAINER_OPT_LR"]
    );
    let recorded: BTreeMap<String, String> = serde_json::from_str(
        first["metadata"]["annotations"]["trainer.kubeflow.org/trial-parameters"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(recorded["batch-size"], env[0].1);
    assert_eq!(recorded["lr"], env[1].1);
    let lr: f64 = recorded["lr"].parse().unwrap();
    assert!((1e-4..=1e-1).contains(&lr), "{lr}");
    assert_eq!(condition(&server, CREATED).unwrap().0, "True");
    assert_eq!(condition(&server, RUNNING).unwrap().0, "True");
}

#[tokio::test]
async fn stops_at_num_trials_and_the_result_is_the_best() {
    let server = FakeApiServer::start();
    server.insert(job_json(4, 2, json!({})));
    let ctx = context(&server);
    let losses = [0.9, 0.2, 0.5, 0.7];
    reconcile_once(&server, &ctx).await;
    for round in 0..2u32 {
        for index in [2 * round, 2 * round + 1] {
            finish(&server, index, "Complete", Some(losses[index as usize]));
        }
        reconcile_once(&server, &ctx).await;
    }
    assert_eq!(trial_count(&server), 4);
    let job = server.get(V1, "optimizationjobs", NS, "sweep").unwrap();
    assert_eq!(
        condition(&server, COMPLETE),
        Some(("True".into(), "AllTrialsFinished".into()))
    );
    assert_eq!(condition(&server, RUNNING).unwrap().0, "False");
    assert_eq!(job["status"]["result"]["trainJobName"], "sweep-1");
    let best = trial(&server, 1).unwrap();
    let params = &job["status"]["result"]["parameters"];
    assert_eq!(params[0]["name"], "lr");
    let env = env_of(&best);
    assert_eq!(params[0]["value"].as_str().unwrap(), env[1].1);
    assert_eq!(params[1]["name"], "batch-size");
    // Finished: further reconciles create and write nothing.
    let patches = server.stats().merge_patches;
    assert_eq!(reconcile_once(&server, &ctx).await, Action::await_change());
    assert_eq!(trial_count(&server), 4);
    assert_eq!(server.stats().merge_patches, patches);
    assert_eq!(ctx.metrics().trials(NS, "sweep", "Succeeded"), 4);
}

#[tokio::test]
async fn maximize_picks_the_largest() {
    let server = FakeApiServer::start();
    server.insert(job_json(
        2,
        2,
        json!({"spec": {"objectives": [{"metric": "loss", "direction": "Maximize"}]}}),
    ));
    let ctx = context(&server);
    reconcile_once(&server, &ctx).await;
    finish(&server, 0, "Complete", Some(0.3));
    finish(&server, 1, "Complete", Some(0.8));
    reconcile_once(&server, &ctx).await;
    let job = server.get(V1, "optimizationjobs", NS, "sweep").unwrap();
    assert_eq!(job["status"]["result"]["trainJobName"], "sweep-1");
}

#[tokio::test]
async fn a_restart_resumes_without_repeating_an_index() {
    let server = FakeApiServer::start();
    server.insert(job_json(5, 2, json!({})));
    reconcile_once(&server, &context(&server)).await;
    let before: Vec<Value> = (0..2).map(|i| trial(&server, i).unwrap()).collect();
    finish(&server, 0, "Complete", Some(0.4));
    // A new operator process: a fresh context, nothing remembered.
    let restarted = context(&server);
    reconcile_once(&server, &restarted).await;
    assert_eq!(trial_count(&server), 3);
    assert!(
        trial(&server, 2).is_some(),
        "the lowest missing index is next"
    );
    assert_eq!(
        env_of(&trial(&server, 1).unwrap()),
        env_of(&before[1]),
        "an existing trial is left as it is"
    );
    // A trial deleted by hand is not lost: its index is created again, with the same parameters (random
    // search is a function of the seed and the index).
    let deleted_env = env_of(&trial(&server, 1).unwrap());
    assert!(server.remove(V1, "trainjobs", NS, "sweep-1"));
    reconcile_once(&server, &context(&server)).await;
    assert_eq!(env_of(&trial(&server, 1).unwrap()), deleted_env);
    // Every index once, none past numTrials.
    for index in 2..5 {
        if trial(&server, index).is_some() {
            finish(&server, index, "Complete", Some(0.5));
        }
    }
    finish(&server, 1, "Complete", Some(0.6));
    for _ in 0..3 {
        reconcile_once(&server, &context(&server)).await;
        for index in 0..5 {
            if let Some(t) = trial(&server, index)
                && t["status"].is_null()
            {
                finish(&server, index, "Complete", Some(0.5));
            }
        }
    }
    reconcile_once(&server, &context(&server)).await;
    assert_eq!(trial_count(&server), 5);
    assert!(trial(&server, 5).is_none());
    assert_eq!(condition(&server, COMPLETE).unwrap().0, "True");
}

#[tokio::test]
async fn a_failed_trial_counts_and_the_search_goes_on() {
    let server = FakeApiServer::start();
    server.insert(job_json(3, 1, json!({})));
    let ctx = context(&server);
    reconcile_once(&server, &ctx).await;
    finish(&server, 0, "Failed", None);
    reconcile_once(&server, &ctx).await;
    assert_eq!(trial_count(&server), 2, "the failed trial frees its slot");
    finish(&server, 1, "Complete", Some(0.3));
    reconcile_once(&server, &ctx).await;
    finish(&server, 2, "Complete", Some(0.1));
    reconcile_once(&server, &ctx).await;
    assert_eq!(
        trial_count(&server),
        3,
        "the failed trial counts toward numTrials"
    );
    assert_eq!(ctx.metrics().trials(NS, "sweep", "Failed"), 1);
    let job = server.get(V1, "optimizationjobs", NS, "sweep").unwrap();
    assert_eq!(job["status"]["result"]["trainJobName"], "sweep-2");
    assert_eq!(condition(&server, COMPLETE).unwrap().0, "True");
}

#[tokio::test]
async fn no_objective_reported_fails_the_search() {
    let server = FakeApiServer::start();
    server.insert(job_json(1, 1, json!({})));
    let ctx = context(&server);
    reconcile_once(&server, &ctx).await;
    finish(&server, 0, "Complete", None);
    reconcile_once(&server, &ctx).await;
    assert_eq!(
        condition(&server, FAILED),
        Some(("True".into(), "NoObjectiveReported".into()))
    );
}

#[tokio::test]
async fn a_spec_that_cannot_be_searched_fails_with_the_field_path() {
    let server = FakeApiServer::start();
    server.insert(job_json(
        2,
        1,
        json!({"metadata": {"annotations": {"kubetrain.dev/search-algorithm": "bayes"}}}),
    ));
    let ctx = context(&server);
    reconcile_once(&server, &ctx).await;
    assert_eq!(trial_count(&server), 0);
    assert_eq!(
        condition(&server, FAILED),
        Some(("True".into(), "InvalidSpec".into()))
    );
    let job = server.get(V1, "optimizationjobs", NS, "sweep").unwrap();
    let message = job["status"]["conditions"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("metadata.annotations[kubetrain.dev/search-algorithm]"),
        "{message}"
    );
}

#[tokio::test]
async fn grid_and_tpe_run_through_the_same_loop() {
    let server = FakeApiServer::start();
    server.insert(job_json(
        10,
        10,
        json!({"spec": {
            "searchAlgorithm": {"grid": {}, "random": null},
            "parameters": [{"name": "opt", "searchSpace": {"categorical": {"choices": ["adam", "sgd"]}}}]
        }}),
    ));
    let ctx = context(&server);
    reconcile_once(&server, &ctx).await;
    assert_eq!(trial_count(&server), 2, "the grid has two points");
    let values: BTreeSet<String> = (0..2)
        .map(|i| env_of(&trial(&server, i).unwrap())[0].1.clone())
        .collect();
    assert_eq!(
        values,
        BTreeSet::from(["adam".to_owned(), "sgd".to_owned()])
    );

    let server = FakeApiServer::start();
    server.insert(job_json(
        3,
        1,
        json!({"metadata": {"annotations": {"kubetrain.dev/search-algorithm": "tpe"}}}),
    ));
    let ctx = context(&server);
    reconcile_once(&server, &ctx).await;
    assert_eq!(trial_count(&server), 1);
}

#[tokio::test]
async fn the_median_rule_stops_a_trial_worse_than_the_finished_ones() {
    let server = FakeApiServer::start();
    server.insert(job_json(
        7,
        7,
        json!({"metadata": {"annotations": {"kubetrain.dev/early-stopping": "median"}}}),
    ));
    let ctx = context(&server);
    reconcile_once(&server, &ctx).await;
    assert_eq!(trial_count(&server), 7);
    // Five finished trials whose history says 0.1 at step 0.
    for index in 0..5 {
        let mut object = trial(&server, index).unwrap();
        object["metadata"]["annotations"][HISTORY_ANNOTATION] = json!("[0.1]");
        server.insert(object);
        finish(&server, index, "Complete", Some(0.1));
    }
    // Trial 5 reports 0.05 (better), trial 6 reports 0.9 (worse than the median 0.1).
    for (index, loss) in [(5, 0.05), (6, 0.9)] {
        let mut object = trial(&server, index).unwrap();
        object["status"] = json!({"trainerStatus": {
            "metrics": [{"name": "loss", "value": loss.to_string()}],
            "lastUpdatedTime": "2026-01-01T00:00:10Z"}});
        server.insert(object);
    }
    reconcile_once(&server, &ctx).await;
    let stopped = trial(&server, 6).unwrap();
    assert_eq!(stopped["spec"]["suspend"], true);
    assert_eq!(
        stopped["metadata"]["annotations"][STOPPED_ANNOTATION],
        "median"
    );
    assert_eq!(
        stopped["metadata"]["annotations"][HISTORY_ANNOTATION],
        "[0.9]"
    );
    let kept = trial(&server, 5).unwrap();
    assert!(kept["spec"]["suspend"].is_null());
    assert_eq!(
        kept["metadata"]["annotations"][HISTORY_ANNOTATION],
        "[0.05]"
    );
    assert_eq!(ctx.metrics().trials(NS, "sweep", "Stopped"), 1);
    // The same report is not recorded twice.
    let patches = server.stats().merge_patches;
    reconcile_once(&server, &ctx).await;
    assert_eq!(server.stats().merge_patches, patches);
}

#[tokio::test]
async fn a_follower_writes_nothing() {
    let server = FakeApiServer::start();
    server.insert(job_json(2, 2, json!({})));
    let (_elect, leadership) = Leadership::channel();
    let ctx = Arc::new(Context::new(
        server.client(),
        Settings::default(),
        leadership,
        OptimizationMetrics::default(),
    ));
    let action = reconcile_once(&server, &ctx).await;
    assert_eq!(
        action,
        Action::requeue(Settings::default().follower_requeue)
    );
    assert_eq!(trial_count(&server), 0);
}

#[test]
fn the_rules_cover_what_the_controller_calls() {
    let rules = required_rules();
    let allows = |resource: &str, verb: &str| {
        rules.iter().any(|r| {
            r.resources.iter().flatten().any(|x| x == resource) && r.verbs.iter().any(|v| v == verb)
        })
    };
    for (resource, verb) in [
        ("optimizationjobs", "watch"),
        ("optimizationjobs/status", "patch"),
        ("trainjobs", "create"),
        ("trainjobs", "patch"),
        ("trainjobs", "list"),
    ] {
        assert!(allows(resource, verb), "{verb} {resource}");
    }
    assert!(!allows("trainjobs", "delete"));
}
