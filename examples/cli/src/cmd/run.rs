//! `kubetrain run`: a TrainJob on this machine with the LocalProcess backend — every pod a local process
//! with the env a cluster would give it, logs prefixed by pod, a progress line, the training code's
//! progress (a bar with ETA and metrics) and a final summary. Every run keeps a record and its pods' logs
//! in its directory ([`local::record`]); `--detach` runs it in the background.
//!
//! The terminal is only a view: every event goes to the record and the log files first (a thread of their
//! own), and the terminal gets what it can take (another thread, dropping log lines it cannot keep up
//! with). A closed stdout (`| head`) or a hangup (SIGHUP) ends the view, never the run; Ctrl-C and SIGTERM
//! stop every pod whatever the terminal does. Processes start in the directory `kubetrain run` was started
//! from (`--workdir` to choose another); runs larger than the machine can take are refused (`--force`).

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use kubetrain_api::{RuntimeCatalog, RuntimeEntry, TrainJob};
use kubetrain_client::JobStatus;
use kubetrain_client::local::capacity::Capacity;
use kubetrain_client::local::queue::QueueError;
use kubetrain_client::local::queue::{LocalQueue, Pending, QueueingStrategy, Ticket};
use kubetrain_client::local::record::Recorder;
use kubetrain_client::local::tree::create_private_file;
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
    /// Start the run in the background and return once it holds the job's lock and its pods started (or it
    /// waits in the local queue), printing its id and directory; a background run that ended at once is
    /// reported with its reason (exit 1). Come back to it with `kubetrain get|list|logs|wait|delete --local`.
    #[arg(short = 'd', long)]
    detach: bool,
    /// The run id (chosen by `--detach` for the background run).
    #[arg(long, hide = true, value_name = "ID")]
    run_id: Option<String>,
    /// Set on the background run started by `--detach`: it outlives the terminal.
    #[arg(long, hide = true)]
    detached: bool,
    /// The directory the pods' processes start in when their container sets no `workingDir`; default the
    /// current directory, so `command: [python3, train.py]` finds ./train.py. (`/workspace` is always
    /// `<run dir>/workspace`.)
    #[arg(long, value_name = "DIR")]
    workdir: Option<PathBuf>,
    /// Start a job larger than this machine can run: more than 64 processes per core, or more memory than
    /// it has (each pod counted at its memory request, at least 50 MiB).
    #[arg(long)]
    force: bool,
}

impl RunArgs {
    /// The capacity runs share: this machine's, with what `--capacity` gives.
    fn capacity(&self) -> Capacity {
        self.capacity
            .clone()
            .unwrap_or_default()
            .apply(Capacity::of_this_machine())
    }
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

/// The training code's last report as one line of at most `width` characters: `[########------------]  40%
/// ETA 10m00s  loss=0.25 step=40`, metrics that do not fit left out and marked `…`.
fn progress_bar(p: &TrainerProgress, width: usize) -> String {
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
    let metrics: Vec<String> = p
        .metrics
        .iter()
        .map(|m| format!("{}={}", m.name, m.value))
        .collect();
    super::input::fit_line(&line, "  ", &metrics, width)
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

/// The bytes of output the terminal view holds before it drops log lines (and says how many it dropped).
const VIEW_BYTES: usize = 4 << 20;

/// The longest part of a log line the terminal view shows; the log file has all of it.
const VIEW_LINE_BYTES: usize = 4096;

/// How long the runner, its job ended and recorded, waits for a terminal that takes no more output.
const VIEW_STALL: Duration = Duration::from_secs(10);

/// One thing for the terminal.
enum Shown {
    /// A line for stdout.
    Out(String),
    /// A line for stderr.
    Err(String),
    /// The progress line: kept on the last line of a terminal, a plain line elsewhere.
    Bar(String),
    /// The progress line is done with.
    EndBar,
    /// Log lines dropped because the terminal did not keep up.
    Dropped(u64),
}

#[derive(Default)]
struct ViewQueue {
    items: VecDeque<Shown>,
    /// The bytes of text in `items`.
    bytes: usize,
    /// No more items come; the view ends when the queue is empty.
    closed: bool,
    /// The terminal is gone (SIGHUP): nothing more is written.
    hung_up: bool,
}

struct ViewShared {
    queue: Mutex<ViewQueue>,
    ready: Condvar,
    /// Items written (or given up on), so a stalled terminal can be told from a slow one.
    written: AtomicU64,
    done: AtomicBool,
    /// Where the dropped lines can be read (`<run dir>/logs`), once known.
    logs: Mutex<Option<PathBuf>>,
}

/// The terminal view of a run: everything `kubetrain run` prints goes through it, to a thread of its own, so
/// a stalled or closed stdout never holds up the pods, the record or the signals. It is best-effort: when
/// the terminal does not keep up, log lines are dropped (and counted in a `... N log lines not shown` note;
/// the log files have every line); a write error (`kubetrain run | head`, a closed terminal) ends writing
/// to that stream; SIGHUP ends the view.
#[derive(Clone)]
struct View {
    shared: Arc<ViewShared>,
}

impl View {
    fn start() -> Self {
        let shared = Arc::new(ViewShared {
            queue: Mutex::new(ViewQueue::default()),
            ready: Condvar::new(),
            written: AtomicU64::new(0),
            done: AtomicBool::new(false),
            logs: Mutex::new(None),
        });
        let view = View { shared };
        let thread = view.clone();
        let started = std::thread::Builder::new()
            .name("terminal view".into())
            .spawn(move || thread.show());
        if started.is_err() {
            // No view at all is still a run: the record and logs are kept.
            view.shared.done.store(true, Ordering::SeqCst);
            view.hang_up();
        }
        view
    }

    fn push(&self, item: Shown, droppable: bool) {
        let Ok(mut q) = self.shared.queue.lock() else {
            return;
        };
        if q.hung_up || q.closed {
            return;
        }
        if droppable && q.bytes >= VIEW_BYTES {
            match q.items.back_mut() {
                Some(Shown::Dropped(n)) => *n += 1,
                _ => q.items.push_back(Shown::Dropped(1)),
            }
        } else {
            q.bytes += match &item {
                Shown::Out(t) | Shown::Err(t) | Shown::Bar(t) => t.len(),
                Shown::EndBar | Shown::Dropped(_) => 0,
            };
            q.items.push_back(item);
        }
        self.shared.ready.notify_one();
    }

    /// A line for stdout that is never dropped (few: pods starting and ending, the summary).
    fn out(&self, text: impl Into<String>) {
        self.push(Shown::Out(text.into()), false);
    }

    /// A line for stderr, never dropped.
    fn err(&self, text: impl Into<String>) {
        self.push(Shown::Err(text.into()), false);
    }

    /// A log line (or a periodic progress line): dropped when the terminal does not keep up.
    fn log(&self, text: impl Into<String>) {
        self.push(Shown::Out(text.into()), true);
    }

    fn bar(&self, text: String) {
        self.push(Shown::Bar(text), true);
    }

    fn end_bar(&self) {
        self.push(Shown::EndBar, false);
    }

    /// Where the log files are, for the note about dropped lines.
    fn set_logs(&self, dir: PathBuf) {
        if let Ok(mut logs) = self.shared.logs.lock() {
            *logs = Some(dir);
        }
    }

    /// The terminal is gone: stop writing, drop what waits.
    fn hang_up(&self) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.hung_up = true;
            q.items.clear();
            q.bytes = 0;
        }
        self.shared.ready.notify_all();
    }

    fn close(&self) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.closed = true;
        }
        self.shared.ready.notify_all();
    }

    fn hung_up(&self) -> bool {
        self.shared.queue.lock().map_or(true, |q| q.hung_up)
    }

    /// Waits until everything was written, the terminal went away, it took nothing for [`VIEW_STALL`], or
    /// a stop request came (Ctrl-C, SIGTERM): the run is over and recorded, only output is left.
    async fn finish(&self, stops: &mut Stops) {
        self.close();
        let mut last = (self.shared.written.load(Ordering::SeqCst), Instant::now());
        loop {
            if self.shared.done.load(Ordering::SeqCst) || self.hung_up() {
                return;
            }
            let written = self.shared.written.load(Ordering::SeqCst);
            if written != last.0 {
                last = (written, Instant::now());
            } else if last.1.elapsed() > VIEW_STALL {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
                () = stops.recv() => return,
            }
        }
    }

    /// The view's thread: writes every item in order, what is queued at once in one write; a stream that
    /// fails a write gets nothing more.
    fn show(&self) {
        let mut terminal = Terminal::new();
        while let Some(batch) = self.next_batch() {
            let count = batch.len() as u64;
            terminal.show(batch, |n| self.dropped_line(n));
            self.shared.written.fetch_add(count, Ordering::SeqCst);
        }
        terminal.take_bar_down();
        self.shared.done.store(true, Ordering::SeqCst);
    }

    /// Everything queued, once there is something; `None` when the queue is closed and empty or the terminal
    /// hung up.
    fn next_batch(&self) -> Option<VecDeque<Shown>> {
        let mut q = self.shared.queue.lock().ok()?;
        loop {
            if q.hung_up {
                return None;
            }
            if !q.items.is_empty() {
                q.bytes = 0;
                return Some(std::mem::take(&mut q.items));
            }
            if q.closed {
                return None;
            }
            q = self.shared.ready.wait(q).ok()?;
        }
    }

    /// The line that stands for `n` log lines the terminal did not keep up with.
    fn dropped_line(&self, n: u64) -> String {
        let logs = self
            .shared
            .logs
            .lock()
            .ok()
            .and_then(|l| l.clone())
            .map_or(String::new(), |l| {
                format!(" (every line is in {})", l.display())
            });
        let s = if n == 1 { "" } else { "s" };
        format!("... {n} log line{s} not shown: the terminal did not keep up{logs}\n")
    }
}

/// stdout and stderr as the view writes them: a progress bar kept on the last line of a terminal, and a
/// stream that failed a write (EPIPE from `| head`, EIO from a terminal that hung up) left alone after.
struct Terminal {
    tty: bool,
    /// The bar fits the line, so the next redraw erases all of it.
    columns: usize,
    out_ok: bool,
    err_ok: bool,
    bar: Option<String>,
}

impl Terminal {
    fn new() -> Self {
        use std::io::IsTerminal;
        let columns = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
            .unwrap_or(80);
        Self {
            tty: std::io::stdout().is_terminal(),
            columns,
            out_ok: true,
            err_ok: true,
            bar: None,
        }
    }

    fn write(&mut self, to_stderr: bool, text: &str) {
        use std::io::Write;
        let ok = if to_stderr {
            &mut self.err_ok
        } else {
            &mut self.out_ok
        };
        if !*ok || text.is_empty() {
            return;
        }
        let result = if to_stderr {
            let mut e = std::io::stderr().lock();
            e.write_all(text.as_bytes()).and_then(|()| e.flush())
        } else {
            let mut o = std::io::stdout().lock();
            o.write_all(text.as_bytes()).and_then(|()| o.flush())
        };
        // The view ends for this stream; the run goes on.
        if result.is_err() {
            *ok = false;
        }
    }

    /// Writes one batch, stdout in one write except where a stderr line must keep its place.
    fn show(&mut self, batch: VecDeque<Shown>, dropped_line: impl Fn(u64) -> String) {
        let mut out = String::new();
        for item in batch {
            // A line scrolls above the bar: take the bar down, write the line, put the bar back up.
            let redraw = self.tty && self.bar.is_some() && !matches!(item, Shown::Bar(_));
            if redraw {
                out.push_str("\r\x1b[2K");
            }
            match item {
                Shown::Out(text) => {
                    out.push_str(&text);
                    out.push('\n');
                }
                Shown::Err(text) => {
                    // In order with stdout: what came before goes first.
                    self.write(false, &std::mem::take(&mut out));
                    self.write(true, &format!("{text}\n"));
                }
                Shown::Dropped(n) => out.push_str(&dropped_line(n)),
                Shown::EndBar => self.bar = None,
                Shown::Bar(text) if self.tty => {
                    let shown: String = text.chars().take(self.columns.saturating_sub(1)).collect();
                    out.push_str(&format!("\r\x1b[2K{shown}"));
                    self.bar = Some(shown);
                }
                Shown::Bar(text) => {
                    out.push_str(&text);
                    out.push('\n');
                }
            }
            if let (true, Some(b)) = (redraw, &self.bar) {
                out.push_str(b);
            }
        }
        self.write(false, &out);
    }

    /// Erases a bar left on the last line.
    fn take_bar_down(&mut self) {
        if self.tty && self.bar.is_some() {
            self.write(false, "\r\x1b[2K");
        }
    }
}

/// At most [`VIEW_LINE_BYTES`] of `line`, cut between characters.
fn shortened(line: &str) -> &str {
    if line.len() <= VIEW_LINE_BYTES {
        return line;
    }
    let mut end = VIEW_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

/// Prints the pods and the outcome; `no_trainer` when the job had no trainer pod at all (`numNodes: 0`), which
/// a bare "Complete" would hide.
fn print_summary(view: &View, summary: &RunSummary, no_trainer: bool) {
    view.out("");
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
    for line in table.render().lines() {
        view.out(line);
    }
    if let Some(failed) = summary.failed_pod() {
        view.out("");
        view.out(format!(
            "last {} log lines of {}:",
            failed.log_tail.len(),
            failed.name
        ));
        for line in &failed.log_tail {
            view.out(format!("  {line}"));
        }
    }
    view.out("");
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
        view.out(format!("last progress report: {}", p.summary()));
    }
    view.out(format!(
        "TrainJob {} {}{nothing_ran} in {:.1}s{restarts}: {}",
        summary.name,
        summary.status,
        summary.elapsed.as_secs_f64(),
        summary.message
    ));
}

/// When a pod failed and a relative path of its command does not exist where its processes started, or
/// its log says a file was not found: where the processes ran, and how to change it.
fn path_hint(plan: &local::JobPlan, summary: &RunSummary) -> Option<String> {
    let failed = summary.failed_pod()?;
    let pod = plan.pods().find(|p| p.name == failed.name)?;
    let process = pod.containers.first()?;
    let missing: Vec<String> = std::iter::once(process.program.display().to_string())
        .chain(process.args.iter().cloned())
        // Words that look like relative file names (`train.py`, `data/x.csv`), not numbers or options.
        .filter(|w| {
            !w.starts_with('/')
                && !w.starts_with('-')
                && !w.contains(char::is_whitespace)
                && !w.contains('=')
                && (w.contains('/')
                    || w.rsplit_once('.').is_some_and(|(a, e)| {
                        !a.is_empty()
                            && (1..=4).contains(&e.len())
                            && e.bytes().all(|b| b.is_ascii_alphanumeric())
                            && e.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
                    }))
                && !process.cwd.join(w).exists()
        })
        .collect();
    let said_missing = failed.log_tail.iter().chain(&failed.detail).any(|l| {
        l.contains("No such file or directory")
            || l.contains("can't open file")
            || l.contains("not found")
    });
    if missing.is_empty() && !said_missing {
        return None;
    }
    let what = match missing.as_slice() {
        [] => String::new(),
        [one] => format!(" {one} does not exist there."),
        several => format!(" {} do not exist there.", several.join(", ")),
    };
    Some(format!(
        "hint: the processes of {} started in {}.{what} Relative paths resolve there: the directory \
         `kubetrain run` was started from, unless `--workdir DIR` or the container's workingDir says otherwise; \
         the pods' /workspace is {}",
        failed.name,
        process.cwd.display(),
        plan.run_dir.join("workspace").display()
    ))
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
    view: &View,
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
                view.log(format!("Pending: {pending}  [{:.1}s]", start.elapsed().as_secs_f64()));
                if let Some(r) = recorder.as_mut() {
                    let _ = r.pending(&pending.to_string());
                }
                shown = Some((pending.clone(), Instant::now()));
            }
        }) => r,
        _ = stops.recv() => {
            view.err("interrupted while waiting in the local queue");
            if let Some(r) = recorder.as_mut() {
                let _ = r.fail("interrupted while waiting in the local queue");
            }
            return Err(ExitCode::from(130));
        }
    };
    for notice in ticket.take_notices() {
        view.err(format!("note: {notice}"));
    }
    match waited {
        Ok(()) => {
            if shown.is_some() {
                view.out(format!(
                    "admitted by the local queue after {:.1}s",
                    start.elapsed().as_secs_f64()
                ));
            }
            Ok(ticket)
        }
        Err(e) => {
            view.err(format!("error: {e}"));
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

/// How often `--detach` looks whether the background run has started.
const DETACH_POLL: Duration = Duration::from_millis(50);

/// How long `--detach` waits for the background run's pods to start before it returns saying so.
const DETACH_WAIT: Duration = Duration::from_secs(60);

/// `--detach`: checks and plans the run here (so a bad TrainJob, a job already running or a GPU shortfall
/// is refused at once), then starts `kubetrain run` again in the background on the same run id, writing
/// its output to `<run dir>/run.log`, and returns once that run holds the job's lock and its pods started
/// (or it waits in the local queue, or it ended): exit 0 says the job runs; a background run that died at
/// once (a second `--detach` of the same job that lost the race) is reported with its reason, exit 1.
fn detach(
    args: &RunArgs,
    job: &TrainJob,
    catalog: &RuntimeCatalog,
    options: &LocalOptions,
    workdir: &Path,
) -> Result<ExitCode> {
    let plan = local::prepare_job(job, catalog, options)?;
    if !args.ignore_capacity
        && let Err(why) = local::capacity::check(&plan, &args.capacity())
    {
        eprintln!(
            "error: TrainJob {} cannot run on this machine: {why}",
            plan.name
        );
        eprintln!("(use --ignore-capacity to start it anyway)");
        return Ok(ExitCode::FAILURE);
    }
    // Private: the TrainJob's inline env may hold secrets, and so may what the run prints.
    let input = plan.run_dir.join(DETACHED_INPUT);
    let documents = background_input(job, catalog, &plan.namespace)?;
    create_private_file(&input)
        .and_then(|mut f| std::io::Write::write_all(&mut f, documents.as_bytes()))
        .with_context(|| format!("writing {}", input.display()))?;
    let output_path = plan.run_dir.join(DETACHED_OUTPUT);
    let output = create_private_file(&output_path)
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
    use std::os::unix::process::CommandExt;
    let mut child = background_command(args, &input, &run_id, workdir)?
        .stdin(std::process::Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output)
        // Its own process group: the terminal's Ctrl-C is not for it.
        .process_group(0)
        .spawn()
        .context("starting the background run")?;
    // Named by its identity (pid, start time, boot, user): a bare pid is never trusted later.
    initial.set_runner(child.id());
    local::record::publish_initial(&initial)
        .with_context(|| format!("writing the run's record in {}", run_dir.display()))?;
    let state = match await_start(&mut child, &run_dir, &output_path)? {
        Ok(state) => state,
        Err(status) => {
            let log = std::fs::read_to_string(&output_path).unwrap_or_default();
            eprintln!(
                "error: the background run of TrainJob {namespace}/{name} ended before its pods started ({status}); \
                 its output ({}):",
                output_path.display()
            );
            for line in log.lines() {
                eprintln!("  {line}");
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    // The run goes on whatever happens to this output (`--detach | head -1` must not panic).
    use std::io::Write;
    let _ = writeln!(
        std::io::stdout(),
        "TrainJob {namespace}/{name} runs in the background: run {run_id}, pid {}, run directory {}; {state}\n\
         \x20 kubetrain get {name} --local         status, steps and progress\n\
         \x20 kubetrain logs {name} --local -f     follow node-0's log (--step for another pod)\n\
         \x20 kubetrain wait {name} --local        wait until it completes\n\
         \x20 kubetrain delete {name} --local      stop it and remove its runs",
        child.id(),
        run_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// What the background run of `--detach` reads: the TrainJob, and its runtime unless it is a built-in one.
fn background_input(job: &TrainJob, catalog: &RuntimeCatalog, namespace: &str) -> Result<String> {
    let mut documents =
        vec![kubetrain_api::to_yaml(job).context("writing the TrainJob for the background run")?];
    let builtin = kubetrain_jobset::builtin::catalog();
    let runtime_ref = &job.spec.runtime_ref;
    if let Ok(entry) = catalog.lookup(runtime_ref, namespace) {
        let is_builtin = builtin
            .lookup(runtime_ref, namespace)
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
    Ok(documents.join("---\n"))
}

/// `kubetrain run` again on the same run id, reading `input`, with every flag of this run that matters to it.
fn background_command(
    args: &RunArgs,
    input: &Path,
    run_id: &str,
    workdir: &Path,
) -> Result<std::process::Command> {
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command
        .arg("run")
        .arg("-f")
        .arg(input)
        .args(["--run-id", run_id, "--detached"])
        .args(["--progress-every", &args.progress_every.to_string()])
        .args(["--queueing-strategy", &args.queueing_strategy.to_string()])
        // The same directory for relative paths as a foreground run would have had.
        .arg("--workdir")
        .arg(workdir)
        .current_dir(workdir);
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
        (args.force, "--force"),
    ] {
        if set {
            command.arg(flag);
        }
    }
    Ok(command)
}

/// Waits until the background run holds the job's lock and its pods started, waits in the local queue, or
/// already ended (what to say of it), or until it exited before any of these (`Err` with its exit status).
fn await_start(
    child: &mut std::process::Child,
    run_dir: &Path,
    output_path: &Path,
) -> Result<std::result::Result<String, std::process::ExitStatus>> {
    let waited = Instant::now();
    loop {
        let exited = child.try_wait().context("watching the background run")?;
        if let Ok(record) = local::record::read(run_dir)
            && let Some(state) = started_state(&record)
        {
            return Ok(Ok(state));
        }
        if let Some(status) = exited {
            return Ok(Err(status));
        }
        if waited.elapsed() > DETACH_WAIT {
            return Ok(Ok(format!(
                "its pods have not started after {}s (see {})",
                DETACH_WAIT.as_secs(),
                output_path.display()
            )));
        }
        std::thread::sleep(DETACH_POLL);
    }
}

/// What a background run's record says of its start, once it says something: ended, pods started, or
/// waiting in the local queue.
fn started_state(record: &local::record::RunRecord) -> Option<String> {
    let status: JobStatus = record.status.parse().unwrap_or(JobStatus::Failed);
    if status.is_finished() {
        return Some(format!("it already ended: {status}{}", message_of(record)));
    }
    let started = record.pods.iter().filter(|p| p.phase != "Pending").count();
    if started > 0 {
        return Some(format!(
            "its pods started ({started} of {})",
            record.pods.len()
        ));
    }
    record
        .message
        .as_deref()
        .and_then(|m| m.strip_prefix("Pending: "))
        .map(|why| format!("it waits in the local queue: {why}"))
}

/// `: <message>` of a record, or nothing.
fn message_of(record: &local::record::RunRecord) -> String {
    record
        .message
        .as_deref()
        .map_or(String::new(), |m| format!(": {m}"))
}

/// The directory the pods start in: `--workdir`, else the current one; absolute, and it must exist.
fn workdir(args: &RunArgs) -> Result<PathBuf> {
    let current =
        std::env::current_dir().context("reading the current directory (give --workdir DIR)")?;
    let dir = match &args.workdir {
        Some(dir) => current.join(dir),
        None => current,
    };
    if !dir.is_dir() {
        bail!("--workdir {}: not a directory", dir.display());
    }
    Ok(dir)
}

/// What refuses a run before anything is created (no run directory, no lock, no queue place), so a refused
/// run leaves nothing behind: a TrainJob that would run no trainer pod, one too large for this machine
/// ([`local::capacity::check_size`], skipped with `--force`), one that cannot be planned (a container
/// with no command is named by the TrainJob's own field, `spec.trainer.command`). `Err` is the message.
fn preflight(
    args: &RunArgs,
    job: &TrainJob,
    catalog: &RuntimeCatalog,
    options: &LocalOptions,
) -> std::result::Result<(), String> {
    use local::capacity::{Footprint, check_size};
    let name = job.name();
    let trainer = job.spec.trainer.as_ref();
    if trainer.and_then(|t| t.num_nodes) == Some(0) {
        return Err(format!(
            "TrainJob {name}: spec.trainer.numNodes is 0: no trainer pod would run, so nothing would be \
             trained; set spec.trainer.numNodes to 1 or more"
        ));
    }
    let capacity = args.capacity();
    let too_large = |why: String| {
        format!(
            "TrainJob {name} is too large to run on this machine: {why}; use --force to start it anyway"
        )
    };
    if !args.force {
        // Before planning: planning 100,000 pods alone takes long.
        let nodes = trainer.and_then(|t| t.num_nodes).unwrap_or(1).max(1) as u64;
        let procs = trainer
            .and_then(|t| t.num_proc_per_node)
            .unwrap_or(1)
            .max(1) as u64;
        check_size(&Footprint::of_pods(nodes, procs, 0), &capacity).map_err(too_large)?;
    }
    let namespace = job.metadata.namespace.as_deref().unwrap_or("default");
    let runtime = kubetrain_jobset::resolve(catalog, job).map_err(|e| e.to_string())?;
    let mut keys = kubetrain_jobset::ssh::os_rng()
        .map_err(|e| format!("reading the OS random source for the MPI SSH key: {e}"))?;
    let rendered = kubetrain_jobset::render(
        job,
        runtime,
        &kubetrain_jobset::Observed::default(),
        &mut keys,
    )
    .map_err(|e| e.to_string())?;
    // Planned as the run will be, but into a directory that is not created and with no ports taken.
    let dry = local::plan::plan(
        &rendered.objects,
        &local::plan::PlanOptions {
            run_dir: options
                .run_dir
                .clone()
                .unwrap_or_else(|| std::env::temp_dir().join("kubetrain-preflight")),
            kubetrain_exe: options.kubetrain_exe.clone(),
            remap_ports: false,
            workdir: options.workdir.clone(),
        },
    );
    let plan = match dry {
        Ok(plan) => plan,
        Err(kubetrain_client::local::PlanError::NoCommand { path }) => {
            let jobset = rendered
                .objects
                .first()
                .and_then(|o| o.as_jobset())
                .and_then(|j| serde_json::to_value(j).ok())
                .unwrap_or_default();
            // `spec.replicatedJobs[i].template.spec.template.spec.containers[j]`
            let index = |key: &str| -> Option<usize> {
                path.split(key).nth(1)?.split(']').next()?.parse().ok()
            };
            let rjob =
                index("replicatedJobs[").and_then(|i| jobset["spec"]["replicatedJobs"].get(i));
            let container = rjob.and_then(|r| {
                r["template"]["spec"]["template"]["spec"]["containers"].get(index("containers[")?)
            });
            let is_trainer = rjob.is_some_and(|r| r["name"] == kubetrain_api::constants::NODE)
                && container.is_some_and(|c| c["name"] == kubetrain_api::constants::NODE)
                && !path.contains("initContainers");
            let runtime = &job.spec.runtime_ref.name;
            return Err(if is_trainer {
                format!(
                    "TrainJob {name}: spec.trainer.command: required to run locally: neither the TrainJob nor \
                     the trainer container of runtime {runtime} sets a command (a cluster would run the \
                     image's entrypoint, which a local process cannot); set spec.trainer.command, e.g. \
                     [python3, train.py]"
                )
            } else {
                format!(
                    "TrainJob {name}: runtime {runtime}: spec.template.{path}: the container has no command \
                     (a cluster would run the image's entrypoint, which a local process cannot); give the \
                     runtime's container a command"
                )
            });
        }
        Err(e) => return Err(format!("TrainJob {namespace}/{name}: {e}")),
    };
    if !args.force {
        check_size(&Footprint::of_plan(&plan), &capacity).map_err(too_large)?;
    }
    Ok(())
}

/// Runs `kubetrain run`.
pub(crate) fn run(args: RunArgs) -> Result<ExitCode> {
    // Checked as `validate` checks: every error and warning of every document is printed first, invalid
    // runtimes named as such.
    let (job, catalog) = super::input::trainjob_to_run(&args.files, &args.runtimes)?;
    let workdir = workdir(&args)?;
    let options = LocalOptions {
        run_dir: args.run_dir.clone(),
        // `kubetrain` in a container command is this very binary, so no install is needed.
        kubetrain_exe: Some(std::env::current_exe().context("locating the kubetrain binary")?),
        remap_ports: !args.keep_ports,
        run_id: args.run_id.clone(),
        workdir: Some(workdir.clone()),
        ..LocalOptions::default()
    };
    if let Err(why) = preflight(&args, &job, &catalog, &options) {
        eprintln!("error: {why}");
        return Ok(ExitCode::FAILURE);
    }
    if args.detach {
        return detach(&args, &job, &catalog, &options, &workdir);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // Ctrl-C, SIGTERM and SIGHUP are caught before anything is created: a signal between booking the
    // queue's ledger entry (or creating the run directory) and the first wait would otherwise kill the
    // process with its entry still booked.
    let view = View::start();
    let mut stops = catch_signals(&runtime, &view, args.detached)?;
    // Orphans of the pods (a daemon that left its container's process group) come back to this process,
    // which stops them when the run ends or is interrupted.
    local::adopt_orphans();
    let mut plan = local::prepare_job(&job, &catalog, &options)?;
    // `trainjob_to_run` printed the validation warnings already.
    plan.notices.retain(|n| !n.starts_with("warning: "));
    view.set_logs(plan.run_dir.join(local::record::LOGS_DIR));
    // The record `kubetrain get|logs|wait --local` read; a run goes on without one.
    let mut recorder = match Recorder::new(&plan) {
        Ok(r) => Some(r),
        Err(e) => {
            view.err(format!(
                "note: not keeping a record of this run in {}: {e}",
                plan.run_dir.display()
            ));
            None
        }
    };
    let Ok(ticket) = admit(&args, &mut plan, &mut recorder, &view) else {
        runtime.block_on(view.finish(&mut stops));
        return Ok(ExitCode::FAILURE);
    };
    // Holding the ticket (and booking it again should the ledger be rebuilt) holds the run's share of
    // the machine until the run ends.
    let mut ticket = match ticket {
        Some(t) => match runtime.block_on(wait_in_queue(
            t,
            args.progress_every,
            &mut stops,
            &mut recorder,
            &view,
        )) {
            Ok(t) => Some(t),
            Err(code) => {
                runtime.block_on(view.finish(&mut stops));
                return Ok(code);
            }
        },
        None => None,
    };
    let summary = execute_recorded(
        &runtime,
        &plan,
        &mut ticket,
        &mut stops,
        &view,
        recorder,
        &args,
        &workdir,
    )?;
    // The run is over: its lock, ports and queue place go now, not after the terminal took the output.
    drop(ticket);
    view.end_bar();
    let no_trainer = plan
        .replicated_jobs
        .iter()
        .filter(|r| r.name == kubetrain_api::constants::NODE)
        .all(|r| r.pods.is_empty());
    print_summary(&view, &summary, no_trainer);
    if let Some(hint) = path_hint(&plan, &summary) {
        view.err(hint);
    }
    drop(plan);
    runtime.block_on(view.finish(&mut stops));
    Ok(match (summary.cancelled, summary.status) {
        (true, _) => ExitCode::from(130),
        (false, JobStatus::Complete) => ExitCode::SUCCESS,
        (false, _) => ExitCode::FAILURE,
    })
}

/// Runs the plan: every event to the record and log files first (a thread of their own), the terminal view
/// after; the record is finished with the summary.
#[allow(clippy::too_many_arguments)]
fn execute_recorded(
    runtime: &tokio::runtime::Runtime,
    plan: &local::JobPlan,
    ticket: &mut Option<Ticket>,
    stops: &mut Stops,
    view: &View,
    recorder: Option<Recorder>,
    args: &RunArgs,
    workdir: &Path,
) -> Result<RunSummary> {
    let width = plan.pods().map(|p| p.name.len()).max().unwrap_or(0);
    let rank_env: Vec<(String, String)> =
        plan.pods().map(|p| (p.name.clone(), rank_env(p))).collect();
    view.out(format!(
        "running TrainJob {}/{} locally: {} pods, run {}, run directory {} (the pods' /workspace is {}; \
         they start in {}); logs follow, one line per log line prefixed by its pod",
        plan.namespace,
        plan.name,
        plan.pods().count(),
        plan.run_id,
        plan.run_dir.display(),
        plan.run_dir.join("workspace").display(),
        workdir.display()
    ));
    let progress = Arc::new(Mutex::new(Progress {
        phases: plan
            .pods()
            .map(|p| (p.name.clone(), PodPhase::Pending))
            .collect(),
        start: Instant::now(),
    }));
    // The record and the log files take every event first, on a thread of their own (disk speed); the
    // terminal view gets what it can.
    let (feed_tx, feed_rx) = mpsc::channel::<Option<RunEvent>>(local::EVENT_BUFFER);
    let consumer = {
        let (view, progress) = (view.clone(), progress.clone());
        let logs = plan.run_dir.join(local::record::LOGS_DIR);
        std::thread::Builder::new()
            .name("run record".into())
            .spawn(move || {
                record_and_show(feed_rx, recorder, &view, &progress, &rank_env, width, &logs)
            })
            .context("starting the run's recorder")?
    };
    let summary = runtime.block_on(async {
        let (tx, rx) = mpsc::channel(local::EVENT_BUFFER);
        let every = Duration::from_secs(args.progress_every.max(1));
        let ticker = {
            let (view, progress) = (view.clone(), progress.clone());
            tokio::spawn(async move {
                let mut ticker =
                    tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                loop {
                    ticker.tick().await;
                    if let Ok(p) = progress.lock() {
                        view.log(p.line());
                    }
                }
            })
        };
        let (end_tx, end_rx) = tokio::sync::oneshot::channel::<()>();
        let forward = tokio::spawn(forward_until_end(rx, feed_tx, end_rx));
        let cancel = async {
            stops.recv().await;
            view.err("interrupted: stopping every pod");
        };
        let summary = match ticket {
            Some(t) => t.hold_while(local::execute(plan, &tx, cancel)).await,
            None => local::execute(plan, &tx, cancel).await,
        };
        drop(tx);
        let _ = end_tx.send(());
        let _ = forward.await;
        ticker.abort();
        summary
    });
    let recorder = consumer.join().ok().flatten();
    if let Some(mut recorder) = recorder
        && let Err(e) = recorder.finish(&summary)
    {
        view.err(format!("note: the run's record could not be written: {e}"));
    }
    Ok(summary)
}

/// Forwards the run's events to the recorder until the run ended, then what is left, then the end mark: a
/// reader task the run let go of (its pipe held by a stray process) must not keep the record open.
async fn forward_until_end(
    mut rx: mpsc::Receiver<RunEvent>,
    feed_tx: mpsc::Sender<Option<RunEvent>>,
    mut end_rx: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            biased;
            e = rx.recv() => match e {
                Some(e) => { let _ = feed_tx.send(Some(e)).await; }
                None => break,
            },
            _ = &mut end_rx => {
                rx.close();
                while let Some(e) = rx.recv().await {
                    let _ = feed_tx.send(Some(e)).await;
                }
                break;
            }
        }
    }
    let _ = feed_tx.send(None).await;
}

/// Ctrl-C and SIGTERM as [`Stops`]; SIGHUP (the terminal closed) ends only the view: the run goes on, as
/// under nohup. The background run of `--detach` writes to its run.log, which no hangup closes.
fn catch_signals(runtime: &tokio::runtime::Runtime, view: &View, detached: bool) -> Result<Stops> {
    let _context = runtime.enter();
    let hangup = signal(SignalKind::hangup()).context("catching SIGHUP")?;
    // SIGHUP (the terminal closed): the run goes on, as under nohup, and only the view ends; the
    // background run of `--detach` writes to its run.log, which no hangup closes.
    if !detached {
        let view = view.clone();
        runtime.spawn(async move {
            let mut hangup = hangup;
            while hangup.recv().await.is_some() {
                view.hang_up();
            }
        });
    } else {
        runtime.spawn(async move {
            let mut hangup = hangup;
            while hangup.recv().await.is_some() {}
        });
    }
    Stops::new()
}

/// The capacity check, and a place in the local queue unless `--no-queue`: the ticket to wait with, or
/// `Err` once the refusal is said and recorded.
fn admit(
    args: &RunArgs,
    plan: &mut local::JobPlan,
    recorder: &mut Option<Recorder>,
    view: &View,
) -> std::result::Result<Option<Ticket>, ()> {
    if args.ignore_capacity {
        return Ok(None);
    }
    let capacity = args.capacity();
    let mut fail = |message: String, recorded: String| {
        view.err(message);
        if let Some(r) = recorder.as_mut() {
            let _ = r.fail(&recorded);
        }
    };
    let refused = |why: String, fail: &mut dyn FnMut(String, String)| {
        fail(
            format!(
                "error: TrainJob {} cannot run on this machine: {why}",
                plan.name
            ),
            format!("cannot run on this machine: {why}"),
        );
        view.err("(use --ignore-capacity to start it anyway)");
        Err(())
    };
    if args.no_queue {
        return match local::capacity::check(plan, &capacity) {
            Ok(warning) => {
                plan.notices.extend(warning);
                Ok(None)
            }
            Err(why) => refused(why.to_string(), &mut fail),
        };
    }
    let queue = LocalQueue::new(
        args.queue_dir
            .clone()
            .unwrap_or_else(LocalQueue::default_dir),
        capacity,
    )
    .with_strategy(args.queueing_strategy)
    .with_timeout(args.queue_timeout);
    match queue.enqueue(plan) {
        Ok(mut t) => {
            plan.notices.extend(t.take_notices());
            Ok(Some(t))
        }
        Err(QueueError::NeverFits(why)) => refused(why.to_string(), &mut fail),
        Err(e) => {
            let e = anyhow::Error::from(e).context(
                "queueing the run in the local queue (choose another ledger with --queue-dir, \
                 or start without queueing with --no-queue)",
            );
            fail(format!("error: {e:#}"), format!("{e:#}"));
            Err(())
        }
    }
}

/// The run's recorder thread: every event goes to the record and log files first, then to the view (a long
/// line shown cut, its later pieces not at all). Returns the recorder for the run's last word.
fn record_and_show(
    mut events: mpsc::Receiver<Option<RunEvent>>,
    mut recorder: Option<Recorder>,
    view: &View,
    progress: &Mutex<Progress>,
    rank_env: &[(String, String)],
    width: usize,
    logs: &Path,
) -> Option<Recorder> {
    let mut record_failed = false;
    // The streams whose current line is longer than a piece: shown once, cut.
    let mut cut: HashSet<(String, String, bool)> = HashSet::new();
    let progress_line = || progress.lock().map(|p| p.line()).unwrap_or_default();
    while let Some(Some(event)) = events.blocking_recv() {
        if let Some(r) = recorder.as_mut()
            && let Err(e) = r.apply(&event)
            && !record_failed
        {
            record_failed = true;
            view.err(format!(
                "note: the run's record or logs could not be written: {e}"
            ));
        }
        match event {
            RunEvent::Notice(n) => view.err(format!("note: {n}")),
            RunEvent::PodStarted { pod } => {
                if let Ok(mut p) = progress.lock() {
                    p.set(&pod, PodPhase::Running);
                }
                let env = rank_env
                    .iter()
                    .find(|(p, _)| *p == pod)
                    .map_or("", |(_, e)| e.as_str());
                view.out(format!("{pod:>width$} | started {env}"));
                view.log(progress_line());
            }
            RunEvent::Log(l) => {
                let key = (l.pod, l.container, l.stderr);
                let pod = &key.0;
                if l.continued {
                    if cut.insert(key.clone()) {
                        view.log(format!(
                            "{pod:>width$} | {} [... a long line, cut here; all of it is in {}]",
                            shortened(&l.line),
                            logs.join(format!("{pod}.log")).display()
                        ));
                    }
                } else if !cut.remove(&key) {
                    view.log(format!("{pod:>width$} | {}", shortened(&l.line)));
                }
            }
            RunEvent::PodFinished { pod, phase, detail } => {
                if let Ok(mut p) = progress.lock() {
                    p.set(&pod, phase);
                }
                view.out(format!("{pod:>width$} | {} ({detail})", phase.as_str()));
                view.log(progress_line());
            }
            RunEvent::Restarting { attempt, reason } => {
                if let Ok(mut p) = progress.lock() {
                    for (_, phase) in &mut p.phases {
                        *phase = PodPhase::Pending;
                    }
                }
                view.out(format!("restart {attempt}: {reason}"));
            }
            RunEvent::TrainerStatus(p) => view.bar(format!(
                "progress: {}",
                progress_bar(
                    &p,
                    super::input::output_width().saturating_sub("progress: ".len() + 1)
                )
            )),
        }
    }
    recorder
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubetrain_client::types::ProgressMetric;

    #[test]
    fn a_progress_bar_of_many_metrics_fits_its_width() {
        // The probe's report: a hundred metrics made a 1,445-character piped line.
        let p = TrainerProgress {
            progress_percentage: Some(40),
            estimated_remaining_seconds: Some(600),
            metrics: (0..100)
                .map(|i| ProgressMetric {
                    name: format!("metric_{i}"),
                    value: i.to_string(),
                })
                .collect(),
            last_updated_time: None,
        };
        for width in [50, 80, 109] {
            let bar = progress_bar(&p, width);
            assert!(bar.chars().count() <= width, "{width}: {bar}");
            assert!(bar.ends_with(" …"), "{width}: {bar}");
            assert!(
                bar.starts_with("[########------------]  40%  ETA 10m00s"),
                "{bar}"
            );
        }
        let few = TrainerProgress {
            metrics: p.metrics[..2].to_vec(),
            ..p
        };
        assert_eq!(
            progress_bar(&few, 109),
            "[########------------]  40%  ETA 10m00s  metric_0=0 metric_1=1"
        );
    }
}
