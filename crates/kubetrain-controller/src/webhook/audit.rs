//! What the validating webhooks record about each review: Kubernetes Events (TrainJob submissions, denials,
//! runtime changes) and, with an [`AuditLog`], structured audit lines ([`crate::audit`]).
//!
//! | Review | Event (reason, type) | Audit lines |
//! |---|---|---|
//! | TrainJob create, admitted | `TrainJobSubmitted`, Normal | `submit`, `admit`, `secret-reference` (when it references Secrets) |
//! | TrainJob create or update, denied | `TrainJobDenied`, Warning | `submit` (create), `deny` |
//! | TrainJob update, admitted | none | `admit` |
//! | runtime create or update, admitted | `RuntimeChanged`, Normal | `runtime-change`, `admit` |
//! | runtime create or update, denied | `RuntimeDenied`, Warning | `deny` |
//!
//! Events are published in the background (a review never waits for them) and never for dry runs; audit
//! lines of dry runs carry `details.dryRun: true`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kubetrain_api::constants::{API_VERSION, TRAINJOB_KIND};
use kubetrain_api::{RuntimeCatalog, TrainJob};
use serde_json::json;

use super::Route;
use crate::audit::{AuditAction, AuditLine, AuditLog, trainjob_secrets};
use crate::events::MAX_QUOTED_ERROR;

/// Reason of the Normal event about an admitted TrainJob create.
pub const TRAINJOB_SUBMITTED: &str = "TrainJobSubmitted";
/// Reason of the Warning event about a denied TrainJob create or update.
pub const TRAINJOB_DENIED: &str = "TrainJobDenied";
/// Reason of the Normal event about an admitted runtime create or update.
pub const RUNTIME_CHANGED: &str = "RuntimeChanged";
/// Reason of the Warning event about a denied runtime create or update.
pub const RUNTIME_DENIED: &str = "RuntimeDenied";
/// Action of the admission events.
pub(crate) const ACTION_ADMISSION: &str = "Admission";

/// The events and audit lines of the validating webhooks.
#[derive(Clone)]
pub struct AdmissionAudit {
    recorder: Option<Recorder>,
    log: Option<Arc<AuditLog>>,
    /// Whether every admitted TrainJob create gets a [`TRAINJOB_SUBMITTED`] event (else only those whose pods
    /// reference Secrets).
    submission_events: bool,
}

impl std::fmt::Debug for AdmissionAudit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdmissionAudit")
            .field("events", &self.recorder.is_some())
            .field("log", &self.log.is_some())
            .field("submission_events", &self.submission_events)
            .finish()
    }
}

/// One review as the audit sees it.
struct Reviewed<'a> {
    kind: &'a str,
    namespace: Option<&'a str>,
    name: &'a str,
    user: &'a str,
    create: bool,
    dry_run: bool,
}

impl AdmissionAudit {
    /// Events through `client` as `reporter`, and no audit lines.
    pub fn events(client: Client, reporter: Reporter) -> Self {
        Self {
            recorder: Some(Recorder::new(client, reporter)),
            log: None,
            submission_events: true,
        }
    }

    /// No events, and no audit lines until [`Self::with_log`].
    pub fn quiet() -> Self {
        Self {
            recorder: None,
            log: None,
            submission_events: true,
        }
    }

    /// No [`TRAINJOB_SUBMITTED`] event for an admitted TrainJob whose pods reference no Secret: one API write
    /// less per TrainJob (upstream makes none). Denials, runtime changes, Secret references and the audit lines
    /// are unchanged.
    pub fn without_submission_events(mut self) -> Self {
        self.submission_events = false;
        self
    }

    /// Also writes audit lines to `log`.
    pub fn with_log(mut self, log: Arc<AuditLog>) -> Self {
        self.log = Some(log);
        self
    }

    /// Records a validating review of `route` and its `response`. `catalog` (the runtimes the TrainJob review
    /// read) names the Secrets the runtime's pods reference.
    pub(super) fn record(
        &self,
        route: Route,
        request: &AdmissionRequest<DynamicObject>,
        response: &AdmissionResponse,
        catalog: Option<&RuntimeCatalog>,
    ) {
        if route.is_mutating()
            || !matches!(request.operation, Operation::Create | Operation::Update)
        {
            return;
        }
        let reviewed = Reviewed {
            kind: &request.kind.kind,
            namespace: request.namespace.as_deref().filter(|ns| !ns.is_empty()),
            name: &request.name,
            user: request.user_info.username.as_deref().unwrap_or_default(),
            create: request.operation == Operation::Create,
            dry_run: request.dry_run,
        };
        let message = (!response.allowed).then(|| response.result.message.clone());
        if route == Route::ValidateTrainJob {
            self.trainjob(&reviewed, request, message.as_deref(), catalog);
        } else {
            self.runtime(&reviewed, message.as_deref());
        }
    }

    fn trainjob(
        &self,
        reviewed: &Reviewed<'_>,
        request: &AdmissionRequest<DynamicObject>,
        denied: Option<&str>,
        catalog: Option<&RuntimeCatalog>,
    ) {
        if reviewed.create {
            self.line(reviewed, AuditAction::Submit, json!({}));
        }
        if let Some(message) = denied {
            self.line(reviewed, AuditAction::Deny, json!({"reasons": [message]}));
            self.event(
                reviewed,
                EventType::Warning,
                TRAINJOB_DENIED,
                format!("denied for {}: {message}", who(reviewed)),
            );
            return;
        }
        self.line(reviewed, AuditAction::Admit, json!({}));
        if !reviewed.create {
            return;
        }
        let job: Option<TrainJob> = request
            .object
            .as_ref()
            .and_then(|o| serde_json::to_value(o).ok())
            .and_then(|v| serde_json::from_value(v).ok());
        let secrets = job
            .map(|job| {
                let namespace = reviewed
                    .namespace
                    .unwrap_or(kubetrain_api::catalog::DEFAULT_NAMESPACE);
                let entry = catalog.and_then(|c| c.lookup(&job.spec.runtime_ref, namespace).ok());
                let runtime = entry.map(|e| (e.kind(), e.name(), e.spec()));
                trainjob_secrets(&job, runtime)
            })
            .unwrap_or_default();
        if !self.submission_events && secrets.is_empty() {
            return;
        }
        let mut note = format!("submitted by {}", who(reviewed));
        if !secrets.is_empty() {
            let mut names: Vec<&str> = secrets.iter().map(|s| s.secret.as_str()).collect();
            names.dedup();
            note.push_str(&format!(
                "; its pods reference Secrets {}",
                names.join(", ")
            ));
            self.line(
                reviewed,
                AuditAction::SecretReference,
                json!({"secrets": secrets}),
            );
        }
        self.event(reviewed, EventType::Normal, TRAINJOB_SUBMITTED, note);
    }

    fn runtime(&self, reviewed: &Reviewed<'_>, denied: Option<&str>) {
        let operation = if reviewed.create { "create" } else { "update" };
        if let Some(message) = denied {
            self.line(
                reviewed,
                AuditAction::Deny,
                json!({"operation": operation, "reasons": [message]}),
            );
            self.event(
                reviewed,
                EventType::Warning,
                RUNTIME_DENIED,
                format!("{operation} denied for {}: {message}", who(reviewed)),
            );
            return;
        }
        self.line(
            reviewed,
            AuditAction::RuntimeChange,
            json!({"operation": operation}),
        );
        self.line(reviewed, AuditAction::Admit, json!({}));
        self.event(
            reviewed,
            EventType::Normal,
            RUNTIME_CHANGED,
            format!("{operation}d by {}", who(reviewed)),
        );
    }

    fn line(&self, reviewed: &Reviewed<'_>, action: AuditAction, mut details: serde_json::Value) {
        let Some(log) = &self.log else { return };
        if reviewed.dry_run
            && let Some(map) = details.as_object_mut()
        {
            map.insert("dryRun".to_owned(), json!(true));
        }
        log.record(
            &AuditLine::new(
                action,
                reviewed.kind,
                reviewed.namespace,
                reviewed.name,
                reviewed.user,
            )
            .with_details(details),
        );
    }

    fn event(&self, reviewed: &Reviewed<'_>, type_: EventType, reason: &str, note: String) {
        let Some(recorder) = self.recorder.clone() else {
            return;
        };
        if reviewed.dry_run || reviewed.name.is_empty() {
            return;
        }
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(cut(note)),
            action: ACTION_ADMISSION.to_owned(),
            secondary: None,
        };
        let api_version =
            if reviewed.kind == TRAINJOB_KIND || reviewed.kind.ends_with("TrainingRuntime") {
                API_VERSION
            } else {
                ""
            };
        let reference = ObjectReference {
            api_version: Some(api_version.to_owned()),
            kind: Some(reviewed.kind.to_owned()),
            namespace: reviewed.namespace.map(str::to_owned),
            name: Some(reviewed.name.to_owned()),
            ..Default::default()
        };
        // In the background: a review never waits for the events API.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle
                .spawn(async move { crate::events::publish(&recorder, &event, &reference).await });
        }
    }
}

fn who(reviewed: &Reviewed<'_>) -> String {
    if reviewed.user.is_empty() {
        "an unknown user".to_owned()
    } else {
        reviewed.user.to_owned()
    }
}

/// An event note cut to [`MAX_QUOTED_ERROR`] characters (events are limited to 1 KiB).
fn cut(note: String) -> String {
    match note.char_indices().nth(MAX_QUOTED_ERROR) {
        None => note,
        Some((at, _)) => format!("{} ...", &note[..at]),
    }
}
