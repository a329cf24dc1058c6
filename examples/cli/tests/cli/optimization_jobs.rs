//! `kubetrain get | list | logs optimizationjob ...` against the fake API server served on loopback: the
//! job with its trials, the list, the best trial's log, and the kind spelled wrong.

use std::process::{Command, Output};

use kubetrain_test_support::{FakeApiServer, ServedApi};
use serde_json::{Value, json};

use crate::common::{command, text};

const V1: &str = "trainer.kubeflow.org/v1alpha1";

fn trial(index: u32, lr: &str, condition: &str, loss: &str) -> Value {
    json!({
        "apiVersion": V1, "kind": "TrainJob",
        "metadata": {
            "name": format!("sweep-{index}"), "namespace": "team-a",
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"trainer.kubeflow.org/optimization-job": "sweep",
                       "trainer.kubeflow.org/trial-index": index.to_string()},
            "annotations": {"trainer.kubeflow.org/trial-parameters": format!("{{\"lr\":\"{lr}\"}}")},
            "ownerReferences": [{"apiVersion": V1, "kind": "OptimizationJob", "name": "sweep",
                                 "uid": "uid-sweep", "controller": true}]
        },
        "spec": {"runtimeRef": {"name": "torch-distributed"},
                 "trainer": {"env": [{"name": "KUBEFLOW_TRAINER_OPT_LR", "value": lr}]}},
        "status": {
            "conditions": [{"type": condition, "status": "True", "reason": "Done", "message": "",
                            "lastTransitionTime": "2026-01-02T03:10:00Z"}],
            "trainerStatus": {"metrics": [{"name": "loss", "value": loss}],
                              "lastUpdatedTime": "2026-01-02T03:09:00Z"}
        }
    })
}

fn cluster() -> FakeApiServer {
    let server = FakeApiServer::start();
    server.insert(json!({
        "apiVersion": V1, "kind": "OptimizationJob",
        "metadata": {"name": "sweep", "namespace": "team-a", "uid": "uid-sweep",
                     "creationTimestamp": "2026-01-02T03:04:00Z"},
        "spec": {
            "objectives": [{"metric": "loss"}],
            "parameters": [{"name": "lr", "searchSpace": {"logUniform": {"min": "1e-4", "max": "1e-1"}}}],
            "numTrials": 2, "parallelTrials": 2,
            "trainJobTemplate": {"spec": {"runtimeRef": {"name": "torch-distributed"}}}
        },
        "status": {
            "conditions": [
                {"type": "Created", "status": "True", "reason": "TrialsCreated", "message": "",
                 "lastTransitionTime": "2026-01-02T03:04:01Z"},
                {"type": "Complete", "status": "True", "reason": "AllTrialsFinished",
                 "message": "all 2 trials finished; the best is sweep-1 with loss = 0.25",
                 "lastTransitionTime": "2026-01-02T03:10:00Z"}
            ],
            "result": {"trainJobName": "sweep-1", "parameters": [{"name": "lr", "value": "0.01"}]}
        }
    }));
    server.insert(trial(0, "0.001", "Failed", "0.9"));
    server.insert(trial(1, "0.01", "Complete", "0.25"));
    server.insert(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "sweep-1-node-0-0-abcde", "namespace": "team-a",
            "labels": {"jobset.sigs.k8s.io/jobset-name": "sweep-1", "jobset.sigs.k8s.io/replicatedjob-name": "node",
                       "batch.kubernetes.io/job-completion-index": "0"}},
        "spec": {"containers": [{"name": "node"}]},
        "status": {"phase": "Succeeded"}
    }));
    server.set_log("team-a", "sweep-1-node-0-0-abcde", "node", "best trial\n");
    server
}

fn against_cluster(make: impl FnOnce(&ServedApi) -> Command) -> Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = cluster();
        let served = server.serve().unwrap();
        let mut command = make(&served);
        tokio::task::spawn_blocking(move || command.output().expect("kubetrain runs"))
            .await
            .unwrap()
    })
}

fn kubetrain(args: &[&str]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("config");
    against_cluster(|served| {
        served.write_kubeconfig(&kubeconfig, "team-a").unwrap();
        let mut command = command();
        command
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path());
        command
    })
}

fn stdout(out: &Output) -> String {
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

fn words(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn get_shows_the_job_its_best_trial_and_every_trial() {
    let lines = words(&stdout(&kubetrain(&["get", "optimizationjob", "sweep"])));
    assert_eq!(
        lines[0],
        ["NAME", "STATE", "TRIALS", "BEST", "OBJECTIVE", "AGE"]
    );
    assert_eq!(
        lines[1][..5],
        ["sweep", "Complete", "2/2", "sweep-1", "loss=0.25"]
    );
    assert_eq!(lines[3], ["TRIAL", "STATUS", "lr", "LOSS"]);
    assert_eq!(lines[4], ["sweep-0", "Failed", "0.001", "0.9"]);
    assert_eq!(lines[5], ["sweep-1", "Complete", "0.01", "0.25"]);
    let all = lines.concat().join(" ");
    assert!(all.contains("the best is sweep-1"), "{all}");

    let json: Value =
        serde_json::from_str(&stdout(&kubetrain(&["get", "oj", "sweep", "-o", "json"]))).unwrap();
    assert_eq!(
        json["optimizationJob"]["status"]["result"]["trainJobName"],
        "sweep-1"
    );
    assert_eq!(json["trials"][1]["parameters"]["lr"], "0.01");
    assert_eq!(json["trials"][0]["status"], "Failed");
}

#[test]
fn list_shows_optimization_jobs_and_trials_stay_train_jobs() {
    let lines = words(&stdout(&kubetrain(&["list", "optimizationjobs"])));
    assert_eq!(
        lines[0],
        ["NAME", "STATE", "TRIALS", "PARALLEL", "BEST", "AGE"]
    );
    assert_eq!(lines[1][..5], ["sweep", "Complete", "2", "2", "sweep-1"]);
    // The trials are TrainJobs: the plain list shows them, and `get trainjob` reads one.
    let trainjobs = stdout(&kubetrain(&["list"]));
    assert!(
        trainjobs.contains("sweep-0") && trainjobs.contains("sweep-1"),
        "{trainjobs}"
    );
    let one = stdout(&kubetrain(&["get", "trainjob", "sweep-1"]));
    assert!(one.contains("loss=0.25"), "{one}");
}

#[test]
fn logs_default_to_the_best_trial() {
    assert_eq!(
        stdout(&kubetrain(&["logs", "optimizationjob", "sweep"])),
        "best trial\n"
    );
    let missing = kubetrain(&["logs", "optimizationjob", "sweep", "--trial", "7"]);
    assert!(!missing.status.success());
    assert!(
        text(&missing.stderr).contains("OptimizationJob sweep has no trial 7 (trials: 0, 1)"),
        "{}",
        text(&missing.stderr)
    );
}

#[test]
fn a_wrong_kind_or_a_stray_trial_flag_is_refused() {
    let out = kubetrain(&["get", "widget", "sweep"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("unknown kind \"widget\": use trainjob or optimizationjob (oj)"),
        "{}",
        text(&out.stderr)
    );
    let out = kubetrain(&["logs", "sweep-1", "--trial", "1"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--trial goes with an OptimizationJob"));
}

#[test]
fn validate_checks_an_optimization_job_with_field_paths() {
    let good = "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: OptimizationJob\nmetadata: {name: sweep}\nspec:\n  objectives: [{metric: loss}]\n  parameters:\n    - {name: lr, searchSpace: {logUniform: {min: \"1e-4\", max: \"1e-1\"}}}\n  numTrials: 4\n  parallelTrials: 2\n  trainJobTemplate: {spec: {runtimeRef: {name: torch-distributed}}}\n";
    let out = crate::common::kubetrain(&["validate", "-f", "-"], Some(good));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "OptimizationJob/sweep valid\n");

    let bad = good
        .replace("parallelTrials: 2", "parallelTrial: 5")
        .replace("min: \"1e-4\"", "min: \"0\"");
    let out = crate::common::kubetrain(&["validate", "-f", "-"], Some(&bad));
    assert_eq!(out.status.code(), Some(1));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        all.contains("OptimizationJob/sweep: spec.parallelTrial: unknown field \"parallelTrial\"; did you mean \"parallelTrials\"?"),
        "{all}"
    );
    let typo_fixed = bad.replace("parallelTrial: 5", "parallelTrials: 5");
    let out = crate::common::kubetrain(&["validate", "-f", "-"], Some(&typo_fixed));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        all.contains("OptimizationJob/sweep: spec: parallelTrials cannot exceed numTrials"),
        "{all}"
    );
    assert!(
        all.contains("OptimizationJob/sweep: spec.parameters[0].searchSpace.logUniform: min must be strictly greater than 0"),
        "{all}"
    );
}
