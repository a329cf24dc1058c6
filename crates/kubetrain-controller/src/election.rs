//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection` does it, driving
//! the [`Leadership`] view that gates the controller's writes.
//!
//! Every replica runs the loop; one holds the Lease:
//! - a missing Lease is created, an expired one (renewTime + leaseDurationSeconds in the past, or no holder)
//!   is taken over with `leaseTransitions + 1`;
//! - the holder renews every retry period; writes carry the resourceVersion that was read, so two replicas
//!   racing for the same Lease cannot both win (the loser gets 409 Conflict and is not leader this round);
//! - a holder renews with one request: it writes over the Lease it last wrote (the API server's answer, with
//!   its resourceVersion), as client-go's fast path does, and reads the Lease only when that write conflicts
//!   (someone else wrote it) or fails;
//! - a leader that cannot renew for the renew deadline (shorter than the lease duration) steps down before
//!   any other replica may take over, so two leaders never overlap;
//! - on graceful shutdown the leader stops writing first, then clears the holder so a successor takes over
//!   at once instead of waiting for the Lease to expire.
//!
//! Expiry compares the Lease's `renewTime` with this replica's clock: keep node clocks in sync (NTP), as for
//! any Kubernetes control plane.
//!
//! ```
//! use std::time::Duration;
//! use kubetrain_controller::election::ElectionConfig;
//!
//! let config = ElectionConfig::new("kubeflow-system", "trainer.kubeflow.org", "pod-a")
//!     .lease_duration(Duration::from_secs(15))
//!     .renew_deadline(Duration::from_secs(10))
//!     .retry_period(Duration::from_secs(2));
//! assert!(config.validate().is_ok());
//! let inverted = config.clone().renew_deadline(Duration::from_secs(20));
//! assert!(inverted.validate().unwrap_err().to_string().contains("--leader-elect-renew-deadline"));
//! ```

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use kube::{Api, Client};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::leadership::Leadership;
use tokio::time::{Instant, MissedTickBehavior};

/// Lease name upstream's trainer controller manager uses.
pub const DEFAULT_LEASE_NAME: &str = "trainer.kubeflow.org";

/// Why leader election could not run or a round failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElectionError {
    /// The timings cannot give a safe hand-over.
    #[error("invalid leader election timings: {0}")]
    Config(String),
    /// The API server refused or failed a Lease request.
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        /// Namespace of the Lease.
        namespace: String,
        /// Name of the Lease.
        name: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

/// Which Lease to hold, as whom, and how fast to act.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionConfig {
    /// Namespace of the Lease (the operator's own namespace).
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity, written as `holderIdentity` (unique per process).
    pub identity: String,
    /// How long a Lease stays valid after its last renewal (default 15 s).
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renewal (default 10 s).
    pub renew_deadline: Duration,
    /// Time between two attempts to acquire or renew (default 2 s).
    pub retry_period: Duration,
}

impl ElectionConfig {
    /// A config with upstream's timings (15 s / 10 s / 2 s).
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Sets the lease duration.
    pub fn lease_duration(mut self, duration: Duration) -> Self {
        self.lease_duration = duration;
        self
    }

    /// Sets the renew deadline.
    pub fn renew_deadline(mut self, deadline: Duration) -> Self {
        self.renew_deadline = deadline;
        self
    }

    /// Sets the retry period.
    pub fn retry_period(mut self, period: Duration) -> Self {
        self.retry_period = period;
        self
    }

    /// Checks retry period < renew deadline < lease duration (client-go's rule) and a non-empty identity.
    pub fn validate(&self) -> Result<(), ElectionError> {
        let fail = |message: String| Err(ElectionError::Config(message));
        if self.identity.is_empty() {
            return fail("the identity is empty (set --leader-elect-identity or POD_NAME)".into());
        }
        if self.lease_duration.as_secs() < 1 {
            return fail("--leader-elect-lease-duration must be at least 1s".into());
        }
        if self.renew_deadline >= self.lease_duration {
            return fail(format!(
                "--leader-elect-renew-deadline ({:?}) must be shorter than --leader-elect-lease-duration ({:?})",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return fail(format!(
                "--leader-elect-retry-period ({:?}) must be positive and shorter than --leader-elect-renew-deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }
}

/// What one attempt to acquire or renew found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Round {
    /// The Lease was free, missing or expired and is ours now (with its new transition count).
    Acquired {
        /// `leaseTransitions` after the take-over.
        transitions: i32,
    },
    /// We held the Lease and renewed it.
    Renewed,
    /// Another replica holds a live Lease.
    HeldBy {
        /// Its `holderIdentity`.
        holder: String,
    },
    /// Someone else wrote the Lease between our read and our write; we are not leader this round.
    Conflict,
}

impl Round {
    /// Whether this replica holds the Lease after the round.
    pub fn is_leader(&self) -> bool {
        matches!(self, Round::Acquired { .. } | Round::Renewed)
    }
}

/// Runs rounds of Lease election against the API server.
pub struct LeaderElector {
    api: Api<Lease>,
    config: ElectionConfig,
    /// The Lease as our last successful write left it; renewals write over it without reading first.
    written: std::sync::Mutex<Option<Lease>>,
}

impl LeaderElector {
    /// An elector for the Lease in `config`, through `client`.
    pub fn new(client: Client, config: ElectionConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            written: std::sync::Mutex::new(None),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ElectionConfig {
        &self.config
    }

    /// The Lease as the API server has it now, or `None` when it does not exist.
    async fn read_lease(&self) -> Result<Option<Lease>, ElectionError> {
        self.api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.error(e))
    }

    /// One round: renew the Lease we hold with one write, or read it and then create, renew or take it over
    /// as the rules allow.
    pub async fn try_acquire_or_renew(&self) -> Result<Round, ElectionError> {
        if let Some(round) = self.renew_written().await {
            return Ok(round);
        }
        let now = Timestamp::now();
        let Some(mut lease) = self.read_lease().await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.held_spec(now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(stored) => {
                    self.remember(Some(stored));
                    Ok(Round::Acquired { transitions: 0 })
                }
                Err(error) if is_conflict(&error) => Ok(Round::Conflict),
                Err(error) => Err(self.error(error)),
            };
        };
        let spec = lease.spec.take().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let round = if holder.as_deref() == Some(self.config.identity.as_str()) {
            lease.spec = Some(self.renewed(spec, now));
            Round::Renewed
        } else if let Some(holder) = holder.filter(|_| !expired(&spec, now, self.lease_seconds())) {
            return Ok(Round::HeldBy { holder });
        } else {
            let transitions = spec.lease_transitions.unwrap_or(0).saturating_add(1);
            lease.spec = Some(self.held_spec(now, transitions));
            Round::Acquired { transitions }
        };
        // `replace` sends the resourceVersion we read: a concurrent writer makes this fail with 409.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(stored) => {
                self.remember(Some(stored));
                Ok(round)
            }
            Err(error) if is_conflict(&error) => Ok(Round::Conflict),
            Err(error) => Err(self.error(error)),
        }
    }

    /// The fast path: renew over the Lease our last write left, still ours and unexpired by our clock, in one
    /// request. `None` sends the round down the reading path: nothing remembered, or the write failed (a 409
    /// means another replica wrote the Lease since; its resourceVersion guards against overwriting it).
    async fn renew_written(&self) -> Option<Round> {
        let now = Timestamp::now();
        let mut lease = self.remember(None)?;
        let spec = lease.spec.take()?;
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str())
            || expired(&spec, now, self.lease_seconds())
        {
            return None;
        }
        lease.spec = Some(self.renewed(spec, now));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(stored) => {
                self.remember(Some(stored));
                Some(Round::Renewed)
            }
            Err(error) => {
                tracing::debug!(%error, "lease renewal over our last write failed; reading the lease");
                None
            }
        }
    }

    /// Stores `lease` as our last write and returns the one stored before (`None` forgets it).
    fn remember(&self, lease: Option<Lease>) -> Option<Lease> {
        let mut written = self
            .written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::replace(&mut *written, lease)
    }

    /// Clears the holder if this replica holds the Lease; returns whether it did.
    pub async fn release(&self) -> Result<bool, ElectionError> {
        let Some(mut lease) = self.read_lease().await? else {
            return Ok(false);
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(false);
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(false);
        }
        self.remember(None);
        // client-go's release: no holder, a one-second lease, renewed now.
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(error) if is_conflict(&error) => Ok(false),
            Err(error) => Err(self.error(error)),
        }
    }

    /// Runs rounds every retry period until `shutdown`, publishing leadership on `leader`; then, if leading,
    /// publishes `false` (writes stop) and releases the Lease.
    pub async fn run(
        self,
        leader: watch::Sender<bool>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ElectionError> {
        self.config.validate()?;
        let mut shutdown = std::pin::pin!(shutdown);
        let mut ticks = tokio::time::interval(self.config.retry_period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last_renewal: Option<Instant> = None;
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                _ = ticks.tick() => {}
            }
            let leading = *leader.borrow();
            // A round may not outlast the renew deadline, or a hung request would keep a stale leader.
            let round =
                tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew()).await;
            match round {
                Ok(Ok(round)) if round.is_leader() => {
                    last_renewal = Some(Instant::now());
                    if !leading {
                        tracing::info!(lease = %self.config.name, identity = %self.config.identity, ?round, "became leader");
                        leader.send_replace(true);
                    }
                }
                Ok(Ok(Round::HeldBy { holder })) => {
                    if leading {
                        tracing::warn!(%holder, "lease taken over by another replica; stepping down");
                        leader.send_replace(false);
                    } else {
                        tracing::debug!(%holder, "lease held by another replica");
                    }
                }
                other => {
                    match other {
                        Ok(Err(error)) => tracing::warn!(%error, "lease round failed"),
                        Err(_) => tracing::warn!("lease round timed out"),
                        _ => tracing::debug!("lease changed concurrently; retrying"),
                    }
                    let stale =
                        last_renewal.is_none_or(|at| at.elapsed() >= self.config.renew_deadline);
                    if leading && stale {
                        tracing::warn!(deadline = ?self.config.renew_deadline, "could not renew the lease in time; stepping down");
                        leader.send_replace(false);
                    }
                }
            }
        }
        if *leader.borrow() {
            leader.send_replace(false);
            match self.release().await {
                Ok(true) => tracing::info!(lease = %self.config.name, "released the lease"),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, "could not release the lease; it expires on its own")
                }
            }
        }
        Ok(())
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// `spec` renewed by its holder at `now`: holder, acquire time and transitions stay.
    fn renewed(&self, spec: LeaseSpec, now: Timestamp) -> LeaseSpec {
        LeaseSpec {
            renew_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(self.lease_seconds()),
            ..spec
        }
    }

    fn held_spec(&self, now: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.lease_seconds()),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    fn error(&self, source: kube::Error) -> ElectionError {
        ElectionError::Api {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }
}

/// Whether a Lease's last renewal is older than its duration (ours when it names none).
fn expired(spec: &LeaseSpec, now: Timestamp, default_seconds: i32) -> bool {
    let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
        return true;
    };
    let seconds = spec.lease_duration_seconds.unwrap_or(default_seconds);
    match renewed
        .0
        .checked_add(SignedDuration::from_secs(i64::from(seconds)))
    {
        Ok(valid_until) => valid_until < now,
        Err(_) => false,
    }
}

/// The RBAC the election needs, in the Lease's namespace (a namespaced Role): read, create, and renew or take
/// over with `update`. Verbs are sorted, so rules compare as data.
pub fn required_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    vec![k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".to_owned()]),
        resources: Some(vec!["leases".to_owned()]),
        verbs: ["create", "get", "update"].map(str::to_owned).to_vec(),
        ..Default::default()
    }]
}

/// Registers the gauge `kubetrain_leader`: 1 while this replica holds the Lease, else 0 (read from
/// `leadership` at each scrape). With election off it is always 1.
pub(crate) fn register_leader_gauge(registry: &mut Registry, leadership: Leadership) {
    registry.register_collector(Box::new(LeaderGauge(leadership)));
}

#[derive(Debug)]
struct LeaderGauge(Leadership);

impl Collector for LeaderGauge {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauge = ConstGauge::new(i64::from(self.0.is_leader()));
        let metric = encoder.encode_descriptor(
            "kubetrain_leader",
            "Whether this replica holds the leader Lease (1) or not (0)",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// A process-unique identity: the pod name (or host name) plus a per-process suffix, so that two processes
/// on one host never both believe they hold the Lease.
pub fn default_identity(pod_name: Option<&str>) -> String {
    let host = pod_name
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(|| "kubetrain-operator".to_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{host}_{:x}{nanos:08x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(renewed_secs_ago: i64, duration: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some("other".into()),
            renew_time: Some(MicroTime(
                Timestamp::now() - SignedDuration::from_secs(renewed_secs_ago),
            )),
            lease_duration_seconds: duration,
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn expiry_follows_the_leases_own_duration() {
        let now = Timestamp::now();
        assert!(!expired(&spec(5, Some(15)), now, 15));
        assert!(expired(&spec(20, Some(15)), now, 15));
        assert!(
            !expired(&spec(20, Some(60)), now, 15),
            "the lease's duration wins"
        );
        assert!(expired(&spec(20, None), now, 15), "ours when it names none");
        assert!(expired(&LeaseSpec::default(), now, 15), "never renewed");
    }

    #[test]
    fn timings_must_hand_over_safely() {
        let ok = ElectionConfig::new("ns", "l", "me");
        assert!(ok.validate().is_ok());
        assert!(ok.clone().identity_is("").validate().is_err());
        assert!(
            ok.clone()
                .retry_period(Duration::from_secs(10))
                .validate()
                .is_err()
        );
        assert!(ok.clone().retry_period(Duration::ZERO).validate().is_err());
        assert!(
            ok.clone()
                .lease_duration(Duration::from_millis(500))
                .validate()
                .is_err()
        );
    }

    #[test]
    fn the_leader_gauge_follows_leadership() {
        let (tx, leadership) = Leadership::channel();
        let mut registry = Registry::default();
        register_leader_gauge(&mut registry, leadership);
        let scrape = |registry: &Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
            text
        };
        assert!(scrape(&registry).contains("kubetrain_leader 0"));
        tx.send(true).unwrap();
        assert!(scrape(&registry).contains("kubetrain_leader 1"));
    }

    #[test]
    fn identities_start_with_the_pod_name() {
        let id = default_identity(Some("op-7d9f"));
        assert!(id.starts_with("op-7d9f_"), "{id}");
        assert!(!default_identity(None).is_empty());
    }

    impl ElectionConfig {
        fn identity_is(mut self, identity: &str) -> Self {
            self.identity = identity.to_owned();
            self
        }
    }
}
