//! TrainJob validation (issue 3): schema constraints, the CRD's CEL rules and the webhook rules, against a
//! catalog holding the built-in runtimes. Allocations per validation are counted with `stats_alloc` and printed.
//!
//! - `validate/torch_8_nodes`: the render stream's typical TrainJob (torch-distributed, 8 nodes, image,
//!   command, env, resourcesPerNode).
//! - `validate/torchtune_initializers_patches`: a TorchTune job with dataset and model initializers (storage
//!   URIs, CEL `matches`) and a runtime patch with a pod-template override.
//! - `validate/update_torch_8_nodes`: the same torch job as an update with an unchanged old object (the CEL
//!   transition rules run too).
//! - `validate/invalid_name_and_uri`: a rejected job (bad name, bad storage URI, numProcPerNode 0).
//! - `validate/value_torch_8_nodes`: schema and CEL only, on an already-serialised JSON value (the webhook path).
//!
//! Run: `cargo bench -p kubetrain-benches --bench validate`

use std::alloc::System;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kubetrain_api::validation::{
    validate_trainjob, validate_trainjob_update, validate_trainjob_value,
};
use kubetrain_api::{Document, FieldError, TrainJob, parse_documents};
use kubetrain_jobset::builtin;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

use kubetrain_benches::TORCH_8_NODES as TORCH;

const TORCHTUNE: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tune, namespace: default, uid: 5f0c1d2f}
spec:
  runtimeRef: {name: torchtune-llama3.2-1b}
  initializer:
    dataset: {storageUri: 'hf://tatsu-lab/alpaca', env: [{name: HF_TOKEN, value: x}]}
    model: {storageUri: 'hf://meta-llama/Llama-3.2-1B-Instruct'}
  trainer:
    numNodes: 1
    resourcesPerNode: {limits: {nvidia.com/gpu: '2'}}
  runtimePatches:
    - manager: kueue.x-k8s.io/manager
      trainingRuntimeSpec:
        template:
          spec:
            replicatedJobs:
              - name: node
                template:
                  spec:
                    template:
                      spec:
                        nodeSelector: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}
                        tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
";

const INVALID: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: Bad_Name, namespace: default}
spec:
  runtimeRef: {name: torch-distributed}
  managedBy: someone-else
  initializer:
    dataset: {storageUri: 'not a uri'}
  trainer: {numNodes: 2, numProcPerNode: 0}
";

fn job(yaml: &str) -> TrainJob {
    match parse_documents(yaml)
        .expect("bench fixture parses")
        .remove(0)
        .document
    {
        Document::TrainJob(job) => *job,
        other => panic!("expected a TrainJob, got {}", other.kind()),
    }
}

fn bench_one(c: &mut Criterion, name: &str, run: impl Fn() -> Vec<FieldError>) {
    let region = Region::new(GLOBAL);
    let findings = black_box(run());
    let stats = region.change();
    println!(
        "{name}: {} findings, {} allocations, {} bytes allocated per validation",
        findings.len(),
        stats.allocations,
        stats.bytes_allocated
    );
    c.bench_function(name, |b| b.iter(|| black_box(run())));
}

fn benches(c: &mut Criterion) {
    let catalog = builtin::catalog();
    let torch = job(TORCH);
    let torchtune = job(TORCHTUNE);
    let invalid = job(INVALID);
    // Warm the compiled schemas so that the first measurement does not include their one-off construction.
    black_box(validate_trainjob(&torch, &catalog));
    bench_one(c, "validate/torch_8_nodes", || {
        validate_trainjob(&torch, &catalog)
    });
    bench_one(c, "validate/torchtune_initializers_patches", || {
        validate_trainjob(&torchtune, &catalog)
    });
    bench_one(c, "validate/update_torch_8_nodes", || {
        validate_trainjob_update(&torch, &torch, &catalog, None)
    });
    bench_one(c, "validate/invalid_name_and_uri", || {
        validate_trainjob(&invalid, &catalog)
    });
    let value = serde_json::to_value(&torch).expect("TrainJob serialises");
    bench_one(c, "validate/value_torch_8_nodes", || {
        validate_trainjob_value(&value, None)
    });
}

criterion_group!(validate_benches, benches);
criterion_main!(validate_benches);
