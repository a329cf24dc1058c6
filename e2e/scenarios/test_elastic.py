"""Elastic TrainJobs (issue 32, item 2, operator side) on the real control plane with kwok nodes.

An elastic TrainJob (`mlPolicy.torch.elasticPolicy` with minNodes 2, maxNodes 4; pods that need a whole node)
starts with the nodes its pods fit on between the bounds, grows when more kwok nodes appear, and shrinks when
one is lost, instead of failing: the operator's elastic loop resizes the running JobSet's node job
(`parallelism` = `completions`, JobSet's `ElasticJobSet` gate), with a `TrainJobScaled` event each time. A job
whose policy has a CPU `Resource` metric, on this cluster without a metrics server, keeps its initial size
(numNodes) though more nodes fit, and says why once (`ElasticMetricsUnreadable`).
"""

import pytest

from conftest import apply, condition, eventually, exists, get, kubectl, wait
from test_resume import kwok_nodes, pool, running_pods  # noqa: F401 (pool is a fixture)

pytestmark = pytest.mark.kubetrain


def elastic_runtime(name, pool_name):
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"torch": {"elasticPolicy": {"minNodes": 2, "maxNodes": 4}}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "nodeSelector": {"e2e.kubetrain.dev/pool": pool_name},
                                            "containers": [{"name": "node", "image": "pytorch/pytorch:2.7.1"}],
                                        }
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def elastic_job(name, runtime):
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {"name": runtime, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": {"image": "kwok.e2e/run:1", "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}},
        },
    }


def nodes_of(ns, name):
    """The node job's parallelism and completions in the JobSet."""
    spec = get("jobset", name, ns)["spec"]["replicatedJobs"][0]["template"]["spec"]
    return spec.get("parallelism"), spec.get("completions")


def scaled(ns, name, words):
    for e in get("events.events.k8s.io", namespace=ns)["items"]:
        if e.get("reason") == "TrainJobScaled" and (e.get("regarding") or {}).get("name") == name \
                and words in (e.get("note") or ""):
            return e
    return None


def test_an_elastic_job_starts_with_the_nodes_there_grows_with_more_and_shrinks_when_one_is_lost(ns, pool):
    kwok_nodes(pool, 2)
    apply(elastic_runtime("elastic", pool), ns)
    apply(elastic_job("grow", "elastic"), ns)
    eventually(lambda: exists("jobset", "grow", ns), "the JobSet")
    # Two nodes fit (maxNodes would be 4): the job starts with 2, torchrun told 2:4.
    assert nodes_of(ns, "grow") == (2, 2)
    pods = eventually(lambda: len(running_pods(ns, "grow")) == 2 and running_pods(ns, "grow"), "two running pods")
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0].get("env", [])}
    assert env.get("PET_NNODES") == "2:4", env

    # Two more nodes: the running job grows to its maximum (in one step or two, as the nodes become schedulable).
    kwok_nodes(pool, 2)
    eventually(lambda: nodes_of(ns, "grow") == (4, 4), "the node job grown to 4")
    eventually(lambda: scaled(ns, "grow", "to 4 nodes: more nodes fit"), "the TrainJobScaled event of the growth")
    pods = eventually(lambda: len(running_pods(ns, "grow")) == 4 and running_pods(ns, "grow"), "four running pods")

    # The node of the last index goes: the job shrinks to 3 instead of failing.
    last = next(p for p in pods if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "3")
    kubectl("delete", "node", last["spec"]["nodeName"])
    eventually(lambda: scaled(ns, "grow", "from 4 to 3 nodes"), "the TrainJobScaled event of the shrink")
    assert nodes_of(ns, "grow") == (3, 3)
    pods = eventually(lambda: len(running_pods(ns, "grow")) == 3 and running_pods(ns, "grow"), "three running pods")
    assert condition(get("trainjob", "grow", ns), "Failed") is None

    for pod in pods:
        kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed")
    wait("trainjob/grow", "condition=Complete", ns)


def test_an_elastic_job_whose_metrics_cannot_be_read_keeps_its_initial_size(ns, pool):
    """A CPU `Resource` metric with no metrics server (the metrics.k8s.io API is not served): the job starts
    with its numNodes (2) though 4 nodes fit, as an HPA without readable metrics does not scale, and says why
    once with an `ElasticMetricsUnreadable` event."""
    kwok_nodes(pool, 4)
    runtime = elastic_runtime("elastic-cpu", pool)
    runtime["spec"]["mlPolicy"]["torch"]["elasticPolicy"]["metrics"] = [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}
    ]
    apply(runtime, ns)
    job = elastic_job("keep", "elastic-cpu")
    job["spec"]["trainer"]["numNodes"] = 2
    job["spec"]["trainer"]["resourcesPerNode"]["requests"] = {"cpu": "1"}
    apply(job, ns)
    eventually(lambda: exists("jobset", "keep", ns), "the JobSet")
    assert nodes_of(ns, "keep") == (2, 2)
    pods = eventually(lambda: len(running_pods(ns, "keep")) == 2 and running_pods(ns, "keep"), "two running pods")

    def unreadable():
        for e in get("events.events.k8s.io", namespace=ns)["items"]:
            if e.get("reason") == "ElasticMetricsUnreadable" and (e.get("regarding") or {}).get("name") == "keep":
                return e
        return None

    # The running job's loop read the node pods' PodMetrics, found the API not served, and kept the size.
    e = eventually(unreadable, "the ElasticMetricsUnreadable event")
    assert "metrics.k8s.io/v1beta1 is not served" in e["note"], e["note"]
    assert e["type"] == "Warning"
    assert nodes_of(ns, "keep") == (2, 2)
    assert scaled(ns, "keep", "nodes") is None

    for pod in pods:
        kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed")
    wait("trainjob/keep", "condition=Complete", ns)


def test_an_elastic_job_grows_when_its_reported_metric_asks_for_more_nodes(ns, pool):
    """A `Pods` metric the trainer reports (`status.trainerStatus.metrics`, as the status server writes it):
    the job starts with its numNodes (2, nothing reported yet), and when the per-node value is 1.5× the
    target the loop asks for ceil(2 × 1.5) = 3 nodes, of the 4 that fit, and grows to 3."""
    kwok_nodes(pool, 4)
    runtime = elastic_runtime("elastic-tokens", pool)
    runtime["spec"]["mlPolicy"]["torch"]["elasticPolicy"]["metrics"] = [
        {"type": "Pods", "pods": {"metric": {"name": "tokens_per_node"},
                                  "target": {"type": "AverageValue", "averageValue": "1000"}}}
    ]
    apply(runtime, ns)
    job = elastic_job("tokens", "elastic-tokens")
    job["spec"]["trainer"]["numNodes"] = 2
    apply(job, ns)
    eventually(lambda: exists("jobset", "tokens", ns), "the JobSet")
    assert nodes_of(ns, "tokens") == (2, 2)
    eventually(lambda: len(running_pods(ns, "tokens")) == 2, "two running pods")

    # What the trainer would post through the status server, written to the status subresource directly.
    kubectl("patch", "trainjob", "tokens", "-n", ns, "--subresource=status", "--type=merge", "-p",
            '{"status": {"trainerStatus": {"metrics": [{"name": "tokens_per_node", "value": "1500"}],'
            ' "lastUpdatedTime": "2026-01-01T00:00:00Z"}}}')
    eventually(lambda: nodes_of(ns, "tokens") == (3, 3), "the node job grown to 3")
    e = eventually(lambda: scaled(ns, "tokens", "from 2 to 3 nodes: the metrics ask for more nodes"),
                   "the TrainJobScaled event naming the metrics")
    assert "the metrics ask for 3" in e["note"], e["note"]
    pods = eventually(lambda: len(running_pods(ns, "tokens")) == 3 and running_pods(ns, "tokens"),
                      "three running pods")
    # The report still says 1500 per node, but it describes 2 nodes: it is not read again until the trainer
    # reports anew (before, the loop took it as 1500 on 3 nodes and went on to 4 within a second).
    assert nodes_of(ns, "tokens") == (3, 3)
    assert scaled(ns, "tokens", "from 3 to") is None

    for pod in pods:
        kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed")
    wait("trainjob/tokens", "condition=Complete", ns)
