//! The cost arithmetic of step 7:
//! `effective cost = (compute + network + storage + support + idle + failed_runs + operations) / accepted_workload_units`,
//! compared with a baseline price per unit.

use serde::Serialize;

use crate::plan::{BaselineSpec, CostSpec};

/// What was measured that costs money.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BilledUsage {
    /// Nodes (trainer pods) the job held.
    pub nodes: u64,
    /// Wall time the job held them, seconds (both attempts).
    pub held_seconds: f64,
    /// Of that, seconds whose work was lost: from the last checkpoint before the deletion until
    /// training resumed.
    pub lost_seconds: f64,
    /// Samples of accepted work (steps kept in the final model × samples per step).
    pub accepted_samples: u64,
}

/// The breakdown and the verdict's inputs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CostBreakdown {
    /// Currency.
    pub currency: String,
    /// GPU- and node-hours of useful time.
    pub compute: f64,
    /// Network per run.
    pub network: f64,
    /// Storage per run.
    pub storage: f64,
    /// Support per run.
    pub support: f64,
    /// Idle reserved capacity: compute × idleShare / (1 − idleShare).
    pub idle: f64,
    /// Node time whose work was lost to the failure.
    pub failed_runs: f64,
    /// Operations per run.
    pub operations: f64,
    /// Sum of the above.
    pub total: f64,
    /// Accepted units (samples / unit size).
    pub accepted_units: f64,
    /// Unit name.
    pub unit: String,
    /// total / accepted units (infinite when nothing was accepted).
    pub effective_cost_per_unit: f64,
    /// The baseline's name.
    pub baseline_name: String,
    /// The baseline's price per unit.
    pub baseline_per_unit: f64,
    /// effective / baseline (below 1: cheaper than the baseline).
    pub ratio_to_baseline: f64,
    /// GPU-hours and node-hours, for the labels.
    pub gpu_hours: f64,
    /// Node-hours.
    pub node_hours: f64,
}

/// Applies the formula.
pub fn compute(cost: &CostSpec, baseline: &BaselineSpec, usage: &BilledUsage) -> CostBreakdown {
    let nodes = usage.nodes as f64;
    let lost = usage.lost_seconds.clamp(0.0, usage.held_seconds.max(0.0));
    let useful_hours = (usage.held_seconds.max(0.0) - lost) / 3600.0;
    let lost_hours = lost / 3600.0;
    let hourly = nodes * (cost.node_hour + f64::from(cost.gpus_per_node) * cost.gpu_hour);
    let compute = hourly * useful_hours;
    let failed_runs = hourly * lost_hours;
    let idle = if cost.idle_share < 1.0 {
        compute * cost.idle_share / (1.0 - cost.idle_share)
    } else {
        0.0
    };
    let total = compute
        + cost.network_per_run
        + cost.storage_per_run
        + cost.support_per_run
        + idle
        + failed_runs
        + cost.operations_per_run;
    let units = usage.accepted_samples as f64 / cost.unit.samples.max(1) as f64;
    let effective = if units > 0.0 {
        total / units
    } else {
        f64::INFINITY
    };
    let ratio = if baseline.price_per_unit > 0.0 {
        effective / baseline.price_per_unit
    } else {
        f64::INFINITY
    };
    let held_hours = usage.held_seconds.max(0.0) / 3600.0;
    CostBreakdown {
        currency: cost.currency.clone(),
        compute,
        network: cost.network_per_run,
        storage: cost.storage_per_run,
        support: cost.support_per_run,
        idle,
        failed_runs,
        operations: cost.operations_per_run,
        total,
        accepted_units: units,
        unit: cost.unit.name.clone(),
        effective_cost_per_unit: effective,
        baseline_name: baseline.name.clone(),
        baseline_per_unit: baseline.price_per_unit,
        ratio_to_baseline: ratio,
        gpu_hours: nodes * f64::from(cost.gpus_per_node) * held_hours,
        node_hours: nodes * held_hours,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::UnitSpec;

    #[test]
    fn the_formula_by_hand() {
        let cost = CostSpec {
            currency: "USD".into(),
            gpu_hour: 2.0,
            gpus_per_node: 8,
            node_hour: 4.0,
            network_per_run: 1.0,
            storage_per_run: 2.0,
            support_per_run: 3.0,
            operations_per_run: 4.0,
            idle_share: 0.2,
            unit: UnitSpec {
                name: "1M samples".into(),
                samples: 1_000_000,
            },
        };
        let baseline = BaselineSpec {
            name: "API".into(),
            price_per_unit: 10.0,
        };
        // 2 nodes × 1 h held, 0.25 h lost; hourly = 2 × (4 + 8 × 2) = 40.
        let usage = BilledUsage {
            nodes: 2,
            held_seconds: 3600.0,
            lost_seconds: 900.0,
            accepted_samples: 20_000_000,
        };
        let b = compute(&cost, &baseline, &usage);
        assert_eq!(b.compute, 30.0);
        assert_eq!(b.failed_runs, 10.0);
        assert!((b.idle - 7.5).abs() < 1e-12);
        assert!((b.total - (30.0 + 1.0 + 2.0 + 3.0 + 7.5 + 10.0 + 4.0)).abs() < 1e-12);
        assert_eq!(b.accepted_units, 20.0);
        assert!((b.effective_cost_per_unit - 57.5 / 20.0).abs() < 1e-12);
        assert!((b.ratio_to_baseline - 0.2875).abs() < 1e-12);
        assert_eq!((b.gpu_hours, b.node_hours), (16.0, 2.0));
        let none = compute(
            &cost,
            &baseline,
            &BilledUsage {
                accepted_samples: 0,
                ..usage
            },
        );
        assert!(none.effective_cost_per_unit.is_infinite());
    }
}
