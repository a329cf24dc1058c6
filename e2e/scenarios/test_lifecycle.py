"""Lifecycle: TrainJob -> JobSet (server-side apply) -> the real JobSet controller -> Jobs -> pods on kwok
nodes -> TrainJob status, for the torch, MPI, JAX and coscheduling paths."""

import pytest

from conftest import apply, condition, eventually, exists, get, namespaced, torch_runtime, trainjob, wait

pytestmark = pytest.mark.kubetrain

FIELD_MANAGER = "trainer.kubeflow.org/kubetrain"


def owned_by(obj, kind, name):
    return any(
        r["kind"] == kind and r["name"] == name and r.get("controller") for r in obj["metadata"].get("ownerReferences", [])
    )


def test_torch_trainjob_runs_to_complete(ns):
    apply(trainjob("torch", num_nodes=2, trainer={"resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}}), ns)
    wait("trainjob/torch", "condition=Complete", ns)

    js = get("jobset", "torch", ns, managed_fields=True)
    assert owned_by(js, "TrainJob", "torch")
    managers = {(m["manager"], m["operation"]) for m in js["metadata"]["managedFields"]}
    assert (FIELD_MANAGER, "Apply") in managers, managers
    assert condition(js, "Completed")["status"] == "True"

    pods = get("pods", namespace=ns, selector="jobset.sigs.k8s.io/jobset-name=torch")["items"]
    nodes = [p for p in pods if p["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") == "node"]
    assert len(nodes) == 2
    for pod in nodes:
        assert pod["status"]["phase"] == "Succeeded"
        assert pod["spec"]["nodeName"].startswith("kwok-node-")
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env["PET_NNODES"] == "2"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"

    job = get("trainjob", "torch", ns)
    complete = condition(job, "Complete")
    assert complete["status"] == "True"
    statuses = {s["name"]: s for s in job["status"]["jobsStatus"]}
    assert statuses["node"]["succeeded"] == 1


def test_failing_pod_fails_the_trainjob_with_upstreams_reason(ns):
    # backoffLimit 0: the Job fails at the first failed pod instead of after six retries with backoff.
    apply(torch_runtime("torch-no-retry", backoff_limit=0), ns)
    apply(namespaced(trainjob("broken", runtime="torch-no-retry", image="kwok.e2e/fail:1", num_nodes=1)), ns)
    wait("trainjob/broken", "condition=Failed", ns)
    failed = condition(get("trainjob", "broken", ns), "Failed")
    assert failed["status"] == "True"
    # Upstream copies the JobSet's Failed condition (reason FailedJobs) onto the TrainJob.
    assert failed["reason"] == "FailedJobs", failed
    assert condition(get("trainjob", "broken", ns), "Complete") is None


def test_mpi_trainjob_mounts_its_ssh_secret_and_hostfile_and_completes(ns):
    apply(trainjob("mpi", runtime="deepspeed-distributed", num_nodes=2), ns)
    wait("trainjob/mpi", "condition=Complete", ns)

    secret = get("secret", "mpi-mpi-ssh-auth", ns)
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert set(secret["data"]) >= {"ssh-privatekey", "ssh-publickey"}
    assert owned_by(secret, "TrainJob", "mpi")
    hostfile = get("configmap", "mpi-mpi-hostfile", ns)
    assert owned_by(hostfile, "TrainJob", "mpi")
    assert "mpi-node-0-0.mpi" in hostfile["data"]["hostfile"]

    js = get("jobset", "mpi", ns)
    for rj in js["spec"]["replicatedJobs"]:
        volumes = {v["name"]: v for v in rj["template"]["spec"]["template"]["spec"].get("volumes", [])}
        sources = {v.get("secret", {}).get("secretName") for v in volumes.values()}
        sources |= {v.get("configMap", {}).get("name") for v in volumes.values()}
        assert "mpi-mpi-ssh-auth" in sources, rj["name"]
    launcher = [r for r in js["spec"]["replicatedJobs"] if r["name"] == "launcher"][0]
    lvolumes = launcher["template"]["spec"]["template"]["spec"]["volumes"]
    assert any(v.get("configMap", {}).get("name") == "mpi-mpi-hostfile" for v in lvolumes)
    # The pods the real Job controller made carry the mounts: the key pair everywhere, the hostfile on the launcher.
    pods = get("pods", namespace=ns, selector="jobset.sigs.k8s.io/jobset-name=mpi")["items"]
    launchers = [p for p in pods if p["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") == "launcher"]
    assert launchers, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        secrets = {v.get("secret", {}).get("secretName") for v in pod["spec"].get("volumes", [])}
        assert "mpi-mpi-ssh-auth" in secrets, pod["metadata"]["name"]
    maps = {v.get("configMap", {}).get("name") for v in launchers[0]["spec"]["volumes"]}
    assert "mpi-mpi-hostfile" in maps


def test_jax_trainjob_completes(ns):
    apply(trainjob("jax", runtime="jax-distributed", num_nodes=2), ns)
    wait("trainjob/jax", "condition=Complete", ns)
    pods = get("pods", namespace=ns, selector="jobset.sigs.k8s.io/jobset-name=jax")["items"]
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0].get("env", [])}
    assert env.get("JAX_NUM_PROCESSES") == "2", env


def test_coscheduling_podgroup_is_created_and_owned(ns):
    apply(torch_runtime("torch-gang", pod_group_policy={"coscheduling": {"scheduleTimeoutSeconds": 60}}), ns)
    apply(namespaced(trainjob("gang", runtime="torch-gang", num_nodes=3)), ns)
    pg = eventually(
        lambda: exists("podgroups.scheduling.x-k8s.io", "gang", ns) and get("podgroups.scheduling.x-k8s.io", "gang", ns),
        "PodGroup gang",
    )
    assert pg["spec"]["minMember"] == 3
    assert pg["spec"]["scheduleTimeoutSeconds"] == 60
    assert owned_by(pg, "TrainJob", "gang")
    js = get("jobset", "gang", ns)
    tpl = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert tpl["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "gang"
    wait("trainjob/gang", "condition=Complete", ns)
