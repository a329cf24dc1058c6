//! `kubetrain run`: a TrainJob on this machine with the LocalProcess backend — every pod a local process
//! with the env a cluster would give it, logs prefixed by pod, a progress line and a final summary.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use kubetrain_api::{Document, RuntimeCatalog};
use kubetrain_client::QueueError;
use kubetrain_client::local::capacity::Capacity;
use kubetrain_client::local::queue::{LocalQueue, Pending, QueueingStrategy, Ticket};
use kubetrain_client::local::{self, LocalOptions, PodPhase, RunEvent, RunSummary};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;

/// `kubetrain run` arguments.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The TrainJob (YAML or JSON; the first TrainJob of the file runs); `-` reads stdin. Runtimes in the file
    /// are used too.
    #[arg(short = 'f', long = "filename", value_name = "TRAINJOB.yaml")]
    file: PathBuf,
    /// TrainingRuntime / ClusterTrainingRuntime documents; repeatable. Built-in runtimes fill in the rest.
    #[arg(long = "runtime", value_name = "RUNTIMES.yaml")]
    runtimes: Vec<PathBuf>,
    /// Run directory (`/workspace` of every pod maps to DIR/workspace); default a new
    /// `$TMPDIR/kubetrain-runs/<namespace>/<name>/<run id>` per run. A second run of the same
    /// namespace/name (or into the same DIR) while one is in progress is refused.
    #[arg(long, value_name = "DIR")]
    run_dir: Option<PathBuf>,
    /// Keep declared container ports as they are instead of giving each a free local port.
    #[arg(long)]
    keep_ports: bool,
    /// Skip the capacity check and the local queue (this machine as a Kueue ClusterQueue: too few GPUs
    /// refuse the job, a job that does not fit next to the running ones waits).
    #[arg(long)]
    ignore_capacity: bool,
    /// Start at once instead of waiting in the local queue for the runs admitted before (the capacity check
    /// still applies).
    #[arg(long)]
    no_queue: bool,
    /// Give up (exit 1) when the job is not admitted within DURATION (`90s`, `5m`, `1h`, `500ms`; a bare
    /// number is seconds). Default: wait for ever.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    queue_timeout: Option<Duration>,
    /// The local queue's ledger directory, shared by every `kubetrain run` that should queue together;
    /// default `$TMPDIR/kubetrain-runs/queue-<uid>`.
    #[arg(long, value_name = "DIR", env = "KUBETRAIN_QUEUE_DIR")]
    queue_dir: Option<PathBuf>,
    /// Kueue's queueing strategy of the local ClusterQueue: BestEffortFIFO (a run that fits may pass one
    /// that does not) or StrictFIFO.
    #[arg(long, value_name = "STRATEGY", default_value = "BestEffortFIFO")]
    queueing_strategy: QueueingStrategy,
    /// The capacity runs share instead of this machine's, e.g. `cpu=8,memory=32Gi,gpu=1` (what is not
    /// given stays as detected).
    #[arg(long, value_name = "cpu=N,memory=Q,gpu=N", value_parser = parse_capacity)]
    capacity: Option<CapacityOverride>,
    /// Seconds between progress lines while nothing else happens.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    progress_every: u64,
}

/// `90s`, `5m`, `1h`, `500ms`, or a number of seconds.
fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (use 90s, 5m, 1h or 500ms)"))?;
    let seconds = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "{text:?}: unknown unit {unit:?} (use ms, s, m or h)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// `--capacity`: the parts of the capacity given on the command line.
#[derive(Clone, Debug, Default)]
pub(crate) struct CapacityOverride {
    cpu: Option<u64>,
    memory: Option<u64>,
    gpus: Option<u64>,
}

impl CapacityOverride {
    fn apply(&self, mut capacity: Capacity) -> Capacity {
        capacity.cpu = self.cpu.unwrap_or(capacity.cpu);
        capacity.memory = self.memory.or(capacity.memory);
        capacity.gpus = self.gpus.unwrap_or(capacity.gpus);
        capacity
    }
}

/// `cpu=8,memory=32Gi,gpu=1` (any subset).
fn parse_capacity(text: &str) -> std::result::Result<CapacityOverride, String> {
    let mut out = CapacityOverride::default();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: expected KEY=VALUE (cpu=8,memory=32Gi,gpu=1)"))?;
        let count = |what: &str| {
            value
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{key}: {value:?} is not a whole number of {what}"))
        };
        match key.trim() {
            "cpu" => out.cpu = Some(count("cores")?),
            "gpu" | "gpus" | "nvidia.com/gpu" => out.gpus = Some(count("GPUs")?),
            "memory" => {
                let q = kubetrain_kueue::quantity::Quantity::parse(value.trim())
                    .map_err(|e| format!("memory: {value:?}: {e}"))?;
                let bytes = q.amount_for("memory");
                out.memory = Some(
                    u64::try_from(bytes)
                        .map_err(|_| format!("memory: {value:?} is out of range"))?,
                );
            }
            other => {
                return Err(format!(
                    "unknown resource {other:?} (use cpu, memory or gpu)"
                ));
            }
        }
    }
    Ok(out)
}

fn catalog(paths: &[PathBuf]) -> Result<RuntimeCatalog> {
    let mut catalog = kubetrain_jobset::builtin::catalog();
    for path in paths {
        let text = super::read_input(path)?;
        let docs = kubetrain_api::parse_documents(&text)
            .with_context(|| format!("parsing {}", path.display()))?;
        for doc in &docs {
            if !matches!(
                doc.document,
                Document::TrainingRuntime(_) | Document::ClusterTrainingRuntime(_)
            ) {
                continue;
            }
            catalog.add_document(&doc.document);
        }
    }
    Ok(catalog)
}

/// Counts pods per phase and prints the progress line.
struct Progress {
    phases: Vec<(String, PodPhase)>,
    start: Instant,
}

impl Progress {
    fn set(&mut self, pod: &str, phase: PodPhase) {
        if let Some(slot) = self.phases.iter_mut().find(|(p, _)| p == pod) {
            slot.1 = phase;
        }
    }

    fn line(&self) -> String {
        let n = |ph: PodPhase| self.phases.iter().filter(|(_, p)| *p == ph).count();
        format!(
            "pods: {} pending, {} running, {} succeeded, {} failed  [{:.1}s]",
            n(PodPhase::Pending),
            n(PodPhase::Running),
            n(PodPhase::Succeeded),
            n(PodPhase::Failed),
            self.start.elapsed().as_secs_f64()
        )
    }
}

/// Prints the pods and the outcome; `no_trainer` when the job had no trainer pod at all (`numNodes: 0`), which
/// a bare "Complete" would hide.
fn print_summary(summary: &RunSummary, no_trainer: bool) {
    println!();
    println!("{:<40} {:<10} {:<24} DURATION", "POD", "PHASE", "EXIT");
    for p in &summary.pods {
        println!(
            "{:<40} {:<10} {:<24} {}",
            p.name,
            p.phase.as_str(),
            p.detail.as_deref().unwrap_or("-"),
            p.duration
                .map_or("-".to_string(), |d| format!("{:.1}s", d.as_secs_f64()))
        );
    }
    if let Some(failed) = summary.failed_pod() {
        println!();
        println!(
            "last {} log lines of {}:",
            failed.log_tail.len(),
            failed.name
        );
        for line in &failed.log_tail {
            println!("  {line}");
        }
    }
    println!();
    let restarts = match summary.restarts {
        0 => String::new(),
        n => format!(", {n} restarts"),
    };
    let nothing_ran = if no_trainer {
        " (no trainer pod ran: numNodes is 0, so nothing was trained)"
    } else {
        ""
    };
    println!(
        "TrainJob {} {}{nothing_ran} in {:.1}s{restarts}: {}",
        summary.name,
        summary.status,
        summary.elapsed.as_secs_f64(),
        summary.message
    );
}

/// The rendezvous env of a pod's first container, shown when it starts (`PET_NODE_RANK=1 ...`).
fn rank_env(pod: &local::PodPlan) -> String {
    const SHOWN: &[&str] = &[
        "PET_NNODES",
        "PET_NODE_RANK",
        "PET_NPROC_PER_NODE",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
        "JAX_NUM_PROCESSES",
        "JAX_PROCESS_ID",
        "JAX_COORDINATOR_ADDRESS",
        "WORLD_SIZE",
        "RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
    ];
    let Some(c) = pod.containers.first() else {
        return String::new();
    };
    let vars: Vec<String> = c
        .env
        .iter()
        .filter(|(k, _)| SHOWN.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if vars.is_empty() {
        String::new()
    } else {
        format!("({})", vars.join(" "))
    }
}

/// Waits until the local queue admits the run, printing `Pending: <reason> (position i of n waiting)` when
/// the reason or position changes and every `progress_every` seconds; `Err` holds the exit code when the wait
/// timed out (1) or was interrupted (130).
async fn wait_in_queue(
    mut ticket: Ticket,
    progress_every: u64,
    interrupt: &mut Signal,
) -> std::result::Result<Ticket, ExitCode> {
    let start = Instant::now();
    let every = Duration::from_secs(progress_every.max(1));
    let mut shown: Option<(Pending, Instant)> = None;
    let waited = tokio::select! {
        r = ticket.wait(|pending| {
            let due = shown
                .as_ref()
                .is_none_or(|(last, at)| last != pending || at.elapsed() >= every);
            if due {
                println!("Pending: {pending}  [{:.1}s]", start.elapsed().as_secs_f64());
                shown = Some((pending.clone(), Instant::now()));
            }
        }) => r,
        _ = interrupt.recv() => {
            eprintln!("interrupted while waiting in the local queue");
            return Err(ExitCode::from(130));
        }
    };
    for notice in ticket.take_notices() {
        eprintln!("note: {notice}");
    }
    match waited {
        Ok(()) => {
            if shown.is_some() {
                println!(
                    "admitted by the local queue after {:.1}s",
                    start.elapsed().as_secs_f64()
                );
            }
            Ok(ticket)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

/// Runs `kubetrain run`.
pub(crate) fn run(args: RunArgs) -> Result<ExitCode> {
    let yaml = super::read_input(&args.file)?;
    let catalog = catalog(&args.runtimes)?;
    let options = LocalOptions {
        run_dir: args.run_dir.clone(),
        // `kubetrain` in a container command is this very binary, so no install is needed.
        kubetrain_exe: Some(std::env::current_exe().context("locating the kubetrain binary")?),
        remap_ports: !args.keep_ports,
        run_id: None,
    };
    // Orphans of the pods (a daemon that left its container's process group) come back to this process,
    // which stops them when the run ends or is interrupted.
    local::reaper::adopt_orphans();
    let mut plan = local::prepare(&yaml, &catalog, &options)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // Ctrl-C is caught from before the run joins the queue: a SIGINT that arrived between booking the
    // ledger entry and the first wait would otherwise kill the process with its entry still booked.
    let mut interrupt = {
        let _context = runtime.enter();
        signal(SignalKind::interrupt()).context("installing the Ctrl-C handler")?
    };
    let mut ticket = None;
    if !args.ignore_capacity {
        let capacity = args
            .capacity
            .clone()
            .unwrap_or_default()
            .apply(Capacity::of_this_machine());
        let refused = |why: &str| {
            eprintln!(
                "error: TrainJob {} cannot run on this machine: {why}",
                plan.name
            );
            eprintln!("(use --ignore-capacity to start it anyway)");
            Ok(ExitCode::FAILURE)
        };
        if args.no_queue {
            match local::capacity::check(&plan, &capacity) {
                Ok(Some(warning)) => plan.notices.push(warning),
                Ok(None) => {}
                Err(why) => return refused(&why),
            }
        } else {
            let queue = LocalQueue::new(
                args.queue_dir
                    .clone()
                    .unwrap_or_else(LocalQueue::default_dir),
                capacity,
            )
            .with_strategy(args.queueing_strategy)
            .with_timeout(args.queue_timeout);
            match queue.enqueue(&plan) {
                Ok(mut t) => {
                    plan.notices.extend(t.take_notices());
                    ticket = Some(t);
                }
                Err(QueueError::NeverFits(why)) => return refused(&why),
                Err(e) => {
                    return Err(e).context(
                        "queueing the run in the local queue (choose another ledger with --queue-dir, \
                         or start without queueing with --no-queue)",
                    );
                }
            }
        }
    }
    // Holding the ticket (and booking it again should the ledger be rebuilt) holds the run's share of
    // the machine until the run ends.
    let mut ticket = match ticket {
        Some(t) => match runtime.block_on(wait_in_queue(t, args.progress_every, &mut interrupt)) {
            Ok(t) => Some(t),
            Err(code) => return Ok(code),
        },
        None => None,
    };
    let width = plan.pods().map(|p| p.name.len()).max().unwrap_or(0);
    let rank_env: Vec<(String, String)> =
        plan.pods().map(|p| (p.name.clone(), rank_env(p))).collect();
    println!(
        "running TrainJob {}/{} locally: {} pods, run {}, run directory {} (the pods' /workspace is {}); \
         logs follow, one line per log line prefixed by its pod",
        plan.namespace,
        plan.name,
        plan.pods().count(),
        plan.run_id,
        plan.run_dir.display(),
        plan.run_dir.join("workspace").display()
    );
    let summary = runtime.block_on(async {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut progress = Progress {
            phases: plan
                .pods()
                .map(|p| (p.name.clone(), PodPhase::Pending))
                .collect(),
            start: Instant::now(),
        };
        let every = Duration::from_secs(args.progress_every.max(1));
        let printer = tokio::spawn(async move {
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tokio::select! {
                    e = rx.recv() => match e {
                        Some(RunEvent::Notice(n)) => eprintln!("note: {n}"),
                        Some(RunEvent::PodStarted { pod }) => {
                            progress.set(&pod, PodPhase::Running);
                            let env = rank_env.iter().find(|(p, _)| *p == pod).map_or("", |(_, e)| e.as_str());
                            println!("{pod:>width$} | started {env}");
                            println!("{}", progress.line());
                        }
                        Some(RunEvent::Log(l)) => println!("{:>width$} | {}", l.pod, l.line),
                        Some(RunEvent::PodFinished { pod, phase, detail }) => {
                            progress.set(&pod, phase);
                            println!("{pod:>width$} | {} ({detail})", phase.as_str());
                            println!("{}", progress.line());
                        }
                        Some(RunEvent::Restarting { attempt, reason }) => {
                            for (_, p) in &mut progress.phases {
                                *p = PodPhase::Pending;
                            }
                            println!("restart {attempt}: {reason}");
                        }
                        None => break,
                    },
                    _ = ticker.tick() => println!("{}", progress.line()),
                }
            }
        });
        let cancel = async {
            if interrupt.recv().await.is_some() {
                eprintln!("interrupted: stopping every pod");
            } else {
                std::future::pending::<()>().await;
            }
        };
        let summary = match &mut ticket {
            Some(t) => t.hold_while(local::execute(&plan, &tx, cancel)).await,
            None => local::execute(&plan, &tx, cancel).await,
        };
        drop(tx);
        let _ = printer.await;
        summary
    });
    let no_trainer = plan
        .replicated_jobs
        .iter()
        .filter(|r| r.name == kubetrain_api::constants::NODE)
        .all(|r| r.pods.is_empty());
    print_summary(&summary, no_trainer);
    Ok(match (summary.cancelled, summary.status) {
        (true, _) => ExitCode::from(130),
        (false, kubetrain_client::JobStatus::Complete) => ExitCode::SUCCESS,
        (false, _) => ExitCode::FAILURE,
    })
}
