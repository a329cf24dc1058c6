//! TrainJobs in the model (feature `trainjob`): the Workload Kueue's TrainJob integration builds,
//! and [`admit`], one call from a TrainJob, its runtimes and a Kueue setup to a typed verdict.
//!
//! Upstream (kueue v0.19.1, `pkg/controller/jobs/trainjob`) renders the TrainJob's child JobSet
//! from the resolved runtime and the TrainJob's overrides, then takes the JobSet integration's pod
//! sets: one per replicatedJob, named after it, with its pod template and count = replicas ×
//! min(parallelism, completions). Here the JobSet comes from kubetrain's own renderer
//! ([`kubetrain_jobset::render`], the same one `kubetrain render` and the operator use), so the
//! counts, `resourcesPerNode`, pod overhead, node selectors and tolerations of the pod sets are those
//! of the JobSet the controller applies. The Workload also carries what jobframework adds: the queue
//! from the TrainJob's `kueue.x-k8s.io/queue-name` label, the WorkloadPriorityClass from its
//! `kueue.x-k8s.io/priority-class` label, the TrainJob's UID as `kueue.x-k8s.io/job-uid`, and its
//! creation time.
//!
//! This module sits behind a feature because it pulls in the render crates (and `k8s-openapi`);
//! the model itself stays a pure crate with no Kubernetes types.

use std::collections::BTreeMap;

use kubetrain_api::jobset::{JobSet, ReplicatedJob};
use kubetrain_api::{Document, FieldError as ApiFieldError, RuntimeCatalog, TrainJob};
use kubetrain_api::{TrainingRuntimeSpec, parse_value};
use kubetrain_jobset::plugins::Registry;
use kubetrain_jobset::ssh::seeded_rng;
use kubetrain_jobset::{Observed, RenderError, Rendered, render, render_with_registry, resolve};

use crate::admit::{AdmissionVerdict, admit_workload};
use crate::api::JOB_UID_LABEL;
use crate::api::{
    Container, ObjectMeta, PodSet, PodSpec, PodTemplateSpec, PriorityClassRef,
    ResourceRequirements, Toleration, WorkloadSpec, WorkloadStatus,
};
use crate::error::LoadError;
use crate::load::{Setup, WorkloadObject};
use crate::model::ELASTIC_POD_SET_ANNOTATION;
use crate::quantity::Quantity;
use kubetrain_api::constants::{ELASTIC_MIN_NODES_ANNOTATION, ELASTIC_REPLICATED_JOB_ANNOTATION};

/// The label that names a TrainJob's LocalQueue.
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The label that names a TrainJob's WorkloadPriorityClass.
pub const PRIORITY_CLASS_LABEL: &str = "kueue.x-k8s.io/priority-class";

/// Why a TrainJob could not be turned into a Workload or judged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainJobError {
    /// Runtime resolution or rendering failed (unknown runtime, bad runtime patch, …).
    #[error("TrainJob/{job}: {source}")]
    Render {
        /// `namespace/name` of the TrainJob.
        job: String,
        /// What render said.
        #[source]
        source: RenderError,
    },
    /// The rendered JobSet holds a quantity the model cannot read.
    #[error("TrainJob/{job}: {path}: {message}")]
    Quantity {
        /// `namespace/name` of the TrainJob.
        job: String,
        /// Where in the rendered JobSet.
        path: String,
        /// The parser's message.
        message: String,
    },
    /// A `trainer.kubeflow.org` document of the setup is not a valid TrainJob or runtime.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Parse(Vec<ApiFieldError>),
    /// The Kueue setup does not load.
    #[error(transparent)]
    Model(#[from] LoadError),
}

/// The name of the Workload built for TrainJob `name` in the model: `trainjob-NAME` (upstream adds
/// a 5-character hash of the TrainJob's name, UID and kind, which the model leaves out).
pub fn workload_name(name: &str) -> String {
    format!("trainjob-{name}")
}

fn key_of(job: &TrainJob) -> String {
    format!(
        "{}/{}",
        job.metadata.namespace.as_deref().unwrap_or("default"),
        job.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The Workload Kueue's TrainJob integration builds for `job` on `runtime` (see the module docs).
pub fn workload_for(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
) -> Result<WorkloadObject, TrainJobError> {
    // Key material is irrelevant to admission: a fixed seed keeps this pure and cheap.
    let rendered = render(job, runtime, &Observed::default(), &mut seeded_rng(0));
    workload_from_render(job, rendered)
}

/// [`workload_for`] with the JobSet rendered by `plugins` (the built-ins and an embedder's own, as its
/// operator renders it), so that the pod sets Kueue admits are those of the JobSet that operator applies.
pub fn workload_for_with_plugins(
    job: &TrainJob,
    runtime: &TrainingRuntimeSpec,
    plugins: &Registry,
) -> Result<WorkloadObject, TrainJobError> {
    let rendered = render_with_registry(
        job,
        runtime,
        &Observed::default(),
        plugins,
        &mut seeded_rng(0),
    );
    workload_from_render(job, rendered)
}

/// The Workload of a render's JobSet, or the render's error.
fn workload_from_render(
    job: &TrainJob,
    rendered: Result<Rendered, RenderError>,
) -> Result<WorkloadObject, TrainJobError> {
    let rendered = rendered.map_err(|source| TrainJobError::Render {
        job: key_of(job),
        source,
    })?;
    match rendered.objects.first().and_then(|o| o.as_jobset()) {
        Some(jobset) => workload_from_jobset(job, jobset),
        None => workload_from_replicated_jobs(job, &[], &BTreeMap::new()),
    }
}

/// [`workload_for`] from the JobSet `job` was already rendered into (by [`kubetrain_jobset::render`]),
/// for callers that render anyway, such as the local runner.
pub fn workload_from_jobset(
    job: &TrainJob,
    jobset: &JobSet,
) -> Result<WorkloadObject, TrainJobError> {
    let annotations = jobset.metadata.annotations.clone().unwrap_or_default();
    workload_from_replicated_jobs(job, &jobset.spec.replicated_jobs, &annotations)
}

/// The elastic bounds the renderer put on the JobSet (KEP-2903): the replicated job of the nodes and the
/// fewest nodes the job runs with.
fn elastic_bounds(jobset_annotations: &BTreeMap<String, String>) -> Option<(&str, i32)> {
    let job = jobset_annotations.get(ELASTIC_REPLICATED_JOB_ANNOTATION)?;
    let min = jobset_annotations
        .get(ELASTIC_MIN_NODES_ANNOTATION)?
        .parse()
        .ok()?;
    Some((job.as_str(), min))
}

fn workload_from_replicated_jobs(
    job: &TrainJob,
    replicated_jobs: &[ReplicatedJob],
    jobset_annotations: &BTreeMap<String, String>,
) -> Result<WorkloadObject, TrainJobError> {
    let key = key_of(job);
    // An elastic TrainJob's node pod set may be admitted with fewer pods, down to its minNodes: the PodSet's
    // minCount. (Kueue v0.19's JobSet integration sets no minCount, see docs/operator.md "Elastic TrainJobs";
    // the model admits an elastic TrainJob as it would with one.)
    let elastic = elastic_bounds(jobset_annotations);
    let mut pod_sets = Vec::new();
    for (i, rj) in replicated_jobs.iter().enumerate() {
        let spec = rj.template.spec.as_ref();
        let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1);
        let completions = spec.and_then(|s| s.completions).unwrap_or(parallelism);
        let count = i64::from(rj.replicas_or_default()) * i64::from(parallelism.min(completions));
        let template = spec.map(|s| &s.template);
        let path = format!("spec.replicatedJobs[{i}].template.spec.template");
        let count = count.clamp(0, i64::from(i32::MAX)) as i32;
        let min_count = elastic
            .filter(|&(name, min)| name == rj.name && min >= 1 && min < count)
            .map(|(_, min)| {
                min.saturating_mul(rj.replicas_or_default().max(1))
                    .min(count)
            });
        pod_sets.push(PodSet {
            name: rj.name.to_lowercase(),
            template: pod_template(template, &key, &path)?,
            count,
            min_count,
            topology_request: None,
        });
    }
    let meta = &job.metadata;
    let labels = meta.labels.clone().unwrap_or_default();
    let mut wl_labels = BTreeMap::new();
    if let Some(uid) = &meta.uid {
        wl_labels.insert(JOB_UID_LABEL.to_string(), uid.clone());
    }
    let mut annotations: BTreeMap<String, String> = meta
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("kubetrain.dev/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some((name, _)) = elastic {
        annotations.insert(ELASTIC_POD_SET_ANNOTATION.to_owned(), name.to_lowercase());
    }
    Ok(WorkloadObject {
        metadata: ObjectMeta {
            name: workload_name(meta.name.as_deref().unwrap_or_default()),
            namespace: Some(meta.namespace.clone().unwrap_or_else(|| "default".into())),
            labels: wl_labels,
            annotations,
            creation_timestamp: meta
                .creation_timestamp
                .as_ref()
                .and_then(|t| serde_json::to_value(t).ok())
                .and_then(|v| v.as_str().map(str::to_string)),
            ..ObjectMeta::default()
        },
        spec: WorkloadSpec {
            pod_sets,
            queue_name: labels.get(QUEUE_NAME_LABEL).cloned(),
            priority_class_ref: labels
                .get(PRIORITY_CLASS_LABEL)
                .map(|name| PriorityClassRef {
                    group: Some("kueue.x-k8s.io".to_string()),
                    kind: Some("WorkloadPriorityClass".to_string()),
                    name: name.clone(),
                }),
            ..WorkloadSpec::default()
        },
        status: WorkloadStatus::default(),
    })
}

/// What Kueue would do with `job` in `setup` now: resolves its runtime in `catalog` (for the built-in
/// runtimes, `kubetrain_jobset::builtin::catalog()`), builds its Workload ([`workload_for`]) and
/// runs the model ([`admit_workload`]).
///
/// ```
/// use kubetrain_api::{Document, parse_documents};
/// use kubetrain_kueue::{admit, load::Setup};
///
/// let setup = Setup::from_yaml(r#"
/// apiVersion: kueue.x-k8s.io/v1beta2
/// kind: ResourceFlavor
/// metadata: {name: a100}
/// spec: {nodeLabels: {gpu: a100}}
/// ---
/// apiVersion: kueue.x-k8s.io/v1beta2
/// kind: ClusterQueue
/// metadata: {name: team}
/// spec:
///   namespaceSelector: {}
///   resourceGroups:
///   - coveredResources: [cpu, nvidia.com/gpu]
///     flavors: [{name: a100, resources: [{name: cpu, nominalQuota: 64},
///                                        {name: nvidia.com/gpu, nominalQuota: 8}]}]
/// ---
/// apiVersion: kueue.x-k8s.io/v1beta2
/// kind: LocalQueue
/// metadata: {name: team-q, namespace: ml}
/// spec: {clusterQueue: team}
/// "#).unwrap();
/// let docs = parse_documents(r#"
/// apiVersion: trainer.kubeflow.org/v1alpha1
/// kind: TrainJob
/// metadata: {name: llama, namespace: ml, labels: {kueue.x-k8s.io/queue-name: team-q}}
/// spec:
///   runtimeRef: {name: torch-distributed}
///   trainer: {numNodes: 2, resourcesPerNode: {limits: {nvidia.com/gpu: 4}}}
/// "#).unwrap();
/// let Document::TrainJob(job) = &docs[0].document else { unreachable!() };
/// let catalog = kubetrain_jobset::builtin::catalog();
///
/// let verdict = admit(job, &catalog, &setup).unwrap();
/// let admitted = verdict.admitted().expect("8 GPUs fit");
/// assert_eq!(admitted.pod_sets[0].name, "node");
/// assert_eq!(admitted.pod_sets[0].count, 2);
/// assert_eq!(admitted.pod_sets[0].flavors["nvidia.com/gpu"], "a100");
///
/// // Three nodes need 12 GPUs: more than the queue will ever have.
/// let mut big = (**job).clone();
/// big.spec.trainer.as_mut().unwrap().num_nodes = Some(3);
/// let waiting = admit(&big, &catalog, &setup).unwrap();
/// let waiting = waiting.waiting().unwrap();
/// assert_eq!(waiting.reason, "ExceedsMaxQuota");
/// ```
pub fn admit(
    job: &TrainJob,
    catalog: &RuntimeCatalog,
    setup: &Setup,
) -> Result<AdmissionVerdict, TrainJobError> {
    let runtime = resolve(catalog, job).map_err(|source| TrainJobError::Render {
        job: key_of(job),
        source,
    })?;
    check_trainjob(job, catalog)?;
    let workload = workload_for(job, runtime)?;
    Ok(admit_workload(setup, workload)?)
}

/// Turns the `trainer.kubeflow.org` documents a setup read ([`Setup::trainer_documents`]) into
/// Workloads: runtimes are added to `catalog` first (so a TrainJob may precede its runtime), then each
/// TrainJob becomes the Workload of [`workload_for`] in `setup.workloads`. Returns the keys
/// (`namespace/name`) of the TrainJobs with their Workloads' keys.
pub fn add_trainjobs(
    setup: &mut Setup,
    catalog: &mut RuntimeCatalog,
) -> Result<Vec<(String, String)>, TrainJobError> {
    let mut jobs = Vec::new();
    let mut errors = Vec::new();
    for (index, value) in std::mem::take(&mut setup.trainer_documents)
        .into_iter()
        .enumerate()
    {
        match parse_value(value, index) {
            Ok(Document::TrainJob(job)) => jobs.push(job),
            Ok(doc) => {
                catalog.add_document(&doc);
            }
            Err(mut e) => errors.append(&mut e),
        }
    }
    if !errors.is_empty() {
        return Err(TrainJobError::Parse(errors));
    }
    let mut added = Vec::new();
    for job in jobs {
        let runtime = resolve(catalog, &job).map_err(|source| TrainJobError::Render {
            job: key_of(&job),
            source,
        })?;
        check_trainjob(&job, catalog)?;
        let wl = workload_for(&job, runtime)?;
        added.push((key_of(&job), wl.key()));
        setup.workloads.push(wl);
    }
    Ok(added)
}

/// The TrainJob's own validation (schema, CEL, webhook rules, Kubernetes quantity rules on
/// `resourcesPerNode`), as `kubetrain validate` and the webhook apply it: a TrainJob the API server
/// would refuse has no Workload. Warnings pass.
fn check_trainjob(job: &TrainJob, catalog: &RuntimeCatalog) -> Result<(), TrainJobError> {
    let errors: Vec<ApiFieldError> = kubetrain_api::validation::validate_trainjob(job, catalog)
        .into_iter()
        .filter(|e| e.severity == kubetrain_api::Severity::Error)
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(TrainJobError::Parse(errors))
    }
}

/// Every quantity of the rendered pods (runtime containers, overhead) under Kubernetes' rules:
/// a quantity, not negative, at most what Kubernetes reads as an `int64`.
fn quantities(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    job: &str,
    path: &str,
) -> Result<BTreeMap<String, Quantity>, TrainJobError> {
    let mut out = BTreeMap::new();
    const NANO: i128 = 1_000_000_000;
    for (name, q) in map.into_iter().flatten() {
        let err = |message: String| TrainJobError::Quantity {
            job: job.to_string(),
            path: format!("{path}.{name}"),
            message,
        };
        let text = &q.0;
        let nanos = kubetrain_quantity::Nanos::parse(text)
            .map_err(|e| err(format!("Invalid value: {text:?}: {e}")))?;
        if nanos.0 < 0 {
            return Err(err(format!(
                "Invalid value: {text:?}: must be greater than or equal to 0"
            )));
        }
        if nanos.0 > i128::from(i64::MAX) * NANO {
            return Err(err(format!(
                "Invalid value: {text:?}: must be less than or equal to {} (the largest value Kubernetes reads)",
                i64::MAX
            )));
        }
        let v = Quantity::parse(text).map_err(|e| err(e.to_string()))?;
        out.insert(name.clone(), v);
    }
    Ok(out)
}

fn containers(
    list: &[k8s_openapi::api::core::v1::Container],
    job: &str,
    path: &str,
) -> Result<Vec<Container>, TrainJobError> {
    list.iter()
        .enumerate()
        .map(|(i, c)| {
            let r = c.resources.as_ref();
            let p = format!("{path}[{i}].resources");
            Ok(Container {
                name: c.name.clone(),
                resources: ResourceRequirements {
                    requests: quantities(
                        r.and_then(|r| r.requests.as_ref()),
                        job,
                        &format!("{p}.requests"),
                    )?,
                    limits: quantities(
                        r.and_then(|r| r.limits.as_ref()),
                        job,
                        &format!("{p}.limits"),
                    )?,
                },
                restart_policy: c.restart_policy.clone(),
            })
        })
        .collect()
}

/// The model's view of a rendered pod template: requests and limits of every container, init
/// containers (sidecars by their `restartPolicy`), pod overhead, node selector, tolerations, the
/// pod priority class and the template's labels and annotations.
fn pod_template(
    template: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>,
    job: &str,
    path: &str,
) -> Result<PodTemplateSpec, TrainJobError> {
    let Some(t) = template else {
        return Ok(PodTemplateSpec::default());
    };
    let meta = t.metadata.as_ref();
    let Some(spec) = t.spec.as_ref() else {
        return Ok(PodTemplateSpec::default());
    };
    Ok(PodTemplateSpec {
        metadata: ObjectMeta {
            labels: meta.and_then(|m| m.labels.clone()).unwrap_or_default(),
            annotations: meta.and_then(|m| m.annotations.clone()).unwrap_or_default(),
            ..ObjectMeta::default()
        },
        spec: PodSpec {
            containers: containers(&spec.containers, job, &format!("{path}.spec.containers"))?,
            init_containers: containers(
                spec.init_containers.as_deref().unwrap_or_default(),
                job,
                &format!("{path}.spec.initContainers"),
            )?,
            overhead: quantities(
                spec.overhead.as_ref(),
                job,
                &format!("{path}.spec.overhead"),
            )?,
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            tolerations: spec
                .tolerations
                .iter()
                .flatten()
                .map(|t| Toleration {
                    key: t.key.clone(),
                    operator: t.operator.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                    toleration_seconds: t.toleration_seconds,
                })
                .collect(),
            priority_class_name: spec.priority_class_name.clone(),
            affinity: node_affinity(spec),
        },
    })
}

/// The required node affinity of a rendered pod spec (what Kueue's flavor matching reads).
fn node_affinity(spec: &k8s_openapi::api::core::v1::PodSpec) -> Option<crate::api::Affinity> {
    let required = spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?;
    let terms = required
        .node_selector_terms
        .iter()
        .map(|t| crate::api::NodeSelectorTerm {
            match_expressions: t
                .match_expressions
                .iter()
                .flatten()
                .map(|r| crate::api::NodeSelectorRequirement {
                    key: r.key.clone(),
                    operator: r.operator.clone(),
                    values: r.values.clone().unwrap_or_default(),
                })
                .collect(),
            match_fields: Vec::new(),
        })
        .collect();
    Some(crate::api::Affinity {
        node_affinity: Some(crate::api::NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(crate::api::NodeSelector {
                node_selector_terms: terms,
            }),
        }),
    })
}

#[cfg(test)]
mod elastic_annotation {
    /// The model's name for the elastic pod-set annotation is the renderer's (the model crate has no
    /// kubetrain-api without this feature, so it keeps its own copy).
    #[test]
    fn the_model_reads_the_annotation_the_renderer_writes() {
        assert_eq!(
            crate::model::ELASTIC_POD_SET_ANNOTATION,
            kubetrain_api::constants::ELASTIC_REPLICATED_JOB_ANNOTATION
        );
    }
}
