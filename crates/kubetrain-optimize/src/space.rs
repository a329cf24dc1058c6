//! Parameters, their search spaces, and how values are drawn, formatted and enumerated.

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::rng::Rng;

/// How many points a grid search takes from a `Float` range: both ends and evenly spaced points between
/// them (evenly spaced in log space for [`Space::LogUniform`]). `Int` ranges contribute every integer and
/// categorical parameters every choice.
pub const FLOAT_GRID_POINTS: u64 = 5;

/// Integer bounds are kept within the range an `f64` represents exactly.
const MAX_EXACT_INT: f64 = 9_007_199_254_740_992.0;

/// Where a parameter's values come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Space {
    /// Uniform over `[min, max]`; with `int`, the integers in that range.
    Uniform {
        /// Lower bound (inclusive).
        min: f64,
        /// Upper bound (inclusive for integers).
        max: f64,
        /// Draw integers (upstream's `type: Int`).
        int: bool,
    },
    /// Uniform in log space over `[min, max]` (`min > 0`); with `int`, rounded to integers.
    LogUniform {
        /// Lower bound (inclusive, positive).
        min: f64,
        /// Upper bound (inclusive for integers).
        max: f64,
        /// Draw integers (upstream's `type: Int`).
        int: bool,
    },
    /// One of these strings.
    Categorical(Vec<String>),
}

/// One named hyperparameter and its search space.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Param {
    /// The name (the trial sees it as `KUBEFLOW_TRAINER_OPT_<NAME>`).
    pub name: String,
    /// Where its values come from.
    pub space: Space,
}

impl Param {
    /// A parameter named `name` over `space`.
    pub fn new(name: impl Into<String>, space: Space) -> Self {
        Self {
            name: name.into(),
            space,
        }
    }
}

/// A numeric space after validation: bounds, integer range and log flag.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Numeric {
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) log: bool,
    /// `Some((lo, hi))`: integers only, `lo..=hi`.
    pub(crate) ints: Option<(i64, i64)>,
}

/// A validated space.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Domain {
    Numeric(Numeric),
    Categorical(Vec<String>),
}

fn invalid(name: &str, reason: impl Into<String>) -> Error {
    Error::InvalidParameter {
        name: name.to_owned(),
        reason: reason.into(),
    }
}

#[allow(
    clippy::cast_possible_truncation,
    reason = "bounds are checked against MAX_EXACT_INT first"
)]
fn numeric(name: &str, min: f64, max: f64, int: bool, log: bool) -> Result<Numeric, Error> {
    if !min.is_finite() || !max.is_finite() {
        return Err(invalid(
            name,
            format!("min ({min}) and max ({max}) must be finite numbers"),
        ));
    }
    if min >= max {
        return Err(invalid(
            name,
            format!("min ({min}) must be less than max ({max})"),
        ));
    }
    if log && min <= 0.0 {
        return Err(invalid(
            name,
            format!(
                "a logUniform space needs min > 0 (got {min}); use uniform for ranges that reach 0"
            ),
        ));
    }
    let ints = if int {
        if min.abs() > MAX_EXACT_INT || max.abs() > MAX_EXACT_INT {
            return Err(invalid(name, "integer bounds must lie within ±2^53"));
        }
        let (lo, hi) = (min.ceil() as i64, max.floor() as i64);
        if lo > hi {
            return Err(invalid(
                name,
                format!(
                    "no integer lies between min ({min}) and max ({max}): widen the range or use type Float"
                ),
            ));
        }
        if lo == hi {
            return Err(invalid(
                name,
                format!(
                    "only one integer ({lo}) lies between min ({min}) and max ({max}): widen the range"
                ),
            ));
        }
        Some((lo, hi))
    } else {
        None
    };
    Ok(Numeric {
        min,
        max,
        log,
        ints,
    })
}

impl Space {
    /// Floats uniform over `[min, max]`.
    pub fn uniform(min: f64, max: f64) -> Self {
        Self::Uniform {
            min,
            max,
            int: false,
        }
    }

    /// Integers uniform over `min..=max`.
    pub fn int_uniform(min: i64, max: i64) -> Self {
        #[allow(
            clippy::cast_precision_loss,
            reason = "validation rejects bounds past 2^53"
        )]
        Self::Uniform {
            min: min as f64,
            max: max as f64,
            int: true,
        }
    }

    /// Floats log-uniform over `[min, max]`.
    pub fn log_uniform(min: f64, max: f64) -> Self {
        Self::LogUniform {
            min,
            max,
            int: false,
        }
    }

    /// Integers log-uniform over `min..=max`.
    pub fn int_log_uniform(min: i64, max: i64) -> Self {
        #[allow(
            clippy::cast_precision_loss,
            reason = "validation rejects bounds past 2^53"
        )]
        Self::LogUniform {
            min: min as f64,
            max: max as f64,
            int: true,
        }
    }

    /// One of `choices`.
    pub fn categorical<I, S>(choices: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::Categorical(choices.into_iter().map(Into::into).collect())
    }

    /// Checks the space for parameter `name`.
    pub(crate) fn domain(&self, name: &str) -> Result<Domain, Error> {
        match self {
            Self::Uniform { min, max, int } => {
                numeric(name, *min, *max, *int, false).map(Domain::Numeric)
            }
            Self::LogUniform { min, max, int } => {
                numeric(name, *min, *max, *int, true).map(Domain::Numeric)
            }
            Self::Categorical(choices) => {
                if choices.is_empty() {
                    return Err(invalid(
                        name,
                        "a categorical space needs at least one choice",
                    ));
                }
                for (i, choice) in choices.iter().enumerate() {
                    if choices[..i].contains(choice) {
                        return Err(invalid(
                            name,
                            format!("choice {choice:?} is listed twice: list each choice once"),
                        ));
                    }
                }
                Ok(Domain::Categorical(choices.clone()))
            }
        }
    }

    /// Whether `value` (as [`Study::suggest`](crate::Study::suggest) formats it) lies in this space.
    pub fn contains(&self, value: &str) -> bool {
        match self.domain("") {
            Ok(Domain::Categorical(choices)) => choices.iter().any(|c| c == value),
            Ok(Domain::Numeric(n)) => n.parse(value).is_some(),
            Err(_) => false,
        }
    }
}

/// Formats a float as the shortest string that reads back to the same value.
pub(crate) fn format_float(x: f64) -> String {
    format!("{x}")
}

impl Numeric {
    /// The transformed range a sampler works in: log space for log ranges, and for integers widened by
    /// half a step each side so that rounding gives every integer its share.
    pub(crate) fn internal_range(&self) -> (f64, f64) {
        #[allow(clippy::cast_precision_loss, reason = "bounds are within 2^53")]
        let (lo, hi) = match self.ints {
            Some((lo, hi)) => (
                (lo as f64 - 0.5).max(if self.log { 0.5 } else { f64::MIN }),
                hi as f64 + 0.5,
            ),
            None => (self.min, self.max),
        };
        if self.log {
            (lo.ln(), hi.ln())
        } else {
            (lo, hi)
        }
    }

    /// Maps a value in the internal range back to a formatted value.
    #[allow(
        clippy::cast_possible_truncation,
        reason = "clamped to the integer range first"
    )]
    pub(crate) fn external(&self, internal: f64) -> String {
        let x = if self.log { internal.exp() } else { internal };
        match self.ints {
            #[allow(clippy::cast_precision_loss, reason = "bounds are within 2^53")]
            Some((lo, hi)) => (x.round().clamp(lo as f64, hi as f64) as i64).to_string(),
            None => format_float(x.clamp(self.min, self.max)),
        }
    }

    /// Reads a formatted value back into the internal range, or `None` when it is not in the space.
    pub(crate) fn parse(&self, value: &str) -> Option<f64> {
        let x = match self.ints {
            Some((lo, hi)) => {
                let v: i64 = value.trim().parse().ok()?;
                if v < lo || v > hi {
                    return None;
                }
                #[allow(clippy::cast_precision_loss, reason = "bounds are within 2^53")]
                let v = v as f64;
                v
            }
            None => {
                let v: f64 = value.trim().parse().ok()?;
                if !(self.min..=self.max).contains(&v) {
                    return None;
                }
                v
            }
        };
        Some(if self.log { x.ln() } else { x })
    }

    /// A uniform draw (in the internal measure), formatted.
    pub(crate) fn sample(&self, rng: &mut Rng) -> String {
        if let (Some((lo, hi)), false) = (self.ints, self.log) {
            let n = hi.abs_diff(lo) + 1;
            return lo.saturating_add_unsigned(rng.below(n)).to_string();
        }
        let (a, b) = self.internal_range();
        self.external(a + rng.unit() * (b - a))
    }

    /// How many grid points the range contributes.
    pub(crate) fn grid_len(&self) -> u64 {
        match self.ints {
            Some((lo, hi)) => hi.abs_diff(lo).saturating_add(1),
            None => FLOAT_GRID_POINTS,
        }
    }

    /// The `i`-th grid point (`i < grid_len()`), ascending.
    pub(crate) fn grid_point(&self, i: u64) -> String {
        if let Some((lo, _)) = self.ints {
            return lo.saturating_add_unsigned(i).to_string();
        }
        let (a, b) = if self.log {
            (self.min.ln(), self.max.ln())
        } else {
            (self.min, self.max)
        };
        #[allow(clippy::cast_precision_loss, reason = "small counts")]
        let t = i as f64 / (FLOAT_GRID_POINTS - 1) as f64;
        let x = a + t * (b - a);
        let x = if self.log { x.exp() } else { x };
        // Interior points to 12 significant digits, so that a decade grid reads 0.001, 0.01, 0.1.
        let x = if i == 0 {
            self.min
        } else if i + 1 == FLOAT_GRID_POINTS {
            self.max
        } else {
            format!("{x:.11e}").parse().unwrap_or(x)
        };
        format_float(x.clamp(self.min, self.max))
    }
}

impl Domain {
    /// A uniform draw.
    pub(crate) fn sample(&self, rng: &mut Rng) -> String {
        match self {
            Self::Numeric(n) => n.sample(rng),
            Self::Categorical(choices) => {
                let i = usize::try_from(rng.below(choices.len() as u64)).unwrap_or(0);
                choices[i].clone()
            }
        }
    }

    /// How many grid points the parameter contributes.
    pub(crate) fn grid_len(&self) -> u64 {
        match self {
            Self::Numeric(n) => n.grid_len(),
            Self::Categorical(choices) => choices.len() as u64,
        }
    }

    /// The `i`-th grid point.
    pub(crate) fn grid_point(&self, i: u64) -> String {
        match self {
            Self::Numeric(n) => n.grid_point(i),
            Self::Categorical(choices) => choices[usize::try_from(i).unwrap_or(0)].clone(),
        }
    }
}
