//! The reconcile with watch caches, as request sequences against the in-memory API server
//! (`FakeApiServer`): reads come from the stores (no `GET` unless a store cannot answer), and a write whose
//! result cannot change is not sent. Every test asserts the exact requests from the server's log and that
//! nothing else was sent; a watch "catching up" fills a store with what the fake server holds.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{reflector, watcher};
use kubetrain_api::{ClusterTrainingRuntime, TrainJob};
use serde_json::{Value, json};

use crate::cache::{CachedJobSet, Caches, Writers};
use crate::controller::{Context, left_as_is, own_apply_echo, reconcile};
use crate::fixtures::*;
use crate::leadership::Leadership;
use crate::metrics::ControllerMetrics;
use crate::settings::Settings;
use kubetrain_test_support::FakeApiServer;

/// A context whose stores are `caches`; the same context (and so the same apply memory) across reconciles.
fn cached_context(client: kube::Client, caches: Caches) -> Arc<Context> {
    Arc::new(
        Context::new(
            client,
            Settings::default(),
            Leadership::always(),
            Arc::new(ControllerMetrics::default()),
        )
        .with_caches(caches),
    )
}

/// Replaces a store's content with `objects`, as a (re)list does; the store is ready afterwards.
fn listed<K>(writer: &mut Writer<K>, objects: Vec<K>)
where
    K: reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(o));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

/// Every store listed: the built-in runtimes, nothing else.
fn listed_caches() -> (Caches, Writers) {
    let (caches, mut w) = Caches::new();
    let runtimes = kubetrain_jobset::builtin::runtimes()
        .into_iter()
        .map(|r| serde_json::from_value(cluster_runtime_json(r.name())).expect("runtime"))
        .collect::<Vec<ClusterTrainingRuntime>>();
    listed(&mut w.cluster_runtimes, runtimes);
    listed(&mut w.runtimes, vec![]);
    listed(&mut w.trainjobs, vec![]);
    listed(&mut w.jobsets, vec![]);
    listed(&mut w.config_maps, vec![]);
    listed(&mut w.secrets, vec![]);
    listed(&mut w.coscheduling, vec![]);
    listed(&mut w.volcano, vec![]);
    (caches, w)
}

/// `value` with this uid and resourceVersion.
fn stored(mut value: Value, uid: &str, rv: &str) -> Value {
    value["metadata"]["uid"] = json!(uid);
    value["metadata"]["resourceVersion"] = json!(rv);
    value
}

/// `job`'s JobSet as stored at `rv`, without status (so the TrainJob's status has nothing to follow).
fn cached_jobset(job: &TrainJob, suspend: bool, rv: &str) -> CachedJobSet {
    let mut js = stored(jobset_json(job, suspend, None, 0), "child-uid", rv);
    js["status"] = Value::Null;
    serde_json::from_value(js).expect("JobSet")
}

fn config_map(value: Value, rv: &str) -> ConfigMap {
    serde_json::from_value(stored(value, "child-uid", rv)).expect("ConfigMap")
}

fn metadata<K>(name: &str, rv: &str) -> PartialObjectMeta<K> {
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": NS,
        "uid": "child-uid", "resourceVersion": rv}}))
    .expect("metadata")
}

/// The object `server` holds at `path` (as a watch would deliver it), typed for a store.
fn caught_up<K: serde::de::DeserializeOwned>(server: &FakeApiServer, path: &str) -> K {
    let (api_version, plural, name) = match path.split('/').collect::<Vec<_>>().as_slice() {
        ["", "api", "v1", "namespaces", _, plural, name] => ("v1".to_owned(), *plural, *name),
        ["", "apis", group, version, "namespaces", _, plural, name] => {
            (format!("{group}/{version}"), *plural, *name)
        }
        _ => panic!("not an object path: {path}"),
    };
    let object = server
        .get(&api_version, plural, NS, name)
        .unwrap_or_else(|| panic!("the fake API server holds no {path}"));
    serde_json::from_value(object).expect("typed object")
}

/// The resourceVersion of the object `server` holds at `path`.
fn rv_of(server: &FakeApiServer, path: &str) -> String {
    let object: Value = caught_up(server, path);
    object["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .to_owned()
}

/// Reconciles `job` with `ctx` against exactly `calls`.
async fn expect_calls(
    job: &TrainJob,
    ctx: &Arc<Context>,
    server: &FakeApiServer,
    calls: Vec<Call>,
) -> crate::Result<Action> {
    prepare(server, &calls);
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        reconcile(Arc::new(job.clone()), ctx.clone()),
    )
    .await;
    let Ok(result) = result else {
        let sent: Vec<String> = server
            .requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.uri))
            .collect();
        panic!("the reconcile did not finish; sent so far: {sent:?}");
    };
    verify(server, &calls);
    result
}

/// The condition the first reconcile of a suspended TrainJob writes.
fn suspended_condition() -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        message: "TrainJob is suspended".into(),
        ..condition("Suspended", "True", "Suspended", ago(1))
    }
}

#[tokio::test]
async fn a_suspended_job_is_applied_once_then_only_when_something_changed() {
    let job = trainjob("mnist").suspend(true);
    let server = fake_server(&job);
    let (caches, mut w) = listed_caches();
    let ctx = cached_context(server.client(), caches);

    // New: the runtime comes from the store; only the writes go out.
    let result = expect_calls(
        &job,
        &ctx,
        &server,
        vec![
            Call::apply(configmap_path("mnist-runtime-snapshot")),
            Call::apply(jobset_path("mnist")).check(|b| assert_eq!(b["spec"]["suspend"], true)),
            Call::merge_status(status_path("mnist")),
        ],
    )
    .await;
    result.expect("reconciled");

    // The watches caught up: the same JobSet would be applied to the same stored version, so nothing is sent.
    let job = job.conditions(vec![suspended_condition()]);
    let applied: CachedJobSet = caught_up(&server, &jobset_path("mnist"));
    listed(&mut w.jobsets, vec![applied.clone()]);
    listed(
        &mut w.config_maps,
        vec![caught_up(
            &server,
            &configmap_path("mnist-runtime-snapshot"),
        )],
    );
    let result = expect_calls(&job, &ctx, &server, vec![]).await;
    result.expect("reconciled");

    // Someone changed the JobSet since (the JobSet controller, a user): applied again.
    let changed = format!("{}0", rv_of(&server, &jobset_path("mnist")));
    listed(&mut w.jobsets, vec![cached_jobset(&job, true, &changed)]);
    let result = expect_calls(&job, &ctx, &server, vec![Call::apply(jobset_path("mnist"))]).await;
    result.expect("reconciled");

    // Resumed (Kueue admitted it): the new body goes through, whatever the memory holds.
    listed(
        &mut w.jobsets,
        vec![caught_up(&server, &jobset_path("mnist"))],
    );
    let resumed = job.clone().suspend(false);
    let result = expect_calls(
        &resumed,
        &ctx,
        &server,
        vec![
            Call::apply(jobset_path("mnist")).check(|b| assert_eq!(b["spec"]["suspend"], false)),
            Call::merge_status(status_path("mnist")).check(|patch| {
                let c = &patch["status"]["conditions"][0];
                assert_eq!(
                    (&c["type"], &c["status"]),
                    (&json!("Suspended"), &json!("False"))
                );
            }),
        ],
    )
    .await;
    result.expect("reconciled");
}

#[tokio::test(start_paused = true)]
async fn the_leaders_own_writes_not_yet_in_the_cache_are_awaited_then_read_live() {
    let job = trainjob("mnist").suspend(true);
    let server = fake_server(&job);
    let (caches, mut w) = listed_caches();
    let ctx = cached_context(server.client(), caches);
    let result = expect_calls(
        &job,
        &ctx,
        &server,
        vec![
            Call::apply(configmap_path("mnist-runtime-snapshot")),
            Call::apply(jobset_path("mnist")),
            Call::merge_status(status_path("mnist")),
        ],
    )
    .await;
    result.expect("reconciled");

    // The stores have not seen the applies yet (another watch's event came first): nothing is read or
    // written; the watch events of those applies will trigger the next reconcile.
    let job = job.conditions(vec![suspended_condition()]);
    let result = expect_calls(&job, &ctx, &server, vec![]).await;
    assert_eq!(
        result.expect("reconciled"),
        Action::requeue(Duration::from_secs(5))
    );

    // Still absent long after: asked live (a snapshot written from a runtime edited since would be wrong).
    // The server holds both as applied, at the versions the apply memory has.
    tokio::time::advance(Duration::from_secs(16)).await;
    let result = expect_calls(
        &job,
        &ctx,
        &server,
        vec![
            Call::get(jobset_path("mnist")),
            Call::get(configmap_path("mnist-runtime-snapshot")),
            // The store cannot vouch for the JobSet's version: applied again.
            Call::apply(jobset_path("mnist")),
        ],
    )
    .await;
    result.expect("reconciled");

    // Deleted (by a user): the live read says so and the JobSet is created again.
    tokio::time::advance(Duration::from_secs(16)).await;
    listed(
        &mut w.config_maps,
        vec![caught_up(
            &server,
            &configmap_path("mnist-runtime-snapshot"),
        )],
    );
    assert!(server.remove("jobset.x-k8s.io/v1alpha2", "jobsets", NS, "mnist"));
    let result = expect_calls(
        &job,
        &ctx,
        &server,
        vec![
            Call::get(jobset_path("mnist")).not_found(),
            Call::apply(jobset_path("mnist")),
        ],
    )
    .await;
    result.expect("reconciled");
}

#[tokio::test]
async fn a_status_already_written_is_not_written_again_from_a_stale_cache() {
    let mut job = trainjob("mnist");
    job.metadata.resource_version = Some("5".into());
    let server = fake_server(&job);
    let (caches, mut w) = listed_caches();
    let ctx = cached_context(server.client(), caches);
    let mut running = jobset_json(&job, false, None, 1);
    running = stored(running, "child-uid", "4");
    listed(
        &mut w.jobsets,
        vec![serde_json::from_value(running).expect("JobSet")],
    );
    listed(
        &mut w.config_maps,
        vec![config_map(snapshot_json(&job, "torch-distributed"), "2")],
    );

    // A running JobSet is never applied; its jobsStatus goes into the TrainJob's status.
    let result = expect_calls(
        &job,
        &ctx,
        &server,
        vec![
            Call::merge_status(status_path("mnist"))
                .check(|p| assert_eq!(p["status"]["jobsStatus"][0]["active"], 1)),
        ],
    )
    .await;
    result.expect("reconciled");

    // Reconciled again before the TrainJob's watch delivered that write (same resourceVersion): skipped.
    let result = expect_calls(&job, &ctx, &server, vec![]).await;
    result.expect("reconciled");

    // A newer TrainJob whose status someone reset: written again.
    job.metadata.resource_version = Some("7".into());
    let result = expect_calls(
        &job,
        &ctx,
        &server,
        vec![Call::merge_status(status_path("mnist"))],
    )
    .await;
    result.expect("reconciled");
}

#[tokio::test]
async fn an_ssh_secret_missing_from_the_cache_is_confirmed_live_and_a_stable_hostfile_is_not_reapplied()
 {
    let job = trainjob("ds").runtime("deepspeed-distributed", "ClusterTrainingRuntime");
    let server = fake_server(&job);
    let (caches, mut w) = listed_caches();
    let ctx = cached_context(server.client(), caches);
    let result = expect_calls(
        &job,
        &ctx,
        &server,
        vec![
            // Never generate keys on the cache's word alone: a new Secret would replace running pods' keys.
            Call::get(secret_path("ds-mpi-ssh-auth")).not_found(),
            Call::apply(configmap_path("ds-runtime-snapshot")),
            Call::apply(configmap_path("ds-mpi-hostfile")),
            Call::apply(secret_path("ds-mpi-ssh-auth")),
            Call::apply(jobset_path("ds")),
        ],
    )
    .await;
    result.expect("reconciled");

    // Everything in the stores at the versions applied: the hostfile (rendered every time) is not sent.
    let snapshot: ConfigMap = caught_up(&server, &configmap_path("ds-runtime-snapshot"));
    let hostfile: ConfigMap = caught_up(&server, &configmap_path("ds-mpi-hostfile"));
    listed(&mut w.jobsets, vec![caught_up(&server, &jobset_path("ds"))]);
    listed(&mut w.config_maps, vec![snapshot.clone(), hostfile.clone()]);
    listed(
        &mut w.secrets,
        vec![caught_up::<PartialObjectMeta<Secret>>(
            &server,
            &secret_path("ds-mpi-ssh-auth"),
        )],
    );
    let result = expect_calls(&job, &ctx, &server, vec![]).await;
    result.expect("reconciled");

    // The hostfile was edited: applied again.
    let mut edited = hostfile;
    edited.metadata.resource_version = Some(format!(
        "{}0",
        rv_of(&server, &configmap_path("ds-mpi-hostfile"))
    ));
    listed(&mut w.config_maps, vec![snapshot, edited]);
    let result = expect_calls(
        &job,
        &ctx,
        &server,
        vec![Call::apply(configmap_path("ds-mpi-hostfile"))],
    )
    .await;
    result.expect("reconciled");
}

#[tokio::test]
async fn stores_that_have_not_listed_yet_are_read_around() {
    let job = trainjob("mnist");
    let server = fake_server(&job);
    let (caches, _writers) = Caches::new();
    let ctx = cached_context(server.client(), caches);
    let result = expect_calls(
        &job,
        &ctx,
        &server,
        vec![
            Call::get(jobset_path("mnist")).not_found(),
            Call::get(configmap_path("mnist-runtime-snapshot")).not_found(),
            Call::get(cluster_runtime_path("torch-distributed"))
                .ok(cluster_runtime_json("torch-distributed")),
            Call::apply(configmap_path("mnist-runtime-snapshot")),
            Call::apply(jobset_path("mnist")),
        ],
    )
    .await;
    assert_eq!(result.expect("reconciled"), Action::await_change());
}

#[tokio::test]
async fn a_pod_group_is_read_from_the_cache_and_a_missing_runtime_live() {
    let mut runtime = cluster_runtime_json("torch-distributed");
    runtime["metadata"]["name"] = json!("gang-runtime");
    runtime["spec"]["podGroupPolicy"] = json!({"coscheduling": {"scheduleTimeoutSeconds": 100}});
    let job = trainjob("gang").runtime("gang-runtime", "ClusterTrainingRuntime");
    let server = fake_server(&job);
    let (caches, mut w) = listed_caches();
    let ctx = cached_context(server.client(), caches);
    listed(
        &mut w.coscheduling,
        vec![metadata::<kubetrain_api::podgroup::coscheduling::PodGroup>(
            "gang", "1",
        )],
    );
    let result = expect_calls(
        &job,
        &ctx,
        &server,
        vec![
            // Not in the store (created a moment ago): asked live.
            Call::get(cluster_runtime_path("gang-runtime")).ok(runtime),
            Call::apply(configmap_path("gang-runtime-snapshot")),
            // The PodGroup exists (store): only the JobSet is applied.
            Call::apply(jobset_path("gang")),
        ],
    )
    .await;
    result.expect("reconciled");
}

#[tokio::test]
async fn the_echo_of_the_leaders_own_status_write_triggers_no_reconcile_and_any_other_change_does()
{
    let job = trainjob("mnist").suspend(true);
    let server = fake_server(&job);
    let (caches, _writers) = listed_caches();
    let ctx = cached_context(server.client(), caches);
    let calls = vec![
        Call::apply(configmap_path("mnist-runtime-snapshot")),
        Call::apply(jobset_path("mnist")),
        Call::merge_status(status_path("mnist")),
    ];
    expect_calls(&job, &ctx, &server, calls)
        .await
        .expect("reconciled");

    // The watch event of that status patch: the TrainJob exactly as the API server now holds it.
    let path = status_path("mnist");
    let echo: TrainJob = caught_up(&server, path.trim_end_matches("/status"));
    assert!(
        echo.status.is_some(),
        "the patch wrote the Suspended condition"
    );
    assert!(left_as_is(&ctx, &echo), "the echo needs no reconcile");

    let changed = |change: fn(&mut TrainJob)| {
        let mut job = echo.clone();
        change(&mut job);
        job
    };
    let table = [
        ("never reconciled (no status yet)", job.clone()),
        (
            "resumed (spec.suspend false)",
            changed(|j| j.spec.suspend = Some(false)),
        ),
        (
            "labelled",
            changed(|j| {
                j.metadata.labels = Some([("team".to_owned(), "a".to_owned())].into());
            }),
        ),
        (
            "annotated",
            changed(|j| {
                j.metadata.annotations = Some([("note".to_owned(), "x".to_owned())].into());
            }),
        ),
        (
            "being deleted",
            changed(|j| j.metadata.deletion_timestamp = Some(ago(0))),
        ),
        (
            "status written by someone else",
            changed(|j| j.status.as_mut().expect("status").conditions.clear()),
        ),
        (
            "created again under the same name",
            changed(|j| j.metadata.uid = Some("another-uid".to_owned())),
        ),
    ];
    for (what, job) in table {
        assert!(!left_as_is(&ctx, &job), "{what}: must be reconciled");
    }

    // The watch events of its own applies: the JobSet and the snapshot exactly as the applies answered.
    let jobset: CachedJobSet = caught_up(&server, &jobset_path("mnist"));
    let snapshot: ConfigMap = caught_up(&server, &configmap_path("mnist-runtime-snapshot"));
    assert!(own_apply_echo(&ctx, &jobset), "the JobSet's echo");
    assert!(own_apply_echo(&ctx, &snapshot), "the snapshot's echo");
    let mut edited = jobset.clone();
    edited.metadata.resource_version = Some(format!("{}0", rv_of(&server, &jobset_path("mnist"))));
    assert!(!own_apply_echo(&ctx, &edited), "changed since: reconciled");
    let mut orphan = snapshot.clone();
    orphan.metadata.owner_references = None;
    assert!(
        !own_apply_echo(&ctx, &orphan),
        "not a TrainJob's: reconciled"
    );
    // A reconcile waiting for its own writes to reach the cache is woken by their echoes.
    let uid = echo.metadata.uid.as_deref().expect("uid");
    ctx.memory_for_tests()
        .awaiting_echoes(&(NS.to_owned(), "mnist".to_owned()), uid, true);
    assert!(!own_apply_echo(&ctx, &jobset), "awaited: reconciled");
}
