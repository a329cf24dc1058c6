"""Kueue: a TrainJob labelled with a LocalQueue is held suspended by the real Kueue until quota frees."""

import pytest

from conftest import apply, condition, eventually, get, kubectl, trainjob, wait

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
