//! One admission review (issue 7), as the webhook server handles it after reading the body: decode the
//! AdmissionReview, decode the TrainJob, run the rules, encode the answer. The runtime is read through kube's
//! client from the in-memory API server (`kubetrain_test_support::FakeApiServer`), so a cluster read is included.
//!
//! - `validate_create`: TrainJob create on torch-distributed (schema, CEL, webhook rules; 1 runtime GET).
//! - `validate_denied`: the same with two errors (reserved env, negative numNodes): the denial path.
//! - `mutate_create`: the defaulter stamping two runtime-patch times (no cluster read).
//!
//! `cargo bench -p kubetrain-benches --bench admission_review`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kubetrain_controller::webhook::{Admission, Route};
use kubetrain_test_support::FakeApiServer;
use serde_json::{Value, json};

fn review(spec: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "bench",
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "name": "llm", "namespace": "team-a", "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": {
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "metadata": {"name": "llm", "namespace": "team-a"},
                "spec": spec,
            },
        }
    }))
    .expect("review JSON")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let server = FakeApiServer::start();
    for runtime in kubetrain_jobset::builtin::runtimes() {
        server.insert(serde_json::to_value(runtime).expect("runtime JSON"));
    }
    let admission = Admission::new(server.client());

    let valid =
        review(json!({"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 8}}));
    let invalid = review(json!({
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {"numNodes": -1, "env": [{"name": "PET_NNODES", "value": "2"}]}
    }));
    let patch = |manager: &str| {
        json!({"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}}}}}
        ]}}}})
    };
    let patched = review(json!({
        "runtimeRef": {"name": "torch-distributed"},
        "runtimePatches": [patch("kueue.x-k8s.io/manager"), patch("example.com/other")]
    }));

    // Sanity: the three cases take the paths their names say.
    let answer = |route, body: &[u8]| {
        let review = rt
            .block_on(admission.review(route, body))
            .expect("a review");
        review.response.expect("a response")
    };
    assert!(answer(Route::ValidateTrainJob, &valid).allowed);
    assert!(!answer(Route::ValidateTrainJob, &invalid).allowed);
    assert!(answer(Route::MutateTrainJob, &patched).patch.is_some());

    let mut group = c.benchmark_group("admission_review");
    for (name, route, body) in [
        ("validate_create", Route::ValidateTrainJob, &valid),
        ("validate_denied", Route::ValidateTrainJob, &invalid),
        ("mutate_create", Route::MutateTrainJob, &patched),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(admission.review(route, black_box(body)))
                    .expect("review")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
