//! Volcano: every pod carries the annotation `scheduling.k8s.io/group-name: <job>`. The PodGroup itself is built
//! in `kubetrain-jobset`.

use kubetrain_api::podgroup::volcano::GROUP_NAME_ANNOTATION;
use kubetrain_api::{PodGroupPolicySource, TrainJob};

use super::{EnforcePodGroupPolicy, Plugin};
use crate::error::MergeError;
use crate::info::Info;

/// The Volcano plugin.
#[derive(Debug, Clone, Copy)]
pub struct Volcano;

impl Plugin for Volcano {
    fn name(&self) -> &str {
        "Volcano"
    }

    fn pod_group_policy(&self) -> Option<&dyn EnforcePodGroupPolicy> {
        Some(self)
    }
}

impl EnforcePodGroupPolicy for Volcano {
    fn enforce_pod_group_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        if !super::pod_group_policy_is(info, |p| matches!(p, PodGroupPolicySource::Volcano(_))) {
            return Ok(());
        }
        info.scheduler
            .pod_annotations
            .insert(GROUP_NAME_ANNOTATION.to_owned(), job.name().to_owned());
        Ok(())
    }
}
