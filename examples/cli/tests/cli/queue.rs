//! `kubetrain queue simulate|explain` with TrainJobs (issue 15, item 1): built-in runtimes embedded,
//! custom ones with `--runtime FILE`, `explain NAMESPACE/NAME` finding the TrainJob; explanations that
//! never contradict themselves (issue 39 item 4).

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

/// A snapshot as `kubectl get ... -o yaml` exports it (our own fixture): `reserved` holds its quota
/// waiting for check `check` (recorded `Pending`), `soon` arrives at 90 s.
const SNAPSHOT: &str = r#"apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: check}
spec: {controllerName: example.com/check}
status: {conditions: [{type: Active, status: "True", reason: Active, message: ok}]}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  admissionChecks: [check]
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 1}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: lq, namespace: ns}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: reserved, namespace: ns, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  queueName: lq
  podSets:
  - name: main
    count: 1
    template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
status:
  admission:
    clusterQueue: cq
    podSetAssignments: [{name: main, count: 1, flavors: {cpu: default}, resourceUsage: {cpu: "1"}}]
  conditions:
  - {type: QuotaReserved, status: "True", reason: QuotaReserved, message: x, lastTransitionTime: "2026-01-01T00:00:05Z"}
  admissionChecks: [{name: check, state: Pending}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Workload
metadata: {name: soon, namespace: ns, annotations: {kubetrain.dev/arrival: 90s}}
spec:
  queueName: lq
  podSets:
  - name: main
    count: 1
    template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
"#;

/// `queue simulate --until`: the state at a virtual time; a reservation waiting for its check is
/// `QuotaReserved`, not `Admitted`, and a workload still to come is listed as `NotArrived`.
#[test]
fn simulate_until_reports_the_state_at_a_virtual_time() {
    let dir = tempfile::tempdir().unwrap();
    let setup = write(dir.path(), "snapshot.yaml", SNAPSHOT);
    let simulate = |until: &str| {
        let out = kubetrain(
            &[
                "queue",
                "simulate",
                "-f",
                arg(&setup),
                "--until",
                until,
                "-o",
                "json",
            ],
            None,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let state = |v: &serde_json::Value, key: &str| {
        v["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["key"] == key)
            .unwrap_or_else(|| panic!("{key} missing: {v}"))
            .clone()
    };
    let v = simulate("30s");
    assert_eq!(v["metrics"]["elapsedMs"], 30_000);
    assert_eq!(state(&v, "ns/reserved")["state"], "QuotaReserved");
    let soon = state(&v, "ns/soon");
    assert_eq!(
        (&soon["state"], &soon["arrivalMs"]),
        (&"NotArrived".into(), &90_000.into())
    );
    let v = simulate("2m");
    assert_eq!(state(&v, "ns/soon")["state"], "Pending");
    assert_eq!(state(&v, "ns/reserved")["state"], "QuotaReserved");

    let out = kubetrain(
        &["queue", "simulate", "-f", arg(&setup), "--until", "soon"],
        None,
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("\"soon\" is not a duration"), "{stderr}");
}

/// Issue 39 item 4's setup (our own): ClusterQueue team-a holds at most 8 GPUs; `gpu-job` (2 × 4)
/// is admitted, `too-big` (3 × 4 = 12) can never fit, `unlabelled` names no queue.
const TEAM_A: &str = r#"apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors: [{name: a100, resources: [{name: cpu, nominalQuota: 1000}, {name: memory, nominalQuota: 10Ti}, {name: nvidia.com/gpu, nominalQuota: 8}]}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: team-a}
spec: {clusterQueue: team-a}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: gpu-job, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: team-a}, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 2, resourcesPerNode: {limits: {nvidia.com/gpu: 4}}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: too-big, namespace: team-a, labels: {kueue.x-k8s.io/queue-name: team-a}, creationTimestamp: "2026-01-01T00:01:00Z"}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 3, resourcesPerNode: {limits: {nvidia.com/gpu: 4}}}
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: unlabelled, namespace: team-a}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 1, resourcesPerNode: {limits: {nvidia.com/gpu: 1}}}
"#;

/// `queue explain NAME` on [`TEAM_A`]: (stdout, stderr, success).
fn explain_team_a(name: &str) -> (String, String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let setup = write(dir.path(), "team-a.yaml", TEAM_A);
    let out = kubetrain(&["queue", "explain", name, "-f", arg(&setup)], None);
    (text(&out.stdout), text(&out.stderr), out.status.success())
}

/// Issue 39 item 4: a TrainJob that can never fit says so first, with the numbers and what to
/// change, and never tells the user to wait for the admitted job.
#[test]
fn explain_says_first_that_a_trainjob_can_never_fit() {
    let (stdout, stderr, ok) = explain_team_a("team-a/too-big");
    assert!(ok, "{stderr}");
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some("Workload team-a/trainjob-too-big: Pending")
    );
    assert_eq!(
        lines.next(),
        Some(
            "Can never be admitted as it is: pod set node asks for 12 nvidia.com/gpu (3 pods × 4), and ClusterQueue team-a can never hold more than 8 nvidia.com/gpu (in flavor a100, borrowing included)"
        ),
        "{stdout}"
    );
    assert!(
        stdout
            .contains("  - fewer pods: at most 2 of 4 nvidia.com/gpu each (a TrainJob's numNodes)"),
        "{stdout}"
    );
    assert!(!stdout.contains("would have to finish"), "{stdout}");
    assert!(!stdout.contains("gpu-job"), "{stdout}");
}

/// Issue 39 item 4: no queue label gets the label to add, not `LocalQueue  doesn't exist` alone;
/// a bare name finds the only TrainJob of that name.
#[test]
fn explain_tells_an_unlabelled_trainjob_how_to_join_a_queue_and_takes_a_bare_name() {
    let (stdout, stderr, ok) = explain_team_a("unlabelled");
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with("Workload team-a/trainjob-unlabelled: Pending\nNot in any queue: it has no kueue.x-k8s.io/queue-name label"),
        "{stdout}"
    );
    assert!(
        stdout.contains("LocalQueues in namespace team-a: team-a"),
        "{stdout}"
    );

    let (_, stderr, ok) = explain_team_a("nothing-by-this-name");
    assert!(!ok);
    assert!(
        stderr.contains("workload nothing-by-this-name not found"),
        "{stderr}"
    );
}

/// MultiKueue (issue 37 item 2): the manager reserves quota, the incremental dispatcher (stepSize 1)
/// offers the TrainJob to worker1 (8 GPUs: too small for 16), then after a 5-minute round to worker2,
/// which admits it; `explain` names worker2 and gives worker1's own pending reason.
#[test]
fn explain_names_the_multikueue_worker_and_why_the_others_did_not_take_it() {
    let dir = |f: &str| manifest(&format!("multikueue/{f}"));
    let args = |output: &str| {
        vec![
            "queue".to_string(),
            "explain".into(),
            "ml/llama-8b".into(),
            "-f".into(),
            dir("manager.yaml"),
            "--worker".into(),
            format!("worker1={}", dir("worker1.yaml")),
            "--worker".into(),
            format!("worker2={}", dir("worker2.yaml")),
            "-o".into(),
            output.into(),
        ]
    };
    let a = args("json");
    let out = kubetrain(&a.iter().map(String::as_str).collect::<Vec<_>>(), None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mk = &v["multiKueue"];
    assert_eq!(mk["cluster"], "worker2", "{mk}");
    assert_eq!(mk["checkState"], "Ready", "{mk}");
    assert_eq!(mk["admittedAfterMs"], 300000, "{mk}");
    let w1 = &mk["clusters"][0];
    assert_eq!(w1["cluster"], "worker1", "{mk}");
    assert!(
        w1["message"]
            .as_str()
            .unwrap()
            .contains("insufficient quota"),
        "{mk}"
    );
    let a = args("table");
    let out = kubetrain(&a.iter().map(String::as_str).collect::<Vec<_>>(), None);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains("went to \"worker2\""), "{stdout}");
    assert!(stdout.contains("- worker1:"), "{stdout}");

    // A worker named in --worker without NAME= is refused with the expected form.
    let out = kubetrain(
        &[
            "queue",
            "explain",
            "ml/llama-8b",
            "-f",
            &dir("manager.yaml"),
            "--worker",
            "w.yaml",
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("NAME=FILE"),
        "{}",
        text(&out.stderr)
    );
}
