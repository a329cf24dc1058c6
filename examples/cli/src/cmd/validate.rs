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
    /// Also apply this training policy (a `kubetrain.dev/v1alpha1` TrainingPolicy, or a ConfigMap holding
    /// one under `policy.yaml`), as the operator's webhook does: TrainJobs are judged with the runtime they
    /// reference (from the inputs or the built-in runtimes). See docs/training-policy.md.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// With --policy: the labels every namespace is taken to have, for exceptions with a
    /// `namespaceSelector` (offline there is no namespace to read); repeatable.
    #[arg(long = "namespace-label", value_name = "KEY=VALUE", requires = "policy", value_parser = parse_label)]
    namespace_labels: Vec<(String, String)>,
    /// Output format of the findings.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// The training policy's findings about every document, attributed to it, as the webhook reports them.
fn policy_findings(
    path: &std::path::Path,
    labels: &[(String, String)],
    checked: &input::Checked,
) -> anyhow::Result<Vec<kubetrain_api::FieldError>> {
    use kubetrain_api::Document;
    use kubetrain_api::catalog::DEFAULT_NAMESPACE;
    use kubetrain_tenancy::policy::TrainingPolicy;

    let text = input::read(path)?;
    let policy = TrainingPolicy::from_yaml(&text)
        .map_err(|e| anyhow::anyhow!("--policy {}: {e}", input::display_name(path)))?;
    let labels = (!labels.is_empty()).then(|| labels.iter().cloned().collect());
    let mut findings = Vec::new();
    for sourced in &checked.documents {
        let document = &sourced.document;
        let denials = match document {
            Document::TrainJob(job) => {
                let namespace = job
                    .metadata
                    .namespace
                    .as_deref()
                    .unwrap_or(DEFAULT_NAMESPACE);
                let runtime = checked
                    .catalog
                    .lookup(&job.spec.runtime_ref, namespace)
                    .ok();
                policy.evaluate_trainjob(job, runtime, labels.as_ref())
            }
            Document::TrainingRuntime(runtime) => {
                let namespace = runtime
                    .metadata
                    .namespace
                    .as_deref()
                    .unwrap_or(DEFAULT_NAMESPACE);
                let kind = document.kind();
                policy.evaluate_runtime(
                    kind,
                    document.name(),
                    Some(namespace),
                    &runtime.spec,
                    labels.as_ref(),
                )
            }
            Document::ClusterTrainingRuntime(runtime) => policy.evaluate_runtime(
                document.kind(),
                document.name(),
                None,
                &runtime.spec,
                labels.as_ref(),
            ),
            _ => Vec::new(),
        };
        findings.extend(
            denials
                .into_iter()
                .map(|d| d.on(document.kind(), document.name())),
        );
    }
    Ok(findings)
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Text,
    Json,
}

pub(crate) fn run(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let files = input::expand(&args.files)?;
    let runtimes = input::expand(&args.runtimes)?;
    let mut checked = input::check(&files, &runtimes)?;
    if let Some(policy) = &args.policy {
        let findings = policy_findings(policy, &args.namespace_labels, &checked)?;
        checked.findings.extend(findings);
    }
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
