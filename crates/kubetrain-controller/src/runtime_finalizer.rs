//! Removes the legacy `trainer.kubeflow.org/resource-in-use` finalizer from TrainingRuntimes and
//! ClusterTrainingRuntimes, as upstream v2.3's runtime controllers do (`pkg/controller/trainingruntime_controller.go`
//! and `clustertrainingruntime_controller.go`). Older Trainer releases added it to every runtime a TrainJob used
//! and removed it when none did; v2.3 no longer tracks use, so without this a runtime created under an older
//! Trainer could never be deleted once kubetrain is the only controller.
//!
//! Each kind has its own kube-runtime `Controller` (upstream runs two reconcilers). A reconcile reads the
//! runtime from the watch cache and, when the finalizer is there, sends one JSON merge patch of
//! `metadata.finalizers` that keeps every other finalizer. Unlike upstream's patch, ours carries the
//! `resourceVersion` it was computed from: a finalizer another controller added in between makes the API server
//! answer 409 Conflict and the reconcile is retried on the fresh object, instead of dropping that finalizer.
//! Only the leader writes; followers re-check every [`Settings::follower_requeue`].
//!
//! RBAC: `list`, `watch` and `patch` on both runtime kinds ([`crate::permissions::required_rules`]). Upstream's
//! role also grants `update` and `*/finalizers` (kubebuilder markers); a merge patch of the main resource needs
//! neither.
//!
//! ```
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! use kubetrain_controller::runtime_finalizer::{removal_patch, RESOURCE_IN_USE_FINALIZER};
//!
//! let meta = ObjectMeta {
//!     finalizers: Some(vec![RESOURCE_IN_USE_FINALIZER.into(), "example.com/keep".into()]),
//!     resource_version: Some("42".into()),
//!     ..Default::default()
//! };
//! assert_eq!(
//!     removal_patch(&meta),
//!     Some(serde_json::json!({"metadata": {"finalizers": ["example.com/keep"], "resourceVersion": "42"}}))
//! );
//! assert_eq!(removal_patch(&ObjectMeta::default()), None);
//! ```

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use kubetrain_api::{ClusterTrainingRuntime, TrainingRuntime};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::backoff::{Backoff, Key};
use crate::cache::is_ready;
use crate::controller::{run_until_stopped, stop_signal, stopped_future};
use crate::error::{Error, Result};
use crate::leadership::Leadership;
use crate::settings::Settings;

/// The finalizer Trainer releases before v2.3 put on runtimes in use (upstream's `ResourceInUseFinalizer`).
pub const RESOURCE_IN_USE_FINALIZER: &str = "trainer.kubeflow.org/resource-in-use";

/// The JSON merge patch that removes [`RESOURCE_IN_USE_FINALIZER`] from an object with this metadata, keeping
/// every other finalizer in order (`null` when none is left, as upstream's computed patch has it) and the
/// `resourceVersion` as a precondition; `None` when the finalizer is not there.
pub fn removal_patch(meta: &ObjectMeta) -> Option<Value> {
    let finalizers = meta.finalizers.as_deref()?;
    if !finalizers.iter().any(|f| f == RESOURCE_IN_USE_FINALIZER) {
        return None;
    }
    let rest: Vec<&String> = finalizers
        .iter()
        .filter(|f| *f != RESOURCE_IN_USE_FINALIZER)
        .collect();
    let mut metadata = json!({
        "finalizers": if rest.is_empty() { Value::Null } else { json!(rest) },
    });
    if let Some(version) = &meta.resource_version {
        metadata["resourceVersion"] = json!(version);
    }
    Some(json!({ "metadata": metadata }))
}

/// What the runtime reconciles share.
pub(crate) struct Context {
    client: Client,
    leadership: Leadership,
    settings: Settings,
    backoff: Backoff,
}

impl Context {
    /// A context for reconciles through `client`; writes happen only while `leadership` says this replica
    /// leads.
    pub(crate) fn new(client: Client, settings: Settings, leadership: Leadership) -> Self {
        Self {
            backoff: Backoff::new(settings.backoff_base, settings.backoff_max),
            client,
            leadership,
            settings,
        }
    }
}

fn key_of<K: Resource>(runtime: &K) -> Key {
    (runtime.namespace().unwrap_or_default(), runtime.name_any())
}

async fn remove<K>(api: Api<K>, runtime: &K, ctx: &Context) -> Result<Action>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    if !ctx.leadership.is_leader() {
        return Ok(Action::requeue(ctx.settings.follower_requeue));
    }
    if let Some(patch) = removal_patch(runtime.meta()) {
        let name = runtime.name_any();
        let params = PatchParams {
            field_manager: Some(ctx.settings.field_manager.clone()),
            ..PatchParams::default()
        };
        api.patch(&name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|e| {
                Error::kube(
                    format!(
                        "removing the {RESOURCE_IN_USE_FINALIZER} finalizer from {} {name}",
                        K::kind(&())
                    ),
                    e,
                )
            })?;
        tracing::info!(
            kind = %K::kind(&()),
            runtime = %name,
            "removed the legacy {RESOURCE_IN_USE_FINALIZER} finalizer"
        );
    }
    ctx.backoff.succeeded(&key_of(runtime));
    Ok(Action::await_change())
}

/// Reconciles one ClusterTrainingRuntime: removes the legacy finalizer when it is there.
pub(crate) async fn reconcile_cluster(
    runtime: Arc<ClusterTrainingRuntime>,
    ctx: Arc<Context>,
) -> Result<Action> {
    remove(Api::all(ctx.client.clone()), &*runtime, &ctx).await
}

/// Reconciles one TrainingRuntime: removes the legacy finalizer when it is there.
pub(crate) async fn reconcile_namespaced(
    runtime: Arc<TrainingRuntime>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let namespace = runtime.namespace().unwrap_or_default();
    remove(
        Api::namespaced(ctx.client.clone(), &namespace),
        &*runtime,
        &ctx,
    )
    .await
}

/// After a failed reconcile (a 409 included): retry with the per-runtime exponential backoff.
pub(crate) fn error_policy<K: Resource>(
    runtime: Arc<K>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    let key = key_of(&*runtime);
    let delay = ctx.backoff.failed(&key);
    tracing::warn!(
        runtime = %format_args!("{}/{}", key.0, key.1),
        %error,
        retry_in = ?delay,
        "runtime reconcile failed"
    );
    Action::requeue(delay)
}

async fn log_result<T, E: std::fmt::Display>(result: std::result::Result<T, E>) {
    if let Err(error) = result {
        tracing::debug!(%error, "runtime controller stream");
    }
}

/// Runs the ClusterTrainingRuntime and TrainingRuntime controllers until `shutdown` resolves. TrainingRuntimes
/// are watched in [`Settings::namespace`] (every namespace when `None`), ClusterTrainingRuntimes cluster-wide.
pub async fn run(
    client: Client,
    settings: Settings,
    leadership: Leadership,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    // Both controllers stop on the one signal; kube-runtime wants `Sync` triggers, which watch receivers are.
    let stopped = stop_signal(shutdown);
    let namespaced: Api<TrainingRuntime> = match settings.namespace.as_deref() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let cluster: Api<ClusterTrainingRuntime> = Api::all(client.clone());
    let ctx = Arc::new(Context::new(client, settings, leadership));
    let cluster = Controller::new(cluster, watcher::Config::default());
    let cluster_store = cluster.store();
    let cluster = cluster
        .graceful_shutdown_on(stopped_future(stopped.clone()))
        .run(reconcile_cluster, error_policy, ctx.clone())
        .for_each(log_result);
    let namespaced = Controller::new(namespaced, watcher::Config::default());
    let namespaced_store = namespaced.store();
    let namespaced = namespaced
        .graceful_shutdown_on(stopped_future(stopped.clone()))
        .run(reconcile_namespaced, error_policy, ctx)
        .for_each(log_result);
    futures_util::future::join(
        run_until_stopped(cluster, move || is_ready(&cluster_store), stopped.clone()),
        run_until_stopped(namespaced, move || is_ready(&namespaced_store), stopped),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(finalizers: Option<&[&str]>) -> ObjectMeta {
        ObjectMeta {
            finalizers: finalizers.map(|f| f.iter().map(|s| (*s).to_owned()).collect()),
            resource_version: Some("7".into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_patch_removes_only_the_legacy_finalizer() {
        let legacy = RESOURCE_IN_USE_FINALIZER;
        let cases: [(Option<&[&str]>, Option<Value>); 5] = [
            (None, None),
            (Some(&[]), None),
            (Some(&["example.com/other"]), None),
            (
                Some(&[legacy]),
                Some(json!({"metadata": {"finalizers": null, "resourceVersion": "7"}})),
            ),
            (
                Some(&["a.io/x", legacy, "b.io/y"]),
                Some(
                    json!({"metadata": {"finalizers": ["a.io/x", "b.io/y"], "resourceVersion": "7"}}),
                ),
            ),
        ];
        for (finalizers, want) in cases {
            assert_eq!(removal_patch(&meta(finalizers)), want, "{finalizers:?}");
        }
    }

    // The reconciles against the in-memory API server: the leader removes only the legacy finalizer, a
    // follower writes nothing, a concurrent change is not overwritten.

    use kube::runtime::controller::Action;
    use kubetrain_api::{ClusterTrainingRuntime, TrainingRuntime};
    use kubetrain_test_support::FakeApiServer;
    use kubetrain_test_support::fixtures::{
        TRAINER_API_VERSION, runtime_with_finalizers, runtimes_with_legacy_finalizer,
        stored_finalizers,
    };

    const OTHER: &str = "example.com/keep-me";

    fn server() -> FakeApiServer {
        runtimes_with_legacy_finalizer(RESOURCE_IN_USE_FINALIZER, OTHER)
    }

    fn finalizers(server: &FakeApiServer, plural: &str, namespace: &str, name: &str) -> Value {
        stored_finalizers(server, plural, namespace, name)
    }

    fn stored<T: serde::de::DeserializeOwned>(
        server: &FakeApiServer,
        plural: &str,
        namespace: &str,
        name: &str,
    ) -> Arc<T> {
        let value = server
            .get(TRAINER_API_VERSION, plural, namespace, name)
            .expect("runtime stored");
        Arc::new(serde_json::from_value(value).expect("typed runtime"))
    }

    fn context(server: &FakeApiServer, leadership: Leadership) -> Arc<Context> {
        Arc::new(Context::new(
            server.client(),
            Settings::default(),
            leadership,
        ))
    }

    #[tokio::test]
    async fn the_leader_removes_only_the_legacy_finalizer() {
        let server = server();
        let ctx = context(&server, Leadership::always());

        for name in ["legacy", "clean"] {
            let runtime: Arc<ClusterTrainingRuntime> =
                stored(&server, "clustertrainingruntimes", "", name);
            let action = reconcile_cluster(runtime, ctx.clone())
                .await
                .expect("reconciled");
            assert_eq!(action, Action::await_change());
        }
        let namespaced: Arc<TrainingRuntime> =
            stored(&server, "trainingruntimes", "team-a", "legacy");
        reconcile_namespaced(namespaced, ctx.clone())
            .await
            .expect("reconciled");

        assert_eq!(
            finalizers(&server, "clustertrainingruntimes", "", "legacy"),
            json!([OTHER])
        );
        assert_eq!(
            finalizers(&server, "clustertrainingruntimes", "", "clean"),
            json!([OTHER])
        );
        assert_eq!(
            finalizers(&server, "trainingruntimes", "team-a", "legacy"),
            Value::Null,
            "the last finalizer removed leaves none"
        );
        // One patch per runtime that had the finalizer; nothing for the clean one.
        assert_eq!(server.stats().merge_patches, 2);
        // The spec is untouched.
        let spec = &server
            .get(TRAINER_API_VERSION, "clustertrainingruntimes", "", "legacy")
            .unwrap()["spec"];
        assert_eq!(spec, &runtime_with_finalizers("x", "x", None, &[])["spec"]);
    }

    #[tokio::test]
    async fn a_follower_writes_nothing() {
        let server = server();
        let (_elect, leadership) = Leadership::channel();
        let ctx = context(&server, leadership);
        let runtime: Arc<ClusterTrainingRuntime> =
            stored(&server, "clustertrainingruntimes", "", "legacy");
        let action = reconcile_cluster(runtime, ctx).await.expect("reconciled");
        assert_eq!(
            action,
            Action::requeue(Settings::default().follower_requeue)
        );
        assert_eq!(server.stats().merge_patches, 0);
        assert_eq!(
            finalizers(&server, "clustertrainingruntimes", "", "legacy"),
            json!([RESOURCE_IN_USE_FINALIZER, OTHER])
        );
    }

    #[tokio::test]
    async fn a_concurrent_change_is_not_overwritten() {
        let server = server();
        let ctx = context(&server, Leadership::always());
        // Read, then another writer changes the runtime (a new resourceVersion) before the patch lands.
        let seen: Arc<ClusterTrainingRuntime> =
            stored(&server, "clustertrainingruntimes", "", "legacy");
        server.insert(runtime_with_finalizers(
            "ClusterTrainingRuntime",
            "legacy",
            None,
            &[RESOURCE_IN_USE_FINALIZER, OTHER, "example.com/new"],
        ));
        let error = reconcile_cluster(seen.clone(), ctx.clone())
            .await
            .expect_err("409 Conflict");
        assert!(error.is_conflict(), "{error}");
        assert_eq!(
            finalizers(&server, "clustertrainingruntimes", "", "legacy"),
            json!([RESOURCE_IN_USE_FINALIZER, OTHER, "example.com/new"])
        );
        // The retry is scheduled with backoff, and the fresh object is then patched correctly.
        assert_ne!(
            error_policy(seen, &error, ctx.clone()),
            Action::await_change()
        );
        let fresh: Arc<ClusterTrainingRuntime> =
            stored(&server, "clustertrainingruntimes", "", "legacy");
        reconcile_cluster(fresh, ctx).await.expect("reconciled");
        assert_eq!(
            finalizers(&server, "clustertrainingruntimes", "", "legacy"),
            json!([OTHER, "example.com/new"])
        );
    }
}
