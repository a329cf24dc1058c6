//! Server-side apply of rendered objects, all with one field manager and `force` (upstream applies with field
//! owner `trainer` and `client.ForceOwnership`).
//!
//! Objects are applied as JSON through kube's dynamic API, addressed by their apiVersion and kind, so every kind
//! `kubetrain_jobset::render` can produce is applied the same way.

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kubetrain_api::jobset::JobSet;
use kubetrain_jobset::Object;
use serde::Serialize;

use crate::cache::CachedJobSet;
use crate::error::{Error, Result};

/// Apply parameters: `?fieldManager=<manager>&force=true`.
pub fn apply_params(field_manager: &str) -> PatchParams {
    PatchParams::apply(field_manager).force()
}

/// The API resource of `api_version`/`kind` (plural: the lower-cased kind plus `s`, right for every kind the
/// controller applies: jobsets, configmaps, secrets, podgroups).
fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// What the API server answered to an apply.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Applied {
    /// The JobSet as stored, when the object is the JobSet (its status feeds the TrainJob status): metadata,
    /// `spec.suspend`, status and the GPU requests of its templates ([`crate::controller`] reads no more).
    pub jobset: Option<JobSet>,
    /// The stored object's uid.
    pub uid: String,
    /// The stored object's resourceVersion.
    pub resource_version: String,
}

impl Applied {
    fn of(meta: &ObjectMeta, jobset: Option<JobSet>) -> Self {
        Self {
            jobset,
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
        }
    }
}

async fn ssa(
    client: &Client,
    namespace: &str,
    api_version: &str,
    kind: &str,
    name: &str,
    object: &(impl Serialize + std::fmt::Debug),
    params: &PatchParams,
) -> Result<Applied> {
    let failed = |e| Error::kube(format!("applying {kind} {namespace}/{name}"), e);
    if kind == "JobSet" {
        // Read back into the cache's JobSet type: the pod templates are not parsed.
        let stored = Api::<CachedJobSet>::namespaced(client.clone(), namespace)
            .patch(name, params, &Patch::Apply(object))
            .await
            .map_err(failed)?;
        return Ok(Applied::of(&stored.metadata, Some(stored.to_jobset())));
    }
    let ar = resource(api_version, kind);
    let stored = Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &ar)
        .patch(name, params, &Patch::Apply(object))
        .await
        .map_err(failed)?;
    Ok(Applied::of(&stored.metadata, None))
}

/// Applies one rendered object in `namespace`; the answer carries the stored uid and resourceVersion and, for
/// the JobSet, the JobSet as stored.
pub async fn apply_object(
    client: &Client,
    namespace: &str,
    object: &Object,
    params: &PatchParams,
) -> Result<Applied> {
    ssa(
        client,
        namespace,
        object.api_version(),
        object.kind(),
        object.name(),
        object,
        params,
    )
    .await
}

/// Applies a ConfigMap (the runtime snapshot).
pub async fn apply_config_map(
    client: &Client,
    namespace: &str,
    cm: &ConfigMap,
    params: &PatchParams,
) -> Result<Applied> {
    let name = cm.metadata.name.as_deref().unwrap_or_default();
    ssa(client, namespace, "v1", "ConfigMap", name, cm, params).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_of_every_applied_kind() {
        for (api_version, kind, group, plural) in [
            (
                "jobset.x-k8s.io/v1alpha2",
                "JobSet",
                "jobset.x-k8s.io",
                "jobsets",
            ),
            ("v1", "ConfigMap", "", "configmaps"),
            ("v1", "Secret", "", "secrets"),
            (
                "scheduling.x-k8s.io/v1alpha1",
                "PodGroup",
                "scheduling.x-k8s.io",
                "podgroups",
            ),
            (
                "scheduling.volcano.sh/v1beta1",
                "PodGroup",
                "scheduling.volcano.sh",
                "podgroups",
            ),
        ] {
            let ar = resource(api_version, kind);
            assert_eq!((ar.group.as_str(), ar.plural.as_str()), (group, plural));
            assert_eq!(ar.api_version, api_version);
        }
    }
}
