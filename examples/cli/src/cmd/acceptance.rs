//! `kubetrain acceptance run -f PLAN [--local | --kubeconfig FILE] [--out DIR]`: the GPU-cluster
//! acceptance test as one command (kubetrain-acceptance). Exit code 0 only when every step passed.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use kubetrain_acceptance::local::{self, LocalRun};
use kubetrain_acceptance::plan::Plan;

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
    #[arg(long, conflicts_with = "kubeconfig")]
    local: bool,
    /// Run on the cluster of this kubeconfig, through the operator.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Report directory (default ./acceptance-<plan name>/).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ValidateArgs {
    /// The acceptance plan (YAML; `-` is stdin).
    #[arg(short = 'f', long = "filename", value_name = "PLAN")]
    file: PathBuf,
}

fn read_plan(path: &std::path::Path) -> anyhow::Result<Plan> {
    let text = super::read_input(path)?;
    Plan::from_yaml(&text).map_err(|errors| anyhow::anyhow!("{errors}"))
}

/// Runs `kubetrain acceptance`.
pub(crate) fn run(args: AcceptanceArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        AcceptanceCommand::Validate(a) => {
            let plan = read_plan(&a.file)?;
            println!("AcceptancePlan/{}: valid", plan.metadata.name);
            Ok(ExitCode::SUCCESS)
        }
        AcceptanceCommand::Run(a) => run_plan(a),
    }
}

fn run_plan(a: RunArgs) -> anyhow::Result<ExitCode> {
    let plan = read_plan(&a.file)?;
    if let Some(kubeconfig) = &a.kubeconfig {
        bail!(
            "--kubeconfig {}: the cluster mode is not implemented yet; run with --local (docs/acceptance.md says what the cluster mode will do)",
            kubeconfig.display()
        );
    }
    let out = a
        .out
        .unwrap_or_else(|| PathBuf::from(format!("acceptance-{}", plan.metadata.name)));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let out = out
        .canonicalize()
        .with_context(|| format!("resolving {}", out.display()))?;
    let exe = std::env::current_exe().context("locate the kubetrain binary")?;
    // Orphans of the pods (a daemon that left its container's process group) come back to this process,
    // which stops them when each phase ends.
    kubetrain_client::local::reaper::adopt_orphans();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    println!(
        "acceptance {}: 7 steps on this machine; report in {}",
        plan.metadata.name,
        out.display()
    );
    let run = LocalRun {
        out_dir: out.clone(),
        kubetrain_exe: exe,
    };
    let mut progress = |line: &str| println!("{line}");
    let report = runtime.block_on(local::run(&plan, &run, &mut progress));
    kubetrain_acceptance::write_report(&report, &out)
        .with_context(|| format!("writing the report into {}", out.display()))?;
    println!(
        "wrote {} and {}",
        out.join("acceptance.json").display(),
        out.join("acceptance.html").display()
    );
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
