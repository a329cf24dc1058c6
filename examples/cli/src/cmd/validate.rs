//! `kubetrain validate`: CEL and webhook rules, offline.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::input;

/// Arguments of `kubetrain validate`.
#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// Files or directories of TrainJobs and runtimes to check (`-` for stdin; a directory's .yaml, .yml and
    /// .json files); repeatable.
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        value_name = "FILE|DIR"
    )]
    files: Vec<PathBuf>,
    /// Files of TrainingRuntimes / ClusterTrainingRuntimes that TrainJobs may reference; repeatable.
    /// The built-in runtimes are used for names no file defines.
    #[arg(long = "runtime", value_name = "FILE|DIR")]
    runtimes: Vec<PathBuf>,
    /// Output format of the findings.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Text,
    Json,
}

pub(crate) fn run(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let files = input::expand(&args.files)?;
    let runtimes = input::expand(&args.runtimes)?;
    let checked = input::check(&files, &runtimes)?;
    match args.output {
        Format::Text => {
            checked.report();
            for sourced in &checked.documents {
                let document = &sourced.document;
                let name = document.name();
                let failed = checked
                    .findings
                    .iter()
                    .any(|f| f.is_error() && f.kind == document.kind() && f.name == name);
                if !failed {
                    println!("{}/{} valid", document.kind(), name);
                }
            }
        }
        Format::Json => {
            for line in &checked.unreadable {
                eprintln!("{line}");
            }
            let shown: Vec<serde_json::Value> = checked
                .findings
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "kind": f.kind, "name": f.name, "path": f.path, "message": f.message,
                        "severity": if f.is_error() { "error" } else { "warning" },
                    })
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&shown).context("writing findings")?
            );
        }
    }
    Ok(if checked.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
