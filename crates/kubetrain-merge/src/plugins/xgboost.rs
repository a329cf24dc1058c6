//! XGBoost: the Rabit tracker env (`DMLC_*`) and port 29500 on the trainer container.

use k8s_openapi::api::core::v1::ContainerPort;
use kubetrain_api::constants::TRAINER_PORT;
use kubetrain_api::{MLPolicySource, TrainJob};

use super::{COMPLETION_INDEX_FIELD_PATH, EnforceMlPolicy, Plugin, apply_num_nodes, master_host};
use crate::error::MergeError;
use crate::info::Info;
use crate::{resources, upsert};

/// The XGBoost plugin.
#[derive(Debug, Clone, Copy)]
pub struct Xgboost;

impl Plugin for Xgboost {
    fn name(&self) -> &str {
        "XGBoost"
    }

    fn ml_policy(&self) -> Option<&dyn EnforceMlPolicy> {
        Some(self)
    }
}

impl EnforceMlPolicy for Xgboost {
    fn enforce_ml_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        if !super::ml_policy_is(info, |p| matches!(p, MLPolicySource::Xgboost(_))) {
            return Ok(());
        }
        let Some(trainer_ps) = apply_num_nodes(info, job) else {
            return Ok(());
        };
        let Some(trainer) = &job.spec.trainer else {
            return Ok(());
        };
        let workers_per_node = info
            .resources_per_node_ref(job)
            .map_or(0, resources::gpus)
            .max(1);
        let workers = i64::from(info.pod_sets[trainer_ps].count) * workers_per_node;
        let Some(c) = info.trainer_container_mut() else {
            return Ok(());
        };
        // Upstream's PlainML plugin also runs for XGBoost runtimes (its gate excludes only torch, MPI and JAX)
        // and before XGBoost's: the TrainJob env comes first, then the DMLC_* env (found side by side).
        upsert::env(&mut c.env, &trainer.env);
        upsert::env(
            &mut c.env,
            &[
                upsert::env_value("DMLC_TRACKER_URI", master_host(job)),
                upsert::env_value("DMLC_TRACKER_PORT", TRAINER_PORT.to_string()),
                upsert::env_field("DMLC_TASK_ID", COMPLETION_INDEX_FIELD_PATH),
                upsert::env_value("DMLC_NUM_WORKER", workers.to_string()),
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
