//! Every collective × data type × world size 1..=8 × uneven lengths against a naive reference, with ranks
//! as threads over shared memory (and over TCP for a subset).

use crate::common::{check_all_types, check_movement, check_reductions, run_ranks, test_options};
use kubetrain_collective::cpu::Transport;
use kubetrain_collective::{Communicator, ReduceOp};

#[test]
fn every_op_and_type_matches_the_reference_on_1_to_8_ranks_over_shm() {
    for n in 1..=8 {
        run_ranks(n, test_options(Transport::Auto), check_all_types);
    }
}

#[test]
fn every_op_matches_the_reference_over_tcp() {
    for n in [2, 3, 5] {
        run_ranks(n, test_options(Transport::Tcp), |c| {
            assert_eq!(c.transport_summary(), "tcp");
            check_reductions::<i32>(c);
            check_reductions::<f32>(c);
            check_movement::<u8>(c);
        });
    }
}

fn float_data(r: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| ((i * 7919 + r * 104_729) % 1000) as f32 * 0.001_337 + r as f32 * 1e-3)
        .collect()
}

#[test]
fn float_results_are_bitwise_deterministic_and_reduce_scatter_plus_all_gather_equals_all_reduce() {
    for n in [2, 3, 4, 7] {
        let len = n * 997;
        let results = run_ranks(n, test_options(Transport::Auto), |c| {
            let data = float_data(c.rank(), len);
            let mut a = vec![0.0f32; len];
            let mut b = vec![0.0f32; len];
            c.all_reduce(&data, &mut a, ReduceOp::Sum).unwrap();
            c.all_reduce(&data, &mut b, ReduceOp::Sum).unwrap();
            let mut seg = vec![0.0f32; len / n];
            c.reduce_scatter(&data, &mut seg, ReduceOp::Sum).unwrap();
            let mut gathered = vec![0.0f32; len];
            c.all_gather(&seg, &mut gathered).unwrap();
            (a, b, gathered)
        });
        let bits = |v: &Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (r, (a, b, g)) in results.iter().enumerate() {
            assert_eq!(bits(a), bits(b), "n={n} rank {r}: two runs differ");
            assert_eq!(
                bits(a),
                bits(g),
                "n={n} rank {r}: reduce_scatter + all_gather != all_reduce"
            );
            assert_eq!(
                bits(a),
                bits(&results[0].0),
                "n={n}: rank {r} differs from rank 0"
            );
        }
    }
}

#[test]
fn transport_summary_and_rank_accessors() {
    let out = run_ranks(3, test_options(Transport::Auto), |c| {
        (c.rank(), c.world_size(), c.backend(), c.transport_summary())
    });
    assert_eq!(
        out,
        vec![
            (0, 3, "cpu", "shm"),
            (1, 3, "cpu", "shm"),
            (2, 3, "cpu", "shm")
        ]
    );
    let single = run_ranks(1, test_options(Transport::Auto), |c| c.transport_summary());
    assert_eq!(single, vec!["none"]);
}

#[test]
fn wrong_lengths_and_ranks_are_invalid_arguments_that_do_not_poison() {
    run_ranks(2, test_options(Transport::Auto), |c| {
        let cases: Vec<(kubetrain_collective::Result<()>, &str)> = vec![
            (
                c.all_reduce(&[1i32, 2], &mut [0; 3], ReduceOp::Sum),
                "send has 2 elements but recv has 3",
            ),
            (
                c.all_gather(&[1i32, 2], &mut [0; 3]),
                "must be world_size (2) × send (2)",
            ),
            (
                c.reduce_scatter(&[1i32; 3], &mut [0; 1], ReduceOp::Sum),
                "must be world_size (2) × recv (1)",
            ),
            (
                c.all_gather_in_place(&mut [0i32; 3]),
                "does not split into world_size (2) equal parts",
            ),
            (c.broadcast(&mut [0i32; 3], 2), "root 2 is not a rank"),
            (c.send(&[1i32], 5), "peer 5 is not a rank"),
            (c.send(&[1i32], c.rank()), "cannot send to itself"),
        ];
        for (res, want) in cases {
            let err = res.unwrap_err().to_string();
            assert!(err.contains(want), "got {err:?}, want {want:?}");
        }
        // Still usable afterwards.
        let mut v = [c.rank() as i64 + 1];
        c.all_reduce_in_place(&mut v, ReduceOp::Sum).unwrap();
        assert_eq!(v, [3]);
    });
}

#[test]
fn bench_validates_every_op_with_zero_wrong_elements() {
    use kubetrain_collective::ElementType;
    use kubetrain_collective::bench::{self, BenchConfig, BenchOp};
    for op in [
        BenchOp::AllReduce,
        BenchOp::AllGather,
        BenchOp::ReduceScatter,
        BenchOp::Broadcast,
    ] {
        for dtype in [ElementType::F32, ElementType::I64, ElementType::Bf16] {
            let cfg = BenchConfig {
                op,
                min_bytes: 8,
                max_bytes: 40_000,
                iters: 2,
                warmup: 1,
                ..BenchConfig::default()
            };
            let rows = run_ranks(3, test_options(Transport::Auto), |c| {
                bench::run_dtype(c, &cfg, dtype).unwrap()
            });
            assert_eq!(rows[0].len(), 13, "{op:?}");
            assert_eq!(
                bench::wrong_total(&rows[0]),
                0,
                "{op:?} {dtype}: {}",
                bench::format_table(&rows[0])
            );
            for r in &rows[0] {
                assert!(r.out_of_place.time_us > 0.0 && r.in_place.time_us > 0.0);
            }
            // Every rank reports the same averaged times.
            assert_eq!(rows[0], rows[2]);
        }
    }
}

#[test]
fn train_demo_loss_falls_and_matches_across_world_sizes() {
    use kubetrain_collective::demo::{DemoConfig, train_linear_regression};
    let cfg = DemoConfig {
        samples: 1200,
        steps: 15,
        ..DemoConfig::default()
    };
    let single = run_ranks(1, test_options(Transport::Auto), |c| {
        train_linear_regression(c, &cfg, |_, _| {}).unwrap()
    });
    let multi = run_ranks(4, test_options(Transport::Auto), |c| {
        train_linear_regression(c, &cfg, |_, _| {}).unwrap()
    });
    let losses = &single[0].losses;
    assert!(losses[losses.len() - 1] < losses[0] / 20.0, "{losses:?}");
    for report in &multi {
        assert_eq!(report.weights, multi[0].weights, "ranks disagree");
        for (a, b) in report.losses.iter().zip(losses) {
            assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} vs {b}");
        }
    }
    // An uneven split (an elastic group of 3 over 1,000 samples) weights each shard by its share: the same
    // curve again.
    let uneven = DemoConfig {
        samples: 1000,
        ..cfg.clone()
    };
    let one = run_ranks(1, test_options(Transport::Auto), |c| {
        train_linear_regression(c, &uneven, |_, _| {}).unwrap()
    });
    let three = run_ranks(3, test_options(Transport::Auto), |c| {
        train_linear_regression(c, &uneven, |_, _| {}).unwrap()
    });
    for (a, b) in three[0].losses.iter().zip(&one[0].losses) {
        assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{a} vs {b}");
    }
    let err = run_ranks(3, test_options(Transport::Auto), |c| {
        train_linear_regression(
            c,
            &DemoConfig {
                samples: 2,
                ..cfg.clone()
            },
            |_, _| {},
        )
        .unwrap_err()
        .to_string()
    });
    assert!(
        err[0].contains("2 samples cannot be shared by 3 ranks"),
        "{}",
        err[0]
    );
}
