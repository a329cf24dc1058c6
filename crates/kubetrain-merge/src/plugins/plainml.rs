//! PlainML: runtimes without an ML policy, and flux runtimes (upstream's gate only excludes the other
//! policies; registered before [`super::flux::Flux`], which adds the Flux view). `trainer.numNodes` sets the
//! trainer count; the TrainJob env reaches the trainer container through the JobSet builder.

use kubetrain_api::TrainJob;

use kubetrain_api::MLPolicySource;

use super::{EnforceMlPolicy, Plugin, apply_num_nodes};
use crate::error::MergeError;
use crate::info::Info;

/// The PlainML plugin.
#[derive(Debug, Clone, Copy)]
pub struct PlainMl;

impl Plugin for PlainMl {
    fn name(&self) -> &str {
        "PlainML"
    }

    fn ml_policy(&self) -> Option<&dyn EnforceMlPolicy> {
        Some(self)
    }
}

impl EnforceMlPolicy for PlainMl {
    fn enforce_ml_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        if !matches!(info.ml_source(), None | Some(MLPolicySource::Flux(_))) {
            return Ok(());
        }
        apply_num_nodes(info, job);
        if let Some(trainer) = &job.spec.trainer
            && let Some(c) = info.trainer_container_mut()
        {
            crate::upsert::env(&mut c.env, &trainer.env);
        }
        Ok(())
    }
}
