//! In-process `render()`: a torch TrainJob with 8 nodes (plain and with a runtime patch), an MPI job with
//! 1,000 nodes (1,000-line hostfile) and a Flux job with 4 nodes (scripts and the X25519 CURVE key).
//! Allocations per render are counted with `stats_alloc` and printed.
//!
//! Run: `cargo bench -p kubetrain-benches --bench render_pipeline`

use std::alloc::System;
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kubetrain_api::{Document, TrainJob, TrainingRuntimeSpec, parse_documents};
use kubetrain_jobset::{Observed, builtin, render, resolve, ssh::seeded_rng};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

use kubetrain_benches::TORCH_8_NODES as TORCH;

const TORCH_PATCHED: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: bench, namespace: default, uid: 5f0c1d2e}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 8, resourcesPerNode: {limits: {nvidia.com/gpu: '8'}}}
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

const MPI: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: bench, namespace: default, uid: 5f0c1d2e}
spec:
  runtimeRef: {name: deepspeed-distributed}
  trainer: {numNodes: 1000, resourcesPerNode: {limits: {nvidia.com/gpu: '8'}}}
";

/// The shared Flux runtime (`testdata/runtimes/flux.yaml`, also `kubetrain render`'s test fixture).
const FLUX_RUNTIME: &str = include_str!("../../testdata/runtimes/flux.yaml");

const FLUX_JOB: &str = "
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: bench, namespace: default, uid: 5f0c1d2e}
spec:
  runtimeRef: {name: flux-runtime}
  trainer: {numNodes: 4, numProcPerNode: 4, command: [lmp, -in, in.reaxc.hns]}
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

fn bench_one(
    c: &mut Criterion,
    name: &str,
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
    observed: Observed,
) {
    let run = || render(job, runtime, &observed, &mut seeded_rng(1)).expect("renders");
    let region = Region::new(GLOBAL);
    black_box(run());
    let stats = region.change();
    println!(
        "{name}: {} allocations, {} bytes allocated per render",
        stats.allocations, stats.bytes_allocated
    );
    c.bench_function(name, |b| b.iter(|| black_box(run())));
}

fn benches(c: &mut Criterion) {
    let catalog = builtin::catalog();
    let torch = job(TORCH);
    bench_one(
        c,
        "render/torch_8_nodes",
        &torch,
        resolve(&catalog, &torch).unwrap(),
        Observed::default(),
    );
    let patched = job(TORCH_PATCHED);
    bench_one(
        c,
        "render/torch_8_nodes_runtime_patch",
        &patched,
        resolve(&catalog, &patched).unwrap(),
        Observed::default(),
    );
    let mpi = job(MPI);
    let runtime = resolve(&catalog, &mpi).unwrap();
    // The operator's steady state: the SSH Secret exists, so no key is generated.
    let existing = Observed {
        ssh_secret_exists: true,
        ..Observed::default()
    };
    bench_one(c, "render/mpi_1000_nodes", &mpi, runtime, existing);
    bench_one(
        c,
        "render/mpi_1000_nodes_with_new_ssh_key",
        &mpi,
        runtime,
        Observed::default(),
    );
    let docs =
        parse_documents(&format!("{FLUX_RUNTIME}---{FLUX_JOB}")).expect("bench fixture parses");
    let (Document::ClusterTrainingRuntime(flux_runtime), Document::TrainJob(flux)) =
        (&docs[0].document, &docs[1].document)
    else {
        panic!("expected a runtime and a TrainJob");
    };
    bench_one(
        c,
        "render/flux_4_nodes",
        flux,
        &flux_runtime.spec,
        Observed::default(),
    );
}

criterion_group!(render_benches, benches);
criterion_main!(render_benches);
