//! Early stopping: Optuna's `MedianPruner` over a trial's intermediate values.

use serde::{Deserialize, Serialize};

use crate::study::{Direction, TrialRecord, TrialState};

/// A rule that ends trials unlikely to win.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EarlyStopping {
    /// Optuna's `MedianPruner`: stop a trial whose best intermediate value so far is worse than the
    /// median of the succeeded trials' values at the same step.
    Median {
        /// Succeeded trials needed before any trial is stopped (Optuna's `n_startup_trials`).
        min_trials: u32,
        /// Steps a trial runs before it can be stopped (Optuna's `n_warmup_steps`): a trial whose
        /// latest step (0-based) is below this is never stopped.
        warmup_steps: usize,
    },
}

impl EarlyStopping {
    /// Optuna's `MedianPruner()` defaults: 5 succeeded trials, no warm-up.
    pub const fn median() -> Self {
        Self::Median {
            min_trials: 5,
            warmup_steps: 0,
        }
    }

    /// Whether `trial` should stop now, given the other trials in `history`.
    ///
    /// `trial.intermediate[step]` is the objective reported at `step`; the latest step is the last one.
    /// A trial with no intermediate values, or without `min_trials` succeeded trials to compare against,
    /// or with no succeeded trial that reported the same step, carries on. A NaN best value stops it.
    pub fn should_stop(
        &self,
        trial: &TrialRecord,
        history: &[TrialRecord],
        direction: Direction,
    ) -> bool {
        let Self::Median {
            min_trials,
            warmup_steps,
        } = *self;
        let Some(step) = trial.intermediate.len().checked_sub(1) else {
            return false;
        };
        if step < warmup_steps {
            return false;
        }
        let completed: Vec<&TrialRecord> = history
            .iter()
            .filter(|t| t.state == TrialState::Succeeded && t.index != trial.index)
            .collect();
        if completed.len() < min_trials as usize {
            return false;
        }
        let best = best_so_far(&trial.intermediate, direction);
        if best.is_nan() {
            return true;
        }
        let mut at_step: Vec<f64> = completed
            .iter()
            .filter_map(|t| t.intermediate.get(step).copied())
            .filter(|v| !v.is_nan())
            .collect();
        let Some(median) = median(&mut at_step) else {
            return false;
        };
        match direction {
            Direction::Minimize => best > median,
            Direction::Maximize => best < median,
        }
    }
}

/// The best of a trial's intermediate values, ignoring NaNs (NaN when all are NaN).
fn best_so_far(values: &[f64], direction: Direction) -> f64 {
    let finite = values.iter().copied().filter(|v| !v.is_nan());
    match direction {
        Direction::Minimize => finite.fold(f64::NAN, f64::min),
        Direction::Maximize => finite.fold(f64::NAN, f64::max),
    }
}

/// The median with linear interpolation (numpy's `percentile(.., 50)`).
fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        0.5 * (values[n / 2 - 1] + values[n / 2])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(index: u32, intermediate: &[f64]) -> TrialRecord {
        TrialRecord {
            index,
            parameters: Default::default(),
            objective: intermediate.last().copied(),
            state: TrialState::Succeeded,
            intermediate: intermediate.to_vec(),
        }
    }

    fn running(index: u32, intermediate: &[f64]) -> TrialRecord {
        TrialRecord {
            state: TrialState::Running,
            objective: None,
            ..done(index, intermediate)
        }
    }

    #[test]
    #[allow(clippy::too_many_lines, reason = "a table test, one case per row")]
    fn median_stopping_table() {
        let history: Vec<TrialRecord> = (0..5)
            .map(|i| done(i, &[f64::from(i), f64::from(i)]))
            .collect();
        // Step 0 values of the succeeded trials: 0 1 2 3 4, median 2.
        let rule = EarlyStopping::Median {
            min_trials: 5,
            warmup_steps: 0,
        };
        type Case<'a> = (
            &'a str,
            EarlyStopping,
            &'a [TrialRecord],
            &'a [f64],
            Direction,
            bool,
        );
        let cases: &[Case] = &[
            (
                "worse than the median",
                rule,
                &history,
                &[2.5],
                Direction::Minimize,
                true,
            ),
            (
                "equal to the median",
                rule,
                &history,
                &[2.0],
                Direction::Minimize,
                false,
            ),
            (
                "better than the median",
                rule,
                &history,
                &[1.0],
                Direction::Minimize,
                false,
            ),
            (
                "best so far counts, not the latest",
                rule,
                &history,
                &[1.0, 9.0],
                Direction::Minimize,
                false,
            ),
            (
                "maximise: below the median",
                rule,
                &history,
                &[1.5],
                Direction::Maximize,
                true,
            ),
            (
                "maximise: above the median",
                rule,
                &history,
                &[3.0],
                Direction::Maximize,
                false,
            ),
            (
                "no intermediate values",
                rule,
                &history,
                &[],
                Direction::Minimize,
                false,
            ),
            (
                "too few succeeded trials",
                rule,
                &history[..4],
                &[9.0],
                Direction::Minimize,
                false,
            ),
            (
                "in warm-up",
                EarlyStopping::Median {
                    min_trials: 5,
                    warmup_steps: 2,
                },
                &history,
                &[9.0, 9.0],
                Direction::Minimize,
                false,
            ),
            (
                "after warm-up",
                EarlyStopping::Median {
                    min_trials: 5,
                    warmup_steps: 1,
                },
                &history,
                &[9.0, 9.0],
                Direction::Minimize,
                true,
            ),
            (
                "no trial reached this step",
                rule,
                &history,
                &[9.0, 9.0, 9.0],
                Direction::Minimize,
                false,
            ),
            (
                "NaN only",
                rule,
                &history,
                &[f64::NAN],
                Direction::Minimize,
                true,
            ),
        ];
        for (name, rule, history, values, direction, want) in cases {
            let trial = running(99, values);
            assert_eq!(
                rule.should_stop(&trial, history, *direction),
                *want,
                "{name}"
            );
        }
    }

    #[test]
    fn even_counts_interpolate_and_others_are_ignored() {
        let mut history: Vec<TrialRecord> = (0..4).map(|i| done(i, &[f64::from(i)])).collect();
        history.push(running(10, &[-100.0]));
        history.push(TrialRecord {
            state: TrialState::Failed,
            ..done(11, &[-100.0])
        });
        let rule = EarlyStopping::Median {
            min_trials: 4,
            warmup_steps: 0,
        };
        // Median of 0 1 2 3 is 1.5; the running and failed trials do not count.
        assert!(rule.should_stop(&running(20, &[1.6]), &history, Direction::Minimize));
        assert!(!rule.should_stop(&running(20, &[1.5]), &history, Direction::Minimize));
        // A succeeded trial is not compared with itself.
        let rule5 = EarlyStopping::Median {
            min_trials: 5,
            warmup_steps: 0,
        };
        history.push(done(4, &[4.0]));
        assert!(!rule5.should_stop(&history[6].clone(), &history, Direction::Minimize));
        assert_eq!(EarlyStopping::median(), rule5);
    }
}
