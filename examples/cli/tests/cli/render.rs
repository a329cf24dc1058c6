//! `kubetrain render` as a user runs it: Flux, TrainJobStatus, owner references and canonical quantities.

use crate::common::{arg, kubetrain, text};

/// The shared Flux runtime (`testdata/runtimes/flux.yaml`).
const FLUX_RUNTIME: &str = include_str!("../../../../testdata/runtimes/flux.yaml");

/// A LAMMPS TrainJob on the Flux runtime: no uid, a CPU limit in millicores.
const LAMMPS: &str = "apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: lammps, namespace: hpc}
spec:
  runtimeRef: {name: flux-runtime}
  trainer: {numNodes: 2, command: [lmp, -in, in.reaxc], resourcesPerNode: {limits: {cpu: 2000m}}}
";

#[test]
fn flux_trainjob_renders_the_jobset_configmap_and_secret_unowned_without_uid() {
    let input = format!("{FLUX_RUNTIME}---\n{LAMMPS}");
    let out = kubetrain(&["render", "-f", "-"], Some(&input));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let kinds: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .collect();
    assert_eq!(kinds, ["JobSet", "ConfigMap", "Secret"], "{stdout}");
    assert!(stdout.contains("name: lammps-flux-entrypoint"));
    assert!(stdout.contains("name: lammps-flux-curve"));
    assert!(stdout.contains("name: flux-installer"));
    assert!(stdout.contains("lmp -in in.reaxc"));
    // No uid in the input: no owner references (an empty uid would be rejected by the API server).
    assert!(!stdout.contains("ownerReferences"), "{stdout}");
    // Canonical quantities, as the API server stores them.
    assert!(stdout.contains("cpu: \"2\""), "{stdout}");
    assert!(!stdout.contains("2000m"));
    // Deterministic.
    assert_eq!(
        kubetrain(&["render", "-f", "-"], Some(&input)).stdout,
        out.stdout
    );
}

#[test]
fn trainjob_status_plugin_is_opt_in() {
    let job = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: mnist, namespace: ml, uid: u-1234}\nspec: {runtimeRef: {name: torch-distributed}}\n";
    let off = text(&kubetrain(&["render", "-f", "-"], Some(job)).stdout);
    assert!(!off.contains("KUBEFLOW_TRAINER_SERVER_URL"));
    assert!(off.contains("uid: u-1234"), "{off}");

    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let out = kubetrain(
        &[
            "render",
            "-f",
            "-",
            "--trainjob-status-ca",
            arg(&ca),
            "--operator-namespace",
            "trainer-system",
        ],
        Some(job),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let on = text(&out.stdout);
    assert!(
        on.contains("value: https://kubeflow-trainer-controller-manager.trainer-system.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/mnist/status"),
        "{on}"
    );
    assert!(on.contains("name: mnist-tls-config"));
    assert!(on.contains("-----BEGIN CERTIFICATE-----"));

    let missing = kubetrain(
        &[
            "render",
            "-f",
            "-",
            "--trainjob-status-ca",
            "/nonexistent/ca.crt",
        ],
        Some(job),
    );
    assert!(!missing.status.success());
    assert!(text(&missing.stderr).contains("--trainjob-status-ca"));
}

/// The `ssh-privatekey` value of the MPI Secret in rendered YAML.
fn private_key(stdout: &str) -> String {
    let key = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("ssh-privatekey:"))
        .unwrap_or_else(|| panic!("no ssh-privatekey in {stdout}"));
    key.trim().to_owned()
}

#[test]
fn mpi_ssh_keys_are_random_unless_seeded() {
    let job = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: ds, namespace: ml}\nspec: {runtimeRef: {name: deepspeed-distributed}}\n";
    let first = kubetrain(&["render", "-f", "-"], Some(job));
    let second = kubetrain(&["render", "-f", "-"], Some(job));
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(second.status.success(), "{}", text(&second.stderr));
    // Without --seed the key is not a function of the TrainJob's name: two runs differ, and nothing warns.
    assert_ne!(
        private_key(&text(&first.stdout)),
        private_key(&text(&second.stdout))
    );
    assert!(
        !text(&first.stderr).contains("--seed"),
        "{}",
        text(&first.stderr)
    );

    // --seed: byte-identical output, and a warning that the keys are not secret.
    let seeded = kubetrain(&["render", "-f", "-", "--seed", "5"], Some(job));
    let again = kubetrain(&["render", "-f", "-", "--seed", "5"], Some(job));
    assert!(seeded.status.success(), "{}", text(&seeded.stderr));
    assert_eq!(seeded.stdout, again.stdout);
    let warning = text(&seeded.stderr);
    assert!(
        warning.contains("warning: --seed") && warning.contains("recompute its private key"),
        "{warning}"
    );
    assert_ne!(
        private_key(&text(&seeded.stdout)),
        private_key(&text(
            &kubetrain(&["render", "-f", "-", "--seed", "6"], Some(job)).stdout
        ))
    );
}

/// With `--no-validate` the renderer still refuses what the API server would refuse, and the CLI prints
/// every error at its field path, as `validate` does (not one summary line).
#[test]
fn no_validate_still_refuses_what_the_api_server_refuses_with_every_field_path() {
    let input = "apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: bad, namespace: default}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: -1, numProcPerNode: 0}
";
    for flags in [
        &["render", "--no-validate", "-f", "-"][..],
        &["render", "-f", "-"][..],
    ] {
        let out = kubetrain(flags, Some(input));
        assert!(!out.status.success(), "{flags:?}");
        assert!(out.stdout.is_empty(), "{flags:?}: nothing rendered");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(
                "TrainJob/bad: spec.trainer.numNodes: Invalid value: -1: should be greater than or equal to 0"
            ),
            "{flags:?}: {stderr}"
        );
        assert!(
            stderr.contains("spec.trainer.numProcPerNode"),
            "{flags:?}: {stderr}"
        );
        assert!(!stderr.contains("more error"), "{flags:?}: {stderr}");
    }
}
