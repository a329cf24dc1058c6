//! The objects a render produces, in one enum so that they can be sorted and printed together.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::{Metadata, Resource};
use kubetrain_api::TrainJob;
use kubetrain_api::jobset::JobSet;
use kubetrain_api::podgroup::{coscheduling, volcano};
use serde::Serialize;

/// One object the controller would apply for a TrainJob.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Object {
    /// The JobSet (`jobset.x-k8s.io/v1alpha2`).
    JobSet(Box<JobSet>),
    /// The MPI SSH-auth Secret.
    Secret(Box<Secret>),
    /// The MPI hostfile ConfigMap.
    ConfigMap(Box<ConfigMap>),
    /// A scheduler-plugins PodGroup (`scheduling.x-k8s.io/v1alpha1`).
    CoschedulingPodGroup(Box<coscheduling::PodGroup>),
    /// A Volcano PodGroup (`scheduling.volcano.sh/v1beta1`).
    VolcanoPodGroup(Box<volcano::PodGroup>),
}

impl Object {
    /// `apiVersion` of the object.
    pub fn api_version(&self) -> &'static str {
        match self {
            Object::JobSet(_) => kubetrain_api::jobset::JOBSET_API_VERSION,
            Object::Secret(_) => Secret::API_VERSION,
            Object::ConfigMap(_) => ConfigMap::API_VERSION,
            Object::CoschedulingPodGroup(_) => "scheduling.x-k8s.io/v1alpha1",
            Object::VolcanoPodGroup(_) => "scheduling.volcano.sh/v1beta1",
        }
    }

    /// `kind` of the object.
    pub fn kind(&self) -> &'static str {
        match self {
            Object::JobSet(_) => "JobSet",
            Object::Secret(_) => Secret::KIND,
            Object::ConfigMap(_) => ConfigMap::KIND,
            Object::CoschedulingPodGroup(_) => "PodGroup",
            Object::VolcanoPodGroup(_) => "PodGroup",
        }
    }

    /// The object's metadata.
    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Object::JobSet(o) => &o.metadata,
            Object::Secret(o) => o.metadata(),
            Object::ConfigMap(o) => o.metadata(),
            Object::CoschedulingPodGroup(o) => &o.metadata,
            Object::VolcanoPodGroup(o) => &o.metadata,
        }
    }

    /// `metadata.name` of the object.
    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }

    /// The JobSet, if this is one.
    pub fn as_jobset(&self) -> Option<&JobSet> {
        match self {
            Object::JobSet(j) => Some(j),
            _ => None,
        }
    }
}

/// Sorts objects as `kubetrain render` prints them: the JobSet first, then by apiVersion, kind and name.
pub fn sort(objects: &mut [Object]) {
    fn key(o: &Object) -> (bool, &'static str, &'static str, &str) {
        (
            !matches!(o, Object::JobSet(_)),
            o.api_version(),
            o.kind(),
            o.name(),
        )
    }
    objects.sort_by(|a, b| key(a).cmp(&key(b)));
}

/// The controller owner reference every child carries. Its `uid` is empty when the TrainJob has none; see
/// [`owner_references`] for what children get then.
pub fn owner_reference(job: &TrainJob) -> OwnerReference {
    OwnerReference {
        api_version: kubetrain_api::constants::API_VERSION.to_owned(),
        kind: kubetrain_api::constants::TRAINJOB_KIND.to_owned(),
        name: job.name().to_owned(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The owner references of a child: the controller reference when the TrainJob has a uid (always, in a
/// cluster), none otherwise. A TrainJob read from a file has no uid yet; an owner reference with an empty uid is
/// rejected by the API server, and one with an invented uid would have the garbage collector delete the child at
/// once, so `kubetrain render` prints unowned children for such input (deterministically).
pub fn owner_references(job: &TrainJob) -> Option<Vec<OwnerReference>> {
    job.metadata
        .uid
        .as_deref()
        .filter(|uid| !uid.is_empty())
        .map(|_| vec![owner_reference(job)])
}

/// Metadata of a child named `name` in the TrainJob's namespace, owned by the TrainJob (see
/// [`owner_references`]).
pub fn child_meta(job: &TrainJob, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: job.metadata.namespace.clone(),
        owner_references: owner_references(job),
        ..Default::default()
    }
}
