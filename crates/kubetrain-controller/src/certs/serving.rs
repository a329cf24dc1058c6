//! What the [`Operator`](crate::Operator) serves beyond a certificate directory: built-in certificates,
//! upstream's `tls` options, the webhook host, and HTTPS (with optional authorization) for `/metrics`.

use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;

use super::{CertManagement, CertManager, READY_CHECK};
use crate::Leadership;
use crate::http::{Endpoints, Health};
use crate::metrics_auth::MetricsAuth;
use crate::webhook::tls::{ReloadingCert, TlsSettings, server_config_with};

/// The operator's serving options (held by the `Operator` builder).
#[derive(Clone, Debug, Default)]
pub(crate) struct Serving {
    /// Built-in certificates instead of a certificate directory.
    pub cert_management: Option<CertManagement>,
    /// The webhook server's address (all interfaces when `None`).
    pub webhook_host: Option<IpAddr>,
    /// TLS options of the webhook and metrics servers.
    pub tls: TlsSettings,
    /// `Some(auth)`: `/metrics` over HTTPS, with TokenReview/SubjectAccessReview when `auth`.
    pub secure_metrics: Option<bool>,
    /// The TrainJobStatus plugin's CA, kept current from the certificate Secret (built-in certificates
    /// without `--status-server-ca-file`).
    pub status_ca: Option<kubetrain_jobset::CaCert>,
}

impl Serving {
    /// Where the webhook server tries to listen, in order: the host, else all IPv6 then all IPv4 interfaces
    /// (hosts without IPv6).
    pub(crate) fn webhook_addrs(&self, port: u16) -> Vec<SocketAddr> {
        match self.webhook_host {
            Some(ip) => vec![SocketAddr::new(ip, port)],
            None => vec![
                SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)),
                SocketAddr::from(([0, 0, 0, 0], port)),
            ],
        }
    }

    /// The certificate management task, when built-in certificates are on: registers the
    /// [`READY_CHECK`] readiness check and keeps `cert` current until `stopped`.
    pub(crate) fn cert_manager(
        &self,
        client: &kube::Client,
        cert: &Arc<ReloadingCert>,
        provider: &Arc<CryptoProvider>,
        leadership: &Leadership,
        health: &Health,
        stopped: impl Future<Output = ()> + Send + 'static,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        let mut settings = self.cert_management.clone()?;
        if settings.namespace.is_empty() {
            client
                .default_namespace()
                .clone_into(&mut settings.namespace);
        }
        tracing::info!(
            secret = %format!("{}/{}", settings.namespace, settings.secret_name),
            name = %settings.server_name(),
            validity = ?settings.cert_validity,
            "built-in webhook certificates"
        );
        let ready = health.check(READY_CHECK);
        ready.set_not_ready("no certificate loaded yet");
        let mut manager = CertManager::new(
            settings,
            client.clone(),
            cert.clone(),
            provider.clone(),
            leadership.clone(),
        );
        if let Some(ca) = &self.status_ca {
            manager = manager.publish_ca(ca.clone());
        }
        Some(manager.run(ready, stopped))
    }

    /// The metrics endpoint with HTTPS (a self-signed certificate for `localhost` and 127.0.0.1, made at
    /// start as controller-runtime does without a metrics certificate directory) and the scrape filter.
    pub(crate) fn metrics_endpoint(
        &self,
        endpoints: Endpoints,
        client: &kube::Client,
        provider: Option<&Arc<CryptoProvider>>,
    ) -> Result<Endpoints, String> {
        let Some(auth) = self.secure_metrics else {
            return Ok(endpoints);
        };
        let provider = provider.ok_or(
            "metrics.secureServing needs a rustls crypto provider (kubetrain-controller's ring or aws-lc-rs feature)",
        )?;
        let pair = rcgen::generate_simple_self_signed(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
        ])
        .map_err(|e| format!("cannot make the metrics certificate: {e}"))?;
        let cert = Arc::new(ReloadingCert::in_memory(provider.clone()));
        cert.set_pem(
            pair.cert.pem().as_bytes(),
            pair.signing_key.serialize_pem().as_bytes(),
        )
        .map_err(|e| e.to_string())?;
        let config = server_config_with(cert, provider.clone(), &self.tls)
            .map_err(|e| format!("TLS configuration of the metrics server: {e}"))?;
        let endpoints = endpoints.with_tls(Arc::new(config));
        Ok(if auth {
            endpoints.with_auth(Arc::new(MetricsAuth::new(client.clone())))
        } else {
            endpoints
        })
    }
}
