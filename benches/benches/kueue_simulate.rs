//! Kueue simulator: the scheduler performance test shapes (kueue.md §4) simulated to completion.
//!
//! `cargo bench -p kubetrain-benches --bench kueue_simulate`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::Scheduler;
use kubetrain_kueue::sim::engine::simulate;
use kubetrain_kueue::sim::scenario::ScenarioSpec;

fn model(file: &str) -> Model {
    let path = format!(
        "{}/../examples/manifests/kueue/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("generator config");
    let mut setup = Setup::from_yaml(&text).expect("valid generator config");
    setup.expand_generators();
    Model::build(&setup).expect("valid model")
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("kueue_simulate");
    g.sample_size(10);
    for (name, file) in [
        ("baseline_30cq_15k", "baseline-generator.yaml"),
        ("large_scale_1000cq_50k", "large-scale-generator.yaml"),
    ] {
        let m = model(file);
        g.bench_function(name, |b| {
            b.iter(|| {
                let o = simulate(Scheduler::new(m.clone()), &ScenarioSpec::default(), None);
                black_box(o.cycles)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
