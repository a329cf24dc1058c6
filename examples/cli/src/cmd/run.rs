//! `kubetrain run`: a TrainJob on this machine with the LocalProcess backend — every pod a local process
//! with the env a cluster would give it, logs prefixed by pod, a progress line, the training code's
//! progress (a bar with ETA and metrics) and a final summary. Every run keeps a record and its pods' logs
//! in its directory ([`local::record`]); `--detach` runs it in the background.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use kubetrain_api::{RuntimeCatalog, RuntimeEntry, TrainJob};
use kubetrain_client::QueueError;
use kubetrain_client::local::capacity::Capacity;
use kubetrain_client::local::queue::{LocalQueue, Pending, QueueingStrategy, Ticket};
use kubetrain_client::local::record::Recorder;
use kubetrain_client::local::{self, LocalOptions, PodPhase, RunEvent, RunSummary};
use kubetrain_client::types::TrainerProgress;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;

/// `kubetrain run` arguments.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The TrainJob (YAML or JSON); `-` reads stdin, a directory its .yaml, .yml and .json files;
    /// repeatable. Runtimes in them are used too. Exactly one TrainJob: a second one is an error.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "TRAINJOB.yaml",
        required = true
    )]
    files: Vec<PathBuf>,
    /// TrainingRuntime / ClusterTrainingRuntime documents (files or directories); repeatable. Built-in
    /// runtimes fill in the rest.
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
    #[arg(long, value_name = "DURATION", value_parser = super::input::parse_duration)]
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
    /// Time between progress lines while nothing else happens (`10s`, `1m`; a bare number is seconds).
    #[arg(long, default_value_t = 10, value_name = "DURATION", value_parser = super::input::parse_seconds)]
    progress_every: u64,
    /// Start the run in the background and return at once, printing its id and directory; come back to
    /// it with `kubetrain get|list|logs|wait|delete --local`.
    #[arg(short = 'd', long)]
    detach: bool,
    /// The run id (chosen by `--detach` for the background run).
    #[arg(long, hide = true, value_name = "ID")]
    run_id: Option<String>,
    /// Set on the background run started by `--detach`: it outlives the terminal.
    #[arg(long, hide = true)]
    detached: bool,
}

/// `--capacity`: the parts of the capacity given on the command line.
#[derive(Clone, Debug, Default)]
pub(crate) struct CapacityOverride {
    cpu: Option<u64>,
    memory: Option<u64>,
    gpus: Option<u64>,
}

impl CapacityOverride {
    /// The `--capacity` text that gives this override again.
    fn to_arg(&self) -> String {
        let mut parts = Vec::new();
        if let Some(c) = self.cpu {
            parts.push(format!("cpu={c}"));
        }
        if let Some(m) = self.memory {
            parts.push(format!("memory={m}"));
        }
        if let Some(g) = self.gpus {
            parts.push(format!("gpu={g}"));
        }
        parts.join(",")
    }

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
                let bytes = q.count_for("memory");
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

/// The training code's last report as one line: `[########------------]  40%  ETA 10m00s  loss=0.25 step=40`.
fn progress_bar(p: &TrainerProgress) -> String {
    const WIDTH: usize = 20;
    let mut line = match p.progress_percentage {
        Some(percent) => {
            let percent = percent.clamp(0, 100);
            let filled = percent as usize * WIDTH / 100;
            format!(
                "[{}{}] {percent:>3}%",
                "#".repeat(filled),
                "-".repeat(WIDTH - filled)
            )
        }
        None => format!("[{}]    ?", "-".repeat(WIDTH)),
    };
    if let Some(seconds) = p.estimated_remaining_seconds {
        line.push_str(&format!("  ETA {}", eta(seconds)));
    }
    if !p.metrics.is_empty() {
        let metrics: Vec<String> = p
            .metrics
            .iter()
            .map(|m| format!("{}={}", m.name, m.value))
            .collect();
        line.push_str("  ");
        line.push_str(&metrics.join(" "));
    }
    line
}

/// `1h02m`, `5m07s`, `42s`.
fn eta(seconds: i32) -> String {
    let s = seconds.max(0);
    let (h, m, sec) = (s / 3600, s % 3600 / 60, s % 60);
    if h > 0 {
        format!("{h}h{m:02}m")
    } else if m > 0 {
        format!("{m}m{sec:02}s")
    } else {
        format!("{sec}s")
    }
}

/// Output while the pods run: log lines scroll above a progress bar kept on the terminal's last line when
/// stdout is a terminal; plain `progress: ...` lines otherwise (pipes, files, CI logs).
struct Screen {
    tty: bool,
    bar: Option<String>,
}

impl Screen {
    fn new() -> Self {
        use std::io::IsTerminal;
        Screen {
            tty: std::io::stdout().is_terminal(),
            bar: None,
        }
    }

    fn take_down(&self) {
        if self.tty && self.bar.is_some() {
            print!("\r\x1b[2K");
        }
    }

    fn put_up(&self) {
        use std::io::Write;
        if let (true, Some(bar)) = (self.tty, &self.bar) {
            // The bar fits the line, so the next redraw erases all of it.
            let columns = std::env::var("COLUMNS")
                .ok()
                .and_then(|c| c.parse::<usize>().ok())
                .unwrap_or(80);
            let shown: String = bar.chars().take(columns.saturating_sub(1)).collect();
            print!("{shown}");
            let _ = std::io::stdout().flush();
        }
    }

    fn println(&self, text: &str) {
        self.take_down();
        println!("{text}");
        self.put_up();
    }

    fn eprintln(&self, text: &str) {
        self.take_down();
        eprintln!("{text}");
        self.put_up();
    }

    fn progress(&mut self, p: &TrainerProgress) {
        let line = format!("progress: {}", progress_bar(p));
        if self.tty {
            self.take_down();
            self.bar = Some(line);
            self.put_up();
        } else {
            println!("{line}");
        }
    }

    fn finish(&mut self) {
        self.take_down();
        self.bar = None;
    }
}

/// Prints the pods and the outcome; `no_trainer` when the job had no trainer pod at all (`numNodes: 0`), which
/// a bare "Complete" would hide.
fn print_summary(summary: &RunSummary, no_trainer: bool) {
    println!();
    // Columns as wide as their widest cell: long TrainJob names make long pod names.
    let mut table = super::input::Table::new(&["POD", "PHASE", "EXIT", "DURATION"]);
    for p in &summary.pods {
        table.row(&[
            p.name.as_str(),
            p.phase.as_str(),
            p.detail.as_deref().unwrap_or("-"),
            &p.duration
                .map_or("-".to_string(), |d| format!("{:.1}s", d.as_secs_f64())),
        ]);
    }
    print!("{}", table.render());
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
    if let Some(p) = &summary.trainer_status {
        println!("last progress report: {}", p.summary());
    }
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
    stops: &mut Stops,
    recorder: &mut Option<Recorder>,
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
                if let Some(r) = recorder.as_mut() {
                    let _ = r.pending(&pending.to_string());
                }
                shown = Some((pending.clone(), Instant::now()));
            }
        }) => r,
        _ = stops.recv() => {
            eprintln!("interrupted while waiting in the local queue");
            if let Some(r) = recorder.as_mut() {
                let _ = r.fail("interrupted while waiting in the local queue");
            }
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
            if let Some(r) = recorder.as_mut() {
                let _ = r.fail(&e.to_string());
            }
            Err(ExitCode::FAILURE)
        }
    }
}

/// Ctrl-C (SIGINT) and SIGTERM (`kubetrain delete --local`, `kill`): both stop every pod.
struct Stops {
    interrupt: Signal,
    terminate: Signal,
}

impl Stops {
    fn new() -> Result<Self> {
        Ok(Stops {
            interrupt: signal(SignalKind::interrupt()).context("installing the Ctrl-C handler")?,
            terminate: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
        })
    }

    /// The next stop request; never resolves once both streams are closed.
    async fn recv(&mut self) {
        let got = tokio::select! {
            s = self.interrupt.recv() => s,
            s = self.terminate.recv() => s,
        };
        if got.is_none() {
            std::future::pending::<()>().await;
        }
    }
}

/// The file the background run of `--detach` reads, in its run directory: the TrainJob, and its runtime
/// unless it is a built-in one.
pub(crate) const DETACHED_INPUT: &str = "trainjob.yaml";
/// Where the background run's own output goes, in its run directory.
pub(crate) const DETACHED_OUTPUT: &str = "run.log";

/// `--detach`: checks and plans the run here (so a bad TrainJob, a job already running or a GPU shortfall
/// is refused at once), then starts `kubetrain run` again in the background on the same run id, writing
/// its output to `<run dir>/run.log`, and returns.
fn detach(
    args: &RunArgs,
    job: &TrainJob,
    catalog: &RuntimeCatalog,
    options: &LocalOptions,
) -> Result<ExitCode> {
    let plan = local::prepare_job(job, catalog, options)?;
    if !args.ignore_capacity {
        let capacity = args
            .capacity
            .clone()
            .unwrap_or_default()
            .apply(Capacity::of_this_machine());
        if let Err(why) = local::capacity::check(&plan, &capacity) {
            eprintln!(
                "error: TrainJob {} cannot run on this machine: {why}",
                plan.name
            );
            eprintln!("(use --ignore-capacity to start it anyway)");
            return Ok(ExitCode::FAILURE);
        }
    }
    let mut documents =
        vec![kubetrain_api::to_yaml(job).context("writing the TrainJob for the background run")?];
    let builtin = kubetrain_jobset::builtin::catalog();
    let runtime_ref = &job.spec.runtime_ref;
    if let Ok(entry) = catalog.lookup(runtime_ref, &plan.namespace) {
        let is_builtin = builtin
            .lookup(runtime_ref, &plan.namespace)
            .is_ok_and(|b| b.spec() == entry.spec());
        if !is_builtin {
            documents.push(
                match entry {
                    RuntimeEntry::Cluster(r) => kubetrain_api::to_yaml(r),
                    RuntimeEntry::Namespaced(r) => kubetrain_api::to_yaml(r),
                }
                .context("writing the runtime for the background run")?,
            );
        }
    }
    let input = plan.run_dir.join(DETACHED_INPUT);
    std::fs::write(&input, documents.join("---\n"))
        .with_context(|| format!("writing {}", input.display()))?;
    let output_path = plan.run_dir.join(DETACHED_OUTPUT);
    let output = std::fs::File::create(&output_path)
        .with_context(|| format!("creating {}", output_path.display()))?;
    let (namespace, name, run_id, run_dir) = (
        plan.namespace.clone(),
        plan.name.clone(),
        plan.run_id.clone(),
        plan.run_dir.clone(),
    );
    let mut initial = local::record::RunRecord::of(&plan);
    // The background run takes the job's lock, ports and queue place itself.
    drop(plan);
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command
        .arg("run")
        .arg("-f")
        .arg(&input)
        .args(["--run-id", &run_id, "--detached"])
        .args(["--progress-every", &args.progress_every.to_string()])
        .args(["--queueing-strategy", &args.queueing_strategy.to_string()]);
    if let Some(dir) = &args.run_dir {
        command.arg("--run-dir").arg(dir);
    }
    if let Some(dir) = &args.queue_dir {
        command.arg("--queue-dir").arg(dir);
    }
    if let Some(timeout) = args.queue_timeout {
        command.args(["--queue-timeout", &format!("{}ms", timeout.as_millis())]);
    }
    if let Some(capacity) = &args.capacity {
        command.args(["--capacity", &capacity.to_arg()]);
    }
    for (set, flag) in [
        (args.keep_ports, "--keep-ports"),
        (args.ignore_capacity, "--ignore-capacity"),
        (args.no_queue, "--no-queue"),
    ] {
        if set {
            command.arg(flag);
        }
    }
    use std::os::unix::process::CommandExt;
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output)
        // Its own process group: the terminal's Ctrl-C is not for it.
        .process_group(0)
        .spawn()
        .context("starting the background run")?;
    initial.pid = child.id();
    local::record::publish_initial(&initial)
        .with_context(|| format!("writing the run's record in {}", run_dir.display()))?;
    println!(
        "TrainJob {namespace}/{name} runs in the background: run {run_id}, pid {}, run directory {}",
        child.id(),
        run_dir.display()
    );
    println!("  kubetrain get {name} --local         status, steps and progress");
    println!("  kubetrain logs {name} --local -f     follow node-0's log (--step for another pod)");
    println!("  kubetrain wait {name} --local        wait until it completes");
    println!("  kubetrain delete {name} --local      stop it and remove its runs");
    Ok(ExitCode::SUCCESS)
}

/// Runs `kubetrain run`.
pub(crate) fn run(args: RunArgs) -> Result<ExitCode> {
    // Checked as `validate` checks: every error of every document, invalid runtimes named as such.
    let (job, catalog) = super::input::trainjob_to_run(&args.files, &args.runtimes)?;
    let options = LocalOptions {
        run_dir: args.run_dir.clone(),
        // `kubetrain` in a container command is this very binary, so no install is needed.
        kubetrain_exe: Some(std::env::current_exe().context("locating the kubetrain binary")?),
        remap_ports: !args.keep_ports,
        run_id: args.run_id.clone(),
    };
    if args.detach {
        return detach(&args, &job, &catalog, &options);
    }
    // Orphans of the pods (a daemon that left its container's process group) come back to this process,
    // which stops them when the run ends or is interrupted.
    local::reaper::adopt_orphans();
    let mut plan = local::prepare_job(&job, &catalog, &options)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // Ctrl-C is caught from before the run joins the queue: a SIGINT that arrived between booking the
    // ledger entry and the first wait would otherwise kill the process with its entry still booked.
    let (mut stops, _hangup) = {
        let _context = runtime.enter();
        // The background run of `--detach` outlives its terminal: a hangup is received and ignored.
        let hangup = if args.detached {
            Some(signal(SignalKind::hangup()).context("ignoring SIGHUP")?)
        } else {
            None
        };
        (Stops::new()?, hangup)
    };
    // The record `kubetrain get|logs|wait --local` read; a run goes on without one.
    let mut recorder = match Recorder::new(&plan) {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!(
                "note: not keeping a record of this run in {}: {e}",
                plan.run_dir.display()
            );
            None
        }
    };
    let mut ticket = None;
    if !args.ignore_capacity {
        let capacity = args
            .capacity
            .clone()
            .unwrap_or_default()
            .apply(Capacity::of_this_machine());
        let name = plan.name.clone();
        let mut refused = |why: &str| {
            eprintln!("error: TrainJob {name} cannot run on this machine: {why}");
            eprintln!("(use --ignore-capacity to start it anyway)");
            if let Some(r) = recorder.as_mut() {
                let _ = r.fail(&format!("cannot run on this machine: {why}"));
            }
            Ok(ExitCode::FAILURE)
        };
        if args.no_queue {
            match local::capacity::check(&plan, &capacity) {
                Ok(Some(warning)) => plan.notices.push(warning),
                Ok(None) => {}
                Err(why) => return refused(&why.to_string()),
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
                Err(QueueError::NeverFits(why)) => return refused(&why.to_string()),
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
        Some(t) => match runtime.block_on(wait_in_queue(
            t,
            args.progress_every,
            &mut stops,
            &mut recorder,
        )) {
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
        let mut recorder = recorder.take();
        let printer = tokio::spawn(async move {
            let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            let mut screen = Screen::new();
            let mut record_failed = false;
            loop {
                let event = tokio::select! {
                    e = rx.recv() => match e {
                        Some(e) => e,
                        None => break,
                    },
                    _ = ticker.tick() => {
                        screen.println(&progress.line());
                        continue;
                    }
                };
                if let Some(r) = recorder.as_mut()
                    && let Err(e) = r.apply(&event)
                    && !record_failed
                {
                    record_failed = true;
                    screen.eprintln(&format!(
                        "note: the run's record or logs could not be written: {e}"
                    ));
                }
                match event {
                    RunEvent::Notice(n) => screen.eprintln(&format!("note: {n}")),
                    RunEvent::PodStarted { pod } => {
                        progress.set(&pod, PodPhase::Running);
                        let env = rank_env
                            .iter()
                            .find(|(p, _)| *p == pod)
                            .map_or("", |(_, e)| e.as_str());
                        screen.println(&format!("{pod:>width$} | started {env}"));
                        screen.println(&progress.line());
                    }
                    RunEvent::Log(l) => screen.println(&format!("{:>width$} | {}", l.pod, l.line)),
                    RunEvent::PodFinished { pod, phase, detail } => {
                        progress.set(&pod, phase);
                        screen.println(&format!("{pod:>width$} | {} ({detail})", phase.as_str()));
                        screen.println(&progress.line());
                    }
                    RunEvent::Restarting { attempt, reason } => {
                        for (_, p) in &mut progress.phases {
                            *p = PodPhase::Pending;
                        }
                        screen.println(&format!("restart {attempt}: {reason}"));
                    }
                    RunEvent::TrainerStatus(p) => screen.progress(&p),
                }
            }
            screen.finish();
            recorder
        });
        let cancel = async {
            stops.recv().await;
            eprintln!("interrupted: stopping every pod");
        };
        let summary = match &mut ticket {
            Some(t) => t.hold_while(local::execute(&plan, &tx, cancel)).await,
            None => local::execute(&plan, &tx, cancel).await,
        };
        drop(tx);
        if let Ok(Some(mut recorder)) = printer.await
            && let Err(e) = recorder.finish(&summary)
        {
            eprintln!("note: the run's record could not be written: {e}");
        }
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
