//! `kubetrain queue`: Kueue admission without a cluster — simulate, explain, generate.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use kubetrain_api::{RuntimeCatalog, parse_documents};
use kubetrain_jobset::builtin;
use kubetrain_kueue::explain::{explain, find_workload};
use kubetrain_kueue::load::Setup;
use kubetrain_kueue::model::Model;
use kubetrain_kueue::model::QueueTarget;
use kubetrain_kueue::multikueue;
use kubetrain_kueue::sched::Scheduler;
use kubetrain_kueue::sim::engine::{SimOutcome, Stop, simulate_until};
use kubetrain_kueue::sim::generator::GeneratorConfig;
use kubetrain_kueue::sim::report::{html, simulation_report, workloads};

use super::input::{self, Table, human_ms};

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
    /// JobSets, TrainJobs and their runtimes, Configuration, QueueScenario) or a generator config; a
    /// directory reads its .yaml, .yml and .json files; repeatable.
    #[arg(
        short = 'f',
        long = "filename",
        visible_alias = "file",
        required = true,
        value_name = "FILE|DIR"
    )]
    files: Vec<PathBuf>,
    /// TrainingRuntime / ClusterTrainingRuntime documents for the TrainJobs (files or directories);
    /// repeatable. Built-in runtimes fill in the rest.
    #[arg(long = "runtime", value_name = "RUNTIMES.yaml")]
    runtimes: Vec<PathBuf>,
    /// A MultiKueue worker cluster's own objects (its queues, quotas, Workloads), named like its
    /// MultiKueueCluster; repeatable. Objects annotated `kubetrain.dev/cluster: NAME` in the files
    /// above count as worker NAME's too (docs/kueue.md, "Across clusters (MultiKueue)").
    #[arg(long = "worker", value_name = "NAME=FILE|DIR", value_parser = parse_worker)]
    workers: Vec<(String, PathBuf)>,
    /// Stop after this many scheduling cycles.
    #[arg(long)]
    cycles: Option<u64>,
    /// The state at this virtual time (e.g. `90s`, `1h30m`; 0 is the snapshot): every arrival,
    /// finish and timeout due by then applied and every queued head evaluated. With `--cycles`,
    /// whichever comes first.
    #[arg(long, value_name = "DURATION", value_parser = parse_until)]
    until: Option<i64>,
}

/// `--worker NAME=FILE|DIR`.
fn parse_worker(v: &str) -> Result<(String, PathBuf), String> {
    match v.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_string(), PathBuf::from(path)))
        }
        _ => Err(format!(
            "{v:?}: write a worker as NAME=FILE (NAME is its MultiKueueCluster's name)"
        )),
    }
}

/// `--until`: a Go duration (`90s`, `2m`, `1h30m`) in milliseconds.
fn parse_until(v: &str) -> Result<i64, String> {
    kubetrain_kueue::model::parse_go_duration_ms(v)
        .filter(|ms| *ms >= 0)
        .ok_or_else(|| format!("{v:?} is not a duration (write it as 90s, 2m or 1h30m)"))
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
    /// The workload, as NAMESPACE/NAME or NAME (when one namespace holds it): a Workload, or a
    /// TrainJob (its Workload is `trainjob-NAME`), a Job (`job-NAME`) or a JobSet (`jobset-NAME`).
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
    #[arg(long, required_unless_present = "random", conflicts_with = "random")]
    config: Option<PathBuf>,
    /// Instead of a config: N small random scenarios (flavors, cohorts, limits, preemption
    /// policies, priorities), each in its own namespace `s<i>` with its own object names.
    #[arg(long, value_name = "N")]
    random: Option<usize>,
    /// Seed of `--random` (the same seed gives the same scenarios).
    #[arg(long, default_value_t = 1, requires = "random")]
    seed: u64,
}

/// A loaded setup, per TrainJob (`namespace/name`) the key of its Workload, and where MultiKueue sent
/// the manager's workloads.
struct Loaded {
    setup: Setup,
    trainjobs: Vec<(String, String)>,
    multikueue: multikueue::Report,
}

fn load(args: &SetupArgs) -> Result<Loaded> {
    let mut setup = Setup::default();
    for f in &input::expand(&args.files)? {
        let text = input::read(f)?;
        setup.add_yaml(&input::display_name(f), &text)?;
    }
    setup.expand_generators();
    for s in &setup.skipped {
        eprintln!("note: {s} is not part of the admission model; skipped");
    }
    let mut workers = multikueue::split_workers(&mut setup);
    for (name, path) in &args.workers {
        let worker = workers.entry(name.clone()).or_default();
        for f in &input::expand(std::slice::from_ref(path))? {
            let text = input::read(f)?;
            worker
                .add_yaml(&input::display_name(f), &text)
                .with_context(|| format!("worker {name}"))?;
        }
        worker.expand_generators();
    }
    let mut trainjobs = Vec::new();
    let worker_trainjobs = workers.values().any(|w| !w.trainer_documents.is_empty());
    if !setup.trainer_documents.is_empty() || !args.runtimes.is_empty() || worker_trainjobs {
        let mut catalog = RuntimeCatalog::new();
        for path in &input::expand(&args.runtimes)? {
            let text = input::read(path)?;
            let docs =
                parse_documents(&text).with_context(|| input::display_name(path).to_string())?;
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
        for (name, worker) in workers.iter_mut() {
            kubetrain_kueue::trainjob::add_trainjobs(worker, &mut catalog)
                .with_context(|| format!("worker {name}"))?;
        }
    }
    let multikueue = multikueue::dispatch(&mut setup, &workers)?;
    Ok(Loaded {
        setup,
        trainjobs,
        multikueue,
    })
}

/// A simulation's outcome, the TrainJobs' Workload keys and where MultiKueue sent the workloads.
type Ran = (SimOutcome, Vec<(String, String)>, multikueue::Report);

fn run_setup(args: &SetupArgs) -> Result<Ran> {
    let Loaded {
        setup,
        trainjobs,
        multikueue,
    } = load(args)?;
    let scenario = setup.scenario.clone().unwrap_or_default();
    let model = Model::build(&setup)?;
    let stop = Stop {
        cycles: args.cycles,
        until_ms: args.until,
    };
    Ok((
        simulate_until(Scheduler::new(model), &scenario, stop),
        trainjobs,
        multikueue,
    ))
}

/// The text of `queue simulate`: every workload (up to `limit`) with the ClusterQueue it is admitted to or
/// waits in (as `explain` names it), then the figures, durations written for people.
fn simulation_table(o: &SimOutcome, limit: usize) -> String {
    let s = &o.sched;
    let index: std::collections::HashMap<&str, usize> = s
        .model()
        .workloads
        .iter()
        .enumerate()
        .map(|(i, w)| (w.key.as_str(), i))
        .collect();
    let reports = workloads(s);
    let mut table = Table::new(&["WORKLOAD", "STATE", "CLUSTERQUEUE", "MESSAGE"]);
    for w in reports.iter().take(limit) {
        // The condition that says most about the state: Finished, else QuotaReserved (a
        // workload still to come says when it arrives).
        let arrives = w
            .arrival_ms
            .map(|t| format!("arrives at {}", human_ms(t as f64)));
        let message = arrives.as_deref().unwrap_or_else(|| {
            ["Finished", "QuotaReserved"]
                .iter()
                .find_map(|t| w.conditions.iter().find(|c| c.type_ == *t))
                .map_or("", |c| c.message.as_str())
        });
        // A pending workload has no admission; it waits in the ClusterQueue of its LocalQueue.
        let queue = w.cluster_queue.clone().or_else(|| {
            let target = &s.model().workloads[*index.get(w.key.as_str())?].target;
            match target {
                QueueTarget::Queue(cq) => Some(s.model().cqs[*cq].name.clone()),
                QueueTarget::Blocked(..) => None,
            }
        });
        // A partial admission (an elastic TrainJob below maxNodes) says how many pods or nodes it got.
        let partial = index
            .get(w.key.as_str())
            .map(|&i| kubetrain_kueue::explain::partial_admission(s, i))
            .unwrap_or_default();
        let message = if partial.is_empty() || arrives.is_some() {
            message.to_owned()
        } else {
            format!("{message}; {}", partial.join("; "))
        };
        table.row(&[
            w.key.as_str(),
            w.state.as_str(),
            queue.as_deref().unwrap_or("-"),
            message.as_str(),
        ]);
    }
    let mut out = table.render();
    if reports.len() > limit {
        out.push_str(&format!("... {} more workloads\n", reports.len() - limit));
    }
    let m = &o.metrics;
    out.push_str(&format!(
        "\ncycles {}   simulated {}   preemptions {}\n",
        o.cycles,
        human_ms(m.elapsed_ms as f64),
        m.preemptions
    ));
    if let Some(period) = o.repeating_every {
        out.push_str(&format!(
            "stopped on a livelock: the state, pending events included, repeats every {period} cycles\n"
        ));
    }
    if !m.classes.is_empty() {
        let mut classes = Table::new(&[
            "CLASS",
            "WORKLOADS",
            "ADMITTED",
            "WAIT MEAN",
            "P50",
            "P90",
            "MAX",
        ])
        .right_aligned(&[1, 2, 3, 4, 5, 6]);
        for (class, st) in &m.classes {
            classes.row(&[
                class.clone(),
                st.workloads.to_string(),
                st.admitted.to_string(),
                human_ms(st.mean_ms),
                human_ms(st.p50_ms as f64),
                human_ms(st.p90_ms as f64),
                human_ms(st.max_ms as f64),
            ]);
        }
        out.push('\n');
        out.push_str(&classes.render());
    }
    out.push_str(&format!(
        "\nmean ClusterQueue utilization {:.1}%\n",
        m.mean_utilization_pct
    ));
    if let Some(c) = &m.cost {
        out.push_str(&format!(
            "cost: compute {:.2}, idle {:.2}, preempted runs {:.2}, accepted {}, effective per accepted {:.4}\n",
            c.compute, c.idle, c.preempted_runs, c.accepted, c.effective_per_accepted
        ));
    }
    out
}

/// Runs `kubetrain queue`.
pub(crate) fn run(args: QueueArgs) -> Result<ExitCode> {
    match args.command {
        QueueCommand::Simulate(a) => {
            let (outcome, _, _) = run_setup(&a.setup)?;
            match a.output {
                Output::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&simulation_report(&outcome))?
                ),
                Output::Table => print!("{}", simulation_table(&outcome, 200)),
            }
            if let Some(path) = &a.html {
                std::fs::write(path, html(&outcome, "kubetrain queue simulation"))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
        QueueCommand::Explain(a) => {
            let (outcome, trainjobs, mk) = run_setup(&a.setup)?;
            let s = &outcome.sched;
            let wl = find_workload(s, &trainjobs, &a.workload)?;
            let e = explain(s, wl);
            // Where MultiKueue sent it (a manager's workload of a ClusterQueue with a MultiKueue check).
            let dispatch = mk.find(&s.model().workloads[wl].key);
            match a.output {
                Output::Json => {
                    let mut v = serde_json::to_value(&e)?;
                    if let (Some(d), Some(obj)) = (dispatch, v.as_object_mut()) {
                        obj.insert("multiKueue".into(), serde_json::to_value(d)?);
                    }
                    println!("{}", serde_json::to_string_pretty(&v)?);
                }
                Output::Table => {
                    print!("{}", e.to_text());
                    if let Some(d) = dispatch {
                        print!("{}", d.to_text());
                    }
                }
            }
        }
        QueueCommand::Generate(a) => {
            let Some(config) = &a.config else {
                let n = a.random.unwrap_or(0);
                print!(
                    "{}",
                    kubetrain_kueue::sim::random::scenarios(n, a.seed).to_yaml()
                );
                return Ok(ExitCode::SUCCESS);
            };
            let text = std::fs::read_to_string(config)
                .with_context(|| format!("reading {}", config.display()))?;
            let mut setup = Setup::default();
            setup.add_yaml(&config.display().to_string(), &text)?;
            if setup.generators.is_empty() {
                bail!(
                    "{}: no generator config (a document with `cohorts:`) found",
                    config.display()
                );
            }
            let generators: Vec<GeneratorConfig> = std::mem::take(&mut setup.generators);
            let mut out = Setup {
                generators,
                ..Setup::default()
            };
            out.expand_generators();
            // Node pools of a QueueScenario in the config become Nodes (TAS inventories).
            out.nodes = setup
                .scenario
                .iter()
                .flat_map(|s| &s.node_pools)
                .flat_map(|p| p.nodes())
                .collect();
            print!("{}", out.to_yaml());
        }
    }
    Ok(ExitCode::SUCCESS)
}
