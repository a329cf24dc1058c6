//! One Kueue scheduling cycle with 1,000 active ClusterQueues (10 cohorts × 100 queues, every
//! queue with pending heads), against upstream's shape of the large-scale test.
//!
//! `cargo bench -p kubetrain-benches --bench kueue_cycle`

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::Scheduler;

const CONFIG: &str = r#"
cohorts:
- className: cohort
  count: 10
  queuesSets:
  - className: cq
    count: 100
    nominalQuota: 20
    borrowingLimit: 100
    reclaimWithinCohort: Any
    withinClusterQueue: LowerPriority
    workloadsSets:
    - count: 3
      creationIntervalMs: 1
      workloads:
      - {className: small, runtimeMs: 150, priority: 50, request: 1}
      - {className: large, runtimeMs: 700, priority: 200, request: 20}
"#;

fn bench(c: &mut Criterion) {
    let mut setup = Setup::from_yaml(CONFIG).expect("valid config");
    setup.expand_generators();
    let mut s = Scheduler::new(Model::build(&setup).expect("valid model"));
    s.arrive_all();
    // Warm state: the first cycles fill the quota, so the measured cycle also preempts/borrows.
    s.cycle();
    s.cycle();
    c.bench_function("kueue_cycle_1000_active_cqs", |b| {
        // `_ref`: the clone is made and dropped outside the measurement.
        b.iter_batched_ref(
            || s.clone(),
            |s| black_box(s.cycle().heads),
            BatchSize::LargeInput,
        )
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
