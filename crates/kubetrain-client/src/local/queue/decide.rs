//! Kueue's answer for the ledger: the local ClusterQueue holds the admitted runs' usage, the waiting runs
//! arrive in ledger order, and Kueue's scheduling cycles (StrictFIFO or BestEffortFIFO) say which of them
//! fit now and why the others wait.

use std::collections::BTreeMap;

use kubetrain_kueue::api::{AdmissionSpec, PodSetAssignmentSpec, WorkloadStatus};
use kubetrain_kueue::bridge::{PodSetInput, workload_for_trainjob};
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::quantity::Quantity;
use kubetrain_kueue::sched::{Scheduler, conditions};

use super::QueueingStrategy;
use super::ledger::{Entry, EntryState, PodSetEntry};
use crate::local::capacity::{CLUSTER_QUEUE, Capacity, FLAVOR, cluster_queue_yaml};

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

/// Kueue's verdict for every waiting entry of `entries`, by entry id. `Err` when the model cannot be
/// built (a quantity in the ledger that is not one).
pub fn decide(
    entries: &[Entry],
    capacity: &Capacity,
    strategy: QueueingStrategy,
) -> Result<BTreeMap<String, Verdict>, String> {
    let yaml = cluster_queue_yaml(capacity, strategy, NAMESPACE);
    let mut setup = Setup::from_yaml(&yaml).map_err(|e| format!("local capacity queue: {e}"))?;
    for e in entries {
        let pod_sets = pod_set_inputs(&e.pod_sets)
            .map_err(|why| format!("the ledger entry of TrainJob {}: {why}", e.job))?;
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
                        })
                        .collect(),
                }),
            };
        }
        setup.workloads.push(wl);
    }
    let model = Model::build(&setup).map_err(|e| format!("local capacity queue: {e}"))?;
    let mut scheduler = Scheduler::new(model);
    scheduler.arrive_all();
    // Each cycle admits or parks one head; a few more than there are entries reach the fixed point.
    scheduler.run_until_stable(Some(2 * entries.len() as u64 + 4));
    let mut verdicts = BTreeMap::new();
    for e in entries.iter().filter(|e| e.state == EntryState::Waiting) {
        let key = format!("{NAMESPACE}/{}", e.id);
        let Some(wl) = scheduler.model.workloads.iter().position(|w| w.key == key) else {
            continue;
        };
        let state = &scheduler.wls[wl];
        let verdict = if state.admission.is_some() {
            Verdict::Admit
        } else {
            match conditions::find(&state.conditions, "QuotaReserved") {
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

fn pod_set_inputs(sets: &[PodSetEntry]) -> Result<Vec<PodSetInput>, String> {
    sets.iter()
        .map(|p| {
            let requests = p
                .requests
                .iter()
                .map(|(k, v)| {
                    Quantity::parse(v)
                        .map(|q| (k.clone(), q))
                        .map_err(|e| format!("pod set {}: {k}: {v:?}: {e}", p.name))
                })
                .collect::<Result<_, String>>()?;
            Ok(PodSetInput {
                name: p.name.clone(),
                count: p.count,
                requests,
                ..PodSetInput::default()
            })
        })
        .collect()
}
