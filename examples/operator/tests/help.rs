//! The binary's help documents every flag with its environment variable, and bad settings fail fast with a
//! message (before any cluster is contacted).

use std::process::Command;

fn operator() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubetrain-operator"))
}

#[test]
fn help_mentions_every_flag_and_its_environment_variable() {
    let output = operator().arg("--help").output().unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    for (flag, env) in [
        ("--metrics-bind-address", "KUBETRAIN_METRICS_BIND_ADDRESS"),
        (
            "--health-probe-bind-address",
            "KUBETRAIN_HEALTH_PROBE_BIND_ADDRESS",
        ),
        ("--webhook-port", "KUBETRAIN_WEBHOOK_PORT"),
        ("--webhook-cert-dir", "KUBETRAIN_WEBHOOK_CERT_DIR"),
        ("--disable-webhooks", "KUBETRAIN_DISABLE_WEBHOOKS"),
        ("--status-server-port", "KUBETRAIN_STATUS_SERVER_PORT"),
        ("--trainjob-status", "KUBETRAIN_TRAINJOB_STATUS"),
        ("--status-server-service", "KUBETRAIN_STATUS_SERVER_SERVICE"),
        ("--status-server-ca-file", "KUBETRAIN_STATUS_SERVER_CA_FILE"),
        ("--leader-elect", "KUBETRAIN_LEADER_ELECT"),
        (
            "--leader-elect-namespace",
            "KUBETRAIN_LEADER_ELECT_NAMESPACE",
        ),
        (
            "--leader-elect-lease-name",
            "KUBETRAIN_LEADER_ELECT_LEASE_NAME",
        ),
        (
            "--leader-elect-lease-duration",
            "KUBETRAIN_LEADER_ELECT_LEASE_DURATION",
        ),
        (
            "--leader-elect-renew-deadline",
            "KUBETRAIN_LEADER_ELECT_RENEW_DEADLINE",
        ),
        (
            "--leader-elect-retry-period",
            "KUBETRAIN_LEADER_ELECT_RETRY_PERIOD",
        ),
        ("--leader-elect-identity", "POD_NAME"),
        ("--watch-namespace", "KUBETRAIN_WATCH_NAMESPACE"),
        ("--concurrency", "KUBETRAIN_CONCURRENCY"),
        ("--sync-period", "KUBETRAIN_SYNC_PERIOD"),
        ("--field-manager", "KUBETRAIN_FIELD_MANAGER"),
        ("--log-format", "KUBETRAIN_LOG_FORMAT"),
        ("--kubeconfig", "KUBETRAIN_KUBECONFIG"),
        ("--context", "KUBETRAIN_CONTEXT"),
        // Upstream's manager flags (upstream_flags.rs).
        ("--feature-gates", "KUBETRAIN_FEATURE_GATES"),
        ("--zap-log-level", "KUBETRAIN_ZAP_LOG_LEVEL"),
        ("--zap-encoder", "KUBETRAIN_ZAP_ENCODER"),
        ("--zap-devel", "KUBETRAIN_ZAP_DEVEL"),
        ("--zap-stacktrace-level", "KUBETRAIN_ZAP_STACKTRACE_LEVEL"),
        ("--zap-time-encoding", "KUBETRAIN_ZAP_TIME_ENCODING"),
    ] {
        assert!(help.contains(flag), "help lacks {flag}:\n{help}");
        assert!(
            help.contains(&format!("env: {env}=")) || help.contains(&format!("env: {env}]")),
            "help lacks {env}:\n{help}"
        );
    }
    assert!(help.contains("RUST_LOG"), "{help}");
}

#[test]
fn unsafe_election_timings_are_refused_before_touching_a_cluster() {
    let output = operator()
        .args([
            "--leader-elect-renew-deadline",
            "20s",
            "--log-format",
            "text",
        ])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--leader-elect-renew-deadline"), "{stderr}");
}

#[test]
fn a_missing_webhook_certificate_names_the_file_and_the_flag() {
    let dir = std::env::temp_dir().join(format!("kubetrain-no-certs-{}", std::process::id()));
    let output = operator()
        .args([
            "--webhook-cert-dir",
            dir.to_str().unwrap(),
            "--log-format",
            "text",
        ])
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("tls.crt") && stderr.contains("--webhook-cert-dir"),
        "{stderr}"
    );
}

#[test]
fn a_bad_duration_is_a_usage_error() {
    let output = operator()
        .args(["--leader-elect-retry-period", "soon"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a duration"));
}
