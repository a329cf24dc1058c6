//! Judging TrainJobs and runtimes against a policy: their risks and images, at TrainJob or runtime paths.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodSpec;
use kubetrain_api::constants::{ANCESTOR_TRAINER, NODE};
use kubetrain_api::{FieldError, RuntimeEntry, TrainJob, TrainingRuntimeSpec};

use super::{Subject, TrainingPolicy};
use crate::risk::{
    Risk, RiskKind, pod_spec_images, pod_spec_risks, resource_risks, runtime_pod_spec_path,
    security_context_risks, volume_risk,
};

/// The risks a TrainJob adds through its own fields, at TrainJob paths: the volumes and container security
/// contexts of `spec.runtimePatches`, and device resources in `spec.trainer.resourcesPerNode`.
pub(crate) fn pod_template_risks_of_trainjob(job: &TrainJob) -> Vec<Risk> {
    let mut risks = Vec::new();
    for (p, patch) in job.spec.runtime_patches.iter().enumerate() {
        let jobs = patch
            .training_runtime_spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .and_then(|t| t.spec.as_ref())
            .and_then(|s| s.replicated_jobs.as_ref());
        for (j, replicated) in jobs.into_iter().flatten().enumerate() {
            let Some(spec) = replicated
                .template
                .as_ref()
                .and_then(|t| t.spec.as_ref())
                .and_then(|s| s.template.as_ref())
                .and_then(|t| t.spec.as_ref())
            else {
                continue;
            };
            let path = format!(
                "spec.runtimePatches[{p}].trainingRuntimeSpec.template.spec.replicatedJobs[{j}].template.spec.template.spec"
            );
            for (v, volume) in spec.volumes.iter().flatten().enumerate() {
                risks.extend(volume_risk(volume, &format!("{path}.volumes[{v}]")));
            }
            let lists = [
                ("initContainers", spec.init_containers.as_ref()),
                ("containers", spec.containers.as_ref()),
            ];
            for (list, containers) in lists {
                for (c, container) in containers.into_iter().flatten().enumerate() {
                    if let Some(context) = &container.security_context {
                        risks.extend(security_context_risks(
                            context,
                            &container.name,
                            &format!("{path}.{list}[{c}].securityContext"),
                        ));
                    }
                }
            }
        }
    }
    if let Some(resources) = job
        .spec
        .trainer
        .as_ref()
        .and_then(|t| t.resources_per_node.as_ref())
    {
        risks.extend(resource_risks(
            resources,
            NODE,
            "spec.trainer.resourcesPerNode",
        ));
    }
    risks
}

/// The images a TrainJob sets itself, with their paths (`spec.trainer.image`).
pub(crate) fn trainjob_images(job: &TrainJob) -> Vec<(String, String)> {
    job.spec
        .trainer
        .as_ref()
        .and_then(|t| t.image.clone())
        .filter(|i| !i.is_empty())
        .map(|image| vec![("spec.trainer.image".to_owned(), image)])
        .unwrap_or_default()
}

/// Security-context settings a TrainJob's patches turn off explicitly: (replicated job, container, field).
fn turned_off(job: &TrainJob) -> BTreeSet<(String, String, RiskKind)> {
    let mut off = BTreeSet::new();
    for patch in &job.spec.runtime_patches {
        let jobs = patch
            .training_runtime_spec
            .as_ref()
            .and_then(|s| s.template.as_ref())
            .and_then(|t| t.spec.as_ref())
            .and_then(|s| s.replicated_jobs.as_ref());
        for replicated in jobs.into_iter().flatten() {
            let spec = replicated
                .template
                .as_ref()
                .and_then(|t| t.spec.as_ref())
                .and_then(|s| s.template.as_ref())
                .and_then(|t| t.spec.as_ref());
            let containers = spec.into_iter().flat_map(|s| {
                s.init_containers
                    .iter()
                    .flatten()
                    .chain(s.containers.iter().flatten())
            });
            for container in containers {
                let Some(context) = &container.security_context else {
                    continue;
                };
                let key = |kind| (replicated.name.clone(), container.name.clone(), kind);
                if context.privileged == Some(false) {
                    off.insert(key(RiskKind::Privileged));
                }
                if context.allow_privilege_escalation == Some(false) {
                    off.insert(key(RiskKind::PrivilegeEscalation));
                }
            }
        }
    }
    off
}

/// The container whose security context a risk path points into, if any.
fn container_of<'a>(spec: &'a PodSpec, pod_path: &str, risk_path: &str) -> Option<&'a str> {
    let rest = risk_path.strip_prefix(pod_path)?.strip_prefix('.')?;
    let (list, rest) = rest.split_once('[')?;
    let (index, rest) = rest.split_once(']')?;
    if !rest.starts_with(".securityContext.") {
        return None;
    }
    let index: usize = index.parse().ok()?;
    let container = match list {
        "containers" => spec.containers.get(index),
        "initContainers" => spec.init_containers.as_ref()?.get(index),
        _ => None,
    }?;
    Some(&container.name)
}

/// The risks and images of the runtime as a TrainJob's pods get them: the TrainJob's patches that set
/// `privileged` or `allowPrivilegeEscalation` to false remove the runtime's, and `spec.trainer.image`
/// replaces the trainer container's image.
fn runtime_part(job: &TrainJob, spec: &TrainingRuntimeSpec) -> (Vec<Risk>, Vec<(String, String)>) {
    let off = turned_off(job);
    let trainer_image = !trainjob_images(job).is_empty();
    let mut risks = Vec::new();
    let mut images = Vec::new();
    for (index, replicated) in spec.template.spec.replicated_jobs.iter().enumerate() {
        let Some(pod) = replicated.pod_spec() else {
            continue;
        };
        let path = runtime_pod_spec_path(index);
        risks.extend(pod_spec_risks(pod, &path).into_iter().filter(|risk| {
            container_of(pod, &path, &risk.path).is_none_or(|container| {
                !off.contains(&(replicated.name.clone(), container.to_owned(), risk.kind))
            })
        }));
        let is_trainer = replicated.ancestor() == Some(ANCESTOR_TRAINER);
        for (image_path, image) in pod_spec_images(pod, &path) {
            let replaced = trainer_image
                && is_trainer
                && pod.containers.iter().enumerate().any(|(c, container)| {
                    container.name == NODE && image_path == format!("{path}.containers[{c}].image")
                });
            if !replaced {
                images.push((image_path, image));
            }
        }
    }
    (risks, images)
}

impl TrainingPolicy {
    /// The denials of a TrainJob: what its own fields add (at TrainJob paths) and what the runtime it
    /// references gives its pods (at the runtime's paths, prefixed with `<Kind>/<name>:`), unless an exception
    /// allows it for the job's namespace or that runtime. `runtime` is `None` when the reference does not
    /// resolve (only the job's own fields are judged then). `namespace_labels` serve namespace selectors.
    pub fn evaluate_trainjob(
        &self,
        job: &TrainJob,
        runtime: Option<RuntimeEntry<'_>>,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> Vec<FieldError> {
        let namespace = job
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| kubetrain_api::catalog::DEFAULT_NAMESPACE.to_owned());
        let mut subject = Subject::namespace(namespace);
        subject.namespace_labels = namespace_labels.cloned();
        if let Some(entry) = runtime {
            subject = subject.with_runtime(entry.kind(), entry.name());
        }
        let mut denials = self.denials(
            pod_template_risks_of_trainjob(job),
            trainjob_images(job),
            &subject,
            "",
        );
        if let Some(entry) = runtime {
            let (risks, images) = runtime_part(job, entry.spec());
            let prefix = format!("{}/{}:", entry.kind(), entry.name());
            denials.extend(self.denials(risks, images, &subject, &prefix));
        }
        denials
    }

    /// The denials of a runtime of `kind` named `name` (in `namespace` for a TrainingRuntime), at runtime
    /// paths. `namespace_labels` serve namespace selectors.
    pub fn evaluate_runtime(
        &self,
        kind: &str,
        name: &str,
        namespace: Option<&str>,
        spec: &TrainingRuntimeSpec,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> Vec<FieldError> {
        let subject = Subject {
            namespace: namespace.map(str::to_owned),
            namespace_labels: namespace_labels.cloned(),
            runtime: Some((kind.to_owned(), name.to_owned())),
        };
        let images = spec
            .template
            .spec
            .replicated_jobs
            .iter()
            .enumerate()
            .filter_map(|(i, job)| {
                Some(pod_spec_images(job.pod_spec()?, &runtime_pod_spec_path(i)))
            })
            .flatten()
            .collect();
        self.denials(crate::risk::runtime_risks(spec), images, &subject, "")
    }

    /// The risks and images the policy refuses for `subject`, as errors at `prefix` + their paths.
    pub fn denials(
        &self,
        risks: Vec<Risk>,
        images: Vec<(String, String)>,
        subject: &Subject,
        prefix: &str,
    ) -> Vec<FieldError> {
        let mut denials: Vec<FieldError> = risks
            .into_iter()
            .filter(|risk| !self.allows(risk, subject))
            .map(|risk| {
                FieldError::error(
                    format!("{prefix}{}", risk.path),
                    self.risk_message(&risk, subject),
                )
            })
            .collect();
        denials.extend(
            images
                .into_iter()
                .filter(|(_, image)| !self.image_allowed(image, subject))
                .map(|(path, image)| {
                    FieldError::error(
                        format!("{prefix}{path}"),
                        self.image_message(&image, subject),
                    )
                }),
        );
        denials
    }

    fn risk_message(&self, risk: &Risk, subject: &Subject) -> String {
        let hint = match risk.kind {
            RiskKind::HostPath | RiskKind::Device => {
                format!("allow.{}: [{:?}]", risk.kind, risk.subject)
            }
            kind => format!("allow.{kind}: true"),
        };
        format!(
            "{}, which training policy {:?} refuses; to permit it, add an exception for {} with {hint}",
            risk.detail,
            self.name(),
            subject.describe()
        )
    }

    fn image_message(&self, image: &str, subject: &Subject) -> String {
        let normalized = super::normalize_image(image);
        let spelled = if normalized == image.trim() {
            format!("{image:?}")
        } else {
            format!("{image:?} ({normalized})")
        };
        let registries = self.spec.registries.clone().unwrap_or_default().join(", ");
        format!(
            "image {spelled} is not from a registry training policy {:?} allows ({registries}); use one of \
             those, or add an exception for {} with allow.registries: [{:?}]",
            self.name(),
            subject.describe(),
            registry_of(&normalized)
        )
    }
}

/// The registry part of a normalized image, with a trailing `/`.
fn registry_of(normalized: &str) -> String {
    normalized
        .split_once('/')
        .map(|(registry, _)| format!("{registry}/"))
        .unwrap_or_else(|| normalized.to_owned())
}
