//! The study: parameters, algorithm, direction and budget, and the suggestions it makes.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::rng::{self, STREAM_RANDOM, STREAM_TPE};
use crate::space::{Domain, Param};
use crate::tpe::{self, Obs, Parzen, TpeConfig};

/// Whether smaller or larger objective values are better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Direction {
    /// Smaller is better (a loss).
    Minimize,
    /// Larger is better (an accuracy).
    Maximize,
}

impl Direction {
    /// `value` as a loss: smaller is better either way.
    pub fn loss(self, value: f64) -> f64 {
        match self {
            Self::Minimize => value,
            Self::Maximize => -value,
        }
    }
}

/// How the next trial's parameters are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Algorithm {
    /// Independent uniform draws; trial `i`'s values are a pure function of `(seed, i)`.
    Random {
        /// The seed.
        seed: u64,
    },
    /// Every point of a grid, in a fixed order (see [`FLOAT_GRID_POINTS`](crate::FLOAT_GRID_POINTS)).
    Grid,
    /// The tree-structured Parzen estimator, as Optuna's default sampler; random for the first
    /// 10 finished trials.
    Tpe {
        /// The seed.
        seed: u64,
    },
}

/// Where a trial is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TrialState {
    /// Created, not started.
    Pending,
    /// Running.
    Running,
    /// Finished; its objective counts.
    Succeeded,
    /// Failed; it is left out of the model.
    Failed,
    /// Stopped early by an [`EarlyStopping`](crate::EarlyStopping) rule.
    Stopped,
}

/// One trial as the sampler sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    /// The trial's index in the study (0-based).
    pub index: u32,
    /// Its parameter values, as [`Study::suggest`] formatted them.
    pub parameters: BTreeMap<String, String>,
    /// Its final objective value, once known.
    pub objective: Option<f64>,
    /// Its state.
    pub state: TrialState,
    /// The objective values it reported along the way, one per step.
    pub intermediate: Vec<f64>,
}

/// A hyperparameter search: what to search, how, which way, and how many trials.
#[derive(Debug, Clone)]
pub struct Study {
    params: Vec<Param>,
    domains: Vec<Domain>,
    algorithm: Algorithm,
    direction: Direction,
    num_trials: u32,
    grid_size: u64,
    tpe: TpeConfig,
}

impl Study {
    /// Checks the parameters and builds the study.
    ///
    /// # Errors
    /// A parameter with `min >= max`, a non-positive `min` on a log range, an integer range holding fewer
    /// than two integers, no choices, a repeated choice, a repeated or empty name; no parameters; zero trials.
    pub fn new(
        params: Vec<Param>,
        algorithm: Algorithm,
        direction: Direction,
        num_trials: u32,
    ) -> Result<Self, Error> {
        if params.is_empty() {
            return Err(Error::NoParameters);
        }
        if num_trials == 0 {
            return Err(Error::NoTrials);
        }
        let mut seen = BTreeSet::new();
        let mut domains = Vec::with_capacity(params.len());
        for p in &params {
            if p.name.is_empty() {
                return Err(Error::EmptyName);
            }
            if !seen.insert(p.name.as_str()) {
                return Err(Error::DuplicateParameter {
                    name: p.name.clone(),
                });
            }
            domains.push(p.space.domain(&p.name)?);
        }
        let grid_size = domains
            .iter()
            .fold(1u64, |acc, d| acc.saturating_mul(d.grid_len()));
        Ok(Self {
            params,
            domains,
            algorithm,
            direction,
            num_trials,
            grid_size,
            tpe: tpe::DEFAULT,
        })
    }

    /// The parameters.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The direction.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// The number of grid points (saturating at `u64::MAX`); meaningful for every algorithm.
    pub fn grid_size(&self) -> u64 {
        self.grid_size
    }

    /// How many trials the study runs: `num_trials`, or the grid's size when a grid is smaller.
    pub fn trial_count(&self) -> u32 {
        match self.algorithm {
            Algorithm::Grid => u32::try_from(self.grid_size.min(u64::from(self.num_trials)))
                .unwrap_or(self.num_trials),
            Algorithm::Random { .. } | Algorithm::Tpe { .. } => self.num_trials,
        }
    }

    /// The parameters of trial `index`, formatted for environment variables (integers as integers,
    /// floats as the shortest string that reads back to the same value, choices verbatim).
    ///
    /// Random: a pure function of `(seed, index)`. Grid: the `index`-th grid point, the last parameter
    /// varying fastest. TPE: a pure function of `(seed, index, history)`, whatever the order of `history`;
    /// trials other than `index` that succeeded (with an objective) or were stopped inform the model.
    ///
    /// # Errors
    /// [`Error::GridExhausted`] when a grid has no `index`-th point.
    pub fn suggest(
        &self,
        index: u32,
        history: &[TrialRecord],
    ) -> Result<BTreeMap<String, String>, Error> {
        match self.algorithm {
            Algorithm::Random { seed } => Ok(self.random(seed, index)),
            Algorithm::Grid => self.grid(index),
            Algorithm::Tpe { seed } => Ok(self.tpe(seed, index, history)),
        }
    }

    /// The best succeeded trial (ties: the lowest index); NaN objectives never win.
    pub fn best<'a>(&self, history: &'a [TrialRecord]) -> Option<&'a TrialRecord> {
        history
            .iter()
            .filter(|t| t.state == TrialState::Succeeded)
            .filter_map(|t| {
                t.objective
                    .filter(|v| !v.is_nan())
                    .map(|v| (self.direction.loss(v), t))
            })
            .min_by(|(a, ta), (b, tb)| a.total_cmp(b).then(ta.index.cmp(&tb.index)))
            .map(|(_, t)| t)
    }

    fn random(&self, seed: u64, index: u32) -> BTreeMap<String, String> {
        let mut rng = rng::for_trial(seed, index, STREAM_RANDOM);
        self.params
            .iter()
            .zip(&self.domains)
            .map(|(p, d)| (p.name.clone(), d.sample(&mut rng)))
            .collect()
    }

    fn grid(&self, index: u32) -> Result<BTreeMap<String, String>, Error> {
        if u64::from(index) >= self.grid_size {
            return Err(Error::GridExhausted {
                index,
                size: self.grid_size,
            });
        }
        let mut rest = u64::from(index);
        let mut out = BTreeMap::new();
        for (p, d) in self.params.iter().zip(&self.domains).rev() {
            let len = d.grid_len();
            out.insert(p.name.clone(), d.grid_point(rest % len));
            rest /= len;
        }
        Ok(out)
    }

    fn tpe(&self, seed: u64, index: u32, history: &[TrialRecord]) -> BTreeMap<String, String> {
        let ranked = self.rank(index, history);
        if ranked.len() < self.tpe.n_startup_trials {
            return self.random(seed, index);
        }
        let n_below = tpe::gamma(ranked.len());
        let (mut below, mut above) = (ranked[..n_below].to_vec(), ranked[n_below..].to_vec());
        // Weights follow trial age within each group.
        below.sort_by_key(|t| t.index);
        above.sort_by_key(|t| t.index);
        let mut rng = rng::for_trial(seed, index, STREAM_TPE);
        let mut out = BTreeMap::new();
        for (p, d) in self.params.iter().zip(&self.domains) {
            let l = Parzen::new(d, &observations(p, d, &below), &self.tpe);
            let g = Parzen::new(d, &observations(p, d, &above), &self.tpe);
            let x = tpe::choose(&l, &g, &self.tpe, &mut rng);
            let value = match d {
                Domain::Numeric(n) => n.external(x),
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "choice index"
                )]
                Domain::Categorical(choices) => {
                    choices[(x as usize).min(choices.len() - 1)].clone()
                }
            };
            out.insert(p.name.clone(), value);
        }
        out
    }

    /// Finished trials other than `index`, best first: succeeded ones by objective, then stopped ones
    /// (more steps first, then by their last intermediate value), as Optuna ranks pruned trials.
    fn rank<'a>(&self, index: u32, history: &'a [TrialRecord]) -> Vec<&'a TrialRecord> {
        let mut done: Vec<&TrialRecord> = history
            .iter()
            .filter(|t| t.index != index && t.state == TrialState::Succeeded)
            .filter(|t| t.objective.is_some_and(f64::is_finite))
            .collect();
        done.sort_by(|a, b| {
            let (la, lb) = (
                self.direction.loss(a.objective.unwrap_or(0.0)),
                self.direction.loss(b.objective.unwrap_or(0.0)),
            );
            la.total_cmp(&lb).then(a.index.cmp(&b.index))
        });
        let mut stopped: Vec<&TrialRecord> = history
            .iter()
            .filter(|t| t.index != index && t.state == TrialState::Stopped)
            .collect();
        stopped.sort_by(|a, b| {
            let last = |t: &TrialRecord| {
                t.intermediate
                    .last()
                    .map_or(f64::INFINITY, |v| self.direction.loss(*v))
            };
            b.intermediate
                .len()
                .cmp(&a.intermediate.len())
                .then(last(a).total_cmp(&last(b)))
                .then(a.index.cmp(&b.index))
        });
        // Records can repeat an index (a caller's mistake); keep the first of each.
        let mut seen = BTreeSet::new();
        done.into_iter()
            .chain(stopped)
            .filter(|t| seen.insert(t.index))
            .collect()
    }
}

/// The weighted observations of parameter `p` among `trials` (trials with an unreadable value are skipped).
fn observations(p: &Param, d: &Domain, trials: &[&TrialRecord]) -> Vec<Obs> {
    let values: Vec<f64> = trials
        .iter()
        .filter_map(|t| t.parameters.get(&p.name))
        .filter_map(|v| match d {
            Domain::Numeric(n) => n.parse(v),
            #[allow(clippy::cast_precision_loss, reason = "choice index")]
            Domain::Categorical(choices) => choices.iter().position(|c| c == v).map(|i| i as f64),
        })
        .collect();
    let weights = tpe::weights(values.len());
    values
        .into_iter()
        .zip(weights)
        .map(|(value, weight)| Obs { value, weight })
        .collect()
}
