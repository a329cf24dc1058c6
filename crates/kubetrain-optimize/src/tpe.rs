//! The tree-structured Parzen estimator (TPE), after Optuna's default `TPESampler`.
//!
//! Per parameter (Optuna's default, independent sampling): finished trials are ranked by objective and
//! split at the `gamma` quantile into a good group and a bad group; each group becomes a Parzen
//! estimator (a weighted mixture of truncated normals around the observed values plus a wide prior
//! component; for categorical parameters smoothed frequencies); `n_ei_candidates` values are drawn from
//! the good estimator `l(x)` and the one with the largest `l(x) / g(x)` wins.

use crate::rng::Rng;
use crate::space::{Domain, Numeric};

/// Optuna's defaults.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TpeConfig {
    /// Finished trials before TPE takes over from random sampling.
    pub(crate) n_startup_trials: usize,
    /// Candidates drawn from `l(x)` per parameter.
    pub(crate) n_ei_candidates: usize,
    /// Weight of the prior component.
    pub(crate) prior_weight: f64,
}

/// Optuna's `TPESampler()` defaults.
pub(crate) const DEFAULT: TpeConfig = TpeConfig {
    n_startup_trials: 10,
    n_ei_candidates: 24,
    prior_weight: 1.0,
};

/// Optuna's `default_gamma`: the size of the good group for `n` finished trials.
pub(crate) fn gamma(n: usize) -> usize {
    n.div_ceil(10).min(25)
}

/// Optuna's `default_weights`: older observations weigh less once there are more than 25.
pub(crate) fn weights(n: usize) -> Vec<f64> {
    if n < 25 {
        return vec![1.0; n];
    }
    let ramp = n - 25;
    #[allow(clippy::cast_precision_loss, reason = "trial counts are small")]
    let (nf, rf) = (n as f64, ramp as f64);
    let mut out: Vec<f64> = (0..ramp)
        .map(|i| {
            if ramp == 1 {
                1.0 / nf
            } else {
                #[allow(clippy::cast_precision_loss, reason = "trial counts are small")]
                let t = i as f64 / (rf - 1.0);
                1.0 / nf + t * (1.0 - 1.0 / nf)
            }
        })
        .collect();
    out.extend(std::iter::repeat_n(1.0, 25));
    out
}

/// One observation: its value (internal range, or choice index) and its weight.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Obs {
    pub(crate) value: f64,
    pub(crate) weight: f64,
}

/// A Parzen estimator over one parameter.
#[derive(Debug, Clone)]
pub(crate) enum Parzen {
    Numeric {
        low: f64,
        high: f64,
        mus: Vec<f64>,
        sigmas: Vec<f64>,
        weights: Vec<f64>,
        /// Per component, the part of its log density that does not depend on `x`:
        /// `ln w - ln(sigma sqrt(2 pi)) - ln(mass inside [low, high])` (`-inf` for a zero weight).
        log_coef: Vec<f64>,
    },
    Categorical {
        probs: Vec<f64>,
    },
}

fn normalise(mut w: Vec<f64>) -> Vec<f64> {
    let sum: f64 = w.iter().sum();
    if sum > 0.0 && sum.is_finite() {
        for x in &mut w {
            *x /= sum;
        }
    }
    w
}

impl Parzen {
    /// Builds the estimator of `domain` from observations.
    pub(crate) fn new(domain: &Domain, obs: &[Obs], cfg: &TpeConfig) -> Self {
        match domain {
            Domain::Numeric(n) => Self::numeric(n, obs, cfg),
            Domain::Categorical(choices) => Self::categorical(choices.len(), obs, cfg),
        }
    }

    fn numeric(n: &Numeric, obs: &[Obs], cfg: &TpeConfig) -> Self {
        let (low, high) = n.internal_range();
        let prior_mu = 0.5 * (low + high);
        let mut mus: Vec<f64> = obs.iter().map(|o| o.value).collect();
        mus.push(prior_mu);
        // Bandwidths (Optuna's univariate rule): the larger distance to a neighbour, the range's ends
        // counting as neighbours, except that the outermost kernels look inwards only.
        let mut order: Vec<usize> = (0..mus.len()).collect();
        order.sort_by(|&a, &b| mus[a].total_cmp(&mus[b]));
        let mut ends = Vec::with_capacity(mus.len() + 2);
        ends.push(low);
        ends.extend(order.iter().map(|&i| mus[i]));
        ends.push(high);
        let k = mus.len();
        let mut sorted_sigmas: Vec<f64> = (1..=k)
            .map(|j| (ends[j] - ends[j - 1]).max(ends[j + 1] - ends[j]))
            .collect();
        if ends.len() >= 4 {
            sorted_sigmas[0] = ends[2] - ends[1];
            sorted_sigmas[k - 1] = ends[k] - ends[k - 1];
        }
        let mut sigmas = vec![0.0; k];
        for (rank, &i) in order.iter().enumerate() {
            sigmas[i] = sorted_sigmas[rank];
        }
        let span = high - low;
        #[allow(clippy::cast_precision_loss, reason = "trial counts are small")]
        let min_sigma = span / (1.0 + k as f64).min(100.0);
        for s in &mut sigmas {
            *s = s.clamp(min_sigma, span);
        }
        // The prior component is as wide as the range.
        sigmas[k - 1] = span;
        let mut weights: Vec<f64> = obs.iter().map(|o| o.weight).collect();
        weights.push(cfg.prior_weight);
        let weights = normalise(weights);
        let log_coef = mus
            .iter()
            .zip(&sigmas)
            .zip(&weights)
            .map(|((mu, s), w)| {
                if *w <= 0.0 {
                    return f64::NEG_INFINITY;
                }
                let mass = phi((high - mu) / s) - phi((low - mu) / s);
                w.ln() - (s * (std::f64::consts::TAU).sqrt()).ln() - mass.max(1e-300).ln()
            })
            .collect();
        Self::Numeric {
            low,
            high,
            mus,
            sigmas,
            weights,
            log_coef,
        }
    }

    fn categorical(n_choices: usize, obs: &[Obs], cfg: &TpeConfig) -> Self {
        // Each observation is a kernel putting mass 1 on its choice plus prior_weight / n_kernels on every
        // choice; the prior kernel is uniform. The mixture's marginal is a smoothed frequency.
        #[allow(clippy::cast_precision_loss, reason = "trial counts are small")]
        let smooth = cfg.prior_weight / (obs.len() + 1) as f64;
        #[allow(clippy::cast_precision_loss, reason = "choice counts are small")]
        let row_sum = 1.0 + smooth * n_choices as f64;
        let mut weights: Vec<f64> = obs.iter().map(|o| o.weight).collect();
        weights.push(cfg.prior_weight);
        let weights = normalise(weights);
        #[allow(clippy::cast_precision_loss, reason = "choice counts are small")]
        let uniform = 1.0 / n_choices as f64;
        let mut probs = vec![weights[obs.len()] * uniform; n_choices];
        for (o, w) in obs.iter().zip(&weights) {
            for p in &mut probs {
                *p += w * smooth / row_sum;
            }
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "choice indices"
            )]
            if let Some(p) = probs.get_mut(o.value as usize) {
                *p += w / row_sum;
            }
        }
        Self::Categorical {
            probs: normalise(probs),
        }
    }

    /// A draw from the estimator: an internal value, or a choice index.
    pub(crate) fn sample(&self, rng: &mut Rng) -> f64 {
        match self {
            Self::Numeric {
                low,
                high,
                mus,
                sigmas,
                weights,
                ..
            } => {
                let k = pick(weights, rng);
                truncated_normal(mus[k], sigmas[k], *low, *high, rng)
            }
            #[allow(clippy::cast_precision_loss, reason = "choice indices")]
            Self::Categorical { probs } => pick(probs, rng) as f64,
        }
    }

    /// The log density at `x`.
    pub(crate) fn log_pdf(&self, x: f64) -> f64 {
        match self {
            Self::Numeric {
                mus,
                sigmas,
                log_coef,
                ..
            } => {
                // Log-sum-exp in two passes over the components (no allocation per call).
                let term = |k: usize| {
                    let z = (x - mus[k]) / sigmas[k];
                    log_coef[k] - 0.5 * z * z
                };
                let max = (0..mus.len()).map(term).fold(f64::NEG_INFINITY, f64::max);
                if !max.is_finite() {
                    return max;
                }
                max + (0..mus.len())
                    .map(|k| (term(k) - max).exp())
                    .sum::<f64>()
                    .ln()
            }
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "choice indices"
            )]
            Self::Categorical { probs } => {
                probs.get(x as usize).map_or(f64::NEG_INFINITY, |p| p.ln())
            }
        }
    }
}

/// Index drawn with probability proportional to `weights`.
fn pick(weights: &[f64], rng: &mut Rng) -> usize {
    let total: f64 = weights.iter().sum();
    let mut u = rng.unit() * total;
    for (i, w) in weights.iter().enumerate() {
        if u < *w {
            return i;
        }
        u -= w;
    }
    weights.len().saturating_sub(1)
}

/// A normal draw truncated to `[low, high]`, by rejection (each kernel keeps at least a third of its
/// mass inside the range: its centre is inside and its width at most the range), clamped as a last resort.
fn truncated_normal(mu: f64, sigma: f64, low: f64, high: f64, rng: &mut Rng) -> f64 {
    for _ in 0..1000 {
        let x = mu + sigma * rng.normal();
        if (low..=high).contains(&x) {
            return x;
        }
    }
    mu.clamp(low, high)
}

/// The standard normal CDF.
fn phi(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

/// The complementary error function (Chebyshev fit, relative error below 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// Chooses one parameter's value: `n_ei_candidates` draws from `below`, the best `l(x) / g(x)`.
pub(crate) fn choose(below: &Parzen, above: &Parzen, cfg: &TpeConfig, rng: &mut Rng) -> f64 {
    let mut best = (f64::NEG_INFINITY, f64::NAN);
    for _ in 0..cfg.n_ei_candidates.max(1) {
        let x = below.sample(rng);
        let score = below.log_pdf(x) - above.log_pdf(x);
        if best.1.is_nan() || score > best.0 {
            best = (score, x);
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gamma_and_weights_follow_optuna() {
        assert_eq!(gamma(1), 1);
        assert_eq!(gamma(10), 1);
        assert_eq!(gamma(11), 2);
        assert_eq!(gamma(1000), 25);
        assert_eq!(weights(3), vec![1.0; 3]);
        let w = weights(30);
        assert_eq!(w.len(), 30);
        assert!((w[0] - 1.0 / 30.0).abs() < 1e-12);
        assert!((w[4] - 1.0).abs() < 1e-12);
        assert!(w[25..].iter().all(|x| (*x - 1.0).abs() < 1e-12));
    }

    #[test]
    fn erfc_matches_known_values() {
        assert!((erfc(0.0) - 1.0).abs() < 1e-7);
        assert!((erfc(1.0) - 0.157_299_207).abs() < 1e-7);
        assert!((erfc(-1.0) - 1.842_700_793).abs() < 1e-7);
        assert!((phi(1.96) - 0.975).abs() < 1e-4);
    }

    #[test]
    fn categorical_estimator_prefers_observed_choices() {
        let obs = [
            Obs {
                value: 1.0,
                weight: 1.0,
            },
            Obs {
                value: 1.0,
                weight: 1.0,
            },
        ];
        let p = Parzen::categorical(3, &obs, &DEFAULT);
        let Parzen::Categorical { probs } = p else {
            panic!("categorical")
        };
        assert!((probs.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // Two kernels [1/6, 4/6, 1/6] and the uniform prior, each weighing a third: 5/9 on the observed choice.
        assert!((probs[1] - 5.0 / 9.0).abs() < 1e-12, "{probs:?}");
        assert!((probs[0] - probs[2]).abs() < 1e-12);
    }

    #[test]
    fn numeric_density_integrates_to_one() {
        let n = Numeric {
            min: 0.0,
            max: 10.0,
            log: false,
            ints: None,
        };
        let obs = [
            Obs {
                value: 2.0,
                weight: 1.0,
            },
            Obs {
                value: 9.5,
                weight: 1.0,
            },
        ];
        let p = Parzen::numeric(&n, &obs, &DEFAULT);
        let steps = 10_000;
        let h = 10.0 / f64::from(steps);
        let integral: f64 = (0..steps)
            .map(|i| p.log_pdf((f64::from(i) + 0.5) * h).exp() * h)
            .sum();
        assert!((integral - 1.0).abs() < 1e-3, "{integral}");
    }
}
