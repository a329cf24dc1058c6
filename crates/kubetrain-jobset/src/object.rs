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
    /// Any other object, e.g. a custom plugin's companion of a kind this crate has no type for.
    Dynamic(Box<DynamicObject>),
}

/// An object of any kind: `apiVersion`, `kind`, `metadata` and its other top-level fields as JSON.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DynamicObject {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    #[serde(flatten)]
    fields: serde_json::Map<String, serde_json::Value>,
}

/// Why a [`DynamicObject`] cannot be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DynamicObjectError {
    /// `apiVersion` or `kind` is empty.
    #[error("{0}: must not be empty")]
    Empty(&'static str),
    /// A field repeats `apiVersion`, `kind` or `metadata`, which have their own arguments.
    #[error("{0}: is given by its own argument; remove it from the fields")]
    Reserved(String),
    /// The JSON is not an object with string `apiVersion` and `kind` and a valid `metadata`.
    #[error("{path}: {message}")]
    Json {
        /// The field at fault.
        path: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl DynamicObject {
    /// An object of `kind` in `api_version` (`v1`, `group/version`) with `metadata` and the other top-level
    /// `fields` (`spec`, `data`, ...).
    pub fn new(
        api_version: impl Into<String>,
        kind: impl Into<String>,
        metadata: ObjectMeta,
        fields: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, DynamicObjectError> {
        let (api_version, kind) = (api_version.into(), kind.into());
        if api_version.is_empty() {
            return Err(DynamicObjectError::Empty("apiVersion"));
        }
        if kind.is_empty() {
            return Err(DynamicObjectError::Empty("kind"));
        }
        if let Some(key) = ["apiVersion", "kind", "metadata"]
            .into_iter()
            .find(|k| fields.contains_key(*k))
        {
            return Err(DynamicObjectError::Reserved(key.to_owned()));
        }
        Ok(Self {
            api_version,
            kind,
            metadata,
            fields,
        })
    }

    /// An object from its JSON form, e.g. `serde_json::json!({"apiVersion": ..., "kind": ..., "metadata": ...,
    /// "spec": ...})` or `serde_json::to_value` of a typed object.
    pub fn from_value(value: serde_json::Value) -> Result<Self, DynamicObjectError> {
        let json = |path, message: &str| DynamicObjectError::Json {
            path,
            message: message.to_owned(),
        };
        let serde_json::Value::Object(mut fields) = value else {
            return Err(json("(root)", "must be a JSON object"));
        };
        let mut text = |key: &'static str| match fields.remove(key) {
            Some(serde_json::Value::String(s)) => Ok(s),
            _ => Err(json(key, "must be a string")),
        };
        let (api_version, kind) = (text("apiVersion")?, text("kind")?);
        let metadata = match fields.remove("metadata") {
            None => ObjectMeta::default(),
            Some(m) => serde_json::from_value(m).map_err(|e| json("metadata", &e.to_string()))?,
        };
        Self::new(api_version, kind, metadata, fields)
    }

    /// The top-level fields besides `apiVersion`, `kind` and `metadata`.
    pub fn fields(&self) -> &serde_json::Map<String, serde_json::Value> {
        &self.fields
    }
}

impl Object {
    /// `apiVersion` of the object.
    pub fn api_version(&self) -> &str {
        match self {
            Object::JobSet(_) => kubetrain_api::jobset::JOBSET_API_VERSION,
            Object::Secret(_) => Secret::API_VERSION,
            Object::ConfigMap(_) => ConfigMap::API_VERSION,
            Object::CoschedulingPodGroup(_) => "scheduling.x-k8s.io/v1alpha1",
            Object::VolcanoPodGroup(_) => "scheduling.volcano.sh/v1beta1",
            Object::Dynamic(o) => &o.api_version,
        }
    }

    /// `kind` of the object.
    pub fn kind(&self) -> &str {
        match self {
            Object::JobSet(_) => "JobSet",
            Object::Secret(_) => Secret::KIND,
            Object::ConfigMap(_) => ConfigMap::KIND,
            Object::CoschedulingPodGroup(_) => "PodGroup",
            Object::VolcanoPodGroup(_) => "PodGroup",
            Object::Dynamic(o) => &o.kind,
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
            Object::Dynamic(o) => &o.metadata,
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
    fn key(o: &Object) -> (bool, &str, &str, &str) {
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
