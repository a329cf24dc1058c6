"""Kueue: a TrainJob labelled with a LocalQueue is held suspended by the real Kueue until quota frees."""

import json
import subprocess

import pytest

from conftest import KUBETRAIN, apply, condition, eventually, get, kubectl, trainjob, wait

pytestmark = pytest.mark.kubetrain


def queue_setup(ns, gpus):
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": f"{ns}-gpu"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": f"{ns}-cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": f"{ns}-gpu",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "100"},
                                    {"name": "memory", "nominalQuota": "1Ti"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team", "namespace": ns},
            "spec": {"clusterQueue": f"{ns}-cq"},
        },
    ]


def queued(name, gpus_per_node, nodes=2):
    job = trainjob(
        name,
        image="kwok.e2e/running:1",
        num_nodes=nodes,
        trainer={"resourcesPerNode": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus_per_node},
                                      "limits": {"nvidia.com/gpu": gpus_per_node}}},
        metadata={"labels": {"kueue.x-k8s.io/queue-name": "team"}},
    )
    return job


@pytest.fixture
def queue(ns):
    objs = queue_setup(ns, gpus=8)
    kubectl("apply", "--server-side", "-f", "-", input=objs)
    wait("clusterqueue/" + f"{ns}-cq", "condition=Active")
    yield ns
    kubectl("delete", "clusterqueue", f"{ns}-cq", "--wait=false", check=False)
    kubectl("delete", "resourceflavor", f"{ns}-gpu", "--wait=false", check=False)


def test_trainjob_waits_for_quota_then_runs(queue):
    ns = queue
    apply(queued("first", gpus_per_node=4), ns)
    # Kueue suspends it on creation (its webhook), admits it (8 of 8 GPUs) and un-suspends it.
    wait("trainjob/first", "jsonpath={.spec.suspend}=false", ns)
    wait("jobset/first", "jsonpath={.status.replicatedJobsStatus[0].active}=1", ns)

    apply(queued("second", gpus_per_node=4), ns)
    wl = eventually(lambda: [w for w in get("workloads", namespace=ns)["items"]
                             if w["metadata"]["ownerReferences"][0]["name"] == "second"], "second's Workload")[0]
    eventually(lambda: condition(get("workload", wl["metadata"]["name"], ns), "QuotaReserved"),
               "Kueue to evaluate the second Workload")
    reserved = condition(get("workload", wl["metadata"]["name"], ns), "QuotaReserved")
    assert reserved["status"] == "False" and "insufficient" in reserved["message"].lower(), reserved
    second = get("trainjob", "second", ns)
    assert second["spec"]["suspend"] is True
    assert condition(second, "Suspended")["status"] == "True"
    # A suspended TrainJob's JobSet is suspended too (or not created): no pods hold GPUs.
    pods = get("pods", namespace=ns, selector="jobset.sigs.k8s.io/jobset-name=second")["items"]
    assert pods == []

    kubectl("delete", "trainjob", "first", "-n", ns)
    wait("trainjob/second", "jsonpath={.spec.suspend}=false", ns)
    wait("jobset/second", "jsonpath={.status.replicatedJobsStatus[0].active}=1", ns)
    admitted = condition(get("workload", wl["metadata"]["name"], ns), "Admitted")
    assert admitted["status"] == "True"


EXPORTED_KINDS = "workloads,clusterqueues,localqueues,resourceflavors,cohorts,admissionchecks,topologies,nodes"


def model(kind, snapshot, *args):
    """`kubetrain queue KIND -f SNAPSHOT ARGS... -o json`, parsed."""
    out = subprocess.run([str(KUBETRAIN), "queue", kind, "-f", str(snapshot), *args, "-o", "json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kubetrain queue {kind} failed: {out.stderr}"
    return json.loads(out.stdout)


def test_exported_cluster_reads_whole(queue, tmp_path):
    """Issue 37, item 1: `kubectl get ... -A -o yaml` of the live cluster, fed to `queue simulate` and
    `queue explain`, gives the live admitted set and the live pending reasons."""
    ns = queue
    apply(queued("big", gpus_per_node=4), ns)
    wait("trainjob/big", "jsonpath={.spec.suspend}=false", ns)
    # Different shapes: Kueue v0.19 never evaluates (and writes nothing on) a Workload equal to one that did
    # not fit, and the model does the same with v0.19's gates.
    for name, gpus in (("small", 2), ("late", 3)):
        apply(queued(name, gpus_per_node=gpus), ns)
    live = {}
    for name in ("small", "late"):
        wl = eventually(lambda n=name: [w for w in get("workloads", namespace=ns)["items"]
                                        if w["metadata"]["ownerReferences"][0]["name"] == n], f"{name}'s Workload")[0]
        reserved = eventually(lambda w=wl: condition(get("workload", w["metadata"]["name"], ns), "QuotaReserved"),
                              f"Kueue to evaluate {name}'s Workload")
        assert reserved["status"] == "False", reserved
        live[wl["metadata"]["name"]] = reserved["message"]
    workloads = get("workloads", namespace=ns)["items"]
    admitted_live = sorted(w["metadata"]["name"] for w in workloads
                           if (condition(w, "Admitted") or {}).get("status") == "True")
    assert len(admitted_live) == 1, admitted_live

    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "cluster.yaml").write_text(kubectl("get", EXPORTED_KINDS, "-A", "-o", "yaml"))
    # The e2e's Kueue is v0.19.2; the model defaults to v0.20's gates (docs/kueue.md).
    (snapshot / "kueue-v0.19.yaml").write_text(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "featureGates: {UnadmittedWorkloadsObservability: false}\n")
    report = model("simulate", snapshot, "--until", "0")
    mine = {w["key"].split("/", 1)[1]: w for w in report["workloads"] if w["key"].startswith(ns + "/")}
    assert sorted(mine) == sorted(w["metadata"]["name"] for w in workloads), \
        "every exported Workload of the namespace is in the report"
    admitted_model = sorted(name for name, w in mine.items() if w["state"] == "Admitted")
    assert admitted_model == admitted_live, (admitted_model, admitted_live, mine)
    for name, message in live.items():
        reserved = next(c for c in mine[name]["conditions"] if c["type"] == "QuotaReserved")
        assert reserved["message"] == message, (mine[name], message)
        explained = model("explain", snapshot, "--until", "0", f"{ns}/{name}")
        assert explained["message"] == message, (explained, message)
