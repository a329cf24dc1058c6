//! A tiny data-parallel training loop: linear regression where every rank holds a shard of the data,
//! computes its gradient, and the ranks average gradients with one all-reduce per step. It is what the
//! quick-start TrainJob runs (`kubetrain collective train-demo`).
//!
//! The data set is a fixed function of the sample index, and shards are equal slices of it, so the
//! averaged gradient is the full-batch gradient: the loss curve is the same for every world size (up to
//! rounding), and every rank ends with the same weights.

use crate::communicator::Communicator;
use crate::dtype::ReduceOp;
use crate::error::{CollectiveError, Result};

/// Settings of the demo.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Samples over all ranks (must split evenly over the ranks).
    pub samples: usize,
    /// Features per sample.
    pub features: usize,
    /// Gradient steps.
    pub steps: usize,
    /// Learning rate.
    pub learning_rate: f64,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            samples: 4096,
            features: 8,
            steps: 20,
            learning_rate: 0.3,
        }
    }
}

/// What one rank ends with.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoReport {
    /// Global mean squared error before each step.
    pub losses: Vec<f64>,
    /// Final weights (bias last).
    pub weights: Vec<f64>,
    /// The weights the data was generated from (bias last).
    pub true_weights: Vec<f64>,
}

/// A deterministic pseudo-random number in [-1, 1) from an index (splitmix64).
fn unit(seed: u64) -> f64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

fn true_weights(features: usize) -> Vec<f64> {
    (0..=features)
        .map(|j| (j as f64 + 1.0) * 0.5 * if j % 2 == 0 { 1.0 } else { -1.0 })
        .collect()
}

/// Sample `i`: features and target (`y = w·x + b + small noise`).
fn sample(i: usize, features: usize, w: &[f64]) -> (Vec<f64>, f64) {
    let x: Vec<f64> = (0..features).map(|j| unit((i * 131 + j) as u64)).collect();
    let noise = 0.01 * unit(1_000_003 * i as u64 + 7);
    let y = x.iter().zip(w).map(|(a, b)| a * b).sum::<f64>() + w[features] + noise;
    (x, y)
}

/// Trains on this rank's shard, averaging gradients over the communicator; `on_step(step, loss)` is
/// called on every rank after each step's loss is known.
pub fn train_linear_regression<C: Communicator>(
    comm: &mut C,
    cfg: &DemoConfig,
    mut on_step: impl FnMut(usize, f64),
) -> Result<DemoReport> {
    let n = comm.world_size();
    if cfg.samples == 0 || !cfg.samples.is_multiple_of(n) {
        return Err(CollectiveError::InvalidArgument(format!(
            "train-demo: {} samples do not split evenly over {n} ranks",
            cfg.samples
        )));
    }
    let d = cfg.features;
    let truth = true_weights(d);
    let per = cfg.samples / n;
    let shard: Vec<(Vec<f64>, f64)> = (comm.rank() * per..(comm.rank() + 1) * per)
        .map(|i| sample(i, d, &truth))
        .collect();
    let mut w = vec![0.0f64; d + 1];
    let mut losses = Vec::with_capacity(cfg.steps);
    for step in 0..cfg.steps {
        // Gradient of the mean squared error on this shard, plus the shard's loss in the last slot.
        let mut grad = vec![0.0f64; d + 2];
        for (x, y) in &shard {
            let err = x.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>() + w[d] - y;
            for j in 0..d {
                grad[j] += 2.0 * err * x[j] / per as f64;
            }
            grad[d] += 2.0 * err / per as f64;
            grad[d + 1] += err * err / per as f64;
        }
        comm.all_reduce_in_place(&mut grad, ReduceOp::Avg)?;
        let loss = grad[d + 1];
        for j in 0..=d {
            w[j] -= cfg.learning_rate * grad[j];
        }
        losses.push(loss);
        on_step(step, loss);
    }
    Ok(DemoReport {
        losses,
        weights: w,
        true_weights: truth,
    })
}
