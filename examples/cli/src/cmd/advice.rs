//! `kubetrain checkpoint-advice [NAME]`: the checkpoint interval that costs least for a running or finished
//! TrainJob (Young/Daly, [`kubetrain_acceptance::checkpoint_advice`]), from the interruption rate of its
//! capacity and what its trainer reported through `trainerStatus` (`checkpoint_write_ms`,
//! `samples_per_second`) and its node count; flags give or override each input, so that the command also
//! works without a cluster.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kubetrain_acceptance::checkpoint_advice::{self, Advice, Inputs};
use kubetrain_acceptance::metrics::{self, TrainerMetrics};
use kubetrain_api::TrainJob;

/// Output format.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Format {
    /// A table.
    Text,
    /// The advice as JSON (the shape of `checkpointAdvice` in `acceptance.json`).
    Json,
}

/// `kubetrain checkpoint-advice`.
#[derive(Debug, Args)]
pub(crate) struct AdviceArgs {
    /// The TrainJob to read (its trainer's reported checkpoint write time and throughput, its node count);
    /// without it every input comes from the flags.
    name: Option<String>,
    /// Interruptions (spot reclaims, lost nodes) per node-hour of the capacity the job runs on.
    #[arg(long, value_name = "R")]
    interruption_rate: f64,
    /// Seconds one checkpoint blocks training (default: the job's reported `checkpoint_write_ms`).
    #[arg(long, value_name = "C")]
    checkpoint_seconds: Option<f64>,
    /// Seconds of training between checkpoints now (or give --every-steps with --samples-per-step).
    #[arg(long, value_name = "SECS")]
    interval_seconds: Option<f64>,
    /// Steps between checkpoints: the interval is this × --samples-per-step / the reported samples/s.
    #[arg(long, value_name = "N", requires = "samples_per_step")]
    every_steps: Option<u64>,
    /// Samples per step (with --every-steps).
    #[arg(long, value_name = "N")]
    samples_per_step: Option<u64>,
    /// Throughput, samples/s (default: the job's reported `samples_per_second`).
    #[arg(long, value_name = "S")]
    samples_per_second: Option<f64>,
    /// Nodes of the job (default: the TrainJob's `spec.trainer.numNodes`, else 1).
    #[arg(long, value_name = "N")]
    nodes: Option<u32>,
    /// GPUs per node (lost GPU-hours count nodes × this).
    #[arg(long, value_name = "N", default_value_t = 1)]
    gpus_per_node: u32,
    /// Seconds from an interruption until training runs again.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    restart_seconds: f64,
    /// Price of one GPU-hour (adds the cost per week).
    #[arg(long, value_name = "PRICE", default_value_t = 0.0)]
    gpu_hour_price: f64,
    /// Namespace of the TrainJob (default: the kubeconfig context's).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// The kubeconfig file (default: `KUBECONFIG`, else `~/.kube/config`, else the in-cluster config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

/// What the TrainJob told.
#[derive(Default)]
struct Reported {
    nodes: Option<u32>,
    checkpoint_seconds: Option<f64>,
    samples_per_second: Option<f64>,
}

/// Runs the command.
pub(crate) fn run(args: AdviceArgs) -> Result<ExitCode> {
    let reported = match &args.name {
        None => Reported::default(),
        Some(name) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?
            .block_on(read_job(&args, name))?,
    };
    let advice = checkpoint_advice::advise(&inputs(&args, &reported)?)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    match args.output {
        Format::Json => println!("{}", serde_json::to_string_pretty(&advice)?),
        Format::Text => print_text(&advice, args.gpu_hour_price > 0.0),
    }
    Ok(ExitCode::SUCCESS)
}

/// The model's inputs: the flags, else what the job reported.
fn inputs(args: &AdviceArgs, reported: &Reported) -> Result<Inputs> {
    let source = if args.name.is_some() {
        " (the job reported none)"
    } else {
        ""
    };
    let Some(checkpoint_seconds) = args.checkpoint_seconds.or(reported.checkpoint_seconds) else {
        bail!("--checkpoint-seconds is needed{source}: the time one checkpoint blocks training");
    };
    let interval = match (
        args.interval_seconds,
        args.every_steps,
        args.samples_per_step,
    ) {
        (Some(t), ..) => t,
        (None, Some(every), Some(per_step)) => {
            let Some(sps) = args
                .samples_per_second
                .or(reported.samples_per_second)
                .filter(|s| *s > 0.0)
            else {
                bail!("--samples-per-second is needed with --every-steps{source}");
            };
            every as f64 * per_step as f64 / sps
        }
        _ => bail!(
            "the current interval is needed: --interval-seconds SECS, or --every-steps N --samples-per-step N"
        ),
    };
    Ok(Inputs {
        interruptions_per_node_hour: args.interruption_rate,
        nodes: args.nodes.or(reported.nodes).unwrap_or(1),
        gpus_per_node: args.gpus_per_node,
        checkpoint_seconds,
        restart_seconds: args.restart_seconds,
        current_interval_seconds: interval,
        gpu_hour_price: args.gpu_hour_price,
    })
}

/// Reads the TrainJob `name`: its node count and what its trainer reported.
async fn read_job(args: &AdviceArgs, name: &str) -> Result<Reported> {
    let config = if args.kubeconfig.is_none() && args.context.is_none() {
        kube::Config::infer()
            .await
            .context("no cluster configured")?
    } else {
        let kubeconfig = match &args.kubeconfig {
            Some(path) => Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?,
            None => Kubeconfig::read().context("reading kubeconfig")?,
        };
        let options = KubeConfigOptions {
            context: args.context.clone(),
            ..Default::default()
        };
        kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?
    };
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config)?;
    let job: TrainJob = kube::Api::namespaced(client, &namespace)
        .get(name)
        .await
        .with_context(|| format!("reading TrainJob {namespace}/{name}"))?;
    let status = job
        .status
        .as_ref()
        .and_then(|s| s.trainer_status.as_ref())
        .map(serde_json::to_value)
        .transpose()?
        .unwrap_or_default();
    let m = TrainerMetrics::from_trainer_status(&status);
    Ok(Reported {
        nodes: job
            .spec
            .trainer
            .as_ref()
            .and_then(|t| t.num_nodes)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0),
        checkpoint_seconds: m.f64(metrics::CHECKPOINT_WRITE_MS).map(|ms| ms / 1000.0),
        samples_per_second: m.f64(metrics::SAMPLES_PER_SECOND),
    })
}

fn seconds(v: f64) -> String {
    if v >= 3600.0 {
        format!("{:.2} h", v / 3600.0)
    } else if v >= 60.0 {
        format!("{:.1} min", v / 60.0)
    } else {
        format!("{v:.1} s")
    }
}

fn print_text(a: &Advice, with_cost: bool) {
    println!(
        "{} interruptions per node-hour × {} nodes: one every {} (MTBF); checkpoint {}, restart {}",
        a.interruptions_per_node_hour,
        a.nodes,
        seconds(a.mtbf_seconds),
        seconds(a.checkpoint_seconds),
        seconds(a.restart_seconds)
    );
    println!(
        "{:<8} {:>12} {:>11} {:>18}{}",
        "",
        "INTERVAL",
        "TIME LOST",
        "GPU-HOURS/WEEK",
        if with_cost { "       COST/WEEK" } else { "" }
    );
    for (label, interval, share, hours, cost) in [
        (
            "current",
            a.current_interval_seconds,
            a.lost_share.current,
            a.lost_gpu_hours_per_week.current,
            a.lost_cost_per_week.map(|c| c.current),
        ),
        (
            "optimal",
            a.optimal_interval_seconds,
            a.lost_share.optimal,
            a.lost_gpu_hours_per_week.optimal,
            a.lost_cost_per_week.map(|c| c.optimal),
        ),
    ] {
        let cost = cost.map_or_else(String::new, |c| format!(" {c:>15.2}"));
        println!(
            "{label:<8} {:>12} {:>10.2}% {hours:>18.2}{cost}",
            seconds(interval),
            share * 100.0
        );
    }
    println!(
        "Young √(2·C·M) = {}, Daly = {}; model: {}",
        seconds(a.young_interval_seconds),
        seconds(a.daly_interval_seconds),
        a.model
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: AdviceArgs,
    }

    fn parse(argv: &[&str]) -> AdviceArgs {
        Cli::try_parse_from(std::iter::once("advice").chain(argv.iter().copied()))
            .expect("parses")
            .args
    }

    #[test]
    fn flags_alone_give_the_advice() {
        let args = parse(&[
            "--interruption-rate",
            "0.05",
            "--checkpoint-seconds",
            "30",
            "--interval-seconds",
            "600",
            "--nodes",
            "4",
        ]);
        let advice =
            checkpoint_advice::advise(&inputs(&args, &Reported::default()).unwrap()).unwrap();
        assert!((advice.mtbf_seconds - 18_000.0).abs() < 1e-6);
        assert!(advice.optimal_interval_seconds > 600.0);
    }

    #[test]
    fn the_interval_comes_from_steps_and_the_reported_throughput() {
        let args = parse(&[
            "job",
            "--interruption-rate",
            "0.1",
            "--every-steps",
            "100",
            "--samples-per-step",
            "32",
        ]);
        let reported = Reported {
            nodes: Some(2),
            checkpoint_seconds: Some(4.0),
            samples_per_second: Some(64.0),
        };
        let i = inputs(&args, &reported).unwrap();
        assert!((i.current_interval_seconds - 50.0).abs() < 1e-9);
        assert_eq!((i.nodes, i.checkpoint_seconds), (2, 4.0));
        // Nothing reported and no flag: the error names the flag.
        let err = inputs(&args, &Reported::default()).unwrap_err().to_string();
        assert!(err.contains("--checkpoint-seconds"), "{err}");
    }
}
