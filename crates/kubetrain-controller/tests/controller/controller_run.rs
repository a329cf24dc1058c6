//! `kubetrain_controller::run` end to end against the in-memory API server: leader-gated writes across a
//! leadership change, graceful shutdown, and the start-up check for the TrainJob CRD.

use std::sync::Arc;
use std::time::Duration;

use kubetrain_controller::{ControllerMetrics, Error, Leadership, Settings};
use kubetrain_test_support::fixtures::trainjob;
use kubetrain_test_support::{FakeApiServer, api_status, insert_builtin_runtimes};

use crate::support::{sent, wait_for};

const JOBSETS: (&str, &str) = ("jobset.x-k8s.io/v1alpha2", "jobsets");

fn server_with_jobs(n: usize) -> FakeApiServer {
    let server = FakeApiServer::start();
    insert_builtin_runtimes(&server);
    for i in 0..n {
        let job = trainjob(&format!("job-{i}"))
            .namespace("team-a")
            .uid(&format!("uid-{i}"));
        server.insert(job.json());
    }
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_writes_nothing_until_it_leads() {
    let server = server_with_jobs(20);
    let (elect, leadership) = Leadership::channel();
    let metrics = Arc::new(ControllerMetrics::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let settings = Settings {
        leadership_poll: Duration::from_millis(20),
        // Only the leadership change may bring the follower back; not its periodic re-check.
        follower_requeue: Duration::from_secs(3600),
        ..Settings::default()
    };
    let controller = tokio::spawn(kubetrain_controller::run(
        server.client(),
        settings,
        leadership,
        metrics.clone(),
        async move {
            let _ = stopped.await;
        },
    ));

    // Every TrainJob is reconciled (read from the watch caches, computed) while following. The fake API
    // server's watches send no events and the follower re-checks hourly, so each TrainJob is reconciled
    // exactly once: twenty reconciles are the twenty TrainJobs.
    wait_for(
        "the follower's reconcile of every TrainJob",
        Duration::from_secs(120),
        || metrics.reconciles() >= 20,
    )
    .await;
    let stats = server.stats();
    assert_eq!(stats.applies, 0, "a follower applies nothing: {stats:?}");
    assert_eq!(
        stats.status_patches + stats.deletes + stats.events,
        0,
        "nor writes anything else: {stats:?}"
    );
    assert_eq!(server.count(JOBSETS.0, JOBSETS.1), 0);

    // ... and once elected, everything is applied at once.
    elect.send(true).expect("controller alive");
    wait_for("the new leader's applies", Duration::from_secs(60), || {
        server.count(JOBSETS.0, JOBSETS.1) == 20
    })
    .await;
    assert_eq!(server.count("v1", "configmaps"), 20, "snapshots");

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), controller)
        .await
        .expect("graceful shutdown")
        .expect("task")
        .expect("run");
}

#[tokio::test]
async fn start_up_fails_clearly_without_the_trainjob_crd() {
    // A cluster without the CRDs: the API server does not serve the group at all.
    let server = FakeApiServer::start();
    server.record_requests();
    server.intercept(|r| {
        (r.uri == "/apis/trainer.kubeflow.org/v1alpha1").then(|| {
            api_status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        })
    });
    let result = kubetrain_controller::run(
        server.client(),
        Settings::default(),
        Leadership::always(),
        Arc::new(ControllerMetrics::default()),
        std::future::pending(),
    )
    .await;
    let error = result.expect_err("no CRD");
    assert!(matches!(error, Error::Startup(_)), "{error}");
    assert!(
        error.to_string().contains("install the kubetrain CRDs"),
        "{error}"
    );
    // The discovery request is the only one: nothing is watched or written.
    assert_eq!(sent(&server), ["GET /apis/trainer.kubeflow.org/v1alpha1"]);
}
