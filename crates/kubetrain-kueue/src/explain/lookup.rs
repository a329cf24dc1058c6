//! Finding the workload a user names: `NAMESPACE/NAME` or a bare `NAME`, of a Workload, a TrainJob,
//! a Job (`job-NAME`) or a JobSet (`jobset-NAME`).

use std::fmt;

use crate::model::WlId;
use crate::sched::Scheduler;

/// Why a name given to `explain` does not lead to one workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkloadLookupError {
    /// Nothing by that name.
    NotFound(String),
    /// A bare name that several namespaces hold: the candidates as `NAMESPACE/NAME`.
    Ambiguous(String, Vec<String>),
}

impl fmt::Display for WorkloadLookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkloadLookupError::NotFound(q) => write!(
                f,
                "workload {q} not found in the given files (use NAMESPACE/NAME or NAME of a Workload, TrainJob, Job or JobSet)"
            ),
            WorkloadLookupError::Ambiguous(q, candidates) => write!(
                f,
                "{q} names {} workloads; give one as NAMESPACE/NAME: {}",
                candidates.len(),
                candidates.join(", ")
            ),
        }
    }
}

impl std::error::Error for WorkloadLookupError {}

/// The workload `query` names. `trainjobs` maps TrainJob keys (`namespace/name`) to their
/// Workload keys. With a namespace the first of Workload, TrainJob, Job and JobSet wins; a bare
/// name is looked up in every namespace and must match exactly one workload.
pub fn find_workload(
    s: &Scheduler,
    trainjobs: &[(String, String)],
    query: &str,
) -> Result<WlId, WorkloadLookupError> {
    if query.contains('/') {
        return by_key(s, trainjobs, query)
            .ok_or_else(|| WorkloadLookupError::NotFound(query.into()));
    }
    // Once per namespace: a scan per workload would be quadratic in a 50,000-workload setup.
    let namespaces: std::collections::BTreeSet<&str> = s
        .model
        .workloads
        .iter()
        .map(|w| w.namespace.as_str())
        .chain(
            trainjobs
                .iter()
                .filter_map(|(job, _)| job.split_once('/').map(|(ns, _)| ns)),
        )
        .collect();
    let mut found: Vec<WlId> = namespaces
        .into_iter()
        .filter_map(|ns| by_key(s, trainjobs, &format!("{ns}/{query}")))
        .collect();
    found.sort_unstable();
    found.dedup();
    match found.as_slice() {
        [] => Err(WorkloadLookupError::NotFound(query.into())),
        [one] => Ok(*one),
        many => Err(WorkloadLookupError::Ambiguous(
            query.into(),
            many.iter()
                .map(|&w| s.model.workloads[w].key.clone())
                .collect(),
        )),
    }
}

/// `namespace/name` as a Workload, a TrainJob, a Job or a JobSet, in that order.
fn by_key(s: &Scheduler, trainjobs: &[(String, String)], key: &str) -> Option<WlId> {
    let derived = |prefix: &str| {
        key.split_once('/')
            .and_then(|(ns, name)| s.workload_id(&format!("{ns}/{prefix}-{name}")))
    };
    s.workload_id(key)
        .or_else(|| {
            trainjobs
                .iter()
                .find(|(job, _)| job == key)
                .and_then(|(_, wl)| s.workload_id(wl))
        })
        .or_else(|| derived("job"))
        .or_else(|| derived("jobset"))
}
