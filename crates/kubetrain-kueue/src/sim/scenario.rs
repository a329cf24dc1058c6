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
    /// Node inventories for topology-aware scheduling, described by node pool instead of node by
    /// node (expanded into `Node`s; see [`NodePool`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_pools: Vec<NodePool>,
}

/// A pool of identical nodes laid out in blocks of racks, labelled the way GPU clusters label
/// them: the pool's own labels (accelerator, fabric, ...), a block label, a rack label and
/// `kubernetes.io/hostname`.
///
/// ```
/// use kubetrain_kueue::load::Setup;
/// let setup = Setup::from_yaml(r#"
/// apiVersion: kubetrain.dev/v1alpha1
/// kind: QueueScenario
/// metadata: {name: s}
/// spec:
///   nodePools:
///   - name: h100
///     labels: {cloud.google.com/gke-accelerator: nvidia-h100-80gb, example.com/fabric: ib}
///     allocatable: {cpu: 96, memory: 1Ti, nvidia.com/gpu: 8, pods: 110}
///     blocks: 2
///     racksPerBlock: 2
///     nodesPerRack: 4
/// "#).unwrap();
/// let nodes = setup.scenario.unwrap().node_pools[0].nodes();
/// assert_eq!(nodes.len(), 16);
/// assert_eq!(nodes[5].name, "h100-b0-r1-n1");
/// assert_eq!(nodes[5].labels["cloud.com/topology-rack"], "h100-b0-r1");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePool {
    /// Pool name, the prefix of node names (`<name>-b<i>-r<j>-n<k>`).
    pub name: String,
    /// Labels every node carries (e.g. `cloud.google.com/gke-accelerator`, a fabric label, the
    /// flavor's `nodeLabels`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Allocatable resources of each node (include `pods`: TAS counts one per pod).
    pub allocatable: BTreeMap<String, crate::quantity::Quantity>,
    /// Blocks (default 1).
    #[serde(default = "one")]
    pub blocks: u32,
    /// Racks per block (default 1).
    #[serde(default = "one")]
    pub racks_per_block: u32,
    /// Nodes per rack.
    pub nodes_per_rack: u32,
    /// Label naming a node's block (default `cloud.com/topology-block`).
    #[serde(default = "block_label")]
    pub block_label: String,
    /// Label naming a node's rack (default `cloud.com/topology-rack`).
    #[serde(default = "rack_label")]
    pub rack_label: String,
}

fn one() -> u32 {
    1
}

fn block_label() -> String {
    "cloud.com/topology-block".to_string()
}

fn rack_label() -> String {
    "cloud.com/topology-rack".to_string()
}

impl NodePool {
    /// The pool's nodes, block by block, rack by rack.
    pub fn nodes(&self) -> Vec<crate::tas::Node> {
        let mut out = Vec::new();
        for b in 0..self.blocks {
            for r in 0..self.racks_per_block {
                for n in 0..self.nodes_per_rack {
                    let name = format!("{}-b{b}-r{r}-n{n}", self.name);
                    let mut labels = self.labels.clone();
                    labels.insert(self.block_label.clone(), format!("{}-b{b}", self.name));
                    labels.insert(self.rack_label.clone(), format!("{}-b{b}-r{r}", self.name));
                    labels.insert("kubernetes.io/hostname".to_string(), name.clone());
                    out.push(crate::tas::Node {
                        name,
                        labels,
                        allocatable: self.allocatable.clone(),
                        taints: Vec::new(),
                        unschedulable: false,
                    });
                }
            }
        }
        out
    }
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
            node_pools: Vec::new(),
        }
    }
}
