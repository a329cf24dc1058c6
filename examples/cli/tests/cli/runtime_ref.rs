//! A wrong runtime name (issue 39 item 6): `validate`, `render` and `run` all print one short line at
//! the TrainJob's own field path with "did you mean", not upstream's 550-character webhook text.

use crate::common::{kubetrain, text};

const TYPO: &str = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: typo, namespace: ml}\nspec:\n  runtimeRef: {name: torch-distributd}\n  trainer: {numNodes: 2}\n";

const SHORT: &str = "TrainJob/typo: spec.runtimeRef.name: ClusterTrainingRuntime \"torch-distributd\" not found; did you mean \"torch-distributed\"?";

#[test]
fn validate_render_and_run_say_did_you_mean_for_a_runtime_typo() {
    let run_dir = tempfile::tempdir().unwrap();
    let commands: [&[&str]; 3] = [
        &["validate", "-f", "-"],
        &["render", "-f", "-"],
        &[
            "run",
            "-f",
            "-",
            "--run-dir",
            run_dir.path().to_str().unwrap(),
        ],
    ];
    for args in commands {
        let out = kubetrain(args, Some(TYPO));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.lines().any(|l| l == SHORT),
            "{args:?}: no {SHORT:?} in\n{stderr}"
        );
        assert!(!stderr.contains("RuntimeRef"), "{args:?}: {stderr}");
    }
}
