//! `kubetrain tenancy`: the GPU-cluster guide's multi-tenancy checklist (being written).

use std::process::ExitCode;

/// `kubetrain tenancy` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct TenancyArgs {}

/// Runs `kubetrain tenancy`.
pub(crate) fn run(_args: TenancyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("kubetrain tenancy is not built yet")
}
