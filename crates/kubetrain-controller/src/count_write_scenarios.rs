//! Count-only status writes share the budget ([`crate::CountWriteBudget`]); conditions never wait, and a
//! waiting TrainJob's turn reconciles it again.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use kubetrain_api::TrainJob;
use kubetrain_test_support::FakeApiServer;
use serde_json::json;

use crate::controller::{Context, reconcile};
use crate::count_writes::{self, CountWriteBudget};
use crate::fixtures::*;
use crate::leadership::Leadership;
use crate::metrics::ControllerMetrics;

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

fn counts_patch(active: i32) -> serde_json::Value {
    json!({"status": {"jobsStatus": [
        {"name": "node", "active": active, "ready": 0, "succeeded": 0, "failed": 0, "suspended": 0}]}})
}

#[tokio::test(start_paused = true)]
async fn beyond_the_budget_counts_wait_for_their_turn_and_a_condition_carries_them() {
    let (first, second) = (trainjob("first"), trainjob("second"));
    let server = fake_server(&first);
    server.insert(serde_json::to_value(&second).expect("JSON"));
    let budget = CountWriteBudget {
        period: Duration::from_secs(5),
        burst: 1,
    };
    let (ctx, writes) = Context::new(
        server.client(),
        crate::Settings::default(),
        Leadership::always(),
        Arc::new(ControllerMetrics::default()),
    )
    .with_count_writes(budget);
    let ctx = Arc::new(ctx);

    // The bucket holds one write: the first TrainJob's counts go out.
    let mut calls = reads(&first, 1, false);
    calls.push(
        Call::merge_status(status_path("first")).check(|patch| assert_eq!(patch, &counts_patch(1))),
    );
    reconcile_expecting(&first, &ctx, &server, calls).await;

    // The second's wait: nothing written, and no requeue of its own (its turn triggers the reconcile).
    let action = reconcile_expecting(&second, &ctx, &server, reads(&second, 1, false)).await;
    assert_eq!(action, Action::await_change());

    // Its turn comes 5 s on, through the stream the controller reconciles on; it then writes the counts
    // of that moment.
    let (store, mut writer) = reflector::store::<TrainJob>();
    writer.apply_watcher_event(&watcher::Event::Apply(second.clone()));
    let mut turns = Box::pin(count_writes::turns(writes.clone(), store));
    let turn = tokio::time::timeout(Duration::from_secs(6), turns.next()).await;
    assert_eq!(
        turn.expect("a turn within one period"),
        Some(ObjectRef::new("second").within(NS))
    );
    let mut calls = reads(&second, 2, false);
    calls.push(
        Call::merge_status(status_path("second"))
            .check(|patch| assert_eq!(patch, &counts_patch(2))),
    );
    reconcile_expecting(&second, &ctx, &server, calls).await;

    // Out of tokens again: the first's next count change waits, and its JobSet finishing right after is
    // written at once with those counts, so the change never costs a write of its own.
    let action = reconcile_expecting(&first, &ctx, &server, reads(&first, 2, false)).await;
    assert_eq!(action, Action::await_change());
    let mut calls = reads(&first, 0, true);
    calls.push(Call::merge_status(status_path("first")).check(|patch| {
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
    reconcile_expecting(&first, &ctx, &server, calls).await;
    assert_eq!(writes.waiting(), 0);
}

#[tokio::test]
async fn a_context_reconciled_by_hand_writes_every_count_change() {
    let job = trainjob("eager");
    let server = fake_server(&job);
    let ctx = context(server.client(), Leadership::always());
    let mut calls = reads(&job, 1, false);
    calls.push(Call::merge_status(status_path("eager")));
    let action = reconcile_expecting(&job, &ctx, &server, calls).await;
    assert_eq!(action, Action::await_change());
}
