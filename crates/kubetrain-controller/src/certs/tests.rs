use std::time::{Duration, SystemTime};

use kubetrain_test_support::FakeApiServer;
use serde_json::{Value, json};

use super::*;
use rustls::pki_types::ServerName;

const NS: &str = "kubeflow-system";
const SECRET: &str = "kubeflow-trainer-webhook-cert";

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn webhook_configs(server: &FakeApiServer) {
    for (kind, name, hooks) in [
        (
            "ValidatingWebhookConfiguration",
            VALIDATING_WEBHOOK_CONFIGURATION,
            vec![
                "validator.trainjob.trainer.kubeflow.org",
                "validator.trainingruntime.trainer.kubeflow.org",
            ],
        ),
        (
            "MutatingWebhookConfiguration",
            MUTATING_WEBHOOK_CONFIGURATION,
            vec!["defaulter.trainjob.trainer.kubeflow.org"],
        ),
    ] {
        let webhooks: Vec<Value> = hooks
            .iter()
            .map(|hook| {
                json!({"name": hook, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                       "clientConfig": {"service": {"name": "kubeflow-trainer-controller-manager", "namespace": NS}}})
            })
            .collect();
        server.insert(json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
            "metadata": {"name": name, "resourceVersion": "1"}, "webhooks": webhooks,
        }));
    }
}

fn settings(validity: Duration) -> CertManagement {
    let mut settings =
        CertManagement::new(NS, SECRET, "kubeflow-trainer-controller-manager").validity(validity);
    settings.settle = Duration::ZERO;
    settings.extra_names = vec!["127.0.0.1".into()];
    settings
}

fn manager(
    server: &FakeApiServer,
    settings: CertManagement,
    leader: bool,
) -> (CertManager, Arc<ReloadingCert>) {
    let cert = Arc::new(ReloadingCert::in_memory(provider()));
    let leadership = if leader {
        Leadership::always()
    } else {
        Leadership::channel().1
    };
    let manager = CertManager::new(
        settings,
        server.client(),
        cert.clone(),
        provider(),
        leadership,
    );
    (manager, cert)
}

fn secret(server: &FakeApiServer) -> Stored {
    let value = server.get("v1", "secrets", NS, SECRET).expect("the Secret");
    read_secret(&serde_json::from_value(value).unwrap())
}

/// Each webhook's `caBundle`, decoded.
fn bundles(server: &FakeApiServer) -> Vec<String> {
    let mut out = Vec::new();
    for (plural, name) in [
        (
            "validatingwebhookconfigurations",
            VALIDATING_WEBHOOK_CONFIGURATION,
        ),
        (
            "mutatingwebhookconfigurations",
            MUTATING_WEBHOOK_CONFIGURATION,
        ),
    ] {
        let config = server
            .get("admissionregistration.k8s.io/v1", plural, "", name)
            .unwrap();
        for hook in config["webhooks"].as_array().unwrap() {
            use base64::Engine as _;
            let encoded = hook["clientConfig"]["caBundle"]
                .as_str()
                .unwrap_or_default();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .unwrap();
            out.push(String::from_utf8(bytes).unwrap());
        }
    }
    out
}

fn ca_der(stored: &Stored) -> Vec<u8> {
    issue::leaf_der(&stored.ca.as_ref().unwrap().cert).unwrap()
}

fn bundle_holds(bundle: &str, der: &[u8]) -> bool {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::CertificateDer::pem_slice_iter(bundle.as_bytes())
        .filter_map(Result::ok)
        .any(|c| c.as_ref() == der)
}

#[tokio::test]
async fn the_leader_creates_the_secret_injects_the_ca_and_serves_the_pair() {
    let server = FakeApiServer::start();
    webhook_configs(&server);
    let (manager, cert) = manager(&server, settings(Duration::from_secs(3600)), true);
    assert!(
        cert.current().is_none(),
        "nothing served before the first pass"
    );

    manager.sync().await.unwrap();

    let stored = secret(&server);
    let (ca, serving) = (stored.ca.clone().unwrap(), stored.serving.clone().unwrap());
    let name = manager.settings.server_name();
    let in_a_minute = SystemTime::now() + Duration::from_secs(60);
    assert!(issue::serving_valid(
        &ca.cert,
        &serving,
        &name,
        in_a_minute,
        &provider()
    ));
    assert!(issue::serving_valid(
        &ca.cert,
        &serving,
        "127.0.0.1",
        in_a_minute,
        &provider()
    ));
    let names = issue::serving_names(&serving);
    assert!(
        names.contains(&"kubeflow-trainer-controller-manager.kubeflow-system.svc".to_owned()),
        "{names:?}"
    );
    let bundles = bundles(&server);
    assert_eq!(bundles.len(), 3, "every webhook of both configurations");
    assert!(bundles.iter().all(|b| bundle_holds(b, &ca_der(&stored))));
    assert_eq!(cert.serving_leaf(), issue::leaf_der(&serving.cert));

    // A second pass changes nothing.
    server.record_requests();
    manager.sync().await.unwrap();
    let writes: Vec<_> = server
        .take_requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
    assert_eq!(secret(&server), stored);
}

#[tokio::test]
async fn a_follower_waits_for_the_leader_reads_the_secret_and_never_writes() {
    let server = FakeApiServer::start();
    webhook_configs(&server);
    server.record_requests();
    let (follower, follower_cert) = manager(&server, settings(Duration::from_secs(3600)), false);
    let status_ca = kubetrain_jobset::CaCert::default();
    let follower = follower.publish_ca(status_ca.clone());
    let error = follower.sync().await.unwrap_err();
    assert!(status_ca.is_empty(), "no CA before the Secret holds one");
    assert!(
        error
            .to_string()
            .contains("waiting for the leader to create Secret"),
        "{error}"
    );

    let (leader, leader_cert) = manager(&server, settings(Duration::from_secs(3600)), true);
    leader.sync().await.unwrap();
    server.take_requests();
    follower.sync().await.unwrap();
    assert_eq!(follower_cert.serving_leaf(), leader_cert.serving_leaf());
    assert_eq!(
        status_ca.get(),
        secret(&server).ca.unwrap().cert,
        "the TrainJobStatus plugin's CA is the Secret's"
    );
    let writes: Vec<_> = server
        .take_requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "a follower only reads: {writes:?}");
}

#[tokio::test]
async fn a_serving_certificate_near_its_end_is_renewed_with_the_same_ca() {
    let server = FakeApiServer::start();
    webhook_configs(&server);
    let (short, cert) = manager(&server, settings(Duration::from_secs(60)), true);
    short.sync().await.unwrap();
    let before = secret(&server);

    // With a year's validity the renewal window is 90 days: the 60 s certificate is inside it. The CA
    // setting stays (180 s, a 60 s window), so the CA is kept.
    let mut yearly = settings(Duration::from_secs(365 * 24 * 3600));
    yearly.ca_validity = Duration::from_secs(180);
    let (renewing_same_ca, _) = manager(&server, yearly, true);
    renewing_same_ca.sync().await.unwrap();
    let after = secret(&server);
    assert_eq!(after.ca, before.ca, "the CA stays");
    assert_ne!(after.serving, before.serving, "a new serving certificate");
    // The first replica's next pass serves the new pair without a restart.
    short.sync().await.unwrap();
    assert_eq!(
        cert.serving_leaf(),
        issue::leaf_der(&after.serving.as_ref().unwrap().cert)
    );
}

#[tokio::test]
async fn a_new_ca_is_trusted_alongside_the_old_one_before_it_signs_anything_served() {
    let server = FakeApiServer::start();
    webhook_configs(&server);
    let (short, _) = manager(&server, settings(Duration::from_secs(60)), true);
    short.sync().await.unwrap();
    let old = secret(&server);

    // A 10-year CA setting: the 180 s CA is inside its 90-day renewal window.
    let (renewing, cert) = manager(
        &server,
        settings(Duration::from_secs(10 * 365 * 24 * 3600)),
        true,
    );
    server.record_requests();
    renewing.sync().await.unwrap();
    let new = secret(&server);
    assert_ne!(ca_der(&new), ca_der(&old));
    for bundle in bundles(&server) {
        assert!(bundle_holds(&bundle, &ca_der(&new)), "new CA trusted");
        assert!(
            bundle_holds(&bundle, &ca_der(&old)),
            "old CA kept while certificates it signed may be served"
        );
    }
    // Order: the configurations were updated before the Secret got the new CA.
    let writes: Vec<String> = server
        .take_requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .map(|r| r.uri)
        .collect();
    let secret_write = writes.iter().position(|u| u.contains("/secrets/")).unwrap();
    let first_injection = writes
        .iter()
        .position(|u| u.contains("webhookconfigurations"))
        .unwrap();
    assert!(first_injection < secret_write, "{writes:?}");
    assert_eq!(
        cert.serving_leaf(),
        issue::leaf_der(&new.serving.as_ref().unwrap().cert)
    );
}

#[tokio::test]
async fn readiness_names_what_is_missing() {
    let server = FakeApiServer::start();
    // No webhook configurations at all.
    let (leader, _) = manager(&server, settings(Duration::from_secs(3600)), true);
    let error = leader.sync().await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("ValidatingWebhookConfiguration validator.trainer.kubeflow.org"),
        "{error}"
    );
}

#[test]
fn the_bundle_keeps_our_valid_cas_and_drops_the_rest() {
    let old = issue::new_ca(Duration::from_secs(3600)).unwrap();
    let new = issue::new_ca(Duration::from_secs(3600)).unwrap();
    let foreign = rcgen::generate_simple_self_signed(vec!["other".to_owned()]).unwrap();
    let mut bundle = Some(ByteString(
        format!("{}{}", old.cert, foreign.cert.pem()).into_bytes(),
    ));
    assert!(set_bundle(&mut bundle, &new.cert));
    let text = String::from_utf8(bundle.clone().unwrap().0).unwrap();
    assert!(bundle_holds(&text, &issue::leaf_der(&new.cert).unwrap()));
    assert!(bundle_holds(&text, &issue::leaf_der(&old.cert).unwrap()));
    assert!(!bundle_holds(&text, foreign.cert.der()));
    assert!(
        !set_bundle(&mut bundle, &new.cert),
        "no change the second time"
    );
}

#[test]
fn validity_scales_the_lookahead_and_the_checks() {
    let s = CertManagement::new(NS, SECRET, "svc");
    assert_eq!(
        s.lookahead(s.cert_validity),
        Duration::from_secs(90 * 24 * 3600)
    );
    assert_eq!(s.check_every, Duration::from_secs(12 * 3600));
    let short = s.validity(Duration::from_secs(60));
    assert_eq!(short.ca_validity, Duration::from_secs(180));
    assert_eq!(
        short.lookahead(short.cert_validity),
        Duration::from_secs(20)
    );
    assert_eq!(short.check_every, Duration::from_secs(5));
}

#[test]
fn the_rbac_is_upstreams() {
    let verbs = |rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>| rules[0].verbs.join(",");
    assert_eq!(verbs(namespaced_rules()), "get,list,update,watch");
    assert_eq!(verbs(required_rules()), "get,list,patch,update,watch");
}

/// Accepts any server certificate (the metrics server's is self-signed, made at start).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// GET `path` over HTTPS with an optional bearer token: (status, body).
async fn https_get(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    use http_body_util::BodyExt as _;
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::get(path).header("host", "localhost");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = sender
        .send_request(
            request
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn metrics_are_served_over_https_to_authorized_scrapers_only() {
    use kubetrain_test_support::FakeToken;
    let server = FakeApiServer::start();
    server.add_token(
        "scraper",
        FakeToken {
            username: "system:serviceaccount:monitoring:prometheus".into(),
            audiences: vec!["api".into()],
            expired: false,
        },
    );
    server.intercept(|request| {
        request.uri.contains("subjectaccessreviews").then(|| {
            let mut review = request.body.clone();
            let allowed = review["spec"]["user"] == "system:serviceaccount:monitoring:prometheus";
            review["status"] = json!({"allowed": allowed});
            (201, review)
        })
    });
    let serving = Serving {
        secure_metrics: Some(true),
        ..Serving::default()
    };
    let health = crate::http::Health::new();
    let endpoints = crate::http::Endpoints::bind(
        "127.0.0.1:0".parse().unwrap(),
        Arc::new(prometheus_client::registry::Registry::default()),
        health,
    )
    .await
    .unwrap();
    let endpoints = serving
        .metrics_endpoint(endpoints, &server.client(), Some(&provider()))
        .unwrap();
    let addr = endpoints.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(endpoints.serve(async {
        let _ = stopped.await;
    }));

    assert_eq!(
        https_get(addr, "/metrics", None).await,
        (401, "Unauthorized\n".into())
    );
    assert_eq!(https_get(addr, "/metrics", Some("forged")).await.0, 401);
    let (status, body) = https_get(addr, "/metrics", Some("scraper")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    // Probes stay open.
    assert_eq!(https_get(addr, "/healthz", None).await.0, 200);
    stop.send(()).unwrap();
    served.await.unwrap();
}
