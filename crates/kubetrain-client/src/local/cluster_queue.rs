//! This machine as Kueue sees it: its capacity, and the ResourceFlavor, ClusterQueue and LocalQueue that
//! hold it (what the local queue's decisions and the capacity checks both start from).

use std::fmt;

/// How the local ClusterQueue orders its workloads (Kueue's `queueingStrategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum QueueingStrategy {
    /// Kueue's default: a head that does not fit is set aside and later runs may go first when they fit.
    #[default]
    BestEffortFifo,
    /// Strictly in arrival order: a head that does not fit blocks every run behind it.
    StrictFifo,
}

impl QueueingStrategy {
    /// Kueue's spelling: `BestEffortFIFO` or `StrictFIFO`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueingStrategy::BestEffortFifo => "BestEffortFIFO",
            QueueingStrategy::StrictFifo => "StrictFIFO",
        }
    }
}

impl fmt::Display for QueueingStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for QueueingStrategy {
    type Err = String;

    /// `BestEffortFIFO` / `best-effort-fifo` or `StrictFIFO` / `strict-fifo`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().replace('-', "").as_str() {
            "besteffortfifo" => Ok(QueueingStrategy::BestEffortFifo),
            "strictfifo" => Ok(QueueingStrategy::StrictFifo),
            _ => Err(format!(
                "unknown queueing strategy {s:?} (use BestEffortFIFO or StrictFIFO)"
            )),
        }
    }
}

/// What this machine offers to local pods.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// CPU cores.
    pub cpu: u64,
    /// Memory in bytes, if known.
    pub memory: Option<u64>,
    /// NVIDIA GPUs.
    pub gpus: u64,
}

impl Capacity {
    /// The cores (`available_parallelism`), memory (`/proc/meminfo`) and NVIDIA GPUs (`/dev/nvidia<N>`) of
    /// this machine.
    pub fn of_this_machine() -> Self {
        let cpu = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let memory = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        });
        let gpus = std::fs::read_dir("/dev")
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| {
                        let name = e.file_name();
                        let name = name.to_string_lossy();
                        name.strip_prefix("nvidia")
                            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                    })
                    .count() as u64
            })
            .unwrap_or(0);
        Capacity { cpu, memory, gpus }
    }
}

pub(crate) const GPU: &str = "nvidia.com/gpu";

/// The flavor of this machine's ClusterQueue.
pub const FLAVOR: &str = "this-machine";

/// The ClusterQueue (and LocalQueue) name.
pub const CLUSTER_QUEUE: &str = "local";

/// The resources the local ClusterQueue covers: `cpu`, `nvidia.com/gpu` and, when known, `memory`.
pub fn covered_resources(capacity: &Capacity) -> Vec<&'static str> {
    let mut covered = vec!["cpu", GPU];
    if capacity.memory.is_some() {
        covered.push("memory");
    }
    covered
}

/// The Kueue objects of the local queue: ResourceFlavor `this-machine`, ClusterQueue `local` whose nominal
/// quota is `capacity`, and LocalQueue `local` in `namespace`.
pub(crate) fn cluster_queue_yaml(
    capacity: &Capacity,
    strategy: QueueingStrategy,
    namespace: &str,
) -> String {
    let mut resources = vec![
        ("cpu", capacity.cpu.to_string()),
        (GPU, capacity.gpus.to_string()),
    ];
    if let Some(m) = capacity.memory {
        resources.push(("memory", m.to_string()));
    }
    let covered: Vec<&str> = resources.iter().map(|(r, _)| *r).collect();
    let quotas: Vec<String> = resources
        .iter()
        .map(|(r, q)| format!("{{name: {r}, nominalQuota: \"{q}\"}}"))
        .collect();
    format!(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {{name: {FLAVOR}}}\n---\n\
         apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: {CLUSTER_QUEUE}}}\nspec:\n  \
         namespaceSelector: {{}}\n  queueingStrategy: {}\n  resourceGroups:\n  - coveredResources: [{}]\n    \
         flavors: [{{name: {FLAVOR}, resources: [{}]}}]\n---\napiVersion: kueue.x-k8s.io/v1beta2\n\
         kind: LocalQueue\nmetadata: {{name: {CLUSTER_QUEUE}, namespace: {namespace}}}\n\
         spec: {{clusterQueue: {CLUSTER_QUEUE}}}\n",
        strategy.as_str(),
        covered.join(", "),
        quotas.join(", "),
    )
}
