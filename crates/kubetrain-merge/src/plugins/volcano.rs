//! Volcano: every pod carries the annotation `scheduling.k8s.io/group-name: <job>`. The PodGroup itself is built
//! in `kubetrain-jobset`.

use kubetrain_api::TrainJob;
use kubetrain_api::podgroup::volcano::GROUP_NAME_ANNOTATION;

use super::{EnforcePodGroupPolicy, Plugin};
use crate::error::MergeError;
use crate::info::Info;

/// The Volcano plugin.
#[derive(Debug, Clone, Copy)]
pub struct Volcano;

impl Plugin for Volcano {
    fn name(&self) -> &'static str {
        "Volcano"
    }
}

impl EnforcePodGroupPolicy for Volcano {
    fn enforce_pod_group_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        info.scheduler
            .pod_annotations
            .insert(GROUP_NAME_ANNOTATION.to_owned(), job.name().to_owned());
        Ok(())
    }
}
