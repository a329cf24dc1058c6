//! Upstream's controller configuration file, `config.trainer.kubeflow.org/v1alpha1` `Configuration`: the file
//! that Kubeflow Trainer's Helm chart renders into its ConfigMap and its kustomize base mounts, read by
//! `kubetrain-operator --config FILE` with upstream's defaults and meaning.
//!
//! Every field of v2.3.0's `configuration_types.go` is accepted, plus `metrics.auth` from upstream's main
//! branch. [`Configuration::parse`] rejects unknown fields and bad values, and reports every problem at once,
//! one line each, naming the field path (`webhook.port: must be between 1 and 65535, got 0`). Which fields
//! kubetrain honours, honours differently or does not support is in docs/operator.md ("Configuration file").
//!
//! ```
//! use kubetrain_controller::config::Configuration;
//!
//! let config = Configuration::parse(
//!     "apiVersion: config.trainer.kubeflow.org/v1alpha1\n\
//!      kind: Configuration\n\
//!      webhook: {port: 9444}\n\
//!      certManagement: {webhookSecretName: my-cert}\n",
//! )
//! .unwrap();
//! assert_eq!(config.webhook.port, 9444);
//! // Upstream's defaults fill the rest.
//! assert!(config.cert_management.enable);
//! assert_eq!(config.cert_management.webhook_secret_name, "my-cert");
//! assert_eq!(config.metrics.bind_address, ":8443");
//! assert!(config.metrics.secure_serving);
//!
//! let problems = Configuration::parse("kind: Configuration\nwebhook: {port: 0, hots: x}\n").unwrap_err();
//! assert_eq!(problems.len(), 3); // apiVersion missing, webhook.hots unknown, webhook.port out of range
//! assert!(problems.to_string().contains("webhook.port: must be between 1 and 65535"));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::Serialize;

mod parse;
#[cfg(test)]
mod tests;

/// `apiVersion` of the file.
pub const API_VERSION: &str = "config.trainer.kubeflow.org/v1alpha1";
/// `kind` of the file.
pub const KIND: &str = "Configuration";
/// Upstream's feature gates in v2.3.0 (`pkg/features`), plus the two every Kubernetes gate set has.
pub const FEATURE_GATES: &[&str] = &["TrainJobStatus", "AllAlpha", "AllBeta"];
/// The `TrainJob` key of `controller.groupKindConcurrency` (`GroupKind.String()`).
pub const TRAINJOB_GROUP_KIND: &str = "TrainJob.trainer.kubeflow.org";

/// The controller manager's configuration, defaults filled in as upstream's `SetDefaults_Configuration`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Configuration {
    /// The webhook server.
    pub webhook: WebhookConfig,
    /// Lease leader election; absent means off, as in upstream (controller-runtime's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leader_election: Option<LeaderElectionConfig>,
    /// The metrics endpoint.
    pub metrics: MetricsConfig,
    /// The health probe endpoint.
    pub health: HealthConfig,
    /// Per-controller settings.
    pub controller: ControllerConfig,
    /// Built-in webhook certificates.
    pub cert_management: CertManagementConfig,
    /// The Kubernetes client.
    pub client_connection: ClientConnectionConfig,
    /// The TrainJob status server.
    pub status_server: StatusServerConfig,
    /// Feature gates by name (only those upstream knows, see [`FEATURE_GATES`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub feature_gates: BTreeMap<String, bool>,
    /// TLS settings of the servers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
}

/// `webhook`: where the admission webhook server listens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct WebhookConfig {
    /// Port (default 9443).
    pub port: u16,
    /// Address to bind; empty for all interfaces (the default).
    pub host: String,
}

/// `leaderElection` (component-base's `LeaderElectionConfiguration`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LeaderElectionConfig {
    /// Whether to elect a leader (default false, as upstream when the field is absent).
    pub leader_elect: bool,
    /// Lock kind; only `leases` (the default) exists in kubetrain.
    pub resource_lock: String,
    /// Lease name (default `trainer.kubeflow.org`).
    pub resource_name: String,
    /// Lease namespace; empty for the operator's own.
    pub resource_namespace: String,
    /// Lease validity after its last renewal (default 15s).
    #[serde(with = "go_duration")]
    pub lease_duration: Duration,
    /// How long the leader keeps leading without renewing (default 10s).
    #[serde(with = "go_duration")]
    pub renew_deadline: Duration,
    /// Time between acquire/renew attempts (default 2s).
    #[serde(with = "go_duration")]
    pub retry_period: Duration,
}

/// `metrics`: the Prometheus endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct MetricsConfig {
    /// Go-style address (`:8443`, `127.0.0.1:8080`); `0` turns metrics off. Default `:8443`.
    pub bind_address: String,
    /// HTTPS (default true) with the built-in or webhook certificate.
    pub secure_serving: bool,
    /// TokenReview/SubjectAccessReview protection (upstream main's `metrics.auth`).
    pub auth: MetricsAuthConfig,
}

/// `metrics.auth`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct MetricsAuthConfig {
    /// Only tokens allowed `get` on the `/metrics` non-resource URL may scrape (default false; needs
    /// `secureServing`).
    pub enabled: bool,
}

/// `health`: the kubelet probes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct HealthConfig {
    /// Go-style address (default `:8081`); `0` or empty turns the probe endpoint off.
    pub health_probe_bind_address: String,
    /// Path of the readiness probe without its slash (default `readyz`).
    pub readiness_endpoint_name: String,
    /// Path of the liveness probe without its slash (default `healthz`).
    pub liveness_endpoint_name: String,
}

/// `controller`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ControllerConfig {
    /// Concurrent reconciles per `Kind.group` (e.g. [`TRAINJOB_GROUP_KIND`]); each at least 1.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub group_kind_concurrency: BTreeMap<String, u32>,
}

/// `certManagement`: built-in webhook certificates (as upstream's cert-controller).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct CertManagementConfig {
    /// Generate and rotate the certificates (default true); false reads them from the cert directory.
    pub enable: bool,
    /// Service in the certificate's DNS name `<service>.<namespace>.svc` (default
    /// `kubeflow-trainer-controller-manager`).
    pub webhook_service_name: String,
    /// Secret holding `ca.crt`, `ca.key`, `tls.crt` and `tls.key` (default `kubeflow-trainer-webhook-cert`).
    pub webhook_secret_name: String,
}

/// `clientConnection`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ClientConnectionConfig {
    /// Queries per second before client-side throttling (default 50).
    pub qps: f32,
    /// Burst above `qps` (default 100).
    pub burst: u32,
}

/// `statusServer`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct StatusServerConfig {
    /// Port (default 10443).
    pub port: u16,
    /// Queries per second of its client (default 5).
    pub qps: f32,
    /// Burst of its client (default 10).
    pub burst: u32,
}

/// `tls`: protocol settings of the HTTPS servers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct TlsConfig {
    /// Lowest TLS version: `1.0`, `1.1`, `1.2` or `1.3` (empty: the library's default).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub min_version: String,
    /// Allowed TLS 1.2 cipher suites by IANA name (empty: the library's defaults).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cipher_suites: Vec<String>,
    /// ALPN protocols (empty: `http/1.1` only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub next_protos: Vec<String>,
}

impl Default for Configuration {
    /// Upstream's defaults (an empty file).
    fn default() -> Self {
        Self {
            webhook: WebhookConfig {
                port: 9443,
                host: String::new(),
            },
            leader_election: None,
            metrics: MetricsConfig {
                bind_address: ":8443".into(),
                secure_serving: true,
                auth: MetricsAuthConfig { enabled: false },
            },
            health: HealthConfig {
                health_probe_bind_address: ":8081".into(),
                readiness_endpoint_name: "readyz".into(),
                liveness_endpoint_name: "healthz".into(),
            },
            controller: ControllerConfig::default(),
            cert_management: CertManagementConfig {
                enable: true,
                webhook_service_name: "kubeflow-trainer-controller-manager".into(),
                webhook_secret_name: "kubeflow-trainer-webhook-cert".into(),
            },
            client_connection: ClientConnectionConfig {
                qps: 50.0,
                burst: 100,
            },
            status_server: StatusServerConfig {
                port: 10443,
                qps: 5.0,
                burst: 10,
            },
            feature_gates: BTreeMap::new(),
            tls: None,
        }
    }
}

impl Default for LeaderElectionConfig {
    /// kubetrain's election defaults (upstream's chart and kustomize values), off until `leaderElect`.
    fn default() -> Self {
        Self {
            leader_elect: false,
            resource_lock: "leases".into(),
            resource_name: crate::election::DEFAULT_LEASE_NAME.into(),
            resource_namespace: String::new(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Every problem found in a configuration file, one per line, each naming its field path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<String>);

impl ConfigErrors {
    /// How many problems.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none (never for an error returned by [`Configuration::parse`]).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl Configuration {
    /// Parses a `Configuration` document (YAML or JSON), fills in upstream's defaults and checks every value.
    ///
    /// # Errors
    ///
    /// [`ConfigErrors`]: the YAML error, or every unknown field and bad value, one line each.
    pub fn parse(text: &str) -> Result<Self, ConfigErrors> {
        parse::parse(text)
    }

    /// Reads and parses the file at `path` (see [`Self::parse`]); problems are prefixed with the path.
    ///
    /// # Errors
    ///
    /// An unreadable file, or the problems [`Self::parse`] finds.
    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigErrors> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigErrors(vec![format!(
                "{}: cannot read the configuration file: {e}",
                path.display()
            )])
        })?;
        Self::parse(&text)
    }

    /// The effective settings as a `Configuration` YAML document (every default written out).
    pub fn to_yaml(&self) -> String {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Document<'a> {
            api_version: &'static str,
            kind: &'static str,
            #[serde(flatten)]
            config: &'a Configuration,
        }
        let document = Document {
            api_version: API_VERSION,
            kind: KIND,
            config: self,
        };
        serde_saphyr::to_string(&document).unwrap_or_else(|e| format!("# cannot write YAML: {e}\n"))
    }

    /// The metrics address; `None` when `metrics.bindAddress` is `0` (metrics off).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        parse_bind_address(&self.metrics.bind_address)
            .ok()
            .flatten()
    }

    /// The probe address; `None` when `health.healthProbeBindAddress` is `0` or empty (probes off).
    pub fn health_addr(&self) -> Option<SocketAddr> {
        parse_bind_address(&self.health.health_probe_bind_address)
            .ok()
            .flatten()
    }

    /// The webhook server's address: `webhook.host` (all interfaces when empty) and `webhook.port`.
    pub fn webhook_addr(&self) -> SocketAddr {
        let ip = parse_host(&self.webhook.host)
            .ok()
            .flatten()
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        SocketAddr::new(ip, self.webhook.port)
    }

    /// Whether `leaderElection.leaderElect` is true.
    pub fn leader_elect(&self) -> bool {
        self.leader_election
            .as_ref()
            .is_some_and(|l| l.leader_elect)
    }

    /// Whether a feature gate is on: its own setting, else `AllAlpha` (every upstream gate is alpha and off
    /// by default).
    pub fn feature_enabled(&self, gate: &str) -> bool {
        self.feature_gates
            .get(gate)
            .or_else(|| self.feature_gates.get("AllAlpha"))
            .copied()
            .unwrap_or(false)
    }

    /// `controller.groupKindConcurrency` for TrainJobs, when set.
    pub fn trainjob_concurrency(&self) -> Option<u32> {
        self.controller
            .group_kind_concurrency
            .get(TRAINJOB_GROUP_KIND)
            .copied()
    }
}

/// A Go `net.Listen` address: `:8443` (all interfaces), `host:port` with an IP or `localhost`; `0` (and
/// the empty string) mean off (`Ok(None)`).
///
/// # Errors
///
/// A message saying what is wrong with the address.
pub(crate) fn parse_bind_address(text: &str) -> Result<Option<SocketAddr>, String> {
    if text.is_empty() || text == "0" {
        return Ok(None);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!(
            "{text:?} is not an address: use \":PORT\", \"HOST:PORT\" or \"0\" (off)"
        ));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{text:?}: the port must be a number from 0 to 65535"))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip = parse_host(host)
        .map_err(|e| format!("{text:?}: {e}"))?
        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    Ok(Some(SocketAddr::new(ip, port)))
}

/// An IP address or `localhost`; empty means all interfaces (`None`).
fn parse_host(host: &str) -> Result<Option<IpAddr>, String> {
    if host.is_empty() {
        return Ok(None);
    }
    if host == "localhost" {
        return Ok(Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }
    host.parse::<IpAddr>().map(Some).map_err(|_| {
        format!("host {host:?} must be an IP address, \"localhost\" or empty (all interfaces)")
    })
}

/// Go's `time.ParseDuration` (`1h30m`, `15s`, `500ms`, `1.5s`); negative durations are refused.
///
/// # Errors
///
/// A message naming the bad part.
pub(crate) fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (examples: 15s, 1m30s, 500ms)");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    if rest.is_empty() || rest.starts_with('-') {
        return Err(bad());
    }
    rest = rest.strip_prefix('+').unwrap_or(rest);
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let (number, after) = rest.split_at(number_end);
        let value: f64 = number.parse().map_err(|_| bad())?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = next;
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// Writes a duration the way Go prints one (`15s`, `1m30s`, `500ms`).
pub(crate) fn format_go_duration(duration: Duration) -> String {
    let total_ms = duration.as_millis();
    if total_ms == 0 {
        return "0s".into();
    }
    if total_ms < 1000 {
        return format!("{total_ms}ms");
    }
    let secs = duration.as_secs();
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let millis = duration.subsec_millis();
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if millis > 0 {
        let fraction = format!("{millis:03}");
        out.push_str(&format!("{s}.{}s", fraction.trim_end_matches('0')));
    } else {
        out.push_str(&format!("{s}s"));
    }
    out
}

mod go_duration {
    use std::time::Duration;

    pub(super) fn serialize<S: serde::Serializer>(
        duration: &Duration,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_go_duration(*duration))
    }
}
