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
use kubetrain_api::Document;
use kubetrain_client::backend::Backend;
use kubetrain_client::local::record::{self, RunRecord};
use kubetrain_client::{
    JobStatus, KubernetesBackend, KubernetesBackendConfig, LogOptions, TrainJobView, TrainerClient,
};
use serde::Serialize;

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
    Table,
    Yaml,
    Json,
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
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    /// TrainJob name.
    name: String,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Output,
    #[command(flatten)]
    target: Target,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
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
    /// TrainJob name.
    name: String,
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
        .context("connecting to the cluster (or use --local for the runs on this machine)")?;
    if let Some(url) = backend.cluster_url() {
        let _ = SERVER.set(url.trim_end_matches('/').to_owned());
    }
    Ok(TrainerClient::new(backend))
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

/// Prints rows as a kubectl-style table: upper-case headers, columns padded to the widest cell.
fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("   ").trim_end());
    };
    line(headers.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

fn job_row(j: &TrainJobView) -> Vec<String> {
    vec![
        j.name.clone(),
        j.status.to_string(),
        j.runtime.clone(),
        j.num_nodes.to_string(),
        j.creation_timestamp
            .clone()
            .unwrap_or_else(|| "<unknown>".into()),
    ]
}

const JOB_HEADERS: [&str; 5] = ["NAME", "STATUS", "RUNTIME", "NODES", "CREATED"];

/// Runs one of the cluster subcommands.
pub(crate) fn run(command: JobsCommand) -> Result<ExitCode> {
    if command.target().is_local() {
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

fn print_job(job: &TrainJobView, output: Output, local: Option<&RunRecord>) -> Result<()> {
    if output != Output::Table {
        return print_structured(job, output);
    }
    print_table(&JOB_HEADERS, &[job_row(job)]);
    if !job.steps.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = job
            .steps
            .iter()
            .map(|s| {
                vec![
                    s.name.clone(),
                    s.status.clone(),
                    s.pod_name.clone(),
                    s.device.clone(),
                    s.device_count.clone(),
                ]
            })
            .collect();
        print_table(&["STEP", "STATUS", "POD", "DEVICE", "COUNT"], &rows);
    }
    if let Some(m) = &job.message {
        println!("\nmessage: {m}");
    }
    if let Some(p) = &job.trainer_status {
        println!("\nprogress: {}", p.summary());
    }
    if let Some(run) = local {
        println!("\nrun {} in {}", run.run_id, run.run_dir.display());
    }
    Ok(())
}

/// The latest run of `name` on this machine.
fn local_run(target: &Target, name: &str) -> Result<RunRecord> {
    let namespace = target.local_namespace();
    record::latest(&record::runs_root(), namespace, name).with_context(|| {
        format!(
            "TrainJob {namespace}/{name} has no run on this machine (runs of `kubetrain run` are kept under {}; \
             `kubetrain list --local` lists them)",
            record::runs_root().display()
        )
    })
}

/// The subcommands on this machine's runs.
fn run_local(command: JobsCommand) -> Result<ExitCode> {
    match command {
        JobsCommand::Submit(a) => {
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
            return Ok(if status.success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        JobsCommand::Get(a) => {
            let run = local_run(&a.target, &a.name)?;
            print_job(&run.view(), a.output, Some(&run))?;
        }
        JobsCommand::List(a) => {
            let runs: Vec<RunRecord> = record::latest_runs(&record::runs_root())
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
            if a.output != Output::Table {
                print_structured(&jobs, a.output)?;
            } else if jobs.is_empty() {
                eprintln!("No local runs found.");
            } else {
                let rows: Vec<Vec<String>> = runs
                    .iter()
                    .zip(&jobs)
                    .map(|(r, j)| {
                        let mut row = job_row(j);
                        row.insert(0, r.namespace.clone());
                        row.push(r.run_id.clone());
                        row
                    })
                    .collect();
                print_table(
                    &[
                        "NAMESPACE",
                        "NAME",
                        "STATUS",
                        "RUNTIME",
                        "NODES",
                        "CREATED",
                        "RUN",
                    ],
                    &rows,
                );
            }
        }
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
        JobsCommand::Wait(a) => {
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
                    Duration::from_secs(a.interval.max(1))
                        .min(timeout.saturating_sub(start.elapsed())),
                );
            }
        }
        JobsCommand::Delete(a) => {
            let namespace = a.target.local_namespace().to_owned();
            let job_dir = record::runs_root().join(&namespace).join(&a.name);
            let runs: Vec<RunRecord> = std::fs::read_dir(&job_dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| record::read(&e.path()).ok())
                .collect();
            if runs.is_empty() {
                bail!("TrainJob {namespace}/{} has no run on this machine", a.name);
            }
            for run in &runs {
                run.stop(Duration::from_secs(30));
            }
            std::fs::remove_dir_all(&job_dir)
                .with_context(|| format!("removing {}", job_dir.display()))?;
            println!("trainjob.trainer.kubeflow.org/{} deleted", a.name);
        }
        JobsCommand::Runtimes(a) => print_runtimes(&local_runtimes(), a.output)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The built-in runtimes, as the local runner has them.
fn local_runtimes() -> Vec<kubetrain_client::Runtime> {
    kubetrain_jobset::builtin::catalog()
        .entries()
        .filter_map(|e| kubetrain_client::types::runtime_view(e.kind(), e.metadata(), e.spec()))
        .collect()
}

fn print_runtimes(runtimes: &[kubetrain_client::Runtime], output: Output) -> Result<()> {
    if output != Output::Table {
        return print_structured(&runtimes, output);
    }
    let rows: Vec<Vec<String>> = runtimes
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.kind.clone(),
                r.trainer.framework.clone(),
                r.trainer.num_nodes.to_string(),
                r.trainer.device.clone(),
                r.trainer.image.clone().unwrap_or_default(),
            ]
        })
        .collect();
    print_table(
        &["NAME", "KIND", "FRAMEWORK", "NODES", "DEVICE", "IMAGE"],
        &rows,
    );
    Ok(())
}

/// Prints a pod's kept log; with `follow`, keeps printing what is appended until the run has ended.
fn follow_log(run: &RunRecord, pod: &str, follow: bool) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
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
            file.seek(SeekFrom::Start(offset))?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            offset += bytes.len() as u64;
            stdout.write_all(&bytes)?;
            stdout.flush()?;
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
        JobsCommand::Submit(a) => {
            // Every TrainJob of every file, read before anything is created; the cluster's webhook checks
            // them against the runtimes it has.
            let mut jobs = Vec::new();
            let files = super::input::expand(&a.files)?;
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
                let name = job.name().to_string();
                client.backend().create_job(job).await?;
                println!("trainjob.trainer.kubeflow.org/{name} created");
            }
        }
        JobsCommand::Get(a) => {
            let job = client(&a.target).await?.get_job(&a.name).await?;
            print_job(&job, a.output, None)?;
        }
        JobsCommand::List(a) => {
            let jobs = client(&a.target)
                .await?
                .list_jobs(a.runtime.as_deref())
                .await?;
            if a.output != Output::Table {
                print_structured(&jobs, a.output)?;
            } else if jobs.is_empty() {
                eprintln!("No TrainJobs found.");
            } else {
                print_table(&JOB_HEADERS, &jobs.iter().map(job_row).collect::<Vec<_>>());
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
            let client = match client(&a.target).await {
                Ok(client) => client,
                // No cluster at all (no kubeconfig, not in a pod): what this machine can run.
                Err(e)
                    if a.target.kubeconfig.is_none()
                        && a.target.context.is_none()
                        && e.chain().any(|c| {
                            matches!(
                                c.downcast_ref::<kubetrain_client::ClientError>(),
                                Some(kubetrain_client::ClientError::Config(_))
                            )
                        }) =>
                {
                    eprintln!(
                        "note: no cluster configured, so these are the built-in runtimes `kubetrain run` uses \
                         (as with --local)"
                    );
                    print_runtimes(&local_runtimes(), a.output)?;
                    return Ok(ExitCode::SUCCESS);
                }
                Err(e) => return Err(e),
            };
            print_runtimes(&client.list_runtimes().await?, a.output)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
