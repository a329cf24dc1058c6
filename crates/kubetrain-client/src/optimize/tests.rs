//! The search driver against an in-memory backend whose trials report a made-up loss, step by step.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use kubetrain_api::TrainJob;
use kubetrain_api::TrainJobTemplateSpec;

use super::*;
use crate::backend::{Backend, LogStream, TrainerClient};
use crate::error::{ClientError, Result};
use crate::types::{
    Event, JobStatus, LogOptions, ProgressMetric, Runtime, TrainJobView, TrainerProgress,
};

/// Reports before a trial completes.
const STEPS: usize = 3;

#[derive(Default)]
struct Fake {
    /// Created jobs with how often they were read.
    jobs: Mutex<BTreeMap<String, (TrainJob, usize)>>,
    running: Mutex<usize>,
    max_running: Mutex<usize>,
    deleted: Mutex<Vec<String>>,
    /// Succeeded trials when each deletion happened.
    completed: Mutex<usize>,
    completed_at_delete: Mutex<Vec<usize>>,
}

fn loss_of(job: &TrainJob) -> f64 {
    let env = &job.spec.trainer.as_ref().unwrap().env;
    let x: f64 = env
        .iter()
        .find(|e| e.name == "KUBEFLOW_TRAINER_OPT_X")
        .and_then(|e| e.value.as_ref())
        .unwrap()
        .parse()
        .unwrap();
    (x - 0.3).powi(2)
}

fn view(name: &str, status: JobStatus, step: usize, loss: f64) -> TrainJobView {
    TrainJobView {
        name: name.into(),
        runtime: "torch-distributed".into(),
        steps: vec![],
        num_nodes: 1,
        creation_timestamp: None,
        status,
        message: None,
        trainer_status: Some(TrainerProgress {
            metrics: vec![
                ProgressMetric {
                    name: "loss".into(),
                    value: loss.to_string(),
                },
                ProgressMetric {
                    name: "step".into(),
                    value: step.to_string(),
                },
            ],
            last_updated_time: Some(format!("t{step}")),
            ..TrainerProgress::default()
        }),
    }
}

fn unused<T>() -> Result<T> {
    Err(ClientError::InvalidArgument(
        "not used by the search".into(),
    ))
}

#[async_trait::async_trait]
impl Backend for Fake {
    fn namespace(&self) -> &str {
        "default"
    }
    async fn list_runtimes(&self) -> Result<Vec<Runtime>> {
        unused()
    }
    async fn get_runtime(&self, _: &str) -> Result<Runtime> {
        unused()
    }
    async fn create_job(&self, job: TrainJob) -> Result<()> {
        let name = job.metadata.name.clone().unwrap();
        self.jobs.lock().unwrap().insert(name, (job, 0));
        let mut running = self.running.lock().unwrap();
        *running += 1;
        let mut max = self.max_running.lock().unwrap();
        *max = (*max).max(*running);
        Ok(())
    }
    async fn list_jobs(&self, _: Option<&str>) -> Result<Vec<TrainJobView>> {
        unused()
    }
    async fn get_job(&self, name: &str) -> Result<TrainJobView> {
        let mut jobs = self.jobs.lock().unwrap();
        let (job, reads) = jobs
            .get_mut(name)
            .ok_or_else(|| ClientError::NotFound(name.into()))?;
        *reads += 1;
        let loss = loss_of(job);
        // Earlier steps are worse by a margin that keeps the trials' order.
        #[allow(clippy::cast_precision_loss, reason = "small counts")]
        let at = |step: usize| loss * (1.0 + (STEPS - step) as f64);
        if *reads > STEPS {
            if *reads == STEPS + 1 {
                *self.running.lock().unwrap() -= 1;
                *self.completed.lock().unwrap() += 1;
            }
            return Ok(view(name, JobStatus::Complete, STEPS, loss));
        }
        Ok(view(name, JobStatus::Running, *reads, at(*reads)))
    }
    async fn get_job_logs(&self, _: &str, _: &LogOptions) -> Result<LogStream> {
        unused()
    }
    async fn get_job_events(&self, _: &str) -> Result<Vec<Event>> {
        unused()
    }
    async fn delete_job(&self, name: &str) -> Result<()> {
        self.jobs.lock().unwrap().remove(name);
        *self.running.lock().unwrap() -= 1;
        self.deleted.lock().unwrap().push(name.into());
        let completed = *self.completed.lock().unwrap();
        self.completed_at_delete.lock().unwrap().push(completed);
        Ok(())
    }
}

fn template() -> TrainJobTemplateSpec {
    let mut t = TrainJobTemplateSpec::default();
    t.spec.runtime_ref.name = "torch-distributed".into();
    t
}

fn fast() -> OptimizeOptions {
    OptimizeOptions {
        poll_interval: Duration::from_millis(1),
        ..OptimizeOptions::default()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn trials_run_in_parallel_up_to_the_limit_and_the_best_wins() {
    let job = Optimize::new("sweep", template())
        .search_space("x", Search::uniform(0.0, 1.0))
        .algorithm(RandomSearch {
            random_state: Some(3),
        })
        .trial_config(TrialConfig {
            num_trials: 12,
            parallel_trials: 3,
            max_failed_trials: None,
        })
        .into_job();
    let client = TrainerClient::new(Fake::default());
    let report = client.optimize_here(&job, &fast()).await.unwrap();
    assert_eq!(*client.backend().max_running.lock().unwrap(), 3);
    assert_eq!(report.trials.len(), 12);
    let mut best = (f64::INFINITY, String::new());
    for (i, t) in report.trials.iter().enumerate() {
        assert_eq!(t.name, format!("sweep-{i}"));
        assert_eq!(t.state, "Succeeded");
        let x: f64 = t.parameters["x"].parse().unwrap();
        let want = (x - 0.3).powi(2);
        assert!((t.objective.unwrap() - want).abs() < 1e-12 * want.max(1.0));
        assert_eq!(t.intermediate.len(), STEPS);
        if t.objective.unwrap() < best.0 {
            best = (t.objective.unwrap(), t.name.clone());
        }
    }
    assert_eq!(report.best.as_ref().unwrap().name, best.1);
    // The same seed gives the same search.
    let again = TrainerClient::new(Fake::default())
        .optimize_here(&job, &fast())
        .await
        .unwrap();
    assert_eq!(again.trials, report.trials);
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["trials"][0]["parameters"]["x"].is_string() && json["best"]["objective"].is_f64());
}

#[tokio::test(flavor = "current_thread")]
async fn median_stopping_ends_bad_trials_after_five_succeeded() {
    let job = Optimize::new("stop", template())
        .search_space("x", Search::uniform(0.0, 1.0))
        .algorithm(TpeSearch { seed: Some(1) })
        .median_stopping(true)
        .trial_config(TrialConfig {
            num_trials: 24,
            parallel_trials: 2,
            max_failed_trials: None,
        })
        .into_job();
    let client = TrainerClient::new(Fake::default());
    let report = client.optimize_here(&job, &fast()).await.unwrap();
    let stopped: Vec<&TrialReport> = report
        .trials
        .iter()
        .filter(|t| t.state == "Stopped")
        .collect();
    assert!(!stopped.is_empty(), "{:#?}", report.trials);
    let deleted = client.backend().deleted.lock().unwrap().clone();
    assert_eq!(
        deleted,
        stopped.iter().map(|t| t.name.clone()).collect::<Vec<_>>()
    );
    assert!(
        client
            .backend()
            .completed_at_delete
            .lock()
            .unwrap()
            .iter()
            .all(|n| *n >= 5)
    );
    assert!(
        stopped
            .iter()
            .all(|t| t.objective.is_none() && t.message.as_deref().unwrap().contains("median"))
    );
    // The best is never a stopped trial.
    assert!(
        report.best.is_some()
            && !stopped
                .iter()
                .any(|t| Some(&t.name) == report.best.as_ref().map(|b| &b.name))
    );
}

#[test]
fn search_plans_read_the_spec_and_annotations_with_field_paths() {
    let base = || Optimize::new("plan", template()).search_space("x", Search::uniform(0.0, 1.0));
    let plan = search_plan(&base().into_job()).unwrap();
    assert_eq!(plan.algorithm_name, "random");
    assert_eq!(
        plan.study.algorithm(),
        kubetrain_optimize::Algorithm::Random {
            seed: plan::default_seed("plan")
        }
    );
    assert_eq!(plan.metric, "loss");
    let plan = search_plan(&base().algorithm(GridSearch).into_job()).unwrap();
    assert_eq!(plan.study.trial_count(), 5);
    let plan = search_plan(
        &base()
            .algorithm(TpeSearch { seed: Some(-1) })
            .median_stopping(true)
            .into_job(),
    )
    .unwrap();
    assert_eq!(
        plan.study.algorithm(),
        kubetrain_optimize::Algorithm::Tpe { seed: u64::MAX }
    );
    assert_eq!(
        plan.early_stopping,
        Some(kubetrain_optimize::EarlyStopping::median())
    );

    let mut bad = base()
        .search_space("y", Search::uniform(0.0, 1.0))
        .into_job();
    bad.spec.parameters[1]
        .search_space
        .uniform
        .as_mut()
        .unwrap()
        .min = "abc".into();
    let err = search_plan(&bad).unwrap_err().to_string();
    assert!(
        err.contains("spec.parameters[1].searchSpace.uniform.min: \"abc\" is not a number"),
        "{err}"
    );
    let mut bad = base().into_job();
    bad.spec.parameters[0].search_space = Search::loguniform(0.0, 1.0);
    let err = search_plan(&bad).unwrap_err().to_string();
    assert!(
        err.contains("spec.parameters[0]: parameter \"x\": a logUniform space needs min > 0"),
        "{err}"
    );
    let mut bad = base().algorithm(GridSearch).into_job();
    bad.metadata.annotations = Some(BTreeMap::from([
        (
            "kubetrain.dev/search-algorithm".to_owned(),
            "tpe".to_owned(),
        ),
        (
            "kubetrain.dev/early-stopping".to_owned(),
            "hyperband".to_owned(),
        ),
    ]));
    let err = search_plan(&bad).unwrap_err().to_string();
    assert!(
        err.contains("tpe needs spec.searchAlgorithm.random"),
        "{err}"
    );
    assert!(err.contains("unknown rule \"hyperband\""), "{err}");
}
