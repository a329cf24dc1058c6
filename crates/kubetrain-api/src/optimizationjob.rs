//! `OptimizationJob`: a hyperparameter search whose trials are TrainJobs.
//!
//! The types follow upstream Kubeflow Trainer master (`pkg/apis/trainer/v1alpha1/optimizationjob_types.go`,
//! merged in kubeflow/trainer#3552 for KEP #3565): the same fields, defaults, list types and CEL rules, so an
//! upstream manifest reads and validates here unchanged. Upstream has no controller yet (kubeflow/trainer#3828
//! is open); kubetrain-operator runs one, and the annotations it reads beyond upstream's fields are in
//! [`annotations`].
//!
//! ```
//! use kubetrain_api::{parse_documents, Document, ObjectiveDirection};
//!
//! let yaml = r#"
//! apiVersion: trainer.kubeflow.org/v1alpha1
//! kind: OptimizationJob
//! metadata: {name: lr-sweep}
//! spec:
//!   objectives: [{metric: loss}]
//!   parameters:
//!     - name: lr
//!       searchSpace: {logUniform: {min: "1e-4", max: "1e-1"}}
//!   numTrials: 8
//!   parallelTrials: 2
//!   trainJobTemplate:
//!     spec: {runtimeRef: {name: torch-distributed}}
//! "#;
//! let docs = parse_documents(yaml).expect("valid YAML");
//! let Document::OptimizationJob(job) = &docs[0].document else { panic!("an OptimizationJob") };
//! assert_eq!(job.spec.objectives[0].direction_or_default(), ObjectiveDirection::Minimize);
//! assert_eq!(job.spec.num_trials_or_default(), 8);
//! assert!(job.spec.search_algorithm_or_default().random.is_some());
//! ```

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::TrainJobSpec;
use crate::constants::OPTIMIZATIONJOB_KIND;
use crate::resource::trainer_kind;

trainer_kind! {
    /// A hyperparameter search: trials are TrainJobs made from `spec.trainJobTemplate`, each with one assignment
    /// of `spec.parameters`, scored by `spec.objectives[0].metric` from the trial's `status.trainerStatus`.
    kind OptimizationJob {
        kind: OPTIMIZATIONJOB_KIND,
        plural: "optimizationjobs",
        scope: k8s_openapi::NamespaceResourceScope,
        spec: OptimizationJobSpec,
        status: OptimizationJobStatus,
    }
}

/// The pattern of upstream's `Double`: a decimal number as a string (`"0.1"`, `"-3"`, `"1e-4"`).
pub const DOUBLE_PATTERN: &str = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$";

/// Desired state of an OptimizationJob. Immutable once created.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new("self == oldSelf")
        .message("OptimizationJobSpec is immutable and cannot be updated after creation"),
    validation = kube::core::Rule::new("self.parallelTrials <= self.numTrials")
        .message("parallelTrials cannot exceed numTrials"),
    validation = kube::core::Rule::new("!has(self.searchAlgorithm.grid) || self.parameters.all(p, has(p.searchSpace.categorical))")
        .message("Grid search requires all parameters to be Categorical; Uniform and LogUniform are not supported.")
)]
pub struct OptimizationJobSpec {
    /// The objectives to optimize (exactly one).
    #[schemars(length(min = 1, max = 1), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["metric"]))]
    pub objectives: Vec<Objective>,

    /// The algorithm that picks each trial's hyperparameters (default `{random: {}}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {"random": {}}))]
    pub search_algorithm: Option<SearchAlgorithm>,

    /// The hyperparameters to search over (1 to 100, unique names).
    #[schemars(length(min = 1, max = 100), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub parameters: Vec<Parameter>,

    /// The total number of trials (default 1, at most 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100), extend("default" = 1))]
    pub num_trials: Option<i32>,

    /// How many trials run at once (default 1, at most `numTrials`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100), extend("default" = 1))]
    pub parallel_trials: Option<i32>,

    /// The TrainJob each trial is made from.
    pub train_job_template: TrainJobTemplateSpec,
}

impl OptimizationJobSpec {
    /// `numTrials` with upstream's default of 1.
    pub fn num_trials_or_default(&self) -> i32 {
        self.num_trials.unwrap_or(1)
    }
    /// `parallelTrials` with upstream's default of 1.
    pub fn parallel_trials_or_default(&self) -> i32 {
        self.parallel_trials.unwrap_or(1)
    }
    /// `searchAlgorithm` with upstream's default, random search without a seed.
    pub fn search_algorithm_or_default(&self) -> SearchAlgorithm {
        self.search_algorithm.clone().unwrap_or(SearchAlgorithm {
            random: Some(RandomAlgorithm::default()),
            grid: None,
        })
    }
    /// The objective (upstream allows exactly one), if any.
    pub fn objective(&self) -> Option<&Objective> {
        self.objectives.first()
    }
}

/// An objective: a metric the trials report and whether to minimize or maximize it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Objective {
    /// The name of the metric to track (a name in the trial's `status.trainerStatus.metrics`).
    #[schemars(length(min = 1, max = 64))]
    pub metric: String,

    /// Whether lower or higher is better (default `Minimize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Minimize"))]
    pub direction: Option<ObjectiveDirection>,
}

impl Objective {
    /// `direction` with upstream's default, `Minimize`.
    pub fn direction_or_default(&self) -> ObjectiveDirection {
        self.direction.unwrap_or(ObjectiveDirection::Minimize)
    }
}

/// Whether an objective is minimized or maximized.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ObjectiveDirection {
    /// Higher is better (accuracy).
    Maximize,
    /// Lower is better (loss); the default.
    Minimize,
}

/// The search algorithm: exactly one of `random` and `grid`.
///
/// kubetrain also runs TPE, chosen by the annotation [`annotations::SEARCH_ALGORITHM`] while this field stays
/// upstream-valid (`random`, whose seed TPE reuses).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("[has(self.random),has(self.grid)].filter(x,x==true).size() == 1")
    .message("exactly one of the fields in [random grid] must be set"))]
pub struct SearchAlgorithm {
    /// Random search: each parameter drawn independently from its space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random: Option<RandomAlgorithm>,

    /// Grid search: every combination of the (categorical) parameters' choices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid: Option<GridAlgorithm>,
}

/// Random search.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RandomAlgorithm {
    /// The seed; the same seed gives the same trials. Without one kubetrain uses a hash (FNV-1a) of the
    /// OptimizationJob's name, so a restart repeats nothing and a manifest searches the same points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

/// Grid search; it has no settings.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct GridAlgorithm {}

/// One hyperparameter: a name and the space its values come from.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Parameter {
    /// The name of the hyperparameter (the trial's env var is `KUBEFLOW_TRAINER_OPT_<NAME>`).
    #[schemars(length(min = 1, max = 64))]
    pub name: String,

    /// Where its values come from.
    pub search_space: SearchSpace,
}

/// The space of one hyperparameter: exactly one of `uniform`, `logUniform` and `categorical`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("[has(self.uniform),has(self.logUniform),has(self.categorical)].filter(x,x==true).size() == 1")
    .message("exactly one of the fields in [uniform logUniform categorical] must be set"))]
pub struct SearchSpace {
    /// Values uniform over `[min, max]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uniform: Option<UniformSpace>,

    /// Values whose logarithm is uniform over `[ln min, ln max]` (learning rates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_uniform: Option<LogUniformSpace>,

    /// One of a set of strings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub categorical: Option<CategoricalSpace>,
}

/// A uniform distribution over `[min, max]`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("double(self.min) < double(self.max)")
    .message("min must be strictly less than max"))]
pub struct UniformSpace {
    /// The lower bound, a decimal number as a string (`"0.1"`).
    #[schemars(
        length(min = 1, max = 64),
        pattern(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$")
    )]
    pub min: String,

    /// The upper bound, a decimal number as a string.
    #[schemars(
        length(min = 1, max = 64),
        pattern(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$")
    )]
    pub max: String,

    /// `Float` (the default) or `Int` (values rounded to integers).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Float"))]
    pub type_: Option<ParameterType>,
}

/// A log-uniform distribution over `[min, max]`, `min > 0`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = kube::core::Rule::new("double(self.min) > 0.0").message("min must be strictly greater than 0"),
    validation = kube::core::Rule::new("double(self.min) < double(self.max)").message("min must be strictly less than max")
)]
pub struct LogUniformSpace {
    /// The lower bound, a positive decimal number as a string (`"1e-4"`).
    #[schemars(
        length(min = 1, max = 64),
        pattern(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$")
    )]
    pub min: String,

    /// The upper bound, a decimal number as a string.
    #[schemars(
        length(min = 1, max = 64),
        pattern(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$")
    )]
    pub max: String,

    /// `Float` (the default) or `Int` (values rounded to integers).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Float"))]
    pub type_: Option<ParameterType>,
}

/// The value type of a uniform or log-uniform parameter.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParameterType {
    /// Integers (values rounded).
    Int,
    /// Floating-point numbers; the default.
    Float,
}

/// One of a set of strings.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CategoricalSpace {
    /// The choices (1 to 100 distinct strings of at most 64 characters).
    #[schemars(length(min = 1, max = 100), inner(length(max = 64)), extend("x-kubernetes-list-type" = "set"))]
    pub choices: Vec<String>,
}

/// A hyperparameter and the value a trial got.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ParameterAssignment {
    /// The name of the hyperparameter.
    #[schemars(length(min = 1, max = 64))]
    pub name: String,

    /// Its value, as the trial's env var carries it.
    #[schemars(length(min = 1, max = 64))]
    pub value: String,
}

/// The TrainJob each trial is made from: labels and annotations, and a TrainJob spec.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TrainJobTemplateSpec {
    /// Labels, annotations and finalizers of each trial; no name or namespace (the controller names trials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("!has(self.name) && !has(self.namespace)")
        .message("name and namespace cannot be set in a template."))]
    pub metadata: Option<ObjectMeta>,

    /// The spec of each trial's TrainJob.
    pub spec: TrainJobSpec,
}

/// Observed state of an OptimizationJob.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OptimizationJobStatus {
    /// The job's conditions (kubetrain writes `Created`, `Running`, `Complete` and `Failed`; see
    /// [`optimization_conditions`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// The best trial so far and its parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<OptimizationResult>,
}

/// The best trial: its TrainJob and its parameters (upstream's `Result`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Result")]
pub struct OptimizationResult {
    /// The name of the trial TrainJob that achieved this result.
    #[schemars(length(min = 1, max = 63))]
    pub train_job_name: String,

    /// The trial's parameters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub parameters: Vec<ParameterAssignment>,
}

/// Condition types and reasons kubetrain's controller writes on an OptimizationJob (upstream's types define
/// `status.conditions` but name no types yet; these follow the TrainJob's).
pub mod optimization_conditions {
    /// The controller accepted the job and made (or is making) its first trials.
    pub const CREATED: &str = "Created";
    /// Trials are running; `False` once the search ends.
    pub const RUNNING: &str = "Running";
    /// Every trial finished and `status.result` names the best one.
    pub const COMPLETE: &str = "Complete";
    /// The search cannot finish: the spec cannot be searched, or no trial produced the objective.
    pub const FAILED: &str = "Failed";
    /// Reason of `Created=True`.
    pub const REASON_CREATED: &str = "TrialsCreated";
    /// Reason of `Running=True`.
    pub const REASON_RUNNING: &str = "TrialsRunning";
    /// Reason of `Running=False` and `Complete=True`.
    pub const REASON_COMPLETED: &str = "AllTrialsFinished";
    /// Reason of `Failed=True` when the spec cannot be searched (a bad bound, an unknown annotation value).
    pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
    /// Reason of `Failed=True` when every trial finished without reporting the objective metric.
    pub const REASON_NO_OBJECTIVE: &str = "NoObjectiveReported";
}

/// Annotations and labels kubetrain reads and writes for OptimizationJobs, beyond upstream's fields.
pub mod annotations {
    /// OptimizationJob annotation that picks a search algorithm upstream's `searchAlgorithm` does not have:
    /// `tpe` (Tree-structured Parzen Estimator). The spec's `searchAlgorithm` must then be `random` (its seed
    /// seeds TPE), so the manifest stays valid upstream.
    pub const SEARCH_ALGORITHM: &str = "kubetrain.dev/search-algorithm";
    /// OptimizationJob annotation that turns on early stopping: `median` stops a running trial whose latest
    /// objective is worse than the median of the other trials' at the same step.
    pub const EARLY_STOPPING: &str = "kubetrain.dev/early-stopping";
    /// Label on every trial TrainJob naming its OptimizationJob.
    pub const OPTIMIZATION_JOB_LABEL: &str = "trainer.kubeflow.org/optimization-job";
    /// Label on every trial TrainJob with its index (0-based) in the search.
    pub const TRIAL_INDEX_LABEL: &str = "trainer.kubeflow.org/trial-index";
    /// Annotation on every trial TrainJob: its parameters as a JSON object (name to value), so a restarted
    /// controller reads them back instead of sampling again.
    pub const TRIAL_PARAMETERS: &str = "trainer.kubeflow.org/trial-parameters";
    /// Prefix of the env var that carries a parameter into the trainer: `KUBEFLOW_TRAINER_OPT_<NAME>`.
    pub const ENV_PREFIX: &str = "KUBEFLOW_TRAINER_OPT_";
}

/// The env var name of a parameter: [`annotations::ENV_PREFIX`] and the name upper-cased, with every character
/// that is not an ASCII letter or digit replaced by `_` (`learning-rate` → `KUBEFLOW_TRAINER_OPT_LEARNING_RATE`).
pub fn parameter_env_name(name: &str) -> String {
    let normalized: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("{}{normalized}", annotations::ENV_PREFIX)
}

/// Reads one of upstream's `Double` strings (`"0.1"`, `"1e-4"`) as a finite number; `path` names the field in
/// the error (`spec.parameters[0].searchSpace.uniform.min`).
pub fn parse_double(text: &str, path: &str) -> Result<f64, crate::FieldError> {
    match text.trim().parse::<f64>() {
        Ok(value) if value.is_finite() => Ok(value),
        Ok(_) => Err(crate::FieldError::error(
            path,
            format!(
                "Invalid value: {text:?}: out of range for a 64-bit float; use a smaller exponent"
            ),
        )),
        Err(_) => Err(crate::FieldError::error(
            path,
            format!("Invalid value: {text:?}: not a decimal number (e.g. \"0.1\" or \"1e-4\")"),
        )),
    }
}

/// The longest Kubernetes name a trial may have (an RFC 1035 label, as TrainJob names must be).
const MAX_TRIAL_NAME: usize = 63;

/// The stem of an OptimizationJob's trial names and the value of its trials'
/// [`annotations::OPTIMIZATION_JOB_LABEL`]: the job's name when it is a valid RFC 1035 label of at most 52
/// characters (room for `-<index>` up to `-9999999999`), otherwise a deterministic stand-in: the name with every
/// character outside `[a-z0-9-]` replaced by `-`, cut to 43 characters, plus `-` and 8 hex digits of a hash of
/// the full name (so two long names that share a prefix do not collide).
pub fn trial_stem(job_name: &str) -> String {
    let is_label = job_name.len() <= MAX_TRIAL_NAME - 11
        && job_name.starts_with(|c: char| c.is_ascii_lowercase())
        && !job_name.ends_with('-')
        && job_name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if is_label {
        return job_name.to_owned();
    }
    let mut cleaned: String = job_name
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(43)
        .collect();
    if !cleaned.starts_with(|c: char| c.is_ascii_lowercase()) {
        cleaned.insert(0, 'o');
        cleaned.truncate(43);
    }
    let trimmed = cleaned.trim_end_matches('-');
    format!("{trimmed}-{:08x}", fnv1a(job_name.as_bytes()) as u32)
}

/// The name of trial `index` of the OptimizationJob `job_name`: `<stem>-<index>` ([`trial_stem`]), a valid
/// TrainJob name for every job name and index, the same on every call.
pub fn trial_name(job_name: &str, index: u32) -> String {
    format!("{}-{index}", trial_stem(job_name))
}

/// 64-bit FNV-1a: a small stable hash (std's `DefaultHasher` may change between Rust releases).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The TrainJob of trial `index` with `parameters` (name to value): the template's labels, annotations,
/// finalizers and spec, named [`trial_name`] in the job's namespace, labelled with the job
/// ([`annotations::OPTIMIZATION_JOB_LABEL`]) and the index ([`annotations::TRIAL_INDEX_LABEL`]), the parameters
/// recorded in [`annotations::TRIAL_PARAMETERS`] and set as env `KUBEFLOW_TRAINER_OPT_<NAME>`
/// ([`parameter_env_name`]) of the trainer (replacing a template env var of the same name). When the job has a
/// UID, the trial is owned by it (a controller reference, so deleting the job deletes its trials).
pub fn trial_train_job(
    job: &OptimizationJob,
    index: u32,
    parameters: &std::collections::BTreeMap<String, String>,
) -> crate::TrainJob {
    use k8s_openapi::api::core::v1::EnvVar;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    let template = job
        .spec
        .train_job_template
        .metadata
        .clone()
        .unwrap_or_default();
    let mut labels = template.labels.unwrap_or_default();
    labels.insert(
        annotations::OPTIMIZATION_JOB_LABEL.to_owned(),
        trial_stem(job.name()),
    );
    labels.insert(annotations::TRIAL_INDEX_LABEL.to_owned(), index.to_string());
    let mut notes = template.annotations.unwrap_or_default();
    notes.insert(
        annotations::TRIAL_PARAMETERS.to_owned(),
        serde_json::to_string(parameters).unwrap_or_default(),
    );
    let owner = job.metadata.uid.as_ref().map(|uid| OwnerReference {
        api_version: crate::constants::API_VERSION.to_owned(),
        kind: OPTIMIZATIONJOB_KIND.to_owned(),
        name: job.name().to_owned(),
        uid: uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    });
    let mut spec = job.spec.train_job_template.spec.clone();
    let trainer = spec.trainer.get_or_insert_with(Default::default);
    for (name, value) in parameters {
        let env_name = parameter_env_name(name);
        trainer.env.retain(|e| e.name != env_name);
        trainer.env.push(EnvVar {
            name: env_name,
            value: Some(value.clone()),
            value_from: None,
        });
    }
    crate::TrainJob {
        metadata: ObjectMeta {
            name: Some(trial_name(job.name(), index)),
            namespace: job.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(notes),
            finalizers: template.finalizers,
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec,
        status: None,
    }
}

/// The parameters recorded on a trial TrainJob ([`annotations::TRIAL_PARAMETERS`]); `None` when the
/// annotation is missing or is not a JSON object of strings.
pub fn trial_parameters(
    trial: &crate::TrainJob,
) -> Option<std::collections::BTreeMap<String, String>> {
    let text = trial
        .metadata
        .annotations
        .as_ref()?
        .get(annotations::TRIAL_PARAMETERS)?;
    serde_json::from_str(text).ok()
}

/// The index of a trial TrainJob ([`annotations::TRIAL_INDEX_LABEL`]).
pub fn trial_index(trial: &crate::TrainJob) -> Option<u32> {
    trial
        .metadata
        .labels
        .as_ref()?
        .get(annotations::TRIAL_INDEX_LABEL)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_upper_case_with_underscores() {
        assert_eq!(
            parameter_env_name("learning-rate"),
            "KUBEFLOW_TRAINER_OPT_LEARNING_RATE"
        );
        assert_eq!(
            parameter_env_name("lr.decay/2"),
            "KUBEFLOW_TRAINER_OPT_LR_DECAY_2"
        );
    }

    #[test]
    fn trial_names_are_labels_for_every_job_name() {
        assert_eq!(trial_name("lr-sweep", 3), "lr-sweep-3");
        let long = "a".repeat(200);
        let dotted = "My.Sweep";
        for name in [long.as_str(), dotted, "9lives", "x-", &"b".repeat(52)] {
            let trial = trial_name(name, 4_000_000_000);
            assert!(trial.len() <= 63, "{trial}");
            assert!(
                trial.starts_with(|c: char| c.is_ascii_lowercase()),
                "{trial}"
            );
            assert!(
                trial
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{trial}"
            );
            assert_eq!(trial, trial_name(name, 4_000_000_000));
        }
        assert_ne!(
            trial_stem(&format!("{}x", "a".repeat(60))),
            trial_stem(&format!("{}y", "a".repeat(60)))
        );
    }

    #[test]
    fn a_trial_carries_its_parameters_as_env_labels_and_annotation() {
        let mut job = OptimizationJob::new(
            "sweep",
            OptimizationJobSpec {
                train_job_template: TrainJobTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some([("team".to_owned(), "a".to_owned())].into()),
                        ..Default::default()
                    }),
                    spec: crate::TrainJobSpec {
                        runtime_ref: crate::RuntimeRef::cluster("torch-distributed"),
                        trainer: Some(crate::Trainer {
                            env: vec![k8s_openapi::api::core::v1::EnvVar {
                                name: "KUBEFLOW_TRAINER_OPT_LR".into(),
                                value: Some("template".into()),
                                value_from: None,
                            }],
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                },
                ..Default::default()
            },
        );
        job.metadata.namespace = Some("ns".into());
        job.metadata.uid = Some("uid-1".into());
        let parameters = [("lr".to_owned(), "0.01".to_owned())].into();
        let trial = trial_train_job(&job, 2, &parameters);
        assert_eq!(trial.name(), "sweep-2");
        assert_eq!(trial.metadata.namespace.as_deref(), Some("ns"));
        let env = &trial.spec.trainer.as_ref().unwrap().env;
        assert_eq!(env.len(), 1);
        assert_eq!(env[0].value.as_deref(), Some("0.01"));
        assert_eq!(trial_index(&trial), Some(2));
        assert_eq!(trial_parameters(&trial), Some(parameters));
        let labels = trial.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels[annotations::OPTIMIZATION_JOB_LABEL], "sweep");
        let owner = &trial.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("OptimizationJob", Some(true))
        );
    }

    #[test]
    fn defaults_are_upstreams() {
        let spec = OptimizationJobSpec::default();
        assert_eq!(spec.num_trials_or_default(), 1);
        assert_eq!(spec.parallel_trials_or_default(), 1);
        assert_eq!(
            spec.search_algorithm_or_default().random,
            Some(RandomAlgorithm::default())
        );
        let objective = Objective {
            metric: "loss".into(),
            direction: None,
        };
        assert_eq!(
            objective.direction_or_default(),
            ObjectiveDirection::Minimize
        );
    }
}
