//! Count-only status writes are paced ([`crate::Settings::status_counts_interval`]); conditions never wait.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kubetrain_api::{JobStatus, TrainJob, TrainJobStatus};
use kubetrain_test_support::FakeApiServer;
use serde_json::json;

use crate::controller::{Context, reconcile};
use crate::fixtures::*;
use crate::leadership::Leadership;

/// One reconcile of `job`, expecting exactly `calls`.
async fn reconcile_expecting(
    job: &TrainJob,
    ctx: &Arc<Context>,
    server: &FakeApiServer,
    calls: Vec<Call>,
) -> Action {
    prepare(server, &calls);
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        reconcile(Arc::new(job.clone()), ctx.clone()),
    )
    .await
    .expect("reconcile finished");
    verify(server, &calls);
    result.expect("reconciled")
}

/// The reads of a reconcile of `job` whose JobSet runs `active` Jobs (or finished, with `completed`).
fn reads(job: &TrainJob, active: i32, completed: bool) -> Vec<Call> {
    let terminal = completed.then(|| condition("Completed", "True", "AllJobsCompleted", ago(1)));
    vec![
        Call::get(jobset_path(job.name())).ok(jobset_json(job, false, terminal, active)),
        Call::get(configmap_path(&format!("{}-runtime-snapshot", job.name())))
            .ok(snapshot_json(job, "torch-distributed")),
    ]
}

fn with_counts(job: &TrainJob, active: i32) -> TrainJob {
    let mut job = job.clone();
    job.status = Some(TrainJobStatus {
        jobs_status: vec![JobStatus {
            name: "node".into(),
            active,
            ..Default::default()
        }],
        ..Default::default()
    });
    job
}

#[tokio::test(start_paused = true)]
async fn count_only_writes_wait_for_the_interval_and_conditions_go_at_once() {
    let job = trainjob("paced");
    let server = fake_server(&job);
    let ctx = paced_context(server.client(), Leadership::always());

    // The JobSet's counts moved: nothing written yet; looked at again when the 30 s end.
    let action = reconcile_expecting(&job, &ctx, &server, reads(&job, 1, false)).await;
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));

    // 20 s on, they moved again: still held, and the wait did not start over.
    tokio::time::advance(Duration::from_secs(20)).await;
    let action = reconcile_expecting(&job, &ctx, &server, reads(&job, 2, false)).await;
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));

    // 30 s after the first change: one write, with the counts of now.
    tokio::time::advance(Duration::from_secs(10)).await;
    let mut calls = reads(&job, 2, false);
    calls.push(
        Call::merge_status(status_path("paced")).check(|patch| {
            assert_eq!(patch, &json!({"status": {"jobsStatus": [
                {"name": "node", "active": 2, "ready": 0, "succeeded": 0, "failed": 0, "suspended": 0}]}}));
        }),
    );
    let action = reconcile_expecting(&job, &ctx, &server, calls).await;
    assert_eq!(action, Action::await_change());

    // The next count change waits afresh; the JobSet finishing right after is written at once, with its
    // counts: the held change never costs a write of its own.
    let written = with_counts(&job, 2);
    tokio::time::advance(Duration::from_secs(1)).await;
    let action = reconcile_expecting(&written, &ctx, &server, reads(&written, 1, false)).await;
    assert_eq!(action, Action::requeue(Duration::from_secs(30)));
    let mut calls = reads(&written, 0, true);
    calls.push(Call::merge_status(status_path("paced")).check(|patch| {
        let conditions = patch["status"]["conditions"]
            .as_array()
            .expect("conditions");
        assert!(
            conditions
                .iter()
                .any(|c| c["type"] == "Complete" && c["status"] == "True"),
            "{patch}"
        );
        assert_eq!(patch["status"]["jobsStatus"][0]["active"], 0);
    }));
    let action = reconcile_expecting(&written, &ctx, &server, calls).await;
    assert_eq!(action, Action::await_change());
}

#[tokio::test]
async fn with_no_interval_every_count_change_is_written_at_once() {
    let job = trainjob("eager");
    let server = fake_server(&job);
    let ctx = context(server.client(), Leadership::always());
    let mut calls = reads(&job, 1, false);
    calls.push(Call::merge_status(status_path("eager")));
    let action = reconcile_expecting(&job, &ctx, &server, calls).await;
    assert_eq!(action, Action::await_change());
}
