//! One TrainJob reconcile (issue 7), end to end through kube's client against the in-memory API server
//! (`kubetrain_test_support::FakeApiServer`): the reads, the render, the server-side applies and the status decision.
//!
//! - `create`: first reconcile (snapshot and JobSet missing): 3 GETs, runtime GET, 2 applies.
//! - `suspended_reapply`: the Kueue path, the suspended JobSet is applied again: 2 GETs, 1 apply.
//! - `running_no_writes`: steady state of a running TrainJob: 2 GETs, a render that emits nothing, no writes.
//!
//! `cargo bench -p kubetrain-benches --bench operator_reconcile`

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kubetrain_api::TrainJob;
use kubetrain_controller::controller::{Context, reconcile};
use kubetrain_controller::{ControllerMetrics, Leadership, Settings};
use kubetrain_test_support::FakeApiServer;
use serde_json::json;

const NS: &str = "team-a";

fn trainjob(name: &str, suspend: bool) -> TrainJob {
    serde_json::from_value(json!({
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 8}, "suspend": suspend},
    }))
    .expect("TrainJob")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let server = FakeApiServer::start();
    let runtime = kubetrain_jobset::builtin::runtimes()
        .into_iter()
        .find(|r| r.name() == "torch-distributed")
        .expect("runtime");
    server.insert(serde_json::to_value(runtime).expect("JSON"));
    let ctx = Arc::new(Context::new(
        server.client(),
        Settings::default(),
        Leadership::always(),
        Arc::new(ControllerMetrics::default()),
    ));

    let mut group = c.benchmark_group("operator_reconcile");
    let fresh = Arc::new(trainjob("fresh", false));
    group.bench_function("create", |b| {
        b.iter_batched(
            || {
                server.remove("jobset.x-k8s.io/v1alpha2", "jobsets", NS, "fresh");
                server.remove("v1", "configmaps", NS, "fresh-runtime-snapshot");
                fresh.clone()
            },
            |job| {
                rt.block_on(reconcile(black_box(job), ctx.clone()))
                    .expect("reconciled")
            },
            BatchSize::SmallInput,
        )
    });

    let queued = Arc::new(trainjob("queued", true));
    server.insert(serde_json::to_value(&*queued).expect("JSON"));
    rt.block_on(reconcile(queued.clone(), ctx.clone()))
        .expect("first reconcile");
    // The status it wrote (Suspended=True) is what the cache would hold next.
    let mut queued_now = (*queued).clone();
    queued_now.status = serde_json::from_value(
        server
            .get("trainer.kubeflow.org/v1alpha1", "trainjobs", NS, "queued")
            .map_or(json!(null), |v| v["status"].clone()),
    )
    .ok();
    let queued_now = Arc::new(queued_now);
    group.bench_function("suspended_reapply", |b| {
        b.iter(|| {
            rt.block_on(reconcile(black_box(queued_now.clone()), ctx.clone()))
                .expect("reconciled")
        })
    });

    let running = Arc::new(trainjob("running", false));
    server.insert(serde_json::to_value(&*running).expect("JSON"));
    rt.block_on(reconcile(running.clone(), ctx.clone()))
        .expect("first reconcile");
    let before = server.stats();
    group.bench_function("running_no_writes", |b| {
        b.iter(|| {
            rt.block_on(reconcile(black_box(running.clone()), ctx.clone()))
                .expect("reconciled")
        })
    });
    let after = server.stats();
    assert_eq!(
        after.applies, before.applies,
        "a running JobSet is never re-applied"
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
