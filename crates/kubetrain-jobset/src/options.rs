//! What a render takes besides the TrainJob and its runtime: what the caller observed in the cluster, and the
//! optional plugins.

use std::sync::{Arc, PoisonError, RwLock};

/// What the caller found in the cluster; everything `false`/`None` for a fresh TrainJob (and in the CLI).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// The JobSet named like the TrainJob, if it exists.
    pub jobset: Option<ObservedJobSet>,
    /// Whether the Secret `<job>-mpi-ssh-auth` exists (then no new key is generated).
    pub ssh_secret_exists: bool,
    /// Whether the PodGroup named like the TrainJob exists.
    pub pod_group_exists: bool,
}

/// The facts about an existing JobSet that rendering depends on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObservedJobSet {
    /// `spec.suspend` of the existing JobSet.
    pub suspended: bool,
}

/// Optional plugins of a render (upstream: feature gates and the operator configuration). The default enables
/// none, as upstream's defaults do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// The TrainJobStatus plugin (upstream gate `TrainJobStatus`, alpha, off by default).
    pub trainjob_status: Option<TrainJobStatusOptions>,
}

/// What the TrainJobStatus plugin needs: the status server's address and its CA certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainJobStatusOptions {
    /// Where the operator's status server listens.
    pub server: kubetrain_merge::plugins::trainjobstatus::StatusServerAddress,
    /// `ca.crt` of the operator's webhook certificate Secret, copied into the ConfigMap `<job>-tls-config` at
    /// each render. Empty means the Secret has none (an error, as upstream).
    pub ca_cert: CaCert,
}

/// The status server's CA certificate (PEM) as the TrainJobStatus plugin copies it into `<job>-tls-config`.
///
/// Clones share one value: whoever keeps it current (the operator's built-in certificate management, which
/// reads the webhook Secret as upstream's plugin does on every build) calls [`CaCert::set`], and every later
/// render copies the new certificate. A value made from a string stays that string.
///
/// ```
/// use kubetrain_jobset::CaCert;
///
/// let ca = CaCert::default();
/// let seen_by_renders = ca.clone();
/// assert!(seen_by_renders.is_empty());
/// ca.set("-----BEGIN CERTIFICATE-----\n...".to_owned());
/// assert!(seen_by_renders.get().starts_with("-----BEGIN CERTIFICATE-----"));
/// assert_eq!(CaCert::from("CA"), CaCert::from("CA".to_owned()));
/// ```
#[derive(Clone, Debug, Default)]
pub struct CaCert(Arc<RwLock<String>>);

impl CaCert {
    /// The certificate now.
    pub fn get(&self) -> String {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the certificate for every clone.
    pub fn set(&self, pem: String) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = pem;
    }

    /// Whether there is no certificate (yet).
    pub fn is_empty(&self) -> bool {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }
}

impl PartialEq for CaCert {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.get() == other.get()
    }
}

impl Eq for CaCert {}

impl From<String> for CaCert {
    fn from(pem: String) -> Self {
        Self(Arc::new(RwLock::new(pem)))
    }
}

impl From<&str> for CaCert {
    fn from(pem: &str) -> Self {
        Self::from(pem.to_owned())
    }
}
