//! MultiKueue: a manager cluster that reserves quota and hands each workload to one of several worker
//! clusters, the way Kueue v0.19.2 does it (`pkg/controller/admissionchecks/multikueue`,
//! `pkg/controller/workloaddispatcher`, `pkg/controller/jobs/trainjob/trainjob_multikueue_adapter.go`).
//!
//! **Input.** The manager's setup holds the `MultiKueueCluster`s, the `MultiKueueConfig`s, the
//! AdmissionChecks with `controllerName: kueue.x-k8s.io/multikueue` (their `parameters` name a
//! MultiKueueConfig) and the ClusterQueues that use them; Kueue's `Configuration.multiKueue` picks the
//! dispatcher (`dispatcherName`, `incrementalDispatcherConfig.stepSize`). Each worker's own objects
//! (ResourceFlavors, ClusterQueues, LocalQueues, its other Workloads, Nodes) form a setup of their own,
//! named like its MultiKueueCluster: either a separate stream (the CLI's `--worker NAME=FILE`) or, in the
//! same stream, objects annotated [`CLUSTER_ANNOTATION`]` : NAME` ([`split_workers`] moves them out).
//!
//! **What happens** ([`dispatch`]): the manager reserves quota as usual; a reserved workload whose
//! MultiKueue check is `Pending` is offered to worker clusters — all at once (the default dispatcher,
//! `kueue.x-k8s.io/multikueue-dispatcher-all-at-once`), or by the incremental dispatcher
//! (`kueue.x-k8s.io/multikueue-dispatcher-incremental`) `stepSize` clusters (default 3) at a time in the
//! MultiKueueConfig's order, one more batch each 5-minute round while no worker admitted it. Each
//! offered worker gets a copy of the Workload (same namespace, name, queue) and schedules it with its
//! own quota. The first worker that **admits** its copy wins (v0.19: `Admitted`, not just
//! `QuotaReserved`); the check turns `Ready` with Kueue's message `The workload was admitted on "NAME"`,
//! the copies on the other workers are removed, and the manager admits the workload. A workload no
//! worker admits keeps its check `Pending` and its quota on the manager. A workload whose Workload
//! records `status.clusterName`, or whose copy a worker's snapshot shows admitted, stays where it is.
//!
//! Simplifications: workers are evaluated to a stable state at each round (their own cycles, not
//! interleaved in time with the manager's); copies admitted in the same evaluation tie and the order of
//! nomination breaks the tie (upstream: the earliest `Admitted` transition); a winner stays admitted.
//! Not modelled: worker loss (`workerLostTimeout`), eviction on a worker and re-dispatch,
//! `MultiKueueOrchestratedPreemption`, ClusterProfiles, elastic workload slices.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::error::LoadError;
use crate::load::{Setup, WorkloadObject};
use crate::model::{CHECK_ANSWER_PREFIX, Model};
use crate::sched::Scheduler;

/// The AdmissionCheck controller name of MultiKueue.
pub const CONTROLLER_NAME: &str = "kueue.x-k8s.io/multikueue";
/// Objects of a worker cluster in the manager's stream carry this annotation with the worker's name.
pub const CLUSTER_ANNOTATION: &str = "kubetrain.dev/cluster";
/// The dispatcher that offers a workload to every worker at once (Kueue's default).
pub const ALL_AT_ONCE: &str = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once";
/// The dispatcher that offers a workload to `stepSize` more workers per round.
pub const INCREMENTAL: &str = "kueue.x-k8s.io/multikueue-dispatcher-incremental";
/// The incremental dispatcher's round (`incrementalDispatcherRoundTimeout`).
pub const ROUND_MS: i64 = 5 * 60 * 1000;
/// The incremental dispatcher's default step (`DefaultStepSize`).
pub const DEFAULT_STEP_SIZE: usize = 3;
/// Most worker evaluations one [`dispatch`] runs (rounds and re-evaluations after removals).
const MAX_EVALUATIONS: usize = 256;

pub use crate::api::{IncrementalDispatcherConfig, MultiKueueSettings};

/// A `MultiKueueCluster` as read.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterObject {
    /// Name (the worker's name everywhere else).
    pub name: String,
    /// `status.conditions[Active]`: `None` when the object has no status (written by hand).
    pub active: Option<(bool, String)>,
}

/// Why a worker did (not) take a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ClusterState {
    /// Its copy was admitted there first: the workload runs there.
    Admitted,
    /// Its copy was admitted there too, but another worker admitted first; the copy was removed.
    Removed,
    /// Its copy waits in the worker's queue (see the reason).
    Pending,
    /// Not offered (yet): the incremental dispatcher had not reached it, or another worker won first.
    NotNominated,
    /// Offered but unusable: no MultiKueueCluster, not `Active`, or no setup given for it.
    Unavailable,
}

/// One worker's part in a workload's dispatch.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterVerdict {
    /// The worker (MultiKueueCluster name).
    pub cluster: String,
    /// What happened there.
    pub state: ClusterState,
    /// The round (0-based) in which it was offered the workload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nominated_in_round: Option<u32>,
    /// The worker's own condition reason (e.g. `Pending`, `Admitted`) or ours (`NotNominated`, ...).
    pub reason: String,
    /// The worker's own condition message, or why it was not offered.
    pub message: String,
}

/// Where one workload of a MultiKueue ClusterQueue went, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Dispatch {
    /// `namespace/name` of the manager's Workload.
    pub workload: String,
    /// The MultiKueue AdmissionCheck.
    pub admission_check: String,
    /// Its MultiKueueConfig.
    pub config: String,
    /// The dispatcher that offered it.
    pub dispatcher: String,
    /// The worker that admitted it (`status.clusterName`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The check's state on the manager: `Pending` or `Ready`.
    pub check_state: String,
    /// Why it went there, or why it went nowhere.
    pub message: String,
    /// When the winning worker admitted it (virtual ms from the snapshot).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admitted_after_ms: Option<i64>,
    /// Every cluster of the MultiKueueConfig, in its order.
    pub clusters: Vec<ClusterVerdict>,
}

impl Dispatch {
    /// Lines for `queue explain`'s text output.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "MultiKueue (check {}, config {}, {}):\n  {}\n",
            self.admission_check, self.config, self.dispatcher, self.message
        );
        for c in &self.clusters {
            let round = c
                .nominated_in_round
                .map(|r| format!(" (offered in round {})", r + 1))
                .unwrap_or_default();
            out.push_str(&format!(
                "  - {}: {:?}{round}: {}: {}\n",
                c.cluster, c.state, c.reason, c.message
            ));
        }
        out
    }
}

/// The outcome of [`dispatch`]: one entry per workload of a ClusterQueue with a MultiKueue check.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// Per workload.
    pub dispatches: Vec<Dispatch>,
}

impl Report {
    /// The dispatch of a manager Workload (`namespace/name`).
    pub fn find(&self, workload: &str) -> Option<&Dispatch> {
        self.dispatches.iter().find(|d| d.workload == workload)
    }
}

/// A MultiKueue setup that cannot be evaluated.
#[derive(Debug)]
pub enum MultiKueueError {
    /// A MultiKueueCluster or MultiKueueConfig document is malformed.
    Document(String),
    /// A worker's own setup does not load.
    Worker {
        /// The worker.
        cluster: String,
        /// What is wrong with it.
        error: LoadError,
    },
    /// The manager's setup does not load.
    Manager(LoadError),
}

impl fmt::Display for MultiKueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MultiKueueError::Document(m) => f.write_str(m),
            MultiKueueError::Worker { cluster, error } => {
                write!(f, "worker cluster {cluster}: {error}")
            }
            MultiKueueError::Manager(e) => write!(f, "manager cluster: {e}"),
        }
    }
}

impl std::error::Error for MultiKueueError {}

/// Moves the objects annotated [`CLUSTER_ANNOTATION`] out of `setup` into one setup per worker name.
pub fn split_workers(setup: &mut Setup) -> BTreeMap<String, Setup> {
    fn take<T>(
        list: &mut Vec<T>,
        out: &mut BTreeMap<String, Setup>,
        cluster: impl Fn(&T) -> Option<String>,
        put: impl Fn(&mut Setup) -> &mut Vec<T>,
    ) {
        let mut keep = Vec::with_capacity(list.len());
        for item in list.drain(..) {
            match cluster(&item) {
                Some(name) => put(out.entry(name).or_default()).push(item),
                None => keep.push(item),
            }
        }
        *list = keep;
    }
    let ann = |m: &crate::api::ObjectMeta| m.annotations.get(CLUSTER_ANNOTATION).cloned();
    let raw = |v: &Value| {
        v.pointer("/metadata/annotations")
            .and_then(|a| a.get(CLUSTER_ANNOTATION))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let mut out = BTreeMap::new();
    take(
        &mut setup.flavors,
        &mut out,
        |o| ann(&o.metadata),
        |s| &mut s.flavors,
    );
    take(
        &mut setup.cohorts,
        &mut out,
        |o| ann(&o.metadata),
        |s| &mut s.cohorts,
    );
    take(
        &mut setup.cluster_queues,
        &mut out,
        |o| ann(&o.metadata),
        |s| &mut s.cluster_queues,
    );
    take(
        &mut setup.local_queues,
        &mut out,
        |o| ann(&o.metadata),
        |s| &mut s.local_queues,
    );
    take(
        &mut setup.admission_checks,
        &mut out,
        |o| ann(&o.metadata),
        |s| &mut s.admission_checks,
    );
    take(
        &mut setup.topologies,
        &mut out,
        |o| ann(&o.metadata),
        |s| &mut s.topologies,
    );
    take(
        &mut setup.workloads,
        &mut out,
        |o| ann(&o.metadata),
        |s| &mut s.workloads,
    );
    take(&mut setup.namespaces, &mut out, ann, |s| &mut s.namespaces);
    take(
        &mut setup.priority_classes,
        &mut out,
        |o| ann(&o.metadata),
        |s| &mut s.priority_classes,
    );
    take(&mut setup.trainer_documents, &mut out, raw, |s| {
        &mut s.trainer_documents
    });
    // Workers see the manager's namespaces too (a copy lands in the same namespace).
    for w in out.values_mut() {
        for ns in &setup.namespaces {
            if !w.namespaces.iter().any(|n| n.name == ns.name) {
                w.namespaces.push(ns.clone());
            }
        }
    }
    out
}

/// The MultiKueueClusters of a setup.
pub fn clusters(setup: &Setup) -> Result<Vec<ClusterObject>, MultiKueueError> {
    let mut out = Vec::new();
    for doc in setup
        .multikueue
        .iter()
        .filter(|d| kind(d) == "MultiKueueCluster")
    {
        let name = name_of(doc, "MultiKueueCluster")?;
        let active = doc
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some("Active"))
            })
            .map(|c| {
                let status = c.get("status").and_then(Value::as_str) == Some("True");
                let msg = c
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                (status, msg)
            });
        out.push(ClusterObject { name, active });
    }
    Ok(out)
}

/// The MultiKueueConfigs of a setup: name → `spec.clusters` in order.
pub fn configs(setup: &Setup) -> Result<BTreeMap<String, Vec<String>>, MultiKueueError> {
    let mut out = BTreeMap::new();
    for doc in setup
        .multikueue
        .iter()
        .filter(|d| kind(d) == "MultiKueueConfig")
    {
        let name = name_of(doc, "MultiKueueConfig")?;
        let clusters = match doc.pointer("/spec/clusters") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|c| {
                    c.as_str().map(str::to_string).ok_or_else(|| {
                        MultiKueueError::Document(format!(
                            "MultiKueueConfig/{name}: spec.clusters: each entry must be a MultiKueueCluster name"
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(MultiKueueError::Document(format!(
                    "MultiKueueConfig/{name}: spec.clusters must be a list of MultiKueueCluster names"
                )));
            }
        };
        out.insert(name, clusters);
    }
    Ok(out)
}

fn kind(doc: &Value) -> &str {
    doc.get("kind").and_then(Value::as_str).unwrap_or("")
}

fn name_of(doc: &Value, kind: &str) -> Result<String, MultiKueueError> {
    doc.pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .ok_or_else(|| MultiKueueError::Document(format!("{kind}: metadata.name is required")))
}

/// The dispatcher and its step, from the manager's Configuration and feature gates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatcher {
    /// [`ALL_AT_ONCE`], [`INCREMENTAL`] or an external name.
    pub name: String,
    /// Clusters per round (incremental).
    pub step: usize,
    /// `MultiKueueIncrementalDispatcherRespectConfigOrder` (default on in v0.19): the config's order,
    /// else alphabetical.
    pub config_order: bool,
}

impl Dispatcher {
    /// Reads it from a setup's Configuration.
    pub fn of(setup: &Setup) -> Self {
        let cfg = setup.configuration.as_ref();
        let gate = |name: &str| {
            cfg.and_then(|c| c.feature_gates.get(name).copied())
                .unwrap_or(true)
        };
        let mk = cfg.and_then(|c| c.multi_kueue.as_ref());
        let name = mk
            .and_then(|m| m.dispatcher_name.clone())
            .unwrap_or_else(|| ALL_AT_ONCE.to_string());
        let configured = mk
            .and_then(|m| m.incremental_dispatcher_config.as_ref())
            .and_then(|c| c.step_size)
            .filter(|s| *s > 0);
        let step = match configured {
            Some(s) if gate("MultiKueueIncrementalDispatcherConfig") => s as usize,
            _ => DEFAULT_STEP_SIZE,
        };
        Dispatcher {
            name,
            step,
            config_order: gate("MultiKueueIncrementalDispatcherRespectConfigOrder"),
        }
    }

    /// The clusters nominated after `round` rounds (0-based; upstream `getNextNominatedWorkers`
    /// applied `round + 1` times): all of them for all-at-once, `step` more per round for incremental,
    /// none for an external dispatcher.
    pub fn nominated(&self, clusters: &[String], round: u32) -> Vec<String> {
        match self.name.as_str() {
            ALL_AT_ONCE => clusters.to_vec(),
            INCREMENTAL => {
                let mut nominated: Vec<String> = Vec::new();
                for _ in 0..=round {
                    let mut rest: Vec<String> = clusters
                        .iter()
                        .filter(|c| !nominated.contains(c))
                        .cloned()
                        .collect();
                    if !self.config_order {
                        rest.sort();
                    }
                    nominated.extend(rest.into_iter().take(self.step));
                }
                nominated
            }
            _ => Vec::new(),
        }
    }

    /// Whether a round after `round` would nominate more clusters.
    fn more_after(&self, clusters: &[String], round: u32) -> bool {
        self.name == INCREMENTAL && self.nominated(clusters, round).len() < clusters.len()
    }
}

/// One workload being dispatched.
struct Candidate {
    key: String,
    check: String,
    config: String,
    clusters: Vec<String>,
    reserved: bool,
    round: u32,
    nominated: Vec<(String, u32)>,
    winner: Option<(String, String)>,
    admitted_at: Option<i64>,
    /// Worker → (admitted, reason, message) of its copy at the last evaluation.
    seen: BTreeMap<String, (bool, String, String)>,
    /// Workers that admitted their copy in the same evaluation as the winner (the copy is removed).
    removed: BTreeSet<String>,
}

/// Dispatches the manager's reserved workloads to the workers; returns where each went, and marks the
/// winners' MultiKueue checks `Ready` on `manager` (the `kubetrain.dev/check.<name>` annotation), so
/// a simulation of `manager` admits them. `manager` holds the Workloads already (TrainJobs turned into
/// Workloads first); `workers` are the workers' own setups by MultiKueueCluster name.
pub fn dispatch(
    manager: &mut Setup,
    workers: &BTreeMap<String, Setup>,
) -> Result<Report, MultiKueueError> {
    let checks = multikueue_checks(manager);
    if checks.is_empty() {
        return Ok(Report::default());
    }
    let cluster_objects = clusters(manager)?;
    let configs = configs(manager)?;
    let dispatcher = Dispatcher::of(manager);
    let mut candidates = candidates(manager, workers, &checks, &configs)?;
    evaluate(
        manager,
        workers,
        &cluster_objects,
        &dispatcher,
        &mut candidates,
    )?;

    // The verdicts, and the winners' checks Ready on the manager.
    let mut report = Report::default();
    for c in &candidates {
        let verdicts = verdicts(c, &cluster_objects, workers, &dispatcher);
        let (check_state, message) = match (&c.winner, c.reserved) {
            (Some((w, why)), _) => ("Ready", format!("went to {w:?}: {why}")),
            (None, false) => (
                "Pending",
                "not dispatched: workers are offered a workload only once the manager reserves quota for it".to_string(),
            ),
            (None, true) if c.clusters.is_empty() => (
                "Pending",
                format!("not dispatched: MultiKueueConfig {:?} lists no clusters (or does not exist)", c.config),
            ),
            (None, true) => ("Pending", "no worker admitted it: each waits for its own reason below".to_string()),
        };
        let won_at = c.winner.as_ref().and(c.admitted_at);
        if let (Some(at), Some(o)) = (
            won_at,
            manager.workloads.iter_mut().find(|o| o.key() == c.key),
        ) {
            // The check answers Ready when the worker admitted it (counted from the reservation).
            o.metadata
                .annotations
                .entry(format!("{CHECK_ANSWER_PREFIX}{}", c.check))
                .or_insert_with(|| format!("Ready@{at}ms"));
        }
        report.dispatches.push(Dispatch {
            workload: c.key.clone(),
            admission_check: c.check.clone(),
            config: c.config.clone(),
            dispatcher: dispatcher.name.clone(),
            cluster: c.winner.as_ref().map(|(w, _)| w.clone()),
            check_state: check_state.to_string(),
            message,
            admitted_after_ms: c.winner.as_ref().and(c.admitted_at),
            clusters: verdicts,
        });
    }
    Ok(report)
}

/// The MultiKueue AdmissionChecks of a setup: name → its MultiKueueConfig's name.
fn multikueue_checks(manager: &Setup) -> BTreeMap<String, String> {
    manager
        .admission_checks
        .iter()
        .filter(|c| c.spec.controller_name == CONTROLLER_NAME)
        .map(|c| {
            let config = c
                .spec
                .parameters
                .as_ref()
                .and_then(|p| p.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            (c.metadata.name.clone(), config)
        })
        .collect()
}

/// The manager's workloads of ClusterQueues with a MultiKueue check, after the manager reserved what it
/// can; a workload a snapshot places on a worker already has its winner.
fn candidates(
    manager: &Setup,
    workers: &BTreeMap<String, Setup>,
    checks: &BTreeMap<String, String>,
    configs: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<Candidate>, MultiKueueError> {
    let model = Model::build(manager).map_err(MultiKueueError::Manager)?;
    let mut sched = Scheduler::new(model);
    sched.arrive_all();
    sched.run_until_stable(Some(1000));

    // The workloads of ClusterQueues with a MultiKueue check, in the manager's order.
    let mut candidates = Vec::new();
    for (wl, w) in sched.model().workloads.iter().enumerate() {
        let cq_checks: Vec<String> = match &w.target {
            crate::model::QueueTarget::Queue(cq) => sched.model().cqs[*cq]
                .checks
                .iter()
                .filter_map(|(c, _)| sched.model().checks.get(*c))
                .map(|c| c.name.clone())
                .filter(|n| checks.contains_key(n))
                .collect(),
            _ => Vec::new(),
        };
        let Some(check) = cq_checks.into_iter().next() else {
            continue;
        };
        let config = checks[&check].clone();
        let clusters = configs.get(&config).cloned().unwrap_or_default();
        let st = sched.state(wl);
        let reserved = st.admission.is_some();
        let recorded = manager
            .workloads
            .iter()
            .find(|o| o.key() == w.key)
            .and_then(|o| o.status.cluster_name.clone());
        let mut c = Candidate {
            key: w.key.clone(),
            check,
            config,
            clusters,
            reserved,
            round: 0,
            nominated: Vec::new(),
            winner: None,
            admitted_at: None,
            seen: BTreeMap::new(),
            removed: BTreeSet::new(),
        };
        if let Some(name) = recorded {
            c.winner = Some((
                name.clone(),
                format!("recorded in the manager's Workload status.clusterName {name:?}"),
            ));
            c.admitted_at = Some(0);
        } else if let Some(name) = workers.iter().find_map(|(name, s)| {
            s.workloads
                .iter()
                .any(|o| o.key() == w.key && admitted_status(o))
                .then(|| name.clone())
        }) {
            c.winner = Some((
                name.clone(),
                format!("its copy on {name:?} is admitted there (worker snapshot)"),
            ));
            c.admitted_at = Some(0);
        }
        candidates.push(c);
    }

    Ok(candidates)
}

/// Whether a cluster can take copies: `Err((reason, message))` when it is missing, not `Active`, or has
/// no setup.
fn usable(
    cluster_objects: &[ClusterObject],
    workers: &BTreeMap<String, Setup>,
    name: &str,
) -> Result<(), (String, String)> {
    let Some(obj) = cluster_objects.iter().find(|c| c.name == name) else {
        return Err((
            "MissingCluster".into(),
            format!("no MultiKueueCluster {name:?}"),
        ));
    };
    if let Some((false, msg)) = &obj.active {
        return Err((
            "Inactive".into(),
            format!("MultiKueueCluster {name:?} is not Active: {msg}"),
        ));
    }
    if !workers.contains_key(name) {
        return Err((
            "NoSetup".into(),
            format!(
                "no setup given for worker {name:?} (--worker {name}=FILE, or objects annotated {CLUSTER_ANNOTATION}: {name})"
            ),
        ));
    }
    Ok(())
}

/// Offers the reserved workloads to the workers, round after round, until no workload changes hands.
fn evaluate(
    manager: &Setup,
    workers: &BTreeMap<String, Setup>,
    cluster_objects: &[ClusterObject],
    dispatcher: &Dispatcher,
    candidates: &mut [Candidate],
) -> Result<(), MultiKueueError> {
    let mut now = 0i64;
    for _ in 0..MAX_EVALUATIONS {
        for c in candidates
            .iter_mut()
            .filter(|c| c.reserved && c.winner.is_none())
        {
            for name in dispatcher.nominated(&c.clusters, c.round) {
                if !c.nominated.iter().any(|(n, _)| *n == name) {
                    c.nominated.push((name, c.round));
                }
            }
        }
        // Each usable worker: its own objects plus the copies it holds.
        for (name, own) in workers {
            if usable(cluster_objects, workers, name).is_err() {
                continue;
            }
            evaluate_worker(name, own, manager, candidates)?;
        }
        // New winners: the first nominated worker that admitted the copy.
        let mut changed = false;
        for c in candidates
            .iter_mut()
            .filter(|c| c.reserved && c.winner.is_none())
        {
            let first = c
                .nominated
                .iter()
                .map(|(n, _)| n)
                .find(|n| c.seen.get(*n).is_some_and(|s| s.0))
                .cloned();
            if let Some(w) = first {
                for (n, _) in &c.nominated {
                    if *n != w && c.seen.get(n).is_some_and(|s| s.0) {
                        c.removed.insert(n.clone());
                    }
                }
                c.winner = Some((
                    w.clone(),
                    format!("the first worker to admit it (The workload was admitted on {w:?})"),
                ));
                c.admitted_at = Some(now);
                changed = true;
            }
        }
        if changed {
            continue;
        }
        // No new winner: the next round of the incremental dispatcher, if any workload has more to try.
        let waiting: Vec<usize> = (0..candidates.len())
            .filter(|&i| {
                let c = &candidates[i];
                c.reserved && c.winner.is_none() && dispatcher.more_after(&c.clusters, c.round)
            })
            .collect();
        if waiting.is_empty() {
            break;
        }
        now += ROUND_MS;
        for i in waiting {
            candidates[i].round += 1;
        }
    }

    Ok(())
}

/// Schedules one worker with its own objects plus the copies it holds; records what each copy did.
fn evaluate_worker(
    name: &str,
    own: &Setup,
    manager: &Setup,
    candidates: &mut [Candidate],
) -> Result<(), MultiKueueError> {
    let mut setup = own.clone();
    let mut copies = Vec::new();
    for c in candidates.iter() {
        let holds = match &c.winner {
            Some((w, _)) => w == name,
            None => c.reserved && c.nominated.iter().any(|(n, _)| n == name),
        };
        if !holds || setup.workloads.iter().any(|o| o.key() == c.key) {
            continue;
        }
        if let Some(o) = manager.workloads.iter().find(|o| o.key() == c.key) {
            setup.workloads.push(copy_for_worker(o));
            copies.push(c.key.clone());
        }
    }
    let model = Model::build(&setup).map_err(|error| MultiKueueError::Worker {
        cluster: name.to_string(),
        error,
    })?;
    let mut s = Scheduler::new(model);
    s.arrive_all();
    s.run_until_stable(Some(1000));
    for c in candidates.iter_mut() {
        let Some(id) = s.workload_id(&c.key) else {
            continue;
        };
        let admitted = s
            .condition(id, "Admitted")
            .is_some_and(|k| k.status == "True");
        let (reason, message) = if admitted {
            let cq = s
                .admission(id)
                .map(|a| s.model().cqs[a.cq].name.clone())
                .unwrap_or_default();
            (
                "Admitted".to_string(),
                format!("admitted by ClusterQueue {cq}"),
            )
        } else {
            pending_reason(&s, id)
        };
        c.seen.insert(name.to_string(), (admitted, reason, message));
    }
    Ok(())
}

/// What happened on each cluster of a workload's MultiKueueConfig.
fn verdicts(
    c: &Candidate,
    cluster_objects: &[ClusterObject],
    workers: &BTreeMap<String, Setup>,
    dispatcher: &Dispatcher,
) -> Vec<ClusterVerdict> {
    let mut verdicts = Vec::new();
    for name in &c.clusters {
        let round = c.nominated.iter().find(|(n, _)| n == name).map(|(_, r)| *r);
        let winner = c.winner.as_ref().map(|(w, _)| w.as_str());
        let (state, reason, message) = if winner == Some(name.as_str()) {
            let (_, r, m) = c.seen.get(name).cloned().unwrap_or((
                true,
                "Admitted".into(),
                "admitted there".into(),
            ));
            (ClusterState::Admitted, r, m)
        } else if let Err((r, m)) = usable(cluster_objects, workers, name) {
            (ClusterState::Unavailable, r, m)
        } else if c.removed.contains(name) {
            (
                ClusterState::Removed,
                "Removed".into(),
                format!(
                    "admitted too, but {:?} admitted it first; MultiKueue removed this copy",
                    winner.unwrap_or("")
                ),
            )
        } else if round.is_some() && winner.is_none() {
            let (_, r, m) = c.seen.get(name).cloned().unwrap_or_default();
            (ClusterState::Pending, r, m)
        } else if let Some(w) = winner {
            match c.seen.get(name) {
                Some((_, r, m)) if round.is_some() => (
                    ClusterState::Removed,
                    r.clone(),
                    format!("{m} (its copy was removed once {w:?} admitted it)"),
                ),
                _ => (
                    ClusterState::NotNominated,
                    "NotNominated".into(),
                    format!("not offered: {w:?} admitted it first"),
                ),
            }
        } else if !c.reserved {
            (
                ClusterState::NotNominated,
                "NotNominated".into(),
                "not offered: the manager has not reserved quota for it".into(),
            )
        } else {
            (
                ClusterState::NotNominated,
                "NotNominated".into(),
                format!("not offered by the {} dispatcher", dispatcher.name),
            )
        };
        verdicts.push(ClusterVerdict {
            cluster: name.clone(),
            state,
            nominated_in_round: round,
            reason,
            message,
        });
    }
    verdicts
}

/// The worker's copy of a manager Workload (`cloneForCreate`): same namespace, name, labels and spec,
/// no status.
fn copy_for_worker(o: &WorkloadObject) -> WorkloadObject {
    let mut copy = o.clone();
    copy.status = Default::default();
    copy.metadata.uid = None;
    copy.metadata
        .annotations
        .retain(|k, _| !k.starts_with(CHECK_ANSWER_PREFIX) && k != CLUSTER_ANNOTATION);
    copy
}

/// A snapshot Workload that is admitted (`Admitted=True`).
fn admitted_status(o: &WorkloadObject) -> bool {
    o.status
        .conditions
        .iter()
        .any(|c| c.type_ == "Admitted" && c.status == "True")
}

/// The worker's own reason a copy is not admitted: its `QuotaReserved=False` condition (or the first
/// condition it has).
fn pending_reason(s: &Scheduler, id: crate::model::WlId) -> (String, String) {
    let conds = s.conditions(id);
    let c = conds
        .iter()
        .find(|c| c.type_ == "QuotaReserved" && c.status == "False")
        .or_else(|| {
            conds
                .iter()
                .find(|c| c.type_ == "Admitted" && c.status == "False")
        })
        .or_else(|| conds.first());
    match c {
        Some(c) => (c.reason.clone(), c.message.clone()),
        None => (
            "Pending".into(),
            "waiting in the worker's queue (not evaluated yet)".into(),
        ),
    }
}

#[cfg(test)]
#[path = "multikueue_tests.rs"]
mod tests;
