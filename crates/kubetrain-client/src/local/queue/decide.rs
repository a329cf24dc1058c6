//! Kueue's answer for the ledger: the local ClusterQueue holds the admitted runs' usage, the waiting runs
//! arrive in ledger order, and Kueue's scheduling cycles (StrictFIFO or BestEffortFIFO) say which of them
//! fit now and why the others wait.

use std::collections::BTreeMap;

use kubetrain_kueue::api::{AdmissionSpec, PodSetAssignmentSpec, WorkloadStatus};
use kubetrain_kueue::bridge::{PodSetInput, workload_for_trainjob};
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::quantity::Quantity;
use kubetrain_kueue::sched::Scheduler;

use super::entry::{Entry, EntryState, PodSetEntry};
use crate::local::cluster_queue::{
    CLUSTER_QUEUE, Capacity, FLAVOR, QueueingStrategy, cluster_queue_yaml,
};

/// The namespace the queue's Workloads live in (one LocalQueue for all local runs).
const NAMESPACE: &str = "kubetrain-local";

/// What Kueue says about one waiting run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It fits next to the admitted runs (and the earlier waiting runs Kueue admits first).
    Admit,
    /// It waits; Kueue's pending message.
    Wait(String),
}

/// Why Kueue's model of the local queue could not be built (for the queue's admission decision).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecideError {
    /// The local ClusterQueue or a Workload was refused by the model (Kueue's message).
    #[error("local capacity queue: {0}")]
    Model(String),
    /// A ledger entry's request is not a Kubernetes quantity.
    #[error(
        "the ledger entry of TrainJob {job}: pod set {pod_set}: {resource}: {value:?}: {reason}"
    )]
    Quantity {
        /// `namespace/name` of the TrainJob.
        job: String,
        /// The pod set.
        pod_set: String,
        /// The resource name.
        resource: String,
        /// The value as written.
        value: String,
        /// Why it is not a quantity.
        reason: String,
    },
}

/// Kueue's verdict for every waiting entry of `entries`, by entry id. `Err` when the model cannot be
/// built (a quantity in the ledger that is not one).
pub fn decide(
    entries: &[Entry],
    capacity: &Capacity,
    strategy: QueueingStrategy,
) -> Result<BTreeMap<String, Verdict>, DecideError> {
    let yaml = cluster_queue_yaml(capacity, strategy, NAMESPACE);
    let mut setup = Setup::from_yaml(&yaml).map_err(|e| DecideError::Model(e.to_string()))?;
    for e in entries {
        let pod_sets = pod_set_inputs(&e.job, &e.pod_sets)?;
        let mut wl = workload_for_trainjob(NAMESPACE, &e.id, CLUSTER_QUEUE, 0, &pod_sets);
        wl.metadata.name.clone_from(&e.id);
        wl.metadata
            .annotations
            .insert("kubetrain.dev/arrival".into(), format!("{}ms", e.seq));
        if e.state == EntryState::Admitted {
            wl.status = WorkloadStatus {
                admission: Some(AdmissionSpec {
                    cluster_queue: CLUSTER_QUEUE.into(),
                    pod_set_assignments: wl
                        .spec
                        .pod_sets
                        .iter()
                        .map(|ps| PodSetAssignmentSpec {
                            name: ps.name.clone(),
                            flavors: ps
                                .template
                                .spec
                                .containers
                                .iter()
                                .flat_map(|c| c.resources.requests.keys())
                                .map(|r| (r.clone(), FLAVOR.to_string()))
                                .collect(),
                            resource_usage: BTreeMap::new(),
                            count: Some(ps.count),
                            topology_assignment: None,
                        })
                        .collect(),
                }),
                ..WorkloadStatus::default()
            };
        }
        setup.workloads.push(wl);
    }
    let model = Model::build(&setup).map_err(|e| DecideError::Model(e.to_string()))?;
    let mut scheduler = Scheduler::new(model);
    scheduler.arrive_all();
    // Each cycle admits or parks one head; a few more than there are entries reach the fixed point.
    scheduler.run_until_stable(Some(2 * entries.len() as u64 + 4));
    let mut verdicts = BTreeMap::new();
    for e in entries.iter().filter(|e| e.state == EntryState::Waiting) {
        let key = format!("{NAMESPACE}/{}", e.id);
        let Some(wl) = scheduler.workload_id(&key) else {
            continue;
        };
        let verdict = if scheduler.admission(wl).is_some() {
            Verdict::Admit
        } else {
            match scheduler.condition(wl, "QuotaReserved") {
                Some(c) if !c.message.is_empty() => Verdict::Wait(c.message.clone()),
                _ => Verdict::Wait(format!(
                    "waiting behind earlier workloads in ClusterQueue {CLUSTER_QUEUE} ({})",
                    strategy.as_str()
                )),
            }
        };
        verdicts.insert(e.id.clone(), verdict);
    }
    Ok(verdicts)
}

fn pod_set_inputs(job: &str, sets: &[PodSetEntry]) -> Result<Vec<PodSetInput>, DecideError> {
    sets.iter()
        .map(|p| {
            let requests = p
                .requests
                .iter()
                .map(|(k, v)| {
                    Quantity::parse(v)
                        .map(|q| (k.clone(), q))
                        .map_err(|e| DecideError::Quantity {
                            job: job.to_string(),
                            pod_set: p.name.clone(),
                            resource: k.clone(),
                            value: v.clone(),
                            reason: e.to_string(),
                        })
                })
                .collect::<Result<_, DecideError>>()?;
            Ok(PodSetInput {
                name: p.name.clone(),
                count: p.count,
                requests,
                ..PodSetInput::default()
            })
        })
        .collect()
}
