//! The API server side of the cluster mode: the resources, bounded watches, and the run's context that
//! creates, awaits and deletes its TrainJobs.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Instant;

use futures_util::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
    Preconditions,
};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::RUN_LABEL;
use super::view::{WorkloadView, finished, workload_view};
use crate::plan::Plan;

pub(super) fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn trainjobs() -> ApiResource {
    resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")
}

fn jobsets() -> ApiResource {
    resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")
}

pub(super) fn as_value(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

pub(super) fn trainer_status(o: &DynamicObject) -> Value {
    o.data
        .pointer("/status/trainerStatus")
        .cloned()
        .unwrap_or(Value::Null)
}

/// An API error in one line: the server's message and code.
pub(super) fn api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

/// Why a watch gave up: the last watch error, if any.
pub(super) struct Timeout(pub(super) Option<String>);

impl Timeout {
    /// `{sep}watch: {error}` when the watch failed before it gave up; empty otherwise.
    pub(super) fn suffix(self, sep: &str) -> String {
        self.0
            .map(|e| format!("{sep}watch: {e}"))
            .unwrap_or_default()
    }
}

/// Watches the objects of `api` that `config` selects until `judge` returns `Some` for the current set
/// (by name), or `deadline` passes (the last watch error, if any, comes back).
pub(super) async fn watch_until<K, T>(
    api: Api<K>,
    config: watcher::Config,
    deadline: Instant,
    mut judge: impl FnMut(&BTreeMap<String, K>) -> Option<T>,
) -> Result<T, Timeout>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut objects: BTreeMap<String, K> = BTreeMap::new();
    let mut initial: Option<BTreeMap<String, K>> = None;
    let mut last_error = None;
    loop {
        let next =
            tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), stream.next()).await;
        let event = match next {
            Err(_) => return Err(Timeout(last_error)),
            Ok(None) => return Err(Timeout(Some("the watch ended".into()))),
            Ok(Some(Err(e))) => {
                last_error = Some(e.to_string());
                continue;
            }
            Ok(Some(Ok(event))) => event,
        };
        match event {
            Event::Init => {
                initial = Some(BTreeMap::new());
                continue;
            }
            Event::InitApply(o) => {
                if let Some(m) = initial.as_mut() {
                    m.insert(o.name_any(), o);
                }
                continue;
            }
            Event::InitDone => objects = initial.take().unwrap_or_default(),
            Event::Apply(o) => {
                objects.insert(o.name_any(), o);
            }
            Event::Delete(o) => {
                objects.remove(&o.name_any());
            }
        }
        if let Some(t) = judge(&objects) {
            return Ok(t);
        }
    }
}

pub(super) fn by_name(name: &str) -> watcher::Config {
    watcher::Config::default().fields(&format!("metadata.name={name}"))
}

/// Reads the Kueue Workload of TrainJob `job`: `Ok(None)` when Kueue is not installed or made none.
pub(super) async fn read_workload(
    client: &Client,
    ns: &str,
    job: &str,
) -> Result<Option<WorkloadView>, String> {
    for version in ["v1beta2", "v1beta1"] {
        let ar = resource("kueue.x-k8s.io", version, "Workload", "workloads");
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                return Ok(list
                    .items
                    .iter()
                    .find_map(|w| workload_view(&as_value(w), job)));
            }
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(api_error(&e)),
        }
    }
    Ok(None)
}

/// The per-run context of the steps: the client, the namespace and the plan.
pub(super) struct Ctx<'a> {
    pub(super) client: Client,
    pub(super) ns: String,
    pub(super) plan: &'a Plan,
    pub(super) trainjob_api: Api<DynamicObject>,
    jobset_api: Api<DynamicObject>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(client: &Client, ns: &str, plan: &'a Plan) -> Self {
        Ctx {
            client: client.clone(),
            ns: ns.into(),
            plan,
            trainjob_api: Api::namespaced_with(client.clone(), ns, &trainjobs()),
            jobset_api: Api::namespaced_with(client.clone(), ns, &jobsets()),
        }
    }

    /// Deletes TrainJob `name` only when this plan's run created it ([`RUN_LABEL`]), guarded by its uid
    /// so that one re-created meanwhile is kept. `Ok(false)`: there is none; an error: it is not ours.
    pub(super) async fn delete_ours(
        &self,
        name: &str,
        params: DeleteParams,
    ) -> Result<bool, String> {
        let existing = self
            .trainjob_api
            .get_opt(name)
            .await
            .map_err(|e| format!("reading TrainJob {}/{name}: {}", self.ns, api_error(&e)))?;
        let Some(existing) = existing else {
            return Ok(false);
        };
        let plan = &self.plan.metadata.name;
        if existing.labels().get(RUN_LABEL) != Some(plan) {
            return Err(format!(
                "TrainJob {}/{name} exists and was not created by acceptance plan {plan} (no label {RUN_LABEL}={plan}), so the run leaves it alone: delete it yourself, or rename spec.trainJob.metadata.name",
                self.ns
            ));
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: existing.metadata.uid.clone(),
                resource_version: None,
            }),
            ..params
        };
        match self.trainjob_api.delete(name, &params).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(format!(
                "deleting the earlier TrainJob {}/{name}: {}",
                self.ns,
                api_error(&e)
            )),
        }
    }

    /// Deletes `name` if an earlier run of this plan left it, and waits until it is gone.
    pub(super) async fn remove_leftover(
        &self,
        name: &str,
        deadline: Instant,
    ) -> Result<bool, String> {
        if !self.delete_ours(name, DeleteParams::foreground()).await? {
            return Ok(false);
        }
        watch_until(self.trainjob_api.clone(), by_name(name), deadline, |m| {
            (!m.contains_key(name)).then_some(())
        })
        .await
        .map_err(|t| {
            format!(
                "the earlier TrainJob {}/{name} was not deleted in time{}",
                self.ns,
                t.0.map(|e| format!(": {e}")).unwrap_or_default()
            )
        })?;
        Ok(true)
    }

    /// Creates TrainJob `job`.
    pub(super) async fn create(&self, job: &Value) -> Result<(), String> {
        let name = job
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let obj: DynamicObject = serde_json::from_value(job.clone())
            .map_err(|e| format!("spec.trainJob is not an object the API takes: {e}"))?;
        self.trainjob_api
            .create(&PostParams::default(), &obj)
            .await
            .map(|_| ())
            .map_err(|e| format!("creating TrainJob {}/{name}: {}", self.ns, api_error(&e)))
    }

    /// Waits until TrainJob `name` is admitted: not suspended and its JobSet exists unsuspended.
    /// Returns the seconds waited, measured from `since`.
    pub(super) async fn wait_admitted(
        &self,
        name: &str,
        since: Instant,
        deadline: Instant,
    ) -> Result<f64, String> {
        let job = watch_until(self.trainjob_api.clone(), by_name(name), deadline, |m| {
            let v = as_value(m.get(name)?);
            if let Some((false, why)) = finished(&v) {
                return Some(Err(format!(
                    "TrainJob {}/{name} failed while queued: {why}",
                    self.ns
                )));
            }
            (v.pointer("/spec/suspend").and_then(Value::as_bool) != Some(true)).then_some(Ok(()))
        })
        .await;
        match job {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(t) => return Err(self.not_admitted(name, t).await),
        }
        let js = watch_until(self.jobset_api.clone(), by_name(name), deadline, |m| {
            let v = as_value(m.get(name)?);
            (v.pointer("/spec/suspend").and_then(Value::as_bool) != Some(true)).then_some(())
        })
        .await;
        match js {
            Ok(()) => Ok(since.elapsed().as_secs_f64()),
            Err(t) => Err(self.not_admitted(name, t).await),
        }
    }

    async fn not_admitted(&self, name: &str, t: Timeout) -> String {
        let why = match read_workload(&self.client, &self.ns, name).await {
            Ok(Some(w)) => w
                .quota_reserved
                .map(|(_, reason, message)| format!("{reason}: {message}"))
                .unwrap_or_else(|| format!("Workload {} not evaluated yet", w.name)),
            Ok(None) => "suspended or no JobSet yet (no Kueue Workload found)".into(),
            Err(e) => format!("Workload unreadable: {e}"),
        };
        format!(
            "TrainJob {}/{name} was not admitted within the wait{}: {why}",
            self.ns,
            t.0.map(|e| format!(" (watch: {e})")).unwrap_or_default()
        )
    }

    /// The JobSet of TrainJob `name`.
    pub(super) async fn jobset(&self, name: &str) -> Result<Value, String> {
        self.jobset_api
            .get(name)
            .await
            .map(|o| as_value(&o))
            .map_err(|e| format!("reading JobSet {}/{name}: {}", self.ns, api_error(&e)))
    }

    /// Watches TrainJob `name` until `judge` says `Some` or `deadline` passes.
    pub(super) async fn watch_job<T>(
        &self,
        name: &str,
        deadline: Instant,
        mut judge: impl FnMut(&DynamicObject) -> Option<T>,
    ) -> Result<T, Timeout> {
        watch_until(self.trainjob_api.clone(), by_name(name), deadline, |m| {
            judge(m.get(name)?)
        })
        .await
    }
}
