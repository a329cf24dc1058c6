//! The OptimizationJob controller: a hyperparameter search whose trials are TrainJobs.
//!
//! Upstream Kubeflow Trainer merged the `OptimizationJob` API on master (kubeflow/trainer#3552) and has no
//! controller yet (kubeflow/trainer#3828 is open); this one follows the merged types, and the open PR where the
//! types say nothing (the env var `KUBEFLOW_TRAINER_OPT_<NAME>`). docs/optimize.md has the user's view.
//!
//! Each reconcile derives everything from the trial TrainJobs that exist (listed, not cached, so a restarted
//! or newly elected operator resumes exactly): a trial is the TrainJob
//! [`trial_train_job`] builds, named `<job>-<index>`, owned
//! by the job (controller reference), labelled with the job and its index, its parameters in an annotation and
//! in the trainer's env. Then it
//!
//! 1. stops, with the median rule when the job opts in (`kubetrain.dev/early-stopping: median`), running
//!    trials whose objective so far is worse than the median of the finished trials at the same step
//!    (the trial is suspended and annotated `kubetrain.dev/stopped-by: median`);
//! 2. creates the lowest missing indices, until `parallelTrials` trials are unfinished or every index of the
//!    search exists (`numTrials`, or the grid's size when smaller), with parameters from the sampler
//!    ([`kubetrain_optimize::Study::suggest`]: random and grid are pure functions of the index, TPE of the
//!    index and the finished trials);
//! 3. writes `status.result` (the best trial so far and its parameters) and the conditions `Created`,
//!    `Running` and, once every trial finished, `Complete` (or `Failed` when no trial reported the objective).
//!
//! A trial's objective is the metric `spec.objectives[0].metric` of its `status.trainerStatus.metrics`, as the
//! SDK's `update_trainjob_status`, kubetrain's reporter or train-demo post it through the status server.
//!
//! RBAC: [`required_rules`]. Trials are created (`create` on trainjobs) and stopped (`patch`); the job's status
//! is merge-patched; `update` on `optimizationjobs/finalizers` lets a trial's owner reference block the job's
//! deletion where the `OwnerReferencesPermissionEnforcement` admission plugin is on.

mod metrics;
mod search;
mod status;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use kubetrain_api::optimizationjob::{annotations, trial_name, trial_stem, trial_train_job};
use kubetrain_api::validation::validate_optimizationjob_object;
use kubetrain_api::{OptimizationJob, TrainJob};
use kubetrain_optimize::{TrialRecord, TrialState};
use serde_json::json;

pub use metrics::OptimizationMetrics;
pub use search::{HISTORY_ANNOTATION, HISTORY_STAMP_ANNOTATION, STOPPED_ANNOTATION};
pub use status::Counts;

use crate::backoff::{Backoff, Key};
use crate::cache::is_ready;
use crate::controller::{run_until_stopped, stop_signal, stopped_future};
use crate::error::{Error, Result};
use crate::events::publish;
use crate::leadership::Leadership;
use crate::settings::Settings;
use search::{Search, is_finished, next_history, record_of, search_of};

/// Reason of the Normal event for each trial created.
pub const TRIAL_CREATED: &str = "TrialCreated";
/// Reason of the Normal event for each trial stopped early.
pub const TRIAL_STOPPED: &str = "TrialStopped";
/// Reason of the Normal event when the search completes.
pub const SEARCH_COMPLETED: &str = "OptimizationJobCompleted";
/// Reason of the Warning event when the search fails.
pub const SEARCH_FAILED: &str = "OptimizationJobFailed";

/// The RBAC rules of the OptimizationJob controller (the install manifests' ClusterRole includes them).
pub fn required_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    let rule = |resources: &[&str], verbs: &[&str]| k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec![kubetrain_api::constants::GROUP.to_owned()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..Default::default()
    };
    vec![
        rule(&["optimizationjobs"], &["list", "watch"]),
        rule(&["optimizationjobs/status"], &["patch"]),
        rule(&["optimizationjobs/finalizers"], &["update"]),
        rule(&["trainjobs"], &["create", "list", "patch", "watch"]),
    ]
}

/// What the OptimizationJob reconciles share.
pub struct Context {
    client: Client,
    settings: Settings,
    leadership: Leadership,
    backoff: Backoff,
    recorder: Recorder,
    metrics: OptimizationMetrics,
}

impl Context {
    /// A context for reconciles through `client`; writes happen only while `leadership` says this replica
    /// leads.
    pub fn new(
        client: Client,
        settings: Settings,
        leadership: Leadership,
        metrics: OptimizationMetrics,
    ) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "trainer-optimizationjob-controller".to_owned(),
                instance: settings.event_instance.clone(),
            },
        );
        Self {
            backoff: Backoff::new(settings.backoff_base, settings.backoff_max),
            client,
            settings,
            leadership,
            recorder,
            metrics,
        }
    }

    /// The metrics this context updates.
    pub fn metrics(&self) -> &OptimizationMetrics {
        &self.metrics
    }
}

fn key_of(job: &OptimizationJob) -> Key {
    (job.namespace().unwrap_or_default(), job.name_any())
}

fn reference(job: &OptimizationJob) -> ObjectReference {
    job.object_ref(&())
}

/// Reconciles one OptimizationJob (see the module docs).
///
/// # Errors
///
/// A failed API call; the reconcile is retried with backoff.
pub async fn reconcile(job: Arc<OptimizationJob>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.leadership.is_leader() {
        return Ok(Action::requeue(ctx.settings.follower_requeue));
    }
    if job.metadata.deletion_timestamp.is_some() || status::is_terminal(&job) {
        return Ok(Action::await_change());
    }
    let now = Time(Timestamp::now());
    let search = match checked_search(&job) {
        Ok(search) => search,
        Err(message) => {
            let after = status::invalid(&job, &message, &now);
            write_status(&job, &after, &ctx).await?;
            event(&ctx, &job, EventType::Warning, SEARCH_FAILED, message).await;
            return Ok(Action::await_change());
        }
    };
    let namespace = job.namespace().unwrap_or_default();
    let trials: Api<TrainJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let existing = list_trials(&trials, &job).await?;
    let mut records: Vec<TrialRecord> = existing
        .iter()
        .filter_map(|t| record_of(t, &search.metric))
        .collect();
    if let Some(rule) = search.early_stopping {
        stop_early(&trials, &existing, &mut records, &search, rule, &job, &ctx).await?;
    }
    create_trials(&trials, &mut records, &search, &job, &ctx).await?;
    let after = status::decide(&job, &search, &records, &now);
    let counts = Counts::of(&records);
    let best = search.study.best(&records).and_then(|b| b.objective);
    ctx.metrics.observe(&namespace, job.name(), counts, best);
    let finished_now = status::is_terminal(&OptimizationJob {
        status: Some(after.clone()),
        ..(*job).clone()
    });
    if write_status(&job, &after, &ctx).await? && finished_now {
        let (type_, reason) = if best.is_some() {
            (EventType::Normal, SEARCH_COMPLETED)
        } else {
            (EventType::Warning, SEARCH_FAILED)
        };
        let message = after
            .conditions
            .iter()
            .rev()
            .find(|c| c.status == "True")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        event(&ctx, &job, type_, reason, message).await;
    }
    ctx.backoff.succeeded(&key_of(&job));
    Ok(match ctx.settings.sync_period {
        Some(period) if !finished_now => Action::requeue(period),
        _ => Action::await_change(),
    })
}

/// The search of a job whose spec passes upstream's rules and ours, or the message of the first findings.
fn checked_search(job: &OptimizationJob) -> std::result::Result<Search, String> {
    let errors: Vec<String> = validate_optimizationjob_object(job)
        .into_iter()
        .filter(|e| e.is_error())
        .map(|e| {
            if e.path.is_empty() {
                e.message
            } else {
                format!("{}: {}", e.path, e.message)
            }
        })
        .collect();
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    search_of(job)
}

/// The job's trials: TrainJobs with its label and, when the job has a UID, owned by it.
async fn list_trials(trials: &Api<TrainJob>, job: &OptimizationJob) -> Result<Vec<TrainJob>> {
    let selector = format!(
        "{}={}",
        annotations::OPTIMIZATION_JOB_LABEL,
        trial_stem(job.name())
    );
    let list = trials
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| {
            Error::kube(
                format!("listing the trials of OptimizationJob {}", job.name()),
                e,
            )
        })?;
    let uid = job.metadata.uid.as_deref();
    Ok(list
        .items
        .into_iter()
        .filter(|t| {
            uid.is_none()
                || t.owner_references()
                    .iter()
                    .any(|o| Some(o.uid.as_str()) == uid)
        })
        .collect())
}

/// Creates the lowest missing indices until `parallelTrials` are unfinished or every index exists.
async fn create_trials(
    trials: &Api<TrainJob>,
    records: &mut Vec<TrialRecord>,
    search: &Search,
    job: &OptimizationJob,
    ctx: &Context,
) -> Result<()> {
    let total = search.study.trial_count();
    let taken: BTreeSet<u32> = records.iter().map(|r| r.index).collect();
    let active = records.iter().filter(|r| !is_finished(r.state)).count();
    let free = usize::try_from(search.parallel)
        .unwrap_or(usize::MAX)
        .saturating_sub(active);
    let missing: Vec<u32> = (0..total)
        .filter(|i| !taken.contains(i))
        .take(free)
        .collect();
    for index in missing {
        let parameters = match search.study.suggest(index, records) {
            Ok(parameters) => parameters,
            // A grid smaller than the indices asked for: nothing more to create.
            Err(error) => {
                tracing::warn!(job = %job.name(), %error, "no parameters for trial {index}");
                break;
            }
        };
        let trial = trial_train_job(job, index, &parameters);
        let name = trial_name(job.name(), index);
        match trials.create(&PostParams::default(), &trial).await {
            Ok(_) => {
                ctx.metrics.trial_created();
                let shown: Vec<String> =
                    parameters.iter().map(|(k, v)| format!("{k}={v}")).collect();
                event(
                    ctx,
                    job,
                    EventType::Normal,
                    TRIAL_CREATED,
                    format!("Created trial {name} with {}", shown.join(", ")),
                )
                .await;
            }
            // Created by an earlier reconcile this one's list did not see yet: it counts, with what it has.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(Error::kube(format!("creating trial TrainJob {name}"), e)),
        }
        records.push(TrialRecord {
            index,
            parameters,
            objective: None,
            state: TrialState::Pending,
            intermediate: Vec::new(),
        });
    }
    Ok(())
}

/// Records each running trial's new report in its history annotation, and stops the trials the rule says to.
async fn stop_early(
    trials: &Api<TrainJob>,
    existing: &[TrainJob],
    records: &mut [TrialRecord],
    search: &Search,
    rule: kubetrain_optimize::EarlyStopping,
    job: &OptimizationJob,
    ctx: &Context,
) -> Result<()> {
    let params = PatchParams {
        field_manager: Some(ctx.settings.field_manager.clone()),
        ..PatchParams::default()
    };
    for trial in existing {
        let Some(position) = records
            .iter()
            .position(|r| Some(r.index) == kubetrain_api::optimizationjob::trial_index(trial))
        else {
            continue;
        };
        if records[position].state != TrialState::Running {
            continue;
        }
        let Some((history, stamp)) = next_history(trial, &search.metric) else {
            continue;
        };
        records[position].intermediate.clone_from(&history);
        let snapshot: Vec<TrialRecord> = records.to_vec();
        let stop = rule.should_stop(&records[position], &snapshot, search.direction);
        let mut notes = json!({
            HISTORY_ANNOTATION: serde_json::to_string(&history).unwrap_or_default(),
            HISTORY_STAMP_ANNOTATION: stamp,
        });
        let mut patch = json!({"metadata": {"annotations": notes.clone()}});
        if stop {
            notes[STOPPED_ANNOTATION] = json!("median");
            patch = json!({"metadata": {"annotations": notes}, "spec": {"suspend": true}});
        }
        let name = trial.name_any();
        trials
            .patch(&name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|e| Error::kube(format!("updating trial TrainJob {name}"), e))?;
        if stop {
            records[position].state = TrialState::Stopped;
            ctx.metrics.trial_stopped();
            event(
                ctx,
                job,
                EventType::Normal,
                TRIAL_STOPPED,
                format!(
                    "Stopped trial {name}: its {} so far is worse than the median of the finished trials at step {}",
                    search.metric,
                    history.len()
                ),
            )
            .await;
        }
    }
    Ok(())
}

/// Writes the status when it changed; whether it wrote.
async fn write_status(
    job: &OptimizationJob,
    after: &kubetrain_api::OptimizationJobStatus,
    ctx: &Context,
) -> Result<bool> {
    let Some(patch) = status::patch(job.status.as_ref(), after) else {
        return Ok(false);
    };
    let api: Api<OptimizationJob> =
        Api::namespaced(ctx.client.clone(), &job.namespace().unwrap_or_default());
    let params = PatchParams {
        field_manager: Some(ctx.settings.field_manager.clone()),
        ..PatchParams::default()
    };
    api.patch_status(&job.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(|e| {
            Error::kube(
                format!("writing the status of OptimizationJob {}", job.name_any()),
                e,
            )
        })?;
    Ok(true)
}

async fn event(ctx: &Context, job: &OptimizationJob, type_: EventType, reason: &str, note: String) {
    let mut note = note;
    if let Some((cut, _)) = note.char_indices().nth(crate::events::MAX_QUOTED_ERROR) {
        note.truncate(cut);
        note.push_str(" ...");
    }
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: "Reconciling".to_owned(),
        secondary: None,
    };
    publish(&ctx.recorder, &event, &reference(job)).await;
}

/// After a failed reconcile: retry with the per-job exponential backoff.
pub fn error_policy(job: Arc<OptimizationJob>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_failed();
    let key = key_of(&job);
    let delay = ctx.backoff.failed(&key);
    tracing::warn!(
        job = %format_args!("{}/{}", key.0, key.1),
        %error,
        retry_in = ?delay,
        "OptimizationJob reconcile failed"
    );
    Action::requeue(delay)
}

/// Whether the API server serves OptimizationJobs (the CRD is installed) and lets us list them; the log line
/// says which of the two is missing.
async fn served(client: &Client) -> bool {
    let api: Api<OptimizationJob> = Api::all(client.clone());
    let error = match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => return true,
        Err(error) => error,
    };
    let why = match &error {
        kube::Error::Api(status) if status.code == 403 => {
            "the operator's RBAC may not list optimizationjobs.trainer.kubeflow.org (upstream's v2.3 \
             ClusterRole has no such rule; add the one of examples/manifests/deploy/rbac.yaml)"
        }
        _ => {
            "the optimizationjobs.trainer.kubeflow.org CRD is not served (install it from `kubetrain crd`)"
        }
    };
    tracing::warn!(%error, "OptimizationJob controller off: {why}");
    false
}

/// Runs the OptimizationJob controller until `shutdown` resolves: OptimizationJobs in [`Settings::namespace`]
/// (every namespace when `None`), and their trial TrainJobs, which trigger their owner's reconcile. Without
/// the CRD on the cluster it logs a warning and does nothing (the TrainJob controller runs on).
pub async fn run(
    client: Client,
    settings: Settings,
    leadership: Leadership,
    metrics: OptimizationMetrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    if !served(&client).await {
        shutdown.await;
        return;
    }
    let stopped = stop_signal(shutdown);
    let (jobs, trials): (Api<OptimizationJob>, Api<TrainJob>) = match settings.namespace.as_deref()
    {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (Api::all(client.clone()), Api::all(client.clone())),
    };
    let trial_watch = watcher::Config::default().labels(annotations::OPTIMIZATION_JOB_LABEL);
    let ctx = Arc::new(Context::new(client, settings, leadership, metrics));
    let controller = Controller::new(jobs, watcher::Config::default()).owns(trials, trial_watch);
    let store = controller.store();
    let running = controller
        .graceful_shutdown_on(stopped_future(stopped.clone()))
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "OptimizationJob controller stream");
            }
        });
    run_until_stopped(running, move || is_ready(&store), stopped).await;
}
