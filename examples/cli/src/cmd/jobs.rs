//! `kubetrain submit | get | list | logs | wait | delete | runtimes`: TrainJobs on a cluster through the
//! SDK's Kubernetes backend (kubeconfig or in-cluster config), printed like kubectl.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use futures_util::StreamExt;
use kubetrain_api::Document;
use kubetrain_client::backend::Backend;
use kubetrain_client::{JobStatus, KubernetesBackend, LogOptions, TrainJobView, TrainerClient};
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
    /// Namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    /// The TrainJob (YAML or JSON); `-` reads stdin.
    #[arg(short = 'f', long = "filename")]
    file: PathBuf,
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

async fn client(target: &Target) -> Result<TrainerClient<KubernetesBackend>> {
    let mut backend = KubernetesBackend::try_default()
        .await
        .context("connecting to the cluster")?;
    if let Some(ns) = &target.namespace {
        backend = backend.with_namespace(ns.clone());
    }
    Ok(TrainerClient::new(backend))
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(command))
}

async fn run_async(command: JobsCommand) -> Result<ExitCode> {
    match command {
        JobsCommand::Submit(a) => {
            let text = super::read_input(&a.file)?;
            let docs = kubetrain_api::parse_documents(&text)
                .with_context(|| format!("parsing {}", a.file.display()))?;
            let Some(mut job) = docs.into_iter().find_map(|d| match d.document {
                Document::TrainJob(j) => Some(*j),
                _ => None,
            }) else {
                bail!("{} holds no TrainJob", a.file.display());
            };
            let client = client(&a.target).await?;
            let namespace = client.backend().namespace().to_string();
            job.metadata.namespace = Some(
                a.target
                    .namespace
                    .clone()
                    .or(job.metadata.namespace)
                    .unwrap_or(namespace),
            );
            let name = job.name().to_string();
            client.backend().create_job(job).await?;
            println!("trainjob.trainer.kubeflow.org/{name} created");
        }
        JobsCommand::Get(a) => {
            let job = client(&a.target).await?.get_job(&a.name).await?;
            if a.output != Output::Table {
                print_structured(&job, a.output)?;
                return Ok(ExitCode::SUCCESS);
            }
            print_table(&JOB_HEADERS, &[job_row(&job)]);
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
            let runtimes = client(&a.target).await?.list_runtimes().await?;
            if a.output != Output::Table {
                print_structured(&runtimes, a.output)?;
            } else {
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
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
