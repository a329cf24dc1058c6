//! The custom operator is the shipped operator's command line under its own name.

use std::process::Command;

#[test]
fn help_names_the_custom_operator_and_lists_the_operators_flags() {
    let output = Command::new(env!("CARGO_BIN_EXE_kubetrain-custom-operator"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(help.contains("Usage: kubetrain-custom-operator"), "{help}");
    for flag in [
        "--webhook-port",
        "--leader-elect",
        "--kubeconfig",
        "--trainjob-status",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

#[test]
fn bad_settings_fail_fast_under_the_custom_operators_name() {
    let output = Command::new(env!("CARGO_BIN_EXE_kubetrain-custom-operator"))
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
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("kubetrain-custom-operator: "), "{stderr}");
    assert!(stderr.contains("--leader-elect-renew-deadline"), "{stderr}");
}
