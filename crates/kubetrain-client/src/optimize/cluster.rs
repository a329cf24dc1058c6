//! OptimizationJobs on a cluster: created here, run by kubetrain-operator.

use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{ListParams, PostParams};
use kubetrain_api::optimizationjob::{
    annotations, optimization_conditions, trial_index, trial_name, trial_parameters, trial_stem,
};
use kubetrain_api::{OptimizationJob, TrainJob};
use kubetrain_optimize::{TrialRecord, TrialState};

use super::plan::search_plan;
use super::report::OptimizationReport;
use crate::backend::TrainerClient;
use crate::error::{ClientError, Result};
use crate::kubernetes::KubernetesBackend;
use crate::types::JobStatus;

/// Trial annotation the operator sets when its early-stopping rule stopped the trial (the rule's name).
const STOPPED_ANNOTATION: &str = "kubetrain.dev/stopped-by";
/// Trial annotation where the operator keeps the objective values the trial reported (a JSON array).
const HISTORY_ANNOTATION: &str = "kubetrain.dev/objective-history";

/// A trial TrainJob as the samplers and the report see it (`None` when it has no index label): the state
/// from its conditions and the operator's stopped annotation, the objective from its `trainerStatus`, the
/// intermediate values from the operator's history annotation.
fn trial_record(trial: &TrainJob, metric: &str) -> Option<(TrialRecord, Option<String>)> {
    let index = trial_index(trial)?;
    let view = crate::kubernetes::status::job_view(trial, &[]);
    let objective = view
        .trainer_status
        .as_ref()
        .and_then(|s| s.metrics.iter().rev().find(|m| m.name == metric))
        .and_then(|m| m.value.trim().parse::<f64>().ok());
    let notes = trial.metadata.annotations.as_ref();
    let stopped_by = notes.and_then(|n| n.get(STOPPED_ANNOTATION));
    let state = match view.status {
        _ if stopped_by.is_some() => TrialState::Stopped,
        JobStatus::Complete => TrialState::Succeeded,
        JobStatus::Failed => TrialState::Failed,
        JobStatus::Running => TrialState::Running,
        JobStatus::Created => TrialState::Pending,
    };
    let mut intermediate: Vec<f64> = notes
        .and_then(|n| n.get(HISTORY_ANNOTATION))
        .and_then(|h| serde_json::from_str(h).ok())
        .unwrap_or_default();
    if intermediate.is_empty() {
        intermediate.extend(objective);
    }
    let record = TrialRecord {
        index,
        parameters: trial_parameters(trial).unwrap_or_default(),
        objective: objective.filter(|_| state != TrialState::Stopped),
        state,
        intermediate,
    };
    let message = match (state, stopped_by) {
        (TrialState::Stopped, Some(rule)) => Some(format!("stopped early by the {rule} rule")),
        (TrialState::Failed, _) => view.message.clone(),
        _ => None,
    };
    Some((record, message))
}

impl TrainerClient<KubernetesBackend> {
    fn optimization_jobs(&self) -> Api<OptimizationJob> {
        Api::namespaced(
            self.backend().kube_client().clone(),
            self.backend().namespace_name(),
        )
    }

    /// Creates `job` (in the backend's namespace unless it names one) after checking its search locally
    /// ([`search_plan`]); the operator runs the trials. Returns its name.
    ///
    /// # Errors
    /// An invalid search, an existing job of that name, or the API server's answer.
    pub async fn optimize(&self, job: &OptimizationJob) -> Result<String> {
        search_plan(job)?;
        let api = match &job.metadata.namespace {
            Some(ns) => Api::namespaced(self.backend().kube_client().clone(), ns),
            None => self.optimization_jobs(),
        };
        match api.create(&PostParams::default(), job).await {
            Ok(created) => Ok(created.name().to_owned()),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                Err(ClientError::AlreadyExists(job.name().to_owned()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The OptimizationJob `name`.
    ///
    /// # Errors
    /// Not found, or the API server's answer.
    pub async fn get_optimization_job(&self, name: &str) -> Result<OptimizationJob> {
        match self.optimization_jobs().get(name).await {
            Ok(job) => Ok(job),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                Err(ClientError::NotFound(name.to_owned()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The report of OptimizationJob `name` from its trial TrainJobs as they are now.
    ///
    /// # Errors
    /// The job is missing or invalid, or the API server's answer.
    pub async fn optimization_report(&self, name: &str) -> Result<OptimizationReport> {
        let job = self.get_optimization_job(name).await?;
        let plan = search_plan(&job)?;
        let trials: Api<TrainJob> = Api::namespaced(
            self.backend().kube_client().clone(),
            job.metadata
                .namespace
                .as_deref()
                .unwrap_or(self.backend().namespace_name()),
        );
        let selector = format!(
            "{}={}",
            annotations::OPTIMIZATION_JOB_LABEL,
            trial_stem(name)
        );
        let listed = trials
            .list(&ListParams::default().labels(&selector))
            .await?;
        let records: Vec<(TrialRecord, Option<String>)> = listed
            .items
            .iter()
            .filter_map(|t| trial_record(t, &plan.metric))
            .collect();
        Ok(OptimizationReport::new(
            name,
            &plan.metric,
            plan.algorithm_name,
            &plan.study,
            &records,
            |i| trial_name(name, i),
        ))
    }

    /// Waits until OptimizationJob `name` is Complete or Failed (its conditions), polling every
    /// `interval`, and returns its report.
    ///
    /// # Errors
    /// Running past `timeout`, or the API server's answer.
    pub async fn wait_for_optimization(
        &self,
        name: &str,
        timeout: Duration,
        interval: Duration,
    ) -> Result<OptimizationReport> {
        let start = Instant::now();
        loop {
            let job = self.get_optimization_job(name).await?;
            let conditions = job
                .status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default();
            let done = conditions.iter().any(|c| {
                c.status == "True"
                    && (c.type_ == optimization_conditions::COMPLETE
                        || c.type_ == optimization_conditions::FAILED)
            });
            if done {
                return self.optimization_report(name).await;
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Err(ClientError::Timeout {
                    name: name.to_owned(),
                    seconds: timeout.as_secs(),
                    wanted: "Complete|Failed".into(),
                    current: conditions
                        .iter()
                        .filter(|c| c.status == "True")
                        .map(|c| c.type_.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                        .chars()
                        .take(80)
                        .collect(),
                });
            }
            tokio::time::sleep(interval.min(timeout - elapsed)).await;
        }
    }
}
