//! `kubetrain validate --policy`: the training policy offline, with the webhook's messages, and the example
//! policy in examples/tenancy refusing and permitting what its comments say.

use crate::common::{arg, example, kubetrain, quickstart, text, write};

fn policy() -> String {
    example("tenancy/training-policy.yaml")
}

/// A TrainJob in `namespace` on `runtime`, with extra spec lines (indented two spaces).
fn trainjob(namespace: &str, runtime: &str, extra: &str) -> String {
    format!(
        "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {{name: j, namespace: {namespace}}}\nspec:\n  runtimeRef: {{name: {runtime}}}\n{extra}"
    )
}

/// Spec lines of a runtime patch that sets `pod` (YAML flow) on the node replicated job's pod spec.
fn patch(pod: &str) -> String {
    format!(
        "  runtimePatches:\n    - manager: example.com/user\n      trainingRuntimeSpec: {{template: {{spec: {{replicatedJobs: [{{name: node, template: {{spec: {{template: {{spec: {pod}}}}}}}}}]}}}}}}\n"
    )
}

const PRIVILEGED: &str = "{containers: [{name: node, securityContext: {privileged: true}}]}";
const PRIVILEGED_PATH: &str = "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].securityContext.privileged";

fn validate(input: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let policy = policy();
    let mut args = vec!["validate", "--policy", &policy, "-f", "-"];
    args.extend_from_slice(extra);
    let out = kubetrain(&args, Some(input));
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn the_example_admits_the_built_in_runtimes_and_the_quickstart() {
    let policy = policy();
    let runtimes = example("manifests/deploy/runtimes");
    let out = kubetrain(
        &[
            "validate",
            "--policy",
            &policy,
            "-f",
            &runtimes,
            "-f",
            &quickstart(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("ClusterTrainingRuntime/torch-distributed valid"),
        "{stdout}"
    );
    assert!(stdout.contains("TrainJob/quickstart valid"), "{stdout}");
}

#[test]
fn a_privileged_trainjob_is_refused_with_its_field_path_except_in_gpu_infra() {
    let (code, _, stderr) = validate(
        &trainjob("team-a", "torch-distributed", &patch(PRIVILEGED)),
        &[],
    );
    assert_eq!(code, Some(1), "{stderr}");
    let expected = format!(
        "TrainJob/j: {PRIVILEGED_PATH}: container \"node\" runs privileged, which training policy \"gpu-cluster\" refuses; to permit it, add an exception for namespace \"team-a\" or runtime ClusterTrainingRuntime/torch-distributed with allow.privileged: true"
    );
    assert_eq!(stderr.trim_end(), expected);

    let (code, stdout, stderr) = validate(
        &trainjob("gpu-infra", "torch-distributed", &patch(PRIVILEGED)),
        &[],
    );
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "TrainJob/j valid\n");
}

#[test]
fn images_come_from_the_listed_registries_except_in_team_research() {
    let job = |namespace| {
        trainjob(
            namespace,
            "torch-distributed",
            "  trainer: {image: docker.io/someone/miner}\n",
        )
    };
    let (code, _, stderr) = validate(&job("team-a"), &[]);
    assert_eq!(code, Some(1));
    assert!(stderr.starts_with("TrainJob/j: spec.trainer.image: image \"docker.io/someone/miner\" is not from a registry"), "{stderr}");
    assert!(
        stderr.contains("allow.registries: [\"docker.io/\"]"),
        "{stderr}"
    );
    let (code, _, stderr) = validate(&job("team-research"), &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let listed = trainjob(
        "team-a",
        "torch-distributed",
        "  trainer: {image: registry.example.com/ml/llama:1}\n",
    );
    assert_eq!(validate(&listed, &[]).0, Some(0));
}

#[test]
fn host_paths_devices_and_rdma_follow_the_exceptions() {
    let volume = |path: &str| {
        patch(&format!(
            "{{volumes: [{{name: v, hostPath: {{path: {path}}}}}]}}"
        ))
    };
    let table = [
        ("team-a", volume("/mnt/datasets/imagenet"), &[][..], 0),
        ("team-a", volume("/var/lib/kubelet"), &[][..], 1),
        ("gpu-infra", volume("/var/lib/kubelet"), &[][..], 0),
        ("team-a", volume("/dev/infiniband"), &[][..], 1),
        (
            "team-a",
            volume("/dev/infiniband"),
            &["--namespace-label", "kubetrain.dev/rdma=true"][..],
            0,
        ),
        (
            "team-a",
            volume("/dev/nvme0"),
            &["--namespace-label", "kubetrain.dev/rdma=true"][..],
            1,
        ),
    ];
    for (namespace, extra, flags, expected) in table {
        let (code, _, stderr) = validate(&trainjob(namespace, "torch-distributed", &extra), flags);
        assert_eq!(
            code,
            Some(expected),
            "{namespace} {extra} {flags:?}: {stderr}"
        );
    }
}

#[test]
fn a_runtime_in_the_input_is_judged_at_its_own_paths_and_for_its_trainjobs() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = |name: &str| {
        format!(
            "apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {{name: {name}}}
spec:
  mlPolicy: {{numNodes: 1, torch: {{}}}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata: {{labels: {{trainer.kubeflow.org/trainjob-ancestor-step: trainer}}}}
            spec:
              template:
                spec:
                  hostNetwork: true
                  containers: [{{name: node, image: nvcr.io/nvidia/pytorch:25.01-py3}}]
"
        )
    };
    let nccl = write(dir.path(), "nccl.yaml", &runtime("nccl-tests"));
    let other = write(dir.path(), "other.yaml", &runtime("host-net"));
    let policy = policy();
    let out = kubetrain(
        &[
            "validate",
            "--policy",
            &policy,
            "-f",
            arg(&nccl),
            "-f",
            arg(&other),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("ClusterTrainingRuntime/host-net: spec.template.spec.replicatedJobs[0].template.spec.template.spec.hostNetwork: the pods share the host's network"),
        "{stderr}"
    );
    assert!(text(&out.stdout).contains("ClusterTrainingRuntime/nccl-tests valid"));

    // A TrainJob is judged with the runtime it references: the runtime's path, prefixed with its name.
    let job = write(dir.path(), "job.yaml", &trainjob("team-a", "host-net", ""));
    let out = kubetrain(
        &[
            "validate",
            "--policy",
            &policy,
            "-f",
            arg(&job),
            "--runtime",
            arg(&other),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("TrainJob/j: ClusterTrainingRuntime/host-net:spec.template.spec.replicatedJobs[0].template.spec.template.spec.hostNetwork: "),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_broken_policy_names_the_field_and_without_policy_nothing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broken = write(
        dir.path(),
        "policy.yaml",
        "apiVersion: kubetrain.dev/v1alpha1\nkind: TrainingPolicy\nspec:\n  exceptions:\n    - allow: {hostNetwork: maybe}\n",
    );
    let input = trainjob("team-a", "torch-distributed", &patch(PRIVILEGED));
    let out = kubetrain(
        &["validate", "--policy", arg(&broken), "-f", "-"],
        Some(&input),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("spec.exceptions[0].allow.hostNetwork: invalid type"),
        "{}",
        text(&out.stderr)
    );

    let out = kubetrain(&["validate", "-f", "-"], Some(&input));
    assert!(
        out.status.success(),
        "upstream refuses nothing: {}",
        text(&out.stderr)
    );
}
