//! `kubetrain submit | get | list | logs | wait | delete | runtimes`: TrainJobs on a cluster through the
//! SDK's Kubernetes backend (kubeconfig or in-cluster config, `--kubeconfig`, `--context`), printed like
//! kubectl; with `--local` (or `--context local`) the same commands work on the runs of `kubetrain run`
//! on this machine, from their records ([`kubetrain_client::local::record`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use futures_util::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kubetrain_api::Document;
use kubetrain_client::backend::Backend;
use kubetrain_client::local::record::{self, RunRecord};
use kubetrain_client::local::tree;
use kubetrain_client::types::{Step, TrainerProgress};
use kubetrain_client::{
    JobStatus, KubernetesBackend, KubernetesBackendConfig, LogOptions, TrainJobView, TrainerClient,
};
use serde::Serialize;

use super::input::Table;

// `get | list | logs optimizationjob ...` (a child module: it shares the output helpers here).
#[path = "optimization_jobs.rs"]
mod optimization_jobs;

/// The cluster subcommands (flattened into the top level).
#[derive(Debug, Subcommand)]
pub(crate) enum JobsCommand {
    /// Create the TrainJob of a file on the cluster.
    Submit(SubmitArgs),
    /// Show one TrainJob and its steps (pods).
    Get(GetArgs),
    /// List TrainJobs.
    List(ListArgs),
    /// Print (or follow) the log of a step of a TrainJob.
    Logs(LogsArgs),
    /// Wait until a TrainJob reaches a status.
    Wait(WaitArgs),
    /// Delete a TrainJob (its JobSet and pods are garbage-collected).
    Delete(DeleteArgs),
    /// List the training runtimes of the cluster.
    Runtimes(RuntimesArgs),
}

/// Where to connect.
#[derive(Debug, Args)]
pub(crate) struct Target {
    /// Namespace (default: the kubeconfig context's; `default` with --local).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// The kubeconfig file (default: `KUBECONFIG`, else `~/.kube/config`, else the in-cluster config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: the current context); `local` means --local.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// The runs of `kubetrain run` on this machine instead of a cluster.
    #[arg(long)]
    local: bool,
}

impl Target {
    fn is_local(&self) -> bool {
        self.local || self.context.as_deref() == Some(LOCAL_CONTEXT)
    }

    fn local_namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("default")
    }
}

/// The context name that means this machine's runs.
const LOCAL_CONTEXT: &str = "local";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// A table as kubectl prints one: AGE, not timestamps.
    Table,
    /// The table with more columns: the CREATED timestamp, every step's DEVICE and COUNT as the SDK reports
    /// them.
    Wide,
    /// The SDK's view as YAML, every timestamp as recorded.
    Yaml,
    /// The SDK's view as JSON, every timestamp as recorded.
    Json,
}

impl Output {
    /// Whether this is one of the tables (`table`, `wide`).
    fn is_table(self) -> bool {
        matches!(self, Output::Table | Output::Wide)
    }
}

#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// TrainJobs (YAML or JSON); `-` reads stdin, a directory its .yaml, .yml and .json files;
    /// repeatable. Every TrainJob is created, in order (with --local: exactly one, run in the background).
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        value_name = "FILE|DIR"
    )]
    files: Vec<PathBuf>,
    /// Sets `spec.ttlSecondsAfterFinished` on every TrainJob (KEP-2899): the operator deletes it, its
    /// JobSet and pods this many seconds after it finished (0: at once). Runs of --local keep their records.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(i32).range(0..))]
    ttl_seconds_after_finished: Option<i32>,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    /// TrainJob name; or a kind, `optimizationjob` (`oj`) or `trainjob`, then the name.
    name: String,
    /// The name, after a kind (`kubetrain get optimizationjob sweep`).
    #[arg(value_name = "NAME")]
    kind_name: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// What to list: `trainjobs` (the default) or `optimizationjobs` (`oj`).
    #[arg(value_name = "KIND")]
    kind: Option<String>,
    /// Only TrainJobs of this runtime.
    #[arg(long)]
    runtime: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    /// TrainJob name; or a kind, `optimizationjob` (`oj`) or `trainjob`, then the name.
    name: String,
    /// The name, after a kind (`kubetrain logs optimizationjob sweep`).
    #[arg(value_name = "NAME")]
    kind_name: Option<String>,
    /// With an OptimizationJob: the trial's index (default: the best trial, else the first).
    #[arg(long, value_name = "INDEX")]
    trial: Option<u32>,
    /// The step: node-0, node-1, ..., dataset-initializer, model-initializer, launcher.
    #[arg(long, default_value = "node-0")]
    step: String,
    /// Follow the log until the pod ends.
    #[arg(short = 'f', long)]
    follow: bool,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    /// TrainJob name.
    name: String,
    /// Statuses to wait for (Created, Running, Complete, Failed); repeatable.
    #[arg(long = "for", default_value = "Complete")]
    statuses: Vec<String>,
    /// How long to wait (`600s`, `10m`, `1h`; a bare number is seconds).
    #[arg(long, default_value_t = 600, value_name = "DURATION", value_parser = super::input::parse_seconds)]
    timeout: u64,
    /// Time between polls (`2s`; a bare number is seconds).
    #[arg(long, default_value_t = 2, value_name = "DURATION", value_parser = super::input::parse_seconds)]
    interval: u64,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub(crate) struct DeleteArgs {
    /// TrainJob name.
    name: String,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub(crate) struct RuntimesArgs {
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
    #[command(flatten)]
    target: Target,
}

/// The API server of the last client made, for the one-line "cannot reach" error.
static SERVER: std::sync::OnceLock<String> = std::sync::OnceLock::new();

async fn client(target: &Target) -> Result<TrainerClient<KubernetesBackend>> {
    let config = KubernetesBackendConfig {
        namespace: target.namespace.clone(),
        config_file: target.kubeconfig.clone(),
        context: target.context.clone(),
    };
    let backend = KubernetesBackend::from_config(&config)
        .await
        .map_err(|e| match e {
            kubetrain_client::ClientError::Config(text) => anyhow::anyhow!(
                "cannot use the cluster configuration: {} (or use --local for the runs on this machine)",
                clean_config_error(
                    &text,
                    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
                )
            ),
            e => anyhow::Error::new(e)
                .context("connecting to the cluster (or use --local for the runs on this machine)"),
        })?;
    if let Some(url) = backend.cluster_url() {
        let _ = SERVER.set(url.trim_end_matches('/').to_owned());
    }
    Ok(TrainerClient::new(backend))
}

/// Why no cluster is configured, when none is: no `--kubeconfig` or `--context`, no kubeconfig file
/// (`KUBECONFIG`, else `~/.kube/config`) and not in a pod. A configuration that exists but fails is not
/// "none": connecting to it reports why.
fn no_cluster(target: &Target) -> Option<String> {
    if target.kubeconfig.is_some() || target.context.is_some() {
        return None;
    }
    no_cluster_reason(
        std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        std::env::var_os("KUBECONFIG").as_deref(),
        std::env::var_os("HOME").map(PathBuf::from),
        &|path: &std::path::Path| path.exists(),
    )
}

/// [`no_cluster`] from the environment: whether this is a pod, `KUBECONFIG`, the home directory and which
/// files exist.
fn no_cluster_reason(
    in_pod: bool,
    kubeconfig: Option<&std::ffi::OsStr>,
    home: Option<PathBuf>,
    exists: &dyn Fn(&std::path::Path) -> bool,
) -> Option<String> {
    if in_pod {
        return None;
    }
    // As kube reads KUBECONFIG: a list of paths, empty entries ignored, empty as unset.
    let listed: Vec<PathBuf> = kubeconfig
        .map(|value| {
            std::env::split_paths(value)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    if !listed.is_empty() {
        if listed.iter().any(|p| exists(p)) {
            return None;
        }
        let names: Vec<String> = listed.iter().map(|p| p.display().to_string()).collect();
        return Some(match names.as_slice() {
            [one] => format!("KUBECONFIG names {one}, which does not exist"),
            _ => format!("none of the KUBECONFIG files exists ({})", names.join(", ")),
        });
    }
    let Some(home) = home else {
        return Some("neither KUBECONFIG nor HOME is set".to_owned());
    };
    let default = home.join(".kube").join("config");
    (!exists(&default)).then(|| {
        format!(
            "{} does not exist and KUBECONFIG is not set",
            default.display()
        )
    })
}

/// kube's message for a configuration it could not load, for people: without the in-cluster attempt when
/// this is no pod (its failure then says nothing), and with paths quoted once, not `'"/path"'`.
fn clean_config_error(text: &str, in_pod: bool) -> String {
    let mut text = text.to_owned();
    if !in_pod
        && let Some(start) = text.find("kubeconfig: (")
        && text.ends_with(')')
    {
        text = format!(
            "kubeconfig: {}",
            &text[start + "kubeconfig: (".len()..text.len() - 1]
        );
    }
    text.replace("'\"", "").replace("\"'", "")
}

/// `cannot reach https://127.0.0.1:6443: connection refused` for an error that failed to reach the API
/// server, instead of the client's chain of causes that repeats the address; `None` for any other error.
fn unreachable(error: &anyhow::Error, server: &str) -> Option<String> {
    let mut reason = None;
    for cause in error.chain() {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            reason = Some(match io.kind() {
                ConnectionRefused => "connection refused".to_owned(),
                TimedOut => "connection timed out".to_owned(),
                ConnectionReset => "connection reset".to_owned(),
                HostUnreachable => "host unreachable".to_owned(),
                NetworkUnreachable => "network unreachable".to_owned(),
                _ => {
                    let text = io.to_string();
                    text.split(" (os error")
                        .next()
                        .unwrap_or(&text)
                        .to_lowercase()
                }
            });
            break;
        }
        let text = cause.to_string();
        if text.contains("dns error") || text.contains("failed to lookup address") {
            reason = Some("the host name does not resolve".to_owned());
        }
    }
    reason.map(|r| format!("cannot reach {server}: {r}"))
}

fn print_structured<T: Serialize>(value: &T, output: Output) -> Result<()> {
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(value)?),
        _ => print!(
            "{}",
            serde_saphyr::to_string(value).context("writing YAML")?
        ),
    }
    Ok(())
}

/// The TrainJob columns: `NAME STATUS RUNTIME NODES AGE`, then `CREATED` with `-o wide`.
fn job_headers(wide: bool) -> Vec<&'static str> {
    let mut headers = vec!["NAME", "STATUS", "RUNTIME", "NODES", "AGE"];
    if wide {
        headers.push("CREATED");
    }
    headers
}

/// A TrainJob's cells under [`job_headers`], its age counted to `now`.
fn job_row(j: &TrainJobView, wide: bool, now: Timestamp) -> Vec<String> {
    let created = j.creation_timestamp.as_deref();
    let mut row = vec![
        j.name.clone(),
        j.status.to_string(),
        j.runtime.clone(),
        j.num_nodes.to_string(),
        age(created, now),
    ];
    if wide {
        row.push(created.map_or_else(|| "<unknown>".to_owned(), to_the_second));
    }
    row
}

/// The time since `timestamp` (RFC 3339) as kubectl's AGE column shows it; `<unknown>` without one, as
/// kubectl shows a missing timestamp.
fn age(timestamp: Option<&str>, now: Timestamp) -> String {
    match timestamp.and_then(|t| t.parse::<Timestamp>().ok()) {
        Some(then) => kubectl_duration(now.as_nanosecond() - then.as_nanosecond()),
        None => "<unknown>".to_owned(),
    }
}

/// An RFC 3339 timestamp to the second (`2026-12-01T14:25:30Z`), as kubectl prints them; text that is no
/// timestamp as it is.
fn to_the_second(timestamp: &str) -> String {
    timestamp
        .parse::<Timestamp>()
        .ok()
        .and_then(|t| Timestamp::from_second(t.as_second()).ok())
        .map_or_else(|| timestamp.to_owned(), |t| t.to_string())
}

/// A duration of `nanos` nanoseconds as kubectl writes ages (`HumanDuration` of
/// k8s.io/apimachinery/pkg/util/duration): `45s` below 2 minutes, `3m12s` below 10, `125m` below 3 hours,
/// `3h5m` below 8, `30h` below 2 days, `3d4h` below 8, `40d` below 2 years, `3y120d` below 8, `9y`;
/// `0s` up to a second in the future (clocks differ a little), `<invalid>` beyond.
fn kubectl_duration(nanos: i128) -> String {
    // Go's int(d.Seconds()): truncated toward zero.
    let seconds = nanos / 1_000_000_000;
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{}d", hours / 24),
            h => format!("{}d{h}h", hours / 24),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        return match (hours / 24) % 365 {
            0 => format!("{}y", hours / 24 / 365),
            d => format!("{}y{d}d", hours / 24 / 365),
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The steps of a TrainJob: `STEP STATUS POD`, with `DEVICE COUNT` when a step has a GPU. A step without one
/// reads `cpu` there (the SDK says `Unknown` for a container without limits: it runs on CPUs), its count
/// the CPU limit or `-`. `-o wide` always has both columns, with the SDK's values as they are.
fn steps_table(steps: &[Step], wide: bool) -> Table {
    const GPU: &str = "gpu";
    let devices = wide || steps.iter().any(|s| s.device == GPU);
    let mut headers = vec!["STEP", "STATUS", "POD"];
    if devices {
        headers.extend(["DEVICE", "COUNT"]);
    }
    let mut table = Table::new(&headers);
    for s in steps {
        let mut row = vec![s.name.as_str(), s.status.as_str(), s.pod_name.as_str()];
        if wide || s.device == GPU {
            row.extend([s.device.as_str(), s.device_count.as_str()]);
        } else if devices {
            let count = if s.device == "cpu" {
                s.device_count.as_str()
            } else {
                "-"
            };
            row.extend(["cpu", count]);
        }
        table.row(&row);
    }
    table
}

/// The `progress: ...` line of `kubetrain get`, at most `width` characters (metrics that do not fit are
/// left out, marked `…`):
///
/// - going: `progress: 40% done, about 10m left (reported 12s ago); loss=0.25 step=40`;
/// - finished: `progress: Complete (last report 3m ago: 91% done); loss=0.25 step=40`: the training code's
///   reports are throttled, so its last one may predate the end; the job's own status is what holds.
fn progress_line(p: &TrainerProgress, status: JobStatus, now: Timestamp, width: usize) -> String {
    let when = p
        .last_updated_time
        .as_deref()
        .map(|t| match t.parse::<Timestamp>() {
            Ok(_) => format!("{} ago", age(Some(t), now)),
            Err(_) => format!("at {t}"),
        });
    let percent = p.progress_percentage.map(|n| format!("{n}% done"));
    let head = if status.is_finished() {
        let report = match (when, percent) {
            (Some(w), Some(p)) => format!("last report {w}: {p}"),
            (Some(w), None) => format!("last report {w}"),
            (None, Some(p)) => format!("last report: {p}"),
            (None, None) => "last report".to_owned(),
        };
        format!("{status} ({report})")
    } else {
        let mut parts: Vec<String> = percent.into_iter().collect();
        if let Some(s) = p.estimated_remaining_seconds {
            parts.push(format!(
                "about {} left",
                kubectl_duration(i128::from(s) * 1_000_000_000)
            ));
        }
        let mut head = parts.join(", ");
        if let Some(w) = when {
            if !head.is_empty() {
                head.push(' ');
            }
            head.push_str(&format!("(reported {w})"));
        }
        head
    };
    let metrics: Vec<String> = p
        .metrics
        .iter()
        .map(|m| format!("{}={}", m.name, m.value))
        .collect();
    let (head, separator) = if head.is_empty() {
        ("progress:".to_owned(), " ")
    } else {
        (format!("progress: {head}"), "; ")
    };
    super::input::fit_line(&head, separator, &metrics, width)
}

/// Reads a kind given before the name (`get trainjob NAME`, `list optimizationjobs`); returns the command with
/// a TrainJob kind dropped, and whether it is about OptimizationJobs.
fn with_kind(mut command: JobsCommand) -> Result<(JobsCommand, bool)> {
    let unknown = |kind: &str| {
        anyhow::anyhow!(
            "unknown kind {kind:?}: use trainjob or optimizationjob (oj), e.g. `kubetrain get optimizationjob NAME`"
        )
    };
    let optimization = match &mut command {
        JobsCommand::Get(GetArgs {
            name, kind_name, ..
        })
        | JobsCommand::Logs(LogsArgs {
            name, kind_name, ..
        }) => match kind_name.take() {
            None => false,
            Some(real) if optimization_jobs::is_trainjob_kind(name) => {
                *name = real;
                false
            }
            Some(real) if optimization_jobs::is_kind(name) => {
                *name = real;
                true
            }
            Some(_) => return Err(unknown(name)),
        },
        JobsCommand::List(a) => match a.kind.take() {
            None => false,
            Some(kind) if optimization_jobs::is_trainjob_kind(&kind) => false,
            Some(kind) if optimization_jobs::is_kind(&kind) => true,
            Some(kind) => return Err(unknown(&kind)),
        },
        _ => false,
    };
    if let JobsCommand::Logs(a) = &command
        && a.trial.is_some()
        && !optimization
    {
        bail!(
            "--trial goes with an OptimizationJob: `kubetrain logs optimizationjob NAME --trial N`"
        );
    }
    Ok((command, optimization))
}

/// `get | list | logs` of OptimizationJobs: on a cluster only.
fn run_optimization(command: JobsCommand) -> Result<ExitCode> {
    if command.target().is_local() {
        bail!(
            "OptimizationJobs run on a cluster; a search on this machine is `kubetrain optimize --local`, \
             whose report is in its --out directory"
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime
        .block_on(async {
            let client = client(command.target()).await?;
            match command {
                JobsCommand::Get(a) => optimization_jobs::get(&client, &a.name, a.output).await,
                JobsCommand::List(a) => optimization_jobs::list(&client, a.output).await,
                JobsCommand::Logs(a) => {
                    let options = LogOptions {
                        step: a.step,
                        follow: a.follow,
                    };
                    optimization_jobs::logs(&client, &a.name, a.trial, &options).await
                }
                _ => Ok(()),
            }
        })
        .map_err(
            |error| match SERVER.get().and_then(|server| unreachable(&error, server)) {
                Some(line) => anyhow::anyhow!(line),
                None => error,
            },
        )?;
    Ok(ExitCode::SUCCESS)
}

/// Runs one of the cluster subcommands.
pub(crate) fn run(command: JobsCommand) -> Result<ExitCode> {
    let (command, optimization) = with_kind(command)?;
    if optimization {
        return run_optimization(command);
    }
    if command.target().is_local() {
        return run_local(command);
    }
    if let Some(reason) = no_cluster(command.target()) {
        // What can be shown without a cluster is shown, as with --local; what would act on one is refused.
        let shown = match &command {
            JobsCommand::Get(_) | JobsCommand::List(_) => {
                "the runs of `kubetrain run` on this machine"
            }
            JobsCommand::Runtimes(_) => "the built-in runtimes `kubetrain run` uses",
            _ => bail!(
                "no cluster configured: {reason}; give --kubeconfig, or use --local for the runs of \
                 `kubetrain run` on this machine"
            ),
        };
        eprintln!("note: no cluster configured: {reason}; these are {shown} (as with --local)");
        return run_local(command);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(command)).map_err(|error| {
        match SERVER.get().and_then(|server| unreachable(&error, server)) {
            Some(line) => anyhow::anyhow!(line),
            None => error,
        }
    })
}

impl JobsCommand {
    fn target(&self) -> &Target {
        match self {
            JobsCommand::Submit(a) => &a.target,
            JobsCommand::Get(a) => &a.target,
            JobsCommand::List(a) => &a.target,
            JobsCommand::Logs(a) => &a.target,
            JobsCommand::Wait(a) => &a.target,
            JobsCommand::Delete(a) => &a.target,
            JobsCommand::Runtimes(a) => &a.target,
        }
    }
}

/// A TrainJob as `get` prints it: the job row, its steps, message and progress; for a local run, its run id
/// and directory too (also in YAML and JSON, see [`LocalJob`]).
fn print_job(job: &TrainJobView, output: Output, local: Option<&RunRecord>) -> Result<()> {
    if !output.is_table() {
        return match local {
            Some(run) => print_structured(&LocalJob::of(run, job.clone()), output),
            None => print_structured(job, output),
        };
    }
    let wide = output == Output::Wide;
    let now = Timestamp::now();
    let mut table = Table::new(&job_headers(wide));
    table.row(&job_row(job, wide, now));
    print!("{}", table.render());
    if !job.steps.is_empty() {
        print!("\n{}", steps_table(&job.steps, wide).render());
    }
    if let Some(m) = &job.message {
        println!("\nmessage: {m}");
    }
    if let Some(p) = &job.trainer_status {
        println!(
            "\n{}",
            progress_line(p, job.status, now, super::input::output_width())
        );
    }
    if let Some(run) = local {
        println!("\nrun {} in {}", run.run_id, run.run_dir.display());
    }
    Ok(())
}

/// A local run as `get --local` and `list --local` write it in YAML and JSON: the SDK's view of the TrainJob,
/// then where the run is (`namespace`, `run_id`, `run_dir`) and when it ended.
#[derive(Debug, Serialize)]
struct LocalJob<'a> {
    #[serde(flatten)]
    job: TrainJobView,
    namespace: &'a str,
    run_id: &'a str,
    run_dir: &'a std::path::Path,
    /// RFC 3339, as recorded; absent while the run goes on.
    #[serde(skip_serializing_if = "Option::is_none")]
    finished_timestamp: Option<&'a str>,
}

impl<'a> LocalJob<'a> {
    fn of(run: &'a RunRecord, job: TrainJobView) -> Self {
        LocalJob {
            job,
            namespace: &run.namespace,
            run_id: &run.run_id,
            run_dir: &run.run_dir,
            finished_timestamp: run.finished.as_deref(),
        }
    }
}

/// The latest run of `name` on this machine.
fn local_run(target: &Target, name: &str) -> Result<RunRecord> {
    let namespace = target.local_namespace();
    // A name or namespace that is no DNS label names no run, and must not become a path.
    tree::job_dir(&record::runs_root(), namespace, name).map_err(anyhow::Error::msg)?;
    let root = tree::existing_root()?.unwrap_or_else(record::runs_root);
    record::latest(&root, namespace, name).with_context(|| {
        format!(
            "TrainJob {namespace}/{name} has no run on this machine (runs of `kubetrain run` are kept under {}; \
             `kubetrain list --local` lists them)",
            record::runs_root().display()
        )
    })
}

/// `kubetrain delete NAME --local`: stops and removes the runs of `namespace/name` in this user's runs tree,
/// and nothing else. A run is a run-id directory of this user; a directory or record of another user (or a
/// symbolic link) is left where it is and named, and the command then fails.
fn delete_local(namespace: &str, name: &str) -> Result<ExitCode> {
    let Some(root) = tree::existing_root()? else {
        bail!("TrainJob {namespace}/{name} has no run on this machine");
    };
    let job_dir = tree::job_dir(&root, namespace, name).map_err(anyhow::Error::msg)?;
    let mut runs = Vec::new();
    let mut refused = Vec::new();
    for entry in std::fs::read_dir(&job_dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_name() == ".lock" {
            continue;
        }
        match record::read(&path) {
            Ok(run) => runs.push(run),
            // A run that ended before its record was written: a run-id directory of ours, in our private tree.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && tree::check_owned(&path).is_ok()
                    && entry.file_type().is_ok_and(|t| t.is_dir()) =>
            {
                runs.push(RunRecord {
                    run_dir: path,
                    status: kubetrain_client::JobStatus::Failed.as_str().to_owned(),
                    ..RunRecord::default()
                })
            }
            Err(e) => refused.push(format!("{}: {e}", path.display())),
        }
    }
    if runs.is_empty() && refused.is_empty() {
        bail!("TrainJob {namespace}/{name} has no run on this machine");
    }
    for run in &runs {
        run.stop(Duration::from_secs(30));
        std::fs::remove_dir_all(&run.run_dir)
            .with_context(|| format!("removing {}", run.run_dir.display()))?;
    }
    if !refused.is_empty() {
        bail!(
            "TrainJob {namespace}/{name}: {} run(s) removed; left in place, not yours:\n  {}",
            runs.len(),
            refused.join("\n  ")
        );
    }
    let lock = job_dir.join(".lock");
    if tree::check_owned(&lock).is_ok() {
        let _ = std::fs::remove_file(&lock);
    }
    // Only if empty: anything else in it was not made by a run.
    let _ = std::fs::remove_dir(&job_dir);
    println!("trainjob.trainer.kubeflow.org/{name} deleted");
    Ok(ExitCode::SUCCESS)
}

/// The subcommands on this machine's runs.
fn run_local(command: JobsCommand) -> Result<ExitCode> {
    match command {
        JobsCommand::Submit(a) => return local_submit(&a),
        JobsCommand::Get(a) => {
            let run = local_run(&a.target, &a.name)?;
            print_job(&run.view(), a.output, Some(&run))?;
        }
        JobsCommand::List(a) => local_list(&a)?,
        JobsCommand::Logs(a) => {
            let run = local_run(&a.target, &a.name)?;
            let pod = run.pod_of_step(&a.step).with_context(|| {
                let steps: Vec<&str> = run.pods.iter().map(|p| p.step.as_str()).collect();
                format!(
                    "TrainJob {:?} has no step {:?} (steps: {})",
                    a.name,
                    a.step,
                    steps.join(", ")
                )
            })?;
            follow_log(&run, &pod.name, a.follow)?;
        }
        JobsCommand::Wait(a) => local_wait(&a)?,
        JobsCommand::Delete(a) => {
            let namespace = a.target.local_namespace().to_owned();
            return delete_local(&namespace, &a.name);
        }
        JobsCommand::Runtimes(a) => print_runtimes(&local_runtimes(), a.output)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `jobs submit --local`: a background run (`kubetrain run --detach`).
fn local_submit(a: &SubmitArgs) -> Result<ExitCode> {
    // A local submit is a background run.
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command.arg("run");
    for file in &a.files {
        command.arg("-f").arg(file);
    }
    let status = command
        .arg("--detach")
        .status()
        .context("starting kubetrain run --detach")?;
    Ok(if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `jobs list --local`: the newest run of each TrainJob in the user's runs tree.
fn local_list(a: &ListArgs) -> Result<()> {
    let runs: Vec<RunRecord> = tree::existing_root()?
        .map(|root| record::latest_runs(&root))
        .unwrap_or_default()
        .into_iter()
        .filter(|r| {
            a.target
                .namespace
                .as_ref()
                .is_none_or(|n| *n == r.namespace)
        })
        .filter(|r| a.runtime.as_ref().is_none_or(|rt| *rt == r.runtime))
        .collect();
    let jobs: Vec<TrainJobView> = runs.iter().map(RunRecord::view).collect();
    if !a.output.is_table() {
        let jobs: Vec<LocalJob> = runs
            .iter()
            .zip(jobs)
            .map(|(r, j)| LocalJob::of(r, j))
            .collect();
        print_structured(&jobs, a.output)?;
    } else if jobs.is_empty() {
        eprintln!("No local runs found.");
    } else {
        let wide = a.output == Output::Wide;
        let now = Timestamp::now();
        let mut headers = job_headers(wide);
        headers.insert(0, "NAMESPACE");
        headers.push("RUN");
        let mut table = Table::new(&headers);
        for (r, j) in runs.iter().zip(&jobs) {
            let mut row = job_row(j, wide, now);
            row.insert(0, r.namespace.clone());
            row.push(r.run_id.clone());
            table.row(&row);
        }
        print!("{}", table.render());
    }
    Ok(())
}

/// `jobs wait --local`: polls the run record until a wanted status, failure or the timeout.
fn local_wait(a: &WaitArgs) -> Result<()> {
    let wanted = a
        .statuses
        .iter()
        .map(|s| s.parse::<JobStatus>())
        .collect::<Result<Vec<_>, _>>()?;
    let start = std::time::Instant::now();
    let timeout = Duration::from_secs(a.timeout);
    loop {
        let run = local_run(&a.target, &a.name)?;
        let status = run.status();
        if wanted.contains(&status) {
            println!("trainjob.trainer.kubeflow.org/{} {status}", a.name);
            break;
        }
        if status == JobStatus::Failed {
            bail!(
                "TrainJob {:?} failed: {}",
                a.name,
                run.message().unwrap_or_else(|| "no message".into())
            );
        }
        if start.elapsed() >= timeout {
            bail!(
                "TrainJob {:?} did not reach {} within {} s (it is {status})",
                a.name,
                a.statuses.join("|"),
                a.timeout
            );
        }
        std::thread::sleep(
            Duration::from_secs(a.interval.max(1)).min(timeout.saturating_sub(start.elapsed())),
        );
    }
    Ok(())
}

/// The built-in runtimes, as the local runner has them.
fn local_runtimes() -> Vec<kubetrain_client::Runtime> {
    kubetrain_jobset::builtin::catalog()
        .entries()
        .filter_map(|e| kubetrain_client::types::runtime_view(e.kind(), e.metadata(), e.spec()))
        .collect()
}

fn print_runtimes(runtimes: &[kubetrain_client::Runtime], output: Output) -> Result<()> {
    if !output.is_table() {
        return print_structured(&runtimes, output);
    }
    let mut table = Table::new(&["NAME", "KIND", "FRAMEWORK", "NODES", "DEVICE", "IMAGE"]);
    for r in runtimes {
        table.row(&[
            r.name.clone(),
            r.kind.clone(),
            r.trainer.framework.clone(),
            r.trainer.num_nodes.to_string(),
            r.trainer.device.clone(),
            r.trainer.image.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}

/// Prints a pod's kept log; with `follow`, keeps printing what is appended until the run has ended. The
/// file is streamed through a fixed buffer (or the kernel's splice), so a log of any size costs the same
/// memory. A reader that goes away (`| head`) ends it with the closed pipe's error, which `main` turns into
/// a quiet exit 141, as for `cat`.
fn follow_log(run: &RunRecord, pod: &str, follow: bool) -> Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    let path = run.log_file(pod);
    let mut offset = 0u64;
    let mut stdout = std::io::stdout().lock();
    loop {
        // Read before checking the end, so nothing written before the run ended is missed.
        let ended = !follow || {
            let now = record::read(&run.run_dir).unwrap_or_else(|_| run.clone());
            now.status().is_finished()
        };
        if let Ok(mut file) = std::fs::File::open(&path) {
            file.seek(SeekFrom::Start(offset))
                .with_context(|| format!("reading {}", path.display()))?;
            offset += std::io::copy(&mut file, &mut stdout)
                .with_context(|| format!("copying {} to stdout", path.display()))?;
            stdout.flush().context("writing stdout")?;
        }
        if ended {
            return Ok(());
        }
        // Polling the file: it lives on this machine and grows by lines.
        std::thread::sleep(Duration::from_millis(200));
    }
}

async fn run_async(command: JobsCommand) -> Result<ExitCode> {
    match command {
        JobsCommand::Submit(a) => submit(&a).await?,
        JobsCommand::Get(a) => {
            let job = client(&a.target).await?.get_job(&a.name).await?;
            print_job(&job, a.output, None)?;
        }
        JobsCommand::List(a) => {
            let jobs = client(&a.target)
                .await?
                .list_jobs(a.runtime.as_deref())
                .await?;
            if !a.output.is_table() {
                print_structured(&jobs, a.output)?;
            } else if jobs.is_empty() {
                eprintln!("No TrainJobs found.");
            } else {
                let wide = a.output == Output::Wide;
                let now = Timestamp::now();
                let mut table = Table::new(&job_headers(wide));
                for job in &jobs {
                    table.row(&job_row(job, wide, now));
                }
                print!("{}", table.render());
            }
        }
        JobsCommand::Logs(a) => {
            let options = LogOptions {
                step: a.step,
                follow: a.follow,
            };
            let mut lines = client(&a.target)
                .await?
                .get_job_logs(&a.name, &options)
                .await?;
            while let Some(line) = lines.next().await {
                println!("{}", line?);
            }
        }
        JobsCommand::Wait(a) => {
            let statuses = a
                .statuses
                .iter()
                .map(|s| s.parse::<JobStatus>())
                .collect::<Result<Vec<_>, _>>()?;
            let job = client(&a.target)
                .await?
                .wait_for_job_status(
                    &a.name,
                    &statuses,
                    Duration::from_secs(a.timeout),
                    Duration::from_secs(a.interval.max(1)),
                )
                .await?;
            println!("trainjob.trainer.kubeflow.org/{} {}", job.name, job.status);
        }
        JobsCommand::Delete(a) => {
            client(&a.target).await?.delete_job(&a.name).await?;
            println!("trainjob.trainer.kubeflow.org/{} deleted", a.name);
        }
        JobsCommand::Runtimes(a) => {
            // Without a cluster, `run` showed the built-in runtimes already.
            let client = client(&a.target).await?;
            print_runtimes(&client.list_runtimes().await?, a.output)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `jobs submit`: every TrainJob of every file, read before anything is created; the cluster's webhook
/// checks them against the runtimes it has.
async fn submit(a: &SubmitArgs) -> Result<()> {
    let jobs = read_trainjobs(&a.files)?;
    let client = client(&a.target).await?;
    let namespace = client.backend().namespace().to_string();
    for mut job in jobs {
        job.metadata.namespace = Some(
            a.target
                .namespace
                .clone()
                .or(job.metadata.namespace)
                .unwrap_or_else(|| namespace.clone()),
        );
        if let Some(ttl) = a.ttl_seconds_after_finished {
            job.spec.ttl_seconds_after_finished = Some(ttl);
        }
        let name = job.name().to_string();
        client.backend().create_job(job).await?;
        println!("trainjob.trainer.kubeflow.org/{name} created");
    }
    Ok(())
}

/// The TrainJobs of `files` (paths, directories or `-`), or the parse errors with their field paths.
fn read_trainjobs(files: &[PathBuf]) -> Result<Vec<kubetrain_api::TrainJob>> {
    // Every TrainJob of every file, read before anything is created; the cluster's webhook checks
    // them against the runtimes it has.
    let mut jobs = Vec::new();
    let files = super::input::expand(files)?;
    for path in &files {
        let source = super::input::display_name(path);
        let text = super::input::read(path)?;
        let docs = match kubetrain_api::parse_documents(&text) {
            Ok(docs) => docs,
            Err(kubetrain_api::ParseError::Fields(errors)) => {
                for e in &errors {
                    eprintln!("{e}");
                }
                bail!(
                    "{source}: {} error(s) above; nothing was submitted",
                    errors.len()
                );
            }
            Err(e) => bail!("{source}: {e}"),
        };
        jobs.extend(docs.into_iter().filter_map(|d| match d.document {
            Document::TrainJob(j) => Some(*j),
            _ => None,
        }));
    }
    if jobs.is_empty() {
        let names: Vec<String> = files
            .iter()
            .map(|f| super::input::display_name(f))
            .collect();
        bail!("{} holds no TrainJob", names.join(", "));
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubetrain_client::types::ProgressMetric;

    const SECOND: i128 = 1_000_000_000;

    #[test]
    fn ages_read_as_kubectl_writes_them() {
        let minute = 60;
        let hour = 60 * minute;
        let day = 24 * hour;
        let year = 365 * day;
        let cases: [(i128, &str); 24] = [
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (2 * minute, "2m"),
            (3 * minute + 12, "3m12s"),
            (9 * minute + 59, "9m59s"),
            (10 * minute + 30, "10m"),
            (125 * minute, "125m"),
            (3 * hour, "3h"),
            (3 * hour + 5 * minute, "3h5m"),
            (7 * hour + 59 * minute, "7h59m"),
            (8 * hour + 30 * minute, "8h"),
            (47 * hour, "47h"),
            (2 * day, "2d"),
            (3 * day + 4 * hour, "3d4h"),
            (7 * day + 23 * hour, "7d23h"),
            (8 * day + 5 * hour, "8d"),
            (2 * year - 1, "729d"),
            (2 * year, "2y"),
            (3 * year + 120 * day, "3y120d"),
            (8 * year - 1, "7y364d"),
            (9 * year, "9y"),
        ];
        for (seconds, text) in cases {
            assert_eq!(kubectl_duration(seconds * SECOND), text, "{seconds} s");
        }
        // Truncated as Go's int(d.Seconds()): 1.9 s in the future is "almost now".
        assert_eq!(kubectl_duration(-19 * SECOND / 10), "0s");
        assert_eq!(kubectl_duration(SECOND * 59 + SECOND / 2), "59s");
    }

    #[test]
    fn ages_come_from_rfc3339_timestamps_and_wide_shows_them_to_the_second() {
        let now: Timestamp = "2026-12-04T12:00:00Z".parse().unwrap();
        assert_eq!(age(Some("2026-12-04T11:56:48.123456789Z"), now), "3m11s");
        assert_eq!(age(Some("2026-12-01T08:00:00Z"), now), "3d4h");
        assert_eq!(age(None, now), "<unknown>");
        assert_eq!(age(Some("yesterday"), now), "<unknown>");
        assert_eq!(
            to_the_second("2026-12-04T11:56:48.123456789Z"),
            "2026-12-04T11:56:48Z"
        );
        assert_eq!(
            to_the_second("2026-01-02T03:04:05Z"),
            "2026-01-02T03:04:05Z"
        );
        assert_eq!(to_the_second("yesterday"), "yesterday");

        let job = TrainJobView {
            name: "mnist".into(),
            runtime: "torch-distributed".into(),
            steps: Vec::new(),
            num_nodes: 2,
            creation_timestamp: Some("2026-12-04T11:59:55.5Z".into()),
            status: JobStatus::Running,
            message: None,
            trainer_status: None,
        };
        assert_eq!(
            job_headers(false),
            ["NAME", "STATUS", "RUNTIME", "NODES", "AGE"]
        );
        assert_eq!(
            job_row(&job, false, now),
            ["mnist", "Running", "torch-distributed", "2", "4s"]
        );
        assert_eq!(job_headers(true)[5], "CREATED");
        assert_eq!(
            job_row(&job, true, now)[4..],
            ["4s", "2026-12-04T11:59:55Z"]
        );
    }

    fn step(name: &str, device: &str, count: &str) -> Step {
        Step {
            name: name.into(),
            status: "Running".into(),
            pod_name: format!("job-{name}"),
            device: device.into(),
            device_count: count.into(),
        }
    }

    #[test]
    fn steps_show_devices_only_when_a_step_has_a_gpu() {
        let cpu_only = [
            step("node-0", "Unknown", "Unknown"),
            step("node-1", "cpu", "2"),
        ];
        assert_eq!(
            steps_table(&cpu_only, false).render(),
            "STEP     STATUS    POD\n\
             node-0   Running   job-node-0\n\
             node-1   Running   job-node-1\n"
        );
        // -o wide: the SDK's values as they are.
        assert_eq!(
            steps_table(&cpu_only, true).render(),
            "STEP     STATUS    POD          DEVICE    COUNT\n\
             node-0   Running   job-node-0   Unknown   Unknown\n\
             node-1   Running   job-node-1   cpu       2\n"
        );
        let mixed = [
            step("dataset-initializer", "Unknown", "Unknown"),
            step("node-0", "gpu", "1"),
        ];
        assert_eq!(
            steps_table(&mixed, false).render(),
            "STEP                  STATUS    POD                       DEVICE   COUNT\n\
             dataset-initializer   Running   job-dataset-initializer   cpu      -\n\
             node-0                Running   job-node-0                gpu      1\n"
        );
    }

    fn progress(percent: Option<i32>, metrics: usize) -> TrainerProgress {
        TrainerProgress {
            progress_percentage: percent,
            estimated_remaining_seconds: Some(600),
            metrics: (0..metrics)
                .map(|i| ProgressMetric {
                    name: format!("metric_{i}"),
                    value: format!("{}", 0.123_456 * i as f64),
                })
                .collect(),
            last_updated_time: Some("2026-12-04T11:59:48Z".into()),
        }
    }

    #[test]
    fn progress_of_a_finished_job_is_its_final_state_and_the_last_report_is_marked() {
        let now: Timestamp = "2026-12-04T12:00:00Z".parse().unwrap();
        let p = progress(Some(91), 2);
        let cases = [
            (
                JobStatus::Running,
                "progress: 91% done, about 10m left (reported 12s ago); metric_0=0 metric_1=0.123456",
            ),
            (
                JobStatus::Complete,
                "progress: Complete (last report 12s ago: 91% done); metric_0=0 metric_1=0.123456",
            ),
            (
                JobStatus::Failed,
                "progress: Failed (last report 12s ago: 91% done); metric_0=0 metric_1=0.123456",
            ),
        ];
        for (status, line) in cases {
            assert_eq!(progress_line(&p, status, now, 200), line);
        }
        let bare = TrainerProgress {
            metrics: p.metrics.clone(),
            ..TrainerProgress::default()
        };
        assert_eq!(
            progress_line(&bare, JobStatus::Running, now, 200),
            "progress: metric_0=0 metric_1=0.123456"
        );
        assert_eq!(
            progress_line(&bare, JobStatus::Complete, now, 200),
            "progress: Complete (last report); metric_0=0 metric_1=0.123456"
        );
    }

    #[test]
    fn progress_lines_fit_the_width_and_mark_left_out_metrics() {
        let now: Timestamp = "2026-12-04T12:00:00Z".parse().unwrap();
        // The probe's line: 100 metrics made 1,445 characters.
        let p = progress(Some(40), 100);
        for width in [60, 80, 120, 200] {
            let line = progress_line(&p, JobStatus::Running, now, width);
            assert!(line.chars().count() <= width, "{width}: {line}");
            assert!(line.ends_with(" …"), "{width}: {line}");
            assert!(line.starts_with("progress: 40% done, about 10m left (reported 12s ago)"));
        }
        assert_eq!(
            progress_line(&p, JobStatus::Running, now, 70),
            "progress: 40% done, about 10m left (reported 12s ago); metric_0=0 …"
        );
        assert_eq!(
            progress_line(&p, JobStatus::Running, now, 60),
            "progress: 40% done, about 10m left (reported 12s ago); …"
        );
        // Narrower than the status: cut.
        assert_eq!(
            progress_line(&p, JobStatus::Running, now, 20),
            "progress: 40% done,…"
        );
        // Everything fits: nothing is left out.
        let few = progress(Some(40), 3);
        assert!(!progress_line(&few, JobStatus::Running, now, 120).contains('…'));
    }

    #[test]
    fn no_cluster_is_no_kubeconfig_file_and_no_pod() {
        let home = Some(PathBuf::from("/home/u"));
        let none = |_: &std::path::Path| false;
        let only_home = |p: &std::path::Path| p == std::path::Path::new("/home/u/.kube/config");
        let only_b = |p: &std::path::Path| p == std::path::Path::new("/b");
        let os = std::ffi::OsStr::new;
        assert_eq!(
            no_cluster_reason(false, None, home.clone(), &none).as_deref(),
            Some("/home/u/.kube/config does not exist and KUBECONFIG is not set")
        );
        assert_eq!(
            no_cluster_reason(false, Some(os("")), home.clone(), &none).as_deref(),
            Some("/home/u/.kube/config does not exist and KUBECONFIG is not set")
        );
        assert_eq!(
            no_cluster_reason(false, None, home.clone(), &only_home),
            None
        );
        assert_eq!(no_cluster_reason(true, None, home.clone(), &none), None);
        assert_eq!(
            no_cluster_reason(false, Some(os("/a")), home.clone(), &only_home).as_deref(),
            Some("KUBECONFIG names /a, which does not exist")
        );
        assert_eq!(
            no_cluster_reason(false, Some(os("/a:/c")), home.clone(), &none).as_deref(),
            Some("none of the KUBECONFIG files exists (/a, /c)")
        );
        assert_eq!(
            no_cluster_reason(false, Some(os("/a:/b")), None, &only_b),
            None
        );
        assert_eq!(
            no_cluster_reason(false, None, None, &none).as_deref(),
            Some("neither KUBECONFIG nor HOME is set")
        );
    }

    #[test]
    fn config_errors_lose_the_in_cluster_attempt_and_the_doubled_quotes() {
        let kube = "failed to infer config: in-cluster: (failed to read an incluster environment variable: \
                    environment variable not found), kubeconfig: (failed to read kubeconfig from \
                    '\"/home/u/.kube/config\"': Permission denied (os error 13))";
        assert_eq!(
            clean_config_error(kube, false),
            "kubeconfig: failed to read kubeconfig from /home/u/.kube/config: Permission denied (os error 13)"
        );
        assert!(clean_config_error(kube, true).starts_with("failed to infer config: in-cluster"));
        assert_eq!(
            clean_config_error("kubeconfig /x: no context \"nope\" (it has a)", false),
            "kubeconfig /x: no context \"nope\" (it has a)"
        );
    }
}
