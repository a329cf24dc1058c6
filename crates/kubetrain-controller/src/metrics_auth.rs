//! Who may scrape `/metrics` (upstream's `metrics.auth.enabled`): controller-runtime's
//! `WithAuthenticationAndAuthorization` filter. The bearer token must pass a `TokenReview` (else 401
//! `Unauthorized`), and a `SubjectAccessReview` for the reviewed user must allow the request's verb
//! (the method in lower case, `get`) on its non-resource URL (`/metrics`) (else 403 `Authorization denied for
//! user …`); the API server failing either review is a 500. A Prometheus needs a ClusterRole such as
//! `kubetrain-metrics-reader` in examples/manifests/deploy (`nonResourceURLs: [/metrics]`, `verbs: [get]`).
//!
//! The bearer header is read as the status server reads it (one `bearer` function for both).
//! Verdicts are cached for [`CACHE_TTL`] (controller-runtime caches for minutes; short here so that a
//! removed binding takes effect quickly), at most [`CACHE_ENTRIES`], and at most [`MAX_CONCURRENT_REVIEWS`]
//! reviews run at once. RBAC of the operator: `create` on `tokenreviews` and `subjectaccessreviews`
//! ([`required_rules`]).
//!
//! ```
//! use kubetrain_controller::metrics_auth::ScrapeVerdict;
//!
//! assert_eq!(ScrapeVerdict::Unauthorized.status(), 401);
//! assert_eq!(ScrapeVerdict::Forbidden("system:anonymous".into()).status(), 403);
//! ```

use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use tokio::sync::Semaphore;

use crate::status_server::auth::bearer;
use crate::verdicts::Verdicts;

/// How long a verdict on a (token, verb, path) is reused.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// Verdicts remembered at most; past it the expired ones go, then all.
pub const CACHE_ENTRIES: usize = 4096;
/// Reviews in flight at most.
pub const MAX_CONCURRENT_REVIEWS: usize = 8;

/// The answer to one scrape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScrapeVerdict {
    /// Serve it.
    Allowed,
    /// No bearer token, or the API server did not authenticate it (401).
    Unauthorized,
    /// Authenticated as this user, who may not `get` the path (403).
    Forbidden(String),
    /// A review could not be made (500).
    Failed(String),
}

impl ScrapeVerdict {
    /// The HTTP status it answers with.
    pub fn status(&self) -> u16 {
        match self {
            ScrapeVerdict::Allowed => 200,
            ScrapeVerdict::Unauthorized => 401,
            ScrapeVerdict::Forbidden(_) => 403,
            ScrapeVerdict::Failed(_) => 500,
        }
    }

    /// The response body controller-runtime's filter writes.
    pub fn message(&self) -> String {
        match self {
            ScrapeVerdict::Allowed => "ok".into(),
            ScrapeVerdict::Unauthorized => "Unauthorized".into(),
            ScrapeVerdict::Forbidden(user) => format!("Authorization denied for user {user}"),
            ScrapeVerdict::Failed(why) => why.clone(),
        }
    }
}

type Key = (String, String, String);

/// TokenReview + SubjectAccessReview for scrapes, with a short verdict cache.
pub struct MetricsAuth {
    client: kube::Client,
    cache: Verdicts<Key, ScrapeVerdict>,
    reviews: Semaphore,
}

impl std::fmt::Debug for MetricsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsAuth").finish_non_exhaustive()
    }
}

impl MetricsAuth {
    /// Reviews through the API server behind `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            cache: Verdicts::new(CACHE_ENTRIES),
            reviews: Semaphore::new(MAX_CONCURRENT_REVIEWS),
        }
    }

    /// The verdict on a request with `authorization` (the header, if any), `method` and `path`.
    pub async fn check(
        &self,
        authorization: Option<&str>,
        method: &str,
        path: &str,
    ) -> ScrapeVerdict {
        let Some(token) = authorization.and_then(bearer) else {
            return ScrapeVerdict::Unauthorized;
        };
        let verb = method.to_ascii_lowercase();
        let key = (token.to_owned(), verb.clone(), path.to_owned());
        if let Some(verdict) = self.cached(&key) {
            return verdict;
        }
        let _permit = self.reviews.acquire().await.ok();
        if let Some(verdict) = self.cached(&key) {
            return verdict;
        }
        let verdict = self.review(token, &verb, path).await;
        if !matches!(verdict, ScrapeVerdict::Failed(_)) {
            self.remember(key, verdict.clone());
        }
        verdict
    }

    fn cached(&self, key: &Key) -> Option<ScrapeVerdict> {
        self.cache.get(key, Instant::now())
    }

    fn remember(&self, key: Key, verdict: ScrapeVerdict) {
        let now = Instant::now();
        self.cache.insert(key, verdict, now + CACHE_TTL, now);
    }

    async fn review(&self, token: &str, verb: &str, path: &str) -> ScrapeVerdict {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: None,
            },
            ..Default::default()
        };
        let reviewed = match Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
        {
            Ok(reviewed) => reviewed,
            Err(error) => return ScrapeVerdict::Failed(format!("Authentication failed: {error}")),
        };
        let Some(status) = reviewed.status.filter(|s| s.authenticated == Some(true)) else {
            return ScrapeVerdict::Unauthorized;
        };
        let user = status.user.unwrap_or_default();
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_owned()),
                    verb: Some(verb.to_owned()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
        {
            Ok(review) if review.status.as_ref().is_some_and(|s| s.allowed) => {
                ScrapeVerdict::Allowed
            }
            Ok(_) => ScrapeVerdict::Forbidden(name),
            Err(error) => {
                ScrapeVerdict::Failed(format!("Authorization for user {name} failed: {error}"))
            }
        }
    }
}

/// The RBAC the metrics filter needs: `create` on `tokenreviews` and `subjectaccessreviews`.
pub fn required_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    let rule = |group: &str, resource: &str| k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec![resource.to_owned()]),
        verbs: vec!["create".to_owned()],
        ..Default::default()
    };
    vec![
        rule("authentication.k8s.io", "tokenreviews"),
        rule("authorization.k8s.io", "subjectaccessreviews"),
    ]
}

#[cfg(test)]
mod tests {
    use kubetrain_test_support::{FakeApiServer, FakeToken};
    use serde_json::json;

    use super::*;

    /// SubjectAccessReviews allow `get /metrics` for `reader` only.
    fn server() -> FakeApiServer {
        let server = FakeApiServer::start();
        for (token, user) in [("good", "reader"), ("norbac", "stranger")] {
            server.add_token(
                token,
                FakeToken {
                    username: format!("system:serviceaccount:monitoring:{user}"),
                    audiences: vec!["https://kubernetes.default.svc".into()],
                    expired: false,
                },
            );
        }
        server.intercept(|request| {
            if !request.uri.contains("subjectaccessreviews") {
                return None;
            }
            let spec = &request.body["spec"];
            let allowed = spec["user"] == "system:serviceaccount:monitoring:reader"
                && spec["nonResourceAttributes"]["path"] == "/metrics"
                && spec["nonResourceAttributes"]["verb"] == "get";
            let mut review = request.body.clone();
            review["status"] = json!({"allowed": allowed});
            Some((201, review))
        });
        server
    }

    #[tokio::test]
    async fn controller_runtimes_filter_semantics() {
        let server = server();
        let auth = MetricsAuth::new(server.client());
        assert_eq!(
            auth.check(None, "GET", "/metrics").await,
            ScrapeVerdict::Unauthorized
        );
        assert_eq!(
            auth.check(Some("Basic abc"), "GET", "/metrics").await,
            ScrapeVerdict::Unauthorized
        );
        assert_eq!(
            auth.check(Some("Bearer forged"), "GET", "/metrics").await,
            ScrapeVerdict::Unauthorized
        );
        let denied = auth.check(Some("Bearer norbac"), "GET", "/metrics").await;
        assert_eq!(
            denied,
            ScrapeVerdict::Forbidden("system:serviceaccount:monitoring:stranger".into())
        );
        assert_eq!(
            denied.message(),
            "Authorization denied for user system:serviceaccount:monitoring:stranger"
        );
        assert_eq!(
            auth.check(Some("Bearer good"), "GET", "/metrics").await,
            ScrapeVerdict::Allowed
        );
        // The verb is the method in lower case: a POST is a `post`, which RBAC does not allow here.
        assert!(matches!(
            auth.check(Some("Bearer good"), "POST", "/metrics").await,
            ScrapeVerdict::Forbidden(_)
        ));
    }

    #[tokio::test]
    async fn verdicts_are_cached_briefly() {
        let server = server();
        let auth = MetricsAuth::new(server.client());
        for _ in 0..5 {
            assert_eq!(
                auth.check(Some("Bearer good"), "GET", "/metrics").await,
                ScrapeVerdict::Allowed
            );
        }
        assert_eq!(
            server.stats().token_reviews,
            1,
            "one review for five scrapes"
        );
    }
}
