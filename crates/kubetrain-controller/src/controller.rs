//! The TrainJob controller: kube-runtime's `Controller` over TrainJobs, owning JobSets, ConfigMaps, Secrets and
//! PodGroups, with a level-triggered [`reconcile()`] (read what exists, render the full desired state, apply it)
//! and a per-TrainJob exponential [`error_policy`].
//!
//! Renders run one plugin registry ([`Context::with_plugins`], [`run_with_plugins`]; the built-ins by
//! default). Objects of other kinds that a custom plugin builds are applied like the built-in companions
//! (server-side apply, owned by the TrainJob, before the JobSet) and re-applied by every reconcile; the kinds in
//! [`Settings::owned_kinds`] are also watched, so a change to one reconciles its TrainJob.
//!
//! One reconcile, in request order:
//!
//! 1. `GET` the JobSet named like the TrainJob.
//! 2. Unless the TrainJob is finished or names an unsupported runtime kind: `GET` the runtime snapshot
//!    ConfigMap, or else `GET` the (Cluster)TrainingRuntime; `GET` the MPI Secret / PodGroup when the runtime
//!    has them; render; then, as leader, apply the snapshot (first reconcile only) and every rendered object.
//!    An elastic TrainJob's leader also `LIST`s the nodes and sizes the node job: in the JobSet it applies, or
//!    with a JSON `PATCH` of a running one (`reconcile::elastic`).
//! 3. Compute the status; as leader `DELETE` the JobSet after the active deadline and merge-patch the status
//!    subresource when it changed. After a JobSet restart (its `status.restarts` moved), the leader also
//!    merge-patches the TrainJob's `kubetrain.dev/restarts` annotation and publishes a `TrainJobRestarted`
//!    event (`reconcile::restarts`).
//! 4. As leader, `DELETE` a finished TrainJob whose `ttlSecondsAfterFinished` (its own, else its runtime's
//!    `runPolicy` default; KEP-2899) expired, with a `TTLExpired` event; otherwise requeue for when it does.
//!
//! Reconciling one TrainJob against the in-memory API server (`kubetrain-test-support`):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use std::sync::Arc;
//! use kubetrain_controller::controller::{reconcile, Context};
//! use kubetrain_test_support::FakeApiServer;
//! use kubetrain_controller::{ControllerMetrics, Leadership, Settings};
//! use serde_json::json;
//!
//! let server = FakeApiServer::start();
//! for runtime in kubetrain_jobset::builtin::runtimes() {
//!     server.insert(serde_json::to_value(runtime).unwrap());
//! }
//! let job = json!({
//!     "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
//!     "metadata": {"name": "mnist", "namespace": "team-a", "uid": "5f0c6a1e"},
//!     "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 4}},
//! });
//! server.insert(job.clone());
//!
//! let ctx = Arc::new(Context::new(
//!     server.client(),
//!     Settings::default(),
//!     Leadership::always(),
//!     Arc::new(ControllerMetrics::default()),
//! ));
//! reconcile(Arc::new(serde_json::from_value(job).unwrap()), ctx).await.unwrap();
//!
//! let jobset = server.get("jobset.x-k8s.io/v1alpha2", "jobsets", "team-a", "mnist").unwrap();
//! assert_eq!(jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"], 4);
//! assert_eq!(jobset["metadata"]["ownerReferences"][0]["uid"], "5f0c6a1e");
//! assert!(server.get("v1", "configmaps", "team-a", "mnist-runtime-snapshot").is_some());
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, PartialObjectMeta, Patch,
    PatchParams,
};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource};
use kubetrain_api::jobset::{JOBSET_API_VERSION, JobSet};
use kubetrain_api::podgroup::{coscheduling, volcano};
use kubetrain_api::{ClusterTrainingRuntime, RunPolicy, TrainJob, TrainJobStatus, TrainingRuntime};
use kubetrain_jobset::plugins::Registry;
use kubetrain_jobset::status::is_finished;
use kubetrain_merge::plugins::mpi::{hostfile_config_map_name, ssh_auth_secret_name};
use rand_core::OsRng;
use tokio::time::Instant;

use crate::applied::{AppliedMemory, hash_json, hash_of};
use crate::apply::{apply_config_map, apply_object, apply_params};
use crate::backoff::{Backoff, Key};
use crate::cache::{self, Cached, CachedJobSet, Caches, is_ready};
use crate::count_writes::{self, CountWriteBudget, CountWrites, Verdict};
use crate::error::{Error, Result};
use crate::events;
use crate::leadership::Leadership;
use crate::metrics::ControllerMetrics;
use crate::reconcile::lifecycle::Ttl;
use crate::reconcile::{
    self, FetchedRuntime, PodGroupKind, RuntimeKind, SnapshotRuntime, StatusDecision,
};
use crate::settings::Settings;
use crate::snapshots::ParsedSnapshots;

/// What every reconcile shares: the client, settings, render plugins, leadership view, metrics, event recorder
/// and backoff.
pub struct Context {
    client: Client,
    settings: Settings,
    /// The plugins every render runs, built once (the operator shares them with its webhook).
    plugins: Arc<Registry>,
    leadership: Leadership,
    metrics: Arc<ControllerMetrics>,
    recorder: Recorder,
    backoff: Backoff,
    apply: PatchParams,
    /// The watch caches reads are served from; `None` reads live (a context built with [`Context::new`]).
    cache: Option<Caches>,
    /// What the leader last wrote (used with the caches only: skipping needs the cache's versions).
    memory: AppliedMemory,
    /// Runtime snapshots, parsed once per distinct text.
    snapshots: ParsedSnapshots,
    /// The restart history this leader last recorded per TrainJob (uid, history): the cache may not have the
    /// annotation's echo yet, and a restart must be announced once.
    restarts: RestartMemory,
    /// The elastic loop's per-TrainJob memory (metric recommendations, causes announced).
    elastic: reconcile::elastic::Memory,
    /// The line of count-only status writes ([`crate::count_writes`]); `None` writes every change at once.
    count_writes: Option<Arc<CountWrites>>,
}

/// What the leader last recorded of each TrainJob's restarts ([`reconcile::restarts`]).
type RestartMemory =
    std::sync::Mutex<std::collections::HashMap<Key, (String, reconcile::restarts::RestartHistory)>>;

impl Context {
    /// A context for reconciles through `client`, rendering with the built-in plugins that `settings.render`
    /// enables ([`Registry::builtin`]).
    pub fn new(
        client: Client,
        settings: Settings,
        leadership: Leadership,
        metrics: Arc<ControllerMetrics>,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: settings.event_reporter.clone(),
                instance: settings.event_instance.clone(),
            },
        );
        Self {
            backoff: Backoff::new(settings.backoff_base, settings.backoff_max),
            apply: apply_params(&settings.field_manager),
            plugins: Arc::new(Registry::builtin(&settings.render)),
            client,
            settings,
            leadership,
            metrics,
            recorder,
            cache: None,
            memory: AppliedMemory::default(),
            snapshots: ParsedSnapshots::default(),
            restarts: RestartMemory::default(),
            elastic: reconcile::elastic::Memory::default(),
            count_writes: None,
        }
    }

    /// Renders with `plugins` instead of the built-ins (an embedder's registry, e.g. [`Registry::builtin`]
    /// plus its own plugins). It replaces what `settings.render` enabled, so it should be built from the
    /// same settings.
    pub fn with_plugins(mut self, plugins: Arc<Registry>) -> Self {
        self.plugins = plugins;
        self
    }

    /// Serves reads from `caches` and skips writes whose result cannot change (see [`crate::cache`] and
    /// [`crate::applied`]).
    pub(crate) fn with_caches(mut self, caches: Caches) -> Self {
        self.cache = Some(caches);
        self
    }

    /// Paces count-only status writes with `budget`; the caller feeds [`count_writes::turns`] of the
    /// returned line to the controller (without that, a waiting TrainJob would wait for its next event).
    pub(crate) fn with_count_writes(
        mut self,
        budget: CountWriteBudget,
    ) -> (Self, Arc<CountWrites>) {
        let gauge = self.metrics.count_writes_waiting();
        let writes = Arc::new(CountWrites::new(budget, Instant::now(), gauge));
        self.count_writes = Some(writes.clone());
        (self, writes)
    }

    /// The per-TrainJob failure counts.
    #[cfg(test)]
    pub(crate) fn backoff(&self) -> &Backoff {
        &self.backoff
    }

    /// The metrics reconciles record into.
    pub fn metrics(&self) -> &ControllerMetrics {
        &self.metrics
    }

    fn leader(&self) -> bool {
        self.leadership.is_leader()
    }

    #[cfg(test)]
    pub(crate) fn memory_for_tests(&self) -> &AppliedMemory {
        &self.memory
    }
}

/// Namespace and name of a TrainJob.
pub(crate) fn key_of(job: &TrainJob) -> Key {
    (
        job.metadata.namespace.clone().unwrap_or_default(),
        job.name().to_owned(),
    )
}

/// Reconciles one TrainJob (level-triggered: the outcome depends only on what exists now).
pub async fn reconcile(job: Arc<TrainJob>, ctx: Arc<Context>) -> Result<Action> {
    let key = key_of(&job);
    let _measure = ctx.metrics.reconcile_started();
    match reconcile_job(&job, &ctx).await {
        Ok(requeue_after) => {
            ctx.backoff.succeeded(&key);
            ctx.metrics.requeue(&key, requeue_after);
            Ok(next_action(requeue_after, ctx.settings.sync_period))
        }
        Err(error) => {
            ctx.metrics.error(error.metric_label());
            Err(error)
        }
    }
}

/// What follows a successful reconcile: the earlier of the reconcile's own requeue (a deadline to check)
/// and the periodic resync; without either, wait for a change.
fn next_action(requeue_after: Option<Duration>, sync_period: Option<Duration>) -> Action {
    requeue_after
        .into_iter()
        .chain(sync_period)
        .min()
        .map_or_else(Action::await_change, Action::requeue)
}

/// After a failed reconcile: retry after `base × 2^(failures-1)` (capped), counted per TrainJob. Conflicts
/// (409, another writer came first) take the same path, so a hot object is retried without hammering it.
pub fn error_policy(job: Arc<TrainJob>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = key_of(&job);
    let delay = ctx.backoff.failed(&key);
    ctx.metrics.requeue(&key, Some(delay));
    tracing::warn!(
        trainjob = %format_args!("{}/{}", key.0, key.1),
        %error,
        kind = error.metric_label(),
        retry_in = ?delay,
        "reconcile failed"
    );
    Action::requeue(delay)
}

async fn reconcile_job(job: &TrainJob, ctx: &Context) -> Result<Option<Duration>> {
    if let Some(skip) = reconcile::skip(job) {
        tracing::debug!(trainjob = job.name(), ?skip, "skipping TrainJob");
        return Ok(None);
    }
    let key = key_of(job);
    let (namespace, name) = &key;
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    if let Some(cache) = &ctx.cache
        && own_writes_pending(ctx, cache, job, &key, uid)
    {
        // This reconcile came before the watch events of the leader's own last applies (e.g. the snapshot's
        // event before the JobSet's). Each of those events triggers a reconcile once the store holds the
        // object, so wait for it instead of reading live; the requeue is the safety net for an event that
        // never comes (the object deleted at once), after which the reads go live.
        tracing::debug!(trainjob = %format_args!("{namespace}/{name}"), "waiting for the cache to see our writes");
        ctx.memory.awaiting_echoes(&key, uid, true);
        return Ok(Some(OWN_WRITES_RECHECK));
    }
    let mut jobset = read_jobset(ctx, &key, uid).await?;
    let synced = sync_unless_finished(job, &key, &mut jobset, ctx).await;
    let (unsupported, mut failure, run_policy) =
        (synced.unsupported, synced.failure, synced.run_policy);

    let now = Time(Timestamp::now());
    let mut decision = reconcile::decide_status(
        job,
        jobset.as_ref(),
        unsupported.as_deref(),
        run_policy.as_ref(),
        &now,
    );
    if !ctx.leader() {
        // Followers compute (their caches stay warm) and look again later; they never write.
        return follower_outcome(failure, &decision, ctx);
    }
    if decision.delete_jobset {
        delete_jobset_after_deadline(ctx, &key, uid).await;
    }
    // A JobSet restart since the last one recorded: its condition goes with the status write (no extra one).
    let restart = observe_restarts(
        job,
        jobset.as_ref(),
        synced.gpus,
        synced.opted_in,
        ctx,
        &now,
    );
    if let Some(condition) = restart.as_ref().and_then(|u| u.condition.clone()) {
        kubetrain_jobset::status::set_condition(&mut decision.status.conditions, condition);
        let before = job.status.clone().unwrap_or_default();
        decision.patch = reconcile::merge_patch(&before, &decision.status);
    }
    pace_count_writes(job, ctx, &mut decision);
    if let Err(error) = write_status(job, ctx, &decision, jobset.as_ref()).await {
        match &failure {
            None => failure = Some(error),
            Some(_) => tracing::warn!(%error, "status patch failed too"),
        }
    }
    if let Some(error) = failure {
        return Err(error);
    }
    if let Some(update) = restart {
        record_restarts(job, ctx, update).await?;
    }
    if decision.ttl == Ttl::Expired {
        delete_after_ttl(job, ctx, &decision).await?;
        return Ok(None);
    }
    if jobset.is_none() && unsupported.is_none() && !is_finished(&decision.status) {
        return Err(Error::JobSetMissing(format!("{namespace}/{name}")));
    }
    if let Some(cache) = &ctx.cache {
        sweep(&ctx.memory, cache);
    }
    if ctx.cache.is_some() && !is_finished(&decision.status) {
        // The echo of this reconcile's status write will carry exactly this: it needs no reconcile.
        ctx.memory
            .reconciled(&key, uid, fingerprint(job, &decision.status));
        ctx.memory.awaiting_echoes(&key, uid, false);
    }
    if is_finished(&decision.status) {
        forget_restarts(ctx, &key);
    }
    let requeue = match (decision.requeue_after, synced.requeue_after) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(requeue.map(whole_seconds))
}

/// Keeps the written counts when the decision changes only `jobsStatus` counts and the count-only write
/// budget says wait ([`crate::count_writes`]): the TrainJob is reconciled again when its turn comes. Any
/// other write goes out at once with the counts of that moment, and the TrainJob leaves the line.
fn pace_count_writes(job: &TrainJob, ctx: &Context, decision: &mut StatusDecision) {
    let Some(writes) = &ctx.count_writes else {
        return;
    };
    let key = key_of(job);
    let unwritten = TrainJobStatus::default();
    let before = job.status.as_ref().unwrap_or(&unwritten);
    if decision.patch.is_none() || !reconcile::counts_only(before, &decision.status) {
        writes.withdraw(&key);
        return;
    }
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    if writes.request(&key, uid, Instant::now()) == Verdict::Wait {
        tracing::debug!(trainjob = %format_args!("{}/{}", key.0, key.1), "count-only status write waits for the budget");
        decision.status.jobs_status.clone_from(&before.jobs_status);
        decision.patch = None;
    }
}

/// The restart update for `job` ([`reconcile::restarts::observe`]), reading the history this leader last
/// recorded when its annotation has not come back through the cache yet.
fn observe_restarts(
    job: &TrainJob,
    jobset: Option<&JobSet>,
    gpus: f64,
    opted_in: bool,
    ctx: &Context,
    now: &Time,
) -> Option<reconcile::restarts::RestartUpdate> {
    use reconcile::restarts::{RESTARTS_ANNOTATION, RestartHistory, observe};
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let remembered = ctx
        .restarts
        .lock()
        .ok()?
        .get(&key_of(job))
        .filter(|(u, _)| u == uid)
        .map(|(_, h)| h.clone());
    match remembered {
        Some(history) if history != RestartHistory::of(job) => {
            let mut seen = job.clone();
            seen.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(RESTARTS_ANNOTATION.to_owned(), history.to_annotation());
            observe(&seen, jobset, gpus, opted_in, now)
        }
        _ => observe(job, jobset, gpus, opted_in, now),
    }
}

/// Stores the restart history in the TrainJob's annotation (a merge patch of that one key), then publishes
/// the update's events. A failed patch is returned (the reconcile retries; nothing was announced yet).
async fn record_restarts(
    job: &TrainJob,
    ctx: &Context,
    update: reconcile::restarts::RestartUpdate,
) -> Result<()> {
    let key = key_of(job);
    let (namespace, name) = &key;
    let patch = serde_json::json!({"metadata": {"annotations": {
        reconcile::restarts::RESTARTS_ANNOTATION: update.history.to_annotation(),
    }}});
    let params = PatchParams {
        field_manager: Some(ctx.settings.field_manager.clone()),
        ..Default::default()
    };
    Api::<TrainJob>::namespaced(ctx.client.clone(), namespace)
        .patch(name, &params, &Patch::Merge(&patch))
        .await
        .map_err(|e| {
            Error::kube(
                format!("recording the restarts of TrainJob {namespace}/{name}"),
                e,
            )
        })?;
    let uid = job.metadata.uid.clone().unwrap_or_default();
    if let Ok(mut memory) = ctx.restarts.lock() {
        memory.insert(key.clone(), (uid, update.history));
    }
    for notice in &update.events {
        events::publish(&ctx.recorder, &notice.to_event(), &job.object_ref(&())).await;
    }
    Ok(())
}

fn forget_restarts(ctx: &Context, key: &Key) {
    if let Ok(mut memory) = ctx.restarts.lock() {
        memory.remove(key);
    }
}

/// What [`sync_unless_finished`] found.
#[derive(Default)]
struct Synced {
    /// The registry key of an unsupported runtime kind.
    unsupported: Option<String>,
    /// The sync's failure (reported as an event by the leader, returned only after the status is written).
    failure: Option<Error>,
    /// The runtime's KEP-2899 `runPolicy`, when the runtime was read.
    run_policy: Option<RunPolicy>,
    /// The GPUs the rendered JobSet asks for (the work lost by a restart is counted in GPU-seconds).
    gpus: f64,
    /// Whether the job opted in to restarts after disruptions (annotation, or elastic).
    opted_in: bool,
    /// Look again after this long (a running elastic job counts its nodes again).
    requeue_after: Option<Duration>,
}

/// Brings the children in line with the TrainJob unless it is finished or names an unsupported runtime kind;
/// `jobset` becomes the JobSet as applied. A finished job gets no new JobSet even when its JobSet is gone
/// (kubeflow/trainer#3779): only the runtime's `runPolicy` is read, when the job sets no TTL of its own.
async fn sync_unless_finished(
    job: &TrainJob,
    key: &Key,
    jobset: &mut Option<JobSet>,
    ctx: &Context,
) -> Synced {
    let finished = job.status.as_ref().is_some_and(is_finished);
    match reconcile::runtime_kind(job) {
        Err(reconcile::UnsupportedRuntime(kind)) => Synced {
            unsupported: Some(kind),
            ..Synced::default()
        },
        // A finished job's opt-in trainerStatus gauges go (crate::platform), and so does what the leader
        // remembers applying: nothing is applied any more.
        Ok(kind) if finished => {
            ctx.metrics.platform.forget(job);
            ctx.memory.forget(key);
            let needs_policy = job.spec.ttl_seconds_after_finished.is_none();
            Synced {
                run_policy: if needs_policy {
                    finished_run_policy(job, kind, ctx, key).await
                } else {
                    None
                },
                ..Synced::default()
            }
        }
        Ok(kind) => match sync_children(job, kind, jobset.as_ref(), ctx).await {
            Ok(children) => {
                if let Some(applied) = children.applied {
                    *jobset = Some(applied);
                }
                Synced {
                    run_policy: children.run_policy,
                    gpus: children.gpus,
                    opted_in: children.opted_in,
                    requeue_after: children.requeue_after,
                    ..Synced::default()
                }
            }
            Err(error) => {
                if ctx.leader() {
                    let event = events::resources_creation_failed(&error.to_string());
                    events::publish(&ctx.recorder, &event, &job.object_ref(&())).await;
                }
                Synced {
                    failure: Some(error),
                    ..Synced::default()
                }
            }
        },
    }
}

/// The `runPolicy` of the runtime a finished job ran with: its snapshot's, else the live runtime's. A read
/// that fails leaves the job without a runtime TTL this time (logged; the next reconcile reads again).
async fn finished_run_policy(
    job: &TrainJob,
    kind: RuntimeKind,
    ctx: &Context,
    key: &Key,
) -> Option<RunPolicy> {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let snapshot_name = reconcile::snapshot_name(job);
    let from_snapshot = match read_snapshot_map(ctx, key, uid, &snapshot_name).await {
        Ok(Some(cm)) => ctx
            .snapshots
            .get_or_parse(&cm)
            .map(|parsed| parsed.spec.run_policy.clone())
            .ok(),
        Ok(None) => None,
        Err(error) => {
            tracing::debug!(%error, "reading the runtime snapshot of a finished TrainJob failed");
            None
        }
    };
    match from_snapshot {
        Some(policy) => policy,
        None => fetch_runtime(job, kind, ctx, &key.0)
            .await
            .ok()
            .and_then(|r| SnapshotRuntime::from(r).spec.run_policy),
    }
}

/// Deletes a finished TrainJob whose TTL expired (KEP-2899), with foreground propagation as Kubernetes' TTL
/// controller and JobSet's do: the TrainJob goes once its JobSet, pods and other children are gone. The
/// delete is conditioned on the TrainJob's uid, so a new TrainJob of the same name is never the one deleted;
/// a Normal `TTLExpired` event says why it went.
async fn delete_after_ttl(job: &TrainJob, ctx: &Context, decision: &StatusDecision) -> Result<()> {
    let (namespace, name) = key_of(job);
    let uid = job.metadata.uid.clone();
    let event = reconcile::lifecycle::ttl_expired_event(
        &decision.status,
        decision.effective_ttl.unwrap_or_default(),
    );
    events::publish(&ctx.recorder, &event, &job.object_ref(&())).await;
    let params = DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Foreground),
        preconditions: Some(kube::api::Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match Api::<TrainJob>::namespaced(ctx.client.clone(), &namespace)
        .delete(&name, &params)
        .await
    {
        Ok(_) => {
            tracing::info!(trainjob = %format_args!("{namespace}/{name}"), "deleted after its TTL");
            ctx.memory.forget(&(namespace, name));
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Err(error) => Err(Error::kube(
            format!("deleting TrainJob {namespace}/{name} after its TTL"),
            error,
        )),
    }
}

/// A follower's reconcile result: the sync's failure, else a look again at the status deadline or after
/// [`Settings::follower_requeue`], whichever comes first.
fn follower_outcome(
    failure: Option<Error>,
    decision: &StatusDecision,
    ctx: &Context,
) -> Result<Option<Duration>> {
    match failure {
        Some(error) => Err(error),
        None => Ok(Some(
            decision
                .requeue_after
                .map(whole_seconds)
                .map_or(ctx.settings.follower_requeue, |d| {
                    d.min(ctx.settings.follower_requeue)
                }),
        )),
    }
}

/// Deletes the TrainJob's JobSet once its active deadline passed. A failure is only logged, as upstream does:
/// the Failed condition is what matters.
async fn delete_jobset_after_deadline(ctx: &Context, key: &Key, uid: &str) {
    let (namespace, name) = key;
    ctx.memory.forget_object(key, uid, jobset_object(name));
    let deleted = Api::<JobSet>::namespaced(ctx.client.clone(), namespace)
        .delete(name, &DeleteParams::background())
        .await;
    match deleted {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.is_not_found() => {}
        Err(error) => tracing::warn!(%error, "deleting the JobSet after the deadline failed"),
    }
}

/// Merge-patches the status subresource when the decision changed it and the leader has not already written
/// exactly this (the cache may lag behind its own patch); a written status is counted by the platform metrics.
async fn write_status(
    job: &TrainJob,
    ctx: &Context,
    decision: &StatusDecision,
    jobset: Option<&JobSet>,
) -> Result<()> {
    let Some(patch) = &decision.patch else {
        return Ok(());
    };
    let key = key_of(job);
    let (namespace, name) = &key;
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let status_hash = ctx.cache.is_some().then(|| hash_json(&decision.status));
    let resource_version = job.metadata.resource_version.as_deref().unwrap_or_default();
    if status_hash.is_some_and(|h| ctx.memory.status_written(&key, uid, resource_version, h)) {
        // The cache has not caught up with the leader's own patch, which wrote exactly this.
        tracing::debug!(trainjob = %format_args!("{namespace}/{name}"), "status already written");
        return Ok(());
    }
    let params = PatchParams {
        field_manager: Some(ctx.settings.field_manager.clone()),
        ..Default::default()
    };
    Api::<TrainJob>::namespaced(ctx.client.clone(), namespace)
        .patch_status(name, &params, &Patch::Merge(patch))
        .await
        .map_err(|e| Error::kube(format!("patching status of TrainJob {namespace}/{name}"), e))?;
    // Written once, by the leader: the platform metrics count each transition once.
    if let Some(h) = status_hash {
        ctx.memory.wrote_status(&key, uid, resource_version, h);
    }
    ctx.metrics.platform.observe(
        job,
        &job.status.clone().unwrap_or_default(),
        &decision.status,
        jobset,
    );
    Ok(())
}

/// A hash of what a reconcile reads of a TrainJob (identity, labels, annotations, finalizers, owners,
/// deletion, spec) and of `status`. The leader keeps it after each reconcile; a watch event whose TrainJob
/// hashes the same, with its own status, is the echo of the leader's status patch.
fn fingerprint(job: &TrainJob, status: &TrainJobStatus) -> u64 {
    let m = &job.metadata;
    hash_json(&(
        (&m.uid, &m.labels, &m.annotations),
        (&m.finalizers, &m.owner_references, &m.deletion_timestamp),
        &job.spec,
        status,
    ))
}

/// Whether a child's watch event is the echo of the leader's own apply: it carries exactly the uid and
/// resourceVersion that apply answered, which the reconcile that applied it already used. Such an event
/// triggers no reconcile, unless one waits for it ([`own_writes_pending`]).
pub(crate) fn own_apply_echo<K: Resource<DynamicType = ()>>(ctx: &Context, child: &K) -> bool {
    let meta = child.meta();
    let owner = cache::trainjob_owner(meta);
    let (Some(owner), Some(namespace), Some(name)) = (owner, &meta.namespace, &meta.name) else {
        return false;
    };
    let key = (namespace.clone(), owner.name.clone());
    let object = object_id(&K::api_version(&()), &K::kind(&()), name);
    let stored = (
        meta.uid.as_deref().unwrap_or_default(),
        meta.resource_version.as_deref().unwrap_or_default(),
    );
    ctx.memory.applied_version(&key, &owner.uid, object, stored)
        && !ctx.memory.is_awaiting_echoes(&key, &owner.uid)
}

/// Whether the TrainJob in a watch event is exactly as the leader's last reconcile left it (see
/// [`fingerprint`]); such an event triggers no reconcile.
pub(crate) fn left_as_is(ctx: &Context, job: &TrainJob) -> bool {
    let Some(status) = &job.status else {
        return false;
    };
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    ctx.memory
        .left_as_is(&key_of(job), uid, fingerprint(job, status))
}

/// How long after an apply a cache that lacks the object is taken to lag behind (watch events on a loaded
/// control plane arrive within seconds); later, the object is read live.
const OWN_WRITES_WINDOW: Duration = Duration::from_secs(15);
/// The safety-net requeue while waiting for the watch events of the leader's own applies.
const OWN_WRITES_RECHECK: Duration = Duration::from_secs(5);

/// Whether a child this process applied in the last [`OWN_WRITES_WINDOW`] is missing from its store.
fn own_writes_pending(ctx: &Context, cache: &Caches, job: &TrainJob, key: &Key, uid: &str) -> bool {
    let (namespace, name) = key;
    let children = [
        (JOBSET_API_VERSION, "JobSet", name.clone()),
        ("v1", "ConfigMap", reconcile::snapshot_name(job)),
        ("v1", "ConfigMap", hostfile_config_map_name(name)),
        ("v1", "Secret", ssh_auth_secret_name(name)),
        ("scheduling.x-k8s.io/v1alpha1", "PodGroup", name.clone()),
        ("scheduling.volcano.sh/v1beta1", "PodGroup", name.clone()),
    ];
    children.iter().any(|(api_version, kind, child)| {
        let object = object_id(api_version, kind, child);
        ctx.memory
            .applied_within(key, uid, object, OWN_WRITES_WINDOW)
            && matches!(
                cache.child_version(api_version, kind, namespace, child),
                Cached::Known(None)
            )
    })
}

/// Drops what the leader remembers of deleted TrainJobs, once the memory holds twice as many as the cache (so
/// the cost per reconcile stays constant).
fn sweep(memory: &AppliedMemory, cache: &Caches) {
    if memory.len() > 2 * cache.trainjobs.len() + 256 {
        memory.sweep(|(namespace, name)| {
            cache
                .trainjobs
                .get(&ObjectRef::new(name).within(namespace))
                .is_some()
        });
    }
}

/// The apply memory's identity of a child object.
fn object_id(api_version: &str, kind: &str, name: &str) -> u64 {
    hash_of(&[api_version, kind, name])
}

fn jobset_object(name: &str) -> u64 {
    object_id(JOBSET_API_VERSION, "JobSet", name)
}

/// Whether a cached answer can be used: a store that has listed and holds the object, or that does not hold
/// it while this process never applied it. Otherwise (no cache, not listed yet, or the leader's own apply not
/// seen yet or deleted since) the read goes to the API server.
fn trusted<T>(
    ctx: &Context,
    key: &Key,
    uid: &str,
    object: u64,
    cached: Cached<T>,
) -> Option<Option<T>> {
    match cached {
        Cached::Known(Some(found)) => Some(Some(found)),
        Cached::Known(None) if !ctx.memory.remembers(key, uid, object) => Some(None),
        _ => None,
    }
}

/// The TrainJob's JobSet: from the cache when it can answer, else a live `GET`.
async fn read_jobset(ctx: &Context, key: &Key, uid: &str) -> Result<Option<JobSet>> {
    let (namespace, name) = key;
    if let Some(cache) = &ctx.cache
        && let Some(found) = trusted(
            ctx,
            key,
            uid,
            jobset_object(name),
            cache.jobset(namespace, name),
        )
    {
        return Ok(found.map(|js| js.to_jobset()));
    }
    Api::<JobSet>::namespaced(ctx.client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| Error::kube(format!("reading JobSet {namespace}/{name}"), e))
}

/// The runtime snapshot ConfigMap: from the cache when it can answer, else a live `GET`.
async fn read_snapshot_map(
    ctx: &Context,
    key: &Key,
    uid: &str,
    snapshot_name: &str,
) -> Result<Option<Arc<ConfigMap>>> {
    let namespace = &key.0;
    if let Some(cache) = &ctx.cache {
        let object = object_id("v1", "ConfigMap", snapshot_name);
        if let Some(found) = trusted(
            ctx,
            key,
            uid,
            object,
            cache.config_map(namespace, snapshot_name),
        ) {
            return Ok(found);
        }
    }
    Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace)
        .get_opt(snapshot_name)
        .await
        .map(|cm| cm.map(Arc::new))
        .map_err(|e| Error::kube(format!("reading ConfigMap {namespace}/{snapshot_name}"), e))
}

/// Rounds a requeue delay up to whole seconds, so that a deadline check runs after the deadline, not just
/// before it.
fn whole_seconds(d: Duration) -> Duration {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Duration::from_secs(secs.max(1))
}

/// What [`sync_children`] rendered and applied.
struct Children {
    /// The JobSet as stored after the apply, if it was applied.
    applied: Option<JobSet>,
    /// The runtime's `runPolicy`.
    run_policy: Option<RunPolicy>,
    /// The GPUs the rendered JobSet asks for.
    gpus: f64,
    /// Whether the job opted in to restarts after disruptions (annotation, or elastic).
    opted_in: bool,
    /// Look again after this long (elastic jobs).
    requeue_after: Option<Duration>,
}

/// Reads the runtime (snapshot first) and the children's facts, renders, sizes an elastic job's node job
/// ([`reconcile::elastic`]) and applies as leader.
async fn sync_children(
    job: &TrainJob,
    kind: RuntimeKind,
    jobset: Option<&JobSet>,
    ctx: &Context,
) -> Result<Children> {
    let key = key_of(job);
    let namespace = &key.0;
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let client = &ctx.client;
    let snapshot_name = reconcile::snapshot_name(job);
    let (snapshot_runtime, new_snapshot) =
        snapshot_runtime(job, kind, ctx, &key, &snapshot_name).await?;
    let runtime = &snapshot_runtime.spec;
    let run_policy = runtime.run_policy.clone();

    let reads = reconcile::reads(runtime);
    let ssh_secret_exists = reads.ssh_secret && ssh_secret_exists(ctx, job).await?;
    let pod_group_exists = match reads.pod_group {
        None => false,
        Some(pod_group) => read_pod_group(ctx, &key, uid, pod_group).await?,
    };
    let observed = reconcile::observed(
        jobset.map(|j| j.spec.suspend),
        ssh_secret_exists,
        pod_group_exists,
    );
    // Operator keys must be unpredictable: the OS random source, never a seed.
    let mut rendered =
        kubetrain_jobset::render_with_registry(job, runtime, &observed, &ctx.plugins, &mut OsRng)?;
    // A running JobSet is not rendered again: the one read stands for it.
    let shown = rendered.jobset().or(jobset);
    let gpus = shown.map_or(0.0, reconcile::restarts::gpus);
    let elastic = shown.and_then(reconcile::elastic::bounds).is_some();
    let mut children = Children {
        applied: None,
        run_policy,
        gpus,
        opted_in: elastic || kubetrain_jobset::disruption::requested(job),
        requeue_after: None,
    };

    if !ctx.leader() {
        return Ok(children);
    }
    if elastic {
        let scaling = Scaling {
            job,
            existing: jobset,
            runtime,
            observed: &observed,
        };
        children.requeue_after = scale_elastic(&scaling, &mut rendered.objects, ctx).await?;
    }
    // The leader exports the opt-in trainerStatus gauges of a running job (crate::platform).
    ctx.metrics
        .platform
        .trainer_status(job, crate::platform::exports_trainer_status(runtime));
    if let Some(cm) = &new_snapshot {
        let answered = apply_config_map(client, namespace, cm, &ctx.apply).await?;
        if ctx.cache.is_some() {
            // Remembered so that a cache that has not seen it yet is not mistaken for its absence.
            let object = object_id("v1", "ConfigMap", &snapshot_name);
            ctx.memory.applied(
                &key,
                uid,
                object,
                0,
                (&answered.uid, &answered.resource_version),
            );
        }
    }
    children.applied = apply_rendered(job, &rendered.objects, ctx).await?;
    Ok(children)
}

/// What [`scale_elastic`] sizes.
struct Scaling<'a> {
    job: &'a TrainJob,
    /// The JobSet read (or `None` before it exists).
    existing: Option<&'a JobSet>,
    runtime: &'a kubetrain_api::TrainingRuntimeSpec,
    observed: &'a kubetrain_jobset::Observed,
}

/// Sizes an elastic job's node job to the nodes a node pod fits on, within its bounds (a live `LIST` of the
/// nodes, made only for elastic jobs), and within that to what the policy's metrics ask for, stabilized
/// ([`reconcile::elastic::recommend`]: unreadable metrics keep the size), with a `TrainJobScaled` event when
/// the size changes. A JobSet about to
/// be applied gets the size in its body; a running one (never re-applied) gets a JSON patch of the node job's
/// `parallelism` and `completions` (JobSet's `ElasticJobSet` gate resizes its Job in place). A suspended job,
/// one Kueue admits (it sizes the job: partial admission) and a finished JobSet keep their size. Returns when
/// to count again.
async fn scale_elastic(
    scaling: &Scaling<'_>,
    objects: &mut [kubetrain_jobset::Object],
    ctx: &Context,
) -> Result<Option<Duration>> {
    use reconcile::elastic;
    let (job, existing) = (scaling.job, scaling.existing);
    let to_apply = objects.iter_mut().find_map(|o| match o {
        kubetrain_jobset::Object::JobSet(js) => Some(js),
        _ => None,
    });
    let Some(bounds) = to_apply
        .as_deref()
        .and_then(|js| elastic::bounds(js))
        .or_else(|| existing.and_then(elastic::bounds))
    else {
        return Ok(None);
    };
    let from = existing.and_then(|e| elastic::current(e, &bounds));
    let kueue = job
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(KUEUE_QUEUE_LABEL));
    let terminal = existing
        .and_then(|e| e.status.as_ref())
        .is_some_and(|s| s.terminal_state.is_some());
    if job.spec.is_suspended() || kueue || terminal {
        if let (Some(from), Some(js)) = (from, to_apply) {
            // Keep the size it has: the apply must not undo an earlier scaling.
            elastic::scale(js, &bounds, from);
        }
        return Ok(None);
    }
    let pod = match to_apply.as_deref() {
        Some(js) => elastic::node_pod(js, &bounds).cloned(),
        None => rendered_node_pod(scaling, &bounds, ctx)?,
    };
    let Some(pod) = pod else {
        return Ok(None);
    };
    let nodes = Api::<Node>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::kube("listing nodes for an elastic TrainJob".to_owned(), e))?;
    let fitting = elastic::fitting_nodes(&nodes.items, &pod);
    // The size now: the running JobSet's, or the initial size (numNodes) of the one about to be created.
    let current = from
        .or_else(|| {
            to_apply
                .as_deref()
                .and_then(|js| elastic::current(js, &bounds))
        })
        .unwrap_or(bounds.max);
    let ask = elastic::Ask {
        bounds: &bounds,
        pod: &pod,
        metrics: policy_metrics(scaling.runtime),
        current,
        running: from.is_some(),
    };
    let now = std::time::Instant::now();
    let recommended = elastic::recommend(&ctx.client, &ctx.elastic, job, ask, now).await;
    if let Some(event) = &recommended.unreadable {
        events::publish(&ctx.recorder, event, &job.object_ref(&())).await;
    }
    let wanted = recommended.wanted;
    let size = elastic::desired(&bounds, fitting, current, wanted);
    match to_apply {
        Some(js) => elastic::scale(js, &bounds, size),
        None if from != Some(size) => {
            if let Some(existing) = existing {
                patch_node_count(job, existing, &bounds, size, ctx).await?;
                let uid = job.metadata.uid.as_deref().unwrap_or_default();
                ctx.elastic.resized(uid, Timestamp::now(), now);
            }
        }
        None => {}
    }
    if let Some(from) = from
        && from != size
    {
        tracing::info!(
            trainjob = job.name(),
            from,
            to = size,
            fitting,
            "scaling an elastic TrainJob"
        );
        let event = elastic::scaled_event(&bounds, from, size, fitting, wanted);
        events::publish(&ctx.recorder, &event, &job.object_ref(&())).await;
    }
    Ok(Some(elastic::ELASTIC_RESYNC))
}

/// The node pod of the JobSet rendered in full (a running JobSet is not among the objects to apply).
fn rendered_node_pod(
    scaling: &Scaling<'_>,
    bounds: &reconcile::elastic::Bounds,
    ctx: &Context,
) -> Result<Option<k8s_openapi::api::core::v1::PodSpec>> {
    let fresh = kubetrain_jobset::Observed {
        jobset: None,
        ..*scaling.observed
    };
    let full = kubetrain_jobset::render_with_registry(
        scaling.job,
        scaling.runtime,
        &fresh,
        &ctx.plugins,
        &mut OsRng,
    )?;
    Ok(full
        .jobset()
        .and_then(|js| reconcile::elastic::node_pod(js, bounds))
        .cloned())
}

/// The elastic policy's `metrics` in `runtime` (none without one).
fn policy_metrics(
    runtime: &kubetrain_api::TrainingRuntimeSpec,
) -> &[k8s_openapi::api::autoscaling::v2::MetricSpec] {
    match runtime.ml_policy.as_ref().and_then(|p| p.source.as_ref()) {
        Some(kubetrain_api::MLPolicySource::Torch(torch)) => torch
            .elastic_policy
            .as_ref()
            .map(|e| e.metrics.as_slice())
            .unwrap_or_default(),
        _ => &[],
    }
}

/// JSON-patches a running JobSet's node job to `size` nodes (`parallelism` = `completions`), tested against
/// the replicated job's name at its index so that a reordered JobSet is refused, not mis-sized.
async fn patch_node_count(
    job: &TrainJob,
    existing: &JobSet,
    bounds: &reconcile::elastic::Bounds,
    size: i32,
    ctx: &Context,
) -> Result<()> {
    let (namespace, name) = key_of(job);
    let Some(index) = existing
        .spec
        .replicated_jobs
        .iter()
        .position(|r| r.name == bounds.replicated_job)
    else {
        return Ok(());
    };
    let base = format!("/spec/replicatedJobs/{index}");
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": format!("{base}/name"), "value": bounds.replicated_job},
        {"op": "replace", "path": format!("{base}/template/spec/parallelism"), "value": size},
        {"op": "replace", "path": format!("{base}/template/spec/completions"), "value": size},
    ]))
    .map_err(|source| Error::Serialize {
        what: "the scaling patch".to_owned(),
        source,
    })?;
    let params = PatchParams {
        field_manager: Some(ctx.settings.field_manager.clone()),
        ..Default::default()
    };
    Api::<JobSet>::namespaced(ctx.client.clone(), &namespace)
        .patch(&name, &params, &Patch::<()>::Json(patch))
        .await
        .map_err(|e| Error::kube(format!("scaling JobSet {namespace}/{name}"), e))?;
    Ok(())
}

/// The label that hands a TrainJob to a Kueue LocalQueue.
const KUEUE_QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// The runtime this TrainJob renders with: its snapshot ConfigMap's when there is one, after upstream's
/// checks in upstream's order (owner, then the data, then runtimeRef; only parsing is memoized); else the
/// runtime `spec.runtimeRef` names, with the snapshot ConfigMap to create for it.
async fn snapshot_runtime(
    job: &TrainJob,
    kind: RuntimeKind,
    ctx: &Context,
    key: &Key,
    snapshot_name: &str,
) -> Result<(Arc<SnapshotRuntime>, Option<ConfigMap>)> {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    match read_snapshot_map(ctx, key, uid, snapshot_name).await? {
        Some(cm) => {
            reconcile::check_owner(job, &cm)?;
            let parsed = ctx.snapshots.get_or_parse(&cm)?;
            parsed.check_runtime_ref(job)?;
            Ok((parsed, None))
        }
        None => {
            let fetched = fetch_runtime(job, kind, ctx, &key.0).await?;
            let cm = reconcile::snapshot_config_map(job, &fetched)?;
            Ok((Arc::new(SnapshotRuntime::from(fetched)), Some(cm)))
        }
    }
}

/// Whether the TrainJob's MPI SSH Secret exists. Only a Secret the cache holds counts as present without
/// asking: a missing one is confirmed live, because applying a new one would replace the SSH keys of running
/// pods.
async fn ssh_secret_exists(ctx: &Context, job: &TrainJob) -> Result<bool> {
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let secret = ssh_auth_secret_name(job.name());
    if let Some(Cached::Known(Some(_))) = ctx.cache.as_ref().map(|c| c.secret(namespace, &secret)) {
        return Ok(true);
    }
    Ok(Api::<Secret>::namespaced(ctx.client.clone(), namespace)
        .get_metadata_opt(&secret)
        .await
        .map_err(|e| Error::kube(format!("reading Secret {namespace}/{secret}"), e))?
        .is_some())
}

/// Applies the rendered objects as leader, skipping those whose body and stored version are unchanged since
/// the last apply. Returns the JobSet as stored after the apply, if it was applied; `None` also when
/// leadership was lost mid-way (the new leader re-applies everything).
async fn apply_rendered(
    job: &TrainJob,
    objects: &[kubetrain_jobset::Object],
    ctx: &Context,
) -> Result<Option<JobSet>> {
    let key = key_of(job);
    let namespace = &key.0;
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    let client = &ctx.client;
    let mut applied = None;
    // Companions (SSH Secret, hostfile, PodGroup) before the JobSet, so its pods never start without their
    // mounts or their gang; a JobSet the API server refuses then leaves the same objects as upstream's
    // controller (found side by side). The render order itself is unchanged.
    let (jobsets, companions): (Vec<_>, Vec<_>) = objects
        .iter()
        .partition(|o| matches!(o, kubetrain_jobset::Object::JobSet(_)));
    for object in companions.into_iter().chain(jobsets) {
        if !ctx.leader() {
            // Leadership lost mid-way: the new leader re-applies everything.
            return Ok(None);
        }
        let Some(cache) = &ctx.cache else {
            applied = apply_object(client, namespace, object, &ctx.apply)
                .await?
                .jobset
                .or(applied);
            continue;
        };
        let id = object_id(object.api_version(), object.kind(), object.name());
        let body = hash_json(object);
        let stored = match cache.child_version(
            object.api_version(),
            object.kind(),
            namespace,
            object.name(),
        ) {
            Cached::Known(Some(version)) => Some(version),
            _ => None,
        };
        let stored = stored.as_ref().map(|(u, rv)| (u.as_str(), rv.as_str()));
        if ctx.memory.unchanged(&key, uid, id, body, stored) {
            // Same body as last applied, and nobody changed the object since: the apply would change nothing.
            continue;
        }
        let answered = apply_object(client, namespace, object, &ctx.apply).await?;
        ctx.memory.applied(
            &key,
            uid,
            id,
            body,
            (&answered.uid, &answered.resource_version),
        );
        applied = answered.jobset.or(applied);
    }
    Ok(applied)
}

/// Whether the TrainJob's PodGroup exists: from the cache when it can answer, else a live metadata `GET`.
async fn read_pod_group(ctx: &Context, key: &Key, uid: &str, kind: PodGroupKind) -> Result<bool> {
    let (namespace, name) = key;
    let client = &ctx.client;
    if let Some(cache) = &ctx.cache {
        let (api_version, cached) = match kind {
            PodGroupKind::Coscheduling => (
                "scheduling.x-k8s.io/v1alpha1",
                cache.coscheduling_pod_group(namespace, name),
            ),
            PodGroupKind::Volcano => (
                "scheduling.volcano.sh/v1beta1",
                cache.volcano_pod_group(namespace, name),
            ),
        };
        let object = object_id(api_version, "PodGroup", name);
        if let Some(found) = trusted(ctx, key, uid, object, cached) {
            return Ok(found.is_some());
        }
    }
    match kind {
        PodGroupKind::Coscheduling => present(
            Api::<coscheduling::PodGroup>::namespaced(client.clone(), namespace)
                .get_metadata_opt(name)
                .await,
        ),
        PodGroupKind::Volcano => present(
            Api::<volcano::PodGroup>::namespaced(client.clone(), namespace)
                .get_metadata_opt(name)
                .await,
        ),
    }
    .map_err(|e| Error::kube(format!("reading PodGroup {namespace}/{name}"), e))
}

/// The runtime `spec.runtimeRef` names: from the cache when it holds it, else a live `GET` (a runtime created a
/// moment ago, or a missing one, whose error must say so).
async fn fetch_runtime(
    job: &TrainJob,
    kind: RuntimeKind,
    ctx: &Context,
    namespace: &str,
) -> Result<FetchedRuntime> {
    let name = &job.spec.runtime_ref.name;
    let client = &ctx.client;
    if let Some(cache) = &ctx.cache {
        match kind {
            RuntimeKind::Namespaced => {
                if let Cached::Known(Some(r)) = cache.runtime(namespace, name) {
                    return Ok(FetchedRuntime::Namespaced(Box::new((*r).clone())));
                }
            }
            RuntimeKind::Cluster => {
                if let Cached::Known(Some(r)) = cache.cluster_runtime(name) {
                    return Ok(FetchedRuntime::Cluster(Box::new((*r).clone())));
                }
            }
        }
    }
    match kind {
        RuntimeKind::Namespaced => Api::<TrainingRuntime>::namespaced(client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(|e| Error::kube(format!("reading TrainingRuntime {namespace}/{name}"), e))?
            .map(|r| FetchedRuntime::Namespaced(Box::new(r)))
            .ok_or_else(|| Error::RuntimeNotFound {
                message: format!(
                    "TrainingRuntime specified in TrainJob is not found: trainingruntimes.trainer.kubeflow.org {name:?} not found"
                ),
            }),
        RuntimeKind::Cluster => Api::<ClusterTrainingRuntime>::all(client.clone())
            .get_opt(name)
            .await
            .map_err(|e| Error::kube(format!("reading ClusterTrainingRuntime {name}"), e))?
            .map(|r| FetchedRuntime::Cluster(Box::new(r)))
            .ok_or_else(|| Error::RuntimeNotFound {
                message: format!(
                    "not found ClusterTrainingRuntime specified in TrainJob: clustertrainingruntimes.trainer.kubeflow.org {name:?} not found"
                ),
            }),
    }
}

/// Whether an object exists, where a kind the API server does not serve (no gang scheduler installed) counts
/// as absent: the real API server answers its path with a plain-text "404 page not found" that kube does not
/// report as NotFound. The apply that follows then fails with the API server's own reason, after the runtime
/// snapshot is written, as upstream's controller does (found side by side).
fn present<T>(read: kube::Result<Option<T>>) -> kube::Result<bool> {
    match read {
        Ok(found) => Ok(found.is_some()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether the API server serves `resource` in `api_version` (e.g. PodGroups only exist where a gang scheduler
/// is installed; watching a missing kind would fail forever).
async fn served(client: &Client, api_version: &str, resource: &str) -> Result<bool> {
    match client.list_api_group_resources(api_version).await {
        Ok(list) => Ok(list.resources.iter().any(|r| r.name == resource)),
        // A real API server answers an unknown group with a plain-text "404 page not found", which kube
        // reports with code 404 but without the NotFound reason of a Status body (found by the e2e suite).
        Err(kube::Error::Api(s)) if s.is_not_found() || s.code == 404 => Ok(false),
        Err(e) => Err(Error::kube(format!("discovering {api_version}"), e)),
    }
}

/// A stream that yields each time this replica becomes the leader (checked every `poll`), so that a new leader
/// reconciles every TrainJob at once instead of waiting for the follower re-check.
fn leadership_gained(leadership: Leadership, poll: Duration) -> impl Stream<Item = ()> + Send {
    let was = leadership.is_leader();
    futures_util::stream::unfold((leadership, was), move |(leadership, mut was)| async move {
        loop {
            tokio::time::sleep(poll).await;
            let now = leadership.is_leader();
            let gained = now && !was;
            was = now;
            if gained {
                return Some(((), (leadership, was)));
            }
        }
    })
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the TrainJob controller until `shutdown` resolves, then lets running reconciles finish.
///
/// Writes (applies, deletes, status patches, events) happen only while `leadership` says this replica leads;
/// followers keep reading and computing. PodGroup kinds are watched only where the API server serves them.
///
/// # Errors
///
/// [`Error::Startup`] when the TrainJob API (`trainer.kubeflow.org/v1alpha1`) is not served (install the CRDs
/// first), [`Error::Kube`] when discovery itself fails.
pub async fn run(
    client: Client,
    settings: Settings,
    leadership: Leadership,
    metrics: Arc<ControllerMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let plugins = Arc::new(Registry::builtin(&settings.render));
    run_with_plugins(client, settings, plugins, leadership, metrics, shutdown).await
}

/// [`run`] rendering with `plugins` (see [`Context::with_plugins`]): what [`crate::Operator`] runs.
///
/// # Errors
///
/// As [`run`].
pub async fn run_with_plugins(
    client: Client,
    settings: Settings,
    plugins: Arc<Registry>,
    leadership: Leadership,
    metrics: Arc<ControllerMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let (coscheduling, volcano) = discover_kinds(&client, &settings).await?;

    let namespace = settings.namespace.clone();
    let ns = namespace.as_deref();
    let poll = settings.leadership_poll;
    let config = Config::default()
        .concurrency(settings.concurrency)
        .debounce(settings.debounce);
    // One watch per kind, each feeding both a store the reconcile reads and the reconcile triggers (crate::cache).
    let (caches, writers) = Caches::new();
    let trainjobs = cache::reflect(
        api::<TrainJob>(&client, ns),
        writers.trainjobs,
        cache::strip::<TrainJob>,
    );
    let budget = settings.status_count_writes.filter(|b| !b.period.is_zero());
    let mut ctx = Context::new(
        client.clone(),
        settings,
        leadership.clone(),
        metrics.clone(),
    )
    .with_plugins(plugins)
    .with_caches(caches.clone());
    let mut count_turns = None;
    if let Some(budget) = budget {
        let (with_budget, writes) = ctx.with_count_writes(budget);
        ctx = with_budget;
        count_turns = Some(count_writes::turns(writes, caches.trainjobs.clone()));
    }
    let ctx = Arc::new(ctx);
    // The echo of the leader's own status patch is stored, but reconciles nothing (see `fingerprint`).
    let echoes = ctx.clone();
    let triggers = trainjobs
        .applied_objects()
        .try_filter(move |job| std::future::ready(!left_as_is(&echoes, job)));
    let mut controller = Controller::for_stream(triggers, caches.trainjobs.clone())
        .with_config(config)
        .owns_stream(
            cache::reflect(
                api::<CachedJobSet>(&client, ns),
                writers.jobsets,
                cache::strip::<CachedJobSet>,
            )
            .touched_objects()
            .try_filter(not_an_echo(&ctx)),
        )
        .owns_stream(
            cache::reflect(
                api::<ConfigMap>(&client, ns),
                writers.config_maps,
                cache::strip_config_map,
            )
            .touched_objects()
            .try_filter(not_an_echo(&ctx)),
        )
        .owns_stream(cache::reflect_metadata(api(&client, ns), writers.secrets).touched_objects());
    if let Some(turns) = count_turns {
        controller = controller.reconcile_on(turns);
    }
    controller = watch_pod_groups(controller, &client, ns, coscheduling, writers.coscheduling);
    controller = watch_pod_groups(controller, &client, ns, volcano, writers.volcano);
    let controller = watch_owned_kinds(controller, &client, ns, &ctx.settings.owned_kinds).await?;
    // Runtimes trigger nothing (a snapshot pins each TrainJob's runtime); their watches only fill the stores.
    let runtime_watches = futures_util::future::join(
        cache::drain(cache::reflect(
            Api::<ClusterTrainingRuntime>::all(client.clone()),
            writers.cluster_runtimes,
            cache::strip::<ClusterTrainingRuntime>,
        )),
        cache::drain(cache::reflect(
            api::<TrainingRuntime>(&client, ns),
            writers.runtimes,
            cache::strip::<TrainingRuntime>,
        )),
    );
    let store = caches.trainjobs.clone();
    metrics.observe_store(store.clone());

    // kube-runtime wants a `Sync` trigger; a watch receiver is one, whatever `shutdown` is.
    let stopped = stop_signal(shutdown);
    let run = controller
        .graceful_shutdown_on(stopped_future(stopped.clone()))
        .reconcile_all_on(leadership_gained(leadership, poll))
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "controller stream");
            }
        });
    tokio::select! {
        () = run_until_stopped(run, move || is_ready(&store), stopped) => {}
        // The watches retry for ever; they end only with the controller.
        ((), ()) = runtime_watches => {}
    }
    Ok(())
}

/// Checks that the API server serves TrainJobs ([`Error::Startup`] otherwise) and finds which PodGroup kinds
/// it serves: `(coscheduling, volcano)`.
async fn discover_kinds(client: &Client, settings: &Settings) -> Result<(bool, bool)> {
    if !served(client, kubetrain_api::constants::API_VERSION, "trainjobs").await? {
        return Err(Error::Startup(format!(
            "the API server does not serve trainjobs.{}; install the kubetrain CRDs first",
            kubetrain_api::constants::API_VERSION
        )));
    }
    let coscheduling = served(client, "scheduling.x-k8s.io/v1alpha1", "podgroups").await?;
    let volcano = served(client, "scheduling.volcano.sh/v1beta1", "podgroups").await?;
    tracing::info!(
        namespace = settings.namespace.as_deref().unwrap_or("<all>"),
        coscheduling,
        volcano,
        "starting the TrainJob controller"
    );
    Ok((coscheduling, volcano))
}

/// Adds a metadata watch of one PodGroup kind when the API server serves it; a kind not served is marked
/// known to hold nothing, so no live read is made for it.
fn watch_pod_groups<K>(
    controller: Controller<TrainJob>,
    client: &Client,
    namespace: Option<&str>,
    served: bool,
    mut writer: kube::runtime::reflector::store::Writer<PartialObjectMeta<K>>,
) -> Controller<TrainJob>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    if served {
        controller
            .owns_stream(cache::reflect_metadata(api(client, namespace), writer).touched_objects())
    } else {
        writer.apply_watcher_event(&watcher::Event::InitDone);
        controller
    }
}

/// Adds a metadata watch of each of `kinds` that the API server serves (upstream's `WatchExtensionPlugin`): a
/// change to an object a TrainJob owns reconciles that TrainJob. A kind not served is logged and skipped, as
/// the PodGroup kinds are (a watch of it would fail for ever).
async fn watch_owned_kinds(
    mut controller: Controller<TrainJob>,
    client: &Client,
    namespace: Option<&str>,
    kinds: &[ApiResource],
) -> Result<Controller<TrainJob>> {
    for kind in kinds {
        // The core group is always served (`served` asks the named groups' discovery).
        let core = !kind.api_version.contains('/');
        if !core && !served(client, &kind.api_version, &kind.plural).await? {
            tracing::warn!(
                api_version = %kind.api_version,
                resource = %kind.plural,
                "Settings::owned_kinds: the API server does not serve this kind; not watching it"
            );
            continue;
        }
        // Metadata only: the owner references are all a trigger needs.
        let api = match namespace {
            Some(ns) => {
                Api::<PartialObjectMeta<DynamicObject>>::namespaced_with(client.clone(), ns, kind)
            }
            None => Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), kind),
        };
        let changes = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .touched_objects();
        controller = controller.owns_stream_with(changes, kind.clone());
    }
    Ok(controller)
}

/// A child stream's filter dropping the echoes of the leader's own applies ([`own_apply_echo`]).
fn not_an_echo<K: Resource<DynamicType = ()>>(
    ctx: &Arc<Context>,
) -> impl FnMut(&K) -> std::future::Ready<bool> + Send + 'static {
    let ctx = ctx.clone();
    move |child| std::future::ready(!own_apply_echo(&ctx, child))
}

/// A watch receiver that turns `true` when `shutdown` completes (kube-runtime wants `Sync` triggers).
pub(crate) fn stop_signal(
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> tokio::sync::watch::Receiver<bool> {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    stopped
}

/// Completes once `stopped` turns `true`.
pub(crate) async fn stopped_future(mut stopped: tokio::sync::watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Runs a controller's stream until it ends. kube-runtime's graceful shutdown also waits for the cache's first
/// list, forever if the stop comes before it completes (during start-up, or with the API server unreachable);
/// no reconcile can have started by then, so such a stop ends the stream at once.
pub(crate) async fn run_until_stopped(
    run: impl Future<Output = ()>,
    ready: impl Fn() -> bool,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let early_stop = async move {
        if stopped.wait_for(|stop| *stop).await.is_err() || ready() {
            // Never stopped, or the graceful path ends the stream once in-flight reconciles finish.
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = run => {}
        () = early_stop => tracing::debug!("stopped before the first list: nothing in flight"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        let mut status = kube::core::Status::failure("404 page not found", reason);
        status.code = code;
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn an_unserved_pod_group_kind_reads_as_absent_and_other_errors_stay_errors() {
        assert!(!present::<()>(Ok(None)).unwrap());
        assert!(present(Ok(Some(()))).unwrap());
        // The real API server's plain-text 404 for a group it does not serve: no NotFound reason.
        assert!(!present::<()>(Err(api_error(404, "Failed to parse error data"))).unwrap());
        assert!(present::<()>(Err(api_error(403, "Forbidden"))).is_err());
    }

    #[test]
    fn the_next_reconcile_is_the_earlier_of_the_requeue_and_the_resync() {
        let s = Duration::from_secs;
        let table = [
            (None, None, Action::await_change()),
            (Some(s(30)), None, Action::requeue(s(30))),
            (None, Some(s(36_000)), Action::requeue(s(36_000))),
            (Some(s(30)), Some(s(36_000)), Action::requeue(s(30))),
            (Some(s(40_000)), Some(s(36_000)), Action::requeue(s(36_000))),
        ];
        for (requeue, sync, expected) in table {
            assert_eq!(next_action(requeue, sync), expected, "{requeue:?} {sync:?}");
        }
    }
}
