//! PlainML: runtimes without an ML policy. `trainer.numNodes` sets the trainer count; the TrainJob env reaches
//! the trainer container through the JobSet builder.

use kubetrain_api::TrainJob;

use super::{EnforceMlPolicy, Plugin, apply_num_nodes};
use crate::error::MergeError;
use crate::info::Info;

/// The PlainML plugin.
#[derive(Debug, Clone, Copy)]
pub struct PlainMl;

impl Plugin for PlainMl {
    fn name(&self) -> &'static str {
        "PlainML"
    }
}

impl EnforceMlPolicy for PlainMl {
    fn enforce_ml_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        apply_num_nodes(info, job);
        if let Some(trainer) = &job.spec.trainer
            && let Some(c) = info.trainer_container_mut()
        {
            crate::upsert::env(&mut c.env, &trainer.env);
        }
        Ok(())
    }
}
