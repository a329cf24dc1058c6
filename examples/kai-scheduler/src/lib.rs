//! Gang scheduling with NVIDIA's KAI scheduler: an example of the plugin API
//! ([docs/plugins.md](https://github.com/kubetrain/kubetrain/blob/main/docs/plugins.md)), after upstream's
//! KAI issue kubeflow/trainer#2628 and its job-scheduling guide.
//!
//! Upstream v2.3's `podGroupPolicy` knows only `coscheduling` and `volcano` (a `kai` field would be refused by
//! the CRD), so a runtime turns KAI on with annotations on its JobSet template, where the Volcano plugin also
//! reads its queue:
//!
//! | annotation | value |
//! |---|---|
//! | [`POLICY_ANNOTATION`] `kubetrain.dev/pod-group-policy` | `kai` turns the plugin on |
//! | [`QUEUE_ANNOTATION`] `kubetrain.dev/kai-queue` | the KAI queue (default [`DEFAULT_QUEUE`], the queue KAI creates at install) |
//!
//! For such a runtime the plugin
//! - gives every pod `schedulerName: kai-scheduler`,
//!   the queue label `kai.scheduler/queue` and the annotation `pod-group-name: <job>` KAI groups pods by;
//! - builds the PodGroup `scheduling.run.ai/v2alpha2` named like the TrainJob, owned by it, with
//!   `minMember` the TrainJob's pod count and `queue`.
//!
//! A runtime that also sets `spec.podGroupPolicy` is refused (a TrainJob has one gang scheduler), as is a pod
//! template naming another scheduler: by the operator's TrainJob webhook ([`CustomValidation`]) and by the
//! render.
//!
//! ```
//! let mut registry = kubetrain_jobset::plugins::Registry::builtin(&Default::default());
//! registry.register(kubetrain_plugin_kai::Kai).unwrap();
//! ```
//!
//! The operator's ServiceAccount needs `create` and `patch` on `podgroups` in `scheduling.run.ai`.

use kubetrain_api::{FieldError, TrainJob, TrainJobSpec, TrainingRuntimeSpec};
use kubetrain_jobset::companions::pod_group_totals;
use kubetrain_jobset::object::child_meta;
use kubetrain_jobset::plugins::{BuildContext, ComponentBuilder, RenderPlugin};
use kubetrain_jobset::{DynamicObject, Object, RenderError};
use kubetrain_merge::plugins::{CustomValidation, EnforcePodGroupPolicy, Plugin};
use kubetrain_merge::{Info, MergeError};
use serde_json::json;

/// Runtime template annotation that turns the plugin on (value [`POLICY_VALUE`]).
pub const POLICY_ANNOTATION: &str = "kubetrain.dev/pod-group-policy";
/// The value of [`POLICY_ANNOTATION`] naming this plugin.
pub const POLICY_VALUE: &str = "kai";
/// Runtime template annotation naming the KAI queue.
pub const QUEUE_ANNOTATION: &str = "kubetrain.dev/kai-queue";
/// The queue KAI creates when installed, used without [`QUEUE_ANNOTATION`].
pub const DEFAULT_QUEUE: &str = "default-queue";
/// The scheduler name KAI serves.
pub const SCHEDULER_NAME: &str = "kai-scheduler";
/// The pod label KAI reads the queue from.
pub const QUEUE_LABEL: &str = "kai.scheduler/queue";
/// The pod annotation naming the pod's PodGroup.
pub const POD_GROUP_ANNOTATION: &str = "pod-group-name";
/// apiVersion of KAI's PodGroup.
pub const POD_GROUP_API_VERSION: &str = "scheduling.run.ai/v2alpha2";

/// The plugin.
#[derive(Clone, Copy, Debug, Default)]
pub struct Kai;

/// The queue when `info`'s runtime turns KAI on, else `None`.
pub fn queue(info: &Info) -> Option<&str> {
    if info.annotations.get(POLICY_ANNOTATION).map(String::as_str) != Some(POLICY_VALUE) {
        return None;
    }
    Some(
        info.annotations
            .get(QUEUE_ANNOTATION)
            .map_or(DEFAULT_QUEUE, String::as_str),
    )
}

impl Plugin for Kai {
    fn name(&self) -> &str {
        "KAI"
    }

    fn pod_group_policy(&self) -> Option<&dyn EnforcePodGroupPolicy> {
        Some(self)
    }

    fn custom_validation(&self) -> Option<&dyn CustomValidation> {
        Some(self)
    }
}

/// What stops a KAI runtime from rendering, as (field path, message): a `spec.podGroupPolicy` beside the
/// annotation, or a pod template naming another scheduler. Shared by the webhook's validation and the render.
pub fn refusals(info: &Info) -> Vec<(String, String)> {
    if queue(info).is_none() {
        return Vec::new();
    }
    let mut found = Vec::new();
    if info.pod_group_policy.is_some() {
        found.push((
            format!("spec.template.metadata.annotations[{POLICY_ANNOTATION}]"),
            "a runtime with spec.podGroupPolicy cannot also use KAI; remove one of them".to_owned(),
        ));
    }
    for index in 0..info.pod_sets.len() {
        let name = info
            .pod_spec(index)
            .and_then(|p| p.scheduler_name.as_deref());
        if let Some(other) = name.filter(|n| *n != SCHEDULER_NAME) {
            found.push((
                format!("spec.template.spec.replicatedJobs[{index}].template.spec.template.spec.schedulerName"),
                format!("{other:?} is not KAI's scheduler; remove it or set {SCHEDULER_NAME:?}"),
            ));
        }
    }
    found
}

/// Scheduler name, queue label and pod-group annotation on every pod.
impl EnforcePodGroupPolicy for Kai {
    fn enforce_pod_group_policy(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        let Some(queue) = queue(info).map(str::to_owned) else {
            return Ok(());
        };
        if let Some((path, message)) = refusals(info).into_iter().next() {
            return Err(MergeError::Invalid { path, message });
        }
        for index in 0..info.pod_sets.len() {
            info.pod_spec_mut(index).scheduler_name = Some(SCHEDULER_NAME.to_owned());
        }
        info.scheduler
            .pod_labels
            .insert(QUEUE_LABEL.to_owned(), queue);
        info.scheduler
            .pod_annotations
            .insert(POD_GROUP_ANNOTATION.to_owned(), job.name().to_owned());
        Ok(())
    }
}

/// The webhook denies a runtime [`refusals`] refuse when it is created, and a TrainJob whose runtime (after
/// its runtime patches) they refuse, before anything is created.
impl CustomValidation for Kai {
    fn validate(&self, info: &Info, _: Option<&TrainJob>, _: &TrainJob) -> Vec<FieldError> {
        refusals(info)
            .into_iter()
            .map(|(path, message)| FieldError::error(path, message))
            .collect()
    }

    fn validate_runtime(&self, runtime: &TrainingRuntimeSpec) -> Vec<FieldError> {
        // The runtime as a TrainJob that overrides nothing sees it.
        let job = TrainJob::new("runtime", TrainJobSpec::default());
        match Info::new(&job, runtime) {
            Ok(info) => self.validate(&info, None, &job),
            Err(_) => Vec::new(),
        }
    }
}

impl RenderPlugin for Kai {
    fn component_builder(&self) -> Option<&dyn ComponentBuilder> {
        Some(self)
    }
}

/// The KAI PodGroup, re-applied by every reconcile (an idempotent server-side apply).
impl ComponentBuilder for Kai {
    fn build(
        &self,
        info: &Info,
        job: &TrainJob,
        _: &mut BuildContext<'_>,
    ) -> Result<Vec<Object>, RenderError> {
        let Some(queue) = queue(info) else {
            return Ok(Vec::new());
        };
        let (members, _) = pod_group_totals(info);
        let pod_group = DynamicObject::new(
            POD_GROUP_API_VERSION,
            "PodGroup",
            child_meta(job, job.name().to_owned()),
            json!({"spec": {"minMember": members, "queue": queue}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        )
        .map_err(|e| {
            RenderError::Merge(MergeError::Invalid {
                path: "metadata.name".to_owned(),
                message: format!("the KAI PodGroup: {e}"),
            })
        })?;
        Ok(vec![Object::Dynamic(Box::new(pod_group))])
    }
}
