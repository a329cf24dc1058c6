//! The runtime controllers end to end against the in-memory API server: `run` removes the legacy
//! `trainer.kubeflow.org/resource-in-use` finalizer from ClusterTrainingRuntimes and TrainingRuntimes (other
//! finalizers kept) and stops on shutdown. The reconciles themselves (followers, conflicts) have their unit
//! tests next to them (`src/runtime_finalizer.rs`).

use std::time::Duration;

use kubetrain_controller::runtime_finalizer::RESOURCE_IN_USE_FINALIZER;
use kubetrain_controller::{Leadership, Settings};
use kubetrain_test_support::FakeApiServer;
use kubetrain_test_support::fixtures::{runtimes_with_legacy_finalizer, stored_finalizers};
use serde_json::{Value, json};

use crate::support::wait_for;

const OTHER: &str = "example.com/keep-me";

fn server() -> FakeApiServer {
    runtimes_with_legacy_finalizer(RESOURCE_IN_USE_FINALIZER, OTHER)
}

fn finalizers(server: &FakeApiServer, plural: &str, namespace: &str, name: &str) -> Value {
    stored_finalizers(server, plural, namespace, name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_removes_the_finalizer_from_every_runtime_and_stops_on_shutdown() {
    let server = server();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controllers = tokio::spawn(kubetrain_controller::runtime_finalizer::run(
        server.client(),
        Settings::default(),
        Leadership::always(),
        async move {
            let _ = stopped.await;
        },
    ));
    wait_for("the patches", Duration::from_secs(60), || {
        finalizers(&server, "clustertrainingruntimes", "", "legacy") == json!([OTHER])
            && finalizers(&server, "trainingruntimes", "team-a", "legacy") == Value::Null
    })
    .await;
    assert_eq!(server.stats().merge_patches, 2);
    stop.send(()).expect("controllers alive");
    tokio::time::timeout(Duration::from_secs(30), controllers)
        .await
        .expect("the controllers stop on shutdown")
        .expect("no panic");
}
