//! `kubetrain get | list | logs optimizationjob ...`: OptimizationJobs on a cluster and their trials, which
//! are TrainJobs (so `kubetrain list` shows them too, and `kubetrain get <trial>` reads one like any job).
//!
//! - `kubetrain get optimizationjob NAME`: the job (state, trials done, best trial and objective) and a table
//!   of its trials with their parameters and objective; `-o yaml|json`: the object and the trials as data.
//! - `kubetrain list optimizationjobs`: every OptimizationJob of the namespace.
//! - `kubetrain logs optimizationjob NAME [--trial N]`: the log of a trial, the best one by default (the
//!   first while none has finished).
//!
//! The kind is `optimizationjob` (or `optimizationjobs`, `oj`), as kubectl spells resources.

use std::collections::BTreeMap;

use anyhow::{Context, Result, bail};
use futures_util::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kubetrain_api::conditions::{COMPLETE, FAILED};
use kubetrain_api::optimizationjob::{annotations, trial_index, trial_parameters, trial_stem};
use kubetrain_api::{OptimizationJob, TrainJob};
use kubetrain_client::{KubernetesBackend, LogOptions, TrainerClient};
use serde::Serialize;

use super::{Output, age, print_structured};
use crate::cmd::input::Table;

/// The trial annotation the controller sets when early stopping stopped a trial.
const STOPPED_BY: &str = "kubetrain.dev/stopped-by";

/// Whether `word` names the OptimizationJob kind.
pub(super) fn is_kind(word: &str) -> bool {
    matches!(
        word.to_ascii_lowercase().as_str(),
        "optimizationjob"
            | "optimizationjobs"
            | "optimizationjob.trainer.kubeflow.org"
            | "optimizationjobs.trainer.kubeflow.org"
            | "oj"
    )
}

/// Whether `word` names the TrainJob kind (`kubetrain get trainjob NAME` reads as `kubetrain get NAME`).
pub(super) fn is_trainjob_kind(word: &str) -> bool {
    matches!(
        word.to_ascii_lowercase().as_str(),
        "trainjob" | "trainjobs" | "tj"
    )
}

/// One trial as `get` shows it.
#[derive(Debug, Serialize)]
struct Trial {
    name: String,
    index: Option<u32>,
    status: &'static str,
    parameters: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    objective: Option<String>,
}

/// `get -o yaml|json`: the OptimizationJob as stored and its trials.
#[derive(Debug, Serialize)]
struct Shown<'a> {
    #[serde(rename = "optimizationJob")]
    job: &'a OptimizationJob,
    trials: &'a [Trial],
}

fn jobs(client: &TrainerClient<KubernetesBackend>) -> Api<OptimizationJob> {
    let backend = client.backend();
    Api::namespaced(backend.kube_client().clone(), backend.namespace_name())
}

async fn fetch(client: &TrainerClient<KubernetesBackend>, name: &str) -> Result<OptimizationJob> {
    let namespace = client.backend().namespace_name().to_owned();
    jobs(client)
        .get_opt(name)
        .await
        .with_context(|| format!("reading OptimizationJob {namespace}/{name}"))?
        .with_context(|| {
            format!(
                "OptimizationJob {namespace}/{name} not found (`kubetrain list optimizationjobs -n {namespace}` lists them)"
            )
        })
}

async fn trials(
    client: &TrainerClient<KubernetesBackend>,
    job: &OptimizationJob,
) -> Result<Vec<TrainJob>> {
    let backend = client.backend();
    let api: Api<TrainJob> =
        Api::namespaced(backend.kube_client().clone(), backend.namespace_name());
    let selector = format!(
        "{}={}",
        annotations::OPTIMIZATION_JOB_LABEL,
        trial_stem(job.name())
    );
    let mut items = api
        .list(&ListParams::default().labels(&selector))
        .await
        .with_context(|| format!("listing the trials of OptimizationJob {}", job.name()))?
        .items;
    items.sort_by_key(|t| trial_index(t).unwrap_or(u32::MAX));
    Ok(items)
}

fn condition_true(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn trial_status(trial: &TrainJob) -> &'static str {
    let conditions = trial
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let stopped = trial
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(STOPPED_BY));
    if stopped {
        "Stopped"
    } else if condition_true(conditions, FAILED) {
        "Failed"
    } else if condition_true(conditions, COMPLETE) {
        "Complete"
    } else if trial.spec.is_suspended() {
        "Suspended"
    } else if trial.status.as_ref().is_some_and(|s| {
        s.trainer_status.is_some() || s.jobs_status.iter().any(|j| j.active > 0 || j.ready > 0)
    }) {
        "Running"
    } else {
        "Created"
    }
}

fn objective_of(trial: &TrainJob, metric: &str) -> Option<String> {
    trial
        .status
        .as_ref()?
        .trainer_status
        .as_ref()?
        .metrics
        .iter()
        .rev()
        .find(|m| m.name == metric)
        .map(|m| m.value.clone())
}

/// The job's state: the last condition that is `True` (`Complete`, `Failed`, `Running`, `Created`).
fn state(job: &OptimizationJob) -> String {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.iter().rev().find(|c| c.status == "True"))
        .map_or_else(|| "Pending".to_owned(), |c| c.type_.clone())
}

fn metric(job: &OptimizationJob) -> String {
    job.spec
        .objective()
        .map(|o| o.metric.clone())
        .unwrap_or_default()
}

/// `kubetrain get optimizationjob NAME`.
pub(super) async fn get(
    client: &TrainerClient<KubernetesBackend>,
    name: &str,
    output: Output,
) -> Result<()> {
    let job = fetch(client, name).await?;
    let metric = metric(&job);
    let shown: Vec<Trial> = trials(client, &job)
        .await?
        .iter()
        .map(|t| Trial {
            name: t.name().to_owned(),
            index: trial_index(t),
            status: trial_status(t),
            parameters: trial_parameters(t).unwrap_or_default(),
            objective: objective_of(t, &metric),
        })
        .collect();
    if !output.is_table() {
        return print_structured(
            &Shown {
                job: &job,
                trials: &shown,
            },
            output,
        );
    }
    let now = Timestamp::now();
    let mut table = Table::new(&["NAME", "STATE", "TRIALS", "BEST", "OBJECTIVE", "AGE"]);
    table.row(&job_row(&job, &shown, &metric, now));
    print!("{}", table.render());
    if !shown.is_empty() {
        let names: Vec<String> = job.spec.parameters.iter().map(|p| p.name.clone()).collect();
        let mut headers = vec!["TRIAL".to_owned(), "STATUS".to_owned()];
        headers.extend(names.iter().cloned());
        headers.push(metric.to_uppercase());
        let mut trials_table = Table::new(&headers);
        for t in &shown {
            let mut row = vec![t.name.clone(), t.status.to_owned()];
            row.extend(
                names
                    .iter()
                    .map(|n| t.parameters.get(n).cloned().unwrap_or_default()),
            );
            row.push(t.objective.clone().unwrap_or_else(|| "-".to_owned()));
            trials_table.row(&row);
        }
        print!("\n{}", trials_table.render());
    }
    if let Some(condition) = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().rev().find(|c| c.status == "True"))
        .filter(|c| !c.message.is_empty())
    {
        println!("\nmessage: {}", condition.message);
    }
    Ok(())
}

/// The job's cells: `NAME STATE TRIALS BEST OBJECTIVE AGE`; TRIALS is `finished/total`.
fn job_row(job: &OptimizationJob, trials: &[Trial], metric: &str, now: Timestamp) -> Vec<String> {
    let finished = trials
        .iter()
        .filter(|t| matches!(t.status, "Complete" | "Failed" | "Stopped"))
        .count();
    let best = job
        .status
        .as_ref()
        .and_then(|s| s.result.as_ref())
        .map(|r| r.train_job_name.clone());
    let objective = best
        .as_ref()
        .and_then(|b| trials.iter().find(|t| &t.name == b))
        .and_then(|t| t.objective.clone())
        .map_or_else(|| "-".to_owned(), |v| format!("{metric}={v}"));
    let created = job
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string());
    vec![
        job.name().to_owned(),
        state(job),
        format!("{finished}/{}", job.spec.num_trials_or_default()),
        best.unwrap_or_else(|| "-".to_owned()),
        objective,
        age(created.as_deref(), now),
    ]
}

/// `kubetrain list optimizationjobs`.
pub(super) async fn list(client: &TrainerClient<KubernetesBackend>, output: Output) -> Result<()> {
    let namespace = client.backend().namespace_name().to_owned();
    let items = jobs(client)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing OptimizationJobs in {namespace}"))?
        .items;
    if !output.is_table() {
        return print_structured(&items, output);
    }
    if items.is_empty() {
        eprintln!("No OptimizationJobs found in {namespace}.");
        return Ok(());
    }
    let now = Timestamp::now();
    let mut table = Table::new(&["NAME", "STATE", "TRIALS", "PARALLEL", "BEST", "AGE"]);
    for job in &items {
        let created = job
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string());
        table.row(&[
            job.name().to_owned(),
            state(job),
            job.spec.num_trials_or_default().to_string(),
            job.spec.parallel_trials_or_default().to_string(),
            job.status
                .as_ref()
                .and_then(|s| s.result.as_ref())
                .map_or_else(|| "-".to_owned(), |r| r.train_job_name.clone()),
            age(created.as_deref(), now),
        ]);
    }
    print!("{}", table.render());
    Ok(())
}

/// `kubetrain logs optimizationjob NAME [--trial N]`: the log of trial `N`, else of the best trial, else of
/// the first.
pub(super) async fn logs(
    client: &TrainerClient<KubernetesBackend>,
    name: &str,
    trial: Option<u32>,
    options: &LogOptions,
) -> Result<()> {
    let job = fetch(client, name).await?;
    let all = trials(client, &job).await?;
    let chosen = match trial {
        Some(index) => all
            .iter()
            .find(|t| trial_index(t) == Some(index))
            .with_context(|| {
                let have: Vec<String> = all
                    .iter()
                    .filter_map(trial_index)
                    .map(|i| i.to_string())
                    .collect();
                format!(
                    "OptimizationJob {name} has no trial {index} (trials: {})",
                    if have.is_empty() {
                        "none yet".to_owned()
                    } else {
                        have.join(", ")
                    }
                )
            })?,
        None => {
            let best = job
                .status
                .as_ref()
                .and_then(|s| s.result.as_ref())
                .map(|r| r.train_job_name.clone());
            match best
                .and_then(|b| all.iter().find(|t| t.name() == b))
                .or_else(|| all.first())
            {
                Some(t) => t,
                None => bail!("OptimizationJob {name} has no trials yet"),
            }
        }
    };
    let mut lines = client.get_job_logs(chosen.name(), options).await?;
    while let Some(line) = lines.next().await {
        println!("{}", line?);
    }
    Ok(())
}
