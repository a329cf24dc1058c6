//! Simulation settings: our `QueueScenario` document (`kubetrain.dev/v1alpha1`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `QueueScenario.spec`: how to run the simulator and what capacity costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScenarioSpec {
    /// Virtual duration of one scheduling cycle in milliseconds (default 10).
    #[serde(default = "default_cycle_ms")]
    pub cycle_ms: i64,
    /// Heads popped per ClusterQueue per cycle (Kueue: 1; more is a what-if).
    #[serde(default = "default_heads")]
    pub heads_per_cycle: usize,
    /// Delay before parked workloads are retried after quota is freed (Kueue's
    /// `requeueBatchPeriod`, 1 s).
    #[serde(default = "default_requeue_batch_ms")]
    pub requeue_batch_ms: i64,
    /// Price per flavor and resource, per unit and hour (cpu per core).
    #[serde(default)]
    pub prices: BTreeMap<String, BTreeMap<String, f64>>,
}

fn default_cycle_ms() -> i64 {
    10
}

fn default_heads() -> usize {
    1
}

fn default_requeue_batch_ms() -> i64 {
    1000
}

impl Default for ScenarioSpec {
    fn default() -> Self {
        Self {
            cycle_ms: default_cycle_ms(),
            heads_per_cycle: default_heads(),
            requeue_batch_ms: default_requeue_batch_ms(),
            prices: BTreeMap::new(),
        }
    }
}
