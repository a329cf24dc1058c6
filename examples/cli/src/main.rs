//! `kubetrain`: the command line of kubetrain, Kubeflow Trainer V2 in Rust.
//!
//! Each subcommand lives in its own module under `cmd/` and is a thin layer over a library crate.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

/// Kubeflow Trainer V2 in Rust: validate, render and run TrainJobs.
#[derive(Debug, Parser)]
#[command(name = "kubetrain", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions of trainer.kubeflow.org/v1alpha1 as YAML.
    Crd(cmd::crd::CrdArgs),
    /// Check TrainJobs and training runtimes offline (CEL rules and webhook rules).
    Validate(cmd::validate::ValidateArgs),
    /// Render TrainJobs into the JobSet and companion objects the controller would apply (no cluster needed).
    Render(cmd::render::RenderArgs),
    // subcommands: render (issue 3)
    /// Kueue admission without a cluster: simulate queues, explain why a workload waits.
    Queue(cmd::queue::QueueArgs),
    // subcommands: queue (issue 4)
    /// Collectives of a TrainJob's ranks: nccl-tests style benchmark (CPU or NCCL), data-parallel demo.
    Collective(cmd::collective::CollectiveArgs),
    // subcommands: collective (issue 5)
    /// Download the dataset or the model of a TrainJob (upstream's initializer env contract).
    #[command(subcommand)]
    Init(cmd::init::InitCommand),
    // subcommands: init (issue 8)
    /// Run a TrainJob on this machine: every pod a local process with the env a cluster would give it.
    Run(cmd::run::RunArgs),
    // subcommands: run (issue 6)
    #[command(flatten)]
    Jobs(cmd::jobs::JobsCommand),
    // subcommands: submit, get, list, logs, wait, delete, runtimes (issue 6)
    /// The GPU-cluster acceptance test: queue, staging, benchmark, training, checkpoint restore, labels, cost.
    Acceptance(cmd::acceptance::AcceptanceArgs),
    // subcommands: acceptance (issue 17)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crd(args) => cmd::crd::run(args),
        Command::Validate(args) => cmd::validate::run(args),
        Command::Render(args) => cmd::render::run(args),
        // dispatch: render (issue 3)
        Command::Queue(args) => cmd::queue::run(args),
        // dispatch: queue (issue 4)
        Command::Collective(args) => cmd::collective::run(args),
        // dispatch: collective (issue 5)
        Command::Init(command) => cmd::init::run(command),
        // dispatch: init (issue 8)
        Command::Run(args) => cmd::run::run(args),
        // dispatch: run (issue 6)
        Command::Jobs(command) => cmd::jobs::run(command),
        // dispatch: submit, get, list, logs, wait, delete, runtimes (issue 6)
        Command::Acceptance(args) => cmd::acceptance::run(args),
        // dispatch: acceptance (issue 17)
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
