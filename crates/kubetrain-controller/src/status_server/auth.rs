//! Who may update a TrainJob's status: the bearer of a ServiceAccount token issued by the cluster whose
//! audience is that TrainJob's (`trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status`, the
//! audience the TrainJobStatus plugin projects into the trainer pods) and whose ServiceAccount lives in the
//! TrainJob's namespace.
//!
//! Upstream verifies the JWT itself (OIDC discovery and JWKS of the API server's issuer) and checks the
//! `kubernetes.io.namespace` claim. kubetrain asks the API server instead, with a `TokenReview` that names
//! the audience: the same signature, expiry, issuer and audience checks, done by the component that issued
//! the token, plus what a JWKS check cannot see (a token bound to a pod that was deleted is refused). The
//! namespace comes from the reviewed user name, `system:serviceaccount:<namespace>:<name>`. Positive
//! verdicts are cached for [`CACHE_TTL`] (the API server caches its own token verdicts for about as long),
//! bounded to [`CACHE_ENTRIES`]; negative ones for [`DENIED_TTL`], bounded to [`DENIED_ENTRIES`] apart, so
//! that refused tokens cannot evict accepted ones. At most [`MAX_CONCURRENT_REVIEWS`] reviews run at once,
//! and a request that waited for one looks at the caches again: one token posted any number of times costs
//! at most that many reviews per TTL.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{Api, PostParams};
use tokio::sync::Semaphore;

use crate::verdicts::Verdicts;

/// How long an accepted token is trusted without asking the API server again (never past its `exp`).
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(10);
/// Accepted tokens remembered at most; past it the cache is emptied (every job re-reviews once).
pub(crate) const CACHE_ENTRIES: usize = 4096;
/// How long a refused token stays refused without asking the API server again. Port 10443 is reachable by
/// pods (see the NetworkPolicy in docs/operator.md), and without this every post of a forged or expired
/// token would make the operator send one TokenReview: 2,000 posts, 2,000 reviews in about a second, load
/// the API server takes from whoever can reach the port. A verdict on the same token and audience does not
/// change within seconds (forged, expired, wrong audience or namespace stay so); short, so that a token
/// refused for a passing reason (the API server not yet knowing its pod) is retried on a later post.
pub const DENIED_TTL: Duration = Duration::from_secs(10);
/// Refused tokens remembered at most; past it the expired ones are dropped, then all of them.
pub const DENIED_ENTRIES: usize = 4096;
/// TokenReviews in flight at most; further requests wait for one to finish.
pub const MAX_CONCURRENT_REVIEWS: usize = 16;

/// The audience a TrainJob's token must carry (upstream `statusserver.TokenAudience`).
pub fn audience(namespace: &str, name: &str) -> String {
    kubetrain_merge::plugins::trainjobstatus::token_audience(namespace, name)
}

/// The credential of an RFC 7235 `Bearer` header as upstream extracts it: exactly two whitespace-separated
/// words, the first `Bearer` in any case. `None` otherwise.
pub fn bearer(header: &str) -> Option<&str> {
    let mut words = header.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some(scheme), Some(token), None) if scheme.eq_ignore_ascii_case("Bearer") => Some(token),
        _ => None,
    }
}

/// The verdict on a request's token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthVerdict {
    /// The token may update this TrainJob's status.
    Allowed,
    /// It may not (upstream answers 403 `Forbidden`); the reason is for logs only.
    Denied(String),
}

/// The API server could not review the token (upstream answers 500).
#[derive(Debug, thiserror::Error)]
#[error("TokenReview failed: {0}")]
pub struct ReviewError(#[from] kube::Error);

/// Checks tokens with `TokenReview`s (RBAC: `authentication.k8s.io` `tokenreviews` `create`).
pub struct Authenticator {
    client: kube::Client,
    accepted: Verdicts<Key, AuthVerdict>,
    denied: Verdicts<Key, AuthVerdict>,
    reviews: Semaphore,
}

/// (audience, token).
type Key = (String, String);

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator").finish_non_exhaustive()
    }
}

impl Authenticator {
    /// An authenticator asking the API server behind `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            accepted: Verdicts::new(CACHE_ENTRIES),
            denied: Verdicts::new(DENIED_ENTRIES),
            reviews: Semaphore::new(MAX_CONCURRENT_REVIEWS),
        }
    }

    /// Whether the `Authorization` header (if any) may update `namespace/name`.
    pub async fn authorize(
        &self,
        header: Option<&str>,
        namespace: &str,
        name: &str,
    ) -> Result<AuthVerdict, ReviewError> {
        let Some(token) = header.and_then(bearer) else {
            return Ok(AuthVerdict::Denied("no bearer token".into()));
        };
        let audience = audience(namespace, name);
        let key = (audience.clone(), token.to_owned());
        if let Some(verdict) = self.cached(&key) {
            return Ok(verdict);
        }
        let _permit = self.reviews.acquire().await.ok();
        // Another request may have reviewed the same token while this one waited for a permit.
        if let Some(verdict) = self.cached(&key) {
            return Ok(verdict);
        }
        let verdict = self.review(token, &audience, namespace).await?;
        let now = Instant::now();
        match &verdict {
            AuthVerdict::Allowed => {
                let ttl = expires_in(token).map_or(CACHE_TTL, |left| left.min(CACHE_TTL));
                self.accepted.insert(key, verdict.clone(), now + ttl, now);
            }
            AuthVerdict::Denied(_) => {
                self.denied
                    .insert(key, verdict.clone(), now + DENIED_TTL, now)
            }
        }
        Ok(verdict)
    }

    fn cached(&self, key: &Key) -> Option<AuthVerdict> {
        let now = Instant::now();
        self.accepted
            .get(key, now)
            .or_else(|| self.denied.get(key, now))
    }

    async fn review(
        &self,
        token: &str,
        audience: &str,
        namespace: &str,
    ) -> Result<AuthVerdict, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: Some(vec![audience.to_owned()]),
            },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        Ok(judge(&reviewed, audience, namespace))
    }
}

/// The verdict on a reviewed token: authenticated, for `audience`, and a ServiceAccount of `namespace`.
pub(crate) fn judge(reviewed: &TokenReview, audience: &str, namespace: &str) -> AuthVerdict {
    let Some(status) = &reviewed.status else {
        return AuthVerdict::Denied("TokenReview without status".into());
    };
    if status.authenticated != Some(true) {
        let why = status.error.clone().unwrap_or_default();
        return AuthVerdict::Denied(format!("token not authenticated: {why}"));
    }
    // An audience-aware authenticator names the audiences it accepted; an empty list would mean the token
    // was checked without one, which is not enough here.
    if !status
        .audiences
        .as_ref()
        .is_some_and(|a| a.iter().any(|a| a == audience))
    {
        return AuthVerdict::Denied(format!("token is not for audience {audience}"));
    }
    let username = status
        .user
        .as_ref()
        .and_then(|u| u.username.as_deref())
        .unwrap_or_default();
    let token_namespace = username
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .map(|(ns, _)| ns);
    if token_namespace != Some(namespace) {
        return AuthVerdict::Denied(format!(
            "{username:?} is not a ServiceAccount of namespace {namespace}"
        ));
    }
    AuthVerdict::Allowed
}

/// Time left before the JWT's `exp` (read without verification: only used to shorten the cache of a token
/// the API server accepted).
fn expires_in(token: &str) -> Option<Duration> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = claims.get("exp")?.as_u64()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(exp.saturating_sub(now)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};

    #[test]
    fn bearer_takes_exactly_two_words_the_first_bearer_in_any_case() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("  bearer\tabc  "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer a b"), None);
        assert_eq!(bearer(""), None);
    }

    fn reviewed(authenticated: bool, audiences: &[&str], username: &str) -> TokenReview {
        TokenReview {
            status: Some(TokenReviewStatus {
                authenticated: Some(authenticated),
                audiences: Some(audiences.iter().map(|a| (*a).to_owned()).collect()),
                user: Some(UserInfo {
                    username: Some(username.to_owned()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn judging_reviews() {
        let aud = audience("team", "job");
        let sa = "system:serviceaccount:team:default";
        assert_eq!(
            judge(&reviewed(true, &[&aud], sa), &aud, "team"),
            AuthVerdict::Allowed
        );
        let denied = |r: TokenReview| matches!(judge(&r, &aud, "team"), AuthVerdict::Denied(_));
        assert!(denied(reviewed(false, &[&aud], sa)));
        assert!(denied(reviewed(true, &[], sa)));
        assert!(denied(reviewed(true, &["api"], sa)));
        assert!(denied(reviewed(
            true,
            &[&aud],
            "system:serviceaccount:other:default"
        )));
        assert!(denied(reviewed(
            true,
            &[&aud],
            "system:serviceaccount:team"
        )));
        assert!(denied(reviewed(true, &[&aud], "team")));
        assert!(denied(TokenReview::default()));
    }

    #[test]
    fn exp_bounds_the_cache() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let b64 = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let token = format!("h.{}.s", b64(serde_json::json!({"exp": now + 3})));
        let left = expires_in(&token).unwrap();
        assert!(
            left <= Duration::from_secs(3) && left >= Duration::from_secs(1),
            "{left:?}"
        );
        let past = format!("h.{}.s", b64(serde_json::json!({"exp": now - 10})));
        assert_eq!(expires_in(&past), Some(Duration::ZERO));
        assert_eq!(expires_in("opaque"), None);
    }
}
