//! Built-in webhook certificates (upstream's `certManagement.enable: true`, done there by
//! open-policy-agent's cert-controller): a CA and a serving certificate kept in a Secret, the CA injected into
//! the webhook configurations, the serving certificate hot-swapped into the webhook server, renewed before
//! it expires.
//!
//! - **Secret** `<webhookSecretName>` in the operator's namespace, with cert-controller's keys `ca.crt`,
//!   `ca.key`, `tls.crt`, `tls.key`. It is created when missing (upstream's chart ships it empty).
//! - **Certificates**: the CA `kubeflow-trainer-ca` (organization `kubeflow-trainer`, 10 years), and a
//!   serving certificate for `<webhookServiceName>.<namespace>.svc` (with the `.cluster.local` and short
//!   forms, 1 year), both ECDSA P-256 and back-dated an hour, as cert-controller dates them.
//! - **Renewal**: a certificate is renewed once less than [`CertManagement::lookahead`] of it is left (90
//!   days for the defaults, as cert-controller's lookahead; a third of the validity for short ones),
//!   checked every [`CertManagement::check_every`] (12 h, cert-controller's period) or 10 s, whichever is
//!   shorter (the bundles are re-injected if something removed them). A new CA is first
//!   *added* to the webhook configurations' `caBundle` (the old one stays until it expires), and only after
//!   [`CertManagement::settle`] written to the Secret with a serving certificate it signs: the API server
//!   trusts both while replicas switch, so no admission call fails.
//! - **Injection**: every webhook of the ValidatingWebhookConfiguration `validator.trainer.kubeflow.org`
//!   and the MutatingWebhookConfiguration `defaulter.trainer.kubeflow.org` gets the bundle in
//!   `clientConfig.caBundle` (cert-controller's `Webhooks` list in upstream; Kubeflow Trainer's CRDs have
//!   no conversion webhook, so no CRD is patched).
//! - **One writer**: only the replica holding the leader Lease writes the Secret and the configurations;
//!   every replica reads the Secret and serves its pair. The webhook server hot-reloads the pair
//!   ([`ReloadingCert::set_pem`]) with no restart.
//! - **Expiry**: the gauge `kubetrain_webhook_certificate_expiry_timestamp_seconds` reports the served
//!   certificate's `notAfter` (in every certificate mode, the certificate directory's too).
//! - **Readiness**: the `webhook-certificate` check of `/readyz` fails, with the reason, until this replica
//!   serves the Secret's current certificate and the configurations trust its CA.
//!
//! Short validities for tests: [`VALIDITY_ENV`] (`KUBETRAIN_CERT_VALIDITY=2m`) sets the serving
//! certificate's validity, the CA's to three times it, and the checks to a twelfth of it.
//!
//! ```
//! use std::time::Duration;
//! use kubetrain_controller::certs::CertManagement;
//!
//! let certs = CertManagement::new("kubeflow-system", "kubeflow-trainer-webhook-cert", "kubeflow-trainer-controller-manager")
//!     .validity(Duration::from_secs(120));
//! assert_eq!(certs.server_name(), "kubeflow-trainer-controller-manager.kubeflow-system.svc");
//! assert_eq!(certs.lookahead(Duration::from_secs(120)), Duration::from_secs(40));
//! assert_eq!(certs.check_every, Duration::from_secs(10));
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use rustls::crypto::CryptoProvider;

use crate::Leadership;
use crate::http::ReadyFlag;
use crate::webhook::tls::ReloadingCert;

mod expiry;
mod issue;
mod serving;
#[cfg(test)]
mod tests;

pub(crate) use expiry::register_expiry_gauge;
pub(crate) use serving::Serving;

/// Upstream's ValidatingWebhookConfiguration (`cmd/trainer-controller-manager`).
pub(crate) const VALIDATING_WEBHOOK_CONFIGURATION: &str = "validator.trainer.kubeflow.org";
/// Upstream's MutatingWebhookConfiguration.
pub(crate) const MUTATING_WEBHOOK_CONFIGURATION: &str = "defaulter.trainer.kubeflow.org";
/// The environment variable that shortens the certificates' validity (for tests), e.g. `2m` or `90s`.
pub const VALIDITY_ENV: &str = "KUBETRAIN_CERT_VALIDITY";
/// The environment variable listing extra names (DNS names or IP addresses, comma-separated) for the
/// serving certificate: a webhook reached by URL rather than through its Service (the e2e harness).
pub const EXTRA_NAMES_ENV: &str = "KUBETRAIN_CERT_EXTRA_NAMES";
/// The readiness check's name in `/readyz`.
pub(crate) const READY_CHECK: &str = "webhook-certificate";

/// cert-controller's defaults.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
const CERT_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
const LOOKAHEAD: Duration = Duration::from_secs(90 * 24 * 3600);
const CHECK_EVERY: Duration = Duration::from_secs(12 * 3600);
/// While not ready (no Secret yet, a write refused): try again this often.
const RETRY: Duration = Duration::from_secs(2);
/// While ready: look again this often (three GETs), so that a bundle wiped by a re-applied webhook
/// manifest, or a Secret the leader renewed, is caught within seconds.
const RESYNC: Duration = Duration::from_secs(10);

/// What the built-in certificate management manages, and how often.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CertManagement {
    /// The Secret's namespace (the operator's); empty for the client's default namespace.
    pub namespace: String,
    /// The Secret (`certManagement.webhookSecretName`).
    pub secret_name: String,
    /// The Service in the certificate's names (`certManagement.webhookServiceName`).
    pub service_name: String,
    /// The ValidatingWebhookConfiguration to inject the CA into.
    pub validating_configuration: String,
    /// The MutatingWebhookConfiguration to inject the CA into.
    pub mutating_configuration: String,
    /// The CA's validity (10 years).
    pub ca_validity: Duration,
    /// The serving certificate's validity (1 year).
    pub cert_validity: Duration,
    /// How often the certificates are checked (12 h).
    pub check_every: Duration,
    /// Wait between adding a new CA to the bundles and serving a certificate it signs (2 s), for the API
    /// server to see the new bundle.
    pub settle: Duration,
    /// Extra names of the serving certificate (see [`EXTRA_NAMES_ENV`]).
    pub extra_names: Vec<String>,
}

impl CertManagement {
    /// Upstream's certificate management of `secret_name` in `namespace`, for `service_name`.
    pub fn new(namespace: &str, secret_name: &str, service_name: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            secret_name: secret_name.to_owned(),
            service_name: service_name.to_owned(),
            validating_configuration: VALIDATING_WEBHOOK_CONFIGURATION.to_owned(),
            mutating_configuration: MUTATING_WEBHOOK_CONFIGURATION.to_owned(),
            ca_validity: CA_VALIDITY,
            cert_validity: CERT_VALIDITY,
            check_every: CHECK_EVERY,
            settle: RETRY,
            extra_names: Vec::new(),
        }
    }

    /// Serving certificates valid for `validity`, the CA for three times it, checked every twelfth of it
    /// (at least every second).
    pub fn validity(mut self, validity: Duration) -> Self {
        self.cert_validity = validity;
        self.ca_validity = validity * 3;
        self.check_every = (validity / 12).max(Duration::from_secs(1)).min(CHECK_EVERY);
        self
    }

    /// [`Self::validity`] from [`VALIDITY_ENV`] and extra names from [`EXTRA_NAMES_ENV`], when set.
    ///
    /// # Errors
    ///
    /// A message when [`VALIDITY_ENV`] is not a duration (`90s`, `2m`, `1h`).
    pub fn from_env(mut self) -> Result<Self, String> {
        if let Ok(text) = std::env::var(VALIDITY_ENV) {
            let validity = crate::config::parse_go_duration(&text)
                .map_err(|e| format!("{VALIDITY_ENV}: {e}"))?;
            if validity < Duration::from_secs(3) {
                return Err(format!("{VALIDITY_ENV}: at least 3s, got {text}"));
            }
            self = self.validity(validity);
        }
        if let Ok(names) = std::env::var(EXTRA_NAMES_ENV) {
            self.extra_names = names
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect();
        }
        Ok(self)
    }

    /// Time before expiry at which a certificate of `validity` is renewed: a third of it, at most 90 days.
    pub fn lookahead(&self, validity: Duration) -> Duration {
        (validity / 3).min(LOOKAHEAD)
    }

    /// The name the API server checks: `<service>.<namespace>.svc`.
    pub fn server_name(&self) -> String {
        format!("{}.{}.svc", self.service_name, self.namespace)
    }

    /// Every name of the serving certificate.
    pub fn names(&self) -> Vec<String> {
        let mut names = vec![
            self.server_name(),
            format!("{}.cluster.local", self.server_name()),
            format!("{}.{}", self.service_name, self.namespace),
            self.service_name.clone(),
        ];
        names.extend(self.extra_names.iter().cloned());
        names
    }
}

/// The RBAC of the certificate management in the operator's namespace (a Role): the Secret.
pub fn namespaced_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    vec![rule("", &["secrets"], &["get", "list", "update", "watch"])]
}

/// The cluster-wide RBAC of the certificate management: the webhook configurations it injects the CA into.
pub fn required_rules() -> Vec<k8s_openapi::api::rbac::v1::PolicyRule> {
    vec![rule(
        "admissionregistration.k8s.io",
        &[
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations",
        ],
        &["get", "list", "patch", "update", "watch"],
    )]
}

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> k8s_openapi::api::rbac::v1::PolicyRule {
    k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..Default::default()
    }
}

/// Why a pass of the certificate management did not end ready (the `/readyz` reason).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertsError {
    /// A call to the API server failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// Not ready yet, for the reason given.
    #[error("{0}")]
    Waiting(String),
    /// A certificate could not be made.
    #[error("cannot make a certificate: {0}")]
    Issue(#[from] rcgen::Error),
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> CertsError {
    let what = what.into();
    move |source| CertsError::Api { what, source }
}

/// The certificate management of one replica.
pub(crate) struct CertManager {
    settings: CertManagement,
    client: kube::Client,
    cert: Arc<ReloadingCert>,
    provider: Arc<CryptoProvider>,
    leadership: Leadership,
    /// Where the Secret's CA goes for the TrainJobStatus plugin, when it reads the CA from us.
    status_ca: Option<kubetrain_jobset::CaCert>,
}

impl std::fmt::Debug for CertManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertManager")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The Secret's four entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Stored {
    ca: Option<issue::Pair>,
    serving: Option<issue::Pair>,
}

impl CertManager {
    /// Manages `settings` (an empty namespace already replaced by the caller), serving through `cert`
    /// (an in-memory [`ReloadingCert`]); writes only while `leadership` says leader.
    pub fn new(
        settings: CertManagement,
        client: kube::Client,
        cert: Arc<ReloadingCert>,
        provider: Arc<CryptoProvider>,
        leadership: Leadership,
    ) -> Self {
        Self {
            settings,
            client,
            cert,
            provider,
            leadership,
            status_ca: None,
        }
    }

    /// Also publishes the Secret's `ca.crt` into `ca` after every pass, on every replica: the CA the
    /// TrainJobStatus plugin copies into each TrainJob's `<job>-tls-config` (upstream's plugin reads the same
    /// Secret at every build), so a renewed CA reaches the next reconcile without a restart.
    #[must_use]
    pub fn publish_ca(mut self, ca: kubetrain_jobset::CaCert) -> Self {
        self.status_ca = Some(ca);
        self
    }

    /// Keeps the certificates current until `shutdown`, flipping `ready` (with the reason when not ready).
    pub async fn run(self, ready: ReadyFlag, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut leadership = self.leadership.clone();
        loop {
            let wait = match self.sync().await {
                Ok(()) => {
                    ready.set(true);
                    self.settings.check_every.min(RESYNC)
                }
                Err(error) => {
                    tracing::info!(%error, "webhook certificate not ready");
                    ready.set_not_ready(&error.to_string());
                    RETRY.min(self.settings.check_every)
                }
            };
            let was_leader = leadership.is_leader();
            // A new leader checks at once (a follower waits for the period).
            let elected = async {
                if was_leader || !leadership.acquired().await {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(wait) => {}
                () = elected => {}
            }
        }
    }

    /// One pass: as the leader, renew what needs renewing and inject the CA; on every replica, serve the
    /// Secret's pair. `Ok` when this replica serves the current certificate and the configurations trust it.
    ///
    /// # Errors
    ///
    /// [`CertsError`]: what is missing or failed (the readiness reason).
    pub async fn sync(&self) -> Result<(), CertsError> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), &self.settings.namespace);
        let name = &self.settings.secret_name;
        let mut secret = match secrets.get_opt(name).await.map_err(api(format!(
            "reading Secret {}/{name}",
            self.settings.namespace
        )))? {
            Some(secret) => secret,
            None if self.leadership.is_leader() => self.create_secret(&secrets).await?,
            None => {
                return Err(CertsError::Waiting(format!(
                    "waiting for the leader to create Secret {}/{name}",
                    self.settings.namespace
                )));
            }
        };
        if self.leadership.is_leader() {
            secret = self.renew_if_needed(&secrets, secret).await?;
        }
        let stored = read_secret(&secret);
        let (Some(ca), Some(serving)) = (&stored.ca, &stored.serving) else {
            return Err(CertsError::Waiting(format!(
                "Secret {}/{name} holds no certificate yet (the leader writes it)",
                self.settings.namespace
            )));
        };
        if self.leadership.is_leader() {
            self.inject(&ca.cert).await?;
        }
        if let Some(status_ca) = &self.status_ca {
            status_ca.set(ca.cert.clone());
        }
        self.serve(serving)?;
        self.check_trusted(&ca.cert).await
    }

    async fn create_secret(&self, secrets: &Api<Secret>) -> Result<Secret, CertsError> {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(self.settings.secret_name.clone()),
                namespace: Some(self.settings.namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        tracing::info!(secret = %self.settings.secret_name, "creating the webhook certificate Secret");
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .map_err(api(format!(
                "creating Secret {}/{}",
                self.settings.namespace, self.settings.secret_name
            )))
    }

    /// The leader's renewal: a new CA (announced in the bundles first) or a new serving certificate.
    async fn renew_if_needed(
        &self,
        secrets: &Api<Secret>,
        secret: Secret,
    ) -> Result<Secret, CertsError> {
        let now = SystemTime::now();
        let settings = &self.settings;
        let stored = read_secret(&secret);
        let ca_until = now + settings.lookahead(settings.ca_validity);
        let cert_until = now + settings.lookahead(settings.cert_validity);
        let (ca, new_ca) = match stored.ca.filter(|ca| issue::ca_usable(ca, ca_until)) {
            Some(ca) => (ca, false),
            None => {
                tracing::info!("issuing a new webhook CA");
                let ca = issue::new_ca(settings.ca_validity)?;
                // Trusted before anything signed by it is served.
                self.inject(&ca.cert).await?;
                tokio::time::sleep(settings.settle).await;
                (ca, true)
            }
        };
        let serving_ok = !new_ca
            && stored.serving.as_ref().is_some_and(|s| {
                issue::serving_valid(
                    &ca.cert,
                    s,
                    &settings.server_name(),
                    cert_until,
                    &self.provider,
                ) && self.names_cover(s)
            });
        if serving_ok {
            return Ok(secret);
        }
        tracing::info!(names = ?settings.names(), "issuing a new webhook serving certificate");
        let serving = issue::new_serving(&ca, &settings.names(), settings.cert_validity)?;
        let mut updated = secret;
        let data = updated.data.get_or_insert_with(BTreeMap::new);
        for (key, value) in [
            ("ca.crt", &ca.cert),
            ("ca.key", &ca.key),
            ("tls.crt", &serving.cert),
            ("tls.key", &serving.key),
        ] {
            data.insert(key.to_owned(), ByteString(value.as_bytes().to_vec()));
        }
        // A replace with the read resourceVersion: a concurrent writer makes this fail, not clobber.
        secrets
            .replace(&settings.secret_name, &PostParams::default(), &updated)
            .await
            .map_err(api(format!(
                "writing Secret {}/{}",
                settings.namespace, settings.secret_name
            )))
    }

    /// Whether the serving certificate carries every configured name (extra names may have changed).
    fn names_cover(&self, serving: &issue::Pair) -> bool {
        let names = issue::serving_names(serving);
        self.settings
            .names()
            .iter()
            .all(|name| names.contains(name))
    }

    /// Writes the bundle (`ca` plus our CAs already there that are still valid) into every webhook of both
    /// configurations, where it differs. Both are read before either is written, so a missing one changes
    /// nothing.
    async fn inject(&self, ca: &str) -> Result<(), CertsError> {
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let (v_name, m_name) = (
            &self.settings.validating_configuration,
            &self.settings.mutating_configuration,
        );
        let mut v_config = validating.get(v_name).await.map_err(api(format!(
            "reading ValidatingWebhookConfiguration {v_name}"
        )))?;
        let mut m_config = mutating.get(m_name).await.map_err(api(format!(
            "reading MutatingWebhookConfiguration {m_name}"
        )))?;
        let mut changed = false;
        for webhook in v_config.webhooks.iter_mut().flatten() {
            changed |= set_bundle(&mut webhook.client_config.ca_bundle, ca);
        }
        if changed {
            tracing::info!(configuration = %v_name, "injecting the webhook CA");
            validating
                .replace(v_name, &PostParams::default(), &v_config)
                .await
                .map_err(api(format!(
                    "updating ValidatingWebhookConfiguration {v_name}"
                )))?;
        }
        let mut changed = false;
        for webhook in m_config.webhooks.iter_mut().flatten() {
            changed |= set_bundle(&mut webhook.client_config.ca_bundle, ca);
        }
        if changed {
            tracing::info!(configuration = %m_name, "injecting the webhook CA");
            mutating
                .replace(m_name, &PostParams::default(), &m_config)
                .await
                .map_err(api(format!(
                    "updating MutatingWebhookConfiguration {m_name}"
                )))?;
        }
        Ok(())
    }

    /// Serves `serving` unless it is already served.
    fn serve(&self, serving: &issue::Pair) -> Result<(), CertsError> {
        let wanted = issue::leaf_der(&serving.cert);
        if wanted.is_some() && self.cert.serving_leaf() == wanted {
            return Ok(());
        }
        self.cert
            .set_pem(serving.cert.as_bytes(), serving.key.as_bytes())
            .map_err(|e| {
                CertsError::Waiting(format!(
                    "Secret {}/{} holds an unusable certificate: {e}",
                    self.settings.namespace, self.settings.secret_name
                ))
            })?;
        tracing::info!("serving the webhook certificate from the Secret");
        Ok(())
    }

    /// Ready when both configurations' every webhook trusts `ca`.
    async fn check_trusted(&self, ca: &str) -> Result<(), CertsError> {
        let Some(ca_der) = issue::leaf_der(ca) else {
            return Err(CertsError::Waiting("the Secret's ca.crt is not PEM".into()));
        };
        let trusts = |bundle: &Option<ByteString>| {
            bundle.as_ref().is_some_and(|b| {
                rustls::pki_types::CertificateDer::pem_slice_iter(&b.0)
                    .filter_map(Result::ok)
                    .any(|der| der.as_ref() == ca_der.as_slice())
            })
        };
        use rustls::pki_types::pem::PemObject as _;
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(self.client.clone());
        let name = &self.settings.validating_configuration;
        let config = validating.get(name).await.map_err(api(format!(
            "reading ValidatingWebhookConfiguration {name}"
        )))?;
        if !config
            .webhooks
            .iter()
            .flatten()
            .all(|w| trusts(&w.client_config.ca_bundle))
        {
            return Err(CertsError::Waiting(format!(
                "ValidatingWebhookConfiguration {name} does not trust the current CA yet (the leader injects it)"
            )));
        }
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(self.client.clone());
        let name = &self.settings.mutating_configuration;
        let config = mutating
            .get(name)
            .await
            .map_err(api(format!("reading MutatingWebhookConfiguration {name}")))?;
        if !config
            .webhooks
            .iter()
            .flatten()
            .all(|w| trusts(&w.client_config.ca_bundle))
        {
            return Err(CertsError::Waiting(format!(
                "MutatingWebhookConfiguration {name} does not trust the current CA yet (the leader injects it)"
            )));
        }
        Ok(())
    }
}

/// Sets `bundle` to `ca` plus the still-valid CAs of ours it already holds; whether it changed.
fn set_bundle(bundle: &mut Option<ByteString>, ca: &str) -> bool {
    let existing = bundle
        .as_ref()
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .unwrap_or_default();
    let mut blocks = vec![
        issue::leaf_der(ca)
            .map(|d| issue::pem_block(&d))
            .unwrap_or_default(),
    ];
    for old in issue::our_valid_cas(&existing, SystemTime::now()) {
        if !blocks.contains(&old) {
            blocks.push(old);
        }
    }
    let wanted = blocks.concat();
    if existing == wanted {
        return false;
    }
    *bundle = Some(ByteString(wanted.into_bytes()));
    true
}

fn read_secret(secret: &Secret) -> Stored {
    let get = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .filter(|v| !v.trim().is_empty())
    };
    let pair = |cert: &str, key: &str| {
        Some(issue::Pair {
            cert: get(cert)?,
            key: get(key)?,
        })
    };
    Stored {
        ca: pair("ca.crt", "ca.key"),
        serving: pair("tls.crt", "tls.key"),
    }
}
