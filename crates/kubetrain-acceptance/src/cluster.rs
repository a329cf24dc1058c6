//! The seven steps on a Kubernetes cluster, through the API server and the kubetrain operator: the
//! TrainJob is created (in the plan's Kueue LocalQueue), its JobSet's initializer Jobs stage the data,
//! the job's own pods report the benchmark and the training through `TrainJob.status.trainerStatus`
//! (the operator's status server, [`crate::metrics`] names the metrics), a trainer pod is deleted through
//! the API and the restarted trainer must report that it resumed from the checkpoint.
//!
//! Two TrainJobs run, as in local mode: `<name>-bench` (the plan's TrainJob with the trainer command
//! replaced by `kubetrain collective bench`: steps 1-3) and `<name>` (the production command with the
//! checkpoint env: steps 4-5). Every wait is a watch, bounded by the plan's timeouts.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions,
};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::cost::Usage;
use crate::local::{
    STEPS, Steps, bench_command, check_max, check_min, finish, labels_and_cost, training_env,
};
use crate::metrics::{self, Metrics, TrainerSample};
use crate::plan::{FieldError, Plan, format_duration};
use crate::report::{Check, Host, Report, StagingPoint, TrainEvent, TrainPoint};

/// The Kueue label that puts a TrainJob in a LocalQueue.
pub const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The label on every TrainJob a run creates (value: the plan's name). A run deletes a TrainJob only
/// when it carries this label for its plan: one of the same name without it is the user's.
pub const RUN_LABEL: &str = "kubetrain.io/acceptance-plan";
/// Field manager of what the run applies.
pub const FIELD_MANAGER: &str = "kubetrain-acceptance";
const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
const REPLICATED_JOB: &str = "jobset.sigs.k8s.io/replicatedjob-name";
const JOB_INDEX: &str = "jobset.sigs.k8s.io/job-index";
const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
const ANCESTOR: &str = "trainer.kubeflow.org/trainjob-ancestor-step";
const INITIALIZERS: [&str; 2] = ["dataset-initializer", "model-initializer"];

/// Where and how to run.
#[derive(Clone)]
pub struct ClusterRun {
    /// This run's own directory, new and empty (see [`crate::outdir`]): the report is written there.
    pub out_dir: PathBuf,
    /// A client of the cluster's API server.
    pub client: Client,
    /// The namespace of the TrainJobs when the plan's TrainJob names none.
    pub namespace: String,
    /// The API server's URL, for the progress lines.
    pub server: String,
}

impl Debug for ClusterRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterRun")
            .field("out_dir", &self.out_dir)
            .field("namespace", &self.namespace)
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// Connects with `kubeconfig` (else `KUBECONFIG` / `~/.kube/config`) and its `context` (else the
/// current one); with neither, the default kubeconfig or, inside a pod, the ServiceAccount. Returns the
/// client, the context's namespace and the server URL.
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<(Client, String, String), String> {
    let config = if kubeconfig.is_none() && context.is_none() {
        kube::Config::infer()
            .await
            .map_err(|e| format!("no cluster configuration: {e}"))?
    } else {
        let (read, source) = match kubeconfig {
            Some(p) => (
                kube::config::Kubeconfig::read_from(p),
                p.display().to_string(),
            ),
            None => (
                kube::config::Kubeconfig::read(),
                "KUBECONFIG / ~/.kube/config".into(),
            ),
        };
        let kc = read.map_err(|e| format!("reading kubeconfig {source}: {e}"))?;
        if let Some(c) = context
            && !kc.contexts.iter().any(|x| x.name == c)
        {
            let names: Vec<&str> = kc.contexts.iter().map(|x| x.name.as_str()).collect();
            return Err(format!(
                "kubeconfig {source}: no context {c:?} (it has {})",
                names.join(", ")
            ));
        }
        let options = kube::config::KubeConfigOptions {
            context: context.map(str::to_string),
            ..Default::default()
        };
        kube::Config::from_custom_kubeconfig(kc, &options)
            .await
            .map_err(|e| format!("kubeconfig {source}: {e}"))?
    };
    let namespace = config.default_namespace.clone();
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|e| format!("client for {url}: {e}"))?;
    Ok((client, namespace, url))
}

/// What the cluster mode refuses besides the plan's own rules (field paths as [`Plan::validate`]).
pub fn validate(plan: &Plan) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut err = |path: &str, message: &str| {
        errs.push(FieldError {
            path: path.into(),
            message: message.into(),
        })
    };
    let spec = &plan.spec;
    for (path, s) in [("spec.dataset", &spec.dataset), ("spec.model", &spec.model)] {
        if s.loopback.is_some() {
            err(
                &format!("{path}.loopback"),
                "a loopback source exists only in local mode: on a cluster the initializer pods fetch the uri, so remove loopback and give a source they can reach",
            );
        }
    }
    if spec.queue.dir.is_some() {
        err(
            "spec.queue.dir",
            "local mode only: on a cluster the queue is Kueue's LocalQueue spec.queue.name",
        );
    }
    if !spec.queue.capacity.is_empty() {
        err(
            "spec.queue.capacity",
            "local mode only: on a cluster the capacity is the ClusterQueue's quota",
        );
    }
    let loc = &spec.checkpoint.location;
    if !loc.starts_with("s3://") && !Path::new(loc).is_absolute() && !loc.trim().is_empty() {
        err(
            "spec.checkpoint.location",
            &format!(
                "{loc:?} is relative: on a cluster the trainer pods write the checkpoints, so give s3://bucket/prefix or an absolute path on a volume every trainer pod mounts"
            ),
        );
    }
    let name = spec
        .train_job
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name.is_empty() {
        err(
            "spec.trainJob.metadata.name",
            "is required on a cluster: the TrainJobs are <name>-bench and <name>",
        );
    } else if name.len() > 57 {
        err(
            "spec.trainJob.metadata.name",
            &format!(
                "{name:?} is {} characters: at most 57, so that <name>-bench stays a valid TrainJob name",
                name.len()
            ),
        );
    }
    if let (Some(q), Some(label)) = (
        &spec.queue.name,
        spec.train_job
            .pointer("/metadata/labels")
            .and_then(|l| l.get(QUEUE_LABEL))
            .and_then(Value::as_str),
    ) && q != label
    {
        err(
            "spec.queue.name",
            &format!(
                "{q:?} differs from the TrainJob's {QUEUE_LABEL} label {label:?}: name one queue"
            ),
        );
    }
    if spec.cluster.step_timeout.0.is_zero() {
        err("spec.cluster.stepTimeout", "must be longer than 0s");
    }
    errs
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn trainjobs() -> ApiResource {
    resource("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs")
}

fn jobsets() -> ApiResource {
    resource("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")
}

/// The TrainJobs the run creates: `(bench, training)`, in `namespace`, in the plan's queue, with the
/// initializers pointed at the plan's sources and, for training, the checkpoint env.
pub fn trainjobs_of(plan: &Plan, namespace: &str) -> (Value, Value) {
    let spec = &plan.spec;
    let mut base = spec.train_job.clone();
    let name = base
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("acceptance")
        .to_string();
    if !base["metadata"].is_object() {
        base["metadata"] = json!({});
    }
    base["metadata"]["namespace"] = json!(namespace);
    if !base["metadata"]["labels"].is_object() {
        base["metadata"]["labels"] = json!({});
    }
    base["metadata"]["labels"][RUN_LABEL] = json!(plan.metadata.name);
    if let Some(q) = &spec.queue.name {
        base["metadata"]["labels"][QUEUE_LABEL] = json!(q);
    }
    for (key, s) in [("dataset", &spec.dataset), ("model", &spec.model)] {
        if !base["spec"]["initializer"].is_object() {
            base["spec"]["initializer"] = json!({});
        }
        let init = &mut base["spec"]["initializer"][key];
        if !init.is_object() {
            *init = json!({});
        }
        if init.get("storageUri").is_none() {
            init["storageUri"] = json!(s.uri);
        }
        if let Some(endpoint) = &s.endpoint {
            let env = init
                .as_object_mut()
                .map(|o| o.entry("env").or_insert_with(|| json!([])));
            if let Some(Value::Array(list)) = env {
                list.push(json!({"name": "ENDPOINT", "value": endpoint}));
            }
        }
    }
    if !base["spec"]["trainer"].is_object() {
        base["spec"]["trainer"] = json!({});
    }
    let mut bench = base.clone();
    bench["metadata"]["name"] = json!(format!("{name}-bench"));
    bench["spec"]["trainer"]["command"] = bench_command(plan);
    let mut train = base;
    let trainer = &mut train["spec"]["trainer"];
    if !trainer["env"].is_array() {
        trainer["env"] = json!([]);
    }
    if let Some(list) = trainer["env"].as_array_mut() {
        list.extend(training_env(plan, &spec.checkpoint.location));
    }
    (bench, train)
}

/// `Complete`/`Failed` of a TrainJob: `Some((complete, "reason: message"))` once either is True.
pub fn finished(job: &Value) -> Option<(bool, String)> {
    let conditions = job.pointer("/status/conditions")?.as_array()?;
    for kind in ["Failed", "Complete"] {
        if let Some(c) = conditions.iter().find(|c| {
            c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some("True")
        }) {
            let text = |k| c.get(k).and_then(Value::as_str).unwrap_or("");
            return Some((
                kind == "Complete",
                format!("{}: {}", text("reason"), text("message")),
            ));
        }
    }
    None
}

fn job_condition(job: &Job, kind: &str) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")
        .map(|c| {
            format!(
                "{}: {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )
        })
}

/// The replicated job whose pods are the trainer: labelled `trainer.kubeflow.org/trainjob-ancestor-step:
/// trainer` in the JobSet, else `node`.
pub fn trainer_replicated_job(jobset: &Value) -> String {
    jobset
        .pointer("/spec/replicatedJobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|r| {
            r.pointer("/template/metadata/labels")
                .and_then(|l| l.get(ANCESTOR))
                .and_then(Value::as_str)
                == Some("trainer")
        })
        .and_then(|r| r.get("name")?.as_str())
        .unwrap_or("node")
        .to_string()
}

fn replicated_job_names(jobset: &Value) -> Vec<String> {
    jobset
        .pointer("/spec/replicatedJobs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| Some(r.get("name")?.as_str()?.to_string()))
        .collect()
}

fn as_value(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

fn trainer_status(o: &DynamicObject) -> Value {
    o.data
        .pointer("/status/trainerStatus")
        .cloned()
        .unwrap_or(Value::Null)
}

/// Why a watch gave up.
struct Timeout(Option<String>);

/// Watches the objects of `api` that `config` selects until `judge` returns `Some` for the current set
/// (by name), or `deadline` passes (the last watch error, if any, comes back).
async fn watch_until<K, T>(
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
        match next {
            Err(_) => return Err(Timeout(last_error)),
            Ok(None) => return Err(Timeout(Some("the watch ended".into()))),
            Ok(Some(Err(e))) => {
                last_error = Some(e.to_string());
                continue;
            }
            Ok(Some(Ok(event))) => match event {
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
            },
        }
        if let Some(t) = judge(&objects) {
            return Ok(t);
        }
    }
}

fn by_name(name: &str) -> watcher::Config {
    watcher::Config::default().fields(&format!("metadata.name={name}"))
}

fn api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

/// What Kueue said about a TrainJob's Workload.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct WorkloadView {
    /// The Workload's name.
    pub name: String,
    /// `status.admission.clusterQueue`.
    pub cluster_queue: Option<String>,
    /// The flavors of its pod sets' resources.
    pub flavors: Vec<String>,
    /// The `Admitted` condition: status, reason, message.
    pub admitted: Option<(String, String, String)>,
    /// The `QuotaReserved` condition: status, reason, message.
    pub quota_reserved: Option<(String, String, String)>,
}

/// The Workload Kueue made for TrainJob `job` (owner reference), from a `kueue.x-k8s.io` Workload.
pub fn workload_view(workload: &Value, job: &str) -> Option<WorkloadView> {
    let owned = workload
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|o| {
            o.get("kind").and_then(Value::as_str) == Some("TrainJob")
                && o.get("name").and_then(Value::as_str) == Some(job)
        });
    if !owned {
        return None;
    }
    let condition = |kind: &str| {
        workload
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
            .map(|c| {
                let t = |k| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                (t("status"), t("reason"), t("message"))
            })
    };
    let mut flavors: Vec<String> = workload
        .pointer("/status/admission/podSetAssignments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| a.get("flavors")?.as_object())
        .flat_map(|f| f.values().filter_map(|v| v.as_str().map(str::to_string)))
        .collect();
    flavors.sort();
    flavors.dedup();
    Some(WorkloadView {
        name: workload
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .into(),
        cluster_queue: workload
            .pointer("/status/admission/clusterQueue")
            .and_then(Value::as_str)
            .map(str::to_string),
        flavors,
        admitted: condition("Admitted"),
        quota_reserved: condition("QuotaReserved"),
    })
}

/// Reads the Kueue Workload of TrainJob `job`: `Ok(None)` when Kueue is not installed or made none.
async fn read_workload(
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

/// The per-run context of the steps.
struct Ctx<'a> {
    client: Client,
    ns: String,
    plan: &'a Plan,
    trainjob_api: Api<DynamicObject>,
    jobset_api: Api<DynamicObject>,
}

impl Ctx<'_> {
    /// Deletes TrainJob `name` only when this plan's run created it ([`RUN_LABEL`]), guarded by its uid
    /// so that one re-created meanwhile is kept. `Ok(false)`: there is none; an error: it is not ours.
    async fn delete_ours(&self, name: &str, params: DeleteParams) -> Result<bool, String> {
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
    async fn remove_leftover(&self, name: &str, deadline: Instant) -> Result<bool, String> {
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

    async fn create(&self, job: &Value) -> Result<(), String> {
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
    async fn wait_admitted(
        &self,
        name: &str,
        since: Instant,
        deadline: Instant,
    ) -> Result<f64, String> {
        let job = watch_until(self.trainjob_api.clone(), by_name(name), deadline, |m| {
            let o = m.get(name)?;
            let v = as_value(o);
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

    async fn jobset(&self, name: &str) -> Result<Value, String> {
        self.jobset_api
            .get(name)
            .await
            .map(|o| as_value(&o))
            .map_err(|e| format!("reading JobSet {}/{name}: {}", self.ns, api_error(&e)))
    }
}

/// What the training watch saw, in order.
#[derive(Default)]
struct TrainLog {
    points: Vec<TrainPoint>,
    /// checkpoint step → (t, bytes, write ms), first report of each.
    checkpoints: BTreeMap<u64, (f64, Option<u64>, Option<f64>)>,
    last: TrainerSample,
    max_step_before: u64,
    last_updated: Option<String>,
}

impl TrainLog {
    fn observe(&mut self, status: &Value, t: f64, attempt: u32) -> TrainerSample {
        let updated = status
            .get("lastUpdatedTime")
            .map(|v| v.to_string())
            .unwrap_or_default();
        let sample = TrainerSample::of(&Metrics::from_trainer_status(status));
        let same = self.last_updated.as_deref() == Some(updated.as_str()) && sample == self.last;
        if status.is_null() || same {
            return sample;
        }
        self.last_updated = Some(updated);
        self.last = sample;
        if let Some(step) = sample.step {
            self.points.push(TrainPoint {
                t,
                step,
                loss: sample.loss.unwrap_or(f64::NAN),
                samples_per_second: sample.samples_per_second.unwrap_or(0.0),
                attempt,
            });
            if attempt == 1 {
                self.max_step_before = self.max_step_before.max(step);
            }
        }
        if let Some(c) = sample.checkpoint_step {
            self.checkpoints.entry(c).or_insert((
                t,
                sample.checkpoint_bytes,
                sample.checkpoint_write_ms,
            ));
        }
        sample
    }
}

/// Runs the seven steps on the cluster; `progress` gets one line per step.
pub async fn run(
    plan: &Plan,
    opts: &ClusterRun,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Report {
    let run_started = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut steps = Steps {
        done: Vec::new(),
        progress,
    };
    let ns = plan
        .spec
        .train_job
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| opts.namespace.clone());
    let mut report = Report {
        format: "kubetrain.io/acceptance-report/v1".into(),
        name: plan.metadata.name.clone(),
        mode: "cluster".into(),
        passed: false,
        started_unix,
        seconds: 0.0,
        versions: json!({"kubetrain": env!("CARGO_PKG_VERSION"), "reportFormat": "v1", "server": opts.server, "namespace": ns}),
        host: Host::this_machine(),
        steps: Vec::new(),
        training: Vec::new(),
        events: Vec::new(),
        benchmark: Vec::new(),
        staging: Vec::new(),
        queue_wait_seconds: None,
        interrupted: false,
        cost: None,
        labels: BTreeMap::new(),
        plan: plan.clone(),
    };
    let ctx = Ctx {
        client: opts.client.clone(),
        ns: ns.clone(),
        plan,
        trainjob_api: Api::namespaced_with(opts.client.clone(), &ns, &trainjobs()),
        jobset_api: Api::namespaced_with(opts.client.clone(), &ns, &jobsets()),
    };
    let (bench_job, train_job) = trainjobs_of(plan, &ns);
    let names = [
        bench_job["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        train_job["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string(),
    ];
    let interrupted = {
        let body = steps_body(&ctx, opts, &bench_job, &train_job, &mut steps, &mut report);
        tokio::select! {
            () = body => false,
            () = interrupt() => true,
        }
    };
    if interrupted {
        report.interrupted = true;
        for name in &names {
            let _ = ctx.delete_ours(name, DeleteParams::background()).await;
        }
        steps.skip_rest("interrupted (Ctrl-C or SIGTERM): the TrainJobs were deleted");
    }
    finish(report, steps.done, run_started)
}

async fn interrupt() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}

fn fail_rest(steps: &mut Steps<'_>, t: Instant, message: String, step: &str) {
    steps.finish(t, message, Value::Null, vec![], true);
    steps.skip_rest(&format!("the {step} step failed"));
}

#[allow(clippy::too_many_lines)]
async fn steps_body(
    ctx: &Ctx<'_>,
    opts: &ClusterRun,
    bench_job: &Value,
    train_job: &Value,
    steps: &mut Steps<'_>,
    report: &mut Report,
) {
    let plan = ctx.plan;
    let spec = &plan.spec;
    let th = &spec.thresholds;
    let ns = &ctx.ns;
    let step_timeout = spec.cluster.step_timeout.0;
    let queue_timeout = th.max_queue_wait.map_or(step_timeout, |d| d.0);
    let bench = bench_job["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let job = train_job["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();

    // 1. Queue: the runtimes, a clean slate, the bench TrainJob through the queue.
    let t = Instant::now();
    for r in &spec.runtimes {
        let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = r
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let (ar, namespaced) = match kind {
            "TrainingRuntime" => (
                resource("trainer.kubeflow.org", "v1alpha1", kind, "trainingruntimes"),
                true,
            ),
            "ClusterTrainingRuntime" => (
                resource(
                    "trainer.kubeflow.org",
                    "v1alpha1",
                    kind,
                    "clustertrainingruntimes",
                ),
                false,
            ),
            other => {
                return fail_rest(
                    steps,
                    t,
                    format!(
                        "spec.runtimes: {other:?} is not a TrainingRuntime or ClusterTrainingRuntime"
                    ),
                    "queue",
                );
            }
        };
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(ctx.client.clone(), ns, &ar)
        } else {
            Api::all_with(ctx.client.clone(), &ar)
        };
        let mut doc = r.clone();
        if namespaced {
            doc["metadata"]["namespace"] = json!(ns);
        }
        if let Err(e) = api
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&doc),
            )
            .await
        {
            return fail_rest(
                steps,
                t,
                format!("applying {kind} {name}: {}", api_error(&e)),
                "queue",
            );
        }
    }
    let cleanup_deadline = Instant::now() + step_timeout;
    for name in [&bench, &job] {
        match ctx.remove_leftover(name, cleanup_deadline).await {
            Ok(true) => (steps.progress)(&format!(
                "note: deleted TrainJob {ns}/{name} left by an earlier run"
            )),
            Ok(false) => {}
            Err(e) => return fail_rest(steps, t, e, "queue"),
        }
    }
    let t = Instant::now();
    if let Err(e) = ctx.create(bench_job).await {
        return fail_rest(steps, t, e, "queue");
    }
    let admitted = ctx.wait_admitted(&bench, t, t + queue_timeout).await;
    let wait = t.elapsed().as_secs_f64();
    report.queue_wait_seconds = Some(wait);
    let workload = read_workload(&ctx.client, ns, &bench).await;
    let queue_name = spec.queue.name.clone().unwrap_or_else(|| "none".into());
    let (admission, note) = match &workload {
        Ok(Some(w)) => (
            format!(
                "admitted by ClusterQueue {} (flavor {})",
                w.cluster_queue.as_deref().unwrap_or("?"),
                if w.flavors.is_empty() {
                    "?".into()
                } else {
                    w.flavors.join(", ")
                }
            ),
            w.admitted
                .as_ref()
                .map(|(_, reason, message)| format!("{reason}: {message}"))
                .unwrap_or_default(),
        ),
        Ok(None) => (
            "not queued by Kueue (no Workload): the operator started it at once".to_string(),
            String::new(),
        ),
        Err(e) => (
            format!("admitted; the Kueue Workload is unreadable: {e}"),
            String::new(),
        ),
    };
    let measurements = json!({
        "queue": queue_name,
        "namespace": ns,
        "trainJob": bench,
        "waitSeconds": wait,
        "workload": workload.as_ref().ok().cloned().flatten(),
        "admission": if admitted.is_ok() { admission.clone() } else { "not admitted".into() },
        "admissionReason": note,
    });
    let checks: Vec<Check> = check_max(
        "spec.thresholds.maxQueueWait",
        th.max_queue_wait.map(|d| d.0.as_secs_f64()),
        wait,
        "s",
    )
    .into_iter()
    .collect();
    match admitted {
        Ok(_) => {
            let msg = format!("TrainJob {ns}/{bench} {admission} after {wait:.1}s");
            if !steps.finish(t, msg, measurements, checks, false) {
                steps.skip_rest("the queue step failed");
                return;
            }
        }
        Err(why) => {
            steps.finish(t, why, measurements, checks, true);
            steps.skip_rest("the job was not admitted");
            return;
        }
    }
    let admitted_at = Instant::now();

    // 2. Staging: the JobSet's initializer Jobs, then the bytes the first trainer report gives.
    let t = Instant::now();
    let jobset = match ctx.jobset(&bench).await {
        Ok(j) => j,
        Err(e) => return fail_rest(steps, t, e, "staging"),
    };
    let rjobs = replicated_job_names(&jobset);
    let inits: Vec<&str> = INITIALIZERS
        .into_iter()
        .filter(|i| rjobs.iter().any(|r| r == i))
        .collect();
    if inits.is_empty() {
        return fail_rest(
            steps,
            t,
            format!(
                "JobSet {ns}/{bench} has no dataset-initializer or model-initializer replicated job (it has {}), so nothing stages spec.dataset and spec.model: name a runtime with initializers (examples/acceptance/cluster.yaml carries one)",
                rjobs.join(", ")
            ),
            "staging",
        );
    }
    let jobs_api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    let mut done_at: BTreeMap<String, f64> = BTreeMap::new();
    let staged = watch_until(
        jobs_api,
        watcher::Config::default().labels(&format!("{JOBSET_NAME}={bench}")),
        t + step_timeout,
        |m| {
            let mut all = true;
            for init in &inits {
                let of: Vec<&Job> = m
                    .values()
                    .filter(|j| j.labels().get(REPLICATED_JOB).map(String::as_str) == Some(init))
                    .collect();
                if of.is_empty() {
                    all = false;
                }
                for j in of {
                    if let Some(why) = job_condition(j, "Failed") {
                        return Some(Err(format!("Job {} failed: {why}", j.name_any())));
                    }
                    if job_condition(j, "Complete").is_some() {
                        done_at
                            .entry(init.to_string())
                            .or_insert_with(|| admitted_at.elapsed().as_secs_f64());
                    } else {
                        all = false;
                    }
                }
            }
            all.then(|| Ok(m.clone()))
        },
    )
    .await;
    let jobs = match staged {
        Ok(Ok(jobs)) => jobs,
        Ok(Err(e)) => {
            return fail_rest(
                steps,
                t,
                format!("storage unreachable or refused: {e}"),
                "staging",
            );
        }
        Err(to) => {
            return fail_rest(
                steps,
                t,
                format!(
                    "step 2 (staging): the initializer Jobs of {ns}/{bench} did not finish within spec.cluster.stepTimeout ({}){}",
                    format_duration(step_timeout),
                    to.0.map(|e| format!("; watch: {e}")).unwrap_or_default()
                ),
                "staging",
            );
        }
    };
    // The bytes: the benchmark pods report what the initializers left in /workspace before they bench.
    let first_report = watch_until(
        ctx.trainjob_api.clone(),
        by_name(&bench),
        t + step_timeout,
        |m| {
            let o = m.get(&bench)?;
            let status = trainer_status(o);
            (!status.is_null() || finished(&as_value(o)).is_some()).then_some(status)
        },
    )
    .await
    .unwrap_or(Value::Null);
    let reported = Metrics::from_trainer_status(&first_report);
    let mut points = Vec::new();
    let mut job_times = BTreeMap::new();
    for init in &inits {
        let key = if *init == "dataset-initializer" {
            "dataset"
        } else {
            "model"
        };
        let seconds = done_at.get(*init).copied().unwrap_or(0.0).max(1e-3);
        let bytes = reported.u64(if key == "dataset" {
            metrics::DATASET_BYTES
        } else {
            metrics::MODEL_BYTES
        });
        for j in jobs
            .values()
            .filter(|j| j.labels().get(REPLICATED_JOB).map(String::as_str) == Some(init))
        {
            let st = j.status.as_ref();
            let start = st
                .and_then(|s| s.start_time.as_ref())
                .map(|x| x.0.to_string());
            let end = st
                .and_then(|s| s.completion_time.as_ref())
                .map(|x| x.0.to_string());
            job_times.insert(
                j.name_any(),
                json!({"startTime": start, "completionTime": end}),
            );
        }
        points.push((key, bytes, seconds));
    }
    report.staging = points
        .iter()
        .map(|(name, bytes, seconds)| StagingPoint {
            name: (*name).into(),
            bytes: bytes.unwrap_or(0),
            files: 0,
            seconds: *seconds,
            mbps: bytes.unwrap_or(0) as f64 / 1e6 / seconds,
        })
        .collect();
    let known = points.iter().all(|p| p.1.is_some());
    let total_bytes: u64 = points.iter().filter_map(|p| p.1).sum();
    let total_secs = points.iter().map(|p| p.2).fold(0.0, f64::max);
    let mbps = if known {
        total_bytes as f64 / 1e6 / total_secs
    } else {
        0.0
    };
    let checks: Vec<Check> = match (th.min_staging_mbps, known) {
        (Some(min), false) => vec![Check {
            threshold: "spec.thresholds.minStagingMbps".into(),
            wanted: format!("≥ {min} MB/s"),
            measured: "not reported (the trainer reports dataset_bytes and model_bytes; kubetrain collective bench does)".into(),
            pass: false,
        }],
        _ => check_min("spec.thresholds.minStagingMbps", th.min_staging_mbps, mbps, "MB/s")
            .into_iter()
            .collect(),
    };
    let measurements = json!({"sources": report.staging, "bytes": if known { Some(total_bytes) } else { None }, "seconds": total_secs, "mbps": if known { Some(mbps) } else { None }, "jobs": job_times});
    let msg = if known {
        format!(
            "{total_bytes} bytes staged by {} in {total_secs:.1}s at {mbps:.1} MB/s",
            inits.join(" and ")
        )
    } else {
        format!(
            "{} complete after {total_secs:.1}s (bytes not reported by the trainer)",
            inits.join(" and ")
        )
    };
    if !steps.finish(t, msg, measurements, checks, false) {
        steps.skip_rest("the staging step failed");
        return;
    }

    // 3. Benchmark: the bench TrainJob's end and its pods' busbw metrics.
    let t = Instant::now();
    let ended = watch_until(
        ctx.trainjob_api.clone(),
        by_name(&bench),
        t + step_timeout,
        |m| {
            let o = m.get(&bench)?;
            finished(&as_value(o)).map(|f| (f, trainer_status(o)))
        },
    )
    .await;
    let ((complete, why), status) = match ended {
        Ok(x) => x,
        Err(to) => {
            return fail_rest(
                steps,
                t,
                format!(
                    "step 3 (benchmark): TrainJob {ns}/{bench} did not finish within spec.cluster.stepTimeout ({}){}",
                    format_duration(step_timeout),
                    to.0.map(|e| format!("; watch: {e}")).unwrap_or_default()
                ),
                "benchmark",
            );
        }
    };
    let rows = metrics::bench_rows(&Metrics::from_trainer_status(&status));
    report.benchmark = rows.clone();
    let wrong: u64 = rows.iter().map(|r| r.wrong).sum();
    let last = rows.last().cloned();
    let busbw = last.as_ref().map_or(0.0, |r| r.busbw);
    let failed = !complete || rows.is_empty() || wrong > 0;
    let checks: Vec<Check> = if failed {
        Vec::new()
    } else {
        check_min(
            "spec.thresholds.minBusbwGbps",
            th.min_busbw_gbps,
            busbw,
            "GB/s",
        )
        .into_iter()
        .collect()
    };
    let msg = if !complete {
        format!("TrainJob {ns}/{bench} failed: {why}")
    } else if rows.is_empty() {
        format!(
            "the benchmark pods of {ns}/{bench} reported no {}<bytes> metrics in trainerStatus: the trainer must be `kubetrain collective bench` with the status server env (the TrainJobStatus feature)",
            metrics::BUSBW_PREFIX
        )
    } else if wrong > 0 {
        format!("all_reduce found {wrong} wrong elements")
    } else {
        format!(
            "all_reduce over {} pods: busbw {busbw:.3} GB/s at {} bytes, {} sizes, 0 wrong",
            plan.num_nodes(),
            last.as_ref().map_or(0, |r| r.size),
            rows.len()
        )
    };
    let measurements = json!({"rows": rows, "busbwAtMaxGbps": busbw, "pods": plan.num_nodes(), "backend": spec.benchmark.backend, "trainJob": bench});
    if !steps.finish(t, msg, measurements, checks, failed) {
        steps.skip_rest("the benchmark step failed");
        return;
    }

    // 4 + 5. Training: the production TrainJob, a pod deleted after the planned checkpoints, the resume.
    let t = Instant::now();
    if let Err(e) = ctx.create(train_job).await {
        return fail_rest(steps, t, e, "training");
    }
    let train_wait = match ctx.wait_admitted(&job, t, t + queue_timeout).await {
        Ok(w) => w,
        Err(e) => return fail_rest(steps, t, format!("step 4 (training): {e}"), "training"),
    };
    let train_start = Instant::now();
    let window = spec.training.window.0;
    let target =
        u64::from(spec.pod_deletion.after_checkpoints).saturating_mul(spec.checkpoint.every_steps);
    let mut log = TrainLog::default();
    let now = |at: Instant| at.elapsed().as_secs_f64();
    // Phase A: train until the reported checkpoint step reaches the plan's.
    let phase_a = watch_until(
        ctx.trainjob_api.clone(),
        by_name(&job),
        Instant::now() + window + step_timeout,
        |m| {
            let o = m.get(&job)?;
            let s = log.observe(&trainer_status(o), now(train_start), 1);
            if s.checkpoint_step.is_some_and(|c| c >= target) {
                return Some(None);
            }
            finished(&as_value(o)).map(Some)
        },
    )
    .await;
    let mut why: Option<String> = None;
    let mut kill_at = None;
    let mut victim = String::new();
    let mut resumed: Option<(f64, u64)> = None;
    let mut ended: Option<(bool, String)> = None;
    match phase_a {
        Ok(None) => {
            let trainer = match ctx.jobset(&job).await {
                Ok(js) => trainer_replicated_job(&js),
                Err(e) => {
                    why = Some(e);
                    String::new()
                }
            };
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
            let selector = format!(
                "{JOBSET_NAME}={job},{REPLICATED_JOB}={trainer},{JOB_INDEX}=0,{COMPLETION_INDEX}={}",
                spec.pod_deletion.pod_index
            );
            match pods.list(&ListParams::default().labels(&selector)).await {
                Ok(list) => match list.items.first() {
                    Some(p) => {
                        victim = p.name_any();
                        match pods.delete(&victim, &DeleteParams::default()).await {
                            Ok(_) => kill_at = Some(now(train_start)),
                            Err(e) => {
                                why = Some(format!("deleting pod {ns}/{victim}: {}", api_error(&e)))
                            }
                        }
                    }
                    None if why.is_none() => {
                        why = Some(format!(
                            "no pod matches {selector} in {ns}: the trainer pod {} was not found",
                            spec.pod_deletion.pod_index
                        ));
                    }
                    None => {}
                },
                Err(e) => why = Some(format!("listing pods {selector}: {}", api_error(&e))),
            }
        }
        Ok(Some(end)) => {
            why = Some(format!(
                "the trainer reported checkpoint_step {} and the job ended ({}) before checkpoint step {target} (spec.podDeletion.afterCheckpoints × spec.checkpoint.everySteps), so no pod was deleted: lengthen spec.training.window or lower spec.podDeletion.afterCheckpoints",
                log.last.checkpoint_step.unwrap_or(0),
                end.1
            ));
            ended = Some(end);
        }
        Err(to) => {
            why = Some(format!(
                "step 5 (restore): the trainer did not report checkpoint_step ≥ {target} within the window plus spec.cluster.stepTimeout ({}); last reported: step {:?}, checkpoint_step {:?}{}",
                format_duration(window + step_timeout),
                log.last.step,
                log.last.checkpoint_step,
                to.0.map(|e| format!("; watch: {e}")).unwrap_or_default()
            ));
        }
    }
    if let Some(k) = kill_at {
        (steps.progress)(&format!(
            "note: deleted pod {ns}/{victim} at checkpoint_step {} (t={k:.1}s)",
            log.last.checkpoint_step.unwrap_or(0)
        ));
    }
    let ckpt_before = log.checkpoints.keys().next_back().copied();
    // Phase B: the restarted trainer reports resumed_from_step and steps past it.
    if kill_at.is_some() {
        let max_before = log.max_step_before;
        let phase_b = watch_until(
            ctx.trainjob_api.clone(),
            by_name(&job),
            Instant::now() + step_timeout,
            |m| {
                let o = m.get(&job)?;
                let s = log.observe(&trainer_status(o), now(train_start), 2);
                if let Some((false, e)) = finished(&as_value(o)) {
                    return Some(Err(format!("the TrainJob failed after the pod deletion: {e}")));
                }
                match (s.resumed_from_step, s.step) {
                    (Some(r), Some(step)) if step > r => Some(Ok(r)),
                    (None, Some(step)) if step < max_before => Some(Err(format!(
                        "training restarted from step {step} (below step {max_before} reached before the deletion) without reporting resumed_from_step: it did not resume from a checkpoint"
                    ))),
                    _ => None,
                }
            },
        )
        .await;
        match phase_b {
            Ok(Ok(r)) => resumed = Some((now(train_start), r)),
            Ok(Err(e)) => why = Some(e),
            Err(to) => {
                why = Some(format!(
                    "step 5 (restore): after pod {victim} was deleted the trainer did not report resumed_from_step and a step past it within spec.cluster.stepTimeout ({}); last reported: step {:?}, resumed_from_step {:?}{}",
                    format_duration(step_timeout),
                    log.last.step,
                    log.last.resumed_from_step,
                    to.0.map(|e| format!("; watch: {e}")).unwrap_or_default()
                ))
            }
        }
    }
    // Phase C: the job ends (the window after the restart).
    if ended.is_none() {
        let phase_c = watch_until(
            ctx.trainjob_api.clone(),
            by_name(&job),
            Instant::now() + window + step_timeout,
            |m| {
                let o = m.get(&job)?;
                log.observe(
                    &trainer_status(o),
                    now(train_start),
                    if kill_at.is_some() { 2 } else { 1 },
                );
                finished(&as_value(o))
            },
        )
        .await;
        ended = Some(phase_c.unwrap_or_else(|to| {
            (
                false,
                format!(
                    "did not finish within the window plus spec.cluster.stepTimeout ({}){}",
                    format_duration(window + step_timeout),
                    to.0.map(|e| format!("; watch: {e}")).unwrap_or_default()
                ),
            )
        }));
    }
    let (complete, end_message) = ended.unwrap_or((false, String::new()));
    let held = admitted_at.elapsed().as_secs_f64();

    report.training = log.points.clone();
    for (step, (t, bytes, ms)) in &log.checkpoints {
        report.events.push(TrainEvent {
            t: *t,
            kind: "checkpoint".into(),
            label: format!(
                "checkpoint step {step}{}{}",
                bytes.map(|b| format!(", {b} bytes")).unwrap_or_default(),
                ms.map(|m| format!(", {m:.1} ms")).unwrap_or_default()
            ),
        });
    }
    if let Some(k) = kill_at {
        report.events.push(TrainEvent {
            t: k,
            kind: "deletion".into(),
            label: format!("pod {victim} deleted through the API"),
        });
    }
    if let Some((t, r)) = resumed {
        report.events.push(TrainEvent {
            t,
            kind: "resumed".into(),
            label: format!("resumed from checkpoint step {r}"),
        });
    }
    let sps_of = |attempt: u32| {
        log.points
            .iter()
            .rev()
            .find(|p| p.attempt == attempt && p.samples_per_second > 0.0)
            .map_or(0.0, |p| p.samples_per_second)
    };
    let (sps1, sps2) = (sps_of(1), sps_of(2));
    let sps = if sps2 > 0.0 { sps2 } else { sps1 };
    let final_step = log.points.last().map_or(0, |p| p.step);
    let ckpt_bytes = log
        .checkpoints
        .values()
        .rev()
        .find_map(|c| c.1)
        .unwrap_or(0);
    let ms: Vec<f64> = log.checkpoints.values().filter_map(|c| c.2).collect();
    let mean_ms = if ms.is_empty() {
        0.0
    } else {
        ms.iter().sum::<f64>() / ms.len() as f64
    };
    let train_failed = log.points.is_empty() || log.checkpoints.is_empty();
    let measurements = json!({
        "trainJob": job,
        "queueWaitSeconds": train_wait,
        "windowSeconds": window.as_secs_f64(),
        "steps": final_step,
        "samplesPerStep": spec.training.samples_per_step,
        "samplesPerSecond": sps,
        "samplesPerSecondBeforeDeletion": sps1,
        "samplesPerSecondAfterRestore": sps2,
        "firstLoss": log.points.first().map(|p| p.loss),
        "lastLoss": log.points.last().map(|p| p.loss),
        "checkpoints": log.checkpoints.len(),
        "checkpointBytes": ckpt_bytes,
        "checkpointWriteMsMean": mean_ms,
        "checkpointLocation": spec.checkpoint.location,
        "statusUpdates": log.points.len(),
    });
    let checks: Vec<Check> = check_min(
        "spec.thresholds.minSamplesPerSecond",
        th.min_samples_per_second,
        sps,
        "samples/s",
    )
    .into_iter()
    .collect();
    let msg = if train_failed {
        format!(
            "the trainer of {ns}/{job} reported {} updates with a step and {} checkpoints through trainerStatus (it must report step and checkpoint_step){}",
            log.points.len(),
            log.checkpoints.len(),
            if end_message.is_empty() {
                String::new()
            } else {
                format!("; the job: {end_message}")
            }
        )
    } else {
        format!(
            "{final_step} steps, loss {:.3e} → {:.3e}, {sps:.0} samples/s; {} checkpoints reported, the last {ckpt_bytes} bytes",
            log.points.first().map_or(0.0, |p| p.loss),
            log.points.last().map_or(0.0, |p| p.loss),
            log.checkpoints.len()
        )
    };
    steps.finish(t, msg, measurements, checks, train_failed);

    // 5. The restore's verdict.
    let t5 = Instant::now();
    let resumed_step = resumed.map(|r| r.1);
    let restore_seconds = match (kill_at, resumed) {
        (Some(k), Some((r, _))) => Some(r - k),
        _ => None,
    };
    if why.is_none() {
        if resumed_step == Some(0) || resumed_step < ckpt_before {
            why = Some(format!(
                "resumed_from_step {}, but the trainer had reported checkpoint step {} before the deletion",
                resumed_step.unwrap_or(0),
                ckpt_before.unwrap_or(0)
            ));
        } else if !complete {
            why = Some(format!("the restarted job did not complete: {end_message}"));
        }
    }
    let measurements = json!({
        "deletedPod": victim,
        "deletedAtSeconds": kill_at,
        "newestCheckpointStepBeforeDeletion": ckpt_before,
        "resumed_from_step": resumed_step,
        "restoreSeconds": restore_seconds,
        "jobStatus": if complete { "Complete" } else { "Failed" },
        "jobMessage": end_message,
    });
    let checks: Vec<Check> = restore_seconds
        .and_then(|r| {
            check_max(
                "spec.thresholds.maxRestoreTime",
                th.max_restore_time.map(|d| d.0.as_secs_f64()),
                r,
                "s",
            )
        })
        .into_iter()
        .collect();
    let msg = match &why {
        Some(w) => w.clone(),
        None => format!(
            "deleted pod {victim} after checkpoint step {}; restarted and resumed_from_step {} (not 0), stepping again after {:.1}s",
            ckpt_before.unwrap_or(0),
            resumed_step.unwrap_or(0),
            restore_seconds.unwrap_or(0.0)
        ),
    };
    steps.finish(t5, msg, measurements, checks, why.is_some());

    // 6 + 7. Labels and cost, as locally.
    let lost = match (kill_at, restore_seconds) {
        (Some(k), Some(r)) => {
            let ck_t = log
                .checkpoints
                .values()
                .map(|c| c.0)
                .filter(|c| *c <= k)
                .fold(0.0, f64::max);
            (k - ck_t) + r
        }
        _ => 0.0,
    };
    let usage = Usage {
        nodes: plan.num_nodes(),
        held_seconds: held,
        lost_seconds: lost,
        accepted_samples: final_step.saturating_mul(spec.training.samples_per_step),
    };
    labels_and_cost(
        plan,
        &opts.out_dir,
        "none",
        steps,
        report,
        &usage,
        busbw,
        mbps,
        wait,
    );
    debug_assert_eq!(steps.done.len(), STEPS.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::MINIMAL;

    fn cluster_plan() -> Plan {
        let text = MINIMAL
            .replace(", loopback: {files: 2, fileSize: 1Ki}", "")
            .replace(", loopback: {files: 1, fileSize: 2Ki}", "")
            .replace("location: ckpt", "location: s3://ckpt/run")
            .replace(
                "metadata: {name: t}\n    spec:",
                "metadata: {name: t, namespace: team}\n    spec:",
            );
        Plan::from_yaml(&format!("{text}  queue: {{name: team-q}}\n")).unwrap()
    }

    #[test]
    fn cluster_mode_refuses_local_only_fields_with_their_paths() {
        assert_eq!(validate(&cluster_plan()), vec![]);
        let local = Plan::from_yaml(MINIMAL).unwrap();
        let paths: Vec<String> = validate(&local).into_iter().map(|e| e.path).collect();
        assert_eq!(
            paths,
            [
                "spec.dataset.loopback",
                "spec.model.loopback",
                "spec.checkpoint.location"
            ]
        );
        let mut p = cluster_plan();
        p.spec.train_job["metadata"]["labels"] = json!({QUEUE_LABEL: "other"});
        p.spec.train_job["metadata"]["name"] = json!("x".repeat(58));
        let errs = validate(&p);
        assert!(
            errs.iter()
                .any(|e| e.path == "spec.queue.name" && e.message.contains("\"other\"")),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(
                |e| e.path == "spec.trainJob.metadata.name" && e.message.contains("at most 57")
            ),
            "{errs:?}"
        );
    }

    #[test]
    fn the_two_trainjobs_carry_queue_sources_and_checkpoint_env() {
        let (bench, train) = trainjobs_of(&cluster_plan(), "team");
        assert_eq!(bench["metadata"]["name"], "t-bench");
        assert_eq!(train["metadata"]["name"], "t");
        for j in [&bench, &train] {
            assert_eq!(j["metadata"]["namespace"], "team");
            assert_eq!(j["metadata"]["labels"][QUEUE_LABEL], "team-q");
            assert_eq!(j["metadata"]["labels"][RUN_LABEL], "t");
            assert_eq!(
                j["spec"]["initializer"]["dataset"]["storageUri"],
                "s3://data/sample"
            );
            assert_eq!(
                j["spec"]["initializer"]["model"]["storageUri"],
                "s3://models/base"
            );
        }
        assert_eq!(bench["spec"]["trainer"]["command"][2], "bench");
        assert_eq!(train["spec"]["trainer"]["command"][2], "train-demo");
        let env: BTreeMap<&str, &str> = train["spec"]["trainer"]["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| (e["name"].as_str().unwrap(), e["value"].as_str().unwrap()))
            .collect();
        assert_eq!(env["KUBETRAIN_CHECKPOINT_DIR"], "s3://ckpt/run");
        assert_eq!(env["KUBETRAIN_CHECKPOINT_EVERY"], "5");
        assert_eq!(env["KUBETRAIN_TRAIN_SECONDS"], "2");
        assert!(bench["spec"]["trainer"].get("env").is_none());
    }

    #[test]
    fn conditions_workloads_and_the_trainer_replicated_job() {
        let job = json!({"status": {"conditions": [
            {"type": "Suspended", "status": "False"},
            {"type": "Complete", "status": "True", "reason": "JobSetCompleted", "message": "done"}]}});
        assert_eq!(finished(&job), Some((true, "JobSetCompleted: done".into())));
        assert_eq!(finished(&json!({})), None);
        let wl = json!({
            "metadata": {"name": "trainjob-t-1", "ownerReferences": [{"kind": "TrainJob", "name": "t"}]},
            "status": {
                "admission": {"clusterQueue": "cq", "podSetAssignments": [{"flavors": {"cpu": "gpu", "nvidia.com/gpu": "gpu"}}]},
                "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue cq"},
                               {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"}]}});
        let v = workload_view(&wl, "t").unwrap();
        assert_eq!(v.cluster_queue.as_deref(), Some("cq"));
        assert_eq!(v.flavors, ["gpu"]);
        assert_eq!(v.admitted.unwrap().1, "Admitted");
        assert!(workload_view(&wl, "other").is_none());
        let js = json!({"spec": {"replicatedJobs": [
            {"name": "dataset-initializer", "template": {"metadata": {"labels": {ANCESTOR: "dataset-initializer"}}}},
            {"name": "trainer-x", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}}}]}});
        assert_eq!(trainer_replicated_job(&js), "trainer-x");
        assert_eq!(trainer_replicated_job(&json!({})), "node");
        assert_eq!(
            replicated_job_names(&js),
            ["dataset-initializer", "trainer-x"]
        );
    }

    fn ctx<'a>(client: &Client, plan: &'a Plan) -> Ctx<'a> {
        Ctx {
            client: client.clone(),
            ns: "team".into(),
            plan,
            trainjob_api: Api::namespaced_with(client.clone(), "team", &trainjobs()),
            jobset_api: Api::namespaced_with(client.clone(), "team", &jobsets()),
        }
    }

    #[tokio::test]
    async fn admission_is_awaited_on_watches_and_a_cluster_without_kueue_is_fine() {
        use kubetrain_controller::mock::FakeApiServer;
        let server = FakeApiServer::start();
        let job = |name: &str, suspend: bool| {
            json!({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                   "metadata": {"name": name, "namespace": "team"}, "spec": {"suspend": suspend}})
        };
        server.insert(job("t-bench", false));
        server.insert(json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                             "metadata": {"name": "t-bench", "namespace": "team"}, "spec": {"suspend": false}}));
        server.insert(job("held", true));
        let plan = cluster_plan();
        let ctx = ctx(&server.client(), &plan);
        let t = Instant::now();
        let waited = ctx
            .wait_admitted("t-bench", t, t + std::time::Duration::from_secs(10))
            .await
            .unwrap();
        assert!(waited < 10.0, "{waited}");
        // Suspended (no Kueue to admit it): the wait ends at its deadline with the step's reason.
        let err = ctx
            .wait_admitted(
                "held",
                t,
                Instant::now() + std::time::Duration::from_millis(300),
            )
            .await
            .unwrap_err();
        assert!(
            err.starts_with("TrainJob team/held was not admitted within the wait")
                && err.ends_with("suspended or no JobSet yet (no Kueue Workload found)"),
            "{err}"
        );
        assert_eq!(
            read_workload(&server.client(), "team", "held").await,
            Ok(None)
        );
        // A TrainJob of the same name that this plan's run did not create is the user's: kept.
        let err = ctx
            .remove_leftover("held", Instant::now() + std::time::Duration::from_secs(10))
            .await
            .unwrap_err();
        assert!(
            err.contains(
                "was not created by acceptance plan t (no label kubetrain.io/acceptance-plan=t)"
            ),
            "{err}"
        );
        assert!(
            server
                .get("trainer.kubeflow.org/v1alpha1", "trainjobs", "team", "held")
                .is_some()
        );
        // A leftover of an earlier run is deleted and its absence awaited; a missing one is not an error.
        let mut ours = job("old", false);
        ours["metadata"]["labels"] = json!({RUN_LABEL: "t"});
        server.insert(ours);
        assert_eq!(
            ctx.remove_leftover("old", Instant::now() + std::time::Duration::from_secs(10))
                .await,
            Ok(true)
        );
        assert_eq!(
            ctx.remove_leftover("never", Instant::now() + std::time::Duration::from_secs(10))
                .await,
            Ok(false)
        );
    }

    #[test]
    fn the_training_log_keeps_changes_and_first_checkpoint_reports() {
        let mut log = TrainLog::default();
        let status = |step: u64, ckpt: u64, at: &str| {
            json!({"lastUpdatedTime": at, "metrics": [
                {"name": "step", "value": step.to_string()},
                {"name": "loss", "value": "0.5"},
                {"name": "checkpoint_step", "value": ckpt.to_string()}]})
        };
        log.observe(&status(5, 0, "a"), 1.0, 1);
        log.observe(&status(5, 0, "a"), 1.5, 1);
        log.observe(&status(25, 20, "b"), 2.0, 1);
        log.observe(&status(26, 20, "c"), 3.0, 1);
        log.observe(&Value::Null, 3.5, 1);
        assert_eq!(log.points.len(), 3);
        assert_eq!(log.max_step_before, 26);
        assert_eq!(log.checkpoints.keys().copied().collect::<Vec<_>>(), [20]);
        assert_eq!(log.checkpoints[&20].0, 2.0);
    }
}
