//! Server-side apply of rendered objects, all with one field manager and `force` (upstream applies with field
//! owner `trainer` and `client.ForceOwnership`).
//!
//! Objects are applied as JSON through kube's dynamic API, addressed by their apiVersion and kind, so every kind
//! `kubetrain_jobset::render` can produce is applied the same way.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kubetrain_api::jobset::JobSet;
use kubetrain_jobset::Object;
use serde::Serialize;

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

async fn ssa(
    client: &Client,
    namespace: &str,
    api_version: &str,
    kind: &str,
    name: &str,
    object: &(impl Serialize + std::fmt::Debug),
    params: &PatchParams,
) -> Result<DynamicObject> {
    let ar = resource(api_version, kind);
    Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &ar)
        .patch(name, params, &Patch::Apply(object))
        .await
        .map_err(|e| Error::kube(format!("applying {kind} {namespace}/{name}"), e))
}

/// Applies one rendered object in `namespace`; returns the JobSet as the API server stored it when the object
/// is the JobSet (its status feeds the TrainJob status).
pub async fn apply_object(
    client: &Client,
    namespace: &str,
    object: &Object,
    params: &PatchParams,
) -> Result<Option<JobSet>> {
    let stored = ssa(
        client,
        namespace,
        object.api_version(),
        object.kind(),
        object.name(),
        object,
        params,
    )
    .await?;
    match object {
        Object::JobSet(_) => {
            let value = serde_json::to_value(&stored).map_err(|source| Error::Serialize {
                what: "the applied JobSet".to_owned(),
                source,
            })?;
            serde_json::from_value(value)
                .map(Some)
                .map_err(|source| Error::Serialize {
                    what: "the applied JobSet".to_owned(),
                    source,
                })
        }
        _ => Ok(None),
    }
}

/// Applies a ConfigMap (the runtime snapshot).
pub async fn apply_config_map(
    client: &Client,
    namespace: &str,
    cm: &ConfigMap,
    params: &PatchParams,
) -> Result<()> {
    let name = cm.metadata.name.as_deref().unwrap_or_default();
    ssa(client, namespace, "v1", "ConfigMap", name, cm, params)
        .await
        .map(|_| ())
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
