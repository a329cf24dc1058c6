//! One run of the local queue as the ledger stores it and Kueue's model reads it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Whether a run holds its share of the machine or waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EntryState {
    /// Waiting in the queue.
    Waiting,
    /// Admitted: its requests count as usage of the ClusterQueue.
    Admitted,
}

/// One run in the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Entry {
    /// Unique id of the run's ticket.
    pub id: String,
    /// `namespace/name` of the TrainJob.
    pub job: String,
    /// Arrival number: lower arrived earlier.
    pub seq: u64,
    /// The process that holds the ticket.
    pub pid: u32,
    /// That process's start time (clock ticks since boot, `/proc/<pid>/stat`), so a reused pid is not
    /// taken for the holder; `None` where `/proc` is missing.
    #[serde(default)]
    pub start_ticks: Option<u64>,
    /// Waiting or admitted.
    pub state: EntryState,
    /// Milliseconds since the Unix epoch when the run was queued.
    pub queued_at_ms: u64,
    /// The pod sets of the run's Workload.
    pub pod_sets: Vec<PodSetEntry>,
}

/// One pod set (replicated job) of a run: pods and the requests of one pod.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSetEntry {
    /// The replicated job.
    pub name: String,
    /// Pods.
    pub count: i32,
    /// Requests of one pod, as Kubernetes quantities (`cpu: 500m`); only resources the queue covers.
    pub requests: BTreeMap<String, String>,
}
