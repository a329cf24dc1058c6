//! One call from a Workload and a Kueue setup to a typed verdict: admitted on these flavors, or the
//! reasons it waits. The TrainJob form, `kubetrain_kueue::admit` (feature `trainjob`), builds the
//! Workload Kueue's TrainJob integration builds and calls [`admit_workload`].

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::LoadError;
use crate::explain::{Explanation, explain};
use crate::load::{Setup, WorkloadObject};
use crate::model::Model;
use crate::quantity::format_count;
use crate::sched::{Phase, Scheduler};

/// Scheduling cycles [`admit_workload`] runs at most before it answers.
pub const MAX_CYCLES: u64 = 10_000;

/// The flavors one pod set was admitted on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSetFlavors {
    /// Pod set name (the lowercased replicatedJob name for a TrainJob).
    pub name: String,
    /// Admitted pods (below the requested count only under partial admission).
    pub count: i32,
    /// Flavor per resource, e.g. `nvidia.com/gpu → a100`.
    pub flavors: BTreeMap<String, String>,
    /// Total usage per resource, as Kueue prints it (`16`, `500m`, `36Gi`).
    pub resource_usage: BTreeMap<String, String>,
}

/// The workload got a quota reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Admitted {
    /// `namespace/name` of the Workload.
    pub workload: String,
    /// The ClusterQueue that reserved the quota.
    pub cluster_queue: String,
    /// Flavors per pod set.
    pub pod_sets: Vec<PodSetFlavors>,
    /// Workloads preempted on the way (`namespace/name`), in the order they were evicted.
    pub preempted: Vec<String>,
    /// Pod sets admitted with fewer pods than asked (partial admission), one sentence each, e.g.
    /// `admitted with 2 of 4 nodes (partial admission: quota for 4 not available in ClusterQueue team, ...)`.
    pub partial_admission: Vec<String>,
}

/// The workload waits.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// `namespace/name` of the Workload.
    pub workload: String,
    /// The QuotaReserved reason Kueue writes (`WaitingForQuota`, `ExceedsMaxQuota`,
    /// `NoMatchingFlavor`, `Misconfigured`, `Suspended`, …).
    pub reason: String,
    /// The QuotaReserved message Kueue writes.
    pub message: String,
    /// Flavors tried, missing quota, blocking workloads and queue position.
    pub explanation: Box<Explanation>,
}

/// What Kueue would do with the workload now.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "verdict")]
pub enum AdmissionVerdict {
    /// Quota reserved.
    Admitted(Admitted),
    /// Not admitted; why.
    Waiting(Waiting),
}

impl AdmissionVerdict {
    /// The admission, if any.
    pub fn admitted(&self) -> Option<&Admitted> {
        match self {
            AdmissionVerdict::Admitted(a) => Some(a),
            AdmissionVerdict::Waiting(_) => None,
        }
    }

    /// Why it waits, if it does.
    pub fn waiting(&self) -> Option<&Waiting> {
        match self {
            AdmissionVerdict::Admitted(_) => None,
            AdmissionVerdict::Waiting(w) => Some(w),
        }
    }
}

/// Adds `workload` to `setup` and runs scheduling cycles until it is admitted or nothing changes
/// any more (every workload present from the start; admitted ones keep their quota; parked
/// workloads are retried when quota is freed, as the simulator does), then answers.
///
/// ```
/// use kubetrain_kueue::admit::admit_workload;
/// use kubetrain_kueue::load::Setup;
/// let setup = Setup::from_yaml(r#"
/// apiVersion: kueue.x-k8s.io/v1beta2
/// kind: ResourceFlavor
/// metadata: {name: a100}
/// ---
/// apiVersion: kueue.x-k8s.io/v1beta2
/// kind: ClusterQueue
/// metadata: {name: team}
/// spec:
///   namespaceSelector: {}
///   resourceGroups:
///   - coveredResources: [nvidia.com/gpu]
///     flavors: [{name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}]
/// ---
/// apiVersion: kueue.x-k8s.io/v1beta2
/// kind: LocalQueue
/// metadata: {name: q, namespace: ml}
/// spec: {clusterQueue: team}
/// "#).unwrap();
/// let wl = Setup::from_yaml(r#"
/// apiVersion: kueue.x-k8s.io/v1beta2
/// kind: Workload
/// metadata: {name: w, namespace: ml}
/// spec:
///   queueName: q
///   podSets:
///   - name: main
///     count: 2
///     template: {spec: {containers: [{name: c, resources: {requests: {nvidia.com/gpu: 4}}}]}}
/// "#).unwrap().workloads.remove(0);
/// let verdict = admit_workload(&setup, wl).unwrap();
/// let admitted = verdict.admitted().unwrap();
/// assert_eq!(admitted.cluster_queue, "team");
/// assert_eq!(admitted.pod_sets[0].flavors["nvidia.com/gpu"], "a100");
/// ```
pub fn admit_workload(
    setup: &Setup,
    workload: WorkloadObject,
) -> Result<AdmissionVerdict, LoadError> {
    let mut setup = setup.clone();
    let key = workload.key();
    let me = setup.workloads.len();
    setup.workloads.push(workload);
    let model = Model::build(&setup)?;
    let mut s = Scheduler::new(model);
    s.arrive_all();
    let mut preempted = Vec::new();
    for _ in 0..MAX_CYCLES {
        if s.wls[me].phase == Phase::Admitted {
            break;
        }
        s.run_due_flushes();
        let r = s.cycle();
        preempted.extend(
            r.preempted
                .iter()
                .map(|&w| s.model.workloads[w].key.clone()),
        );
        if r.progressed() {
            s.now_ms += 10;
        } else if s.wls[me].phase != Phase::Admitted {
            match s.next_flush_due() {
                Some(t) => s.now_ms = t.max(s.now_ms + 10),
                None => break,
            }
        }
    }
    Ok(verdict(&s, me, key, preempted))
}

fn verdict(s: &Scheduler, me: usize, key: String, preempted: Vec<String>) -> AdmissionVerdict {
    let m = &s.model;
    match (&s.wls[me].phase, &s.wls[me].admission) {
        (Phase::Admitted, Some(adm)) => AdmissionVerdict::Admitted(Admitted {
            workload: key,
            cluster_queue: m.cqs[adm.cq].name.clone(),
            pod_sets: adm
                .pod_sets
                .iter()
                .map(|ps| {
                    let mut flavors = BTreeMap::new();
                    let mut resource_usage = BTreeMap::new();
                    for &(r, f, v) in &ps.resources {
                        let res = &m.resources[r];
                        flavors.insert(res.clone(), m.flavors[f].name.clone());
                        resource_usage.insert(res.clone(), format_count(res, v));
                    }
                    PodSetFlavors {
                        name: ps.name.clone(),
                        count: ps.count,
                        flavors,
                        resource_usage,
                    }
                })
                .collect(),
            preempted,
            partial_admission: crate::explain::partial_admission(s, me),
        }),
        _ => {
            let explanation = explain(s, me);
            AdmissionVerdict::Waiting(Waiting {
                workload: key,
                reason: explanation.reason.clone(),
                message: explanation.message.clone(),
                explanation: Box::new(explanation),
            })
        }
    }
}
