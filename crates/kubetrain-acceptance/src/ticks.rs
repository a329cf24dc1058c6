//! "Nice" axis ticks: steps of 1, 2 or 5 times a power of ten on linear axes, every 1st, 2nd or 5th
//! decade on a log axis, and every 1st, 2nd, 5th or 10th power of two on a size axis.

use crate::units;

/// An axis's range and its ticks, in data units.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ticks {
    /// The low end of the axis.
    pub(crate) lo: f64,
    /// The high end of the axis.
    pub(crate) hi: f64,
    /// The ticks, ascending, all within `lo..=hi`.
    pub(crate) values: Vec<f64>,
    /// Decimals that tell every tick apart; `None` on a log axis, where each tick has its own.
    decimals: Option<usize>,
}

impl Ticks {
    /// The label of tick `v`: a fixed-point number with as many decimals as the step needs.
    pub(crate) fn label(&self, v: f64) -> String {
        let own = || (-v.log10().floor()).clamp(0.0, 12.0) as usize;
        units::fixed(v, self.decimals.unwrap_or_else(own))
    }
}

/// The smallest of 1, 2, 5 and 10 times a power of ten that is at least `raw`.
fn nice_step(raw: f64) -> f64 {
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * magnitude)
}

/// `lo..hi` widened to something drawable when it is empty or not finite.
fn sane(lo: f64, hi: f64) -> (f64, f64) {
    let (lo, hi) = match (lo.is_finite(), hi.is_finite()) {
        (true, true) => (lo.min(hi), lo.max(hi)),
        (true, false) => (lo, lo),
        (false, true) => (hi, hi),
        (false, false) => (0.0, 1.0),
    };
    if hi > lo {
        (lo, hi)
    } else if lo == 0.0 {
        (0.0, 1.0)
    } else {
        (lo - lo.abs() / 2.0, hi + hi.abs() / 2.0)
    }
}

/// A linear axis covering `lo..=hi` with at most `max` ticks (at least 2) in 1-2-5 steps; the axis
/// ends on ticks.
pub(crate) fn linear(lo: f64, hi: f64, max: usize) -> Ticks {
    let (lo, hi) = sane(lo, hi);
    let intervals = max.max(2) - 1;
    let mut step = nice_step((hi - lo) / intervals as f64);
    let (mut k0, mut k1) = ((lo / step).floor(), (hi / step).ceil());
    // Aligning both ends to the step can add an interval: take the next nice step then.
    while k1 - k0 > intervals as f64 {
        step = nice_step(step * 1.000_001);
        (k0, k1) = ((lo / step).floor(), (hi / step).ceil());
    }
    let values: Vec<f64> = (k0 as i64..=k1 as i64).map(|k| k as f64 * step).collect();
    Ticks {
        lo: k0 * step,
        hi: k1 * step,
        values,
        decimals: Some((-step.log10().floor()).max(0.0) as usize),
    }
}

/// The first of 1, 2, 5, 10 (exponents per tick) that gives at most `max` ticks over `span` exponents.
fn stride(span: i64, max: usize) -> i64 {
    [1, 2, 5, 10]
        .into_iter()
        .find(|s| span / s < max as i64)
        .unwrap_or(((span / max.max(2) as i64) + 1).max(10))
}

/// A log-10 axis covering the positive `lo..=hi`, ending on decades; ticks at every 1st, 2nd or 5th
/// decade (at most `max`), with 2 and 5 between decades when the data spans under two.
pub(crate) fn log10(lo: f64, hi: f64, max: usize) -> Ticks {
    let (lo, hi) = sane(lo.max(f64::MIN_POSITIVE), hi.max(f64::MIN_POSITIVE));
    let lo = lo.max(f64::MIN_POSITIVE);
    let (e0, mut e1) = (lo.log10().floor() as i64, hi.log10().ceil() as i64);
    if e1 == e0 {
        e1 += 1;
    }
    let s = stride(e1 - e0, max);
    let (e0, e1) = (e0.div_euclid(s) * s, -((-e1).div_euclid(s)) * s);
    let mut values = Vec::new();
    for e in (e0..=e1).step_by(s as usize) {
        let decade = 10f64.powi(e as i32);
        values.push(decade);
        if e1 - e0 <= 2 && e < e1 {
            values.extend([2.0 * decade, 5.0 * decade]);
        }
    }
    Ticks {
        lo: 10f64.powi(e0 as i32),
        hi: 10f64.powi(e1 as i32),
        values,
        decimals: None,
    }
}

/// A log-2 size axis from the power of two at or below `lo` to the one at or above `hi` (bytes, at
/// least 1), with ticks on every 1st, 2nd, 5th or 10th power of two inside it (at most `max`).
pub(crate) fn log2(lo: f64, hi: f64, max: usize) -> Ticks {
    let (lo, hi) = sane(lo.max(1.0), hi.max(1.0));
    let (e0, mut e1) = (lo.max(1.0).log2().floor() as i64, hi.log2().ceil() as i64);
    if e1 == e0 {
        e1 += 1;
    }
    let s = stride(e1 - e0, max);
    let first = -((-e0).div_euclid(s)) * s;
    let values = (first..=e1)
        .step_by(s as usize)
        .map(|e| 2f64.powi(e as i32))
        .collect();
    Ticks {
        lo: 2f64.powi(e0 as i32),
        hi: 2f64.powi(e1 as i32),
        values,
        decimals: Some(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(t: &Ticks) -> Vec<String> {
        t.values.iter().map(|v| t.label(*v)).collect()
    }

    #[test]
    fn linear_ticks_step_by_1_2_or_5() {
        for (lo, hi, max, want) in [
            (0.0, 0.712, 6, vec!["0.0", "0.2", "0.4", "0.6", "0.8"]),
            (0.0, 60.0, 6, vec!["0", "20", "40", "60"]),
            (
                0.101,
                15.43,
                9,
                vec!["0", "2", "4", "6", "8", "10", "12", "14", "16"],
            ),
            (
                0.0,
                200_153.0,
                6,
                vec!["0", "50,000", "100,000", "150,000", "200,000", "250,000"],
            ),
            (
                0.0,
                0.002_02,
                6,
                vec!["0.0000", "0.0005", "0.0010", "0.0015", "0.0020", "0.0025"],
            ),
            (5.0, 5.0, 6, vec!["2", "4", "6", "8"]),
            (0.0, 0.0, 6, vec!["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]),
            (
                f64::NAN,
                f64::INFINITY,
                6,
                vec!["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"],
            ),
        ] {
            let t = linear(lo, hi, max);
            assert_eq!(labels(&t), want, "{lo}..{hi}");
            assert!(t.values.len() <= max.max(2) + 1, "{lo}..{hi}: {t:?}");
            assert!(t.lo <= lo.min(hi) || !lo.is_finite(), "{t:?}");
            assert!(t.hi >= hi.max(lo) || !hi.is_finite(), "{t:?}");
        }
    }

    #[test]
    fn log10_ticks_are_decades_and_never_scientific() {
        let t = log10(3.4e-5, 38.01, 8);
        assert_eq!(
            labels(&t),
            [
                "0.00001", "0.0001", "0.001", "0.01", "0.1", "1", "10", "100"
            ]
        );
        assert_eq!(t.values.len(), 8, "{t:?}");
        assert_eq!((t.lo, t.hi), (1e-5, 100.0));
        // Under two decades: 1, 2 and 5 between.
        let t = log10(1.5, 40.0, 8);
        assert_eq!(t.values, vec![1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]);
        // Twelve decades with at most 8 ticks: every 2nd.
        let t = log10(1e-9, 1e3, 8);
        assert!(t.values.len() <= 8, "{t:?}");
        assert!(labels(&t).iter().all(|l| !l.contains('e')), "{t:?}");
    }

    #[test]
    fn log2_size_ticks_are_powers_of_two() {
        let t = log2(8.0, 4_194_304.0, 10);
        let sizes: Vec<String> = t.values.iter().map(|v| units::bytes(*v as u64)).collect();
        assert_eq!(
            sizes,
            [
                "16 B", "64 B", "256 B", "1 KiB", "4 KiB", "16 KiB", "64 KiB", "256 KiB", "1 MiB",
                "4 MiB"
            ]
        );
        assert_eq!((t.lo, t.hi), (8.0, 4_194_304.0));
        assert_eq!(log2(1.0, 1.0, 10).values, vec![1.0, 2.0]);
        assert_eq!(log2(0.0, 0.0, 10).values, vec![1.0, 2.0]);
    }
}
