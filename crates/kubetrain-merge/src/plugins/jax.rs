//! JAX: `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`, `JAX_COORDINATOR_ADDRESS` and port 29500 on the trainer container.

use k8s_openapi::api::core::v1::ContainerPort;
use kubetrain_api::constants::TRAINER_PORT;
use kubetrain_api::{MLPolicySource, TrainJob};

use super::{COMPLETION_INDEX_FIELD_PATH, EnforceMlPolicy, Plugin, apply_num_nodes, master_host};
use crate::error::MergeError;
use crate::info::Info;
use crate::upsert;

/// The JAX plugin.
#[derive(Debug, Clone, Copy)]
pub struct Jax;

impl Plugin for Jax {
    fn name(&self) -> &str {
        "JAX"
    }

    fn ml_policy(&self) -> Option<&dyn EnforceMlPolicy> {
        Some(self)
    }
}

impl EnforceMlPolicy for Jax {
    fn enforce_ml_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        if !super::ml_policy_is(info, |p| matches!(p, MLPolicySource::Jax(_))) {
            return Ok(());
        }
        let trainer_ps = apply_num_nodes(info, job);
        if job.spec.trainer.is_none() {
            return Ok(());
        }
        let count = trainer_ps.map_or(1, |i| info.pod_sets[i].count);
        let Some(c) = info.trainer_container_mut() else {
            return Ok(());
        };
        upsert::env(
            &mut c.env,
            &[
                upsert::env_value("JAX_NUM_PROCESSES", count.to_string()),
                upsert::env_field("JAX_PROCESS_ID", COMPLETION_INDEX_FIELD_PATH),
                upsert::env_value(
                    "JAX_COORDINATOR_ADDRESS",
                    format!("{}:{TRAINER_PORT}", master_host(job)),
                ),
            ],
        );
        upsert::ports(
            &mut c.ports,
            &[ContainerPort {
                container_port: TRAINER_PORT,
                ..Default::default()
            }],
        );
        Ok(())
    }
}
