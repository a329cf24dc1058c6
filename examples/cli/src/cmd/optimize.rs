//! `kubetrain optimize -f FILE [--local] [--detach] [--out DIR]`: hyperparameter search with an
//! OptimizationJob, on the cluster (the operator runs the trials) or on this machine (`--local`: every trial
//! a local run, as `kubetrain run`), ending with a report in `--out DIR`: `optimization.json` and
//! `optimization.html`.

mod html;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kubetrain_api::{Document, OptimizationJob, Severity};
use kubetrain_client::local::LocalOptions;
use kubetrain_client::optimize::{OptimizationReport, OptimizeOptions, TrialReport, search_plan};
use kubetrain_client::{
    KubernetesBackend, KubernetesBackendConfig, LocalProcessBackend, TrainerClient,
};

/// The file that marks a report directory as made by `kubetrain optimize`.
const MARKER: &str = ".kubetrain-optimize";

/// `kubetrain optimize` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct OptimizeArgs {
    /// The OptimizationJob manifest (YAML or JSON; one OptimizationJob).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    file: PathBuf,
    /// Run the trials on this machine as local runs (`kubetrain run`), no cluster needed.
    #[arg(long)]
    local: bool,
    /// Submit to the cluster and return at once (the operator runs the search; `kubetrain get` follows it).
    #[arg(long, conflicts_with = "local")]
    detach: bool,
    /// The report directory (default `./optimize-<name>/`): created, or an empty one adopted; a non-empty
    /// directory that `kubetrain optimize` did not create is refused.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// How long to wait for the search (`30m`, `2h`; a bare number is seconds).
    #[arg(long, default_value_t = 86_400, value_name = "DURATION", value_parser = super::input::parse_seconds)]
    timeout: u64,
    /// Namespace (cluster; default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// The kubeconfig file (cluster; default: KUBECONFIG, else ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (cluster; default: the current one).
    #[arg(long)]
    context: Option<String>,
}

/// Runs `kubetrain optimize`.
pub(crate) fn run(args: OptimizeArgs) -> Result<ExitCode> {
    let job = read_job(&args.file)?;
    check(&job, args.local)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    if args.detach {
        let name = runtime.block_on(submit(&args, &job))?;
        println!("optimizationjob.trainer.kubeflow.org/{name} created");
        println!(
            "follow it with `kubetrain get optimizationjob {name}`; its trials are the TrainJobs {name}-<index>"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("optimize-{}", job.name())));
    claim(&out, false)?;
    let report = if args.local {
        claim(&out, true)?;
        runtime.block_on(run_local(&args, &job, &out))?
    } else {
        let name = runtime.block_on(submit(&args, &job))?;
        println!("optimizationjob.trainer.kubeflow.org/{name} created; waiting for its trials");
        claim(&out, true)?;
        runtime.block_on(wait_cluster(&args, &name))?
    };
    write_report(&out, &report)?;
    summary(&report, &out);
    Ok(if report.best.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The one OptimizationJob in `file`.
fn read_job(file: &Path) -> Result<OptimizationJob> {
    let text = super::input::read(file)?;
    let docs = kubetrain_api::parse_documents(&text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", super::input::display_name(file)))?;
    let mut jobs = docs.into_iter().filter_map(|d| match d.document {
        Document::OptimizationJob(job) => Some(*job),
        _ => None,
    });
    let Some(job) = jobs.next() else {
        bail!(
            "{}: no OptimizationJob in the file (kind: OptimizationJob)",
            super::input::display_name(file)
        );
    };
    if jobs.next().is_some() {
        bail!(
            "{}: more than one OptimizationJob; give one per file",
            super::input::display_name(file)
        );
    }
    Ok(job)
}

/// Validation as `kubetrain validate` does it (every finding with its field path), then the samplers' own
/// checks.
fn check(job: &OptimizationJob, local: bool) -> Result<()> {
    let findings = if local {
        kubetrain_api::validation::validate_optimizationjob(
            job,
            &kubetrain_jobset::builtin::catalog(),
        )
    } else {
        kubetrain_api::validation::validate_optimizationjob_object(job)
    };
    for f in findings.iter().filter(|f| f.severity == Severity::Warning) {
        eprintln!("warning: {f}");
    }
    let errors: Vec<String> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(ToString::to_string)
        .collect();
    if !errors.is_empty() {
        bail!("the OptimizationJob is invalid:\n  {}", errors.join("\n  "));
    }
    search_plan(job)?;
    Ok(())
}

/// Makes `out` the report directory: created (with its parents), or an empty directory adopted, or one
/// this command made before (it has the marker); anything else is refused and left alone.
///
/// With `create` false nothing is written: the check alone, so that a search that cannot start (no cluster)
/// leaves no directory behind.
fn claim(out: &Path, create: bool) -> Result<()> {
    match std::fs::symlink_metadata(out) {
        Ok(m) if m.file_type().is_symlink() => {
            bail!(
                "--out {}: is a symbolic link; give the directory itself or a new path",
                out.display()
            )
        }
        Ok(m) if !m.is_dir() => bail!("--out {}: exists and is not a directory", out.display()),
        Ok(_) if out.join(MARKER).is_file() => return Ok(()),
        Ok(_) => {
            let mut entries =
                std::fs::read_dir(out).with_context(|| format!("reading {}", out.display()))?;
            if entries.next().is_some() {
                bail!(
                    "--out {}: is not empty and kubetrain optimize did not create it (no {MARKER} file); give a new or empty directory",
                    out.display()
                );
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if create {
                std::fs::create_dir_all(out)
                    .with_context(|| format!("creating {}", out.display()))?;
            }
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", out.display())),
    }
    if !create {
        return Ok(());
    }
    std::fs::write(out.join(MARKER), "kubetrain optimize report directory\n")
        .with_context(|| format!("writing {}", out.join(MARKER).display()))
}

/// A fresh directory for this search's local trial runs: `trials`, else `trials-2`, ... (never one that
/// exists).
fn trials_dir(out: &Path) -> Result<PathBuf> {
    for n in 1..=1000 {
        let dir = if n == 1 {
            out.join("trials")
        } else {
            out.join(format!("trials-{n}"))
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
    bail!("{}: 1000 trials directories exist already", out.display())
}

fn print_trial(t: &TrialReport) {
    let params: Vec<String> = t
        .parameters
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let objective = t
        .objective
        .map(|v| format!(" objective={v}"))
        .unwrap_or_default();
    let message = t
        .message
        .as_deref()
        .map(|m| format!(" ({m})"))
        .unwrap_or_default();
    println!(
        "trial {:<24} {:<9} {}{objective}{message}",
        t.name,
        t.state,
        params.join(" ")
    );
    let _ = std::io::stdout().flush();
}

async fn run_local(
    args: &OptimizeArgs,
    job: &OptimizationJob,
    out: &Path,
) -> Result<OptimizationReport> {
    let runs = trials_dir(out)?;
    let options = LocalOptions {
        // `kubetrain` in a trial's command is this very binary.
        kubetrain_exe: Some(std::env::current_exe().context("locating the kubetrain binary")?),
        remap_ports: true,
        ..LocalOptions::default()
    };
    let backend = LocalProcessBackend::new()
        .with_options(options)
        .with_runs_under(runs.canonicalize()?);
    let client = TrainerClient::new(backend);
    let plan = search_plan(job)?;
    println!(
        "optimizing {} locally: {} trials ({}), {} at once, {} {}",
        job.name(),
        plan.study.trial_count(),
        plan.algorithm_name,
        plan.parallel_trials,
        format!("{:?}", plan.study.direction()).to_lowercase(),
        plan.metric
    );
    let options = OptimizeOptions {
        timeout: Some(Duration::from_secs(args.timeout)),
        on_trial: Some(Arc::new(print_trial)),
        ..OptimizeOptions::default()
    };
    Ok(client.optimize_here(job, &options).await?)
}

async fn cluster_client(args: &OptimizeArgs) -> Result<TrainerClient<KubernetesBackend>> {
    let config = KubernetesBackendConfig {
        namespace: args.namespace.clone(),
        config_file: args.kubeconfig.clone(),
        context: args.context.clone(),
    };
    let backend = KubernetesBackend::from_config(&config)
        .await
        .context("connecting to the cluster (or use --local to run the search on this machine)")?;
    Ok(TrainerClient::new(backend))
}

async fn submit(args: &OptimizeArgs, job: &OptimizationJob) -> Result<String> {
    Ok(cluster_client(args).await?.optimize(job).await?)
}

async fn wait_cluster(args: &OptimizeArgs, name: &str) -> Result<OptimizationReport> {
    let client = cluster_client(args).await?;
    Ok(client
        .wait_for_optimization(
            name,
            Duration::from_secs(args.timeout),
            Duration::from_secs(2),
        )
        .await?)
}

/// Writes `optimization.json` and `optimization.html` into `out` (ours: replaced when there).
fn write_report(out: &Path, report: &OptimizationReport) -> Result<()> {
    let json = serde_json::to_string_pretty(report).context("encoding the report")?;
    let path = out.join("optimization.json");
    std::fs::write(&path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    let path = out.join("optimization.html");
    std::fs::write(&path, html::render(report))
        .with_context(|| format!("writing {}", path.display()))
}

fn summary(report: &OptimizationReport, out: &Path) {
    let count = |s: &str| report.trials.iter().filter(|t| t.state == s).count();
    println!(
        "{} trials: {} succeeded, {} failed, {} stopped early",
        report.trials.len(),
        count("Succeeded"),
        count("Failed"),
        count("Stopped")
    );
    match &report.best {
        Some(best) => {
            let params: Vec<String> = best
                .parameters
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!(
                "best: {} {}={} with {}",
                best.name,
                report.metric,
                best.objective,
                params.join(" ")
            );
        }
        None => println!("no trial succeeded with a {} value", report.metric),
    }
    println!(
        "report: {} and {}",
        out.join("optimization.json").display(),
        out.join("optimization.html").display()
    );
}
