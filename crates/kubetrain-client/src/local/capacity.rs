//! This machine's capacity as a Kueue ClusterQueue: a job whose pods' requests can never fit is refused with
//! Kueue's own message before anything starts.

use kubetrain_kueue::quantity::Quantity;

pub use super::cluster_queue::{CLUSTER_QUEUE, Capacity, FLAVOR, covered_resources};
use super::cluster_queue::{GPU, QueueingStrategy};
use super::plan::JobPlan;
use super::queue::decide::{DecideError, Verdict, decide};
use super::queue::entry::{Entry, EntryState, PodSetEntry};

/// The pod sets of `plan`'s Workload, restricted to the [covered resources](covered_resources): those Kueue's
/// TrainJob integration builds ([`JobPlan::kueue_pod_sets`]), else one per replicated job with the
/// requests of its first pod's first container.
pub(crate) fn requested_pod_sets(plan: &JobPlan, capacity: &Capacity) -> Vec<PodSetEntry> {
    let covered = covered_resources(capacity);
    if let Some(sets) = &plan.kueue_pod_sets {
        return sets
            .iter()
            .map(|s| PodSetEntry {
                name: s.name.clone(),
                count: s.count,
                requests: s
                    .requests
                    .iter()
                    .filter(|(k, _)| covered.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            })
            .collect();
    }
    plan.replicated_jobs
        .iter()
        .filter(|r| !r.pods.is_empty())
        .map(|r| PodSetEntry {
            name: r.name.clone(),
            count: r.pods.len() as i32,
            requests: r.pods[0]
                .requests
                .iter()
                .filter(|(k, v)| covered.contains(&k.as_str()) && Quantity::parse(v).is_ok())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        })
        .collect()
}

/// The pod sets of `plan` as the local queue records them: [`requested_pod_sets`], with CPU or memory that
/// the whole job asks beyond `capacity` scaled down to `capacity` (processes can oversubscribe them), so
/// such a job waits for the whole machine instead of forever.
pub(crate) fn queued_pod_sets(plan: &JobPlan, capacity: &Capacity) -> Vec<PodSetEntry> {
    let mut sets = requested_pod_sets(plan, capacity);
    let limits = [
        ("cpu", i128::from(capacity.cpu) * 1000),
        ("memory", capacity.memory.map_or(i128::MAX, i128::from)),
    ];
    let amount = |set: &PodSetEntry, resource: &str| {
        let q = Quantity::parse(set.requests.get(resource)?).ok()?;
        Some(i128::from(q.count_for(resource)))
    };
    for (resource, limit) in limits {
        let total: i128 = sets
            .iter()
            .filter_map(|s| Some(i128::from(s.count) * amount(s, resource)?))
            .sum();
        if total <= limit {
            continue;
        }
        for set in &mut sets {
            if let Some(per_pod) = amount(set, resource) {
                let scaled = per_pod * limit / total;
                let text = if resource == "cpu" {
                    format!("{scaled}m")
                } else {
                    scaled.to_string()
                };
                set.requests.insert(resource.to_string(), text);
            }
        }
    }
    sets
}

/// Admits `plan` to a ClusterQueue holding `capacity` with Kueue's scheduling cycle: `Ok` when it fits,
/// else Kueue's pending message (`couldn't assign flavors to pod set node: insufficient quota for cpu ...`).
///
/// ```
/// use kubetrain_client::local::{self, LocalOptions, capacity::{Capacity, admit}};
/// let yaml = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: big}\nspec:\n  \
///     runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: 4, command: [\"true\"], \
///     resourcesPerNode: {requests: {cpu: '2'}}}\n";
/// let dir = tempfile::tempdir().unwrap();
/// let options = LocalOptions { run_dir: Some(dir.path().into()), ..LocalOptions::default() };
/// let plan = local::prepare(yaml, &kubetrain_jobset::builtin::catalog(), &options).unwrap();
/// assert!(admit(&plan, &Capacity { cpu: 8, memory: None, gpus: 0 }).is_ok());
/// let why = admit(&plan, &Capacity { cpu: 4, memory: None, gpus: 0 }).unwrap_err().to_string();
/// assert!(why.contains("insufficient quota for cpu"), "{why}");
/// ```
pub fn admit(plan: &JobPlan, capacity: &Capacity) -> Result<(), CapacityError> {
    let entry = Entry {
        id: format!("trainjob-{}", plan.name),
        job: format!("{}/{}", plan.namespace, plan.name),
        seq: 1,
        pid: std::process::id(),
        start_ticks: None,
        state: EntryState::Waiting,
        queued_at_ms: 0,
        pod_sets: requested_pod_sets(plan, capacity),
    };
    match decide(
        std::slice::from_ref(&entry),
        capacity,
        QueueingStrategy::default(),
    )?
    .remove(&entry.id)
    {
        Some(Verdict::Wait(why)) => Err(CapacityError::Pending(why)),
        Some(Verdict::Admit) => Ok(()),
        None => Err(CapacityError::NotConsidered),
    }
}

/// Why [`admit`] or [`check`] refuses a job.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CapacityError {
    /// Kueue's model of the local queue could not be built.
    #[error(transparent)]
    Model(#[from] DecideError),
    /// Kueue keeps the workload pending: its message (`couldn't assign flavors to pod set node: ...`).
    #[error("{0}")]
    Pending(String),
    /// Kueue's scheduling cycle did not look at the workload.
    #[error("the workload was not considered")]
    NotConsidered,
    /// The job needs more GPUs than the machine has ([`check`]): GPUs cannot be shared.
    #[error(
        "needs {total} GPU{} ({parts}); this machine has {available} (Kueue: {kueue})",
        if *.total == 1 { "" } else { "s" }
    )]
    Gpus {
        /// GPUs the job needs.
        total: i128,
        /// How they are made up, e.g. `2 nodes × 2`.
        parts: String,
        /// GPUs on this machine.
        available: u64,
        /// Kueue's refusal.
        #[source]
        kueue: Box<CapacityError>,
    },
}

/// The GPUs `plan` needs, in the ML engineer's terms: the total and how it is made up, e.g.
/// `(4, "2 nodes × 2")` (the trainer's pod set is `node`; other pod sets are named: `1 launcher pod × 1`).
/// `None` when it needs no GPU.
///
/// ```
/// use kubetrain_client::local::{self, LocalOptions, capacity::gpu_demand};
/// let yaml = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: g}\nspec:\n  \
///     runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: 2, command: [\"true\"], \
///     resourcesPerNode: {limits: {nvidia.com/gpu: 2}}}\n";
/// let dir = tempfile::tempdir().unwrap();
/// let options = LocalOptions { run_dir: Some(dir.path().into()), ..LocalOptions::default() };
/// let plan = local::prepare(yaml, &kubetrain_jobset::builtin::catalog(), &options).unwrap();
/// assert_eq!(gpu_demand(&plan), Some((4, "2 nodes × 2".to_string())));
/// drop(plan);
///
/// // Kueue counts every container of the pod (and init containers, and the pod overhead), not only the
/// // first: a runtime whose trainer pod has a GPU sidecar needs one more GPU per node.
/// let with_sidecar = format!("{yaml}---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\n\
///     metadata: {{name: torch-distributed}}\nspec:\n  mlPolicy: {{numNodes: 1, torch: {{}}}}\n  template:\n    spec:\n      \
///     replicatedJobs:\n      - name: node\n        template:\n          metadata: {{labels: \
///     {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}}}\n          spec:\n            template:\n              \
///     spec:\n                containers:\n                - {{name: node, image: x}}\n                \
///     - {{name: monitor, image: x, command: [\"true\"], resources: {{requests: {{nvidia.com/gpu: 1}}}}}}\n");
/// let plan = local::prepare(&with_sidecar, &kubetrain_jobset::builtin::catalog(), &options).unwrap();
/// assert_eq!(gpu_demand(&plan), Some((6, "2 nodes × 3".to_string())));
/// ```
pub fn gpu_demand(plan: &JobPlan) -> Option<(i128, String)> {
    let mut total = 0i128;
    let mut parts = Vec::new();
    let no_machine = Capacity {
        cpu: 0,
        memory: None,
        gpus: 0,
    };
    for r in requested_pod_sets(plan, &no_machine) {
        let Some(per_pod) = r
            .requests
            .get(GPU)
            .and_then(|v| Quantity::parse(v).ok())
            .map(|q| i128::from(q.count_for(GPU)))
            .filter(|&g| g > 0)
        else {
            continue;
        };
        let pods = i128::from(r.count);
        total += pods * per_pod;
        let plural = if pods == 1 { "" } else { "s" };
        parts.push(if r.name == "node" {
            format!("{pods} node{plural} × {per_pod}")
        } else {
            format!("{pods} {} pod{plural} × {per_pod}", r.name)
        });
    }
    (total > 0).then(|| (total, parts.join(" + ")))
}

/// The local policy on top of [`admit`]: GPUs cannot be shared, so a job that needs more GPUs than the
/// machine has is refused (`Err`: what it needs and what the machine has first, e.g. `needs 4 GPUs (2 nodes
/// × 2); this machine has 0`, then Kueue's message); CPU and memory can be oversubscribed by processes, so
/// a job that does not fit them runs with a warning (`Ok(Some(warning))`).
///
/// ```
/// use kubetrain_client::local::{self, LocalOptions, capacity::{Capacity, check}};
/// let job = |res: &str| format!("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: j}}\n\
///     spec:\n  runtimeRef: {{name: torch-distributed}}\n  trainer: {{numNodes: 2, command: [\"true\"], \
///     resourcesPerNode: {{limits: {res}}}}}\n");
/// let dir = tempfile::tempdir().unwrap();
/// let options = LocalOptions { run_dir: Some(dir.path().into()), ..LocalOptions::default() };
/// let catalog = kubetrain_jobset::builtin::catalog();
/// let machine = Capacity { cpu: 2, memory: None, gpus: 0 };
/// // A plan holds its run's lock until dropped: one plan of this job at a time.
/// let gpu = local::prepare(&job("{nvidia.com/gpu: 1}"), &catalog, &options).unwrap();
/// let why = check(&gpu, &machine).unwrap_err().to_string();
/// assert!(why.starts_with("needs 2 GPUs (2 nodes × 1); this machine has 0 (Kueue: couldn't assign"), "{why}");
/// assert!(why.contains("insufficient quota for nvidia.com/gpu"), "{why}");
/// drop(gpu);
/// let cpu = local::prepare(&job("{cpu: 4}"), &catalog, &options).unwrap();
/// assert!(check(&cpu, &machine).unwrap().unwrap().contains("cpu"));
/// drop(cpu);
/// let small = local::prepare(&job("{cpu: 1}"), &catalog, &options).unwrap();
/// assert_eq!(check(&small, &machine), Ok(None));
/// ```
pub fn check(plan: &JobPlan, capacity: &Capacity) -> Result<Option<String>, CapacityError> {
    let gpus_only = Capacity {
        cpu: u64::from(u32::MAX),
        memory: None,
        gpus: capacity.gpus,
    };
    admit(plan, &gpus_only).map_err(|why| match gpu_demand(plan) {
        Some((total, parts)) => CapacityError::Gpus {
            total,
            parts,
            available: capacity.gpus,
            kueue: Box::new(why),
        },
        None => why,
    })?;
    Ok(admit(plan, capacity).err().map(|why| {
        format!(
            "the job does not fit this machine ({why}); its processes share the CPUs and memory"
        )
    }))
}

/// The most processes a local run may start per CPU core ([`check_size`]): far more than can compute at
/// once, far fewer than make a machine unusable.
pub(crate) const PROCESSES_PER_CORE: u64 = 64;

/// The memory a local pod is counted at when it requests less ([`check_size`]): what a small Python
/// process takes.
pub(crate) const MIN_POD_MEMORY: u64 = 50 * 1024 * 1024;

/// What a run asks of this machine, as [`check_size`] counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// Pods.
    pub pods: u64,
    /// Processes the runner starts: every container of every pod, times `PET_NPROC_PER_NODE` where it is
    /// a number (torchrun starts that many workers).
    pub processes: u64,
    /// Memory in bytes: every pod's memory request (or limit), at least 50 MiB.
    pub memory: u64,
}

impl Footprint {
    /// The footprint of `pods` pods that each run `processes_per_pod` processes and request `memory_per_pod`
    /// bytes of memory (`0`: none): what a TrainJob asks before it is planned.
    pub fn of_pods(pods: u64, processes_per_pod: u64, memory_per_pod: u64) -> Self {
        Footprint {
            pods,
            processes: pods.saturating_mul(processes_per_pod.max(1)),
            memory: pods.saturating_mul(memory_per_pod.max(MIN_POD_MEMORY)),
        }
    }

    /// The footprint of `plan`.
    pub fn of_plan(plan: &JobPlan) -> Self {
        let mut total = Footprint {
            pods: 0,
            processes: 0,
            memory: 0,
        };
        for pod in plan.pods() {
            let workers = pod
                .containers
                .first()
                .and_then(|c| c.env.iter().find(|(k, _)| k == "PET_NPROC_PER_NODE"))
                .and_then(|(_, v)| v.parse::<u64>().ok())
                .unwrap_or(1)
                .max(1);
            let containers = pod.containers.len().max(1) as u64;
            let memory = pod
                .requests
                .get("memory")
                .and_then(|m| Quantity::parse(m).ok())
                .and_then(|q| u64::try_from(q.count_for("memory")).ok())
                .unwrap_or(0);
            let pod = Footprint::of_pods(1, containers.saturating_mul(workers), memory);
            total.pods += 1;
            total.processes = total.processes.saturating_add(pod.processes);
            total.memory = total.memory.saturating_add(pod.memory);
        }
        total
    }
}

/// Refuses a run this machine cannot start at all: more than 64 processes per core,
/// or more memory than the machine has with each pod counted at least at 50 MiB. `Err` says
/// what the run asks and what the machine has. Unlike [`check`] (Kueue's quota, which processes may
/// oversubscribe), this guards against a typo such as `numNodes: 100000`; `kubetrain run --force` skips it.
///
/// ```
/// use kubetrain_client::local::capacity::{Capacity, Footprint, check_size};
/// let machine = Capacity { cpu: 2, memory: Some(8 << 30), gpus: 0 };
/// assert!(check_size(&Footprint::of_pods(4, 1, 0), &machine).is_ok());
/// let why = check_size(&Footprint::of_pods(100_000, 1, 0), &machine).unwrap_err();
/// assert!(why.contains("100000 processes"), "{why}");
/// ```
pub fn check_size(footprint: &Footprint, capacity: &Capacity) -> Result<(), String> {
    let cores = capacity.cpu.max(1);
    let max_processes = cores.saturating_mul(PROCESSES_PER_CORE);
    const MIB: u64 = 1024 * 1024;
    let mut over = Vec::new();
    if footprint.processes > max_processes {
        over.push(format!(
            "{} processes, more than {max_processes} ({PROCESSES_PER_CORE} per core, {cores} core{})",
            footprint.processes,
            if cores == 1 { "" } else { "s" }
        ));
    }
    if let Some(memory) = capacity.memory
        && footprint.memory > memory
    {
        over.push(format!(
            "{} MiB of memory, more than the {} MiB this machine has (each pod counted at its memory \
             request, at least {} MiB)",
            footprint.memory / MIB,
            memory / MIB,
            MIN_POD_MEMORY / MIB
        ));
    }
    if over.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} pod{} would need {}",
        footprint.pods,
        if footprint.pods == 1 { "" } else { "s" },
        over.join(" and ")
    ))
}
