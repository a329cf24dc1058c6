//! `kubetrain migrate`: Training Operator v1 jobs in, the runtimes they need and their TrainJobs out, with a
//! report per job ([docs/migrate.md](../../../../docs/migrate.md)).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use kubetrain_api::Document;
use kubetrain_migrate::{MigrateOptions, Migration, RuntimeKind};
use serde_json::Value;

use super::input;

/// `kubetrain migrate` arguments.
#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Training Operator v1 jobs (kubeflow.org/v1 PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob;
    /// YAML or JSON, one or many, `kind: List` too); `-` reads stdin, a directory its .yaml, .yml and .json
    /// files; repeatable. Objects outside Kubeflow's API groups (a PVC beside the jobs) pass through unchanged.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "V1.yaml",
        required = true
    )]
    files: Vec<PathBuf>,
    /// The kind of the runtimes generated for jobs no built-in runtime fits.
    #[arg(long, value_enum, default_value = "ClusterTrainingRuntime")]
    runtime_kind: Kind,
    /// A Kueue LocalQueue for every TrainJob (the `kueue.x-k8s.io/queue-name` label), over the jobs' own.
    #[arg(long, value_name = "NAME")]
    queue: Option<String>,
    /// Output format: multi-document YAML or a JSON array.
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    output: Format,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Yaml,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    #[value(name = "TrainingRuntime")]
    TrainingRuntime,
    #[value(name = "ClusterTrainingRuntime")]
    ClusterTrainingRuntime,
}

/// Exit status when some field needs a person (0: everything carried; 1: bad input).
const NEEDS_PERSON: u8 = 2;

pub(crate) fn run(args: MigrateArgs) -> Result<ExitCode> {
    let options = MigrateOptions {
        runtime_kind: match args.runtime_kind {
            Kind::TrainingRuntime => RuntimeKind::TrainingRuntime,
            Kind::ClusterTrainingRuntime => RuntimeKind::ClusterTrainingRuntime,
        },
        queue: args.queue.clone(),
    };
    let mut parsed = Vec::new();
    let mut others = Vec::new();
    for file in input::expand(&args.files)? {
        let source = input::display_name(&file);
        for (number, value) in documents(&input::read(&file)?, &source)? {
            if !kubeflow_group(&value) {
                // A PVC or a ConfigMap beside the jobs: the TrainJobs may need it, so it stays in the output.
                eprintln!(
                    "{source}: document {number}: {} passed through unchanged (not a Training Operator v1 job)",
                    identity(&value)
                );
                others.push(value);
                continue;
            }
            let job = kubetrain_migrate::v1::V1Job::from_value(&value)
                .with_context(|| format!("{source}: document {number}"))?;
            parsed.push(job);
        }
    }
    if parsed.is_empty() {
        bail!("no Training Operator v1 jobs (kubeflow.org/v1) in the input");
    }
    let migration = kubetrain_migrate::migrate(&parsed, &options)?;
    // The report file first: when it cannot be written, nothing is printed that looks like a success.
    if let Some(path) = &args.report {
        write_report(path, &migration)?;
    }
    write_output(&migration, &others, args.output)?;
    for job in &migration.jobs {
        eprint!("{}", job.report.to_text());
    }
    Ok(if migration.needs_person() {
        ExitCode::from(NEEDS_PERSON)
    } else {
        ExitCode::SUCCESS
    })
}

/// The non-empty documents of `text` with their numbers in the file (from 1); a `kind: List` gives its items.
fn documents(text: &str, source: &str) -> Result<Vec<(usize, Value)>> {
    let mut out = Vec::new();
    for (index, (line, doc)) in kubetrain_yaml::split_documents(text)
        .into_iter()
        .enumerate()
    {
        if doc.trim().is_empty() {
            continue;
        }
        let value: Value = kubetrain_yaml::fast::from_str(doc).map_err(|e| {
            anyhow::anyhow!(
                "{source}: invalid YAML: document {} (from line {line}): {}",
                index + 1,
                kubetrain_yaml::yaml_error(&e, line)
            )
        })?;
        match value {
            Value::Null => {}
            Value::Object(ref map) if map.get("kind").and_then(Value::as_str) == Some("List") => {
                let items = map
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                out.extend(items.into_iter().map(|item| (index + 1, item)));
            }
            value => out.push((index + 1, value)),
        }
    }
    Ok(out)
}

/// Whether `value` claims an API group of Kubeflow (`kubeflow.org/v1`, `trainer.kubeflow.org/...`): those are
/// migrated or refused, never passed through.
fn kubeflow_group(value: &Value) -> bool {
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    group == "kubeflow.org" || group.ends_with(".kubeflow.org") || !value.is_object()
}

/// `Kind/name` of a document, for messages.
fn identity(value: &Value) -> String {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("?").to_owned();
    format!(
        "{}/{}",
        text(value.get("kind")),
        text(value.get("metadata").and_then(|m| m.get("name")))
    )
}

/// The runtimes, then the documents passed through, then the TrainJobs, on stdout.
fn write_output(migration: &Migration, others: &[Value], format: Format) -> Result<()> {
    let values: Vec<Value> = migration
        .runtimes
        .iter()
        .map(Document::to_value)
        .chain(others.iter().cloned())
        .chain(
            migration
                .jobs
                .iter()
                .map(|j| Document::TrainJob(Box::new(j.trainjob.clone())).to_value()),
        )
        .collect();
    let mut out = std::io::stdout().lock();
    match format {
        Format::Yaml => {
            for value in &values {
                write!(out, "---\n{}", kubetrain_yaml::to_string(value))?;
            }
        }
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&values)?)?,
    }
    out.flush()?;
    Ok(())
}

/// The JSON report, written to a temporary file beside `path` and renamed over it: a reader never sees half.
fn write_report(path: &Path, migration: &Migration) -> Result<()> {
    let report = serde_json::json!({
        "needsPerson": migration.needs_person(),
        "runtimes": migration.runtimes.iter().map(|r| format!("{}/{}", r.kind(), r.name())).collect::<Vec<_>>(),
        "jobs": migration.jobs.iter().map(|j| &j.report).collect::<Vec<_>>(),
    });
    let file_name = path
        .file_name()
        .with_context(|| format!("--report {}: not a file name", path.display()))?;
    let mut temporary = path.to_path_buf();
    temporary.set_file_name(format!(
        ".{}.{}.tmp",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let text = serde_json::to_string_pretty(&report)? + "\n";
    std::fs::write(&temporary, text).with_context(|| format!("writing {}", temporary.display()))?;
    std::fs::rename(&temporary, path).with_context(|| {
        let _ = std::fs::remove_file(&temporary);
        format!("writing {}", path.display())
    })
}
