//! The per-document phases of `kubetrain render` on a TrainJob stream (issue 3): reading one document (checked,
//! as with validation, and unchecked, as with `--no-validate`), writing one rendered JobSet as YAML, and the
//! whole per-document pipeline without validation. Each phase is measured with the fast path and with the path
//! it replaces, side by side.
//!
//! Run: `cargo bench -p kubetrain-benches --bench render_stream`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kubetrain_api::{Document, TrainJob, parse_value};
use kubetrain_jobset::{Object, Observed, builtin, render, resolve, ssh::seeded_rng};
use kubetrain_yaml::{Writer, fast};
use serde_json::Value;

/// One document of the 10,000-document stream in docs/benchmarks.md (an 8-node torch job).
const DOC: &str = "apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: job-7, namespace: team-0}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    numNodes: 8
    image: example.com/train:1
    command: [torchrun, train.py]
    env: [{name: EPOCHS, value: \"2\"}]
    resourcesPerNode: {limits: {cpu: \"8\", memory: 32Gi, nvidia.com/gpu: \"3\"}}
";

fn checked(value: Value) -> TrainJob {
    match parse_value(value, 0).expect("the bench document is valid") {
        Document::TrainJob(job) => *job,
        other => panic!("expected a TrainJob, got {}", other.kind()),
    }
}

fn benches(c: &mut Criterion) {
    assert!(
        fast::parse(DOC).is_some(),
        "the bench document is in the fast subset"
    );

    let mut group = c.benchmark_group("stream");
    group.bench_function("parse_checked/fast", |b| {
        b.iter(|| checked(fast::from_str(black_box(DOC)).unwrap()))
    });
    group.bench_function("parse_checked/serde_saphyr", |b| {
        b.iter(|| checked(serde_saphyr::from_str(black_box(DOC)).unwrap()))
    });
    group.bench_function("parse_unchecked/fast", |b| {
        b.iter(|| fast::from_str_typed::<TrainJob>(black_box(DOC)).unwrap())
    });
    group.bench_function("parse_unchecked/serde_saphyr", |b| {
        b.iter(|| serde_saphyr::from_str::<TrainJob>(black_box(DOC)).unwrap())
    });

    let catalog = builtin::catalog();
    let job = checked(fast::from_str(DOC).unwrap());
    let runtime = resolve(&catalog, &job).unwrap();
    let objects: Vec<Object> = render(&job, runtime, &Observed::default(), &mut seeded_rng(1))
        .unwrap()
        .objects;
    let jobset = &objects[0];
    let mut writer = Writer::default();
    let mut out = String::new();
    group.bench_function("write_jobset/writer", |b| {
        b.iter(|| {
            out.clear();
            writer.write(&mut out, black_box(jobset)).unwrap();
        })
    });
    group.bench_function("write_jobset/to_value", |b| {
        b.iter(|| {
            out.clear();
            kubetrain_yaml::writer::write(
                &mut out,
                &serde_json::to_value(black_box(jobset)).unwrap(),
            );
        })
    });

    group.bench_function("pipeline_no_validate", |b| {
        b.iter(|| {
            let job: TrainJob = fast::from_str_typed(black_box(DOC)).unwrap();
            let runtime = resolve(&catalog, &job).unwrap();
            let rendered = render(&job, runtime, &Observed::default(), &mut seeded_rng(1)).unwrap();
            out.clear();
            for object in &rendered.objects {
                writer.write(&mut out, object).unwrap();
            }
        })
    });
    group.finish();
}

criterion_group!(render_stream, benches);
criterion_main!(render_stream);
