//! `kubetrain validate`: CEL and webhook rules, offline.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, ValueEnum};
use kubetrain_api::validation::validate_document;
use kubetrain_api::{FieldError, LocatedDocument, ParseError, RuntimeCatalog, parse_documents};

/// Arguments of `kubetrain validate`.
#[derive(Debug, Args)]
pub(crate) struct ValidateArgs {
    /// Files of TrainJobs and runtimes to check (`-` for stdin); repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    files: Vec<PathBuf>,
    /// Files of TrainingRuntimes / ClusterTrainingRuntimes that TrainJobs may reference; repeatable.
    /// The built-in runtimes are used for names no file defines.
    #[arg(long = "runtime")]
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
    let mut findings: Vec<FieldError> = Vec::new();
    let mut checked: Vec<LocatedDocument> = Vec::new();
    let mut catalog = RuntimeCatalog::new();
    let mut unreadable = false;

    for (path, is_target) in args
        .files
        .iter()
        .map(|p| (p, true))
        .chain(args.runtimes.iter().map(|p| (p, false)))
    {
        let text = super::read_input(path)?;
        match parse_documents(&text) {
            Ok(documents) => {
                for document in documents {
                    catalog.add_document(&document.document);
                    if is_target {
                        checked.push(document);
                    }
                }
            }
            Err(ParseError::Fields(errors)) => findings.extend(errors),
            Err(ParseError::Syntax(message)) => {
                eprintln!("{}: invalid YAML: {message}", path.display());
                unreadable = true;
            }
        }
    }
    for runtime in kubetrain_jobset::builtin::runtimes() {
        catalog.add_cluster_if_absent(runtime);
    }
    for document in &checked {
        findings.extend(validate_document(&document.document, &catalog));
    }

    let errors = findings.iter().filter(|f| f.is_error()).count();
    match args.output {
        Format::Text => {
            for finding in &findings {
                if finding.is_error() {
                    eprintln!("{finding}");
                } else {
                    eprintln!("Warning: {finding}");
                }
            }
            for document in &checked {
                let name = document.document.name();
                let failed = findings
                    .iter()
                    .any(|f| f.is_error() && f.kind == document.document.kind() && f.name == name);
                if !failed {
                    println!("{}/{} valid", document.document.kind(), name);
                }
            }
        }
        Format::Json => {
            let shown: Vec<serde_json::Value> = findings
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
    Ok(if errors > 0 || unreadable {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
