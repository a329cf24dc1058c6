//! `kubetrain migrate`: v1 jobs in; runtimes then TrainJobs out, which `kubetrain validate` and `kubetrain
//! render` accept; the report on stderr and in `--report`; exit 0, 2 or 1.

use crate::common::{arg, kubetrain, text, write};

/// A fixture of the kubetrain-migrate crate's table tests.
fn fixture(name: &str) -> String {
    format!(
        "{}/../../crates/kubetrain-migrate/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn a_plain_pytorchjob_migrates_to_the_builtin_runtime_and_exits_0() {
    let out = kubetrain(&["migrate", "-f", &fixture("pytorch-plain.yaml")], None);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.starts_with("---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\n"),
        "{stdout}"
    );
    assert!(stdout.contains("name: torch-distributed"), "{stdout}");
    assert!(stderr.contains("PyTorchJob/team-a/mnist -> TrainJob team-a/mnist (runtime ClusterTrainingRuntime/torch-distributed, built-in)"), "{stderr}");
    // What migrate prints, validate and render accept.
    for command in ["validate", "render"] {
        let checked = kubetrain(&[command, "-f", "-"], Some(&stdout));
        assert_eq!(
            checked.status.code(),
            Some(0),
            "{command}: {}",
            text(&checked.stderr)
        );
    }
}

#[test]
fn runtimes_come_first_and_the_report_file_says_a_person_is_needed() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let out = kubetrain(
        &[
            "migrate",
            "-f",
            &fixture("pytorch-full.yaml"),
            "-f",
            &fixture("mpijob.yaml"),
            "--report",
            arg(&report),
        ],
        None,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let kinds: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .collect();
    assert_eq!(
        kinds,
        [
            "ClusterTrainingRuntime",
            "ClusterTrainingRuntime",
            "TrainJob",
            "TrainJob",
            "TrainJob"
        ]
    );
    assert!(
        stderr.contains("changed      spec.elasticPolicy: "),
        "{stderr}"
    );
    assert!(
        stderr.contains("NOT CARRIED  spec.runPolicy.cleanPodPolicy: "),
        "{stderr}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["needsPerson"], true);
    assert_eq!(json["jobs"].as_array().unwrap().len(), 3);
    assert_eq!(json["runtimes"].as_array().unwrap().len(), 2);
    let entries = json["jobs"][0]["entries"].as_array().unwrap();
    assert!(
        entries
            .iter()
            .any(|e| e["path"] == "spec.runPolicy.cleanPodPolicy" && e["outcome"] == "notCarried")
    );
    // Written by rename: nothing but the report is left in the directory.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["report.json"]);
    for command in ["validate", "render"] {
        let checked = kubetrain(&[command, "-f", "-"], Some(&stdout));
        assert_eq!(
            checked.status.code(),
            Some(0),
            "{command}: {}",
            text(&checked.stderr)
        );
    }
}

#[test]
fn a_directory_as_json_with_namespaced_runtimes_and_one_queue() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["xgboostjob.yaml", "paddlejob.yaml", "jaxjob.yaml"] {
        write(
            dir.path(),
            name,
            &std::fs::read_to_string(fixture(name)).unwrap(),
        );
    }
    let out = kubetrain(
        &[
            "migrate",
            "-f",
            arg(dir.path()),
            "-o",
            "json",
            "--runtime-kind",
            "TrainingRuntime",
            "--queue",
            "q",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let objects: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "TrainingRuntime",
            "TrainingRuntime",
            "TrainJob",
            "TrainJob",
            "TrainJob"
        ]
    );
    for job in objects.iter().filter(|o| o["kind"] == "TrainJob") {
        assert_eq!(job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "q");
    }
}

#[test]
fn bad_input_exits_1_with_the_field_path() {
    let stdin = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: broken}\nspec:\n  pytorchReplicaSpecs:\n    Worker: {replicas: many}\n";
    let out = kubetrain(&["migrate", "-f", "-"], Some(stdin));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("PyTorchJob/broken: spec.pytorchReplicaSpecs.Worker.replicas: "),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    let mxjob = "apiVersion: kubeflow.org/v1\nkind: MXJob\nmetadata: {name: m}\n";
    let out = kubetrain(&["migrate", "-f", "-"], Some(mxjob));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("MXJob/m: kind: "),
        "{}",
        text(&out.stderr)
    );
    let configmap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n";
    let out = kubetrain(&["migrate", "-f", "-"], Some(configmap));
    assert_eq!(out.status.code(), Some(1), "no v1 job at all");
    assert!(
        text(&out.stderr).contains("no Training Operator v1 jobs"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn other_objects_beside_the_jobs_pass_through_after_the_runtimes() {
    let jobs = std::fs::read_to_string(fixture("tfjob.yaml")).unwrap();
    let pvc = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\nspec: {}\n";
    let out = kubetrain(&["migrate", "-f", "-"], Some(&format!("{pvc}---\n{jobs}")));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    // The TFJob migrates whole (TF_CONFIG rebuilt), so nothing needs a person: exit 0.
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let kinds: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("kind: "))
        .collect();
    assert_eq!(
        kinds,
        [
            "ClusterTrainingRuntime",
            "PersistentVolumeClaim",
            "TrainJob"
        ]
    );
    assert!(
        stderr.contains("<stdin>: document 1: PersistentVolumeClaim/data passed through unchanged"),
        "{stderr}"
    );
}
