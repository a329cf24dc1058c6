//! The seven steps on a Kubernetes cluster, through the API server and the kubetrain operator: the
//! TrainJob is created (in the plan's Kueue LocalQueue), its JobSet's initializer Jobs stage the data,
//! the job's own pods report the benchmark and the training through `TrainJob.status.trainerStatus`
//! (the operator's status server, [`crate::metrics`] names the metrics), a trainer pod is deleted through
//! the API and the restarted trainer must report that it resumed from the checkpoint.
//!
//! Two TrainJobs run, as in local mode: `<name>-bench` (the plan's TrainJob with the trainer command
//! replaced by `kubetrain collective bench`: steps 1-3) and `<name>` (the production command with the
//! checkpoint env: steps 4-5). Every wait is a watch, bounded by the plan's timeouts.
//!
//! [`run`] drives the shared step runner over the cluster backend; its submodules hold the API side
//! (`api`: watches, create, admission, guarded deletes), pure reads of the objects (`view`), and the
//! steps' measurements (`queue`, `staging`, `training`).

mod api;
mod queue;
mod staging;
mod training;
mod view;

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::time::Instant;

use kube::Client;
use kube::api::DeleteParams;
use serde_json::{Value, json};

use crate::error::{Error, StepFailure};
use crate::metrics::{self, TrainerMetrics};
use crate::plan::{Plan, PlanFieldError, format_duration};
use crate::report::Report;
use crate::runner::{self, Backend, Benched, Queued, Staged, Trained};
use crate::steps::{self, Steps};
use crate::trainjob::{bench_command, training_env};
use api::{Ctx, as_value, trainer_status};
use view::finished;

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
) -> Result<(Client, String, String), Error> {
    let config = if kubeconfig.is_none() && context.is_none() {
        kube::Config::infer()
            .await
            .map_err(Error::NoClusterConfig)?
    } else {
        from_kubeconfig(kubeconfig, context).await?
    };
    let namespace = config.default_namespace.clone();
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(|error| Error::Client {
        url: url.clone(),
        error,
    })?;
    Ok((client, namespace, url))
}

/// The client configuration of `context` (else the current one) in `kubeconfig` (else the default).
async fn from_kubeconfig(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<kube::Config, Error> {
    let (read, source_name) = match kubeconfig {
        Some(p) => (
            kube::config::Kubeconfig::read_from(p),
            p.display().to_string(),
        ),
        None => (
            kube::config::Kubeconfig::read(),
            "KUBECONFIG / ~/.kube/config".into(),
        ),
    };
    let kc = read.map_err(|error| Error::ReadKubeconfig {
        source_name: source_name.clone(),
        error,
    })?;
    if let Some(c) = context
        && !kc.contexts.iter().any(|x| x.name == c)
    {
        let names: Vec<&str> = kc.contexts.iter().map(|x| x.name.as_str()).collect();
        return Err(Error::NoContext {
            source_name,
            context: c.into(),
            available: names.join(", "),
        });
    }
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    kube::Config::from_custom_kubeconfig(kc, &options)
        .await
        .map_err(|error| Error::Kubeconfig { source_name, error })
}

/// What the cluster mode refuses besides the plan's own rules (field paths as [`Plan::validate`]).
pub fn validate(plan: &Plan) -> Vec<PlanFieldError> {
    let mut errs = Vec::new();
    let mut err = |path: &str, message: &str| {
        errs.push(PlanFieldError {
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

/// The TrainJobs the run creates: `(bench, training)`, in `namespace`, in the plan's queue, with the
/// initializers pointed at the plan's sources and, for training, the checkpoint env.
pub(crate) fn trainjobs_of(plan: &Plan, namespace: &str) -> (Value, Value) {
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

/// The namespace of the run: the TrainJob's, else `default`.
fn namespace_of(plan: &Plan, default: &str) -> String {
    plan.spec
        .train_job
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or(default)
        .to_string()
}

fn name_of(job: &Value) -> String {
    job["metadata"]["name"].as_str().unwrap_or("").to_string()
}

/// Runs the seven steps on the cluster; `progress` gets one line per step. Ctrl-C or SIGTERM stops the
/// run and deletes the TrainJobs it created (`interrupted` in the report).
pub async fn run(
    plan: &Plan,
    opts: &ClusterRun,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Report {
    let started = Instant::now();
    let mut steps = Steps::new(progress);
    let ns = namespace_of(plan, &opts.namespace);
    let versions = json!({"server": opts.server, "namespace": ns});
    let mut report = steps::new_report(plan, "cluster", versions);
    let mut backend = ClusterBackend::new(plan, opts, &ns);
    let interrupted = {
        let body = runner::run_steps(&mut backend, plan, &mut steps, &mut report);
        tokio::select! {
            () = body => false,
            () = interrupt() => true,
        }
    };
    if interrupted {
        report.interrupted = true;
        for name in [&backend.bench, &backend.job] {
            let _ = backend
                .ctx
                .delete_ours(name, DeleteParams::background())
                .await;
        }
        steps.skip_rest("interrupted (Ctrl-C or SIGTERM): the TrainJobs were deleted");
    }
    steps::conclude(report, steps.done, started)
}

/// Returns on SIGINT or SIGTERM (never when they cannot be listened to).
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

/// The cluster backend: the run's two TrainJobs through the API server.
struct ClusterBackend<'a> {
    ctx: Ctx<'a>,
    out_dir: PathBuf,
    bench_job: Value,
    train_job: Value,
    /// The TrainJobs' names: `<name>-bench` and `<name>`.
    bench: String,
    job: String,
    /// When the bench TrainJob was admitted.
    admitted_at: Instant,
}

impl<'a> ClusterBackend<'a> {
    fn new(plan: &'a Plan, opts: &ClusterRun, ns: &str) -> Self {
        let (bench_job, train_job) = trainjobs_of(plan, ns);
        ClusterBackend {
            ctx: Ctx::new(&opts.client, ns, plan),
            out_dir: opts.out_dir.clone(),
            bench: name_of(&bench_job),
            job: name_of(&train_job),
            bench_job,
            train_job,
            admitted_at: Instant::now(),
        }
    }

    /// The bench TrainJob's end and its trainerStatus.
    async fn bench_end(&self) -> Result<((bool, String), Value), StepFailure> {
        let step_timeout = self.ctx.plan.spec.cluster.step_timeout.0;
        let deadline = Instant::now() + step_timeout;
        let ended = self
            .ctx
            .watch_job(&self.bench, deadline, |o| {
                finished(&as_value(o)).map(|f| (f, trainer_status(o)))
            })
            .await;
        ended.map_err(|to| {
            StepFailure(format!(
                "step 3 (benchmark): TrainJob {}/{} did not finish within spec.cluster.stepTimeout ({}){}",
                self.ctx.ns,
                self.bench,
                format_duration(step_timeout),
                to.suffix("; ")
            ))
        })
    }
}

impl Backend for ClusterBackend<'_> {
    fn default_queue(&self) -> &'static str {
        "none"
    }

    fn out_dir(&self) -> &Path {
        &self.out_dir
    }

    async fn queue(&mut self, steps: &mut Steps<'_>) -> Result<Queued, StepFailure> {
        queue::prepare(&self.ctx, &[&self.bench, &self.job], steps).await?;
        let queued = queue::submit(&self.ctx, &self.bench_job, &self.bench).await;
        self.admitted_at = Instant::now();
        queued
    }

    async fn stage(&mut self) -> Result<Staged, StepFailure> {
        staging::stage(&self.ctx, &self.bench, self.admitted_at).await
    }

    async fn benchmark(&mut self) -> Result<Benched, StepFailure> {
        let ((complete, end_message), status) = self.bench_end().await?;
        let mut extra = serde_json::Map::new();
        extra.insert("trainJob".into(), json!(self.bench));
        Ok(Benched {
            rows: metrics::bench_rows(&TrainerMetrics::from_trainer_status(&status)),
            complete,
            end_message,
            last_stderr: None,
            extra,
        })
    }

    fn bench_failure(&self, b: &Benched, wrong: u64) -> String {
        let (ns, bench) = (&self.ctx.ns, &self.bench);
        if !b.complete {
            format!("TrainJob {ns}/{bench} failed: {}", b.end_message)
        } else if b.rows.is_empty() {
            format!(
                "the benchmark pods of {ns}/{bench} reported no {}<bytes> metrics in trainerStatus: the trainer must be `kubetrain collective bench` with the status server env (the TrainJobStatus feature)",
                metrics::BUSBW_PREFIX
            )
        } else {
            format!("all_reduce found {wrong} wrong elements")
        }
    }

    async fn train(&mut self, steps: &mut Steps<'_>) -> Result<Trained, StepFailure> {
        training::train(
            &self.ctx,
            &self.train_job,
            &self.job,
            self.admitted_at,
            steps,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::api::read_workload;
    use crate::plan::tests::MINIMAL;
    use std::collections::BTreeMap;

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

    #[tokio::test]
    async fn admission_is_awaited_on_watches_and_a_cluster_without_kueue_is_fine() {
        use kubetrain_test_support::FakeApiServer;
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
        let client = server.client();
        let ctx = Ctx::new(&client, "team", &plan);
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
}
