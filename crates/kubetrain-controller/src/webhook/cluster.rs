//! What the TrainJob webhook reads from the cluster: the referenced runtime and, for runtime-patch updates,
//! the TrainJob's JobSet. Reads only; every replica answers webhooks, leader or not.

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::{Api, Client};
use kubetrain_api::constants::{
    CLUSTER_TRAINING_RUNTIME_KIND, GROUP, SYSTEM_PRIORITY_CLASSES, TRAINING_RUNTIME_KIND,
};
use kubetrain_api::jobset::JobSet;
use kubetrain_api::{
    ClusterTrainingRuntime, FieldError, PodGroupPolicySource, RuntimeCatalog, TrainJob,
    TrainingRuntime,
};

/// Reads runtimes and JobSets through a kube client.
#[derive(Clone)]
pub struct ClusterReader {
    client: Client,
}

impl ClusterReader {
    /// A reader using `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// A catalog holding the runtime `job` references (in the job's namespace for a TrainingRuntime), or
    /// nothing when it does not exist or is of an unsupported kind: the validation rules then report it.
    pub async fn catalog_for(&self, job: &TrainJob) -> Result<RuntimeCatalog, kube::Error> {
        let mut catalog = RuntimeCatalog::new();
        let reference = &job.spec.runtime_ref;
        if reference.api_group_or_default() != GROUP {
            return Ok(catalog);
        }
        let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
        match reference.kind_or_default() {
            CLUSTER_TRAINING_RUNTIME_KIND => {
                let api: Api<ClusterTrainingRuntime> = Api::all(self.client.clone());
                if let Some(runtime) = api.get_opt(&reference.name).await? {
                    catalog.add_cluster(runtime);
                }
            }
            TRAINING_RUNTIME_KIND => {
                let api: Api<TrainingRuntime> = Api::namespaced(self.client.clone(), namespace);
                if let Some(mut runtime) = api.get_opt(&reference.name).await? {
                    runtime.metadata.namespace = Some(namespace.to_owned());
                    catalog.add_namespaced(runtime);
                }
            }
            _ => {}
        }
        Ok(catalog)
    }

    /// Upstream's Volcano rule that needs the cluster: with a Volcano pod-group policy, each replicated job's
    /// `priorityClassName` must name an existing PriorityClass. As upstream, the two system classes end the
    /// check at once. The names are read from the runtime's template (runtime patches are not overlaid).
    pub async fn priority_class_errors(
        &self,
        job: &TrainJob,
        catalog: &RuntimeCatalog,
    ) -> Result<Vec<FieldError>, kube::Error> {
        let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
        let Ok(runtime) = catalog.lookup(&job.spec.runtime_ref, namespace) else {
            return Ok(Vec::new());
        };
        let spec = runtime.spec();
        let volcano = spec
            .pod_group_policy
            .as_ref()
            .and_then(|p| p.source.as_ref())
            .is_some_and(|s| matches!(s, PodGroupPolicySource::Volcano(_)));
        if !volcano {
            return Ok(Vec::new());
        }
        let api: Api<PriorityClass> = Api::all(self.client.clone());
        let mut errors = Vec::new();
        for replicated in &spec.template.spec.replicated_jobs {
            let Some(name) = replicated
                .template
                .spec
                .as_ref()
                .and_then(|job| job.template.spec.as_ref())
                .and_then(|pod| pod.priority_class_name.as_deref())
            else {
                continue;
            };
            if SYSTEM_PRIORITY_CLASSES.contains(&name) {
                break;
            }
            if api.get_opt(name).await?.is_none() {
                errors.push(FieldError::error(
                    "spec.templateSpec.priorityClassName",
                    format!(
                        "Invalid value: {name:?}: PriorityClass {name:?} doesn't exist: priorityclasses.scheduling.k8s.io {name:?} not found"
                    ),
                ));
            }
        }
        Ok(errors)
    }

    /// The JobSet the controller rendered for `job`, if it exists (same name and namespace).
    pub async fn jobset_of(&self, job: &TrainJob) -> Result<Option<JobSet>, kube::Error> {
        let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
        Api::<JobSet>::namespaced(self.client.clone(), namespace)
            .get_opt(job.name())
            .await
    }
}
