//! `kubetrain optimize`: hyperparameter search with OptimizationJobs (being written).

use std::process::ExitCode;

/// `kubetrain optimize` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct OptimizeArgs {}

/// Runs `kubetrain optimize`.
pub(crate) fn run(_args: OptimizeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("kubetrain optimize is not built yet")
}
