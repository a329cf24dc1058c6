//! `kubetrain collective`: the data plane of a TrainJob. `bench` measures collectives the nccl-tests way,
//! `train-demo` runs a tiny data-parallel training loop, `info` shows how this rank would meet the others.
//!
//! Every subcommand runs either as one rank of a job (rendezvous from the `PET_*` / `JAX_*` /
//! `OMPI_COMM_WORLD_*` (mpirun) / `WORLD_SIZE`+`RANK` environment) or as a local launcher: `--local-ranks N`, or a torch environment with
//! `PET_NPROC_PER_NODE > 1` and no `LOCAL_RANK`, starts one process of this binary per local rank.

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use kubetrain_acceptance::metrics as acceptance_metrics;
use kubetrain_client::progress::{Progress, Reporter};
use kubetrain_collective::bench::{self, BenchConfig, BenchOp};
use kubetrain_collective::cpu::{CpuCommunicator, CpuOptions, Transport};
use kubetrain_collective::demo::{self, DemoConfig};
use kubetrain_collective::nccl;
use kubetrain_collective::rendezvous::{
    ElasticAgent, ElasticSettings, EnvFlavour, RENDEZVOUS_VARS, RankEnv, RendezvousError,
};
use kubetrain_collective::{Communicator, ElementType, ReduceOp};

/// Marks a process started by the local launcher (so it does not launch again).
const CHILD_ENV: &str = "KUBETRAIN_COLLECTIVE_CHILD";

/// Arguments of `kubetrain collective`.
#[derive(Debug, Args)]
pub(crate) struct CollectiveArgs {
    #[command(subcommand)]
    command: CollectiveCommand,
}

#[derive(Debug, Subcommand)]
enum CollectiveCommand {
    /// Benchmark a collective like nccl-tests (size, count, type, redop, time, algbw, busbw, #wrong).
    Bench(BenchArgs),
    /// Data-parallel linear regression: gradients averaged with all-reduce, loss printed by rank 0.
    TrainDemo(DemoArgs),
    /// Show this rank's rendezvous environment and where the NCCL library is (or where it was looked for).
    Info,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// Ring collectives on the CPU: shared memory on one host, TCP across hosts.
    Cpu,
    /// NCCL on the GPU (needs libnccl.so.2 and a CUDA driver).
    Nccl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TransportArg {
    /// Shared memory between ranks on one host, TCP otherwise.
    Auto,
    /// TCP between all ranks.
    Tcp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OutputFormat {
    /// The nccl-tests table.
    Table,
    /// One JSON object per size.
    Json,
}

/// Op names as the command line spells them (`all_reduce`), with the kebab-case spellings as aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OpArg {
    #[value(name = "all_reduce", alias = "all-reduce")]
    AllReduce,
    #[value(name = "all_gather", alias = "all-gather")]
    AllGather,
    #[value(name = "reduce_scatter", alias = "reduce-scatter")]
    ReduceScatter,
    Broadcast,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DtypeArg {
    Float,
    Double,
    Half,
    Bfloat16,
    Int32,
    Int64,
    Uint8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RedopArg {
    Sum,
    Prod,
    Min,
    Max,
    Avg,
}

/// How the ranks are started and connected.
#[derive(Debug, Clone, Args)]
struct LaunchArgs {
    /// Start N ranks on this machine (processes on loopback) instead of reading the rank from the environment.
    #[arg(long, value_name = "N")]
    local_ranks: Option<usize>,
    /// How long any wait may take before a dead or stalled peer becomes an error (`300s`, `5m`; a bare
    /// number is seconds).
    #[arg(
        long,
        visible_alias = "timeout",
        default_value_t = 300,
        value_name = "DURATION",
        value_parser = super::input::parse_seconds
    )]
    timeout_secs: u64,
    /// CPU transport.
    #[arg(long, value_enum, default_value_t = TransportArg::Auto)]
    transport: TransportArg,
    /// CPU pipeline slice size (bytes; suffixes K, M, G).
    #[arg(long, value_parser = parse_size, default_value = "512K")]
    slice_bytes: usize,
    /// Do not pin each local rank to its own CPU (pinning only happens when every local rank has one).
    #[arg(long)]
    no_pin: bool,
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// Backend to measure.
    #[arg(long, value_enum, default_value_t = Backend::Cpu)]
    backend: Backend,
    /// Collective to measure.
    #[arg(long, value_enum, default_value_t = OpArg::AllReduce)]
    op: OpArg,
    /// Element type.
    #[arg(long, value_enum, default_value_t = DtypeArg::Float)]
    dtype: DtypeArg,
    /// Reduction operator.
    #[arg(long, value_enum, default_value_t = RedopArg::Sum)]
    redop: RedopArg,
    /// Smallest size (bytes; suffixes K, M, G).
    #[arg(long, short = 'b', value_parser = parse_size, default_value = "8")]
    min_bytes: usize,
    /// Largest size (bytes; suffixes K, M, G).
    #[arg(long, short = 'e', value_parser = parse_size, default_value = "64M")]
    max_bytes: usize,
    /// Size multiplier between rows.
    #[arg(long, short = 'f', default_value_t = 2)]
    step_factor: usize,
    /// Timed iterations per size.
    #[arg(long, short = 'n', default_value_t = 20)]
    iters: usize,
    /// Warm-up iterations per size.
    #[arg(long, short = 'w', default_value_t = 5)]
    warmup: usize,
    /// Skip the validation pass.
    #[arg(long)]
    no_check: bool,
    /// Also print single-thread memcpy bandwidth at --max-bytes (the CPU yardstick).
    #[arg(long)]
    memcpy_baseline: bool,
    /// Output format (printed by rank 0).
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Table)]
    output: OutputFormat,
    #[command(flatten)]
    launch: LaunchArgs,
}

#[derive(Debug, Args)]
struct DemoArgs {
    /// Gradient steps.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Samples over all ranks (at least one per rank).
    #[arg(long, default_value_t = 4096)]
    samples: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.3)]
    learning_rate: f64,
    /// SGD momentum (its velocity is the optimizer state checkpoints keep).
    #[arg(long, default_value_t = 0.0)]
    momentum: f64,
    /// Checkpoint location: a directory or s3://bucket/prefix (S3 settings: ENDPOINT, ACCESS_KEY_ID,
    /// SECRET_ACCESS_KEY, REGION, then AWS_*). On start, training resumes from the newest valid checkpoint.
    #[arg(
        long,
        env = "KUBETRAIN_CHECKPOINT_DIR",
        value_name = "DIR|s3://BUCKET/PREFIX"
    )]
    checkpoint_dir: Option<String>,
    /// Write a checkpoint every N steps (and after the last step).
    #[arg(
        long,
        env = "KUBETRAIN_CHECKPOINT_EVERY",
        default_value_t = 50,
        value_name = "N"
    )]
    checkpoint_every: u64,
    /// Keep the newest N checkpoints.
    #[arg(
        long,
        env = "KUBETRAIN_CHECKPOINT_KEEP",
        default_value_t = 3,
        value_name = "N"
    )]
    keep_checkpoints: usize,
    /// Stop after this many seconds of training (every rank at the same step): a fixed time window.
    #[arg(long, env = "KUBETRAIN_TRAIN_SECONDS", value_name = "SECONDS")]
    max_seconds: Option<f64>,
    /// Sleep this long per step, standing in for a real model's compute.
    #[arg(
        long,
        env = "KUBETRAIN_STEP_DELAY_MS",
        default_value_t = 0,
        value_name = "MS"
    )]
    step_delay_ms: u64,
    #[command(flatten)]
    launch: LaunchArgs,
}

/// Parses `4096`, `64K`, `64M`, `1G` (binary multiples; an optional `iB`/`B` suffix is accepted).
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1usize << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("{s:?} is not a size: use bytes, or a number with K, M or G"))
}

/// Runs `kubetrain collective`.
pub(crate) fn run(args: CollectiveArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        CollectiveCommand::Bench(a) => {
            let launch = a.launch.clone();
            with_rank(&launch, |env| run_bench(&a, env))
        }
        CollectiveCommand::TrainDemo(a) => {
            let launch = a.launch.clone();
            // An elastic torch job (PET_NNODES=min:max): ranks come from the elastic rendezvous.
            if launch.local_ranks.is_none()
                && let Some(settings) = ElasticSettings::from_env()
                    .context("reading the elastic rendezvous environment")?
            {
                return run_demo_elastic(&a, settings);
            }
            with_rank(&launch, |env| run_demo(&a, env))
        }
        CollectiveCommand::Info => info(),
    }
}

/// A port for the local store, reserved against concurrent `kubetrain run`s until this process ends
/// (kubetrain-client's one home for local ports); its socket is released for rank 0 to bind.
fn store_port() -> anyhow::Result<u16> {
    let reservation =
        kubetrain_client::local::reserve_port().context("find a free port for the local store")?;
    reservation.release();
    let port = reservation.port();
    // Held for the life of the process: the ranks are its children.
    std::mem::forget(reservation);
    Ok(port)
}

/// Resolves this process's role: a launcher of local ranks, or one rank (which then runs `body`).
fn with_rank(
    launch: &LaunchArgs,
    body: impl FnOnce(RankEnv) -> anyhow::Result<ExitCode>,
) -> anyhow::Result<ExitCode> {
    let is_child = std::env::var_os(CHILD_ENV).is_some();
    if let (Some(n), false) = (launch.local_ranks, is_child) {
        if n == 0 {
            bail!("--local-ranks must be at least 1");
        }
        let port = store_port()?;
        return launch_local(n, |rank, cmd| {
            for v in RENDEZVOUS_VARS {
                cmd.env_remove(v);
            }
            cmd.env("WORLD_SIZE", n.to_string())
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("LOCAL_WORLD_SIZE", n.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string());
        });
    }
    match RankEnv::from_env() {
        Ok(env) => body(env),
        Err(RendezvousError::NeedsLocalLauncher { nproc_per_node }) if !is_child => {
            // A torch pod with several processes per node: start them like torchrun would, keeping PET_*.
            launch_local(nproc_per_node, |rank, cmd| {
                cmd.env("LOCAL_RANK", rank.to_string())
                    .env("LOCAL_WORLD_SIZE", nproc_per_node.to_string());
            })
        }
        Err(RendezvousError::NoEnv) => {
            eprintln!(
                "note: no PET_*/JAX_*/OMPI_COMM_WORLD_*/WORLD_SIZE environment and no --local-ranks: running as a single rank"
            );
            body(RankEnv {
                rank: 0,
                world_size: 1,
                local_rank: 0,
                local_world_size: 1,
                master_addr: "127.0.0.1".into(),
                master_port: store_port()?,
                flavour: EnvFlavour::Generic,
            })
        }
        Err(e) => Err(e).context("reading the rendezvous environment"),
    }
}

/// Starts `n` copies of this process with the same arguments, one per local rank, and waits for all.
fn launch_local(n: usize, configure: impl Fn(usize, &mut Command)) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("locate the kubetrain binary")?;
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let mut children = Vec::with_capacity(n);
    for rank in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.args(&args).env(CHILD_ENV, "1");
        configure(rank, &mut cmd);
        children.push(
            cmd.spawn()
                .with_context(|| format!("start local rank {rank}"))?,
        );
    }
    let mut failed = Vec::new();
    for (rank, mut child) in children.into_iter().enumerate() {
        let status = child
            .wait()
            .with_context(|| format!("wait for local rank {rank}"))?;
        if !status.success() {
            failed.push(format!("rank {rank} ({status})"));
        }
    }
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        bail!(
            "{} of {n} local ranks failed: {}",
            failed.len(),
            failed.join(", ")
        )
    }
}

fn cpu_options(launch: &LaunchArgs) -> CpuOptions {
    CpuOptions {
        timeout: Duration::from_secs(launch.timeout_secs.max(1)),
        slice_bytes: launch.slice_bytes,
        pin_to_core: !launch.no_pin,
        transport: match launch.transport {
            TransportArg::Auto => Transport::Auto,
            TransportArg::Tcp => Transport::Tcp,
        },
        ..CpuOptions::default()
    }
}

fn bench_config(a: &BenchArgs) -> anyhow::Result<BenchConfig> {
    if a.min_bytes > a.max_bytes {
        bail!(
            "--min-bytes ({}) is larger than --max-bytes ({})",
            a.min_bytes,
            a.max_bytes
        );
    }
    if a.step_factor < 2 {
        bail!("--step-factor must be at least 2");
    }
    Ok(BenchConfig {
        op: match a.op {
            OpArg::AllReduce => BenchOp::AllReduce,
            OpArg::AllGather => BenchOp::AllGather,
            OpArg::ReduceScatter => BenchOp::ReduceScatter,
            OpArg::Broadcast => BenchOp::Broadcast,
        },
        redop: match a.redop {
            RedopArg::Sum => ReduceOp::Sum,
            RedopArg::Prod => ReduceOp::Prod,
            RedopArg::Min => ReduceOp::Min,
            RedopArg::Max => ReduceOp::Max,
            RedopArg::Avg => ReduceOp::Avg,
        },
        min_bytes: a.min_bytes,
        max_bytes: a.max_bytes,
        step_factor: a.step_factor,
        iters: a.iters.max(1),
        warmup: a.warmup,
        check: !a.no_check,
    })
}

fn dtype(d: DtypeArg) -> ElementType {
    match d {
        DtypeArg::Float => ElementType::F32,
        DtypeArg::Double => ElementType::F64,
        DtypeArg::Half => ElementType::F16,
        DtypeArg::Bfloat16 => ElementType::Bf16,
        DtypeArg::Int32 => ElementType::I32,
        DtypeArg::Int64 => ElementType::I64,
        DtypeArg::Uint8 => ElementType::U8,
    }
}

fn run_bench(a: &BenchArgs, env: RankEnv) -> anyhow::Result<ExitCode> {
    let cfg = bench_config(a)?;
    let dt = dtype(a.dtype);
    let (rows, header) = match a.backend {
        Backend::Cpu => {
            let mut comm = CpuCommunicator::init(&env, None, cpu_options(&a.launch))
                .with_context(|| format!("rank {}: forming the CPU communicator", env.rank))?;
            let header = format!(
                "# kubetrain collective bench: backend cpu, {} ranks, transport {}, op {}, iters {}, warmup {}",
                comm.world_size(),
                comm.transport_summary(),
                cfg.op.name(),
                cfg.iters,
                cfg.warmup
            );
            let rows = bench::run_dtype(&mut comm, &cfg, dt)
                .with_context(|| format!("rank {}: benchmark", env.rank))?;
            (rows, header)
        }
        Backend::Nccl => {
            let timeout = Duration::from_secs(a.launch.timeout_secs.max(1));
            let rows = nccl::bench::run(&env, &cfg, dt, timeout)
                .with_context(|| format!("rank {}: NCCL benchmark", env.rank))?;
            let header = format!(
                "# kubetrain collective bench: backend nccl, {} ranks, op {}, iters {}, warmup {}",
                env.world_size,
                cfg.op.name(),
                cfg.iters,
                cfg.warmup
            );
            (rows, header)
        }
    };
    if env.rank == 0 {
        match a.output {
            OutputFormat::Table => {
                println!("{header}");
                print!("{}", bench::format_table(&rows));
            }
            OutputFormat::Json => print!("{}", bench::format_json(&rows)),
        }
        if a.memcpy_baseline {
            let (what, gbps) = match a.backend {
                Backend::Cpu => ("memcpy, 1 thread", bench::memcpy_gbps(a.max_bytes, 20)),
                Backend::Nccl => (
                    "device copy (cudaMemcpy DtoD)",
                    nccl::bench::device_copy_gbps(a.max_bytes, 20)
                        .context("device copy baseline")?,
                ),
            };
            match a.output {
                OutputFormat::Table => println!("# {what}, {} bytes: {gbps:.2} GB/s", a.max_bytes),
                OutputFormat::Json => println!(
                    "{}",
                    serde_json::json!({"op": "memcpy", "what": what, "bytes": a.max_bytes, "gbps": gbps})
                ),
            }
        }
    }
    if env.rank == 0 {
        report_bench(&rows);
    }
    let wrong = bench::wrong_total(&rows);
    if wrong > 0 {
        bail!("rank {}: validation found {wrong} wrong elements", env.rank);
    }
    Ok(ExitCode::SUCCESS)
}

/// Inside a TrainJob with the TrainJobStatus env, rank 0 posts the table as trainerStatus metrics
/// (`busbw_gbps@<bytes>`, `algbw_gbps@<bytes>`, `time_us@<bytes>`, `wrong@<bytes>`) with the bytes the
/// initializers staged under `/workspace` (`dataset_bytes`, `model_bytes`): what `kubetrain acceptance`
/// reads on a cluster (kubetrain_acceptance::metrics).
fn report_bench(rows: &[bench::BenchRow]) {
    let reporter = match Reporter::from_env() {
        Ok(Some(r)) => r,
        Ok(None) => return,
        Err(error) => {
            eprintln!("bench: not reporting to the status server: {error}");
            return;
        }
    };
    let mut progress = Progress::new().percent(100).remaining_seconds(0);
    for (name, dir) in [
        (acceptance_metrics::DATASET_BYTES, "/workspace/dataset"),
        (acceptance_metrics::MODEL_BYTES, "/workspace/model"),
    ] {
        if let Some(bytes) = tree_bytes(std::path::Path::new(dir)) {
            progress = progress.metric(name, bytes);
        }
    }
    for r in rows {
        let m = &r.out_of_place;
        for (name, value) in acceptance_metrics::bench_pairs(
            r.bytes as u64,
            m.time_us,
            m.algbw_gbps,
            m.busbw_gbps,
            m.wrong,
        ) {
            progress = progress.metric(name, value);
        }
    }
    match reporter.report_now(&progress) {
        Ok(()) => eprintln!("bench: reported {} sizes to the status server", rows.len()),
        Err(error) => eprintln!("bench: progress update failed: {error}"),
    }
}

/// Bytes of the regular files under `dir` (`None` when it does not exist).
fn tree_bytes(dir: &std::path::Path) -> Option<u64> {
    let mut total = 0;
    let mut stack = vec![std::fs::read_dir(dir).ok()?];
    while let Some(entries) = stack.pop() {
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.extend(std::fs::read_dir(entry.path()).ok()),
                Ok(t) if t.is_file() => total += entry.metadata().map_or(0, |m| m.len()),
                _ => {}
            }
        }
    }
    Some(total)
}

/// What rank 0 reports to the operator as the demo trains: rates over the steps this process trained, and
/// (for `kubetrain acceptance` on a cluster) the newest checkpoint and the step a resume started from.
struct DemoProgress {
    steps: usize,
    samples_per_step: f64,
    checkpointing: bool,
    started: Instant,
    /// The step a resumed run started at: rates count only the steps this process trained.
    first_step: std::cell::Cell<usize>,
    /// The newest checkpoint: step, bytes, write milliseconds.
    checkpointed: std::cell::Cell<(u64, u64, f64)>,
    /// Kubetrain's view of the newest checkpoint: its step and when it was written (after a resume, the one
    /// loaded and when: the start of the work a failure would lose).
    last_checkpoint: std::cell::Cell<Option<(u64, std::time::SystemTime)>>,
    /// The latest step index and its loss.
    last: std::cell::Cell<(usize, f64)>,
    /// When a checkpoint was last reported at once.
    checkpoint_reported: std::cell::Cell<Option<Instant>>,
    resumed_from: std::cell::Cell<Option<u64>>,
    /// Whether the first step after a resume is still to be reported (at once: it proves the restore).
    report_resume: std::cell::Cell<bool>,
}

impl DemoProgress {
    fn new(cfg: &DemoConfig, checkpointing: bool) -> Self {
        Self {
            steps: cfg.steps,
            samples_per_step: cfg.samples as f64,
            checkpointing,
            started: Instant::now(),
            first_step: std::cell::Cell::new(0),
            checkpointed: std::cell::Cell::new((0, 0, 0.0)),
            last_checkpoint: std::cell::Cell::new(None),
            last: std::cell::Cell::new((0, 0.0)),
            checkpoint_reported: std::cell::Cell::new(None),
            resumed_from: std::cell::Cell::new(None),
            report_resume: std::cell::Cell::new(false),
        }
    }

    fn at(&self, step: usize, loss: f64) -> Progress {
        let done = step + 1;
        let trained = done.saturating_sub(self.first_step.get()).max(1);
        let elapsed = self.started.elapsed().as_secs_f64();
        let per_step = elapsed / trained as f64;
        let p = Progress::new()
            .percent((done * 100 / self.steps.max(1)) as i64)
            .remaining_seconds((per_step * self.steps.saturating_sub(done) as f64).ceil() as i64)
            .metric("loss", format!("{loss:.6}"))
            .metric("step", done)
            .step(done as u64)
            .metric(
                "samples_per_second",
                format!(
                    "{:.1}",
                    self.samples_per_step * trained as f64 / elapsed.max(1e-9)
                ),
            );
        // Kubetrain's checkpoint metrics once a checkpoint exists (written or resumed from).
        let p = match self.last_checkpoint.get() {
            Some((step, time)) => p.checkpoint(step, time),
            None => p,
        };
        // Checkpoint metrics only when checkpoints are on (0 until the first one is written).
        let p = if self.checkpointing {
            let (ckpt_step, ckpt_bytes, ckpt_ms) = self.checkpointed.get();
            p.metric(acceptance_metrics::CHECKPOINT_STEP, ckpt_step)
                .metric(acceptance_metrics::CHECKPOINT_BYTES, ckpt_bytes)
                .metric(
                    acceptance_metrics::CHECKPOINT_WRITE_MS,
                    format!("{ckpt_ms:.1}"),
                )
        } else {
            p
        };
        match self.resumed_from.get() {
            Some(step) => p
                .metric(acceptance_metrics::RESUMED_FROM_STEP, step)
                .resumed_from_step(step),
            None => p,
        }
    }

    /// Sends one step's progress: the first step after a resume at once, the others throttled.
    fn report_step(&self, reporter: &Reporter, step: usize, loss: f64) {
        let sent = if self.report_resume.replace(false) {
            reporter.report_now(&self.at(step, loss))
        } else {
            reporter.report(&self.at(step, loss)).map(|_| ())
        };
        if let Err(error) = sent {
            eprintln!("train-demo: progress update failed: {error}");
        }
    }
}

/// The checkpoint store `--checkpoint-dir` names, if any.
fn open_checkpoint_store(
    a: &DemoArgs,
) -> anyhow::Result<Option<Box<dyn kubetrain_collective::checkpoint::CheckpointStore>>> {
    match &a.checkpoint_dir {
        Some(location) if !location.is_empty() => Ok(Some(
            kubetrain_acceptance::s3store::open(
                location,
                &kubetrain_acceptance::s3store::S3Settings::from_env(),
            )
            .with_context(|| format!("checkpoint location {location}"))?,
        )),
        _ => Ok(None),
    }
}

fn demo_config(a: &DemoArgs) -> anyhow::Result<DemoConfig> {
    if let Some(seconds) = a.max_seconds
        && !(seconds.is_finite() && seconds >= 0.0)
    {
        bail!("--max-seconds {seconds} must be a number of seconds ≥ 0");
    }
    Ok(DemoConfig {
        samples: a.samples,
        steps: a.steps,
        learning_rate: a.learning_rate,
        momentum: a.momentum,
        ..DemoConfig::default()
    })
}

fn run_demo(a: &DemoArgs, env: RankEnv) -> anyhow::Result<ExitCode> {
    let cfg = demo_config(a)?;
    let mut comm = CpuCommunicator::init(&env, None, cpu_options(&a.launch))
        .with_context(|| format!("rank {}: forming the CPU communicator", env.rank))?;
    let store = open_checkpoint_store(a)?;
    demo_round(a, &cfg, &mut comm, store.as_deref(), None)?;
    Ok(ExitCode::SUCCESS)
}

/// An elastic train-demo: joins rendezvous rounds until the training is done. Each round forms the CPU
/// communicator over the round's nodes and resumes from the newest checkpoint; when the group changes (a
/// node lost: a failed all-reduce or the store's word; a node waiting to join) the ranks leave the round,
/// at a common step and after a checkpoint when they can, and meet again.
fn run_demo_elastic(a: &DemoArgs, settings: ElasticSettings) -> anyhow::Result<ExitCode> {
    let cfg = demo_config(a)?;
    let store = open_checkpoint_store(a)?;
    if store.is_none() {
        bail!(
            "an elastic train-demo (PET_NNODES={}:{}) needs --checkpoint-dir (KUBETRAIN_CHECKPOINT_DIR): each \
             time the group re-forms it resumes from the newest checkpoint",
            settings.min_nodes,
            settings.max_nodes
        );
    }
    println!(
        "train-demo: elastic, {} to {} nodes, rendezvous {} at {}:{}",
        settings.min_nodes,
        settings.max_nodes,
        settings.run_id,
        settings.endpoint_host,
        settings.endpoint_port
    );
    let mut agent =
        ElasticAgent::start(settings, None).context("joining the elastic rendezvous")?;
    loop {
        let Some(mut round) = agent.next_round().context("elastic rendezvous")? else {
            println!("train-demo: the job finished while this node waited for a round");
            return Ok(ExitCode::SUCCESS);
        };
        println!(
            "rendezvous round {}: node rank {} of {} nodes (restart {})",
            round.generation, round.node_rank, round.nnodes, round.restarts
        );
        let env = round.rank_env();
        let mut comm = match CpuCommunicator::init(&env, round.store.take(), cpu_options(&a.launch))
        {
            Ok(comm) => comm,
            Err(error) => {
                eprintln!(
                    "round {}: forming the group failed ({error}); meeting again",
                    round.generation
                );
                continue;
            }
        };
        let changed = || agent.membership_changed();
        match demo_round(a, &cfg, &mut comm, store.as_deref(), Some(&changed)) {
            Ok(report) if !report.interrupted => {
                drop(comm);
                agent
                    .finish()
                    .context("telling the rendezvous the job finished")?;
                return Ok(ExitCode::SUCCESS);
            }
            Ok(_) => println!(
                "round {}: the group changes; left at a checkpoint",
                round.generation
            ),
            Err(error) => eprintln!(
                "round {}: training stopped ({error:#}); meeting again",
                round.generation
            ),
        }
    }
}

/// Trains over `comm` (resuming from and writing checkpoints to `store`), printing and reporting progress
/// from rank 0.
fn demo_round(
    a: &DemoArgs,
    cfg: &DemoConfig,
    comm: &mut CpuCommunicator,
    store: Option<&dyn kubetrain_collective::checkpoint::CheckpointStore>,
    interrupt: Option<&dyn Fn() -> bool>,
) -> anyhow::Result<demo::DemoReport> {
    let rank = comm.rank();
    if rank == 0 {
        println!(
            "train-demo: {} ranks, {} samples, {} features, {} steps (gradients averaged with all_reduce)",
            comm.world_size(),
            cfg.samples,
            cfg.features,
            cfg.steps
        );
    }
    // Inside a TrainJob with the TrainJobStatus env, rank 0 reports progress to the operator (throttled to
    // one update per 5 s, as the Python SDK) and always sends the last one.
    let reporter = if rank == 0 {
        Reporter::from_env().unwrap_or_else(|error| {
            eprintln!("train-demo: not reporting progress: {error}");
            None
        })
    } else {
        None
    };
    let progress = DemoProgress::new(cfg, store.is_some());
    let options = demo::DemoOptions {
        checkpoint: store.map(|store| demo::CheckpointOptions {
            store,
            every: a.checkpoint_every,
            keep: a.keep_checkpoints,
        }),
        time_limit: a.max_seconds.map(Duration::from_secs_f64),
        step_delay: Duration::from_millis(a.step_delay_ms),
        interrupt,
    };
    let location = store.map(|s| s.location()).unwrap_or_default();
    let report = demo::train(comm, cfg, &options, |event| match event {
        demo::DemoEvent::Step { step, loss } => {
            if rank == 0 {
                println!("step {step:>4}  loss {loss:.6}");
            }
            progress.last.set((step as usize, loss));
            if let Some(reporter) = &reporter {
                progress.report_step(reporter, step as usize, loss);
            }
        }
        demo::DemoEvent::SkippedCheckpoint(warning) => println!("warning: {warning}"),
        demo::DemoEvent::Resumed { name, step, loss } => {
            progress.first_step.set(step as usize);
            progress.resumed_from.set(Some(step));
            progress.report_resume.set(true);
            progress
                .last_checkpoint
                .set(Some((step, std::time::SystemTime::now())));
            if rank == 0 {
                println!("resumed from checkpoint {name} at step {step} (loss {loss:.6})");
            }
        }
        demo::DemoEvent::Checkpointed { step, saved } => {
            let ms = saved.elapsed.as_secs_f64() * 1000.0;
            progress.checkpointed.set((step, saved.bytes as u64, ms));
            progress
                .last_checkpoint
                .set(Some((step, std::time::SystemTime::now())));
            // At once (at most once a second): the operator's record of the last checkpoint must not lag a
            // failure by the 5 s throttle.
            if let Some(reporter) = &reporter {
                let (at, loss) = progress.last.get();
                let due = progress
                    .checkpoint_reported
                    .get()
                    .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
                let sent = if due {
                    progress.checkpoint_reported.set(Some(Instant::now()));
                    reporter.report_now(&progress.at(at, loss))
                } else {
                    reporter.report(&progress.at(at, loss)).map(|_| ())
                };
                if let Err(error) = sent {
                    eprintln!("train-demo: progress update failed: {error}");
                }
            }
            println!(
                "checkpoint: wrote {} (step {step}, {} bytes, {ms:.1} ms) to {location}",
                saved.name, saved.bytes
            )
        }
    })?;
    if let (Some(reporter), Some(&last)) = (&reporter, report.losses.last()) {
        let last_step = report.first_step as usize + report.losses.len().saturating_sub(1);
        match reporter.report_now(&progress.at(last_step, last)) {
            Ok(()) => eprintln!("train-demo: final progress reported"),
            Err(error) => eprintln!("train-demo: final progress update failed: {error}"),
        }
    }
    if rank == 0 && !report.interrupted {
        print_demo_summary(&report);
    }
    Ok(report)
}

fn print_demo_summary(report: &demo::DemoReport) {
    let max_err = report
        .weights
        .iter()
        .zip(&report.true_weights)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    println!(
        "done: final loss {:.6}, max weight error {max_err:.4}",
        report.losses.last().copied().unwrap_or(0.0)
    );
}

fn info() -> anyhow::Result<ExitCode> {
    match RankEnv::from_env() {
        Ok(env) => println!(
            "rendezvous: {} — rank {} of {}, local rank {} of {}, store {}:{}",
            env.flavour,
            env.rank,
            env.world_size,
            env.local_rank,
            env.local_world_size,
            env.master_addr,
            env.master_port
        ),
        Err(e) => println!("rendezvous: {e}"),
    }
    match nccl::Library::load() {
        Ok(lib) => println!(
            "nccl: {} (version {})",
            lib.path().display(),
            lib.version_string()
        ),
        Err(e) => println!("nccl: {e}"),
    }
    println!(
        "cuda driver: {}",
        if nccl::cuda_driver_present() {
            "found"
        } else {
            "not found"
        }
    );
    Ok(ExitCode::SUCCESS)
}
