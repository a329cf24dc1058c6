//! `kubetrain_controller::run` end to end against the in-memory API server: leader-gated writes across a
//! leadership change, graceful shutdown, and the start-up check for the TrainJob CRD.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use kube::client::Body;
use kubetrain_controller::mock::FakeApiServer;
use kubetrain_controller::{Error, Leadership, Metrics, Settings};
use serde_json::json;

const JOBSETS: (&str, &str) = ("jobset.x-k8s.io/v1alpha2", "jobsets");

fn server_with_jobs(n: usize) -> FakeApiServer {
    let server = FakeApiServer::start();
    for runtime in kubetrain_jobset::builtin::runtimes() {
        server.insert(serde_json::to_value(runtime).expect("JSON"));
    }
    for i in 0..n {
        server.insert(json!({
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": format!("job-{i}"), "namespace": "team-a", "uid": format!("uid-{i}")},
            "spec": {"runtimeRef": {"name": "torch-distributed"}},
        }));
    }
    server
}

async fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_writes_nothing_until_it_leads() {
    let server = server_with_jobs(20);
    let (elect, leadership) = Leadership::channel();
    let metrics = Arc::new(Metrics::default());
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
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("discovery request");
        assert_eq!(request.uri().path(), "/apis/trainer.kubeflow.org/v1alpha1");
        send.send_response(
            Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(Body::from(
                    serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "NotFound", "code": 404, "message": "the server could not find the requested resource"}))
                    .unwrap(),
                ))
                .unwrap(),
        );
    });
    let result = kubetrain_controller::run(
        client,
        Settings::default(),
        Leadership::always(),
        Arc::new(Metrics::default()),
        std::future::pending(),
    )
    .await;
    server.await.unwrap();
    let error = result.expect_err("no CRD");
    assert!(matches!(error, Error::Startup(_)), "{error}");
    assert!(
        error.to_string().contains("install the kubetrain CRDs"),
        "{error}"
    );
}
