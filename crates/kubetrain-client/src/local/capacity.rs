//! This machine's capacity as a Kueue ClusterQueue: a job whose pods' requests can never fit is refused with
//! Kueue's own message before anything starts.

use std::collections::BTreeMap;

use kubetrain_kueue::bridge::{PodSetInput, workload_for_trainjob};
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::quantity::Quantity;
use kubetrain_kueue::sched::{Scheduler, conditions};

use super::plan::JobPlan;

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

const GPU: &str = "nvidia.com/gpu";

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
/// let why = admit(&plan, &Capacity { cpu: 4, memory: None, gpus: 0 }).unwrap_err();
/// assert!(why.contains("insufficient quota for cpu"), "{why}");
/// ```
pub fn admit(plan: &JobPlan, capacity: &Capacity) -> Result<(), String> {
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
    let yaml = format!(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {{name: this-machine}}\n---\n\
         apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {{name: local}}\nspec:\n  \
         namespaceSelector: {{}}\n  resourceGroups:\n  - coveredResources: [{}]\n    flavors: \
         [{{name: this-machine, resources: [{}]}}]\n---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\n\
         metadata: {{name: local, namespace: {}}}\nspec: {{clusterQueue: local}}\n",
        covered.join(", "),
        quotas.join(", "),
        plan.namespace
    );
    let mut setup = Setup::from_yaml(&yaml).map_err(|e| format!("local capacity queue: {e}"))?;
    let pod_sets: Vec<PodSetInput> = plan
        .replicated_jobs
        .iter()
        .filter(|r| !r.pods.is_empty())
        .map(|r| {
            let requests: BTreeMap<String, Quantity> = r.pods[0]
                .requests
                .iter()
                .filter(|(k, _)| covered.contains(&k.as_str()))
                .filter_map(|(k, v)| Some((k.clone(), Quantity::parse(v).ok()?)))
                .collect();
            PodSetInput {
                name: r.name.clone(),
                count: r.pods.len() as i32,
                requests,
                ..PodSetInput::default()
            }
        })
        .collect();
    if pod_sets.iter().all(|p| p.requests.is_empty()) {
        return Ok(());
    }
    setup.workloads.push(workload_for_trainjob(
        &plan.namespace,
        &plan.name,
        "local",
        0,
        &pod_sets,
    ));
    let model = Model::build(&setup).map_err(|e| format!("local capacity queue: {e}"))?;
    let mut scheduler = Scheduler::new(model);
    scheduler.arrive_all();
    scheduler.cycle();
    let wl = scheduler.wls.first().ok_or("the workload did not arrive")?;
    match conditions::find(&wl.conditions, "QuotaReserved") {
        Some(c) if c.status == "True" => Ok(()),
        Some(c) => Err(c.message.clone()),
        None => Err("the workload was not considered".into()),
    }
}

/// The local policy on top of [`admit`]: GPUs cannot be shared, so a job that needs more GPUs than the
/// machine has is refused (`Err`, Kueue's message); CPU and memory can be oversubscribed by processes, so a
/// job that does not fit them runs with a warning (`Ok(Some(warning))`).
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
/// let gpu = local::prepare(&job("{nvidia.com/gpu: 1}"), &catalog, &options).unwrap();
/// assert!(check(&gpu, &machine).unwrap_err().contains("nvidia.com/gpu"));
/// let cpu = local::prepare(&job("{cpu: 4}"), &catalog, &options).unwrap();
/// assert!(check(&cpu, &machine).unwrap().unwrap().contains("cpu"));
/// let small = local::prepare(&job("{cpu: 1}"), &catalog, &options).unwrap();
/// assert_eq!(check(&small, &machine), Ok(None));
/// ```
pub fn check(plan: &JobPlan, capacity: &Capacity) -> Result<Option<String>, String> {
    let gpus_only = Capacity {
        cpu: u64::from(u32::MAX),
        memory: None,
        gpus: capacity.gpus,
    };
    admit(plan, &gpus_only)?;
    Ok(admit(plan, capacity).err().map(|why| {
        format!(
            "the job does not fit this machine ({why}); its processes share the CPUs and memory"
        )
    }))
}
