//! `kubetrain validate` and `kubetrain crd` as a user runs them.

use crate::common::{arg, kubetrain, quickstart, text};

#[test]
fn quickstart_is_valid_against_builtin_runtimes() {
    let out = kubetrain(&["validate", "-f", &quickstart()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "TrainJob/quickstart valid\n");
}

#[test]
fn every_error_is_reported_with_its_path_and_exit_code_1() {
    let input = "# a comment-only document is skipped\n---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: bad}\nspec:\n  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: -1, numProcPerNode: 0, env: [{name: PET_NODE_RANK, value: '0'}]}\n";
    let out = kubetrain(&["validate", "-f", "-"], Some(input));
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    for expected in [
        "TrainJob/bad: spec.trainer.numNodes: Invalid value: -1: should be greater than or equal to 0",
        "TrainJob/bad: spec.trainer.numProcPerNode: numProcPerNode must be greater than or equal to 1",
        "TrainJob/bad: spec.trainer.env: Invalid value: [{\"name\":\"PET_NODE_RANK\",\"value\":\"0\"}]: must not have reserved envs, invalid envs configured: [PET_NODE_RANK]",
    ] {
        assert!(
            stderr.lines().any(|l| l == expected),
            "missing {expected:?} in\n{stderr}"
        );
    }
    assert!(text(&out.stdout).is_empty());
}

#[test]
fn old_api_version_names_the_right_one() {
    let input = "apiVersion: kubeflow.org/v2alpha1\nkind: TrainJob\nmetadata: {name: old}\nspec: {runtimeRef: {name: torch-distributed}}\n";
    let out = kubetrain(&["validate", "-f", "-"], Some(input));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("use apiVersion: trainer.kubeflow.org/v1alpha1"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn runtimes_come_from_runtime_files_and_warnings_do_not_fail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = dir.path().join("runtime.yaml");
    std::fs::write(
        &runtime,
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: ClusterTrainingRuntime\nmetadata:\n  name: old-rt\n  labels: {trainer.kubeflow.org/support: deprecated}\nspec:\n  mlPolicy: {torch: {}}\n  template: {spec: {replicatedJobs: []}}\n",
    )
    .expect("write runtime");
    let job = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: j}\nspec: {runtimeRef: {name: old-rt}}\n";
    let out = kubetrain(
        &["validate", "-f", "-", "--runtime", arg(&runtime)],
        Some(job),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).starts_with("Warning: TrainJob/j: spec.runtimeRef: Referenced ClusterTrainingRuntime \"old-rt\" is deprecated"));
    let json = kubetrain(
        &[
            "validate",
            "-f",
            "-",
            "--runtime",
            arg(&runtime),
            "-o",
            "json",
        ],
        Some(job),
    );
    let findings: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON findings");
    assert_eq!(findings[0]["severity"], "warning");
    assert_eq!(findings[0]["path"], "spec.runtimeRef");
}

#[test]
fn yaml_syntax_errors_fail_cleanly() {
    let out = kubetrain(&["validate", "-f", "-"], Some("spec: [unclosed"));
    assert_eq!(out.status.code(), Some(1));
    // The file (`<stdin>` for `-`), the document and the line in the file; no snippet naming `<input>`.
    assert_eq!(
        text(&out.stderr),
        "<stdin>: invalid YAML: document 1 (from line 1): line 1 column 7: unclosed bracket '['\n"
    );
    let missing = kubetrain(&["validate", "-f", "/nonexistent/file.yaml"], None);
    assert_eq!(missing.status.code(), Some(1));
    assert_eq!(
        text(&missing.stderr),
        "error: cannot read /nonexistent/file.yaml: No such file or directory (os error 2)\n"
    );
}

#[test]
fn crd_prints_four_crds() {
    let out = kubetrain(&["crd"], None);
    assert!(out.status.success());
    let crds: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(&text(&out.stdout)).expect("YAML stream");
    let names: Vec<&str> = crds
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "clustertrainingruntimes.trainer.kubeflow.org",
            "trainingruntimes.trainer.kubeflow.org",
            "trainjobs.trainer.kubeflow.org",
            "optimizationjobs.trainer.kubeflow.org"
        ]
    );
    let json = kubetrain(&["crd", "-o", "json"], None);
    let parsed: Vec<serde_json::Value> = serde_json::from_slice(&json.stdout).expect("JSON array");
    assert_eq!(parsed.len(), 4);
}

#[test]
fn zero_nodes_is_valid_with_a_warning_that_no_trainer_runs() {
    let input = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: empty}\nspec:\n  runtimeRef: {name: torch-distributed}\n  trainer: {numNodes: 0}\n";
    let out = kubetrain(&["validate", "-f", "-"], Some(input));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("spec.trainer.numNodes: numNodes is 0: the job runs no trainer pods"),
        "{all}"
    );
}

#[test]
fn validate_render_and_run_refuse_the_same_quantities_with_the_same_path() {
    for (quantity, message) in [
        ("cpu: '-1'", "must be greater than or equal to 0"),
        ("nvidia.com/gpu: '1e26'", "must be less than or equal to"),
        ("memory: '1e999999999'", "quantities must match"),
    ] {
        let input = format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: odd}}\nspec:\n  runtimeRef: {{name: torch-distributed}}\n  trainer: {{command: [\"true\"], resourcesPerNode: {{limits: {{{quantity}}}}}}}\n"
        );
        let field = quantity.split(':').next().unwrap();
        let path = format!("spec.trainer.resourcesPerNode.limits[{field}]");
        let dir = tempfile::tempdir().unwrap();
        let run_dir = dir.path().to_str().unwrap();
        for args in [
            vec!["validate", "-f", "-"],
            vec!["render", "-f", "-"],
            vec!["run", "-f", "-", "--run-dir", run_dir, "--ignore-capacity"],
        ] {
            let out = kubetrain(&args, Some(&input));
            let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert_eq!(out.status.code(), Some(1), "{args:?}: {all}");
            assert!(
                all.contains(&path) && all.contains(message),
                "{args:?} with {quantity}: {all}"
            );
        }
    }
}

#[test]
fn validate_render_and_run_refuse_a_document_larger_than_the_api_server_accepts() {
    let input = format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: huge}}\nspec:\n  runtimeRef: {{name: torch-distributed}}\n  trainer: {{command: [\"{}\"]}}\n",
        "x".repeat(3 * 1024 * 1024 + 1)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("huge.yaml");
    std::fs::write(&file, &input).unwrap();
    let file = file.to_str().unwrap();
    let run_dir = dir.path().join("run");
    let run_dir = run_dir.to_str().unwrap();
    for args in [
        vec!["validate", "-f", file],
        vec!["render", "-f", file],
        vec!["run", "-f", file, "--run-dir", run_dir, "--ignore-capacity"],
    ] {
        let out = kubetrain(&args, None);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{args:?}: {all}");
        assert!(
            all.contains("document 1 (from line 1) is")
                && all.contains(
                    "over the 3 MiB (3145728 bytes) the API server accepts for one object"
                ),
            "{args:?}: {}",
            &all[..all.len().min(2000)]
        );
    }
}
