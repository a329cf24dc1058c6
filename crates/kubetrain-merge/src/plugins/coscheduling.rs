//! Coscheduling (scheduler-plugins): every pod carries `scheduling.x-k8s.io/pod-group: <job>`. The PodGroup
//! itself is built in `kubetrain-jobset`.

use kubetrain_api::podgroup::coscheduling::POD_GROUP_LABEL;
use kubetrain_api::{PodGroupPolicySource, TrainJob};

use super::{EnforcePodGroupPolicy, Plugin};
use crate::error::MergeError;
use crate::info::Info;

/// The Coscheduling plugin.
#[derive(Debug, Clone, Copy)]
pub struct Coscheduling;

impl Plugin for Coscheduling {
    fn name(&self) -> &str {
        "CoScheduling"
    }

    fn pod_group_policy(&self) -> Option<&dyn EnforcePodGroupPolicy> {
        Some(self)
    }
}

impl EnforcePodGroupPolicy for Coscheduling {
    fn enforce_pod_group_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        if !super::pod_group_policy_is(info, |p| matches!(p, PodGroupPolicySource::Coscheduling(_)))
        {
            return Ok(());
        }
        info.scheduler
            .pod_labels
            .insert(POD_GROUP_LABEL.to_owned(), job.name().to_owned());
        Ok(())
    }
}
