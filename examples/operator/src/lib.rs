//! `kubetrain-operator` as a library: [`main_with`] parses the operator's flags (every one with its environment
//! variable), sets up logging and the async runtime, and runs one [`Operator`] — the TrainJob controller, the
//! admission webhooks, the status server, Lease leader election and the probe/metrics endpoints — until SIGTERM
//! or Ctrl-C. The shipped binary calls it unchanged; a custom operator adds its plugins
//! (`examples/custom-operator`, docs/plugins.md):
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     kubetrain_operator::main_with("my-operator", |operator| operator /* .plugin(MyPlugin) */)
//! }
//! ```

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use kubetrain_controller::Operator;

mod cli;
mod config_file;
mod log_format;
mod upstream_flags;

use cli::{Cli, LogFormat};
use config_file::explicit;

/// Runs the operator binary named `name` (in `--help` and error messages): the flags of `kubetrain-operator`
/// become an [`Operator`], `customize` adds to it (e.g. `Operator::plugin`), then it runs against the cluster.
/// Returns the process's exit code: failure when the flags, the offline checks (election timings, the webhook
/// certificate, the plugins' names) or the run fail.
pub fn main_with(name: &'static str, customize: impl FnOnce(Operator) -> Operator) -> ExitCode {
    let matches = Cli::command().name(name).bin_name(name).get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    // --config: the file under the flags; --check-config stops here.
    let file = match cli.config.clone() {
        Some(path) => match config_file::load(&path, &mut cli, &matches) {
            Ok(file) => Some(file),
            Err(problems) => {
                for problem in problems {
                    eprintln!("{name}: {}: {problem}", path.display());
                }
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    // Upstream's --feature-gates override the file's featureGates; an explicit --trainjob-status wins.
    if let Some(on) = cli
        .upstream
        .feature_gates
        .as_ref()
        .and_then(|g| g.trainjob_status())
        && !explicit(&matches, "trainjob_status")
    {
        cli.trainjob_status = on;
    }
    if cli.check_config
        && let Some(file) = &file
    {
        print!("{}", file.effective(&cli).to_yaml());
        return ExitCode::SUCCESS;
    }
    init_logging(
        cli.upstream
            .log_format(cli.log_format, explicit(&matches, "log_format")),
        cli.upstream.log_filter(),
    );
    // One rustls provider for the kube client and the webhook server alike (ring, as the rest of the tree).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match async_runtime(cli.worker_threads) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("{name}: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // The offline checks (election timings, the certificate) come before the cluster is contacted.
    let outcome = runtime.block_on(async {
        let operator = match &file {
            Some(file) => file.operator(&mut cli)?,
            None => cli.operator()?,
        };
        let operator = customize(operator);
        operator.run(cli.client().await?).await?;
        anyhow::Ok(())
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error:#}");
            eprintln!("{name}: {error:#}");
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

/// Logs to stderr in `format`, filtered by RUST_LOG, else by `default_filter` (from upstream's --zap-* flags).
fn init_logging(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_ansi(false).init(),
    }
}
