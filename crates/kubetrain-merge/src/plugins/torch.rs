//! Torch: `PET_*` env for torchrun, port 29500, `envInjection` targets and the torchtune command rewrite.

use k8s_openapi::api::core::v1::{ContainerPort, EnvVar};
use kubetrain_api::constants::{
    ELASTIC_MAX_NODES_ANNOTATION, ELASTIC_MIN_NODES_ANNOTATION, ELASTIC_REPLICATED_JOB_ANNOTATION,
    TRAINER_PORT,
};
use kubetrain_api::{MLPolicySource, TorchElasticPolicy, TrainJob};

use super::{
    COMPLETION_INDEX_FIELD_PATH, EnforceMlPolicy, Plugin, apply_num_nodes, master_host, torchtune,
};
use crate::error::MergeError;
use crate::info::Info;
use crate::{resources, upsert};

/// The Torch plugin.
#[derive(Debug, Clone, Copy)]
pub struct Torch;

/// `PET_NPROC_PER_NODE`: an integer, or `auto` (one enum with torchtune's rules in kubetrain-api).
pub use kubetrain_api::torchtune::ProcsPerNode;

/// numProcPerNode as upstream resolves it: the TrainJob's integer, else `auto`, which becomes
/// `max(1, CPUs)` when the node has no GPU. Returns the value and the GPU count.
pub fn procs_per_node(info: &Info, job: &TrainJob) -> (ProcsPerNode, i64) {
    let empty = k8s_openapi::api::core::v1::ResourceRequirements::default();
    let res = info.resources_per_node_ref(job).unwrap_or(&empty);
    let gpus = resources::gpus(res);
    let procs = match job.spec.trainer.as_ref().and_then(|t| t.num_proc_per_node) {
        Some(n) => ProcsPerNode::Count(i64::from(n)),
        None if gpus == 0 => ProcsPerNode::Count(resources::cpus(res).max(1)),
        None => ProcsPerNode::Auto,
    };
    (procs, gpus)
}

/// An elastic TrainJob's initial size and the JobSet annotations that carry its bounds (KEP-2903, ahead of
/// upstream v2.3): the trainer job starts at the TrainJob's `numNodes`, else the runtime's `mlPolicy.numNodes`,
/// else `maxNodes` (admission may start it smaller); the annotations let the operator's scaling loop and the
/// Kueue model read the bounds from the JobSet without resolving the runtime again.
fn elastic_size(info: &mut Info, job: &TrainJob, elastic: &TorchElasticPolicy, index: usize) {
    let requested = job
        .spec
        .trainer
        .as_ref()
        .and_then(|t| t.num_nodes)
        .or_else(|| info.ml_policy.as_ref().and_then(|p| p.num_nodes));
    info.pod_sets[index].count = elastic.initial_nodes(requested);
    let name = info.pod_sets[index].name.clone();
    for (key, value) in [
        (ELASTIC_MIN_NODES_ANNOTATION, elastic.min_nodes.to_string()),
        (ELASTIC_MAX_NODES_ANNOTATION, elastic.max_nodes.to_string()),
        (ELASTIC_REPLICATED_JOB_ANNOTATION, name),
    ] {
        info.annotations.insert(key.to_owned(), value);
    }
}

/// The c10d rendezvous id: the TrainJob's UID (KEP-2903), else its name (an offline render has no UID; the id
/// only has to be unique among the jobs that share the endpoint, and the endpoint is this job's rank-0 pod).
fn rendezvous_id(job: &TrainJob) -> String {
    job.metadata
        .uid
        .clone()
        .unwrap_or_else(|| job.name().to_owned())
}

impl Plugin for Torch {
    fn name(&self) -> &str {
        "Torch"
    }

    fn ml_policy(&self) -> Option<&dyn EnforceMlPolicy> {
        Some(self)
    }
}

impl EnforceMlPolicy for Torch {
    fn enforce_ml_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        let Some(MLPolicySource::Torch(policy)) = info.ml_source().cloned() else {
            return Ok(());
        };
        let trainer_ps = apply_num_nodes(info, job);
        if let (Some(elastic), Some(index)) = (&policy.elastic_policy, trainer_ps) {
            elastic_size(info, job, elastic, index);
        }
        let (procs, gpus) = procs_per_node(info, job);
        let count = trainer_ps.map_or(1, |i| info.pod_sets[i].count);

        let pet = match &policy.elastic_policy {
            None => vec![
                upsert::env_value("PET_NNODES", count.to_string()),
                upsert::env_value("PET_NPROC_PER_NODE", procs.to_string()),
                upsert::env_field("PET_NODE_RANK", COMPLETION_INDEX_FIELD_PATH),
            ],
            // The c10d rendezvous assigns node ranks as members join, so no fixed PET_NODE_RANK: a pod's
            // completion index stops being its rank once the group shrinks or grows.
            Some(elastic) => vec![
                upsert::env_value(
                    "PET_NNODES",
                    format!("{}:{}", elastic.min_nodes, elastic.max_nodes),
                ),
                upsert::env_value("PET_NPROC_PER_NODE", procs.to_string()),
                upsert::env_value("PET_RDZV_BACKEND", "c10d".to_owned()),
                upsert::env_value(
                    "PET_RDZV_ENDPOINT",
                    format!("{}:{TRAINER_PORT}", master_host(job)),
                ),
                upsert::env_value("PET_RDZV_ID", rendezvous_id(job)),
            ],
        };
        let master = [
            upsert::env_value("PET_MASTER_ADDR", master_host(job)),
            upsert::env_value("PET_MASTER_PORT", TRAINER_PORT.to_string()),
        ];

        if let Some(trainer) = &job.spec.trainer {
            let torchtune = torchtune::is_torchtune_command(trainer.command.as_deref());
            let new_command = torchtune.then(|| torchtune::command(info, job, count, procs, gpus));
            if let Some(c) = info.trainer_container_mut() {
                upsert::env(&mut c.env, &trainer.env);
                upsert::env(&mut c.env, &pet);
                if !torchtune {
                    upsert::env(&mut c.env, &master);
                }
                upsert::ports(
                    &mut c.ports,
                    &[ContainerPort {
                        container_port: TRAINER_PORT,
                        ..Default::default()
                    }],
                );
                if let Some(cmd) = new_command {
                    info.trainer_command = Some(cmd);
                }
            }
        }

        let targets = policy.env_injection.map(|e| e.targets).unwrap_or_default();
        for target in targets {
            for container in &target.container_names {
                let not_found = || MergeError::EnvInjectionTarget {
                    job: target.job_name.clone(),
                    container: container.clone(),
                };
                let index = info
                    .pod_set_by_name(&target.job_name)
                    .ok_or_else(not_found)?;
                let c = info.container_mut(index, container).ok_or_else(not_found)?;
                let all: Vec<EnvVar> = pet.iter().chain(&master).cloned().collect();
                upsert::env(&mut c.env, &all);
            }
        }
        Ok(())
    }
}
