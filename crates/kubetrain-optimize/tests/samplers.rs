//! Sampler properties: bounds, grid coverage, determinism, TPE against random search.

use std::collections::{BTreeMap, BTreeSet};

use kubetrain_optimize::{
    Algorithm, Direction, Error, Param, Space, Study, TrialRecord, TrialState,
};
use proptest::prelude::*;

fn space() -> impl Strategy<Value = Space> {
    prop_oneof![
        (-1e6f64..1e6, 1e-3f64..1e6).prop_map(|(min, w)| Space::uniform(min, min + w)),
        (-1000i64..1000, 1i64..1000).prop_map(|(min, w)| Space::int_uniform(min, min + w)),
        (1e-8f64..1e3, 1.001f64..1e6).prop_map(|(min, f)| Space::log_uniform(min, min * f)),
        (1i64..1000, 1i64..100_000).prop_map(|(min, w)| Space::int_log_uniform(min, min + w)),
        prop::collection::btree_set("[a-z]{1,6}", 1..6).prop_map(Space::categorical),
    ]
}

fn params() -> impl Strategy<Value = Vec<Param>> {
    prop::collection::vec(space(), 1..4).prop_map(|spaces| {
        spaces
            .into_iter()
            .enumerate()
            .map(|(i, s)| Param::new(format!("p{i}"), s))
            .collect()
    })
}

fn succeeded(index: u32, parameters: BTreeMap<String, String>, objective: f64) -> TrialRecord {
    TrialRecord {
        index,
        parameters,
        objective: Some(objective),
        state: TrialState::Succeeded,
        intermediate: vec![objective],
    }
}

/// Checks one suggestion against the spaces, including integrality.
fn check_in_space(
    params: &[Param],
    values: &BTreeMap<String, String>,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(values.len(), params.len());
    for p in params {
        let v = &values[&p.name];
        prop_assert!(
            p.space.contains(v),
            "{} = {v} outside {:?}",
            p.name,
            p.space
        );
        if let Space::Uniform { int: true, .. } | Space::LogUniform { int: true, .. } = p.space {
            prop_assert!(
                v.parse::<i64>().is_ok(),
                "{} = {v} is not an integer",
                p.name
            );
        }
        if let Space::Uniform { min, max, .. } | Space::LogUniform { min, max, .. } = p.space {
            let x: f64 = v.parse().unwrap();
            prop_assert!(
                x >= min && x <= max,
                "{} = {x} outside [{min}, {max}]",
                p.name
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_suggestions_stay_in_bounds(params in params(), seed: u64, index: u32) {
        let study = Study::new(params.clone(), Algorithm::Random { seed }, Direction::Minimize, 10).unwrap();
        check_in_space(&params, &study.suggest(index, &[]).unwrap())?;
    }

    #[test]
    fn tpe_suggestions_stay_in_bounds(params in params(), seed: u64, objectives in prop::collection::vec(-1e3f64..1e3, 10..40)) {
        let study = Study::new(params.clone(), Algorithm::Tpe { seed }, Direction::Maximize, 50).unwrap();
        let mut history = Vec::new();
        for (i, objective) in objectives.iter().enumerate() {
            let index = u32::try_from(i).unwrap();
            let values = study.suggest(index, &history).unwrap();
            check_in_space(&params, &values)?;
            history.push(succeeded(index, values, *objective));
        }
        let index = u32::try_from(history.len()).unwrap();
        check_in_space(&params, &study.suggest(index, &history).unwrap())?;
    }

    #[test]
    fn grid_covers_every_point_exactly_once(params in params()) {
        let study = Study::new(params.clone(), Algorithm::Grid, Direction::Minimize, u32::MAX).unwrap();
        prop_assume!(study.grid_size() <= 5_000);
        prop_assert_eq!(u64::from(study.trial_count()), study.grid_size());
        let mut seen = BTreeSet::new();
        for index in 0..study.trial_count() {
            let values = study.suggest(index, &[]).unwrap();
            check_in_space(&params, &values)?;
            prop_assert!(seen.insert(values), "grid point {index} repeats");
        }
        // The set is the product of the per-parameter points.
        for p in &params {
            let distinct: BTreeSet<&String> = seen.iter().map(|v| &v[&p.name]).collect();
            let expected = match &p.space {
                Space::Categorical(c) => c.len(),
                Space::Uniform { int: true, min, max } | Space::LogUniform { int: true, min, max } => (max - min) as usize + 1,
                _ => kubetrain_optimize::FLOAT_GRID_POINTS as usize,
            };
            prop_assert_eq!(distinct.len(), expected, "{}", p.name);
        }
        let past = study.trial_count();
        prop_assert_eq!(study.suggest(past, &[]), Err(Error::GridExhausted { index: past, size: study.grid_size() }));
    }

    #[test]
    fn suggestions_are_deterministic(params in params(), seed: u64, index in 0u32..40) {
        let study = Study::new(params, Algorithm::Tpe { seed }, Direction::Minimize, 40).unwrap();
        let mut history = Vec::new();
        for i in 0..15u32 {
            let values = study.suggest(i, &history).unwrap();
            history.push(succeeded(i, values, f64::from(i * 7 % 11)));
        }
        let a = study.suggest(index, &history).unwrap();
        let mut shuffled = history.clone();
        shuffled.reverse();
        prop_assert_eq!(&a, &study.suggest(index, &shuffled).unwrap());
        let again = Study::new(study.params().to_vec(), Algorithm::Tpe { seed }, Direction::Minimize, 40).unwrap();
        prop_assert_eq!(&a, &again.suggest(index, &history).unwrap());
    }
}

#[test]
fn random_is_a_function_of_seed_and_index() {
    let params = vec![
        Param::new("x", Space::uniform(0.0, 1.0)),
        Param::new("n", Space::int_uniform(1, 1000)),
    ];
    let study = Study::new(
        params.clone(),
        Algorithm::Random { seed: 3 },
        Direction::Minimize,
        100,
    )
    .unwrap();
    let all: Vec<_> = (0..100).map(|i| study.suggest(i, &[]).unwrap()).collect();
    // The history does not matter, and neither does the order of the calls.
    let fake = [succeeded(0, all[0].clone(), 1.0)];
    assert_eq!(study.suggest(57, &fake).unwrap(), all[57]);
    let distinct: BTreeSet<_> = all.iter().map(|v| v["x"].clone()).collect();
    assert_eq!(distinct.len(), 100, "no two trials share a draw");
    let other = Study::new(
        params,
        Algorithm::Random { seed: 4 },
        Direction::Minimize,
        100,
    )
    .unwrap();
    assert_ne!(other.suggest(0, &[]).unwrap(), all[0]);
}

#[test]
fn grid_order_and_float_points_are_documented() {
    let study = Study::new(
        vec![
            Param::new("a", Space::categorical(["x", "y"])),
            Param::new("lr", Space::log_uniform(1e-4, 1.0)),
        ],
        Algorithm::Grid,
        Direction::Minimize,
        100,
    )
    .unwrap();
    assert_eq!(study.trial_count(), 10);
    let lrs: Vec<String> = (0..5)
        .map(|i| study.suggest(i, &[]).unwrap()["lr"].clone())
        .collect();
    assert_eq!(lrs, ["0.0001", "0.001", "0.01", "0.1", "1"]);
    assert_eq!(study.suggest(4, &[]).unwrap()["a"], "x");
    assert_eq!(study.suggest(5, &[]).unwrap()["a"], "y");
    let capped = Study::new(
        study.params().to_vec(),
        Algorithm::Grid,
        Direction::Minimize,
        3,
    )
    .unwrap();
    assert_eq!(capped.trial_count(), 3);
}

#[test]
fn bad_spaces_are_refused_with_the_parameter_named() {
    let cases = [
        (
            Space::uniform(1.0, 1.0),
            "min (1) must be less than max (1)",
        ),
        (Space::uniform(2.0, 1.0), "must be less than max"),
        (Space::log_uniform(0.0, 1.0), "needs min > 0"),
        (Space::uniform(f64::NAN, 1.0), "finite"),
        (
            Space::Uniform {
                min: 0.2,
                max: 0.8,
                int: true,
            },
            "no integer lies",
        ),
        (Space::Categorical(vec![]), "at least one choice"),
        (Space::categorical(["a", "a"]), "listed twice"),
    ];
    for (space, want) in cases {
        let err = Study::new(
            vec![Param::new("lr", space)],
            Algorithm::Grid,
            Direction::Minimize,
            5,
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("\"lr\"") && text.contains(want), "{text}");
    }
    let dup = vec![
        Param::new("lr", Space::uniform(0.0, 1.0)),
        Param::new("lr", Space::uniform(0.0, 1.0)),
    ];
    assert_eq!(
        Study::new(dup, Algorithm::Grid, Direction::Minimize, 5).unwrap_err(),
        Error::DuplicateParameter { name: "lr".into() }
    );
    assert_eq!(
        Study::new(vec![], Algorithm::Grid, Direction::Minimize, 5).unwrap_err(),
        Error::NoParameters
    );
    let one = vec![Param::new("lr", Space::uniform(0.0, 1.0))];
    assert_eq!(
        Study::new(one, Algorithm::Grid, Direction::Minimize, 0).unwrap_err(),
        Error::NoTrials
    );
}

#[test]
fn values_are_formatted_for_environment_variables() {
    let study = Study::new(
        vec![
            Param::new("n", Space::int_log_uniform(1, 1024)),
            Param::new("x", Space::uniform(0.0, 1.0)),
        ],
        Algorithm::Random { seed: 1 },
        Direction::Minimize,
        5,
    )
    .unwrap();
    for i in 0..50 {
        let v = study.suggest(i, &[]).unwrap();
        assert!(v["n"].chars().all(|c| c.is_ascii_digit()), "{v:?}");
        let x: f64 = v["x"].parse().unwrap();
        assert_eq!(x.to_string(), v["x"], "shortest round trip");
    }
}

#[test]
fn best_follows_the_direction_and_skips_unfinished_trials() {
    let params = vec![Param::new("x", Space::uniform(0.0, 1.0))];
    let min = Study::new(params.clone(), Algorithm::Grid, Direction::Minimize, 5).unwrap();
    let max = Study::new(params, Algorithm::Grid, Direction::Maximize, 5).unwrap();
    let mut history = vec![
        succeeded(0, BTreeMap::new(), 3.0),
        succeeded(1, BTreeMap::new(), 1.0),
        succeeded(2, BTreeMap::new(), f64::NAN),
        succeeded(3, BTreeMap::new(), 1.0),
        TrialRecord {
            state: TrialState::Failed,
            ..succeeded(4, BTreeMap::new(), -10.0)
        },
        TrialRecord {
            state: TrialState::Running,
            ..succeeded(5, BTreeMap::new(), 10.0)
        },
    ];
    assert_eq!(min.best(&history).map(|t| t.index), Some(1));
    assert_eq!(max.best(&history).map(|t| t.index), Some(0));
    history.retain(|t| t.state != TrialState::Succeeded);
    assert!(min.best(&history).is_none());
}

/// Best objective after `budget` trials of `algorithm` on a 2-D quadratic with a log-scaled parameter.
fn best_after(algorithm: Algorithm, budget: u32) -> f64 {
    let params = vec![
        Param::new("x", Space::uniform(-5.0, 5.0)),
        Param::new("lr", Space::log_uniform(1e-5, 1.0)),
    ];
    let study = Study::new(params, algorithm, Direction::Minimize, budget).unwrap();
    let f = |v: &BTreeMap<String, String>| {
        let x: f64 = v["x"].parse().unwrap();
        let lr: f64 = v["lr"].parse().unwrap();
        (x - 1.3).powi(2) + (lr.log10() + 2.5).powi(2)
    };
    let mut history = Vec::new();
    for index in 0..budget {
        let values = study.suggest(index, &history).unwrap();
        let y = f(&values);
        history.push(succeeded(index, values, y));
    }
    study.best(&history).and_then(|t| t.objective).unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    0.5 * (v[v.len() / 2 - 1] + v[v.len() / 2])
}

#[test]
fn tpe_beats_random_search_over_fixed_seeds() {
    let tpe: Vec<f64> = (0..20)
        .map(|seed| best_after(Algorithm::Tpe { seed }, 60))
        .collect();
    let random: Vec<f64> = (0..20)
        .map(|seed| best_after(Algorithm::Random { seed }, 60))
        .collect();
    let (t, r) = (median(tpe.clone()), median(random.clone()));
    assert!(t < r / 2.0, "median best: TPE {t}, random {r}");
    let wins = tpe.iter().zip(&random).filter(|(a, b)| a < b).count();
    assert!(wins >= 14, "TPE wins {wins}/20 seeds");
}

#[test]
fn stopped_and_failed_trials_feed_tpe_as_documented() {
    let params = vec![Param::new("x", Space::uniform(0.0, 1.0))];
    let study = Study::new(params, Algorithm::Tpe { seed: 9 }, Direction::Minimize, 40).unwrap();
    // Fewer than 10 finished trials: the suggestion is the random one.
    let random = Study::new(
        study.params().to_vec(),
        Algorithm::Random { seed: 9 },
        Direction::Minimize,
        40,
    )
    .unwrap();
    let failed: Vec<TrialRecord> = (0..12)
        .map(|i| TrialRecord {
            state: TrialState::Failed,
            ..succeeded(i, BTreeMap::from([("x".into(), "0.5".into())]), 1.0)
        })
        .collect();
    assert_eq!(
        study.suggest(12, &failed).unwrap(),
        random.suggest(12, &[]).unwrap()
    );
    // Ten stopped trials count as finished: TPE takes over.
    let stopped: Vec<TrialRecord> = (0..10)
        .map(|i| TrialRecord {
            state: TrialState::Stopped,
            ..succeeded(i, BTreeMap::from([("x".into(), "0.9".into())]), 1.0)
        })
        .collect();
    assert_ne!(
        study.suggest(12, &stopped).unwrap(),
        random.suggest(12, &[]).unwrap()
    );
}
