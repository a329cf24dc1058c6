//! KEP-2899 and kubeflow/trainer#3779 as request sequences against the in-memory API server: a finished
//! TrainJob is deleted (foreground, uid precondition, `TTLExpired` event) once its TTL expired, also when the
//! TTL expired while no operator ran; the runtime's `runPolicy` is the default; and a Failed TrainJob whose
//! JobSet is gone gets no new JobSet.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kubetrain_api::TrainJob;
use serde_json::{Value, json};

use crate::controller::reconcile;
use crate::fixtures::*;
use crate::leadership::Leadership;

fn trainjob_path(name: &str) -> String {
    format!("/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{name}")
}

/// Reconciles `job` once against a server set up for `calls`; returns the action after checking that exactly
/// `calls` were sent, and the server.
async fn scenario(
    job: &TrainJob,
    calls: Vec<Call>,
) -> (Action, kubetrain_test_support::FakeApiServer) {
    let server = fake_server(job);
    prepare(&server, &calls);
    let ctx = context(server.client(), Leadership::always());
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        reconcile(Arc::new(job.clone()), ctx),
    )
    .await
    .expect("reconcile finished")
    .expect("reconciled");
    verify(&server, &calls);
    (result, server)
}

fn finished(name: &str, type_: &str, seconds_ago: i64, ttl: Option<i32>) -> TrainJob {
    let mut job = trainjob(name).conditions(vec![condition(type_, "True", "R", ago(seconds_ago))]);
    job.spec.ttl_seconds_after_finished = ttl;
    job
}

/// The snapshot of `torch-distributed` with `runPolicy` added.
fn snapshot_with_policy(job: &TrainJob, policy: &Value) -> Value {
    let mut runtime = cluster_runtime_json("torch-distributed");
    runtime["spec"]["runPolicy"] = policy.clone();
    let fetched: kubetrain_api::ClusterTrainingRuntime =
        serde_json::from_value(runtime).expect("runtime");
    let cm = crate::reconcile::snapshot_config_map(
        job,
        &crate::reconcile::FetchedRuntime::Cluster(Box::new(fetched)),
    )
    .expect("snapshot");
    serde_json::to_value(cm).expect("JSON")
}

fn ttl_event(ttl: i32) -> impl Fn(&Value) + Send + Sync + 'static {
    move |event: &Value| {
        assert_eq!(event["type"], "Normal");
        assert_eq!(event["reason"], "TTLExpired");
        assert_eq!(event["action"], "Deleting");
        assert_eq!(event["regarding"]["kind"], "TrainJob");
        let note = event["note"].as_str().unwrap_or_default();
        assert!(
            note.contains(&format!("ttlSecondsAfterFinished={ttl}")),
            "{note}"
        );
    }
}

fn foreground_with_uid(body: &Value) {
    assert_eq!(body["propagationPolicy"], "Foreground");
    assert_eq!(body["preconditions"]["uid"], UID);
}

#[tokio::test]
async fn an_expired_ttl_deletes_the_trainjob_in_the_foreground() {
    // Completed two minutes ago with a 30 s TTL: also what an operator restarted after the TTL finds.
    let job = finished("done", "Complete", 120, Some(30));
    let (action, server) = scenario(
        &job,
        vec![
            Call::get(jobset_path("done")).not_found(),
            Call::merge_status(status_path("done")).check(|patch| {
                assert!(patch["status"]["completionTime"].is_string(), "{patch}");
                assert!(patch["status"]["startTime"].is_string(), "{patch}");
            }),
            Call::post(events_path()).check(ttl_event(30)),
            Call::delete(trainjob_path("done")).check(foreground_with_uid),
        ],
    )
    .await;
    assert_eq!(action, Action::await_change());
    assert!(
        server
            .get("trainer.kubeflow.org/v1alpha1", "trainjobs", NS, "done")
            .is_none(),
        "the TrainJob is gone"
    );
}

#[tokio::test]
async fn a_ttl_still_running_requeues_for_its_expiry_and_an_edit_recomputes() {
    let job = finished("later", "Failed", 100, Some(3600));
    let (action, _) = scenario(
        &job,
        vec![
            Call::get(jobset_path("later")).not_found(),
            Call::merge_status(status_path("later"))
                .check(|patch| assert!(patch["status"]["completionTime"].is_string())),
        ],
    )
    .await;
    assert_eq!(action, Action::requeue(Duration::from_secs(3500)));

    // The user shortens the TTL of the finished job: counted from the same completion, it expired.
    let mut edited = job.clone();
    edited.spec.ttl_seconds_after_finished = Some(60);
    edited.status.as_mut().expect("status").completion_time = Some(ago(100));
    edited.status.as_mut().expect("status").start_time = Some(ago(60));
    let (action, _) = scenario(
        &edited,
        vec![
            Call::get(jobset_path("later")).not_found(),
            Call::post(events_path()).check(ttl_event(60)),
            Call::delete(trainjob_path("later")).check(foreground_with_uid),
        ],
    )
    .await;
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn the_runtime_run_policy_is_the_default_ttl() {
    let job = finished("defaulted", "Complete", 10, None);
    let (action, _) = scenario(
        &job,
        vec![
            Call::get(jobset_path("defaulted")).not_found(),
            Call::get(configmap_path("defaulted-runtime-snapshot")).ok(snapshot_with_policy(
                &job,
                &json!({"ttlSecondsAfterFinished": 0}),
            )),
            Call::merge_status(status_path("defaulted"))
                .check(|patch| assert!(patch["status"]["completionTime"].is_string())),
            Call::post(events_path()).check(ttl_event(0)),
            Call::delete(trainjob_path("defaulted")).check(foreground_with_uid),
        ],
    )
    .await;
    assert_eq!(action, Action::await_change());

    // The job's own TTL overrides the runtime's: no runtime read, and no deletion yet.
    let job = finished("own", "Complete", 10, Some(600));
    let (action, _) = scenario(
        &job,
        vec![
            Call::get(jobset_path("own")).not_found(),
            Call::merge_status(status_path("own"))
                .check(|patch| assert!(patch["status"]["completionTime"].is_string())),
        ],
    )
    .await;
    assert_eq!(action, Action::requeue(Duration::from_secs(590)));
}

/// kubeflow/trainer#3779: a Failed TrainJob whose JobSet was deleted (by hand, or by a JobSet TTL in an old
/// runtime) is left Failed: no runtime render, no apply, no new JobSet, no status change.
#[tokio::test]
async fn a_failed_trainjob_whose_jobset_is_gone_never_gets_a_new_one() {
    for reason_job in [
        finished("failed", "Failed", 30, None),
        trainjob("failed")
            .deadline(5, 600)
            .conditions(vec![condition(
                "Failed",
                "True",
                "DeadlineExceeded",
                ago(30),
            )]),
    ] {
        let (action, server) = scenario(
            &reason_job,
            vec![
                Call::get(jobset_path("failed")).not_found(),
                // Only the runtime's run policy is read (the job has no TTL of its own).
                Call::get(configmap_path("failed-runtime-snapshot"))
                    .ok(snapshot_json(&reason_job, "torch-distributed")),
            ],
        )
        .await;
        assert_eq!(action, Action::await_change());
        assert!(
            server
                .get("jobset.x-k8s.io/v1alpha2", "jobsets", NS, "failed")
                .is_none(),
            "no new JobSet"
        );
        let stored = server
            .get("trainer.kubeflow.org/v1alpha1", "trainjobs", NS, "failed")
            .expect("the TrainJob stays");
        assert_eq!(stored["status"]["conditions"][0]["type"], "Failed");
    }
}
