"""kubetrain-custom-operator (examples/custom-operator: the operator plus the MPICH/Intel MPI and KAI plugins)
replaces kubetrain-operator for this scenario, with the same flags, ServiceAccount token and RBAC
(`cluster.sh operator start` with KUBETRAIN_E2E_OPERATOR_BINARY), and renders an MPICH TrainJob that the
admission webhooks admit and that runs to Complete on kwok. The standard operator is restored afterwards, also
when the scenario fails."""

import uuid

import pytest

from conftest import apply, cluster, condition, eventually, get, kubectl, trainjob, wait

pytestmark = pytest.mark.kubetrain

OPERATOR = "kubetrain-operator"


@pytest.fixture
def custom_operator():
    """Stops the standard operator, starts kubetrain-custom-operator in its place (same name, ports and
    flags), and restores the standard one at the end."""
    cluster("operator", "stop", OPERATOR)
    try:
        cluster("operator", "start", OPERATOR, env={"KUBETRAIN_E2E_OPERATOR_BINARY": "kubetrain-custom-operator"})
        yield
    finally:
        cluster("operator", "stop", OPERATOR)
        cluster("operator", "start", OPERATOR)


def mpich_runtime(name):
    """A two-role MPI ClusterTrainingRuntime (as deepspeed-distributed) that picks MPICH by the annotation;
    `mpiImplementation` keeps upstream's only admitted value."""
    def role(image, command, **extra):
        return {"template": {"spec": {"containers": [{"name": "node", "image": image, "command": command}]}}, **extra}

    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "mpi": {"mpiImplementation": "OpenMPI", "numProcPerNode": 2}},
            "template": {
                "metadata": {"annotations": {"kubetrain.dev/mpi-implementation": "MPICH"}},
                "spec": {
                    "network": {"publishNotReadyAddresses": True},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                    "replicatedJobs": [
                        {"name": "node", "template": {"spec": role("mpich/sshd", ["/usr/sbin/sshd", "-De"])}},
                        {
                            "name": "launcher",
                            "dependsOn": [{"name": "node", "status": "Ready"}],
                            "template": {
                                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                "spec": role("mpich/launcher", ["mpirun", "hostname"]),
                            },
                        },
                    ],
                },
            },
        },
    }


def launcher_env(jobset):
    launcher = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "launcher")
    node = next(c for c in launcher["template"]["spec"]["template"]["spec"]["containers"] if c["name"] == "node")
    return {e["name"]: e.get("value") for e in node.get("env", [])}


def test_mpich_trainjob_renders_is_admitted_and_completes_under_the_custom_operator(ns, custom_operator):
    runtime = f"mpich-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=mpich_runtime(runtime))
    try:
        apply(trainjob("pi", runtime=runtime, num_nodes=2), ns)
        wait("trainjob/pi", "condition=Complete", ns)
        assert condition(get("trainjob", "pi", ns), "Failed") is None

        # The plugin's hostfile (Hydra's host:slots format) and the built-in's SSH Secret, both owned by the job.
        hostfile = get("configmap", "pi-mpi-hostfile", ns)
        assert hostfile["data"]["hostfile"] == "pi-node-0-0.pi:2\npi-node-0-1.pi:2\n", hostfile["data"]
        assert [o["name"] for o in hostfile["metadata"]["ownerReferences"]] == ["pi"]
        eventually(lambda: get("secret", "pi-mpi-ssh-auth", ns), "the SSH-auth Secret")

        jobset = get("jobset", "pi", ns)
        env = launcher_env(jobset)
        assert env.get("HYDRA_HOST_FILE") == "/etc/mpi/hostfile", env
        assert env.get("HYDRA_LAUNCHER_EXTRA_ARGS") == "-o ConnectionAttempts=10", env
        assert not any(name.startswith("OMPI_MCA_") for name in env), env
        assert jobset["metadata"]["annotations"]["kubetrain.dev/mpi-implementation"] == "MPICH"
    finally:
        kubectl("delete", "clustertrainingruntime", runtime, "--wait=false", check=False)
