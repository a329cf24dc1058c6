//! Label and annotation keys JobSet and Job put on every pod: both backends find a TrainJob's pods by them.

/// The JobSet name.
pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
/// The replicated job name.
pub const REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";
/// The index of the Job within its replicated job.
pub const JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
/// The pod's completion index within its Job (its rank).
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
