//! Reading multi-document YAML into a [`Setup`]: Kueue objects (v1beta2 and v1beta1), Namespaces,
//! Kueue's `Configuration`, batch Jobs and JobSets (turned into Workloads the way Kueue's job
//! integrations do), our `QueueScenario` and scheduler-performance generator configs.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::{
    AdmissionCheckSpec, AdmissionCheckStatus, ClusterQueueSpec, CohortSpec, Configuration,
    LocalQueueSpec, ObjectMeta, PodSet, PodTemplateSpec, ResourceFlavorSpec, TopologySpec,
    WorkloadPriorityClass, WorkloadSpec, WorkloadStatus,
};
use crate::error::{LoadError, SetupFieldError};
use crate::sim::generator::GeneratorConfig;
use crate::sim::scenario::ScenarioSpec;

/// A Kueue object with metadata and spec.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KueueObject<S> {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: S,
}

/// A Workload with its (optional) status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadObject {
    /// Metadata.
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: WorkloadSpec,
    /// Status: an existing admission makes the workload start admitted.
    #[serde(default)]
    pub status: WorkloadStatus,
}

impl WorkloadObject {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or("default"),
            self.metadata.name
        )
    }
}

/// An AdmissionCheck with its status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdmissionCheckObject {
    /// Metadata (`kubetrain.dev/answers` tells the simulator how the check answers).
    pub metadata: ObjectMeta,
    /// Spec.
    pub spec: AdmissionCheckSpec,
    /// Status.
    #[serde(default)]
    pub status: AdmissionCheckStatus,
}

/// Everything read from a set of YAML streams.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Setup {
    /// ResourceFlavors.
    pub flavors: Vec<KueueObject<ResourceFlavorSpec>>,
    /// Cohorts.
    pub cohorts: Vec<KueueObject<CohortSpec>>,
    /// ClusterQueues.
    pub cluster_queues: Vec<KueueObject<ClusterQueueSpec>>,
    /// LocalQueues.
    pub local_queues: Vec<KueueObject<LocalQueueSpec>>,
    /// AdmissionChecks with their status (`Active`).
    pub admission_checks: Vec<AdmissionCheckObject>,
    /// Topologies (levels of node labels) for topology-aware scheduling.
    pub topologies: Vec<KueueObject<TopologySpec>>,
    /// Nodes (labels, allocatable, taints) for topology-aware scheduling.
    pub nodes: Vec<crate::tas::Node>,
    /// WorkloadPriorityClasses.
    pub priority_classes: Vec<WorkloadPriorityClass>,
    /// Workloads (including those derived from Jobs and JobSets).
    pub workloads: Vec<WorkloadObject>,
    /// Namespaces with their labels.
    pub namespaces: Vec<ObjectMeta>,
    /// Kueue's controller configuration, if given.
    pub configuration: Option<Configuration>,
    /// Simulation settings, if given.
    pub scenario: Option<ScenarioSpec>,
    /// Scheduler-performance generator configs.
    pub generators: Vec<GeneratorConfig>,
    /// Documents that were read but are not part of the model (kind and name).
    pub skipped: Vec<String>,
    /// `trainer.kubeflow.org` documents (TrainJobs and runtimes), kept as read; with the `trainjob`
    /// feature, `trainjob::add_trainjobs` turns the TrainJobs into the Workloads Kueue builds.
    pub trainer_documents: Vec<Value>,
    /// MultiKueueCluster and MultiKueueConfig documents, kept as read (module `multikueue`).
    pub multikueue: Vec<Value>,
}

/// Our scenario document: `apiVersion: kubetrain.dev/v1alpha1`, `kind: QueueScenario`.
pub const SCENARIO_API_VERSION: &str = "kubetrain.dev/v1alpha1";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Doc<S> {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: S,
    #[serde(default)]
    status: Option<Value>,
}

impl Setup {
    /// Reads one YAML stream (several `---` documents) and adds its objects.
    ///
    /// ```
    /// let mut setup = kubetrain_kueue::load::Setup::default();
    /// setup.add_yaml("setup.yaml", "
    /// apiVersion: kueue.x-k8s.io/v1beta2
    /// kind: ResourceFlavor
    /// metadata: {name: a100}
    /// ").unwrap();
    /// assert_eq!(setup.flavors[0].metadata.name, "a100");
    /// ```
    ///
    /// Documents are split at their `---` / `...` markers and parsed one at a time, so a stream of any
    /// number of documents loads (a 15,000-workload setup) while only one document's tree is held besides
    /// what the setup keeps.
    pub fn add_yaml(&mut self, source_name: &str, text: &str) -> Result<(), LoadError> {
        let mut errors = Vec::new();
        for (index, (line, document)) in kubetrain_yaml::split_documents(text)
            .into_iter()
            .enumerate()
        {
            if document
                .lines()
                .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
            {
                continue;
            }
            if document.len() > MAX_DOCUMENT_BYTES {
                return Err(LoadError::Yaml {
                    source_name: source_name.to_string(),
                    message: kubetrain_yaml::document_too_large(index + 1, line, document.len()),
                });
            }
            let doc: Value = serde_saphyr::from_str(document).map_err(|e| LoadError::Yaml {
                source_name: source_name.to_string(),
                message: format!(
                    "document {} (from line {line}): {}",
                    index + 1,
                    kubetrain_yaml::yaml_error(&e, line)
                ),
            })?;
            if doc.is_null() {
                continue;
            }
            if let Err(mut e) = self.add_document(source_name, index, doc) {
                match &mut e {
                    LoadError::Invalid(list) => errors.append(list),
                    _ => return Err(e),
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(LoadError::Invalid(errors))
        }
    }

    /// Parses a whole stream into a new setup.
    pub fn from_yaml(text: &str) -> Result<Self, LoadError> {
        let mut setup = Self::default();
        setup.add_yaml("<input>", text)?;
        Ok(setup)
    }

    /// A `v1` `List` (what `kubectl get A,B,C -o yaml` prints): each of its `items` is read as a
    /// document of its own; the errors of all of them are reported together.
    fn add_list(&mut self, source: &str, index: usize, mut doc: Value) -> Result<(), LoadError> {
        let items = match doc.get_mut("items").map(Value::take) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items,
            Some(_) => {
                return Err(LoadError::Document {
                    source_name: source.to_string(),
                    index,
                    message: "a List's `items` must be a sequence of objects".to_string(),
                });
            }
        };
        let mut errors = Vec::new();
        for item in items {
            match self.add_document(source, index, item) {
                Ok(()) => {}
                Err(LoadError::Invalid(mut list)) => errors.append(&mut list),
                Err(e) => return Err(e),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(LoadError::Invalid(errors))
        }
    }

    fn add_document(&mut self, source: &str, index: usize, doc: Value) -> Result<(), LoadError> {
        let Some(obj) = doc.as_object() else {
            return Err(LoadError::Document {
                source_name: source.to_string(),
                index,
                message: "expected a mapping with apiVersion and kind".to_string(),
            });
        };
        let kind = obj.get("kind").and_then(Value::as_str).map(str::to_string);
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let group = api_version.split('/').next().unwrap_or("");
        let name = obj
            .get("metadata")
            .and_then(|m| m.get("name").or_else(|| m.get("generateName")))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let Some(kind) = kind else {
            if obj.contains_key("cohorts") {
                let generator = typed::<GeneratorConfig>("GeneratorConfig", source, doc)?;
                self.generators.push(generator);
                return Ok(());
            }
            return Err(LoadError::Document {
                source_name: source.to_string(),
                index,
                message: "missing `kind` (and not a generator config with `cohorts`)".to_string(),
            });
        };
        if (group, kind.as_str()) == ("v1", "List") {
            return self.add_list(source, index, doc);
        }
        if group == "kueue.x-k8s.io" {
            return self.add_kueue_object(&kind, &name, doc);
        }
        match (group, kind.as_str()) {
            ("v1", "Node") => self
                .nodes
                .push(crate::tas::Node::from_document(&name, &doc)?),
            ("config.kueue.x-k8s.io", "Configuration") => {
                self.configuration = Some(typed(&kind, &name, doc)?);
            }
            ("v1", "Namespace") => {
                let meta: ObjectMeta = typed(
                    &kind,
                    &name,
                    obj.get("metadata").cloned().unwrap_or(Value::Null),
                )?;
                self.namespaces.push(meta);
            }
            ("batch", "Job") => self.workloads.push(job_workload(&name, &doc)?),
            ("jobset.x-k8s.io", "JobSet") => self.workloads.push(jobset_workload(&name, &doc)?),
            ("trainer.kubeflow.org", _) => self.trainer_documents.push(doc),
            ("kubetrain.dev", "QueueScenario") => {
                let d: Doc<ScenarioSpec> = typed(&kind, &name, doc)?;
                self.scenario = Some(d.spec);
            }
            _ => self.skipped.push(format!("{kind}/{name}")),
        }
        Ok(())
    }

    /// Adds one object of Kueue's API group (`kueue.x-k8s.io`); a kind this crate does not model is skipped.
    fn add_kueue_object(&mut self, kind: &str, name: &str, doc: Value) -> Result<(), LoadError> {
        match kind {
            "ResourceFlavor" => self.flavors.push(object(kind, name, doc)?),
            "Cohort" => self.cohorts.push(object(kind, name, doc)?),
            "ClusterQueue" => self.cluster_queues.push(object(kind, name, doc)?),
            "LocalQueue" => self.local_queues.push(object(kind, name, doc)?),
            "Topology" => self.topologies.push(object(kind, name, doc)?),
            "AdmissionCheck" => {
                let d: Doc<AdmissionCheckSpec> = typed(kind, name, doc)?;
                let status = match d.status {
                    Some(s) => typed::<AdmissionCheckStatus>(kind, name, s)?,
                    None => AdmissionCheckStatus::default(),
                };
                self.admission_checks.push(AdmissionCheckObject {
                    metadata: d.metadata,
                    spec: d.spec,
                    status,
                });
            }
            "MultiKueueCluster" | "MultiKueueConfig" => self.multikueue.push(doc),
            "WorkloadPriorityClass" => {
                let wpc: WorkloadPriorityClass = typed(kind, name, doc)?;
                self.priority_classes.push(wpc);
            }
            "Workload" => {
                let d: Doc<WorkloadSpec> = typed(kind, name, doc)?;
                let status = match d.status {
                    Some(s) => typed::<WorkloadStatus>(kind, name, s)?,
                    None => WorkloadStatus::default(),
                };
                self.workloads.push(WorkloadObject {
                    metadata: d.metadata,
                    spec: d.spec,
                    status,
                });
            }
            _ => self.skipped.push(format!("{kind}/{name}")),
        }
        Ok(())
    }
}

/// Deserializes a document with `metadata` and `spec` into a [`KueueObject`].
fn object<S: DeserializeOwned + Default>(
    kind: &str,
    name: &str,
    doc: Value,
) -> Result<KueueObject<S>, LoadError> {
    let d: Doc<S> = typed(kind, name, doc)?;
    Ok(KueueObject {
        metadata: d.metadata,
        spec: d.spec,
    })
}

/// Deserializes `value` into `T`, turning errors into a field-path error.
fn typed<T: DeserializeOwned>(kind: &str, name: &str, value: Value) -> Result<T, LoadError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        LoadError::Invalid(vec![SetupFieldError {
            kind: kind.to_string(),
            name: name.to_string(),
            path: if path == "." {
                "(root)".to_string()
            } else {
                path
            },
            message: e.into_inner().to_string(),
        }])
    })
}

fn meta_of(kind: &str, name: &str, doc: &Value) -> Result<ObjectMeta, LoadError> {
    let mut meta: ObjectMeta = typed(
        kind,
        name,
        doc.get("metadata").cloned().unwrap_or(Value::Null),
    )?;
    if meta.name.is_empty() {
        meta.name = meta.generate_name.clone().unwrap_or_default();
    }
    Ok(meta)
}

fn int_at(v: &Value, path: &[&str]) -> Option<i64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_i64()
}

/// The Workload Kueue builds for a batch Job: one pod set `main`, count = parallelism, minCount
/// from the `kueue.x-k8s.io/job-min-parallelism` annotation.
fn job_workload(name: &str, doc: &Value) -> Result<WorkloadObject, LoadError> {
    let meta = meta_of("Job", name, doc)?;
    let parallelism = int_at(doc, &["spec", "parallelism"]).unwrap_or(1);
    let completions = int_at(doc, &["spec", "completions"]).unwrap_or(parallelism);
    let template: PodTemplateSpec = typed(
        "Job",
        name,
        doc.pointer("/spec/template")
            .cloned()
            .unwrap_or(Value::Null),
    )?;
    let min_count = meta
        .annotations
        .get("kueue.x-k8s.io/job-min-parallelism")
        .and_then(|v| v.parse().ok());
    let pod_set = PodSet {
        name: "main".to_string(),
        template,
        count: parallelism.min(completions).clamp(0, i64::from(i32::MAX)) as i32,
        min_count,
        topology_request: None,
    };
    Ok(derived_workload("job", meta, vec![pod_set]))
}

/// The Workload Kueue builds for a JobSet: one pod set per replicatedJob,
/// count = replicas × min(parallelism, completions).
fn jobset_workload(name: &str, doc: &Value) -> Result<WorkloadObject, LoadError> {
    let meta = meta_of("JobSet", name, doc)?;
    let mut pod_sets = Vec::new();
    let jobs = doc
        .pointer("/spec/replicatedJobs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, rj) in jobs.iter().enumerate() {
        let rj_name = rj.get("name").and_then(Value::as_str).unwrap_or("main");
        let replicas = rj.get("replicas").and_then(Value::as_i64).unwrap_or(1);
        let parallelism = int_at(rj, &["template", "spec", "parallelism"]).unwrap_or(1);
        let completions = int_at(rj, &["template", "spec", "completions"]).unwrap_or(parallelism);
        let template: PodTemplateSpec = serde_path_to_error::deserialize(
            rj.pointer("/template/spec/template")
                .cloned()
                .unwrap_or(Value::Null),
        )
        .map_err(|e| {
            LoadError::Invalid(vec![SetupFieldError {
                kind: "JobSet".to_string(),
                name: name.to_string(),
                path: format!(
                    "spec.replicatedJobs[{i}].template.spec.template.{}",
                    e.path()
                ),
                message: e.into_inner().to_string(),
            }])
        })?;
        let count = (replicas * parallelism.min(completions)).clamp(0, i64::from(i32::MAX));
        pod_sets.push(PodSet {
            name: rj_name.to_lowercase(),
            template,
            count: count as i32,
            min_count: None,
            topology_request: None,
        });
    }
    Ok(derived_workload("jobset", meta, pod_sets))
}

fn derived_workload(prefix: &str, meta: ObjectMeta, pod_sets: Vec<PodSet>) -> WorkloadObject {
    let queue = meta.labels.get("kueue.x-k8s.io/queue-name").cloned();
    let priority_class = meta
        .labels
        .get("kueue.x-k8s.io/priority-class")
        .map(|name| crate::api::PriorityClassRef {
            group: Some("kueue.x-k8s.io".to_string()),
            kind: Some("WorkloadPriorityClass".to_string()),
            name: name.clone(),
        });
    let mut annotations = BTreeMap::new();
    for (k, v) in &meta.annotations {
        if k.starts_with("kubetrain.dev/") {
            annotations.insert(k.clone(), v.clone());
        }
    }
    // The job's UID becomes the `kueue.x-k8s.io/job-uid` label (jobframework's constructWorkload);
    // its creation time stands for the Workload's, which upstream creates right after the job.
    let labels = meta
        .uid
        .iter()
        .map(|uid| (crate::api::JOB_UID_LABEL.to_string(), uid.clone()))
        .collect();
    WorkloadObject {
        metadata: ObjectMeta {
            name: format!("{prefix}-{}", meta.name),
            namespace: Some(meta.namespace.unwrap_or_else(|| "default".to_string())),
            labels,
            annotations,
            creation_timestamp: meta.creation_timestamp,
            ..ObjectMeta::default()
        },
        spec: WorkloadSpec {
            pod_sets,
            queue_name: queue,
            priority_class_ref: priority_class,
            ..WorkloadSpec::default()
        },
        status: WorkloadStatus::default(),
    }
}

fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|_, x| !x.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

fn doc<T: Serialize>(api_version: &str, kind: &str, obj: &T) -> Value {
    let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
    strip_nulls(&mut v);
    let mut out = serde_json::Map::new();
    out.insert("apiVersion".to_string(), Value::from(api_version));
    out.insert("kind".to_string(), Value::from(kind));
    if let Value::Object(map) = v {
        out.extend(map);
    }
    Value::Object(out)
}

impl Setup {
    /// Writes the Kueue objects and the scenario as a multi-document YAML stream (the output of
    /// `kubetrain queue generate`), readable again by [`Setup::add_yaml`].
    pub fn to_yaml(&self) -> String {
        const V: &str = "kueue.x-k8s.io/v1beta2";
        let mut docs: Vec<Value> = Vec::new();
        docs.extend(
            self.namespaces
                .iter()
                .map(|m| doc("v1", "Namespace", &serde_json::json!({ "metadata": m }))),
        );
        docs.extend(self.nodes.iter().map(|n| n.to_document()));
        docs.extend(self.flavors.iter().map(|o| doc(V, "ResourceFlavor", o)));
        docs.extend(self.cohorts.iter().map(|o| doc(V, "Cohort", o)));
        docs.extend(
            self.cluster_queues
                .iter()
                .map(|o| doc(V, "ClusterQueue", o)),
        );
        docs.extend(self.local_queues.iter().map(|o| doc(V, "LocalQueue", o)));
        docs.extend(
            self.priority_classes
                .iter()
                .map(|o| doc(V, "WorkloadPriorityClass", o)),
        );
        docs.extend(self.workloads.iter().map(|o| {
            let mut d = doc(V, "Workload", o);
            if let Some(m) = d.as_object_mut()
                && m.get("status")
                    .is_some_and(|s| s.as_object().is_some_and(|o| o.is_empty()))
            {
                m.remove("status");
            }
            d
        }));
        if let Some(s) = &self.scenario {
            docs.push(doc(
                SCENARIO_API_VERSION,
                "QueueScenario",
                &serde_json::json!({"metadata": {"name": "scenario"}, "spec": s}),
            ));
        }
        docs.iter()
            .map(|d| serde_saphyr::to_string(d).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("---\n")
    }

    /// Expands generator configs into objects (appending them) and clears the configs.
    pub fn expand_generators(&mut self) {
        for g in std::mem::take(&mut self.generators) {
            let s = g.to_setup();
            self.flavors.extend(
                s.flavors
                    .into_iter()
                    .filter(|f| {
                        !self
                            .flavors
                            .iter()
                            .any(|x| x.metadata.name == f.metadata.name)
                    })
                    .collect::<Vec<_>>(),
            );
            self.cohorts.extend(s.cohorts);
            self.cluster_queues.extend(s.cluster_queues);
            self.local_queues.extend(s.local_queues);
            self.workloads.extend(s.workloads);
        }
    }
}

/// The largest document read: the API server's 3 MiB request limit (re-exported from `kubetrain-yaml`, its home).
pub use kubetrain_yaml::MAX_DOCUMENT_BYTES;
