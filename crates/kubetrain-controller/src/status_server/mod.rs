//! The TrainJob status server (upstream v2.3 `pkg/statusserver`, feature `TrainJobStatus`): training
//! processes POST their progress and metrics, and the operator writes them to `status.trainerStatus`.
//!
//! ```text
//! POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status   (HTTPS, port 10443)
//! Authorization: Bearer <projected ServiceAccount token, audience
//!                        trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status>
//! {"trainerStatus": {"progressPercentage": 40, "estimatedRemainingSeconds": 600,
//!                    "metrics": [{"name": "loss", "value": "0.25"}], "lastUpdatedTime": "2026-12-01T14:00:00Z"}}
//! ```
//!
//! The pod side (the URL, CA certificate and token in the trainer's env, the projected token volume and the
//! `<job>-tls-config` ConfigMap) is rendered by the TrainJobStatus plugin
//! ([`kubetrain_merge::plugins::trainjobstatus`]); the Python SDK's `update_trainjob_status` and
//! `kubetrain_client::progress` are the clients.
//!
//! | Step | Answer (a `metav1.Status` JSON body, as upstream) |
//! |---|---|
//! | `Content-Length` over [`MAX_BODY`] (64 KiB) | 413 `RequestEntityTooLarge` |
//! | not `POST` to the path above | 404 `NotFound` "Not found" |
//! | token missing, not issued by the cluster, expired, for another audience, or of a ServiceAccount of another namespace (a TokenReview, at most [`MAX_CONCURRENT_REVIEWS`] at once; answers cached briefly) | 403 `Forbidden` |
//! | the token could not be reviewed | 500 `InternalError` |
//! | body over 64 KiB while read | 413 |
//! | body not an `UpdateTrainJobStatusRequest` ([`kubetrain_api::status_update::parse`]) | 422 `Invalid` "Invalid payload" |
//! | no `trainerStatus` | 200, the request echoed, nothing written |
//! | the status breaks the CRD's rules ([`kubetrain_api::status_update::validate`]) or the API server refuses it | 422 `Invalid` with the API server's message |
//! | no such TrainJob | 404 "Train job not found" |
//! | more than [`MAX_JOBS`] TrainJobs writing at once | 429 `TooManyRequests`, `Retry-After: 1` |
//! | written | 200, the request echoed |
//!
//! The write is a JSON merge patch of `/status` with field manager [`FIELD_MANAGER`] (upstream's) that leaves
//! `trainerStatus` as upstream's server-side apply does ([`kubetrain_api::status_update::merge_patch`]). Writes are coalesced per
//! TrainJob: one in flight, the newest waiting, older waiting ones superseded. Every replica
//! serves (upstream's runnable needs no leader election): the Service spreads pods over replicas.

pub(crate) mod auth;
mod coalesce;
mod metrics;
mod server;

use std::time::Duration;

pub use auth::MAX_CONCURRENT_REVIEWS;
pub use metrics::{StatusMetrics, StatusPostOutcome};
pub use server::{StatusServer, StatusServerError, job_of};

/// Upstream's default port (`statusServer.port`).
pub const DEFAULT_PORT: u16 = 10443;
/// The largest request body, 64 KiB (upstream's `maxBodySize`).
pub const MAX_BODY: usize = 64 * 1024;
/// The field manager of the status write (upstream's).
pub const FIELD_MANAGER: &str = "trainer-status";
/// TrainJobs with a status write in flight at once, at most (further ones get 429).
pub const MAX_JOBS: usize = 4096;
/// Connections open at once: with [`MAX_BODY`], bodies hold at most 16 MiB. Past it a new connection
/// displaces the oldest one still in its request head; while all are being answered, further clients wait
/// in the listen backlog.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections open at once from one address: a trainer process posts one update at a time, so a pod
/// that opens more displaces its own oldest one still in its head, never another pod's.
pub const MAX_PER_SOURCE: usize = 32;
/// Time from a request's head to its answer (upstream's read and write timeouts are 10 s each).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// The RBAC the status server needs: `create` TokenReviews (authentication) and `patch` `trainjobs/status`
/// (the write). Verbs are sorted, so rules compare as data.
pub fn required_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    let rule = |group: &str, resource: &str, verb: &str| k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec![resource.to_owned()]),
        verbs: vec![verb.to_owned()],
        ..Default::default()
    };
    vec![
        rule("authentication.k8s.io", "tokenreviews", "create"),
        rule("trainer.kubeflow.org", "trainjobs/status", "patch"),
    ]
}
