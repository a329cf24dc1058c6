//! The LocalProcess backend: a TrainJob rendered to its JobSet and run on this machine, one process per
//! container, with the env a cluster would give each pod.
//!
//! What differs from a cluster, and why:
//! - images are ignored (a notice says so): the container's command runs on the host; `kubetrain` as
//!   `command[0]` runs [`LocalOptions::kubetrain_exe`] (the CLI passes itself), so the quick start needs no
//!   `kubetrain` on `PATH`;
//! - pod DNS names of the JobSet (`<job>-<rjob>-<i>-<j>.<subdomain>`, with or without a port) become
//!   `127.0.0.1`, and every declared container port gets a free local port, since all pods share this
//!   machine's ports (so two runs never clash);
//! - fieldRef env is resolved from the pod's facts (completion index, names, labels), `$(VAR)` is expanded
//!   like the kubelet does, and `/workspace` maps to `<run dir>/workspace`;
//! - the process env is the pod's env plus a few variables of this process (PATH, HOME, ...).
//!
//! ```no_run
//! # async fn demo() -> Result<(), kubetrain_client::ClientError> {
//! use kubetrain_client::local::{LocalOptions, prepare, execute};
//!
//! let yaml = std::fs::read_to_string("examples/manifests/quickstart.yaml").unwrap();
//! let plan = prepare(&yaml, &kubetrain_jobset::builtin::catalog(), &LocalOptions::default())?;
//! let (tx, mut rx) = tokio::sync::mpsc::channel(kubetrain_client::local::EVENT_BUFFER);
//! let printer = tokio::spawn(async move { while let Some(e) = rx.recv().await { println!("{e:?}") } });
//! let summary = execute(&plan, &tx, std::future::pending()).await;
//! drop(tx);
//! printer.await.unwrap();
//! println!("{}: {}", summary.status, summary.message);
//! # Ok(()) }
//! ```

mod backend;
pub mod capacity;
mod cluster_queue;
pub(crate) mod error;
// The runner's plumbing (process execution, ports, orphan reaping, host and env rewriting, the run
// lock): crate-private; what callers need is re-exported below by name.
pub(crate) mod exec;
pub(crate) mod identity;
pub mod plan;
pub(crate) mod ports;
pub mod queue;
pub(crate) mod reaper;
pub mod record;
pub(crate) mod rewrite;
pub(crate) mod run_lock;
pub mod status;
pub mod tree;

use std::path::PathBuf;

use kubetrain_api::{Document, RuntimeCatalog, TrainJob};
use kubetrain_jobset::plugins::Registry;

pub use backend::LocalProcessBackend;
pub use error::PlanError;
pub use exec::{
    DEADLINE_EXCEEDED_MESSAGE, EVENT_BUFFER, LOG_PIECE_BYTES, LogLine, PodPhase, PodSummary,
    Restart, RestartCause, RestartScope, RunEvent, RunSummary, execute,
};
pub use identity::ProcessIdentity;
pub use plan::{JobPlan, PodPlan, ProcessPlan};
pub use ports::{PortReservation, reserve_port};
pub use reaper::adopt_orphans;

use crate::error::ClientError;

/// Options of a local run.
#[derive(Clone, Debug)]
pub struct LocalOptions {
    /// The run directory (default `<runs tree>/<namespace>/<name>/<run id>`, a new one per run: see [`tree`]).
    pub run_dir: Option<PathBuf>,
    /// The program that runs for `command[0] == "kubetrain"`; `None` looks `kubetrain` up on `PATH`. When
    /// it is named `kubetrain`, its directory also leads the pods' `PATH` (for `sh -c "kubetrain ..."`).
    pub kubetrain_exe: Option<PathBuf>,
    /// Give every declared container port a free local port (default true).
    pub remap_ports: bool,
    /// The run id (letters, digits, `-`, `_`, `.`); default a new one. `kubetrain run --detach` picks it
    /// before the background run starts, so that it can print it.
    pub run_id: Option<String>,
    /// Where the processes start when their container sets no `workingDir`; `None`: the run directory.
    /// `kubetrain run` gives the directory it was started from (or `--workdir`), so that relative paths in
    /// a command (`python3 train.py`) resolve as they would in a shell there.
    pub workdir: Option<PathBuf>,
    /// The plugins the render runs (default [`Registry::builtin`]): register a custom plugin here to run the
    /// TrainJob as an operator built with the same plugin would. What the plugins put into the pod templates
    /// (env, commands, volumes) reaches the processes; of the other objects they build, ConfigMaps and Secrets
    /// answer the pods' env references, as the built-ins' do, and other kinds are not used locally.
    pub plugins: Registry,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            run_dir: None,
            kubetrain_exe: None,
            remap_ports: true,
            run_id: None,
            workdir: None,
            plugins: Registry::builtin(&kubetrain_jobset::RenderOptions::default()),
        }
    }
}

/// Parses the first TrainJob of `yaml`, renders it against `catalog` and plans it as local processes; the
/// run directory is created. Runtimes defined in `yaml` itself are added to the catalog first.
pub fn prepare(
    yaml: &str,
    catalog: &RuntimeCatalog,
    options: &LocalOptions,
) -> Result<JobPlan, ClientError> {
    let docs = kubetrain_api::parse_documents(yaml)
        .map_err(|e| ClientError::InvalidArgument(format!("parsing the TrainJob: {e}")))?;
    let mut catalog = catalog.clone();
    let mut job = None;
    for doc in docs {
        match doc.document {
            Document::TrainJob(j) if job.is_none() => job = Some(*j),
            Document::TrainingRuntime(rt) => catalog.add_namespaced(*rt),
            Document::ClusterTrainingRuntime(rt) => catalog.add_cluster(*rt),
            _ => {}
        }
    }
    let job =
        job.ok_or_else(|| ClientError::InvalidArgument("the input holds no TrainJob".into()))?;
    prepare_job(&job, &catalog, options)
}

/// A run id is one path component: letters, digits, `-`, `_`, `.`, not starting with `.`.
pub(crate) fn is_run_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('.')
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// A run's token: 128 bits from the OS random source, in hex.
fn new_token() -> Result<String, ClientError> {
    use rand_core::RngCore;
    let mut bytes = [0u8; 16];
    rand_core::OsRng.try_fill_bytes(&mut bytes).map_err(|e| {
        ClientError::InvalidArgument(format!(
            "reading the OS random source for the run's token: {e}"
        ))
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The pod sets of the Workload Kueue builds for `job` (the same path as `kubetrain queue` and
/// `kubetrain_kueue::admit`), with every resource's per-pod request; `None` if a quantity of the rendered
/// JobSet cannot be read (validation refuses those first).
fn kueue_pod_sets(
    job: &TrainJob,
    rendered: &kubetrain_jobset::Rendered,
) -> Option<Vec<queue::ledger::PodSetEntry>> {
    let jobset = rendered.objects.first()?.as_jobset()?;
    let workload = kubetrain_kueue::trainjob::workload_from_jobset(job, jobset).ok()?;
    Some(
        workload
            .spec
            .pod_sets
            .iter()
            .filter(|ps| ps.count > 0)
            .map(|ps| queue::ledger::PodSetEntry {
                name: ps.name.clone(),
                count: ps.count,
                requests: kubetrain_kueue::model::pod_requests(&ps.template.spec)
                    .into_iter()
                    .map(|(r, v)| {
                        let text = kubetrain_kueue::quantity::format_count(&r, v);
                        (r, text)
                    })
                    .collect(),
            })
            .collect(),
    )
}

/// The TrainJob's `activeDeadlineSeconds`, else its runtime's `runPolicy` default (KEP-2899), as the operator
/// applies them; validation keeps both positive.
fn active_deadline(
    job: &TrainJob,
    runtime: &kubetrain_api::TrainingRuntimeSpec,
) -> Option<std::time::Duration> {
    job.spec
        .active_deadline_seconds
        .or_else(|| runtime.run_policy.as_ref()?.active_deadline_seconds)
        .and_then(|seconds| u64::try_from(seconds).ok())
        .map(std::time::Duration::from_secs)
}

/// Renders `job` against `catalog` and plans it as local processes; the run directory is created.
pub fn prepare_job(
    job: &TrainJob,
    catalog: &RuntimeCatalog,
    options: &LocalOptions,
) -> Result<JobPlan, ClientError> {
    let (errors, warnings): (Vec<_>, Vec<_>) =
        kubetrain_api::validation::validate_trainjob(job, catalog)
            .into_iter()
            .partition(kubetrain_api::FieldError::is_error);
    if !errors.is_empty() {
        return Err(ClientError::Invalid(
            errors.iter().map(ToString::to_string).collect(),
        ));
    }
    let runtime = kubetrain_jobset::resolve(catalog, job).map_err(PlanError::Render)?;
    // A new MPI SSH key per run, from the OS random source (never from the job's name or the clock).
    let mut keys = kubetrain_jobset::ssh::os_rng().map_err(|e| {
        ClientError::InvalidArgument(format!(
            "reading the OS random source for the MPI SSH key: {e}"
        ))
    })?;
    let rendered = kubetrain_jobset::render_with_registry(
        job,
        runtime,
        &kubetrain_jobset::Observed::default(),
        &options.plugins,
        &mut keys,
    )
    .map_err(PlanError::Render)?;
    let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
    // Both become path components of the runs tree: checked before any directory is made.
    tree::check_label("metadata.namespace:", namespace).map_err(ClientError::InvalidArgument)?;
    tree::check_label("metadata.name:", job.name()).map_err(ClientError::InvalidArgument)?;
    let run_id = match &options.run_id {
        Some(id) if is_run_id(id) => id.clone(),
        Some(id) => {
            return Err(ClientError::InvalidArgument(format!(
                "run id {id:?}: use letters, digits, '-', '_' and '.' (not first)"
            )));
        }
        None => run_lock::new_run_id(),
    };
    // One run of a namespace/name at a time; the lock lives in the job's runs directory, or in the run
    // directory the caller chose.
    let (run_dir, lock_dir) = match &options.run_dir {
        Some(dir) => (dir.clone(), dir.clone()),
        None => {
            let root = tree::ensure_root().map_err(|source| PlanError::RunDir {
                dir: tree::runs_root(),
                source,
            })?;
            let job_dir = root.join(namespace).join(job.name());
            (job_dir.join(&run_id), job_dir)
        }
    };
    let lock = run_lock::RunLock::acquire(&lock_dir, namespace, job.name(), &run_dir)?;
    plan::prepare_run_dir(&run_dir)?;
    let mut plan = plan::plan(
        &rendered.objects,
        &plan::PlanOptions {
            run_dir,
            kubetrain_exe: options.kubetrain_exe.clone(),
            remap_ports: options.remap_ports,
            workdir: options.workdir.clone(),
        },
    )?;
    plan.run_id = run_id;
    plan.token = new_token()?;
    for process in plan
        .replicated_jobs
        .iter_mut()
        .flat_map(|r| r.pods.iter_mut())
        .flat_map(|p| p.init.iter_mut().chain(p.containers.iter_mut()))
    {
        process
            .env
            .push((record::RUN_TOKEN_ENV.to_owned(), plan.token.clone()));
    }
    plan.lock = Some(lock);
    plan.kueue_pod_sets = kueue_pod_sets(job, &rendered);
    plan.runtime = job.spec.runtime_ref.name.clone();
    plan.active_deadline = active_deadline(job, runtime);
    plan.notices
        .extend(warnings.iter().map(|w| format!("warning: {w}")));
    Ok(plan)
}
