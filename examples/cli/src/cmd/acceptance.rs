//! `kubetrain acceptance run -f PLAN [--local | --kubeconfig FILE [--context C] | --cluster] [--out DIR]`:
//! the GPU-cluster acceptance test as one command (kubetrain-acceptance). Exit code 0 only when every
//! step passed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use kubetrain_acceptance::cluster::{self, ClusterRun};
use kubetrain_acceptance::local::{self, LocalRun};
use kubetrain_acceptance::outdir;
use kubetrain_acceptance::plan::{Plan, PlanFieldError};

/// Arguments of `kubetrain acceptance`.
#[derive(Debug, Args)]
pub(crate) struct AcceptanceArgs {
    #[command(subcommand)]
    command: AcceptanceCommand,
}

#[derive(Debug, Subcommand)]
enum AcceptanceCommand {
    /// Run the seven steps of a plan and write acceptance.json and acceptance.html.
    Run(RunArgs),
    /// Check a plan without running it (field-path errors).
    Validate(ValidateArgs),
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The acceptance plan (YAML; `-` is stdin).
    #[arg(short = 'f', long = "filename", value_name = "PLAN")]
    file: PathBuf,
    /// Run on this machine: the TrainJob's pods as local processes (the default).
    #[arg(long, conflicts_with_all = ["kubeconfig", "context", "cluster"])]
    local: bool,
    /// Run on the cluster of this kubeconfig, through the operator.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: the current one); implies the cluster mode.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Run on the cluster of the default kubeconfig (`KUBECONFIG`, `~/.kube/config`) or, inside a pod,
    /// its ServiceAccount.
    #[arg(long)]
    cluster: bool,
    /// Report directory (default ./acceptance-<plan name>/): each run writes a new <UTC time>-<n>
    /// directory in it and links it as `latest`. A symbolic link, or a non-empty directory this
    /// command did not create, is refused.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ValidateArgs {
    /// The acceptance plan (YAML; `-` is stdin).
    #[arg(short = 'f', long = "filename", value_name = "PLAN")]
    file: PathBuf,
    /// Also check what the cluster mode refuses (local-only fields, relative checkpoint directories).
    #[arg(long)]
    cluster: bool,
}

fn read_plan(path: &Path) -> anyhow::Result<Plan> {
    let text = super::read_input(path)?;
    Plan::from_yaml(&text).map_err(|errors| plan_errors(path, &errors.0))
}

/// Every problem of the plan at `file`, one per line: `<plan file>: <field.path>: <message>`.
fn plan_errors(file: &Path, errors: &[PlanFieldError]) -> anyhow::Error {
    let name = if file == Path::new("-") {
        "(stdin)".to_string()
    } else {
        file.display().to_string()
    };
    let lines: Vec<String> = errors.iter().map(|e| format!("{name}: {e}")).collect();
    anyhow::anyhow!("{}", lines.join("\n"))
}

/// Runs `kubetrain acceptance`.
pub(crate) fn run(args: AcceptanceArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        AcceptanceCommand::Validate(a) => {
            let plan = read_plan(&a.file)?;
            let errors = if a.cluster {
                cluster::validate(&plan)
            } else {
                Vec::new()
            };
            if !errors.is_empty() {
                return Err(plan_errors(&a.file, &errors));
            }
            println!("AcceptancePlan/{}: valid", plan.metadata.name);
            Ok(ExitCode::SUCCESS)
        }
        AcceptanceCommand::Run(a) => run_plan(a),
    }
}

fn run_plan(a: RunArgs) -> anyhow::Result<ExitCode> {
    let plan = read_plan(&a.file)?;
    let on_cluster = a.kubeconfig.is_some() || a.context.is_some() || a.cluster;
    if on_cluster {
        let errors = cluster::validate(&plan);
        if !errors.is_empty() {
            return Err(plan_errors(&a.file, &errors));
        }
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("acceptance-{}", plan.metadata.name)));
    let dirs = ReportDirs::create(out)?;
    if on_cluster {
        return run_on_cluster(&plan, &a, dirs);
    }
    let exe = std::env::current_exe().context("locate the kubetrain binary")?;
    // Orphans of the pods (a daemon that left its container's process group) come back to this process,
    // which stops them when each phase ends.
    kubetrain_client::local::adopt_orphans();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    println!(
        "acceptance {}: 7 steps on this machine; report in {}",
        plan.metadata.name,
        dirs.run.display()
    );
    let run = LocalRun {
        out_dir: dirs.run.clone(),
        kubetrain_exe: exe,
    };
    let mut progress = |line: &str| println!("{line}");
    let report = runtime.block_on(local::run(&plan, &run, &mut progress));
    conclude(&report, &dirs)
}

/// `--out` (the tool's report directory) and this run's new directory inside it.
struct ReportDirs {
    out: PathBuf,
    run: PathBuf,
}

impl ReportDirs {
    /// Claims `out` and creates the run's directory, refusing what is not ours (see `outdir`).
    fn create(out: PathBuf) -> anyhow::Result<Self> {
        let run = outdir::create_run_dir(&out).map_err(|e| anyhow::anyhow!("--out {e}"))?;
        // Absolute, for the pods: `out` is no symbolic link, so this resolves only its parents.
        let run = run
            .canonicalize()
            .with_context(|| format!("resolving {}", run.display()))?;
        Ok(ReportDirs { out, run })
    }
}

/// `--kubeconfig`/`--context`/`--cluster`: the TrainJobs through the API server and the operator.
fn run_on_cluster(plan: &Plan, a: &RunArgs, dirs: ReportDirs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (client, namespace, server) = runtime
        .block_on(cluster::connect(
            a.kubeconfig.as_deref(),
            a.context.as_deref(),
        ))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let ns = plan
        .spec
        .train_job
        .pointer("/metadata/namespace")
        .and_then(|v| v.as_str())
        .unwrap_or(&namespace)
        .to_string();
    println!(
        "acceptance {}: 7 steps on the cluster at {server}, namespace {ns}; report in {}",
        plan.metadata.name,
        dirs.run.display()
    );
    let run = ClusterRun {
        out_dir: dirs.run.clone(),
        client,
        namespace,
        server,
    };
    let mut progress = |line: &str| println!("{line}");
    let report = runtime.block_on(cluster::run(plan, &run, &mut progress));
    conclude(&report, &dirs)
}

/// Writes the report, links it as the latest and prints the verdict: exit 0 when passed, 130 when
/// interrupted, 1 otherwise.
fn conclude(
    report: &kubetrain_acceptance::report::Report,
    dirs: &ReportDirs,
) -> anyhow::Result<ExitCode> {
    let run = &dirs.run;
    kubetrain_acceptance::write_report(report, run)
        .with_context(|| format!("writing the report into {}", run.display()))?;
    println!(
        "wrote {} and {}",
        run.join("acceptance.json").display(),
        run.join("acceptance.html").display()
    );
    // The report is written either way; a `latest` that cannot be updated is only a warning.
    match outdir::link_latest(&dirs.out, run) {
        Ok(()) => println!(
            "{} → {}",
            dirs.out.join(outdir::LATEST).display(),
            run.file_name().unwrap_or_default().to_string_lossy()
        ),
        Err(e) => eprintln!("warning: {e}"),
    }
    if report.interrupted {
        println!("acceptance {}: interrupted", report.name);
        return Ok(ExitCode::from(130));
    }
    if report.passed {
        println!(
            "acceptance {}: PASSED ({:.1}s)",
            report.name, report.seconds
        );
        Ok(ExitCode::SUCCESS)
    } else {
        let failed = report
            .first_failure()
            .map(|s| format!("step {} ({}): {}", s.index, s.name, s.message))
            .unwrap_or_else(|| "a step did not pass".into());
        println!("acceptance {}: FAILED at {failed}", report.name);
        Ok(ExitCode::FAILURE)
    }
}
