//! TPE against random search on known functions: trials needed to come within 1 % of the optimum
//! (`f <= f* + 0.01 |f*|`), median over 20 seeds, at most 1000 trials per TPE run and 10 000 per random
//! run (random search costs nothing per suggestion; TPE's cost grows with the history).
//!
//! ```text
//! cargo run --release -p kubetrain-optimize --example tpe_vs_random
//! ```

use std::collections::BTreeMap;

use kubetrain_optimize::{Algorithm, Direction, Param, Space, Study, TrialRecord, TrialState};

/// Trials per TPE run before giving up.
const BUDGET_TPE: u32 = 1000;
/// Trials per random run before giving up.
const BUDGET_RANDOM: u32 = 10_000;
/// Seeds per algorithm and function.
const SEEDS: u64 = 20;

struct Problem {
    name: &'static str,
    params: Vec<Param>,
    optimum: f64,
    f: fn(&BTreeMap<String, String>) -> f64,
}

fn get(p: &BTreeMap<String, String>, name: &str) -> f64 {
    p[name].parse().expect("the sampler formats numbers")
}

fn branin(p: &BTreeMap<String, String>) -> f64 {
    let (x, y) = (get(p, "x1"), get(p, "x2"));
    let pi = std::f64::consts::PI;
    let b = 5.1 / (4.0 * pi * pi);
    let c = 5.0 / pi;
    let t = 1.0 / (8.0 * pi);
    (y - b * x * x + c * x - 6.0).powi(2) + 10.0 * (1.0 - t) * x.cos() + 10.0
}

fn hartmann3(p: &BTreeMap<String, String>) -> f64 {
    const ALPHA: [f64; 4] = [1.0, 1.2, 3.0, 3.2];
    const A: [[f64; 3]; 4] = [
        [3.0, 10.0, 30.0],
        [0.1, 10.0, 35.0],
        [3.0, 10.0, 30.0],
        [0.1, 10.0, 35.0],
    ];
    const P: [[f64; 3]; 4] = [
        [0.3689, 0.1170, 0.2673],
        [0.4699, 0.4387, 0.7470],
        [0.1091, 0.8732, 0.5547],
        [0.0381, 0.5743, 0.8828],
    ];
    let x = [get(p, "x1"), get(p, "x2"), get(p, "x3")];
    -(0..4)
        .map(|i| {
            let s: f64 = (0..3).map(|j| A[i][j] * (x[j] - P[i][j]).powi(2)).sum();
            ALPHA[i] * (-s).exp()
        })
        .sum::<f64>()
}

/// A learning-rate/weight-decay bowl in log space (both parameters log-uniform): optimum 1 at
/// lr = 1e-2, wd = 1e-4.
fn log_bowl(p: &BTreeMap<String, String>) -> f64 {
    let (lr, wd) = (get(p, "lr"), get(p, "wd"));
    1.0 + (lr.log10() + 2.0).powi(2) + 0.5 * (wd.log10() + 4.0).powi(2)
}

/// Rosenbrock in 2-D, shifted so that its optimum is 1 (at (1, 1)).
fn rosenbrock(p: &BTreeMap<String, String>) -> f64 {
    let (x, y) = (get(p, "x"), get(p, "y"));
    1.0 + 100.0 * (y - x * x).powi(2) + (1.0 - x).powi(2)
}

fn problems() -> Vec<Problem> {
    vec![
        Problem {
            name: "Branin (2-D)",
            params: vec![
                Param::new("x1", Space::uniform(-5.0, 10.0)),
                Param::new("x2", Space::uniform(0.0, 15.0)),
            ],
            optimum: 0.397_887_357_729_738,
            f: branin,
        },
        Problem {
            name: "Hartmann (3-D)",
            params: (1..=3)
                .map(|i| Param::new(format!("x{i}"), Space::uniform(0.0, 1.0)))
                .collect(),
            optimum: -3.862_782_147_820_755,
            f: hartmann3,
        },
        Problem {
            name: "log-space bowl (2-D, log-uniform)",
            params: vec![
                Param::new("lr", Space::log_uniform(1e-5, 1.0)),
                Param::new("wd", Space::log_uniform(1e-7, 1e-1)),
            ],
            optimum: 1.0,
            f: log_bowl,
        },
        Problem {
            name: "Rosenbrock + 1 (2-D)",
            params: vec![
                Param::new("x", Space::uniform(-2.0, 2.0)),
                Param::new("y", Space::uniform(-1.0, 3.0)),
            ],
            optimum: 1.0,
            f: rosenbrock,
        },
    ]
}

/// Trials until `f <= f* + 1 % |f*|`, or `None` within the budget.
fn trials_to_target(problem: &Problem, algorithm: Algorithm) -> Option<u32> {
    let budget = match algorithm {
        Algorithm::Tpe { .. } => BUDGET_TPE,
        _ => BUDGET_RANDOM,
    };
    let study = Study::new(
        problem.params.clone(),
        algorithm,
        Direction::Minimize,
        budget,
    )
    .expect("valid problem");
    let target = problem.optimum + 0.01 * problem.optimum.abs();
    let mut history = Vec::new();
    for index in 0..budget {
        let parameters = study.suggest(index, &history).expect("suggestion");
        let y = (problem.f)(&parameters);
        if y <= target {
            return Some(index + 1);
        }
        history.push(TrialRecord {
            index,
            parameters,
            objective: Some(y),
            state: TrialState::Succeeded,
            intermediate: vec![y],
        });
    }
    None
}

/// The median of runs (a run that missed counts as more than the budget); `None` when the median missed.
fn median(mut runs: Vec<Option<u32>>, budget: u32) -> String {
    runs.sort_by_key(|r| r.unwrap_or(u32::MAX));
    let n = runs.len();
    let (a, b) = (runs[(n - 1) / 2], runs[n / 2]);
    match (a, b) {
        (Some(a), Some(b)) => format!("{}", f64::from(a + b) / 2.0),
        _ => format!("> {budget}"),
    }
}

/// The mean cost of one suggestion with `n` finished trials in the history (Branin's 2 parameters).
fn suggest_cost(algorithm: Algorithm, n: u32) -> std::time::Duration {
    let problem = &problems()[0];
    let study = Study::new(
        problem.params.clone(),
        algorithm,
        Direction::Minimize,
        n + 1,
    )
    .expect("valid problem");
    let random = Study::new(
        problem.params.clone(),
        Algorithm::Random { seed: 99 },
        Direction::Minimize,
        n,
    )
    .expect("valid");
    let history: Vec<TrialRecord> = (0..n)
        .map(|index| {
            let parameters = random.suggest(index, &[]).expect("suggestion");
            let y = (problem.f)(&parameters);
            TrialRecord {
                index,
                parameters,
                objective: Some(y),
                state: TrialState::Succeeded,
                intermediate: vec![y],
            }
        })
        .collect();
    let calls = 200;
    let start = std::time::Instant::now();
    for _ in 0..calls {
        std::hint::black_box(
            study
                .suggest(n, std::hint::black_box(&history))
                .expect("suggestion"),
        );
    }
    start.elapsed() / calls
}

fn main() {
    println!("suggest() per call, 2 parameters:");
    for n in [10, 100, 1000] {
        println!(
            "  {n:>4} finished trials: TPE {:?}, random {:?}",
            suggest_cost(Algorithm::Tpe { seed: 1 }, n),
            suggest_cost(Algorithm::Random { seed: 1 }, n)
        );
    }
    println!();
    println!(
        "| function | TPE: median trials | random: median trials | TPE reached | random reached |"
    );
    println!("|---|---:|---:|---:|---:|");
    for problem in problems() {
        let tpe: Vec<Option<u32>> = (0..SEEDS)
            .map(|seed| trials_to_target(&problem, Algorithm::Tpe { seed }))
            .collect();
        let random: Vec<Option<u32>> = (0..SEEDS)
            .map(|seed| trials_to_target(&problem, Algorithm::Random { seed }))
            .collect();
        let reached = |runs: &[Option<u32>]| runs.iter().filter(|r| r.is_some()).count();
        println!(
            "| {} | {} | {} | {}/{SEEDS} | {}/{SEEDS} |",
            problem.name,
            median(tpe.clone(), BUDGET_TPE),
            median(random.clone(), BUDGET_RANDOM),
            reached(&tpe),
            reached(&random)
        );
    }
}
