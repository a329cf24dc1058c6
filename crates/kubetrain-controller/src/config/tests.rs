use std::time::Duration;

use super::*;

const CHART_CONFIGMAP: &str = include_str!("testdata/chart-configmap.yaml");
const KUSTOMIZE_BASE: &str = include_str!("testdata/kustomize-base.yaml");
const COMPLETE: &str = include_str!("testdata/complete.yaml");

const HEAD: &str = "apiVersion: config.trainer.kubeflow.org/v1alpha1\nkind: Configuration\n";

fn parse_ok(text: &str) -> Configuration {
    Configuration::parse(text).unwrap_or_else(|e| panic!("rejected:\n{e}\n---\n{text}"))
}

/// The configuration inside a ConfigMap as the chart renders it.
fn configmap_data(text: &str) -> String {
    let configmap: serde_json::Value = serde_saphyr::from_str(text).unwrap();
    configmap["data"]["controller_manager_config.yaml"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn upstream_defaults_as_written(config: &Configuration) {
    assert_eq!(config.webhook.port, 9443);
    assert_eq!(config.webhook.host, "");
    assert_eq!(config.metrics.bind_address, ":8443");
    assert!(config.metrics.secure_serving);
    assert_eq!(config.health.health_probe_bind_address, ":8081");
    assert!(config.leader_elect());
    let election = config.leader_election.as_ref().unwrap();
    assert_eq!(election.resource_name, "trainer.kubeflow.org");
    assert_eq!(election.resource_namespace, "");
    assert_eq!(election.lease_duration, Duration::from_secs(15));
    assert_eq!(election.renew_deadline, Duration::from_secs(10));
    assert_eq!(election.retry_period, Duration::from_secs(2));
    assert_eq!(config.trainjob_concurrency(), Some(5));
    assert!(config.cert_management.enable);
    assert_eq!(
        config.cert_management.webhook_service_name,
        "kubeflow-trainer-controller-manager"
    );
    assert_eq!(
        config.cert_management.webhook_secret_name,
        "kubeflow-trainer-webhook-cert"
    );
    assert_eq!(config.client_connection.burst, 100);
    assert_eq!(config.status_server.port, 10443);
}

#[test]
fn the_charts_configmap_is_accepted_unchanged() {
    let config = parse_ok(&configmap_data(CHART_CONFIGMAP));
    upstream_defaults_as_written(&config);
    assert!(config.feature_enabled("TrainJobStatus"));
}

#[test]
fn the_kustomize_base_is_accepted_unchanged() {
    let config = parse_ok(KUSTOMIZE_BASE);
    upstream_defaults_as_written(&config);
    assert!(!config.feature_enabled("TrainJobStatus"));
    assert_eq!(config.metrics_addr(), Some("0.0.0.0:8443".parse().unwrap()));
    assert_eq!(config.webhook_addr(), "0.0.0.0:9443".parse().unwrap());
}

/// The real file from upstream's Go module, when the module cache has it (CI's e2e steps fetch it; the
/// e2e scenario test_configuration.py checks it with `--check-config` too).
#[test]
fn upstreams_own_kustomize_file_is_accepted_when_the_module_cache_has_it() {
    let home = std::env::var("HOME").unwrap_or_default();
    let cache = std::env::var("GOMODCACHE").unwrap_or_else(|_| format!("{home}/go/pkg/mod"));
    let path = std::path::Path::new(&cache)
        .join("github.com/kubeflow/trainer/v2@v2.3.0/manifests/base/manager/controller_manager_config.yaml");
    let Ok(text) = std::fs::read_to_string(&path) else {
        println!(
            "SKIPPED: {} is not in the Go module cache (e2e/cluster.sh fetches it); the fixture test covers its shape",
            path.display()
        );
        return;
    };
    upstream_defaults_as_written(&parse_ok(&text));
}

#[test]
fn an_empty_file_gets_upstreams_defaults() {
    let config = parse_ok(HEAD);
    assert_eq!(config, Configuration::default());
    assert!(
        !config.leader_elect(),
        "no leaderElection: off, as upstream"
    );
    assert!(!config.metrics.auth.enabled);
    assert_eq!(config.health_addr(), Some("0.0.0.0:8081".parse().unwrap()));
}

#[test]
fn every_field_is_read() {
    let config = parse_ok(COMPLETE);
    assert_eq!(config.webhook_addr(), "127.0.0.1:9444".parse().unwrap());
    assert!(config.metrics.auth.enabled);
    assert_eq!(
        config.metrics_addr(),
        Some("127.0.0.1:8443".parse().unwrap())
    );
    assert_eq!(
        config.health_addr(),
        Some("127.0.0.1:8082".parse().unwrap())
    );
    let election = config.leader_election.as_ref().unwrap();
    assert_eq!(election.resource_name, "my-lease");
    assert_eq!(election.resource_namespace, "training");
    assert_eq!(election.lease_duration, Duration::from_secs(60));
    assert_eq!(config.trainjob_concurrency(), Some(20));
    assert!(!config.cert_management.enable);
    assert_eq!(config.cert_management.webhook_secret_name, "my-secret");
    assert!((config.client_connection.qps - 100.5).abs() < f32::EPSILON);
    assert_eq!(config.status_server.port, 12443);
    let tls = config.tls.as_ref().unwrap();
    assert_eq!(tls.min_version, "1.3");
    assert_eq!(tls.cipher_suites, ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]);
}

#[test]
fn the_effective_yaml_reads_back_to_the_same_settings() {
    for text in [COMPLETE, KUSTOMIZE_BASE, HEAD] {
        let config = parse_ok(text);
        let yaml = config.to_yaml();
        assert_eq!(parse_ok(&yaml), config, "{yaml}");
    }
    let yaml = Configuration::default().to_yaml();
    assert!(yaml.contains("kind: Configuration"), "{yaml}");
    assert!(
        yaml.contains("webhookSecretName: kubeflow-trainer-webhook-cert"),
        "{yaml}"
    );
}

/// A bad value (one line under the file's head) and the start of the one problem it must cause.
const BAD_VALUES: &[(&str, &str)] = &[
    (
        "webhook: {port: 0}",
        "webhook.port: must be between 1 and 65535, got 0",
    ),
    (
        "webhook: {port: 70000}",
        "webhook.port: must be between 1 and 65535",
    ),
    (
        "webhook: {port: \"9443\"}",
        "webhook.port: must be an integer",
    ),
    (
        "webhook: {host: my-host}",
        "webhook.host: host \"my-host\" must be an IP address",
    ),
    (
        "metrics: {bindAddress: \"8443\"}",
        "metrics.bindAddress: \"8443\" is not an address",
    ),
    (
        "metrics: {bindAddress: \":http\"}",
        "metrics.bindAddress: \":http\": the port must be a number",
    ),
    (
        "metrics: {secureServing: \"yes\"}",
        "metrics.secureServing: must be true or false",
    ),
    (
        "metrics: {secureServing: false, auth: {enabled: true}}",
        "metrics.auth.enabled: needs metrics.secureServing: true",
    ),
    (
        "health: {readinessEndpointName: ready}",
        "health.readinessEndpointName: kubetrain serves this probe at /readyz only",
    ),
    (
        "leaderElection: {leaseDuration: 15}",
        "leaderElection.leaseDuration: must be a string, got a number",
    ),
    (
        "leaderElection: {leaseDuration: \"15\"}",
        "leaderElection.leaseDuration: \"15\" is not a duration",
    ),
    (
        "leaderElection: {leaseDuration: 15x}",
        "leaderElection.leaseDuration: \"15x\" is not a duration",
    ),
    (
        "leaderElection: {resourceLock: configmaps}",
        "leaderElection.resourceLock: only \"leases\" is supported",
    ),
    (
        "leaderElection: {leaderElect: true, leaseDuration: 5s}",
        "leaderElection.renewDeadline: must be shorter than leaderElection.leaseDuration",
    ),
    (
        "controller: {groupKindConcurrency: {TrainJob.trainer.kubeflow.org: 0}}",
        "controller.groupKindConcurrency[TrainJob.trainer.kubeflow.org]: must be greater than 0, got 0",
    ),
    (
        "certManagement: {webhookSecretName: My_Secret}",
        "certManagement.webhookSecretName: \"My_Secret\" is not a valid object name",
    ),
    (
        "certManagement: {enable: 1}",
        "certManagement.enable: must be true or false, got a number",
    ),
    (
        "clientConnection: {qps: -1}",
        "clientConnection.qps: must be greater than or equal to 0, got -1",
    ),
    (
        "clientConnection: {burst: -5}",
        "clientConnection.burst: must be greater than or equal to 0",
    ),
    (
        "statusServer: {port: 0}",
        "statusServer.port: must be between 1 and 65535, got 0",
    ),
    (
        "statusServer: {qps: -0.5}",
        "statusServer.qps: must be greater than or equal to 0",
    ),
    (
        "featureGates: {NoSuchGate: true}",
        "featureGates.NoSuchGate: unrecognized feature gate",
    ),
    (
        "featureGates: {TrainJobStatus: \"on\"}",
        "featureGates.TrainJobStatus: must be true or false",
    ),
    (
        "tls: {minVersion: \"1.4\"}",
        "tls.minVersion: must be one of 1.0, 1.1, 1.2, 1.3, got \"1.4\"",
    ),
    (
        "tls: {cipherSuites: [TLS_NOPE]}",
        "tls.cipherSuites[0]: \"TLS_NOPE\": unknown cipher suite",
    ),
    (
        "tls: {nextProtos: [spdy/3]}",
        "tls.nextProtos[0]: \"spdy/3\": must be one of h2, http/1.1",
    ),
    ("webhook: [9443]", "webhook: must be an object, got a list"),
    (
        "webhook: {hots: x}",
        "webhook.hots: unknown field (known here: port, host)",
    ),
    ("metric: {}", "metric: unknown field"),
    (
        "metrics: {auth: {enable: true}}",
        "metrics.auth.enable: unknown field (known here: enabled)",
    ),
];

#[test]
fn bad_values_name_their_field() {
    let cases = BAD_VALUES;
    for (body, expected) in cases {
        let text = format!("{HEAD}{body}\n");
        let errors = Configuration::parse(&text).expect_err(body);
        assert_eq!(errors.len(), 1, "{body}: {errors}");
        assert!(
            errors.to_string().starts_with(expected),
            "{body}:\n{errors}\nexpected: {expected}"
        );
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = "apiVersion: v1\nkind: Config\nwebhook: {port: 0, hots: x}\nstatusServer: {port: -1, burst: -1}\n";
    let errors = Configuration::parse(text).unwrap_err();
    let shown = errors.to_string();
    for expected in [
        "apiVersion: must be config.trainer.kubeflow.org/v1alpha1",
        "kind: must be Configuration",
        "webhook.hots: unknown field",
        "webhook.port: must be between 1 and 65535",
        "statusServer.port: must be between 1 and 65535",
        "statusServer.burst: must be greater than or equal to 0",
    ] {
        assert!(shown.contains(expected), "{expected} missing:\n{shown}");
    }
    assert_eq!(errors.len(), 6, "{shown}");
    assert_eq!(shown.lines().count(), 6);
}

#[test]
fn broken_yaml_is_one_problem_and_never_a_panic() {
    for text in [
        "webhook: {port: 9443",
        ": :\n -",
        "\t- x",
        "- 1\n- 2\n",
        "42",
    ] {
        let errors = Configuration::parse(text).expect_err(text);
        assert!(!errors.is_empty(), "{text}");
    }
}

#[test]
fn go_durations() {
    for (text, expected) in [
        ("15s", Duration::from_secs(15)),
        ("1m30s", Duration::from_secs(90)),
        ("1h", Duration::from_secs(3600)),
        ("500ms", Duration::from_millis(500)),
        ("1.5s", Duration::from_millis(1500)),
        ("0", Duration::ZERO),
    ] {
        assert_eq!(parse_go_duration(text), Ok(expected), "{text}");
        assert_eq!(
            parse_go_duration(&format_go_duration(expected)),
            Ok(expected)
        );
    }
    for bad in ["", "15", "-1s", "1d", "s", "1.2.3s"] {
        assert!(parse_go_duration(bad).is_err(), "{bad}");
    }
    assert_eq!(format_go_duration(Duration::from_secs(90)), "1m30s");
    assert_eq!(format_go_duration(Duration::from_secs(3600)), "1h0m0s");
}

#[test]
fn bind_addresses() {
    assert_eq!(parse_bind_address("0"), Ok(None));
    assert_eq!(parse_bind_address(""), Ok(None));
    assert_eq!(
        parse_bind_address(":8443"),
        Ok(Some("0.0.0.0:8443".parse().unwrap()))
    );
    assert_eq!(
        parse_bind_address("[::1]:8443"),
        Ok(Some("[::1]:8443".parse().unwrap()))
    );
    assert_eq!(
        parse_bind_address("localhost:80"),
        Ok(Some("127.0.0.1:80".parse().unwrap()))
    );
    assert!(parse_bind_address("example.com:80").is_err());
}
