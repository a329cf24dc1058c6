//! A tiny data-parallel training loop: linear regression where every rank holds a shard of the data,
//! computes its gradient, and the ranks average gradients with one all-reduce per step. It is what the
//! quick-start TrainJob runs (`kubetrain collective train-demo`).
//!
//! The data set is a fixed function of the sample index, and shards are equal slices of it, so the
//! averaged gradient is the full-batch gradient: the loss curve is the same for every world size (up to
//! rounding), and every rank ends with the same weights.
//!
//! [`train`] adds what a real trainer needs to survive a pod deletion: periodic checkpoints of weights,
//! optimizer state and step ([`crate::checkpoint`]), resuming from the newest valid one on start, and a
//! time window after which every rank stops at the same step.

use std::time::{Duration, Instant};

use crate::checkpoint::{self, Checkpoint, CheckpointStore, Saved};
use crate::communicator::Communicator;
use crate::dtype::ReduceOp;
use crate::error::{CollectiveError, Result};

/// Settings of the demo.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Samples over all ranks (at least one per rank; an uneven split is weighted).
    pub samples: usize,
    /// Features per sample.
    pub features: usize,
    /// Gradient steps.
    pub steps: usize,
    /// Learning rate.
    pub learning_rate: f64,
    /// SGD momentum (`0` is plain SGD); its velocity is the optimizer state a checkpoint keeps.
    pub momentum: f64,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            samples: 4096,
            features: 8,
            steps: 20,
            learning_rate: 0.3,
            momentum: 0.0,
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
    /// The step index this run started at (the resumed checkpoint's step, else 0).
    pub first_step: u64,
    /// The checkpoint this run resumed from, if any.
    pub resumed_from: Option<String>,
    /// Whether training stopped early because [`DemoOptions::interrupt`] asked (every rank at the same
    /// step, after a checkpoint when checkpoints are on), not because it was done.
    pub interrupted: bool,
}

/// Checkpointing of [`train`].
pub struct CheckpointOptions<'a> {
    /// Where checkpoints go (only rank 0 reads and writes it).
    pub store: &'a dyn CheckpointStore,
    /// Write one every this many completed steps (and after the last step); `0` only at the end.
    pub every: u64,
    /// Keep the newest this many (`0`: all).
    pub keep: usize,
}

/// Run options of [`train`] beyond the model's settings.
#[derive(Default)]
pub struct DemoOptions<'a> {
    /// Resume from and write checkpoints here.
    pub checkpoint: Option<CheckpointOptions<'a>>,
    /// Stop after the first step that ends past this much time (every rank stops at the same step).
    pub time_limit: Option<Duration>,
    /// Extra time per step, standing in for a real model's compute (so a short window has many steps).
    pub step_delay: Duration,
    /// Asked after every step: when it answers true on any rank, every rank stops after the same step (a
    /// checkpoint is written first when checkpoints are on) and the report says [`DemoReport::interrupted`].
    /// An elastic trainer passes "the group's membership changed" ([`crate::rendezvous::ElasticAgent`]).
    pub interrupt: Option<&'a dyn Fn() -> bool>,
}

/// What [`train`] reports as it goes. Checkpoint events happen on rank 0 only.
#[derive(Debug)]
pub enum DemoEvent<'a> {
    /// A checkpoint was skipped as damaged; the warning says which and why.
    SkippedCheckpoint(&'a str),
    /// Training resumes from this checkpoint (on every rank).
    Resumed {
        /// Object name.
        name: &'a str,
        /// Its step: the first step index this run trains.
        step: u64,
        /// Loss recorded in it.
        loss: f64,
    },
    /// A step finished (`step` is its 0-based index).
    Step {
        /// Step index.
        step: u64,
        /// Global loss before the update.
        loss: f64,
    },
    /// A checkpoint was written after `step` completed steps.
    Checkpointed {
        /// Completed steps it holds.
        step: u64,
        /// What was written.
        saved: &'a Saved,
    },
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
    train(comm, cfg, &DemoOptions::default(), |event| {
        if let DemoEvent::Step { step, loss } = event {
            on_step(step as usize, loss);
        }
    })
}

/// Rank `rank`'s contiguous shard of `samples` over `n` ranks, and the weight of its mean: when the samples
/// do not split evenly (an elastic group of another size) each rank's mean is weighted by its shard's share,
/// so the average is still the full-batch mean (for an even split the weight is exactly 1).
fn shard_of(rank: usize, n: usize, samples: usize, truth: &[f64]) -> (Vec<(Vec<f64>, f64)>, f64) {
    let (lo, hi) = (rank * samples / n, (rank + 1) * samples / n);
    let weight = if samples.is_multiple_of(n) {
        1.0
    } else {
        ((hi - lo) * n) as f64 / samples as f64
    };
    let d = truth.len() - 1;
    ((lo..hi).map(|i| sample(i, d, truth)).collect(), weight)
}

/// [`train_linear_regression`] with checkpoints, resume and a time window: rank 0 loads the newest valid
/// checkpoint (skipping damaged ones) and broadcasts it, so every rank resumes at its step; rank 0
/// writes one every `every` steps and after the last.
pub fn train<C: Communicator>(
    comm: &mut C,
    cfg: &DemoConfig,
    options: &DemoOptions<'_>,
    mut on_event: impl FnMut(DemoEvent<'_>),
) -> Result<DemoReport> {
    let n = comm.world_size();
    if cfg.samples < n {
        return Err(CollectiveError::InvalidArgument(format!(
            "train-demo: {} samples cannot be shared by {n} ranks",
            cfg.samples
        )));
    }
    let started = Instant::now();
    let d = cfg.features;
    let truth = true_weights(d);
    let (shard, weight) = shard_of(comm.rank(), n, cfg.samples, &truth);
    let per = shard.len();
    let mut w = vec![0.0f64; d + 1];
    let mut velocity = vec![0.0f64; d + 1];
    let mut first_step = 0u64;
    let mut resumed_from = None;
    if let Some(ck) = &options.checkpoint {
        let resumed = resume(comm, ck.store, d, &mut on_event)?;
        if let Some((name, c)) = resumed {
            w = c.model;
            velocity = c.velocity;
            first_step = c.step;
            resumed_from = Some(name);
        }
    }
    let mut losses = Vec::new();
    let mut last_saved = first_step;
    let mut step = first_step;
    let mut interrupted = false;
    while step < cfg.steps as u64 {
        // Gradient of the mean squared error on this shard, the shard's loss, and the stop vote.
        let mut grad = vec![0.0f64; d + 4];
        for (x, y) in &shard {
            let err = x.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>() + w[d] - y;
            for j in 0..d {
                grad[j] += 2.0 * err * x[j] / per as f64;
            }
            grad[d] += 2.0 * err / per as f64;
            grad[d + 1] += err * err / per as f64;
        }
        if !options.step_delay.is_zero() {
            std::thread::sleep(options.step_delay);
        }
        if weight != 1.0 {
            for g in &mut grad[..=d + 1] {
                *g *= weight;
            }
        }
        if options.time_limit.is_some_and(|t| started.elapsed() >= t) {
            grad[d + 2] = 1.0;
        }
        if options.interrupt.is_some_and(|asked| asked()) {
            grad[d + 3] = 1.0;
        }
        comm.all_reduce_in_place(&mut grad, ReduceOp::Avg)?;
        let loss = grad[d + 1];
        for j in 0..=d {
            velocity[j] = cfg.momentum * velocity[j] + grad[j];
            w[j] -= cfg.learning_rate * velocity[j];
        }
        losses.push(loss);
        on_event(DemoEvent::Step { step, loss });
        step += 1;
        // Any rank past the window stops everyone after the same step.
        interrupted = grad[d + 3] > 0.0 && step < cfg.steps as u64;
        let stop = grad[d + 2] > 0.0 || interrupted;
        let last = stop || step >= cfg.steps as u64;
        if let Some(ck) = &options.checkpoint
            && comm.rank() == 0
            && ((ck.every > 0 && step.is_multiple_of(ck.every)) || (last && step > last_saved))
        {
            let c = Checkpoint::new(step, w.clone(), cfg.momentum, velocity.clone(), loss);
            let saved = checkpoint::save(ck.store, &c, ck.keep)
                .map_err(|e| CollectiveError::io("train-demo: checkpoint", e))?;
            last_saved = step;
            on_event(DemoEvent::Checkpointed {
                step,
                saved: &saved,
            });
        }
        if stop {
            break;
        }
    }
    Ok(DemoReport {
        losses,
        weights: w,
        true_weights: truth,
        first_step,
        resumed_from,
        interrupted,
    })
}

/// Rank 0 finds the newest valid checkpoint and broadcasts `[status, step, loss, weights…, velocity…]`
/// (status 1: found, 0: none, -1: rank 0 could not list the store).
fn resume<C: Communicator>(
    comm: &mut C,
    store: &dyn CheckpointStore,
    d: usize,
    on_event: &mut impl FnMut(DemoEvent<'_>),
) -> Result<Option<(String, Checkpoint)>> {
    let width = d + 1;
    let mut buf = vec![0.0f64; 3 + 2 * width];
    let mut name = String::new();
    let mut failure = None;
    if comm.rank() == 0 {
        match checkpoint::load_latest(store) {
            Ok((found, warnings)) => {
                for w in &warnings {
                    on_event(DemoEvent::SkippedCheckpoint(w));
                }
                match found {
                    Some((n, c)) if c.model.len() == width => {
                        buf[0] = 1.0;
                        buf[1] = c.step as f64;
                        buf[2] = c.loss;
                        buf[3..3 + width].copy_from_slice(&c.model);
                        buf[3 + width..].copy_from_slice(&c.velocity);
                        name = n;
                    }
                    Some((n, c)) => {
                        failure = Some(format!(
                            "checkpoint {n} in {} holds {} weights, this model has {width} (another model's checkpoints: use another location)",
                            store.location(),
                            c.model.len()
                        ));
                        buf[0] = -1.0;
                    }
                    None => {}
                }
            }
            Err(e) => {
                failure = Some(format!("listing checkpoints in {}: {e}", store.location()));
                buf[0] = -1.0;
            }
        }
    }
    comm.broadcast(&mut buf, 0)?;
    if buf[0] < 0.0 {
        return Err(CollectiveError::InvalidArgument(failure.unwrap_or_else(
            || "train-demo: rank 0 could not read the checkpoints".into(),
        )));
    }
    if buf[0] == 0.0 {
        return Ok(None);
    }
    let step = buf[1] as u64;
    if comm.rank() != 0 {
        name = checkpoint::object_name(step);
    }
    let c = Checkpoint::new(
        step,
        buf[3..3 + width].to_vec(),
        0.0,
        buf[3 + width..].to_vec(),
        buf[2],
    );
    on_event(DemoEvent::Resumed {
        name: &name,
        step,
        loss: c.loss,
    });
    Ok(Some((name, c)))
}
