//! How the SDK sees a TrainJob on a cluster: conditions and pods → status and steps (trainer.md §6).

use k8s_openapi::api::core::v1::Pod;
use kubetrain_api::TrainJob;
use kubetrain_api::constants::{DATASET_INITIALIZER, LAUNCHER, MODEL_INITIALIZER, NODE};

use crate::device::device_of;
use crate::labels::{COMPLETION_INDEX, JOBSET_NAME, REPLICATED_JOB};
use crate::types::{JobStatus, Step, TrainJobView, TrainerProgress, step_name};

/// The label selector of a TrainJob's pods, as the Python SDK writes it.
///
/// ```
/// assert_eq!(
///     kubetrain_client::kubernetes::status::pod_selector("j"),
///     "jobset.sigs.k8s.io/jobset-name=j,jobset.sigs.k8s.io/replicatedjob-name in \
///      (dataset-initializer,model-initializer,launcher,node)"
/// );
/// ```
pub fn pod_selector(job: &str) -> String {
    format!(
        "{JOBSET_NAME}={job},{REPLICATED_JOB} in ({DATASET_INITIALIZER},{MODEL_INITIALIZER},{LAUNCHER},{NODE})"
    )
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The step of a pod: `node-<completion index>` for trainer nodes (shifted by one for `mpirun` jobs, whose
/// launcher is node 0), the replicated job otherwise. `None` for pods that are not steps.
pub fn step_of(job: &TrainJob, pod: &Pod) -> Option<Step> {
    let rjob = label(pod, REPLICATED_JOB)?;
    let index: i32 = label(pod, COMPLETION_INDEX)
        .or_else(|| {
            pod.metadata
                .annotations
                .as_ref()?
                .get(COMPLETION_INDEX)
                .map(String::as_str)
        })
        .and_then(|i| i.parse().ok())
        .unwrap_or(0);
    let mpirun = job
        .spec
        .trainer
        .as_ref()
        .and_then(|t| t.command.as_ref()?.first())
        .is_some_and(|c| c == "mpirun");
    let index = if rjob == NODE && mpirun {
        index + 1
    } else {
        index
    };
    let container = pod.spec.as_ref().and_then(|s| {
        s.containers
            .iter()
            .find(|c| c.name == rjob)
            .or(s.containers.first())
    });
    let (device, device_count) = device_of(container.and_then(|c| c.resources.as_ref()));
    Some(Step {
        name: step_name(rjob, index),
        status: pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".into()),
        pod_name: pod.metadata.name.clone().unwrap_or_default(),
        device,
        device_count,
    })
}

/// The SDK view of `job` and its `pods`: Complete/Failed from True conditions, else Running when every
/// `node` pod is Running or Succeeded, else Created.
pub fn job_view(job: &TrainJob, pods: &[Pod]) -> TrainJobView {
    let mut steps: Vec<Step> = pods.iter().filter_map(|p| step_of(job, p)).collect();
    steps.sort_by(|a, b| a.name.cmp(&b.name).then(a.pod_name.cmp(&b.pod_name)));
    let condition = |kind: &str| {
        job.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == kind && c.status == "True")
    };
    let (status, message) = if let Some(c) = condition("Failed") {
        (JobStatus::Failed, Some(c.message.clone()))
    } else if let Some(c) = condition("Complete") {
        (JobStatus::Complete, Some(c.message.clone()))
    } else {
        let nodes: Vec<&Step> = steps
            .iter()
            .filter(|s| s.name.starts_with("node-"))
            .collect();
        let running = !nodes.is_empty()
            && nodes
                .iter()
                .all(|s| s.status == "Running" || s.status == "Succeeded");
        (
            if running {
                JobStatus::Running
            } else {
                JobStatus::Created
            },
            None,
        )
    };
    let num_nodes = job
        .spec
        .trainer
        .as_ref()
        .and_then(|t| t.num_nodes)
        .unwrap_or_else(|| {
            steps
                .iter()
                .filter(|s| s.name.starts_with("node-"))
                .count()
                .max(1) as i32
        });
    TrainJobView {
        name: job.name().to_string(),
        runtime: job.spec.runtime_ref.name.clone(),
        steps,
        num_nodes,
        creation_timestamp: job
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string()),
        status,
        message,
        trainer_status: job
            .status
            .as_ref()
            .and_then(|s| s.trainer_status.as_ref())
            .map(TrainerProgress::of),
    }
}
