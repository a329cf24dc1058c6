//! The cost of one `Study::suggest` (issue 33): random, grid, and TPE with 10, 100 and 500 finished trials
//! in the history, on 3 parameters (a uniform float, a log-uniform float, a categorical).
//!
//! Run: `cargo bench -p kubetrain-benches --bench optimize_suggest`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kubetrain_optimize::{Algorithm, Direction, Param, Space, Study, TrialRecord, TrialState};

fn params() -> Vec<Param> {
    vec![
        Param::new("x", Space::uniform(-5.0, 5.0)),
        Param::new("lr", Space::log_uniform(1e-5, 1.0)),
        Param::new("opt", Space::categorical(["sgd", "adam", "adamw"])),
    ]
}

/// `n` finished trials of a random search with a made-up objective.
fn history(n: u32) -> Vec<TrialRecord> {
    let random = Study::new(
        params(),
        Algorithm::Random { seed: 1 },
        Direction::Minimize,
        n,
    )
    .expect("valid");
    (0..n)
        .map(|index| {
            let parameters = random.suggest(index, &[]).expect("suggestion");
            let x: f64 = parameters["x"].parse().expect("number");
            let y = (x - 1.0).powi(2)
                + if parameters["opt"] == "adam" {
                    0.0
                } else {
                    1.0
                };
            TrialRecord {
                index,
                parameters,
                objective: Some(y),
                state: TrialState::Succeeded,
                intermediate: vec![y],
            }
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let random = Study::new(
        params(),
        Algorithm::Random { seed: 7 },
        Direction::Minimize,
        1000,
    )
    .expect("valid");
    c.bench_function("optimize_suggest/random", |b| {
        b.iter(|| black_box(random.suggest(black_box(42), &[])))
    });
    let grid = Study::new(params(), Algorithm::Grid, Direction::Minimize, 1000).expect("valid");
    c.bench_function("optimize_suggest/grid", |b| {
        b.iter(|| black_box(grid.suggest(black_box(42), &[])))
    });
    let tpe = Study::new(
        params(),
        Algorithm::Tpe { seed: 7 },
        Direction::Minimize,
        1000,
    )
    .expect("valid");
    for n in [10, 100, 500] {
        let h = history(n);
        c.bench_function(&format!("optimize_suggest/tpe_{n}_trials"), |b| {
            b.iter(|| black_box(tpe.suggest(black_box(n), &h)));
        });
    }
}

criterion_group!(optimize_benches, benches);
criterion_main!(optimize_benches);
