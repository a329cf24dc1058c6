//! The search driven from here: trials are TrainJobs of the client's backend (local runs with
//! [`LocalProcessBackend`](crate::LocalProcessBackend)), suggested, watched and scored by this process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kubetrain_api::OptimizationJob;
use kubetrain_api::optimizationjob::{trial_name, trial_train_job};
use kubetrain_optimize::{TrialRecord, TrialState};

use super::plan::{SearchPlan, search_plan};
use super::report::{OptimizationReport, TrialReport, state_name};
use crate::backend::{Backend, TrainerClient};
use crate::error::{ClientError, Result};
use crate::types::{JobStatus, TrainJobView};

/// A callback told about every trial that starts, reports, or ends.
pub type TrialCallback = Arc<dyn Fn(&TrialReport) + Send + Sync>;

/// How a search driven from this process runs.
#[derive(Clone)]
pub struct OptimizeOptions {
    /// How often running trials are looked at (default 200 ms).
    pub poll_interval: Duration,
    /// Give up (stopping the running trials) after this long (default: never).
    pub timeout: Option<Duration>,
    /// Start no more trials once this many have failed (the SDK's `TrialConfig.max_failed_trials`).
    pub max_failed_trials: Option<u32>,
    /// Told about each trial as it starts and ends (progress output).
    pub on_trial: Option<TrialCallback>,
}

impl Default for OptimizeOptions {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_millis(200),
            timeout: None,
            max_failed_trials: None,
            on_trial: None,
        }
    }
}

impl std::fmt::Debug for OptimizeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OptimizeOptions")
            .field("poll_interval", &self.poll_interval)
            .field("timeout", &self.timeout)
            .field("max_failed_trials", &self.max_failed_trials)
            .field("on_trial", &self.on_trial.is_some())
            .finish()
    }
}

/// One trial the search is watching.
struct Active {
    index: u32,
    name: String,
    /// The `lastUpdatedTime` of the last report taken as a step.
    last_report: Option<String>,
}

/// The search's state: every trial so far, with why it failed or stopped.
struct Search<'a> {
    job: &'a OptimizationJob,
    plan: SearchPlan,
    options: &'a OptimizeOptions,
    records: BTreeMap<u32, (TrialRecord, Option<String>)>,
    active: Vec<Active>,
    next: u32,
    failed: u32,
}

impl Search<'_> {
    fn history(&self) -> Vec<TrialRecord> {
        self.records.values().map(|(r, _)| r.clone()).collect()
    }

    fn notify(&self, index: u32) {
        if let (Some(callback), Some((r, message))) =
            (&self.options.on_trial, self.records.get(&index))
        {
            callback(&TrialReport {
                name: trial_name(self.job.name(), index),
                parameters: r.parameters.clone(),
                objective: r.objective,
                state: state_name(r.state).to_owned(),
                index,
                intermediate: r.intermediate.clone(),
                message: message.clone(),
            });
        }
    }

    fn may_start(&self) -> bool {
        let room = u32::try_from(self.active.len()).unwrap_or(u32::MAX) < self.plan.parallel_trials;
        let budget = self.next < self.plan.study.trial_count();
        let failures_ok = self
            .options
            .max_failed_trials
            .is_none_or(|max| self.failed < max);
        room && budget && failures_ok
    }

    fn finish(
        &mut self,
        index: u32,
        state: TrialState,
        objective: Option<f64>,
        message: Option<String>,
    ) {
        if let Some((r, m)) = self.records.get_mut(&index) {
            r.state = state;
            if objective.is_some() {
                r.objective = objective;
            }
            if let (Some(v), true) = (r.objective, r.intermediate.is_empty()) {
                r.intermediate.push(v);
            }
            *m = message;
        }
        if state == TrialState::Failed {
            self.failed += 1;
        }
        self.active.retain(|a| a.index != index);
        self.notify(index);
    }

    /// The objective in a trial's latest progress report, if it reported it.
    fn objective_of(&self, view: &TrainJobView) -> Option<f64> {
        let status = view.trainer_status.as_ref()?;
        let metric = status
            .metrics
            .iter()
            .rev()
            .find(|m| m.name == self.plan.metric)?;
        metric.value.trim().parse().ok()
    }
}

/// The `step` metric of a trial's latest report (1-based), when it reports one (train-demo does).
fn step_of(view: &TrainJobView) -> Option<usize> {
    let status = view.trainer_status.as_ref()?;
    let metric = status.metrics.iter().rev().find(|m| m.name == "step")?;
    metric
        .value
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|s| *s >= 1)
}

/// Records `value` as the trial's objective at `step` (1-based): steps it skipped carry its previous value
/// forward (NaN before the first), so that trials whose reports fall on different steps compare at the same
/// step. Without a step, each report is the next step.
fn record_step(intermediate: &mut Vec<f64>, step: Option<usize>, value: f64) {
    let Some(step) = step.filter(|s| *s > intermediate.len()) else {
        if step.is_none() {
            intermediate.push(value);
        } else if let Some(last) = intermediate.last_mut() {
            // A report for a step already recorded (a repeat): the newer value wins.
            *last = value;
        }
        return;
    };
    let fill = intermediate.last().copied().unwrap_or(f64::NAN);
    intermediate.resize(step - 1, fill);
    intermediate.push(value);
}

impl<B: Backend> TrainerClient<B> {
    /// Runs the search of `job` from this process: each trial is a TrainJob of this client's backend,
    /// `<job>-<index>` ([`trial_train_job`]: the template with `KUBEFLOW_TRAINER_OPT_<NAME>` env), at most
    /// `parallelTrials` at once; the objective is the trial's last reported value of the objective metric
    /// (`status.trainerStatus`); with `kubetrain.dev/early-stopping: median` a running trial is deleted when
    /// the median rule says so. Returns when every trial has ended.
    ///
    /// # Errors
    /// An invalid search ([`search_plan`]), a backend error reading a trial, or the timeout.
    pub async fn optimize_here(
        &self,
        job: &OptimizationJob,
        options: &OptimizeOptions,
    ) -> Result<OptimizationReport> {
        let plan = search_plan(job)?;
        let mut search = Search {
            job,
            plan,
            options,
            records: BTreeMap::new(),
            active: Vec::new(),
            next: 0,
            failed: 0,
        };
        let started = Instant::now();
        loop {
            while search.may_start() {
                self.start_trial(&mut search).await?;
            }
            if search.active.is_empty() {
                break;
            }
            if let Some(limit) = options.timeout.filter(|t| started.elapsed() >= *t) {
                return Err(self.give_up(&search, limit).await);
            }
            tokio::time::sleep(options.poll_interval).await;
            self.look_at_trials(&mut search).await?;
        }
        let records: Vec<(TrialRecord, Option<String>)> = search.records.into_values().collect();
        Ok(OptimizationReport::new(
            job.name(),
            &search.plan.metric,
            search.plan.algorithm_name,
            &search.plan.study,
            &records,
            |i| trial_name(job.name(), i),
        ))
    }

    async fn start_trial(&self, search: &mut Search<'_>) -> Result<()> {
        let index = search.next;
        search.next += 1;
        let parameters = search
            .plan
            .study
            .suggest(index, &search.history())
            .map_err(|e| ClientError::InvalidArgument(format!("trial {index}: {e}")))?;
        let trial = trial_train_job(search.job, index, &parameters);
        let name = trial_name(search.job.name(), index);
        let record = TrialRecord {
            index,
            parameters,
            objective: None,
            state: TrialState::Running,
            intermediate: Vec::new(),
        };
        search.records.insert(index, (record, None));
        search.active.push(Active {
            index,
            name,
            last_report: None,
        });
        match self.backend().create_job(trial).await {
            Ok(()) => search.notify(index),
            Err(e) => search.finish(
                index,
                TrialState::Failed,
                None,
                Some(format!("not started: {e}")),
            ),
        }
        Ok(())
    }

    async fn look_at_trials(&self, search: &mut Search<'_>) -> Result<()> {
        let names: Vec<(u32, String)> = search
            .active
            .iter()
            .map(|a| (a.index, a.name.clone()))
            .collect();
        for (index, name) in names {
            let view = self.get_job(&name).await?;
            let value = search.objective_of(&view);
            let reported = view
                .trainer_status
                .as_ref()
                .and_then(|s| s.last_updated_time.clone());
            let Some(active) = search.active.iter_mut().find(|a| a.index == index) else {
                continue;
            };
            let new_step = reported.is_some() && reported != active.last_report;
            active.last_report = reported;
            let step = step_of(&view);
            if let (true, Some(v), Some((r, _))) = (new_step, value, search.records.get_mut(&index))
            {
                record_step(&mut r.intermediate, step, v);
            }
            match view.status {
                JobStatus::Complete => {
                    let message = value
                        .is_none()
                        .then(|| format!("no {:?} metric reported", search.plan.metric));
                    search.finish(index, TrialState::Succeeded, value, message);
                }
                JobStatus::Failed => {
                    let message = view.message.clone().unwrap_or_else(|| "failed".into());
                    search.finish(index, TrialState::Failed, value, Some(message));
                }
                JobStatus::Created | JobStatus::Running => {
                    self.maybe_stop(search, index, &name, new_step).await?
                }
            }
        }
        Ok(())
    }

    async fn maybe_stop(
        &self,
        search: &mut Search<'_>,
        index: u32,
        name: &str,
        new_step: bool,
    ) -> Result<()> {
        let Some(rule) = search.plan.early_stopping.filter(|_| new_step) else {
            return Ok(());
        };
        let history = search.history();
        let Some((trial, _)) = search.records.get(&index) else {
            return Ok(());
        };
        if rule.should_stop(trial, &history, search.plan.study.direction()) {
            self.delete_job(name).await?;
            let why = "stopped early: worse than the median of the succeeded trials at this step"
                .to_owned();
            search.finish(index, TrialState::Stopped, None, Some(why));
        }
        Ok(())
    }

    async fn give_up(&self, search: &Search<'_>, limit: Duration) -> ClientError {
        for active in &search.active {
            let _ = self.delete_job(&active.name).await;
        }
        ClientError::Timeout {
            name: search.job.name().to_owned(),
            seconds: limit.as_secs(),
            wanted: "every trial finished".into(),
            current: format!("{} trials running", search.active.len()),
        }
    }
}

#[cfg(feature = "local")]
impl TrainerClient<crate::LocalProcessBackend> {
    /// Runs the search of `job` on this machine ([`optimize_here`](Self::optimize_here) with the default
    /// options): every trial a local run, at most `parallelTrials` at once and no more than the local
    /// queue admits.
    ///
    /// # Errors
    /// See [`optimize_here`](Self::optimize_here).
    pub async fn optimize(&self, job: &OptimizationJob) -> Result<OptimizationReport> {
        self.optimize_here(job, &OptimizeOptions::default()).await
    }
}

#[cfg(test)]
mod tests {
    use super::record_step;

    #[test]
    fn steps_carry_the_last_value_forward() {
        let mut v = Vec::new();
        record_step(&mut v, Some(3), 5.0);
        assert_eq!(v.len(), 3);
        assert!(v[0].is_nan() && v[1].is_nan());
        record_step(&mut v, Some(5), 4.0);
        assert_eq!(&v[2..], &[5.0, 5.0, 4.0]);
        record_step(&mut v, Some(5), 3.5);
        assert_eq!(v.last(), Some(&3.5));
        record_step(&mut v, None, 3.0);
        assert_eq!(v.len(), 6);
    }
}
