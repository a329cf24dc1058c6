//! What a render takes besides the TrainJob and its runtime: what the caller observed in the cluster, and the
//! optional plugins.

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
    /// `ca.crt` of the operator's webhook certificate Secret, as the caller read it; copied into the ConfigMap
    /// `<job>-tls-config`. Empty means the Secret has none (an error, as upstream).
    pub ca_cert: String,
}
