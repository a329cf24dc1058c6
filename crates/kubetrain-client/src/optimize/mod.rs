//! Hyperparameter search: `TrainerClient::optimize`, shaped after the Python SDK's `OptimizerClient`
//! (`Search`, `Objective`, `TrialConfig`, `RandomSearch`, `GridSearch`) and upstream's planned
//! `TrainerClient().optimize()`.
//!
//! An [`OptimizationJob`] is built with [`Optimize`] (or read from a manifest) and then:
//! - on a cluster ([`KubernetesBackend`](crate::KubernetesBackend)), `optimize` creates it and the
//!   operator runs the trials; `wait_for_optimization` waits for it and returns the [`OptimizationReport`];
//! - on this machine ([`LocalProcessBackend`](crate::LocalProcessBackend)), `optimize` runs the search here:
//!   every trial is a local run of the TrainJob `<job>-<index>` with its parameters as
//!   `KUBEFLOW_TRAINER_OPT_<NAME>` env, at most `parallelTrials` at once (and no more than the local queue
//!   admits), the objective read from the trial's `trainerStatus` metrics, the same samplers
//!   (kubetrain-optimize) as the operator.
//!
//! ```
//! use kubetrain_client::optimize::{Optimize, Search, TrialConfig, TpeSearch};
//! use kubetrain_api::{Objective, ObjectiveDirection, TrainJobTemplateSpec};
//!
//! let mut template = TrainJobTemplateSpec::default();
//! template.spec.runtime_ref.name = "torch-distributed".into();
//! let job = Optimize::new("lr-sweep", template)
//!     .search_space("lr", Search::loguniform(1e-4, 1e-1))
//!     .search_space("batch_size", Search::choice(["256", "1024"]))
//!     .objective(Objective { metric: "loss".into(), direction: Some(ObjectiveDirection::Minimize) })
//!     .algorithm(TpeSearch { seed: Some(7) })
//!     .trial_config(TrialConfig { num_trials: 12, parallel_trials: 2, ..TrialConfig::default() })
//!     .into_job();
//! let plan = kubetrain_client::optimize::search_plan(&job).unwrap();
//! assert_eq!(plan.study.trial_count(), 12);
//! assert_eq!(job.metadata.annotations.unwrap()["kubetrain.dev/search-algorithm"], "tpe");
//! ```

#[cfg(feature = "kubernetes")]
mod cluster;
mod driver;
mod plan;
mod report;
#[cfg(test)]
mod tests;

pub use driver::OptimizeOptions;
pub use plan::{SearchPlan, search_plan};
pub use report::{BestTrial, OptimizationReport, TrialReport};

use std::collections::BTreeMap;

use kubetrain_api::optimizationjob::annotations;
use kubetrain_api::{
    CategoricalSpace, GridAlgorithm, LogUniformSpace, Objective, OptimizationJob,
    OptimizationJobSpec, ParameterType, RandomAlgorithm, SearchAlgorithm, SearchSpace,
    TrainJobTemplateSpec, UniformSpace,
};

/// Search-space helpers, as the SDK's `Search`.
#[derive(Debug, Clone, Copy)]
pub struct Search;

impl Search {
    /// Floats uniform between `min` and `max` (`Search.uniform`).
    pub fn uniform(min: f64, max: f64) -> SearchSpace {
        SearchSpace {
            uniform: Some(UniformSpace {
                min: min.to_string(),
                max: max.to_string(),
                type_: None,
            }),
            ..SearchSpace::default()
        }
    }

    /// Integers uniform between `min` and `max` (upstream's `type: Int`).
    pub fn int_uniform(min: i64, max: i64) -> SearchSpace {
        SearchSpace {
            uniform: Some(UniformSpace {
                min: min.to_string(),
                max: max.to_string(),
                type_: Some(ParameterType::Int),
            }),
            ..SearchSpace::default()
        }
    }

    /// Floats log-uniform between `min` and `max` (`Search.loguniform`).
    pub fn loguniform(min: f64, max: f64) -> SearchSpace {
        SearchSpace {
            log_uniform: Some(LogUniformSpace {
                min: min.to_string(),
                max: max.to_string(),
                type_: None,
            }),
            ..SearchSpace::default()
        }
    }

    /// One of `values` (`Search.choice`).
    pub fn choice<I, S>(values: I) -> SearchSpace
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        SearchSpace {
            categorical: Some(CategoricalSpace {
                choices: values.into_iter().map(Into::into).collect(),
            }),
            ..SearchSpace::default()
        }
    }
}

/// How many trials, and how many at once (the SDK's `TrialConfig`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrialConfig {
    /// Trials in all (default 10).
    pub num_trials: u32,
    /// Trials at once (default 1).
    pub parallel_trials: u32,
    /// Stop starting trials once this many have failed (local searches; default: never).
    pub max_failed_trials: Option<u32>,
}

impl Default for TrialConfig {
    fn default() -> Self {
        Self {
            num_trials: 10,
            parallel_trials: 1,
            max_failed_trials: None,
        }
    }
}

/// Random search (the SDK's `RandomSearch`; `random_state` is the seed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RandomSearch {
    /// The seed (default: derived from the job's name, so a search is reproducible).
    pub random_state: Option<i64>,
}

/// Grid search (the SDK's `GridSearch`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GridSearch;

/// kubetrain's TPE sampler: `searchAlgorithm: {random: {seed}}` plus the annotation
/// `kubetrain.dev/search-algorithm: tpe`, so the manifest stays valid upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TpeSearch {
    /// The seed (default: derived from the job's name).
    pub seed: Option<i64>,
}

/// One of the search algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchAlgorithmChoice {
    /// Random search.
    Random(RandomSearch),
    /// Grid search.
    Grid(GridSearch),
    /// TPE.
    Tpe(TpeSearch),
}

impl From<RandomSearch> for SearchAlgorithmChoice {
    fn from(a: RandomSearch) -> Self {
        Self::Random(a)
    }
}

impl From<GridSearch> for SearchAlgorithmChoice {
    fn from(a: GridSearch) -> Self {
        Self::Grid(a)
    }
}

impl From<TpeSearch> for SearchAlgorithmChoice {
    fn from(a: TpeSearch) -> Self {
        Self::Tpe(a)
    }
}

/// An OptimizationJob under construction, the arguments of the SDK's `optimize()`.
#[derive(Debug, Clone)]
pub struct Optimize {
    name: String,
    template: TrainJobTemplateSpec,
    search_space: Vec<(String, SearchSpace)>,
    objectives: Vec<Objective>,
    algorithm: SearchAlgorithmChoice,
    trial_config: TrialConfig,
    median_stopping: bool,
}

impl Optimize {
    /// A search named `name` whose trials are made from `template`; random search, 10 trials one at a
    /// time, minimising `loss` unless told otherwise.
    pub fn new(name: impl Into<String>, template: TrainJobTemplateSpec) -> Self {
        Self {
            name: name.into(),
            template,
            search_space: Vec::new(),
            objectives: Vec::new(),
            algorithm: SearchAlgorithmChoice::Random(RandomSearch::default()),
            trial_config: TrialConfig::default(),
            median_stopping: false,
        }
    }

    /// Adds parameter `name` over `space` (see [`Search`]).
    pub fn search_space(mut self, name: impl Into<String>, space: SearchSpace) -> Self {
        self.search_space.push((name.into(), space));
        self
    }

    /// Sets the objective (the SDK optimises the first; default: minimise `loss`).
    pub fn objective(mut self, objective: Objective) -> Self {
        self.objectives = vec![objective];
        self
    }

    /// Sets the algorithm.
    pub fn algorithm(mut self, algorithm: impl Into<SearchAlgorithmChoice>) -> Self {
        self.algorithm = algorithm.into();
        self
    }

    /// Sets the trial budget.
    pub fn trial_config(mut self, config: TrialConfig) -> Self {
        self.trial_config = config;
        self
    }

    /// Turns on median stopping (`kubetrain.dev/early-stopping: median`).
    pub fn median_stopping(mut self, on: bool) -> Self {
        self.median_stopping = on;
        self
    }

    /// The OptimizationJob.
    pub fn into_job(self) -> OptimizationJob {
        let mut notes = BTreeMap::new();
        let search_algorithm = match self.algorithm {
            SearchAlgorithmChoice::Random(r) => SearchAlgorithm {
                random: Some(RandomAlgorithm {
                    seed: r.random_state,
                }),
                grid: None,
            },
            SearchAlgorithmChoice::Grid(_) => SearchAlgorithm {
                random: None,
                grid: Some(GridAlgorithm {}),
            },
            SearchAlgorithmChoice::Tpe(t) => {
                notes.insert(annotations::SEARCH_ALGORITHM.to_owned(), "tpe".to_owned());
                SearchAlgorithm {
                    random: Some(RandomAlgorithm { seed: t.seed }),
                    grid: None,
                }
            }
        };
        if self.median_stopping {
            notes.insert(annotations::EARLY_STOPPING.to_owned(), "median".to_owned());
        }
        let objectives = if self.objectives.is_empty() {
            vec![Objective {
                metric: "loss".into(),
                direction: Some(kubetrain_api::ObjectiveDirection::Minimize),
            }]
        } else {
            self.objectives
        };
        let spec = OptimizationJobSpec {
            objectives,
            search_algorithm: Some(search_algorithm),
            parameters: self
                .search_space
                .into_iter()
                .map(|(name, search_space)| kubetrain_api::Parameter { name, search_space })
                .collect(),
            num_trials: Some(i32::try_from(self.trial_config.num_trials).unwrap_or(i32::MAX)),
            parallel_trials: Some(
                i32::try_from(self.trial_config.parallel_trials).unwrap_or(i32::MAX),
            ),
            train_job_template: self.template,
        };
        let mut job = OptimizationJob::new(self.name, spec);
        if !notes.is_empty() {
            job.metadata.annotations = Some(notes);
        }
        job
    }
}
