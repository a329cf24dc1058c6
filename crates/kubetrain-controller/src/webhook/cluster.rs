//! What the TrainJob webhook reads from the cluster: the referenced runtime and, for runtime-patch updates,
//! the TrainJob's JobSet. Reads only; every replica answers webhooks, leader or not.

use kube::{Api, Client};
use kubetrain_api::constants::{CLUSTER_TRAINING_RUNTIME_KIND, GROUP, TRAINING_RUNTIME_KIND};
use kubetrain_api::jobset::JobSet;
use kubetrain_api::{ClusterTrainingRuntime, RuntimeCatalog, TrainJob, TrainingRuntime};

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

    /// The JobSet the controller rendered for `job`, if it exists (same name and namespace).
    pub async fn jobset_of(&self, job: &TrainJob) -> Result<Option<JobSet>, kube::Error> {
        let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
        Api::<JobSet>::namespaced(self.client.clone(), namespace)
            .get_opt(job.name())
            .await
    }
}
