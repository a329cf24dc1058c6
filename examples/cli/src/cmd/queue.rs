//! `kubetrain queue`: Kueue admission without a cluster — simulate, explain, generate.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use kubetrain_kueue::explain::explain;
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::sched::Scheduler;
use kubetrain_kueue::sim::engine::{Outcome, simulate};
use kubetrain_kueue::sim::generator::GeneratorConfig;
use kubetrain_kueue::sim::report::{html, simulation_report, table};

/// `kubetrain queue` arguments.
#[derive(Debug, Args)]
pub(crate) struct QueueArgs {
    #[command(subcommand)]
    command: QueueCommand,
}

#[derive(Debug, Subcommand)]
enum QueueCommand {
    /// Simulate admission cycle by cycle (with run times: until every workload finishes).
    Simulate(SimulateArgs),
    /// Explain why a workload is (not) admitted: flavors tried, missing quota, queue position.
    Explain(ExplainArgs),
    /// Write a scenario (Kueue objects and workloads) from a scheduler-performance generator config.
    Generate(GenerateArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Output {
    Json,
    Table,
}

#[derive(Debug, Args)]
struct SetupArgs {
    /// Kueue YAML (ResourceFlavors, Cohorts, ClusterQueues, LocalQueues, Workloads, Jobs,
    /// JobSets, Configuration, QueueScenario) or a generator config; repeatable.
    #[arg(short = 'f', long = "file", required = true)]
    files: Vec<PathBuf>,
    /// Stop after this many scheduling cycles.
    #[arg(long)]
    cycles: Option<u64>,
}

#[derive(Debug, Args)]
struct SimulateArgs {
    #[command(flatten)]
    setup: SetupArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    output: Output,
    /// Also write a self-contained HTML report here.
    #[arg(long)]
    html: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ExplainArgs {
    /// The workload, as NAMESPACE/NAME.
    workload: String,
    #[command(flatten)]
    setup: SetupArgs,
    /// Output format (`table` prints text).
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    output: Output,
}

#[derive(Debug, Args)]
struct GenerateArgs {
    /// Generator config in the shape of Kueue's scheduler performance test.
    #[arg(long)]
    config: PathBuf,
}

fn load(files: &[PathBuf]) -> Result<Setup> {
    let mut setup = Setup::default();
    for f in files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        setup.add_yaml(&f.display().to_string(), &text)?;
    }
    setup.expand_generators();
    for s in &setup.skipped {
        eprintln!("note: {s} is not part of the admission model; skipped");
    }
    Ok(setup)
}

fn run_setup(args: &SetupArgs) -> Result<Outcome> {
    let setup = load(&args.files)?;
    let scenario = setup.scenario.clone().unwrap_or_default();
    let model = Model::build(&setup)?;
    Ok(simulate(Scheduler::new(model), &scenario, args.cycles))
}

/// Runs `kubetrain queue`.
pub(crate) fn run(args: QueueArgs) -> Result<ExitCode> {
    match args.command {
        QueueCommand::Simulate(a) => {
            let outcome = run_setup(&a.setup)?;
            match a.output {
                Output::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&simulation_report(&outcome))?
                ),
                Output::Table => print!("{}", table(&outcome, 200)),
            }
            if let Some(path) = &a.html {
                std::fs::write(path, html(&outcome, "kubetrain queue simulation"))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        QueueCommand::Explain(a) => {
            let outcome = run_setup(&a.setup)?;
            let s = &outcome.sched;
            let Some(wl) = s.model.workloads.iter().position(|w| w.key == a.workload) else {
                bail!(
                    "workload {} not found in the given files (use NAMESPACE/NAME; Jobs become job-NAME, JobSets jobset-NAME)",
                    a.workload
                );
            };
            let e = explain(s, wl);
            match a.output {
                Output::Json => println!("{}", serde_json::to_string_pretty(&e)?),
                Output::Table => print!("{}", e.to_text()),
            }
        }
        QueueCommand::Generate(a) => {
            let text = std::fs::read_to_string(&a.config)
                .with_context(|| format!("reading {}", a.config.display()))?;
            let mut setup = Setup::default();
            setup.add_yaml(&a.config.display().to_string(), &text)?;
            if setup.generators.is_empty() {
                bail!(
                    "{}: no generator config (a document with `cohorts:`) found",
                    a.config.display()
                );
            }
            let generators: Vec<GeneratorConfig> = std::mem::take(&mut setup.generators);
            let mut out = Setup {
                generators,
                ..Setup::default()
            };
            out.expand_generators();
            print!("{}", out.to_yaml());
        }
    }
    Ok(ExitCode::SUCCESS)
}
