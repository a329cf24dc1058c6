//! `kubetrain crd`: the CRDs, derived from the Rust types.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use kubetrain_api::crd::crds;

/// Arguments of `kubetrain crd`.
#[derive(Debug, Args)]
pub(crate) struct CrdArgs {
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Yaml)]
    output: Format,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Yaml,
    Json,
    /// A field reference (docs/crd-reference.md).
    Markdown,
}

pub(crate) fn run(args: CrdArgs) -> anyhow::Result<ExitCode> {
    let crds = crds();
    let mut out = std::io::stdout().lock();
    match args.output {
        Format::Yaml => {
            for (i, crd) in crds.iter().enumerate() {
                if i > 0 {
                    writeln!(out, "---")?;
                }
                write!(out, "{}", kubetrain_api::to_yaml(crd)?)?;
            }
        }
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&crds)?)?,
        Format::Markdown => write!(out, "{}", kubetrain_api::crd::reference_markdown())?,
    }
    Ok(ExitCode::SUCCESS)
}
