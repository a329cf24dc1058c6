//! The runtime controllers against the in-memory API server: the legacy `trainer.kubeflow.org/resource-in-use`
//! finalizer is removed from ClusterTrainingRuntimes and TrainingRuntimes (other finalizers kept), followers
//! write nothing, a concurrent change is not overwritten, and `run` does it end to end.

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kubetrain_api::{ClusterTrainingRuntime, TrainingRuntime};
use kubetrain_controller::mock::FakeApiServer;
use kubetrain_controller::runtime_finalizer::{
    Context, RESOURCE_IN_USE_FINALIZER, error_policy, reconcile_cluster, reconcile_namespaced,
};
use kubetrain_controller::{Leadership, Settings};
use serde_json::{Value, json};

use crate::support::wait_for;

const API_VERSION: &str = "trainer.kubeflow.org/v1alpha1";
const OTHER: &str = "example.com/keep-me";

fn runtime(kind: &str, name: &str, namespace: Option<&str>, finalizers: &[&str]) -> Value {
    let mut metadata = json!({"name": name, "finalizers": finalizers});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    json!({
        "apiVersion": API_VERSION, "kind": kind, "metadata": metadata,
        "spec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
            "template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}}}}]}}},
    })
}

fn server() -> FakeApiServer {
    let server = FakeApiServer::start();
    for object in [
        runtime(
            "ClusterTrainingRuntime",
            "legacy",
            None,
            &[RESOURCE_IN_USE_FINALIZER, OTHER],
        ),
        runtime("ClusterTrainingRuntime", "clean", None, &[OTHER]),
        runtime(
            "TrainingRuntime",
            "legacy",
            Some("team-a"),
            &[RESOURCE_IN_USE_FINALIZER],
        ),
    ] {
        server.insert(object);
    }
    server
}

fn finalizers(server: &FakeApiServer, plural: &str, namespace: &str, name: &str) -> Value {
    server
        .get(API_VERSION, plural, namespace, name)
        .expect("runtime stored")["metadata"]
        .get("finalizers")
        .cloned()
        .unwrap_or(Value::Null)
}

fn stored<T: serde::de::DeserializeOwned>(
    server: &FakeApiServer,
    plural: &str,
    namespace: &str,
    name: &str,
) -> Arc<T> {
    let value = server
        .get(API_VERSION, plural, namespace, name)
        .expect("runtime stored");
    Arc::new(serde_json::from_value(value).expect("typed runtime"))
}

fn context(server: &FakeApiServer, leadership: Leadership) -> Arc<Context> {
    Arc::new(Context::new(
        server.client(),
        Settings::default(),
        leadership,
    ))
}

#[tokio::test]
async fn the_leader_removes_only_the_legacy_finalizer() {
    let server = server();
    let ctx = context(&server, Leadership::always());

    for name in ["legacy", "clean"] {
        let runtime: Arc<ClusterTrainingRuntime> =
            stored(&server, "clustertrainingruntimes", "", name);
        let action = reconcile_cluster(runtime, ctx.clone())
            .await
            .expect("reconciled");
        assert_eq!(action, Action::await_change());
    }
    let namespaced: Arc<TrainingRuntime> = stored(&server, "trainingruntimes", "team-a", "legacy");
    reconcile_namespaced(namespaced, ctx.clone())
        .await
        .expect("reconciled");

    assert_eq!(
        finalizers(&server, "clustertrainingruntimes", "", "legacy"),
        json!([OTHER])
    );
    assert_eq!(
        finalizers(&server, "clustertrainingruntimes", "", "clean"),
        json!([OTHER])
    );
    assert_eq!(
        finalizers(&server, "trainingruntimes", "team-a", "legacy"),
        Value::Null,
        "the last finalizer removed leaves none"
    );
    // One patch per runtime that had the finalizer; nothing for the clean one.
    assert_eq!(server.stats().merge_patches, 2);
    // The spec is untouched.
    let spec = &server
        .get(API_VERSION, "clustertrainingruntimes", "", "legacy")
        .unwrap()["spec"];
    assert_eq!(spec, &runtime("x", "x", None, &[])["spec"]);
}

#[tokio::test]
async fn a_follower_writes_nothing() {
    let server = server();
    let (_elect, leadership) = Leadership::channel();
    let ctx = context(&server, leadership);
    let runtime: Arc<ClusterTrainingRuntime> =
        stored(&server, "clustertrainingruntimes", "", "legacy");
    let action = reconcile_cluster(runtime, ctx).await.expect("reconciled");
    assert_eq!(
        action,
        Action::requeue(Settings::default().follower_requeue)
    );
    assert_eq!(server.stats().merge_patches, 0);
    assert_eq!(
        finalizers(&server, "clustertrainingruntimes", "", "legacy"),
        json!([RESOURCE_IN_USE_FINALIZER, OTHER])
    );
}

#[tokio::test]
async fn a_concurrent_change_is_not_overwritten() {
    let server = server();
    let ctx = context(&server, Leadership::always());
    // Read, then another writer changes the runtime (a new resourceVersion) before the patch lands.
    let seen: Arc<ClusterTrainingRuntime> =
        stored(&server, "clustertrainingruntimes", "", "legacy");
    server.insert(runtime(
        "ClusterTrainingRuntime",
        "legacy",
        None,
        &[RESOURCE_IN_USE_FINALIZER, OTHER, "example.com/new"],
    ));
    let error = reconcile_cluster(seen.clone(), ctx.clone())
        .await
        .expect_err("409 Conflict");
    assert!(error.is_conflict(), "{error}");
    assert_eq!(
        finalizers(&server, "clustertrainingruntimes", "", "legacy"),
        json!([RESOURCE_IN_USE_FINALIZER, OTHER, "example.com/new"])
    );
    // The retry is scheduled with backoff, and the fresh object is then patched correctly.
    assert_ne!(
        error_policy(seen, &error, ctx.clone()),
        Action::await_change()
    );
    let fresh: Arc<ClusterTrainingRuntime> =
        stored(&server, "clustertrainingruntimes", "", "legacy");
    reconcile_cluster(fresh, ctx).await.expect("reconciled");
    assert_eq!(
        finalizers(&server, "clustertrainingruntimes", "", "legacy"),
        json!([OTHER, "example.com/new"])
    );
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
