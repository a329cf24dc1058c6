//! The runtime info: the "blackboard" every plugin reads and writes (upstream `runtime.Info`).
//!
//! Built from the runtime and the TrainJob in [`Info::new`]: labels and annotations, runtime patches merged into
//! the JobSet template, pod sets with counts, merged resources and per-pod requests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use kubetrain_api::constants::{ANCESTOR_TRAINER, NODE};
use kubetrain_api::jobset::JobSetSpec;
use kubetrain_api::{MLPolicy, MLPolicySource, PodGroupPolicy, TrainJob, TrainingRuntimeSpec};
use serde_json::Value;

use crate::error::MergeError;
use crate::resources::{self, ResourceList};
use crate::smp::{self, Schema};

/// One replicatedJob seen as a group of identical pods (upstream `runtime.PodSet`).
#[derive(Clone, Debug, PartialEq)]
pub struct PodSet {
    /// The replicatedJob name.
    pub name: String,
    /// Value of the `trainer.kubeflow.org/trainjob-ancestor-step` label of the job template, if any.
    pub ancestor: Option<String>,
    /// Pods per job replica; becomes `parallelism` and `completions`.
    pub count: i32,
    /// Requests of one pod, after the `resourcesPerNode` merge.
    pub single_pod_requests: ResourceList,
}

/// Labels and annotations the pod-group plugins add to every pod template.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scheduler {
    /// Pod labels, e.g. `scheduling.x-k8s.io/pod-group`.
    pub pod_labels: BTreeMap<String, String>,
    /// Pod annotations, e.g. `scheduling.k8s.io/group-name`.
    pub pod_annotations: BTreeMap<String, String>,
}

/// Everything the plugins and the JobSet builder share.
#[derive(Clone, Debug, PartialEq)]
pub struct Info {
    /// JobSet labels: runtime template labels, then runtime-patch labels.
    pub labels: BTreeMap<String, String>,
    /// JobSet annotations: runtime template annotations, then runtime-patch annotations.
    pub annotations: BTreeMap<String, String>,
    /// The runtime's ML policy; plugins may resolve defaults in it (e.g. MPI slots).
    pub ml_policy: Option<MLPolicy>,
    /// The runtime's pod-group policy.
    pub pod_group_policy: Option<PodGroupPolicy>,
    /// Pod labels and annotations from the pod-group plugins.
    pub scheduler: Scheduler,
    /// The JobSet spec: runtime template with runtime patches and merged resources; plugins inject into it.
    pub spec: JobSetSpec,
    /// One pod set per replicatedJob, index-aligned with `spec.replicated_jobs`.
    pub pod_sets: Vec<PodSet>,
    /// The trainer command the JobSet builder writes: `spec.trainer.command`, possibly rewritten (torchtune,
    /// Flux).
    pub trainer_command: Option<Vec<String>>,
    /// The trainer args the JobSet builder writes: `spec.trainer.args`; Flux clears them (the runtime's stay).
    pub trainer_args: Option<Vec<String>>,
}

impl Info {
    /// Overlays `job` onto `runtime` (upstream `newRuntimeInfo`).
    ///
    /// ```
    /// use kubetrain_api::{parse_documents, Document};
    /// use kubetrain_merge::Info;
    /// let docs = parse_documents(r#"
    /// apiVersion: trainer.kubeflow.org/v1alpha1
    /// kind: ClusterTrainingRuntime
    /// metadata: {name: torch-distributed}
    /// spec:
    ///   mlPolicy: {numNodes: 2, torch: {}}
    ///   template:
    ///     spec:
    ///       replicatedJobs:
    ///         - name: node
    ///           template:
    ///             metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
    ///             spec: {template: {spec: {containers: [{name: node, image: torch}]}}}
    /// ---
    /// apiVersion: trainer.kubeflow.org/v1alpha1
    /// kind: TrainJob
    /// metadata: {name: mnist}
    /// spec: {runtimeRef: {name: torch-distributed}}
    /// "#).unwrap();
    /// let (Document::ClusterTrainingRuntime(rt), Document::TrainJob(job)) = (&docs[0].document, &docs[1].document) else { panic!() };
    /// let info = Info::new(job, &rt.spec).unwrap();
    /// assert_eq!(info.pod_sets[0].count, 2);
    /// ```
    pub fn new(job: &TrainJob, runtime: &TrainingRuntimeSpec) -> Result<Self, MergeError> {
        let template = &runtime.template;
        let meta = template.metadata.as_ref();
        let mut labels = meta.and_then(|m| m.labels.clone()).unwrap_or_default();
        let mut annotations = meta.and_then(|m| m.annotations.clone()).unwrap_or_default();
        for patch in &job.spec.runtime_patches {
            let Some(m) = patch
                .training_runtime_spec
                .as_ref()
                .and_then(|s| s.template.as_ref())
                .and_then(|t| t.metadata.as_ref())
            else {
                continue;
            };
            labels.extend(m.labels.clone().unwrap_or_default());
            annotations.extend(m.annotations.clone().unwrap_or_default());
        }

        let mut spec = merge_runtime_patches(job, &template.spec)?;
        let ml_policy = runtime.ml_policy.clone();
        let run_launcher_as_node = matches!(
            ml_policy.as_ref().and_then(|p| p.source.as_ref()),
            Some(MLPolicySource::Mpi(mpi)) if mpi.run_launcher_as_node_or_default()
        );
        let resources_per_node = job
            .spec
            .trainer
            .as_ref()
            .and_then(|t| t.resources_per_node.as_ref());

        let mut pod_sets = Vec::with_capacity(spec.replicated_jobs.len());
        for rjob in &mut spec.replicated_jobs {
            let ancestor = rjob.ancestor().map(str::to_owned);
            let is_trainer = ancestor.as_deref() == Some(ANCESTOR_TRAINER);
            let mut count = rjob
                .template
                .spec
                .as_ref()
                .and_then(|s| s.parallelism)
                .unwrap_or(1);
            if let (true, Some(policy)) = (is_trainer, &ml_policy) {
                count = policy.num_nodes_or_default();
            }
            let merge_resources =
                (is_trainer && ml_policy.is_some()) || (run_launcher_as_node && rjob.name == NODE);
            let name = rjob.name.clone();
            let pod = rjob.pod_spec_mut();
            if let (true, Some(over)) = (merge_resources, resources_per_node)
                && let Some(node) = pod.containers.iter_mut().find(|c| c.name == NODE)
            {
                let base = node.resources.clone().unwrap_or_default();
                node.resources =
                    Some(resources::merge(&base, over).map_err(MergeError::Resources)?);
            }
            pod_sets.push(PodSet {
                name,
                ancestor,
                count: count.max(1),
                single_pod_requests: resources::pod_requests(pod),
            });
        }

        Ok(Info {
            labels,
            annotations,
            ml_policy,
            pod_group_policy: runtime.pod_group_policy.clone(),
            scheduler: Scheduler::default(),
            spec,
            pod_sets,
            trainer_command: job.spec.trainer.as_ref().and_then(|t| t.command.clone()),
            trainer_args: job.spec.trainer.as_ref().and_then(|t| t.args.clone()),
        })
    }

    /// The ML policy source, if the runtime has one.
    pub fn ml_source(&self) -> Option<&MLPolicySource> {
        self.ml_policy.as_ref().and_then(|p| p.source.as_ref())
    }

    /// Index of the first pod set with this ancestor.
    pub fn pod_set_by_ancestor(&self, ancestor: &str) -> Option<usize> {
        self.pod_sets
            .iter()
            .position(|p| p.ancestor.as_deref() == Some(ancestor))
    }

    /// Index of the first pod set with this name.
    pub fn pod_set_by_name(&self, name: &str) -> Option<usize> {
        self.pod_sets.iter().position(|p| p.name == name)
    }

    /// The pod spec of pod set `index`.
    pub fn pod_spec_mut(&mut self, index: usize) -> &mut PodSpec {
        self.spec.replicated_jobs[index].pod_spec_mut()
    }

    /// The pod spec of pod set `index`, if it has one.
    pub fn pod_spec(&self, index: usize) -> Option<&PodSpec> {
        self.spec.replicated_jobs[index].pod_spec()
    }

    /// Container `name` (containers, then init containers) of pod set `index`.
    pub fn container_mut(&mut self, index: usize, name: &str) -> Option<&mut Container> {
        let pod = self.pod_spec_mut(index);
        if let Some(i) = pod.containers.iter().position(|c| c.name == name) {
            return Some(&mut pod.containers[i]);
        }
        pod.init_containers
            .as_mut()?
            .iter_mut()
            .find(|c| c.name == name)
    }

    /// The trainer container: container `node` of the first pod set whose ancestor is `trainer`.
    pub fn trainer_container(&self) -> Option<&Container> {
        let index = self.pod_set_by_ancestor(ANCESTOR_TRAINER)?;
        self.pod_spec(index)?
            .containers
            .iter()
            .find(|c| c.name == NODE)
    }

    /// The trainer container, mutable: container `node` of the first pod set whose ancestor is `trainer`.
    pub fn trainer_container_mut(&mut self) -> Option<&mut Container> {
        let index = self.pod_set_by_ancestor(ANCESTOR_TRAINER)?;
        let pod = self.pod_spec_mut(index);
        pod.containers.iter_mut().find(|c| c.name == NODE)
    }

    /// Resources per node as the ML plugins see them: the TrainJob's `resourcesPerNode` as a whole if set, else the
    /// runtime's `node` container in the job named `node` or labelled trainer (`ExtractResourcePerNodeFromRuntime`).
    pub fn resources_per_node(
        &self,
        job: &TrainJob,
    ) -> k8s_openapi::api::core::v1::ResourceRequirements {
        self.resources_per_node_ref(job)
            .cloned()
            .unwrap_or_default()
    }

    /// [`Info::resources_per_node`] without the copy; `None` stands for empty requirements.
    pub fn resources_per_node_ref<'a>(
        &'a self,
        job: &'a TrainJob,
    ) -> Option<&'a k8s_openapi::api::core::v1::ResourceRequirements> {
        if let Some(r) = job
            .spec
            .trainer
            .as_ref()
            .and_then(|t| t.resources_per_node.as_ref())
        {
            return Some(r);
        }
        self.spec
            .replicated_jobs
            .iter()
            .filter(|rjob| rjob.name == NODE || rjob.ancestor() == Some(ANCESTOR_TRAINER))
            .find_map(|rjob| {
                rjob.pod_spec()?
                    .containers
                    .iter()
                    .find(|c| c.name == NODE)?
                    .resources
                    .as_ref()
            })
    }
}

/// Go's `omitempty` drops empty lists from the typed patch before upstream merges it; do the same.
fn prune_empty_lists(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !matches!(v, Value::Array(a) if a.is_empty()));
            map.values_mut().for_each(prune_empty_lists);
        }
        Value::Array(items) => items.iter_mut().for_each(prune_empty_lists),
        _ => {}
    }
}

/// Applies every runtime patch's `template.spec` in list order, then restores the runtime's replicatedJobs order.
fn merge_runtime_patches(job: &TrainJob, spec: &JobSetSpec) -> Result<JobSetSpec, MergeError> {
    let patches: Vec<_> = job
        .spec
        .runtime_patches
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            Some((
                i,
                p,
                p.training_runtime_spec
                    .as_ref()?
                    .template
                    .as_ref()?
                    .spec
                    .as_ref()?,
            ))
        })
        .collect();
    if patches.is_empty() {
        return Ok(spec.clone());
    }
    let mut doc =
        serde_json::to_value(spec).map_err(|e| MergeError::PatchedTemplate(e.to_string()))?;
    for (index, patch, patch_spec) in patches {
        let mut patch_value = serde_json::to_value(patch_spec)
            .map_err(|e| MergeError::PatchedTemplate(e.to_string()))?;
        prune_empty_lists(&mut patch_value);
        smp::apply_in_place(&mut doc, &patch_value, Schema::JobSetSpec).map_err(|source| {
            MergeError::RuntimePatch {
                index,
                manager: patch.manager.clone(),
                source,
            }
        })?;
    }
    let mut merged: JobSetSpec =
        serde_json::from_value(doc).map_err(|e| MergeError::PatchedTemplate(e.to_string()))?;
    let order: BTreeMap<&str, usize> = spec
        .replicated_jobs
        .iter()
        .enumerate()
        .map(|(i, r)| (r.name.as_str(), i))
        .collect();
    // A job the runtime lacks sorts as index 0, as Go's map lookup of a missing key does.
    merged
        .replicated_jobs
        .sort_by_key(|r| order.get(r.name.as_str()).copied().unwrap_or(0));
    Ok(merged)
}
