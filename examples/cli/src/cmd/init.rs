//! `kubetrain init dataset|model`: the dataset and model initializers of a TrainJob.
//!
//! Reads upstream's environment contract (`STORAGE_URI`, `IGNORE_PATTERNS`, `ENDPOINT`,
//! `ACCESS_KEY_ID`, `SECRET_ACCESS_KEY`, `REGION`, `ROLE_ARN`, `ACCESS_TOKEN`, `HF_ENDPOINT`), so
//! the command can replace upstream's initializer images; flags override the environment.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use kubetrain_initializer::{
    ENV_IGNORE_PATTERNS, ENV_STORAGE_URI, InitConfig, Kind, ProgressMode, initialize_blocking,
};

/// What to download.
#[derive(Debug, Subcommand)]
pub(crate) enum InitCommand {
    /// Download the dataset of a TrainJob (default destination /workspace/dataset).
    Dataset(InitArgs),
    /// Download the model of a TrainJob (default destination /workspace/model; skips
    /// *.msgpack, *.h5, *.bin, *.pt, *.pth unless IGNORE_PATTERNS says otherwise).
    Model(InitArgs),
}

/// Options shared by `init dataset` and `init model`.
#[derive(Debug, Args)]
pub(crate) struct InitArgs {
    /// s3://bucket/prefix or hf://org/name [env: STORAGE_URI]
    #[arg(long, value_name = "URI")]
    storage_uri: Option<String>,
    /// Directory to download into.
    #[arg(long, value_name = "DIR")]
    dest: Option<PathBuf>,
    /// Comma-separated globs of files to skip; an empty value clears the model default
    /// [env: IGNORE_PATTERNS]
    #[arg(long, value_name = "GLOBS")]
    ignore_patterns: Option<String>,
    /// Files downloaded in parallel.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    jobs: u16,
    /// Retries per request on transient errors (connection failures, 5xx, stalls).
    #[arg(long, default_value_t = 4)]
    retries: u32,
    /// Progress display: a bar on a terminal, log lines otherwise (auto).
    #[arg(long, value_enum, default_value_t = Progress::Auto)]
    progress: Progress,
    /// Skip flushing each file to disk before it is renamed into place (faster on slow disks,
    /// but a power loss may leave a renamed file incomplete).
    #[arg(long)]
    no_sync: bool,
    /// Keep multipart S3 objects whose checksum cannot be verified (the server reports no part
    /// count and no common part size explains the ETag) instead of failing; each is logged as
    /// not verified [env: KUBETRAIN_ACCEPT_UNVERIFIED_MULTIPART=true]
    #[arg(long)]
    accept_unverified_multipart: bool,
}

/// `--progress` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Progress {
    /// Bar on a terminal, log lines otherwise.
    Auto,
    /// Always the bar.
    Bar,
    /// Log lines every few seconds.
    Log,
    /// Only the final summary.
    Off,
}

/// Runs the initializer and prints a one-line summary.
pub(crate) fn run(command: InitCommand) -> anyhow::Result<ExitCode> {
    let (kind, args) = match command {
        InitCommand::Dataset(args) => (Kind::Dataset, args),
        InitCommand::Model(args) => (Kind::Model, args),
    };
    let config = build_config(kind, &args, |key| std::env::var(key).ok())?;
    // Log lines (progress, retries) go to stderr; RUST_LOG refines them.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
    let summary = initialize_blocking(&config)
        .with_context(|| format!("{kind} initializer for {}", config.storage_uri))?;
    println!(
        "{kind}: {} files ({} bytes) downloaded to {} in {:.1?}; {} already present, {} ignored",
        summary.files_downloaded,
        summary.bytes_downloaded,
        summary.destination.display(),
        summary.elapsed,
        summary.files_already_present,
        summary.files_ignored,
    );
    Ok(ExitCode::SUCCESS)
}

/// Flags first, then the environment (upstream's contract).
fn build_config(
    kind: Kind,
    args: &InitArgs,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<InitConfig> {
    let lookup = |key: &str| match key {
        ENV_STORAGE_URI if args.storage_uri.is_some() => args.storage_uri.clone(),
        ENV_IGNORE_PATTERNS if args.ignore_patterns.is_some() => args.ignore_patterns.clone(),
        _ => env(key),
    };
    let mut config = InitConfig::from_lookup(kind, lookup)?;
    if let Some(dest) = &args.dest {
        config.destination = dest.clone();
    }
    config.tuning.concurrency = usize::from(args.jobs);
    config.tuning.max_retries = args.retries;
    config.tuning.initial_backoff = Duration::from_millis(500);
    config.tuning.sync_files = !args.no_sync;
    // The flag only turns it on: the variable may have done so already.
    config.tuning.accept_unverified_multipart |= args.accept_unverified_multipart;
    config.progress = match args.progress {
        Progress::Auto => ProgressMode::Auto,
        Progress::Bar => ProgressMode::Bar,
        Progress::Log => ProgressMode::Log,
        Progress::Off => ProgressMode::Off,
    };
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: InitCommand,
    }

    fn parse(argv: &[&str]) -> (Kind, InitArgs) {
        match Cli::try_parse_from(argv).unwrap().command {
            InitCommand::Dataset(args) => (Kind::Dataset, args),
            InitCommand::Model(args) => (Kind::Model, args),
        }
    }

    #[test]
    fn flags_override_the_environment() {
        let env = |key: &str| match key {
            "STORAGE_URI" => Some("s3://from-env/prefix".to_string()),
            "IGNORE_PATTERNS" => Some("*.tmp".to_string()),
            "ENDPOINT" => Some("http://127.0.0.1:9000".to_string()),
            _ => None,
        };
        let (kind, args) = parse(&["x", "model"]);
        let config = build_config(kind, &args, env).unwrap();
        assert_eq!(config.storage_uri.to_string(), "s3://from-env/prefix");
        assert!(config.ignore_patterns.matches("a.tmp"));
        assert_eq!(config.destination, PathBuf::from("/workspace/model"));
        assert_eq!(config.s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert!(!config.tuning.accept_unverified_multipart);

        let (kind, args) = parse(&[
            "x",
            "dataset",
            "--storage-uri",
            "hf://tatsu-lab/alpaca",
            "--dest",
            "/tmp/d",
            "--ignore-patterns",
            "",
            "--jobs",
            "3",
            "--progress",
            "log",
            "--no-sync",
            "--accept-unverified-multipart",
        ]);
        let config = build_config(kind, &args, env).unwrap();
        assert_eq!(config.storage_uri.to_string(), "hf://tatsu-lab/alpaca");
        assert_eq!(config.destination, PathBuf::from("/tmp/d"));
        assert!(config.ignore_patterns.is_empty());
        assert_eq!(config.tuning.concurrency, 3);
        assert_eq!(config.progress, ProgressMode::Log);
        assert!(!config.tuning.sync_files);
        assert!(config.tuning.accept_unverified_multipart);
    }

    #[test]
    fn bad_input_is_one_clear_error() {
        let (kind, args) = parse(&["x", "dataset"]);
        let err = build_config(kind, &args, |_| None).unwrap_err();
        assert!(err.to_string().contains("STORAGE_URI is not set"), "{err}");
        let (kind, args) = parse(&["x", "model", "--storage-uri", "gs://b/x"]);
        let err = build_config(kind, &args, |_| None).unwrap_err();
        assert!(
            err.to_string().contains("unsupported scheme \"gs\""),
            "{err}"
        );
        assert!(Cli::try_parse_from(["x", "model", "--jobs", "0"]).is_err());
    }
}
