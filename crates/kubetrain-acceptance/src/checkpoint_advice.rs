//! The checkpoint interval that costs least (Young 1974, Daly 2006), as pure functions.
//!
//! # The model
//!
//! - Interruptions (spot reclaims, lost nodes) arrive as a Poisson process, independently per node, at
//!   `r` per node-hour; synchronous data-parallel training stops when any of its `n` nodes goes, so the job
//!   sees `λ = r·n` interruptions per hour and a mean time between them of `M = 1/λ`.
//! - A checkpoint blocks training for `C` seconds (the measured write time); the trainer computes for `τ`
//!   seconds between two checkpoints (the interval).
//! - After an interruption the job restarts in `R` seconds (the measured restore time, else 0) and redoes
//!   the work since its last checkpoint.
//!
//! Daly's model (exponential failures, failures also during checkpoints and restarts) gives the expected
//! wall time per second of useful work, `W(τ) = M·e^{R/M}·(e^{(τ+C)/M} − 1) / τ`. The share of wall time lost
//! is `ℓ(τ) = 1 − 1/W(τ)` (checkpoint overhead plus rework plus restarts); a week of the job on `g` GPUs loses
//! `168·g·ℓ(τ)` GPU-hours. [`optimal_interval`] minimises `W` numerically (`W` is unimodal in `τ`);
//! Young's `√(2·C·M)` is its first-order answer when `C ≪ M`, and Daly's
//! `√(2·C·M)·(1 + ⅓·√(C/2M) + ⅑·C/2M) − C` (for `C < 2M`, else `M`) the higher-order one; both are reported
//! beside it.
//!
//! Assumptions the numbers inherit: interruptions are memoryless and independent across nodes; a node's
//! interruption stops the whole job (no elastic shrink); the checkpoint blocks training (no async write);
//! the write and restore times measured in the run are the typical ones.

use serde::Serialize;

/// Hours in a week.
const WEEK_HOURS: f64 = 168.0;
/// The shortest interval considered, seconds.
const MIN_INTERVAL: f64 = 0.01;
/// The longest interval considered, seconds (~31 years: beyond, a checkpoint is never needed).
const MAX_INTERVAL: f64 = 1e9;

/// What the advice is computed from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Inputs {
    /// Interruptions per node-hour (`r`), > 0.
    pub interruptions_per_node_hour: f64,
    /// Nodes of the job (`n`), ≥ 1.
    pub nodes: u32,
    /// GPUs per node (lost GPU-hours count `n × this`; 0 counts node-hours instead).
    pub gpus_per_node: u32,
    /// Seconds one checkpoint blocks training (`C`), ≥ 0.
    pub checkpoint_seconds: f64,
    /// Seconds from an interruption until training runs again (`R`), ≥ 0.
    pub restart_seconds: f64,
    /// Seconds of training between checkpoints now (`τ`), > 0.
    pub current_interval_seconds: f64,
    /// Price of one GPU-hour (0: no cost figures).
    pub gpu_hour_price: f64,
}

/// A value at the current and at the optimal interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AtEach {
    /// At the current interval.
    pub current: f64,
    /// At the optimal interval.
    pub optimal: f64,
}

/// The advice (`checkpointAdvice` in `acceptance.json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Advice {
    /// The interval between checkpoints now, seconds of training.
    pub current_interval_seconds: f64,
    /// The interval that minimises the expected loss (Daly's exponential model, solved numerically).
    pub optimal_interval_seconds: f64,
    /// Young's first-order interval `√(2·C·M)`.
    pub young_interval_seconds: f64,
    /// Daly's higher-order interval.
    pub daly_interval_seconds: f64,
    /// The job's mean time between interruptions `M`, seconds.
    pub mtbf_seconds: f64,
    /// The checkpoint write time `C`, seconds.
    pub checkpoint_seconds: f64,
    /// The restart time `R`, seconds.
    pub restart_seconds: f64,
    /// Interruptions per node-hour, as given.
    pub interruptions_per_node_hour: f64,
    /// Nodes of the job.
    pub nodes: u32,
    /// Share of wall time lost (overhead, rework, restarts) at each interval.
    pub lost_share: AtEach,
    /// Expected GPU-hours lost per week of the job at each interval.
    pub lost_gpu_hours_per_week: AtEach,
    /// Their price per week (`gpuHour` × lost GPU-hours), when a price is given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_cost_per_week: Option<AtEach>,
    /// The model, in one line.
    pub model: String,
}

/// Why no advice can be given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdviceError {
    /// An input is out of its range.
    #[error("{field}: {message}")]
    Input {
        /// The input's name.
        field: &'static str,
        /// What is wrong and what is expected.
        message: String,
    },
}

fn input(field: &'static str, message: String) -> AdviceError {
    AdviceError::Input { field, message }
}

impl Inputs {
    fn check(&self) -> Result<(), AdviceError> {
        let r = self.interruptions_per_node_hour;
        if !r.is_finite() || r <= 0.0 {
            return Err(input(
                "interruptionsPerNodeHour",
                format!("{r} must be a number > 0 (e.g. 0.05 for one reclaim per 20 node-hours)"),
            ));
        }
        if self.nodes == 0 {
            return Err(input("nodes", "must be at least 1".into()));
        }
        for (field, v) in [
            ("checkpointSeconds", self.checkpoint_seconds),
            ("restartSeconds", self.restart_seconds),
            ("gpuHourPrice", self.gpu_hour_price),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(input(field, format!("{v} must be a number ≥ 0")));
            }
        }
        let t = self.current_interval_seconds;
        if !t.is_finite() || t <= 0.0 {
            return Err(input(
                "currentIntervalSeconds",
                format!("{t} must be a number > 0"),
            ));
        }
        Ok(())
    }

    /// The job's mean time between interruptions, seconds.
    pub fn mtbf_seconds(&self) -> f64 {
        3600.0 / (self.interruptions_per_node_hour * f64::from(self.nodes))
    }
}

/// Daly's expected wall time per second of useful work at interval `tau` (≥ 1; 1 is no loss).
pub fn wall_per_work(tau: f64, checkpoint: f64, restart: f64, mtbf: f64) -> f64 {
    // expm1 keeps precision when (τ + C) ≪ M; the first-order expansion is 1 + C/τ + (τ + C)/2M.
    (mtbf * (restart / mtbf).exp() * ((tau + checkpoint) / mtbf).exp_m1()) / tau
}

/// `ln W(τ)`, finite where `W` itself overflows (a checkpoint or restart far longer than `M`).
pub fn ln_wall_per_work(tau: f64, checkpoint: f64, restart: f64, mtbf: f64) -> f64 {
    let x = (tau + checkpoint) / mtbf;
    // ln(eˣ − 1): directly while small, as x + ln(1 − e⁻ˣ) when eˣ would overflow.
    let ln_expm1 = if x < 30.0 {
        x.exp_m1().ln()
    } else {
        x + (-(-x).exp()).ln_1p()
    };
    mtbf.ln() + restart / mtbf + ln_expm1 - tau.ln()
}

/// The share of wall time lost at interval `tau`: `1 − 1/W(τ)`.
pub fn lost_share(tau: f64, checkpoint: f64, restart: f64, mtbf: f64) -> f64 {
    (-(-ln_wall_per_work(tau, checkpoint, restart, mtbf)).exp_m1()).clamp(0.0, 1.0)
}

/// Young's interval `√(2·C·M)`.
pub fn young_interval(checkpoint: f64, mtbf: f64) -> f64 {
    (2.0 * checkpoint * mtbf).sqrt()
}

/// Daly's higher-order interval: `√(2·C·M)·(1 + ⅓·√(C/2M) + ⅑·C/2M) − C` for `C < 2M`, else `M`.
pub fn daly_interval(checkpoint: f64, mtbf: f64) -> f64 {
    if checkpoint >= 2.0 * mtbf {
        return mtbf;
    }
    let x = checkpoint / (2.0 * mtbf);
    ((2.0 * checkpoint * mtbf).sqrt() * (1.0 + x.sqrt() / 3.0 + x / 9.0) - checkpoint)
        .max(MIN_INTERVAL)
}

/// The interval minimising [`wall_per_work`]: golden-section search of `ln W` over `ln τ` (W is unimodal in τ,
/// hence in `ln τ`), within `[0.01 s, min(100·M, 10⁹ s)]`.
pub fn optimal_interval(checkpoint: f64, restart: f64, mtbf: f64) -> f64 {
    let f = |ln_tau: f64| ln_wall_per_work(ln_tau.exp(), checkpoint, restart, mtbf);
    let (mut a, mut b) = (MIN_INTERVAL.ln(), (100.0 * mtbf).min(MAX_INTERVAL).ln());
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    let (mut c, mut d) = (b - phi * (b - a), a + phi * (b - a));
    let (mut fc, mut fd) = (f(c), f(d));
    for _ in 0..200 {
        if (b - a).abs() < 1e-12 {
            break;
        }
        if fc <= fd {
            (b, d, fd) = (d, c, fc);
            c = b - phi * (b - a);
            fc = f(c);
        } else {
            (a, c, fc) = (c, d, fd);
            d = a + phi * (b - a);
            fd = f(d);
        }
    }
    let best = if fc <= fd { c } else { d };
    best.exp()
}

/// The advice for `inputs`.
///
/// # Errors
///
/// [`AdviceError::Input`] naming the input out of range.
pub fn advise(inputs: &Inputs) -> Result<Advice, AdviceError> {
    inputs.check()?;
    let (c, r, m) = (
        inputs.checkpoint_seconds,
        inputs.restart_seconds,
        inputs.mtbf_seconds(),
    );
    let current = inputs.current_interval_seconds;
    let mut optimal = optimal_interval(c, r, m);
    // The search resolves the optimum to far below a second; the current interval can only be as good.
    if ln_wall_per_work(current, c, r, m) <= ln_wall_per_work(optimal, c, r, m) {
        optimal = current;
    }
    let lost_share = AtEach {
        current: lost_share(current, c, r, m),
        optimal: lost_share(optimal, c, r, m),
    };
    let gpus = f64::from(inputs.nodes) * f64::from(inputs.gpus_per_node.max(1));
    let lost_gpu_hours_per_week = AtEach {
        current: WEEK_HOURS * gpus * lost_share.current,
        optimal: WEEK_HOURS * gpus * lost_share.optimal,
    };
    let lost_cost_per_week = (inputs.gpu_hour_price > 0.0).then_some(AtEach {
        current: lost_gpu_hours_per_week.current * inputs.gpu_hour_price,
        optimal: lost_gpu_hours_per_week.optimal * inputs.gpu_hour_price,
    });
    Ok(Advice {
        current_interval_seconds: current,
        optimal_interval_seconds: optimal,
        young_interval_seconds: young_interval(c, m),
        daly_interval_seconds: daly_interval(c, m),
        mtbf_seconds: m,
        checkpoint_seconds: c,
        restart_seconds: r,
        interruptions_per_node_hour: inputs.interruptions_per_node_hour,
        nodes: inputs.nodes,
        lost_share,
        lost_gpu_hours_per_week,
        lost_cost_per_week,
        model: "Daly 2006: W(τ) = M·e^(R/M)·(e^((τ+C)/M) − 1)/τ, M = 1/(interruptions per node-hour × nodes); \
lost = 168 h × GPUs × (1 − 1/W)"
            .into(),
    })
}

/// The advice for a run of `plan` whose training step measured `training` (`samplesPerSecond`,
/// `samplesPerStep`, `checkpointWriteMsMean`) and whose restore took `restore_seconds`: the current interval
/// is `everySteps × samplesPerStep / samplesPerSecond`. `None` without an interruption rate in the plan, or
/// when the run measured no throughput or no checkpoint.
pub(crate) fn from_run(
    plan: &crate::plan::Plan,
    training: &serde_json::Value,
    restore_seconds: Option<f64>,
) -> Option<Advice> {
    let rate = plan.spec.checkpoint.interruption_rate_per_node_hour?;
    let number = |key: &str| training.get(key).and_then(serde_json::Value::as_f64);
    let samples_per_second = number("samplesPerSecond").filter(|v| *v > 0.0)?;
    let samples_per_step = number("samplesPerStep").filter(|v| *v > 0.0)?;
    let write_ms = number("checkpointWriteMsMean").filter(|v| v.is_finite() && *v >= 0.0)?;
    let every = plan.spec.checkpoint.every_steps as f64;
    let inputs = Inputs {
        interruptions_per_node_hour: rate,
        nodes: u32::try_from(plan.num_nodes()).unwrap_or(u32::MAX),
        gpus_per_node: plan.spec.cost.gpus_per_node,
        checkpoint_seconds: write_ms / 1000.0,
        restart_seconds: restore_seconds
            .filter(|s| s.is_finite() && *s >= 0.0)
            .unwrap_or(0.0),
        current_interval_seconds: every * samples_per_step / samples_per_second,
        gpu_hour_price: plan.spec.cost.gpu_hour,
    };
    advise(&inputs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn inputs(rate: f64, nodes: u32, c: f64, current: f64) -> Inputs {
        Inputs {
            interruptions_per_node_hour: rate,
            nodes,
            gpus_per_node: 8,
            checkpoint_seconds: c,
            restart_seconds: 60.0,
            current_interval_seconds: current,
            gpu_hour_price: 2.0,
        }
    }

    #[test]
    fn young_and_daly_agree_when_checkpoints_are_cheap() {
        // 4 nodes at 0.05/node-hour: M = 5 h = 18000 s; C = 30 s.
        let a = advise(&inputs(0.05, 4, 30.0, 600.0)).unwrap();
        assert!((a.mtbf_seconds - 18_000.0).abs() < 1e-6);
        assert!((a.young_interval_seconds - (2.0f64 * 30.0 * 18_000.0).sqrt()).abs() < 1e-6);
        // Young ≈ 1039 s; Daly and the exact optimum within a few percent of it.
        for t in [a.daly_interval_seconds, a.optimal_interval_seconds] {
            assert!((t / a.young_interval_seconds - 1.0).abs() < 0.05, "{t}");
        }
        assert!(a.lost_gpu_hours_per_week.optimal <= a.lost_gpu_hours_per_week.current);
        let cost = a.lost_cost_per_week.unwrap();
        assert!((cost.current - 2.0 * a.lost_gpu_hours_per_week.current).abs() < 1e-9);
    }

    #[test]
    fn dalys_correction_matters_when_checkpoints_are_expensive() {
        // M = 1 h, C = 10 min: Young overshoots; the exact optimum is nearer Daly's.
        let a = advise(&inputs(1.0, 1, 600.0, 3600.0)).unwrap();
        let (exact, young, daly) = (
            a.optimal_interval_seconds,
            a.young_interval_seconds,
            a.daly_interval_seconds,
        );
        assert!(
            (daly - exact).abs() < (young - exact).abs(),
            "{exact} {young} {daly}"
        );
        // C ≥ 2M: Daly says checkpoint every M.
        assert_eq!(daly_interval(7200.0, 3600.0), 3600.0);
    }

    #[test]
    fn the_loss_is_the_first_order_model_for_small_intervals() {
        // W ≈ 1 + C/τ + (τ + C)/2M + R/M when everything is small against M.
        let (c, r, m, tau) = (10.0, 5.0, 1e7, 1000.0);
        let first_order = 1.0 + c / tau + (tau + c) / (2.0 * m) + r / m;
        assert!((wall_per_work(tau, c, r, m) - first_order).abs() < 1e-6);
    }

    #[test]
    fn bad_inputs_name_the_field() {
        let err = advise(&inputs(0.0, 4, 30.0, 600.0)).unwrap_err();
        assert!(
            err.to_string().starts_with("interruptionsPerNodeHour:"),
            "{err}"
        );
        let err = advise(&inputs(0.1, 0, 30.0, 600.0)).unwrap_err();
        assert!(err.to_string().starts_with("nodes:"), "{err}");
        let err = advise(&inputs(0.1, 1, f64::NAN, 600.0)).unwrap_err();
        assert!(err.to_string().starts_with("checkpointSeconds:"), "{err}");
        let err = advise(&inputs(0.1, 1, 3.0, 0.0)).unwrap_err();
        assert!(
            err.to_string().starts_with("currentIntervalSeconds:"),
            "{err}"
        );
    }

    #[test]
    fn a_runs_measurements_give_the_current_interval() {
        let yaml = crate::plan::tests::MINIMAL.replace(
            "everySteps: 5",
            "everySteps: 5, interruptionRatePerNodeHour: 0.1",
        );
        let plan = crate::plan::Plan::from_yaml(&yaml).unwrap();
        let training = serde_json::json!({
            "samplesPerSecond": 100.0, "samplesPerStep": 20, "checkpointWriteMsMean": 1500.0,
        });
        let a = from_run(&plan, &training, Some(4.0)).unwrap();
        // 5 steps × 20 samples at 100 samples/s: a checkpoint every 1 s of training.
        assert!((a.current_interval_seconds - 1.0).abs() < 1e-9);
        assert!((a.checkpoint_seconds - 1.5).abs() < 1e-9);
        assert!((a.restart_seconds - 4.0).abs() < 1e-9);
        assert_eq!(u64::from(a.nodes), plan.num_nodes());
        // No rate in the plan: no advice.
        let plain = crate::plan::Plan::from_yaml(crate::plan::tests::MINIMAL).unwrap();
        assert!(from_run(&plain, &training, None).is_none());
    }

    proptest! {
        /// The optimal interval minimises the expected loss (no sampled interval does better), and the loss at
        /// the optimum is never above the loss at the current interval.
        #[test]
        fn the_optimum_minimises_the_loss(
            rate in 1e-4f64..5.0,
            nodes in 1u32..512,
            c in 0.0f64..3600.0,
            r in 0.0f64..3600.0,
            current in 1.0f64..86_400.0,
            probe in 0.01f64..1e6,
        ) {
            let a = advise(&Inputs {
                interruptions_per_node_hour: rate,
                nodes,
                gpus_per_node: 8,
                checkpoint_seconds: c,
                restart_seconds: r,
                current_interval_seconds: current,
                gpu_hour_price: 0.0,
            }).unwrap();
            let m = a.mtbf_seconds;
            let at_opt = ln_wall_per_work(a.optimal_interval_seconds, c, r, m);
            let at_probe = ln_wall_per_work(probe, c, r, m);
            prop_assert!(
                at_opt <= at_probe + 1e-9 * (1.0 + at_probe.abs()),
                "ln W({}) = {at_opt} > ln W({probe}) = {at_probe}",
                a.optimal_interval_seconds
            );
            prop_assert!(a.lost_gpu_hours_per_week.optimal <= a.lost_gpu_hours_per_week.current * (1.0 + 1e-12));
            prop_assert!(a.lost_share.optimal >= 0.0 && a.lost_share.current <= 1.0);
        }
    }
}
