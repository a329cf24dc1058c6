//! `kubetrain queue simulate|explain` with TrainJobs (issue 15, item 1): built-in runtimes embedded,
//! custom ones with `--runtime FILE`, `explain NAMESPACE/NAME` finding the TrainJob.

use crate::common::{arg, example, kubetrain, text, write};

fn manifest(name: &str) -> String {
    example(&format!("manifests/kueue/{name}"))
}

#[test]
fn simulate_admits_trainjobs_on_builtin_runtimes() {
    let out = kubetrain(
        &[
            "queue",
            "simulate",
            "-f",
            &manifest("gpu-teams.yaml"),
            "-f",
            &manifest("gpu-teams-trainjobs.yaml"),
        ],
        None,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("TrainJob"),
        "TrainJobs are not skipped: {stderr}"
    );
    let line = |key: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
            .to_string()
    };
    assert!(
        line("prod/trainjob-finetune-8b").contains("Admitted   team-prod"),
        "{stdout}"
    );
    assert!(
        line("research/trainjob-llama-70b").contains("Pending"),
        "{stdout}"
    );
}

#[test]
fn explain_finds_a_trainjob_by_its_name() {
    let out = kubetrain(
        &[
            "queue",
            "explain",
            "research/llama-70b",
            "-f",
            &manifest("gpu-teams.yaml"),
            "-f",
            &manifest("gpu-teams-trainjobs.yaml"),
        ],
        None,
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.starts_with("Workload research/trainjob-llama-70b: Pending\n"),
        "{stdout}"
    );
    // 4 nodes × 8 GPUs = 32; team-research can reach 16 + 8 borrowed A100s, and does not
    // tolerate the spot taint.
    assert!(
        stdout.contains("QuotaReserved: ExceedsMaxQuota: couldn't assign flavors to pod set node: insufficient quota for nvidia.com/gpu in flavor a100, previously considered podsets requests (0) + current podset request (32) > maximum capacity (24)"),
        "{stdout}"
    );
}

const RUNTIME: &str = r#"apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata: {name: small-gpu, namespace: research}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: trainer
                      resources: {requests: {cpu: "8", nvidia.com/gpu: "2"}}
"#;

const CUSTOM_JOB: &str = r#"apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: probe
  namespace: research
  labels: {kueue.x-k8s.io/queue-name: research}
spec:
  runtimeRef: {name: small-gpu, kind: TrainingRuntime}
  trainer: {numNodes: 3}
"#;

#[test]
fn explain_uses_a_custom_runtime_given_with_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let job = write(dir.path(), "probe.yaml", CUSTOM_JOB);
    let runtime = write(dir.path(), "runtime.yaml", RUNTIME);
    let job = arg(&job);
    let out = kubetrain(
        &[
            "queue",
            "explain",
            "research/probe",
            "-f",
            &manifest("gpu-teams.yaml"),
            "-f",
            job,
            "--runtime",
            arg(&runtime),
            "-o",
            "json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["key"], "research/trainjob-probe");
    assert_eq!(v["state"], "Admitted");
    assert_eq!(v["clusterQueue"], "team-research");

    // Without the runtime the TrainJob cannot be built: an error naming it.
    let out = kubetrain(
        &[
            "queue",
            "explain",
            "research/probe",
            "-f",
            &manifest("gpu-teams.yaml"),
            "-f",
            job,
        ],
        None,
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("TrainJob/research/probe: "), "{stderr}");
    assert!(stderr.contains("small-gpu"), "{stderr}");
}
