//! `kubetrain queue`: Kueue admission without a cluster — simulate, explain, generate.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use kubetrain_api::{RuntimeCatalog, parse_documents};
use kubetrain_jobset::builtin;
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
    /// JobSets, TrainJobs and their runtimes, Configuration, QueueScenario) or a generator config;
    /// repeatable.
    #[arg(short = 'f', long = "file", required = true)]
    files: Vec<PathBuf>,
    /// TrainingRuntime / ClusterTrainingRuntime documents for the TrainJobs; repeatable. Built-in
    /// runtimes fill in the rest.
    #[arg(long = "runtime", value_name = "RUNTIMES.yaml")]
    runtimes: Vec<PathBuf>,
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
    /// The workload, as NAMESPACE/NAME: a Workload, or a TrainJob (its Workload is
    /// `trainjob-NAME`), a Job (`job-NAME`) or a JobSet (`jobset-NAME`).
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

/// A loaded setup and, per TrainJob (`namespace/name`), the key of its Workload.
struct Loaded {
    setup: Setup,
    trainjobs: Vec<(String, String)>,
}

fn load(args: &SetupArgs) -> Result<Loaded> {
    let mut setup = Setup::default();
    for f in &args.files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        setup.add_yaml(&f.display().to_string(), &text)?;
    }
    setup.expand_generators();
    for s in &setup.skipped {
        eprintln!("note: {s} is not part of the admission model; skipped");
    }
    let mut trainjobs = Vec::new();
    if !setup.trainer_documents.is_empty() || !args.runtimes.is_empty() {
        let mut catalog = RuntimeCatalog::new();
        for path in &args.runtimes {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let docs = parse_documents(&text).with_context(|| format!("{}", path.display()))?;
            for d in &docs {
                if !catalog.add_document(&d.document) {
                    bail!(
                        "{}: {}/{}: a runtime file holds TrainingRuntime or ClusterTrainingRuntime documents",
                        path.display(),
                        d.document.kind(),
                        d.document.name()
                    );
                }
            }
        }
        for runtime in builtin::runtimes() {
            catalog.add_cluster_if_absent(runtime);
        }
        trainjobs = kubetrain_kueue::trainjob::add_trainjobs(&mut setup, &mut catalog)?;
    }
    Ok(Loaded { setup, trainjobs })
}

fn run_setup(args: &SetupArgs) -> Result<(Outcome, Vec<(String, String)>)> {
    let Loaded { setup, trainjobs } = load(args)?;
    let scenario = setup.scenario.clone().unwrap_or_default();
    let model = Model::build(&setup)?;
    Ok((
        simulate(Scheduler::new(model), &scenario, args.cycles),
        trainjobs,
    ))
}

/// Runs `kubetrain queue`.
pub(crate) fn run(args: QueueArgs) -> Result<ExitCode> {
    match args.command {
        QueueCommand::Simulate(a) => {
            let (outcome, _) = run_setup(&a.setup)?;
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
            let (outcome, trainjobs) = run_setup(&a.setup)?;
            let s = &outcome.sched;
            let find = |key: &str| s.model.workloads.iter().position(|w| w.key == key);
            let derived = |prefix: &str| {
                a.workload
                    .split_once('/')
                    .and_then(|(ns, name)| find(&format!("{ns}/{prefix}-{name}")))
            };
            let found = find(&a.workload)
                .or_else(|| {
                    trainjobs
                        .iter()
                        .find(|(job, _)| *job == a.workload)
                        .and_then(|(_, wl)| find(wl))
                })
                .or_else(|| derived("job"))
                .or_else(|| derived("jobset"));
            let Some(wl) = found else {
                bail!(
                    "workload {} not found in the given files (use NAMESPACE/NAME of a Workload, TrainJob, Job or JobSet)",
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
