//! `kubetrain`: the command line of kubetrain, Kubeflow Trainer V2 in Rust.
//!
//! Each subcommand lives in its own module under `cmd/` and is a thin layer over a library crate.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

/// Kubeflow Trainer V2 in Rust: check, render and run TrainJobs, on this machine or on a cluster.
// The summary is this comment, not the package description, so that it never lists only some commands.
#[derive(Debug, Parser)]
#[command(name = "kubetrain", version, long_about = None)]
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
    /// The checkpoint interval that costs least for a TrainJob (Young/Daly), from an interruption rate.
    CheckpointAdvice(cmd::advice::AdviceArgs),
    /// Training Operator v1 jobs (PyTorchJob, TFJob, MPIJob, ...) to TrainJobs and runtimes, with a report.
    Migrate(cmd::migrate::MigrateArgs),
    /// Hyperparameter search: run an OptimizationJob on a cluster or on this machine, with a report.
    Optimize(cmd::optimize::OptimizeArgs),
    /// Multi-tenancy guard rails: check a cluster against the GPU-cluster guide, onboard a team.
    Tenancy(cmd::tenancy::TenancyArgs),
}

/// The exit status of a process that wrote into a closed pipe: what a shell reports for one killed by SIGPIPE
/// (128 + 13), as for `cat` or `kubectl` in `... | head -1`.
const CLOSED_PIPE: u8 = 141;

/// Whether `err` comes from writing into stdout after its reader went away. A broken pipe elsewhere (a
/// socket to a peer or a server that closed) is a failure to report, so stdout itself is asked too.
fn closed_pipe(err: &anyhow::Error) -> bool {
    let broken_pipe = err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    });
    broken_pipe && stdout_reader_gone()
}

/// Whether stdout's reader has gone: a pipe or socket whose other end is closed polls as an error or a
/// hang-up at once.
fn stdout_reader_gone() -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(&stdout, PollFlags::OUT)];
    // A zero timeout: the answer is wanted now, not once stdout can take more.
    poll(&mut fds, Some(&Timespec::default())).is_ok()
        && fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

/// Makes `println!` into a closed stdout end the process quietly with [`CLOSED_PIPE`] instead of a panic
/// message: Rust ignores SIGPIPE, so a reader that stops early (`kubetrain crd | head -1`) would otherwise
/// get a backtrace hint on stderr. Setting SIGPIPE back to its default would need `unsafe`.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(i32::from(CLOSED_PIPE));
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `run` owns running pods: it must stop them, not exit in the middle of a print.
    let quiet_pipe = !matches!(cli.command, Command::Run(_) | Command::Acceptance(_));
    if quiet_pipe {
        quiet_on_closed_pipe();
    }
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
        Command::CheckpointAdvice(args) => cmd::advice::run(args),
        // dispatch: acceptance (issue 17)
        Command::Migrate(args) => cmd::migrate::run(args),
        Command::Optimize(args) => cmd::optimize::run(args),
        Command::Tenancy(args) => cmd::tenancy::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) if quiet_pipe && closed_pipe(&err) => ExitCode::from(CLOSED_PIPE),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::closed_pipe;
    use std::io::{Error, ErrorKind};

    #[test]
    fn a_broken_pipe_while_stdout_is_read_is_an_error_to_report() {
        // A socket to a peer that closed (a rendezvous store, a server) gives the same error kind as a
        // closed stdout; this process's stdout still has its reader.
        let socket =
            anyhow::Error::from(Error::from(ErrorKind::BrokenPipe)).context("telling the store");
        assert!(!closed_pipe(&socket));
        assert!(!closed_pipe(&anyhow::anyhow!("something else")));
    }
}
