//! TrainJobStatus (upstream `plugins/trainjobstatus`, feature gate `TrainJobStatus`, alpha, off by default): tells
//! the trainer containers where to report progress. Every container of the trainer pod set gets the status URL,
//! the CA certificate path and the token path in its env, and a projected volume with a service-account token
//! (audience = the TrainJob's status endpoint) and the CA certificate. The ConfigMap `<job>-tls-config` holding
//! that certificate is built in `kubetrain-jobset`; the HTTPS status server itself belongs to the operator.
//!
//! ```
//! use kubetrain_merge::plugins::trainjobstatus::StatusServerAddress;
//! let server = StatusServerAddress::default();
//! assert_eq!(
//!     server.status_url("default", "mnist"),
//!     "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/mnist/status"
//! );
//! ```

use k8s_openapi::api::core::v1::{
    ConfigMapProjection, KeyToPath, ProjectedVolumeSource, ServiceAccountTokenProjection, Volume,
    VolumeMount, VolumeProjection,
};
use kubetrain_api::TrainJob;
use kubetrain_api::catalog::DEFAULT_NAMESPACE;
use kubetrain_api::constants::ANCESTOR_TRAINER;

use super::{EnforcePodSpec, Plugin};
use crate::error::MergeError;
use crate::info::Info;
use crate::upsert;

/// Env var with the URL the trainer POSTs its status to.
pub const ENV_STATUS_URL: &str = "KUBEFLOW_TRAINER_SERVER_URL";
/// Env var with the path of the status server's CA certificate.
pub const ENV_CA_CERT: &str = "KUBEFLOW_TRAINER_SERVER_CA_CERT";
/// Env var with the path of the service-account token.
pub const ENV_TOKEN: &str = "KUBEFLOW_TRAINER_SERVER_TOKEN";
/// Where the token and the CA certificate are mounted.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubeflow/trainer";
/// File (and ConfigMap key) of the CA certificate.
pub const CA_CERT_FILE: &str = "ca.crt";
/// File of the service-account token.
pub const TOKEN_FILE: &str = "token";
/// The projected volume's name.
pub const TOKEN_VOLUME: &str = "kubeflow-trainer-token";
/// Lifetime requested for the token.
pub const TOKEN_EXPIRY_SECONDS: i64 = 3600;
/// The audience prefix of the token (upstream `TokenAudiencePrefix`).
pub const TOKEN_AUDIENCE_PREFIX: &str = "trainer.kubeflow.org";

/// Where the operator's status server listens (upstream configuration `certManagement.webhookServiceName`, the
/// operator namespace and `statusServer.port`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusServerAddress {
    /// The Service in front of the operator (shared with the webhooks).
    pub service_name: String,
    /// The operator's namespace.
    pub operator_namespace: String,
    /// The status server's port.
    pub port: i32,
}

impl Default for StatusServerAddress {
    /// Upstream's defaults: `kubeflow-trainer-controller-manager` in `kubeflow-system`, port 10443.
    fn default() -> Self {
        Self {
            service_name: "kubeflow-trainer-controller-manager".to_owned(),
            operator_namespace: "kubeflow-system".to_owned(),
            port: 10443,
        }
    }
}

/// `/apis/trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status` (upstream `StatusUrl`).
pub fn status_path(namespace: &str, name: &str) -> String {
    format!("/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status")
}

/// The token audience, `trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status`.
pub fn token_audience(namespace: &str, name: &str) -> String {
    format!("{TOKEN_AUDIENCE_PREFIX}/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status")
}

/// `<job>-tls-config`: the ConfigMap with the CA certificate.
pub fn tls_config_map_name(job: &str) -> String {
    format!("{job}-tls-config")
}

/// The TrainJob's namespace; `default` for a TrainJob read from a file without one (the API server always
/// has one).
fn namespace(job: &TrainJob) -> &str {
    job.metadata
        .namespace
        .as_deref()
        .unwrap_or(DEFAULT_NAMESPACE)
}

impl StatusServerAddress {
    /// The full status URL of a TrainJob.
    pub fn status_url(&self, namespace: &str, name: &str) -> String {
        format!(
            "https://{}.{}.svc:{}{}",
            self.service_name,
            self.operator_namespace,
            self.port,
            status_path(namespace, name)
        )
    }
}

/// The TrainJobStatus plugin, configured with the status server's address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrainJobStatus {
    /// Where the status server listens.
    pub server: StatusServerAddress,
}

impl Plugin for TrainJobStatus {
    fn name(&self) -> &str {
        "TrainJobStatus"
    }

    fn pod_spec(&self) -> Option<&dyn EnforcePodSpec> {
        Some(self)
    }
}

fn token_volume(job: &TrainJob) -> Volume {
    let name = job.name();
    Volume {
        name: TOKEN_VOLUME.to_owned(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        audience: Some(token_audience(namespace(job), name)),
                        expiration_seconds: Some(TOKEN_EXPIRY_SECONDS),
                        path: TOKEN_FILE.to_owned(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: tls_config_map_name(name),
                        items: Some(vec![KeyToPath {
                            key: CA_CERT_FILE.to_owned(),
                            path: CA_CERT_FILE.to_owned(),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

impl EnforcePodSpec for TrainJobStatus {
    fn enforce_pod_spec(&self, info: &mut Info, job: &TrainJob) -> Result<(), MergeError> {
        let Some(index) = info.pod_set_by_ancestor(ANCESTOR_TRAINER) else {
            return Ok(());
        };
        let env = [
            upsert::env_value(
                ENV_STATUS_URL,
                self.server.status_url(namespace(job), job.name()),
            ),
            upsert::env_value(ENV_CA_CERT, format!("{MOUNT_PATH}/{CA_CERT_FILE}")),
            upsert::env_value(ENV_TOKEN, format!("{MOUNT_PATH}/{TOKEN_FILE}")),
        ];
        let mount = VolumeMount {
            name: TOKEN_VOLUME.to_owned(),
            mount_path: MOUNT_PATH.to_owned(),
            read_only: Some(true),
            ..Default::default()
        };
        let pod = info.pod_spec_mut(index);
        for c in &mut pod.containers {
            upsert::env(&mut c.env, &env);
            upsert::volume_mounts(&mut c.volume_mounts, std::slice::from_ref(&mount));
        }
        upsert::volumes(&mut pod.volumes, &[token_volume(job)]);
        Ok(())
    }
}
