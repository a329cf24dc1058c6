//! AdmissionReview v1 in, AdmissionReview v1 out: decoding the objects, running the rules, and turning their
//! findings into a verdict (denial message, warnings) or a JSON patch.

use std::sync::Arc;
use std::time::Instant;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kubetrain_api::constants::{CLUSTER_TRAINING_RUNTIME_KIND, TRAINING_RUNTIME_KIND};
use kubetrain_api::defaulting::stamp_runtime_patch_times;
use kubetrain_api::validation::{
    validate_cluster_training_runtime, validate_training_runtime, validate_trainjob,
    validate_trainjob_update,
};
use kubetrain_api::{
    ClusterTrainingRuntime, FieldError, RuntimeCatalog, TrainJob, TrainingRuntime,
};
use kubetrain_jobset::plugins::Registry;
use serde::de::DeserializeOwned;

use super::Route;
use super::audit::AdmissionAudit;
use super::cluster::ClusterReader;
use super::metrics::{ReviewOutcome, WebhookMetrics};
use super::policy::PolicyGate;

/// A request body that is not an AdmissionReview with a request in it; answered with HTTP 400.
#[derive(Debug, thiserror::Error)]
#[error("not an AdmissionReview with a request: {0}")]
pub struct BadReview(String);

/// The admission logic of every [`Route`], independent of the HTTP server.
pub struct Admission {
    reader: ClusterReader,
    now: fn() -> Time,
    metrics: Option<Arc<WebhookMetrics>>,
    /// Plugins whose [`CustomValidation`](kubetrain_merge::plugins::CustomValidation) runs on TrainJobs.
    plugins: Option<Arc<Registry>>,
    /// The training policy (none: upstream's behaviour).
    policy: PolicyGate,
    /// Events and audit lines about the reviews (none: nothing recorded).
    audit: Option<AdmissionAudit>,
}

impl Admission {
    /// Admission that reads runtimes and JobSets through `client` and stamps the wall-clock time.
    pub fn new(client: Client) -> Self {
        Self {
            reader: ClusterReader::new(client),
            now: || Time(k8s_openapi::jiff::Timestamp::now()),
            metrics: None,
            plugins: None,
            policy: PolicyGate::none(),
            audit: None,
        }
    }

    /// Enforces the training policy `gate` holds on TrainJobs and runtimes (create, and on update what the
    /// update adds), after the built-in rules; its denials carry field paths as theirs do.
    pub fn with_policy(mut self, gate: PolicyGate) -> Self {
        self.policy = gate;
        self
    }

    /// Records every validating review with `audit` (events, audit lines).
    pub fn with_audit(mut self, audit: AdmissionAudit) -> Self {
        self.audit = Some(audit);
        self
    }

    /// Runs the `CustomValidation` plugins of `plugins` on every TrainJob create and update, and their
    /// `validate_runtime` on every TrainingRuntime and ClusterTrainingRuntime the webhook reviews, after the
    /// built-in rules; their errors deny with their field paths, as the built-in rules do. The operator passes
    /// the registry its controller renders with.
    pub fn with_plugins(mut self, plugins: Arc<Registry>) -> Self {
        self.plugins = Some(plugins);
        self
    }

    /// The registered plugins' findings about a runtime's spec (none without plugins, as upstream).
    fn plugin_runtime_findings(
        &self,
        spec: &kubetrain_api::TrainingRuntimeSpec,
    ) -> Vec<FieldError> {
        self.plugins
            .as_ref()
            .map(|plugins| plugins.plugins().validate_runtime(spec))
            .unwrap_or_default()
    }

    /// Reads referenced runtimes from `cache` (kept current by its watches) instead of a GET per review;
    /// runtimes the cache does not hold yet are still read live.
    pub fn with_cache(mut self, cache: super::cluster::RuntimeCache) -> Self {
        self.reader = self.reader.with_cache(cache);
        self
    }

    /// Counts every review and its duration in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<WebhookMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Uses `now` instead of the wall clock for runtime-patch times (tests).
    pub fn with_clock(mut self, now: fn() -> Time) -> Self {
        self.now = now;
        self
    }

    /// Answers one AdmissionReview posted to `route`.
    ///
    /// Problems with the object (it does not decode, a rule fails, the runtime cannot be read) are answered
    /// with a denial in the review; only a body that is not an AdmissionReview at all is an error.
    pub async fn review(
        &self,
        route: Route,
        body: &[u8],
    ) -> Result<AdmissionReview<DynamicObject>, BadReview> {
        let started = Instant::now();
        let answer = self.answer(route, body).await;
        if let Some(metrics) = &self.metrics {
            let verdict = match &answer {
                Err(_) => ReviewOutcome::BadRequest,
                Ok(review) => match &review.response {
                    Some(response) if response.allowed => ReviewOutcome::Allowed,
                    Some(response) if response.result.code >= 500 => ReviewOutcome::Error,
                    _ => ReviewOutcome::Denied,
                },
            };
            metrics.observe(route, verdict, started.elapsed());
        }
        answer
    }

    async fn answer(
        &self,
        route: Route,
        body: &[u8],
    ) -> Result<AdmissionReview<DynamicObject>, BadReview> {
        let review: AdmissionReview<DynamicObject> =
            serde_json::from_slice(body).map_err(|e| BadReview(e.to_string()))?;
        let request: AdmissionRequest<DynamicObject> = review
            .try_into()
            .map_err(|_| BadReview("the review carries no request".to_owned()))?;
        let response = AdmissionResponse::from(&request);
        let response = if matches!(request.operation, Operation::Create | Operation::Update) {
            match self.decide(route, &request, response.clone()).await {
                Ok(response) => response,
                Err(reject) => reject.apply(response),
            }
        } else {
            // Deletes and connects are not registered; allow whatever arrives anyway.
            response
        };
        if let Some(audit) = &self.audit {
            // The Secrets of an admitted TrainJob's runtime need the runtime (from the cache).
            let admitted_create = route == Route::ValidateTrainJob
                && response.allowed
                && request.operation == Operation::Create;
            let catalog = match admitted_create.then(|| object::<TrainJob>(&request)) {
                Some(Ok(job)) => self.reader.catalog_for(&job).await.ok(),
                _ => None,
            };
            audit.record(route, &request, &response, catalog.as_ref());
        }
        tracing::debug!(
            route = route.path(),
            uid = %request.uid,
            name = %request.name,
            allowed = response.allowed,
            "admission reviewed"
        );
        Ok(response.into_review())
    }

    async fn decide(
        &self,
        route: Route,
        request: &AdmissionRequest<DynamicObject>,
        response: AdmissionResponse,
    ) -> Result<AdmissionResponse, Reject> {
        let update = request.operation == Operation::Update;
        match route {
            Route::MutateTrainJob => {
                let job: TrainJob = object(request)?;
                let old: Option<TrainJob> = if update {
                    Some(old_object(request)?)
                } else {
                    None
                };
                let mut stamped = job.clone();
                stamp_runtime_patch_times(old.as_ref(), &mut stamped, &(self.now)());
                let patch = time_patch(&job, &stamped);
                if patch.0.is_empty() {
                    return Ok(response);
                }
                response
                    .with_patch(patch)
                    .map_err(|e| Reject::Internal(e.to_string()))
            }
            Route::ValidateTrainJob => {
                let job: TrainJob = object(request)?;
                let catalog = self.reader.catalog_for(&job).await.map_err(|e| {
                    Reject::Internal(format!(
                        "spec.runtimeRef: cannot read runtime {:?}: {e}",
                        job.spec.runtime_ref.name
                    ))
                })?;
                let old: Option<TrainJob> = if update {
                    Some(old_object(request)?)
                } else {
                    None
                };
                let mut findings = match &old {
                    Some(old) => {
                        // The JobSet only matters when the runtime patches change.
                        let jobset = if old.spec.runtime_patches != job.spec.runtime_patches {
                            self.reader.jobset_of(&job).await.map_err(|e| {
                                Reject::Internal(format!(
                                    "cannot read the JobSet of the TrainJob: {e}"
                                ))
                            })?
                        } else {
                            None
                        };
                        let mut findings =
                            validate_trainjob_update(old, &job, &catalog, jobset.as_ref());
                        findings.extend(kubetrain_jobset::disruption::update_finding(old, &job));
                        findings
                    }
                    None => validate_trainjob(&job, &catalog),
                };
                if let Some(plugins) = &self.plugins {
                    findings.extend(plugin_findings(plugins, &catalog, old.as_ref(), &job));
                }
                findings.extend(
                    self.policy
                        .trainjob_denials(&job, old.as_ref(), &catalog)
                        .await,
                );
                let priority = self.reader.priority_class_errors(&job, &catalog).await;
                findings.extend(
                    priority.map_err(|e| {
                        Reject::Internal(format!("cannot read PriorityClasses: {e}"))
                    })?,
                );
                Ok(verdict(response, &findings, true))
            }
            Route::ValidateTrainingRuntime | Route::ValidateClusterTrainingRuntime => {
                self.decide_runtime(route, request, response, update).await
            }
        }
    }

    /// The runtime routes: upstream's rules, the plugins' and the training policy's.
    async fn decide_runtime(
        &self,
        route: Route,
        request: &AdmissionRequest<DynamicObject>,
        response: AdmissionResponse,
        update: bool,
    ) -> Result<AdmissionResponse, Reject> {
        match route {
            Route::ValidateTrainingRuntime => {
                // Upstream validates TrainingRuntimes on create only; the training policy judges updates too.
                if update && self.policy.current().is_ok_and(|p| p.is_none()) {
                    return Ok(response);
                }
                let runtime: TrainingRuntime = object(request)?;
                let (mut findings, old) = if update {
                    (
                        Vec::new(),
                        Some(old_object::<TrainingRuntime>(request)?.spec),
                    )
                } else {
                    let mut findings = validate_training_runtime(&runtime);
                    findings.extend(self.plugin_runtime_findings(&runtime.spec));
                    (findings, None)
                };
                findings.extend(
                    self.policy
                        .runtime_denials(
                            TRAINING_RUNTIME_KIND,
                            runtime.metadata.name.as_deref().unwrap_or_default(),
                            runtime
                                .metadata
                                .namespace
                                .as_deref()
                                .or(request.namespace.as_deref()),
                            &runtime.spec,
                            old.as_ref(),
                        )
                        .await,
                );
                Ok(verdict(response, &findings, true))
            }
            Route::ValidateClusterTrainingRuntime => {
                let runtime: ClusterTrainingRuntime = object(request)?;
                let mut findings = validate_cluster_training_runtime(&runtime);
                findings.extend(self.plugin_runtime_findings(&runtime.spec));
                let old = if update && self.policy.current().is_ok_and(|p| p.is_some()) {
                    Some(old_object::<ClusterTrainingRuntime>(request)?.spec)
                } else {
                    None
                };
                findings.extend(
                    self.policy
                        .runtime_denials(
                            CLUSTER_TRAINING_RUNTIME_KIND,
                            runtime.metadata.name.as_deref().unwrap_or_default(),
                            None,
                            &runtime.spec,
                            old.as_ref(),
                        )
                        .await,
                );
                // Upstream warns about a deprecated runtime on create only.
                Ok(verdict(response, &findings, !update))
            }
            Route::MutateTrainJob | Route::ValidateTrainJob => Ok(response),
        }
    }
}

/// The findings of the registry's `CustomValidation` plugins (upstream's `RunCustomValidationPlugins`), on the
/// runtime info before any policy is enforced, as upstream builds it. None when no plugin validates, when the
/// runtime does not resolve (the built-in rules deny that) or when the info cannot be built (runtime patches
/// that do not merge, which the render reports).
fn plugin_findings(
    plugins: &Registry,
    catalog: &RuntimeCatalog,
    old: Option<&TrainJob>,
    job: &TrainJob,
) -> Vec<FieldError> {
    let plugins = plugins.plugins();
    if plugins.iter().all(|p| p.custom_validation().is_none()) {
        return Vec::new();
    }
    let Ok(runtime) = kubetrain_jobset::resolve(catalog, job) else {
        return Vec::new();
    };
    match kubetrain_merge::Info::new(job, runtime) {
        Ok(info) => plugins.validate(&info, old, job),
        Err(_) => Vec::new(),
    }
}

/// Why a request is refused before any rule ran.
enum Reject {
    /// The object does not decode (HTTP-level 400 in the review's status).
    Decode(String),
    /// Something on our side failed (500): the cluster could not be read, a patch could not be encoded.
    Internal(String),
}

impl Reject {
    fn apply(self, response: AdmissionResponse) -> AdmissionResponse {
        let (code, reason, message) = match self {
            Reject::Decode(message) => (400, "BadRequest", message),
            Reject::Internal(message) => (500, "InternalError", message),
        };
        let mut response = response.deny(message);
        response.result.code = code;
        response.result.reason = reason.to_owned();
        response
    }
}

fn object<T: DeserializeOwned>(request: &AdmissionRequest<DynamicObject>) -> Result<T, Reject> {
    decode(request.object.as_ref(), "object")
}

fn old_object<T: DeserializeOwned>(request: &AdmissionRequest<DynamicObject>) -> Result<T, Reject> {
    decode(request.old_object.as_ref(), "oldObject")
}

fn decode<T: DeserializeOwned>(object: Option<&DynamicObject>, field: &str) -> Result<T, Reject> {
    let object = object.ok_or_else(|| Reject::Decode(format!("request.{field} is missing")))?;
    let value = serde_json::to_value(object).map_err(|e| Reject::Decode(e.to_string()))?;
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        Reject::Decode(format!("request.{field}: {path}: {}", e.inner()))
    })
}

/// The longest denial message, in bytes: enough for hundreds of field errors, while an object with 100,000
/// faulty entries cannot make the answer megabytes long. Longer messages end with how many errors were left out.
pub const MAX_MESSAGE: usize = 32 * 1024;

/// Warnings passed on per review; the API server shows each to the user, so a few are plenty.
pub(crate) const MAX_WARNINGS: usize = 32;

/// Allowed unless a finding is an error; errors become one message, warnings pass through (when `warn`).
/// Duplicate errors and warnings are reported once, and both are capped ([`MAX_MESSAGE`], [`MAX_WARNINGS`]).
fn verdict(response: AdmissionResponse, findings: &[FieldError], warn: bool) -> AdmissionResponse {
    let mut seen = std::collections::HashSet::new();
    let warnings: Vec<String> = findings
        .iter()
        .filter(|f| !f.is_error())
        .map(|f| f.message.clone())
        .filter(|m| seen.insert(m.clone()))
        .take(MAX_WARNINGS)
        .collect();
    let mut seen = std::collections::HashSet::new();
    let errors: Vec<String> = findings
        .iter()
        .filter(|f| f.is_error())
        .map(|f| {
            if f.path.is_empty() {
                f.message.clone()
            } else {
                format!("{}: {}", f.path, f.message)
            }
        })
        .filter(|m| seen.insert(m.clone()))
        .collect();
    let mut response = response;
    if warn && !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    if errors.is_empty() {
        return response;
    }
    let mut response = response.deny(aggregate(errors));
    response.result.code = 403;
    response.result.reason = "Forbidden".to_owned();
    response
}

/// Upstream's aggregate of field errors (one bare, several in brackets), cut at [`MAX_MESSAGE`] bytes with a
/// count of the errors left out.
fn aggregate(errors: Vec<String>) -> String {
    if errors.len() == 1 {
        let mut message = errors.into_iter().next().unwrap_or_default();
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(" ... (message truncated)");
        }
        return message;
    }
    let total = errors.len();
    let mut message = String::from("[");
    for (index, error) in errors.iter().enumerate() {
        if message.len() + error.len() + 2 > MAX_MESSAGE {
            if index > 0 {
                message.push_str(", ");
            }
            message.push_str(&format!("... and {} more errors", total - index));
            break;
        }
        if index > 0 {
            message.push_str(", ");
        }
        message.push_str(error);
    }
    message.push(']');
    message
}

/// One operation per runtime-patch time that stamping changed: `add` (which also replaces an existing
/// member) for a new time, `remove` where an unchanged patch's old time was empty.
fn time_patch(before: &TrainJob, after: &TrainJob) -> Patch {
    let operations = after
        .spec
        .runtime_patches
        .iter()
        .zip(&before.spec.runtime_patches)
        .enumerate()
        .filter(|(_, (stamped, original))| stamped.time != original.time)
        .filter_map(|(index, (stamped, _))| {
            let path = PointerBuf::from_tokens([
                "spec".to_owned(),
                "runtimePatches".to_owned(),
                index.to_string(),
                "time".to_owned(),
            ]);
            Some(match &stamped.time {
                Some(time) => PatchOperation::Add(AddOperation {
                    path,
                    value: serde_json::to_value(time).ok()?,
                }),
                None => PatchOperation::Remove(RemoveOperation { path }),
            })
        })
        .collect();
    Patch(operations)
}
