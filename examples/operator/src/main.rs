//! `kubetrain-operator`: flag parsing, logging and one call to [`kubetrain_controller::Operator`], which runs
//! the TrainJob controller, the admission webhooks, the status server, Lease leader election and the
//! probe/metrics endpoints side by side until SIGTERM or Ctrl-C.

use std::process::ExitCode;

use clap::Parser;

mod cli;

use cli::{Cli, LogFormat};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    // One rustls provider for the kube client and the webhook server alike (ring, as the rest of the tree).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match async_runtime(cli.worker_threads) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("kubetrain-operator: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // The offline checks (election timings, the certificate) come before the cluster is contacted.
    let outcome = runtime.block_on(async {
        let operator = cli.operator()?;
        operator.run(cli.client().await?).await?;
        anyhow::Ok(())
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("kubetrain-operator: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// One thread (`current_thread`) for `--worker-threads 1`; otherwise a work-stealing pool, one worker per CPU
/// for 0.
fn async_runtime(worker_threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = match worker_threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        0 => tokio::runtime::Builder::new_multi_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(n);
            builder
        }
    };
    builder.enable_all().build()
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_ansi(false).init(),
    }
}
