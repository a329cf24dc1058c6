//! From a rendered JobSet to the processes of each pod: command, args, env (fieldRef, `$(VAR)`, pod DNS,
//! ports, `/workspace`) and start order.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVar, PodSpec, Secret};
use kubetrain_api::jobset::{DependsOnStatus, JobSet, SuccessOperator};
use kubetrain_jobset::Object;

use super::error::PlanError;
use super::ports::{PortReservation, reserve_port};
use super::rewrite::{Network, expand, map_path};
use super::run_lock::RunLock;

/// The path inside the pod that the local runner maps to `<run dir>/workspace`.
pub(crate) const WORKSPACE: &str = "/workspace";

/// Host variables a local pod keeps (a cluster pod would get none, but a process needs a PATH and a HOME).
pub(crate) const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "TERM",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "LD_LIBRARY_PATH",
];

/// Label and annotation keys JobSet and Job put on every pod (shared with the Kubernetes backend).
pub use crate::labels;

/// How to plan a local run.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// The run directory; `/workspace` maps to `<run_dir>/workspace`.
    pub run_dir: PathBuf,
    /// The program that `command[0] == "kubetrain"` runs (`None`: `kubetrain` from `PATH`); when it is named
    /// `kubetrain`, its directory also leads `PATH`, so shell commands find it too.
    pub kubetrain_exe: Option<PathBuf>,
    /// Give every declared container port a free local port (pods share this machine's ports).
    pub remap_ports: bool,
    /// Where a process starts when its container sets no `workingDir`; `None`: the run directory.
    pub workdir: Option<PathBuf>,
}

/// One process: a container of a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessPlan {
    /// Container name.
    pub container: String,
    /// The program (command\[0\], or this executable for `kubetrain`).
    pub program: PathBuf,
    /// The rest of command, then args.
    pub args: Vec<String>,
    /// The complete environment, in order.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: PathBuf,
}

/// One pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodPlan {
    /// The pod's host name, `<job>-<rjob>-<jobIndex>-<podIndex>` (used as its name locally).
    pub name: String,
    /// Its replicated job.
    pub replicated_job: String,
    /// The Job index within the replicated job.
    pub job_index: i32,
    /// The completion index within the Job.
    pub pod_index: i32,
    /// Init containers, run one after the other before the containers.
    pub init: Vec<ProcessPlan>,
    /// Containers, run together.
    pub containers: Vec<ProcessPlan>,
    /// Device and count of the first container (for the SDK's steps).
    pub device: (String, String),
    /// Resource requests of the first container (its limits where it requests nothing), for the local
    /// capacity check.
    pub requests: BTreeMap<String, String>,
}

/// One replicated job: its pods and what must happen before they start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicatedJobPlan {
    /// Name.
    pub name: String,
    /// Dependencies (replicated job, status it must reach).
    pub depends_on: Vec<(String, DependsOnStatus)>,
    /// Its pods, in (job index, pod index) order.
    pub pods: Vec<PodPlan>,
    /// Whether it is the trainer (label `trainer.kubeflow.org/trainjob-ancestor-step: trainer`): its
    /// containers get the status endpoint's env, as the TrainJobStatus plugin gives it in a cluster.
    pub trainer: bool,
}

/// The whole run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobPlan {
    /// TrainJob (and JobSet) name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// The run directory.
    pub run_dir: PathBuf,
    /// Replicated jobs in JobSet order.
    pub replicated_jobs: Vec<ReplicatedJobPlan>,
    /// `successPolicy`: all or any of the target replicated jobs (empty: all).
    pub success: (SuccessOperator, Vec<String>),
    /// `failurePolicy.maxRestarts`: whole-run restarts before the job fails.
    pub max_restarts: u32,
    /// Things the user should know (ignored images, remapped ports).
    pub notices: Vec<String>,
    /// The run's id (the last component of the default run directory; empty when planned without one). It
    /// also marks every process of the run, so that [`adopt_orphans`](super::adopt_orphans) and a later
    /// stop find them.
    pub run_id: String,
    /// The run's token: every process of the run carries it as `KUBETRAIN_LOCAL_RUN`, so that what is left of a run is found without trusting a pid.
    /// Empty when planned without one.
    pub token: String,
    /// The local ports given to declared container ports, reserved until the plan is dropped
    /// ([`reserve_port`]); their sockets are released just before the pods start.
    pub ports: Vec<PortReservation>,
    /// The lock that refuses a second run of this TrainJob while this one is in progress
    /// ([`PlanError::AlreadyRunning`]); `None` when planned without one.
    pub(crate) lock: Option<RunLock>,
    /// The pod sets of the Workload Kueue's TrainJob integration builds for this job
    /// (`kubetrain_kueue::trainjob::workload_from_jobset`: every container, init containers and pod
    /// overhead counted), with the per-pod requests of every resource; what the local queue admits.
    /// `None` when planned from objects alone: the first container's requests stand in.
    pub(crate) kueue_pod_sets: Option<Vec<super::queue::ledger::PodSetEntry>>,
    /// The TrainJob's `spec.runtimeRef.name`; empty when planned from objects alone.
    pub runtime: String,
    /// `activeDeadlineSeconds` (the TrainJob's, else its runtime's `runPolicy` default): once this long has
    /// passed since the run started, restarts included, every pod is stopped and the run fails with
    /// upstream's `DeadlineExceeded` message. `None` (and when planned from objects alone): no limit.
    pub active_deadline: Option<std::time::Duration>,
    /// The node bounds `(min, max)` of an elastic torch job: `PET_NNODES=min:max` (`min < max`) in the env of
    /// the trainer's containers, as the torch plugin renders `mlPolicy.torch.elasticPolicy`. A trainer pod
    /// lost to a disruption then shrinks the run instead of failing it, while at least `min` trainer pods
    /// are left ([`execute`](super::execute)). `None`: not elastic.
    pub elastic: Option<(u32, u32)>,
}

impl JobPlan {
    /// Every pod, in replicated job order.
    pub fn pods(&self) -> impl Iterator<Item = &PodPlan> {
        self.replicated_jobs.iter().flat_map(|r| r.pods.iter())
    }
}

fn reserve(port: i32) -> Result<PortReservation, PlanError> {
    reserve_port().map_err(|source| PlanError::Port { port, source })
}

/// Plans the rendered `objects` (JobSet first, then companions) as local processes.
pub fn plan(objects: &[Object], options: &PlanOptions) -> Result<JobPlan, PlanError> {
    let jobset = objects
        .iter()
        .find_map(Object::as_jobset)
        .ok_or(PlanError::NoJobSet)?;
    let config_maps: Vec<&ConfigMap> = objects
        .iter()
        .filter_map(|o| match o {
            Object::ConfigMap(c) => Some(&**c),
            _ => None,
        })
        .collect();
    let secrets: Vec<&Secret> = objects
        .iter()
        .filter_map(|o| match o {
            Object::Secret(s) => Some(&**s),
            _ => None,
        })
        .collect();
    plan_jobset(jobset, &config_maps, &secrets, options)
}

fn pod_spec(jobset: &JobSet, i: usize) -> Option<&PodSpec> {
    jobset.spec.replicated_jobs[i].pod_spec()
}

fn network(
    jobset: &JobSet,
    name: &str,
    remap_ports: bool,
) -> Result<(Network, Vec<PortReservation>), PlanError> {
    let mut reserved = Vec::new();
    let mut net = Network {
        subdomain: jobset
            .spec
            .network
            .as_ref()
            .and_then(|n| n.subdomain.clone())
            .unwrap_or_else(|| name.to_string()),
        loopback: "127.0.0.1".into(),
        ..Network::default()
    };
    for (i, rjob) in jobset.spec.replicated_jobs.iter().enumerate() {
        for (ji, pi) in indices(jobset, i) {
            net.hosts.insert(format!("{name}-{}-{ji}-{pi}", rjob.name));
        }
        if remap_ports && let Some(spec) = pod_spec(jobset, i) {
            for c in spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
            {
                for p in c.ports.iter().flatten() {
                    if let std::collections::btree_map::Entry::Vacant(slot) =
                        net.ports.entry(p.container_port)
                    {
                        let reservation = reserve(p.container_port)?;
                        slot.insert(reservation.port());
                        reserved.push(reservation);
                    }
                }
            }
        }
    }
    Ok((net, reserved))
}

/// (job index, pod index) of every pod of replicated job `i`.
fn indices(jobset: &JobSet, i: usize) -> Vec<(i32, i32)> {
    let rjob = &jobset.spec.replicated_jobs[i];
    let job_spec = rjob.template.spec.as_ref();
    let pods = job_spec
        .and_then(|s| s.parallelism.or(s.completions))
        .unwrap_or(1)
        .max(0);
    (0..rjob.replicas_or_default().max(0))
        .flat_map(|ji| (0..pods).map(move |pi| (ji, pi)))
        .collect()
}

/// What a pod knows about itself, for fieldRef.
struct PodFacts<'a> {
    name: String,
    namespace: &'a str,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    service_account: String,
}

impl PodFacts<'_> {
    fn field(&self, path: &str) -> Option<String> {
        let keyed = |prefix: &str| {
            path.strip_prefix(prefix)?
                .strip_prefix("['")?
                .strip_suffix("']")
                .map(str::to_owned)
        };
        if let Some(k) = keyed("metadata.labels") {
            return self.labels.get(&k).cloned();
        }
        if let Some(k) = keyed("metadata.annotations") {
            return self.annotations.get(&k).cloned();
        }
        Some(match path {
            "metadata.name" | "spec.nodeName" => self.name.clone(),
            "metadata.namespace" => self.namespace.to_string(),
            "metadata.uid" => format!("local-{}", self.name),
            "spec.serviceAccountName" => self.service_account.clone(),
            "status.podIP" | "status.podIPs" | "status.hostIP" | "status.hostIPs" => {
                "127.0.0.1".into()
            }
            _ => return None,
        })
    }
}

fn plan_jobset(
    jobset: &JobSet,
    config_maps: &[&ConfigMap],
    secrets: &[&Secret],
    options: &PlanOptions,
) -> Result<JobPlan, PlanError> {
    let name = jobset.metadata.name.clone().unwrap_or_default();
    let namespace = jobset
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let (net, ports) = network(jobset, &name, options.remap_ports)?;
    let mut notices = Vec::new();
    for (port, local) in &net.ports {
        notices.push(format!(
            "pod port {port} is served on local port {local} (pods share this machine)"
        ));
    }
    let planner = PodPlanner {
        jobset,
        name: &name,
        namespace: &namespace,
        net: &net,
        config_maps,
        secrets,
        options,
    };
    let mut images = BTreeSet::new();
    let mut replicated_jobs = Vec::new();
    for (i, rjob) in jobset.spec.replicated_jobs.iter().enumerate() {
        check_depends_on(jobset, i)?;
        let default_spec = PodSpec::default();
        let spec = pod_spec(jobset, i).unwrap_or(&default_spec);
        let pods = indices(jobset, i)
            .into_iter()
            .map(|(ji, pi)| planner.pod(i, spec, ji, pi))
            .collect::<Result<Vec<_>, _>>()?;
        // Images of pods that run (a replicated job of 0 replicas runs none).
        if !pods.is_empty() {
            images.extend(
                spec.containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                    .filter_map(|c| c.image.clone()),
            );
        }
        replicated_jobs.push(ReplicatedJobPlan {
            name: rjob.name.clone(),
            depends_on: rjob
                .depends_on
                .iter()
                .map(|d| (d.name.clone(), d.status))
                .collect(),
            pods,
            trainer: rjob.ancestor() == Some(kubetrain_api::constants::ANCESTOR_TRAINER),
        });
    }
    check_acyclic(&replicated_jobs)?;
    let elastic = elastic_bounds(&replicated_jobs);
    for image in images {
        notices.insert(
            0,
            format!("image {image} is ignored: containers run as local processes"),
        );
    }
    let success = jobset
        .spec
        .success_policy
        .as_ref()
        .map_or((SuccessOperator::All, Vec::new()), |p| {
            (p.operator, p.target_replicated_jobs.clone())
        });
    let max_restarts = jobset
        .spec
        .failure_policy
        .as_ref()
        .and_then(|p| p.max_restarts)
        .unwrap_or(0)
        .max(0) as u32;
    Ok(JobPlan {
        name,
        namespace,
        run_dir: options.run_dir.clone(),
        replicated_jobs,
        success,
        max_restarts,
        notices,
        run_id: String::new(),
        token: String::new(),
        ports,
        lock: None,
        kueue_pod_sets: None,
        runtime: String::new(),
        active_deadline: None,
        elastic,
    })
}

/// `PET_NNODES=min:max` with `min < max` in the first container of the trainer's first pod (of the first
/// replicated job when none is labelled the trainer).
fn elastic_bounds(replicated_jobs: &[ReplicatedJobPlan]) -> Option<(u32, u32)> {
    let trainer = replicated_jobs
        .iter()
        .find(|r| r.trainer)
        .or_else(|| replicated_jobs.first())?;
    let env = &trainer.pods.first()?.containers.first()?.env;
    let (_, nnodes) = env.iter().rev().find(|(k, _)| k == "PET_NNODES")?;
    let (min, max) = nnodes.trim().split_once(':')?;
    let (min, max): (u32, u32) = (min.trim().parse().ok()?, max.trim().parse().ok()?);
    (1 <= min && min < max).then_some((min, max))
}

/// Every `dependsOn` of replicated job `i` names another replicated job of the JobSet.
fn check_depends_on(jobset: &JobSet, i: usize) -> Result<(), PlanError> {
    let rjob = &jobset.spec.replicated_jobs[i];
    let known = |name: &str| {
        name != rjob.name && jobset.spec.replicated_jobs.iter().any(|r| r.name == name)
    };
    match rjob.depends_on.iter().position(|dep| !known(&dep.name)) {
        None => Ok(()),
        Some(d) => Err(PlanError::DependsOn {
            path: format!("spec.replicatedJobs[{i}].dependsOn[{d}].name"),
            reason: format!(
                "{:?} is not another replicated job of this JobSet",
                rjob.depends_on[d].name
            ),
        }),
    }
}

/// What planning one pod of a JobSet reads: the JobSet, its network and the objects its env refers to.
struct PodPlanner<'a> {
    jobset: &'a JobSet,
    name: &'a str,
    namespace: &'a str,
    net: &'a Network,
    config_maps: &'a [&'a ConfigMap],
    secrets: &'a [&'a Secret],
    options: &'a PlanOptions,
}

impl PodPlanner<'_> {
    /// Pod `pi` of job `ji` of replicated job `i`: its labels and annotations as the JobSet controller sets
    /// them, and its containers as local processes.
    fn pod(&self, i: usize, spec: &PodSpec, ji: i32, pi: i32) -> Result<PodPlan, PlanError> {
        let rjob = &self.jobset.spec.replicated_jobs[i];
        let path = format!("spec.replicatedJobs[{i}].template.spec.template.spec");
        let meta = rjob
            .template
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref());
        let host = format!("{}-{}-{ji}-{pi}", self.name, rjob.name);
        let mut labels: BTreeMap<String, String> =
            meta.and_then(|m| m.labels.clone()).unwrap_or_default();
        let mut annotations: BTreeMap<String, String> =
            meta.and_then(|m| m.annotations.clone()).unwrap_or_default();
        for map in [&mut labels, &mut annotations] {
            map.insert(labels::JOBSET_NAME.into(), self.name.to_owned());
            map.insert(labels::REPLICATED_JOB.into(), rjob.name.clone());
            map.insert(labels::JOB_INDEX.into(), ji.to_string());
            map.insert(labels::COMPLETION_INDEX.into(), pi.to_string());
        }
        let facts = PodFacts {
            name: host.clone(),
            namespace: self.namespace,
            labels,
            annotations,
            service_account: spec
                .service_account_name
                .clone()
                .unwrap_or_else(|| "default".into()),
        };
        let ctx = ContainerCtx {
            facts: &facts,
            net: self.net,
            config_maps: self.config_maps,
            secrets: self.secrets,
            options: self.options,
            pi,
        };
        let init = spec
            .init_containers
            .iter()
            .flatten()
            .enumerate()
            .map(|(c, container)| ctx.process(container, &format!("{path}.initContainers[{c}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let containers = spec
            .containers
            .iter()
            .enumerate()
            .map(|(c, container)| ctx.process(container, &format!("{path}.containers[{c}]")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PodPlan {
            name: host,
            replicated_job: rjob.name.clone(),
            job_index: ji,
            pod_index: pi,
            init,
            containers,
            device: crate::device::device_of(
                spec.containers.first().and_then(|c| c.resources.as_ref()),
            ),
            requests: requests_of(spec.containers.first()),
        })
    }
}

fn requests_of(container: Option<&Container>) -> BTreeMap<String, String> {
    let Some(r) = container.and_then(|c| c.resources.as_ref()) else {
        return BTreeMap::new();
    };
    let mut out: BTreeMap<String, String> = r
        .limits
        .iter()
        .flatten()
        .map(|(k, q)| (k.clone(), q.0.clone()))
        .collect();
    out.extend(
        r.requests
            .iter()
            .flatten()
            .map(|(k, q)| (k.clone(), q.0.clone())),
    );
    out
}

fn check_acyclic(rjobs: &[ReplicatedJobPlan]) -> Result<(), PlanError> {
    // Kahn's algorithm over the dependsOn edges.
    let mut done: BTreeSet<&str> = BTreeSet::new();
    while done.len() < rjobs.len() {
        let next = rjobs.iter().find(|r| {
            !done.contains(r.name.as_str())
                && r.depends_on.iter().all(|(d, _)| done.contains(d.as_str()))
        });
        match next {
            Some(r) => {
                done.insert(&r.name);
            }
            None => {
                let stuck: Vec<&str> = rjobs
                    .iter()
                    .map(|r| r.name.as_str())
                    .filter(|n| !done.contains(n))
                    .collect();
                return Err(PlanError::DependsOn {
                    path: "spec.replicatedJobs".into(),
                    reason: format!("dependsOn forms a cycle among {}", stuck.join(", ")),
                });
            }
        }
    }
    Ok(())
}

struct ContainerCtx<'a> {
    facts: &'a PodFacts<'a>,
    net: &'a Network,
    config_maps: &'a [&'a ConfigMap],
    secrets: &'a [&'a Secret],
    options: &'a PlanOptions,
    pi: i32,
}

impl ContainerCtx<'_> {
    fn workspace(&self) -> String {
        self.options.run_dir.join("workspace").display().to_string()
    }

    fn local(&self, text: &str) -> String {
        map_path(&self.net.rewrite_hosts(text), WORKSPACE, &self.workspace())
    }

    fn env_value(&self, var: &EnvVar, path: &str) -> Result<Option<String>, PlanError> {
        let err = |reason: String| PlanError::Env {
            path: path.to_string(),
            reason,
        };
        let Some(from) = &var.value_from else {
            return Ok(Some(var.value.clone().unwrap_or_default()));
        };
        if let Some(f) = &from.field_ref {
            return self.facts.field(&f.field_path).map(Some).ok_or_else(|| {
                err(format!(
                    "fieldRef {:?} is not known to the local runner (supported: metadata.name, metadata.namespace, \
                     metadata.labels['…'], metadata.annotations['…'], spec.nodeName, status.podIP)",
                    f.field_path
                ))
            });
        }
        if let Some(k) = &from.config_map_key_ref {
            let found = self
                .config_maps
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(k.name.as_str()))
                .and_then(|c| c.data.as_ref()?.get(&k.key).cloned());
            return match (found, k.optional.unwrap_or(false)) {
                (Some(v), _) => Ok(Some(v)),
                (None, true) => Ok(None),
                (None, false) => Err(err(format!(
                    "ConfigMap {:?} key {:?} does not exist locally; set the value with env instead",
                    k.name, k.key
                ))),
            };
        }
        if let Some(k) = &from.secret_key_ref {
            let found = self
                .secrets
                .iter()
                .find(|s| s.metadata.name.as_deref() == Some(k.name.as_str()))
                .and_then(|s| s.data.as_ref()?.get(&k.key))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned());
            return match (found, k.optional.unwrap_or(false)) {
                (Some(v), _) => Ok(Some(v)),
                (None, true) => Ok(None),
                (None, false) => Err(err(format!(
                    "Secret {:?} key {:?} does not exist locally; set the value with env instead",
                    k.name, k.key
                ))),
            };
        }
        Err(err(
            "resourceFieldRef is not supported by the local runner; set the value with env instead"
                .into(),
        ))
    }

    fn process(&self, c: &Container, path: &str) -> Result<ProcessPlan, PlanError> {
        let mut env: Vec<(String, String)> = INHERITED_ENV
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        let set = |env: &mut Vec<(String, String)>, k: String, v: String| match env
            .iter_mut()
            .find(|(n, _)| *n == k)
        {
            Some(slot) => slot.1 = v,
            None => env.push((k, v)),
        };
        set(&mut env, "HOSTNAME".into(), self.facts.name.clone());
        // `kubetrain` inside a shell command (`sh -c "kubetrain ..."`) finds the same binary first on PATH.
        if let Some(dir) = self
            .options
            .kubetrain_exe
            .as_deref()
            .filter(|exe| exe.file_name().is_some_and(|n| n == "kubetrain"))
            .and_then(Path::parent)
            .filter(|dir| !dir.as_os_str().is_empty())
        {
            let path = env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone());
            let joined = match path {
                Some(p) if !p.is_empty() => format!("{}:{p}", dir.display()),
                _ => dir.display().to_string(),
            };
            set(&mut env, "PATH".into(), joined);
        }
        set(&mut env, "JOB_COMPLETION_INDEX".into(), self.pi.to_string());
        if c.env_from.as_ref().is_some_and(|e| !e.is_empty()) {
            return Err(PlanError::Env {
                path: format!("{path}.envFrom"),
                reason: "envFrom (a Secret or ConfigMap of the cluster) is not available locally; \
                         pass the values with env instead"
                    .into(),
            });
        }
        for (e, var) in c.env.iter().flatten().enumerate() {
            let Some(raw) = self.env_value(var, &format!("{path}.env[{e}]"))? else {
                continue;
            };
            // Later vars may reference earlier ones, as in a pod.
            let expanded = if var.value_from.is_none() {
                expand(&raw, |k| {
                    env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
                })
            } else {
                raw
            };
            let value = map_path(
                &self.net.rewrite_env(&var.name, &expanded),
                WORKSPACE,
                &self.workspace(),
            );
            set(&mut env, var.name.clone(), value);
        }
        let lookup = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let command = match c.command.as_deref() {
            Some(command) if !command.is_empty() => command.to_vec(),
            // Upstream's initializer images run their downloader as the image entrypoint; locally the same
            // env contract is served by `kubetrain init`.
            _ => match initializer_entrypoint(&c.name) {
                Some(entrypoint) => entrypoint,
                None => {
                    return Err(PlanError::NoCommand {
                        path: path.to_string(),
                    });
                }
            },
        };
        let mut words: Vec<String> = command
            .iter()
            .chain(c.args.iter().flatten())
            .map(|w| self.local(&expand(w, lookup)))
            .collect();
        let first = words.remove(0);
        let program = match (&self.options.kubetrain_exe, first.as_str()) {
            (Some(exe), "kubetrain") => exe.clone(),
            _ => PathBuf::from(first),
        };
        // The container's own `workingDir` (with `/workspace` mapped) wins; else the caller's directory.
        let cwd = match (&c.working_dir, &self.options.workdir) {
            (Some(dir), _) => PathBuf::from(self.local(dir)),
            (None, Some(dir)) => dir.clone(),
            (None, None) => self.options.run_dir.clone(),
        };
        Ok(ProcessPlan {
            container: c.name.clone(),
            program,
            args: words,
            env,
            cwd,
        })
    }
}

/// The local stand-in for the entrypoint of upstream's initializer images: `kubetrain init dataset|model`.
fn initializer_entrypoint(container: &str) -> Option<Vec<String>> {
    let kind = match container {
        kubetrain_api::constants::DATASET_INITIALIZER => "dataset",
        kubetrain_api::constants::MODEL_INITIALIZER => "model",
        _ => return None,
    };
    Some(["kubetrain", "init", kind].map(String::from).to_vec())
}

/// The runs directory of a job in this user's runs tree: `<root>/<namespace>/<name>` ([`super::tree`]).
pub fn job_runs_dir(namespace: &str, name: &str) -> PathBuf {
    super::tree::runs_root().join(namespace).join(name)
}

/// Creates the run directory and its `workspace/`, mode 0700 (the run's TrainJob and logs are the user's).
pub(crate) fn prepare_run_dir(dir: &Path) -> Result<(), PlanError> {
    super::tree::create_private_dir(&dir.join("workspace")).map_err(|source| PlanError::RunDir {
        dir: dir.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trainer_with(nnodes: Option<&str>, trainer: bool) -> Vec<ReplicatedJobPlan> {
        let env = nnodes
            .map(|v| vec![("PET_NNODES".to_string(), v.to_string())])
            .unwrap_or_default();
        let process = ProcessPlan {
            container: "node".into(),
            program: "sh".into(),
            args: Vec::new(),
            env,
            cwd: PathBuf::from("/"),
        };
        let pod = PodPlan {
            name: "job-node-0-0".into(),
            replicated_job: "node".into(),
            job_index: 0,
            pod_index: 0,
            init: Vec::new(),
            containers: vec![process],
            device: ("cpu".into(), "1".into()),
            requests: BTreeMap::new(),
        };
        vec![ReplicatedJobPlan {
            name: "node".into(),
            depends_on: Vec::new(),
            pods: vec![pod],
            trainer,
        }]
    }

    #[test]
    fn an_elastic_range_in_the_trainers_env_makes_the_plan_elastic() {
        assert_eq!(
            elastic_bounds(&trainer_with(Some("2:4"), true)),
            Some((2, 4))
        );
        assert_eq!(
            elastic_bounds(&trainer_with(Some(" 1:3 "), false)),
            Some((1, 3))
        );
        for fixed in [
            None,
            Some("3"),
            Some("3:3"),
            Some("4:2"),
            Some("0:2"),
            Some("a:b"),
        ] {
            assert_eq!(
                elastic_bounds(&trainer_with(fixed, true)),
                None,
                "{fixed:?}"
            );
        }
    }
}
