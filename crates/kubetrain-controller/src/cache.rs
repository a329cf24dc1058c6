//! The reconcile's reads served from memory: reflector stores fed by the watches the controller runs anyway
//! (controller-runtime's cached client, as upstream reads), so a reconcile sends only its writes.
//!
//! | kind | watch | kept |
//! |---|---|---|
//! | TrainJobs | full | everything but `managedFields` |
//! | JobSets | full | metadata (`managedFields` skipped while reading), `spec.suspend`, `status`: the pod templates are never parsed into memory |
//! | ConfigMaps | full | a TrainJob's (snapshot, hostfile) whole; any other only its name and owners |
//! | Secrets, PodGroups | metadata only | name, uid, resourceVersion, owners: only existence matters |
//! | (Cluster)TrainingRuntimes | full | everything but `managedFields` |
//!
//! A store that has not listed yet answers [`Cached::Unknown`] and the reconcile reads live, so a reconcile
//! that runs before a watch's first list still sees the truth. Nothing here is an API server round trip.

use std::borrow::Cow;
use std::fmt::Debug;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use k8s_openapi::NamespaceResourceScope;
use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{JobSpec, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PodSpec, PodTemplateSpec, ResourceRequirements, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource};
use kubetrain_api::constants::{GROUP, TRAINJOB_KIND};
use kubetrain_api::jobset::{JOBSET_GROUP, JobSet, JobSetSpec, JobSetStatus, ReplicatedJob};
use kubetrain_api::podgroup::{coscheduling, volcano};
use kubetrain_api::{ClusterTrainingRuntime, TrainJob, TrainingRuntime};
use serde::Deserialize;

/// A JobSet as the cache holds it: what the reconcile reads (metadata, `spec.suspend`, `status`) and, of each
/// replicated job, what the platform metrics count GPUs from (replicas, parallelism, the containers' resources,
/// the node selector). Deserializing into this type skips the rest of the pod templates instead of allocating
/// it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedJobSet {
    /// The JobSet's metadata (without `managedFields`, which are skipped while reading).
    #[serde(default, deserialize_with = "meta_without_managed_fields")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    spec: SlimSpec,
    /// The JobSet's status.
    #[serde(default)]
    pub status: Option<JobSetStatus>,
}

/// `ObjectMeta` read without its `managedFields`: a JobSet's run to several kilobytes (every field of the
/// applied spec, then the JobSet controller's status), and each watch event carries them; skipping them while
/// reading is cheaper than building them and dropping them in [`strip`].
fn meta_without_managed_fields<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        annotations: Option<BTreeMap<String, String>>,
        creation_timestamp: Option<Time>,
        deletion_grace_period_seconds: Option<i64>,
        deletion_timestamp: Option<Time>,
        finalizers: Option<Vec<String>>,
        generate_name: Option<String>,
        generation: Option<i64>,
        labels: Option<BTreeMap<String, String>>,
        name: Option<String>,
        namespace: Option<String>,
        owner_references: Option<Vec<OwnerReference>>,
        resource_version: Option<String>,
        self_link: Option<String>,
        uid: Option<String>,
    }
    let m = Option::<Meta>::deserialize(deserializer)?;
    Ok(m.map(|m| ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
    .unwrap_or_default())
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimSpec {
    #[serde(default)]
    suspend: Option<bool>,
    #[serde(default)]
    replicated_jobs: Vec<SlimReplicatedJob>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct SlimReplicatedJob {
    #[serde(default)]
    name: String,
    #[serde(default)]
    replicas: Option<i32>,
    #[serde(default)]
    template: SlimJobTemplate,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct SlimJobTemplate {
    #[serde(default)]
    spec: Option<SlimJobSpec>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct SlimJobSpec {
    #[serde(default)]
    parallelism: Option<i32>,
    #[serde(default)]
    template: SlimPodTemplate,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct SlimPodTemplate {
    #[serde(default)]
    spec: Option<SlimPodSpec>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimPodSpec {
    #[serde(default)]
    containers: Vec<SlimContainer>,
    #[serde(default)]
    node_selector: Option<BTreeMap<String, String>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct SlimContainer {
    #[serde(default)]
    resources: Option<ResourceRequirements>,
}

impl CachedJobSet {
    /// The JobSet with what the cache keeps: metadata, `spec.suspend`, status and the GPU-relevant part of
    /// each replicated job's template.
    pub fn to_jobset(&self) -> JobSet {
        let replicated_jobs = self
            .spec
            .replicated_jobs
            .iter()
            .map(|rj| ReplicatedJob {
                name: rj.name.clone(),
                replicas: rj.replicas,
                template: JobTemplateSpec {
                    metadata: None,
                    spec: rj.template.spec.as_ref().map(|job| JobSpec {
                        parallelism: job.parallelism,
                        template: PodTemplateSpec {
                            metadata: None,
                            spec: job.template.spec.as_ref().map(|pod| PodSpec {
                                containers: pod
                                    .containers
                                    .iter()
                                    .map(|c| Container {
                                        resources: c.resources.clone(),
                                        ..Container::default()
                                    })
                                    .collect(),
                                node_selector: pod.node_selector.clone(),
                                ..PodSpec::default()
                            }),
                        },
                        ..JobSpec::default()
                    }),
                },
                ..ReplicatedJob::default()
            })
            .collect();
        JobSet {
            metadata: self.metadata.clone(),
            spec: JobSetSpec {
                suspend: self.spec.suspend,
                replicated_jobs,
                ..JobSetSpec::default()
            },
            status: self.status.clone(),
        }
    }
}

impl Resource for CachedJobSet {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "JobSet".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        JOBSET_GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1alpha2".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "jobsets".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What a store says about an object.
#[derive(Clone, Debug, PartialEq)]
pub enum Cached<T> {
    /// The store has listed: the object as held (`None`: absent).
    Known(Option<T>),
    /// The store has not listed yet: read live.
    Unknown,
}

/// The identity of a stored object as the apply memory compares it: uid and resourceVersion.
pub type Version = (String, String);

fn version_of(meta: &ObjectMeta) -> Version {
    (
        meta.uid.clone().unwrap_or_default(),
        meta.resource_version.clone().unwrap_or_default(),
    )
}

/// The reconcile's stores (cheap to clone: every store is shared).
#[derive(Clone)]
pub struct Caches {
    pub(crate) trainjobs: Store<TrainJob>,
    jobsets: Store<CachedJobSet>,
    config_maps: Store<ConfigMap>,
    secrets: Store<PartialObjectMeta<Secret>>,
    coscheduling: Store<PartialObjectMeta<coscheduling::PodGroup>>,
    volcano: Store<PartialObjectMeta<volcano::PodGroup>>,
    cluster_runtimes: Store<ClusterTrainingRuntime>,
    runtimes: Store<TrainingRuntime>,
}

/// The writers behind [`Caches`]: each fills its store from a watch ([`reflect`]) or, in tests, from
/// events applied by hand.
pub struct Writers {
    /// TrainJobs.
    pub trainjobs: reflector::store::Writer<TrainJob>,
    /// JobSets.
    pub jobsets: reflector::store::Writer<CachedJobSet>,
    /// ConfigMaps.
    pub config_maps: reflector::store::Writer<ConfigMap>,
    /// Secrets (metadata).
    pub secrets: reflector::store::Writer<PartialObjectMeta<Secret>>,
    /// Coscheduling PodGroups (metadata).
    pub coscheduling: reflector::store::Writer<PartialObjectMeta<coscheduling::PodGroup>>,
    /// Volcano PodGroups (metadata).
    pub volcano: reflector::store::Writer<PartialObjectMeta<volcano::PodGroup>>,
    /// ClusterTrainingRuntimes.
    pub cluster_runtimes: reflector::store::Writer<ClusterTrainingRuntime>,
    /// TrainingRuntimes.
    pub runtimes: reflector::store::Writer<TrainingRuntime>,
}

impl Caches {
    /// Empty stores and their writers.
    pub fn new() -> (Self, Writers) {
        let (trainjobs, trainjobs_w) = reflector::store();
        let (jobsets, jobsets_w) = reflector::store();
        let (config_maps, config_maps_w) = reflector::store();
        let (secrets, secrets_w) = reflector::store();
        let (coscheduling, coscheduling_w) = reflector::store();
        let (volcano, volcano_w) = reflector::store();
        let (cluster_runtimes, cluster_runtimes_w) = reflector::store();
        let (runtimes, runtimes_w) = reflector::store();
        (
            Self {
                trainjobs,
                jobsets,
                config_maps,
                secrets,
                coscheduling,
                volcano,
                cluster_runtimes,
                runtimes,
            },
            Writers {
                trainjobs: trainjobs_w,
                jobsets: jobsets_w,
                config_maps: config_maps_w,
                secrets: secrets_w,
                coscheduling: coscheduling_w,
                volcano: volcano_w,
                cluster_runtimes: cluster_runtimes_w,
                runtimes: runtimes_w,
            },
        )
    }

    /// The JobSet `namespace/name`.
    pub fn jobset(&self, namespace: &str, name: &str) -> Cached<Arc<CachedJobSet>> {
        lookup(&self.jobsets, namespace, name)
    }

    /// The ConfigMap `namespace/name`.
    pub fn config_map(&self, namespace: &str, name: &str) -> Cached<Arc<ConfigMap>> {
        lookup(&self.config_maps, namespace, name)
    }

    /// Whether the Secret `namespace/name` exists.
    pub fn secret(&self, namespace: &str, name: &str) -> Cached<Version> {
        version(&self.secrets, namespace, name)
    }

    /// Whether the coscheduling PodGroup `namespace/name` exists.
    pub fn coscheduling_pod_group(&self, namespace: &str, name: &str) -> Cached<Version> {
        version(&self.coscheduling, namespace, name)
    }

    /// Whether the Volcano PodGroup `namespace/name` exists.
    pub fn volcano_pod_group(&self, namespace: &str, name: &str) -> Cached<Version> {
        version(&self.volcano, namespace, name)
    }

    /// The ClusterTrainingRuntime `name`.
    pub fn cluster_runtime(&self, name: &str) -> Cached<Arc<ClusterTrainingRuntime>> {
        match is_ready(&self.cluster_runtimes) {
            true => Cached::Known(self.cluster_runtimes.get(&ObjectRef::new(name))),
            false => Cached::Unknown,
        }
    }

    /// The TrainingRuntime `namespace/name`.
    pub fn runtime(&self, namespace: &str, name: &str) -> Cached<Arc<TrainingRuntime>> {
        lookup(&self.runtimes, namespace, name)
    }

    /// The uid and resourceVersion of a stored child: `kind` as rendered (`JobSet`, `ConfigMap`, `Secret`,
    /// `PodGroup` of `api_version`).
    pub fn child_version(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Cached<Version> {
        match (api_version, kind) {
            (_, "JobSet") => map(self.jobset(namespace, name), |j| version_of(&j.metadata)),
            ("v1", "ConfigMap") => map(self.config_map(namespace, name), |c| {
                version_of(&c.metadata)
            }),
            ("v1", "Secret") => self.secret(namespace, name),
            (v, "PodGroup") if v.starts_with("scheduling.volcano.sh/") => {
                self.volcano_pod_group(namespace, name)
            }
            (_, "PodGroup") => self.coscheduling_pod_group(namespace, name),
            _ => Cached::Unknown,
        }
    }
}

/// Whether a store has listed once (kube-runtime starts a controller's reconciles only then).
pub(crate) fn is_ready<K>(store: &Store<K>) -> bool
where
    K: reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    futures_util::FutureExt::now_or_never(store.wait_until_ready()).is_some_and(|r| r.is_ok())
}

fn lookup<K>(store: &Store<K>, namespace: &str, name: &str) -> Cached<Arc<K>>
where
    K: reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    if !is_ready(store) {
        return Cached::Unknown;
    }
    Cached::Known(store.get(&ObjectRef::new(name).within(namespace)))
}

fn version<K>(store: &Store<PartialObjectMeta<K>>, namespace: &str, name: &str) -> Cached<Version>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    map(lookup(store, namespace, name), |o| version_of(&o.metadata))
}

fn map<T, U>(cached: Cached<T>, f: impl FnOnce(T) -> U) -> Cached<U> {
    match cached {
        Cached::Known(o) => Cached::Known(o.map(f)),
        Cached::Unknown => Cached::Unknown,
    }
}

/// Drops the server's field bookkeeping, which no reconcile reads and which is often the largest part of an
/// object.
pub fn strip<K: Resource>(object: &mut K) {
    object.meta_mut().managed_fields = None;
}

/// Keeps a TrainJob's ConfigMaps whole (the snapshot is read, the hostfile's version compared) and of every
/// other ConfigMap only its name, uid, resourceVersion and owners: a snapshot name taken by a foreign
/// ConfigMap must still be reported, its data never is.
pub fn strip_config_map(cm: &mut ConfigMap) {
    strip(cm);
    if !owned_by_a_trainjob(&cm.metadata) {
        cm.data = None;
        cm.binary_data = None;
        cm.metadata.labels = None;
        cm.metadata.annotations = None;
    }
}

/// Keeps of an object's metadata what an existence check and the owner trigger read.
pub fn strip_metadata<K>(object: &mut PartialObjectMeta<K>) {
    object.metadata.managed_fields = None;
    object.metadata.labels = None;
    object.metadata.annotations = None;
}

fn owned_by_a_trainjob(meta: &ObjectMeta) -> bool {
    trainjob_owner(meta).is_some()
}

/// The TrainJob controlling an object (its controller owner reference of kind TrainJob), if any.
pub(crate) fn trainjob_owner(
    meta: &ObjectMeta,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    meta.owner_references.iter().flatten().find(|o| {
        o.controller == Some(true)
            && o.kind == TRAINJOB_KIND
            && o.api_version.split('/').next() == Some(GROUP)
    })
}

/// The watch config of every cache watch.
fn config() -> watcher::Config {
    watcher::Config::default()
}

/// A full watch of `api` feeding `writer`, `modify` applied before storing; yields the watch events (for the
/// triggers). Failed requests are retried with kube's default backoff.
pub fn reflect<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    modify: impl FnMut(&mut K) + Send + 'static,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + serde::de::DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    watcher(api, config())
        .default_backoff()
        .modify(modify)
        .reflect(writer)
}

/// A metadata-only watch (`api` of `PartialObjectMeta<K>` asks for metadata only) feeding `writer`; yields the
/// watch events (for the owner triggers).
pub fn reflect_metadata<K>(
    api: Api<PartialObjectMeta<K>>,
    writer: reflector::store::Writer<PartialObjectMeta<K>>,
) -> impl Stream<Item = Result<watcher::Event<PartialObjectMeta<K>>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    reflect(api, writer, strip_metadata)
}

/// Drives `stream` to its end, dropping items (the runtime watches, which trigger nothing).
pub async fn drain<T>(stream: impl Stream<Item = T>) {
    stream.for_each(|_| std::future::ready(())).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, OwnerReference};

    fn owner(api_version: &str, kind: &str) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "mnist".into(),
            uid: "u1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    fn config_map(owners: Vec<OwnerReference>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("mnist-runtime-snapshot".into()),
                owner_references: Some(owners),
                labels: Some(BTreeMap::from([("a".into(), "b".into())])),
                managed_fields: Some(vec![ManagedFieldsEntry::default()]),
                ..Default::default()
            },
            data: Some(BTreeMap::from([("runtime".into(), "kind: X".into())])),
            ..Default::default()
        }
    }

    #[test]
    fn a_trainjobs_config_map_keeps_its_data_any_other_only_its_identity() {
        let table = [
            (
                vec![owner("trainer.kubeflow.org/v1alpha1", "TrainJob")],
                true,
            ),
            (vec![owner("apps/v1", "Deployment")], false),
            (vec![owner("example.com/v1", "TrainJob")], false),
            (vec![], false),
        ];
        for (owners, kept) in table {
            let mut cm = config_map(owners.clone());
            strip_config_map(&mut cm);
            assert_eq!(cm.metadata.managed_fields, None);
            assert_eq!(cm.data.is_some(), kept, "{owners:?}");
            assert_eq!(cm.metadata.labels.is_some(), kept, "{owners:?}");
            assert_eq!(cm.metadata.owner_references, Some(owners), "owners stay");
        }
    }

    #[test]
    fn a_cached_jobset_keeps_suspend_status_and_what_gpus_are_counted_from() {
        let json = serde_json::json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "mnist", "namespace": "a", "resourceVersion": "7", "uid": "j1"},
            "spec": {"suspend": true, "replicatedJobs": [{"name": "node", "replicas": 2, "template": {"spec": {
                "parallelism": 3,
                "template": {"spec": {
                    "nodeSelector": {"cloud.google.com/gke-accelerator": "h100"},
                    "containers": [{"name": "node", "image": "pytorch", "command": ["torchrun"],
                        "env": [{"name": "A", "value": "1"}],
                        "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}}}}]},
            "status": {"replicatedJobsStatus": [{"name": "node", "ready": 1, "succeeded": 0,
                "failed": 0, "active": 1, "suspended": 0}]},
        });
        let cached: CachedJobSet = serde_json::from_value(json.clone()).expect("parses");
        assert_eq!(cached.spec.suspend, Some(true));
        let full: JobSet = serde_json::from_value(json).expect("parses");
        let slim = cached.to_jobset();
        assert_eq!(slim.status, full.status);
        assert_eq!(slim.spec.suspend, Some(true));
        assert_eq!(
            crate::platform::gpus_of(&slim),
            crate::platform::gpus_of(&full),
            "GPU-seconds come out the same"
        );
        assert_eq!(crate::platform::gpus_of(&slim).0, 24);
        let pod = slim.spec.replicated_jobs[0].template.spec.as_ref().unwrap();
        let container = &pod.template.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            container.image, None,
            "the rest of the template is not kept"
        );
        assert_eq!(
            version_of(&cached.metadata),
            ("j1".to_owned(), "7".to_owned())
        );
    }

    #[test]
    fn a_cached_jobsets_metadata_is_all_but_managed_fields() {
        let metadata = serde_json::json!({
            "name": "mnist", "namespace": "a", "uid": "j1", "resourceVersion": "7", "generation": 3,
            "generateName": "mn-", "selfLink": "/x", "creationTimestamp": "2026-12-01T10:00:00Z",
            "deletionTimestamp": "2026-12-01T11:00:00Z", "deletionGracePeriodSeconds": 0,
            "labels": {"l": "1"}, "annotations": {"a": "2"}, "finalizers": ["f"],
            "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                "name": "mnist", "uid": "t1", "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kubetrain", "operation": "Apply", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:suspend": {}}}}],
        });
        let cached: CachedJobSet =
            serde_json::from_value(serde_json::json!({"metadata": metadata.clone()})).unwrap();
        let mut full: ObjectMeta = serde_json::from_value(metadata).unwrap();
        assert!(full.managed_fields.is_some());
        full.managed_fields = None;
        assert_eq!(
            cached.metadata, full,
            "every other field is read as ObjectMeta reads it"
        );

        for absent in [serde_json::json!({}), serde_json::json!({"metadata": null})] {
            let cached: CachedJobSet = serde_json::from_value(absent).unwrap();
            assert_eq!(cached.metadata, ObjectMeta::default());
        }
    }

    #[test]
    fn stores_that_have_not_listed_answer_unknown() {
        let (caches, mut writers) = Caches::new();
        assert_eq!(caches.secret("a", "s"), Cached::Unknown);
        writers
            .secrets
            .apply_watcher_event(&watcher::Event::InitDone);
        assert_eq!(caches.secret("a", "s"), Cached::Known(None));
        let secret = PartialObjectMeta::<Secret> {
            metadata: ObjectMeta {
                name: Some("s".into()),
                namespace: Some("a".into()),
                uid: Some("u".into()),
                resource_version: Some("3".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        writers
            .secrets
            .apply_watcher_event(&watcher::Event::Apply(secret));
        assert_eq!(
            caches.child_version("v1", "Secret", "a", "s"),
            Cached::Known(Some(("u".into(), "3".into())))
        );
        assert_eq!(
            caches.child_version("v1", "Secret", "b", "s"),
            Cached::Known(None)
        );
        assert_eq!(
            caches.child_version("scheduling.volcano.sh/v1beta1", "PodGroup", "a", "s"),
            Cached::Unknown
        );
    }
}
