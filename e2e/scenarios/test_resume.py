"""Resume after a lost node within a failure budget (issue 32, item 3) on the real control plane with kwok nodes.

A TrainJob annotated `kubetrain.dev/restart-on-disruption: "true"` gets a Job pod failure policy (a pod with the
`DisruptionTarget` condition fails its Job at once) and a JobSet failure-policy rule restarting the JobSet
without counting towards `maxRestarts`. Deleting the kwok node under one of its pods makes the pod garbage
collector fail that pod with `DisruptionTarget` (reason `DeletionByPodGC`), the JobSet restarts, the job ends
Complete, and the operator records the restart: its cause, the checkpoint the trainer reported through the
status server (Kubeflow's Python SDK, as training code would), the work lost, and the step the restarted trainer
resumed from (reported by a new process with a new token, as a restarted pod would) - in the `Restarted`
condition, `TrainJobRestarted`/`TrainJobResumed` events and the `kubetrain.dev/restarts` annotation. A real
failure (exit 1) spends the budget instead.
"""

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from conftest import STATE, apply, condition, eventually, exists, get, kubectl, wait

pytestmark = pytest.mark.kubetrain

# The pod garbage collector fails the pods of a deleted node after a 40 s quarantine, checked every 20 s.
DISRUPTION_TIMEOUT = 300
STATUS_PORT = 19447 + int(os.environ.get("KUBETRAIN_E2E_PORT_OFFSET", "0"))
CA = STATE / "pki" / "ca.crt"


def kwok_nodes(pool, count):
    """`count` fresh kwok nodes labelled `e2e.kubetrain.dev/pool=<pool>` (8 GPUs each), Ready and untainted."""
    names = [f"kwok-{pool}-{uuid.uuid4().hex[:5]}" for _ in range(count)]
    docs = []
    for name in names:
        docs.append({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": name, "type": "kwok", "e2e.kubetrain.dev/pool": pool},
            },
            "status": {
                "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
                "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
            },
        })
    kubectl("apply", "--server-side", "-f", "-", input=docs)
    for name in names:
        wait(f"node/{name}", "condition=Ready")
        # The API server taints new nodes not-ready; the node-lifecycle controller (off here) would lift it.
        kubectl("taint", "nodes", name, "node.kubernetes.io/not-ready:NoSchedule-", check=False)
    return names


@pytest.fixture
def pool(request):
    """A node pool of this scenario's own (deleted afterwards), so the shared kwok nodes stay as they are."""
    # A letter first: a bare hex name such as `13e080` reads as a number in the YAML sent to kubectl.
    name = f"pool-{uuid.uuid4().hex[:6]}"
    yield name
    kubectl("delete", "nodes", "-l", f"e2e.kubetrain.dev/pool={name}", "--wait=false", check=False)


def pool_runtime(name, pool, max_restarts=None, backoff_limit=None):
    """A namespaced torch TrainingRuntime whose pods need a whole node of `pool` (8 GPUs)."""
    job_spec = {
        "template": {
            "spec": {
                "nodeSelector": {"e2e.kubetrain.dev/pool": pool},
                "containers": [{"name": "node", "image": "pytorch/pytorch:2.7.1"}],
            }
        }
    }
    if backoff_limit is not None:
        job_spec["backoffLimit"] = backoff_limit
    jobset_spec = {
        "replicatedJobs": [
            {
                "name": "node",
                "template": {
                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": job_spec,
                },
            }
        ]
    }
    if max_restarts is not None:
        jobset_spec["failurePolicy"] = {"maxRestarts": max_restarts}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": jobset_spec}},
    }


def spot_job(name, runtime, image, num_nodes=2):
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "annotations": {"kubetrain.dev/restart-on-disruption": "true"}},
        "spec": {
            "runtimeRef": {"name": runtime, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"},
            "trainer": {
                "image": image,
                "numNodes": num_nodes,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}},
            },
        },
    }


def running_pods(ns, name):
    pods = get("pods", namespace=ns, selector=f"jobset.sigs.k8s.io/jobset-name={name}")["items"]
    return [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def history(ns, name):
    text = (get("trainjob", name, ns)["metadata"].get("annotations") or {}).get("kubetrain.dev/restarts")
    return json.loads(text) if text else None


def event(ns, name, reason):
    for e in get("events.events.k8s.io", namespace=ns)["items"]:
        if e.get("reason") == reason and (e.get("regarding") or {}).get("name") == name:
            return e
    return None


def report(ns, name, metrics):
    """What the trainer reports through the status server, with Kubeflow's Python SDK in a process of its own
    (a fresh token each time: a restarted pod gets a new one)."""
    eventually(lambda: kubectl("get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0,
               f"ServiceAccount {ns}/default")
    aud = f"trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status"
    token = kubectl("create", "token", "default", "-n", ns, "--duration", "10m", "--audience", aud).strip()
    token_file = STATE / f"token-{ns}-{uuid.uuid4().hex[:5]}"
    token_file.write_text(token)
    env = {
        **os.environ,
        "KUBEFLOW_TRAINER_SERVER_URL": f"https://127.0.0.1:{STATUS_PORT}/apis/trainer.kubeflow.org/v1alpha1"
        f"/namespaces/{ns}/trainjobs/{name}/status",
        "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(CA),
        "KUBEFLOW_TRAINER_SERVER_TOKEN": str(token_file),
    }
    code = (
        "import sys, json\n"
        "from kubeflow.trainer import update_trainjob_status\n"
        f"ok = update_trainjob_status(metrics=json.loads({json.dumps(json.dumps(metrics))}))\n"
        "sys.exit(0 if ok else 1)\n"
    )
    try:
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    finally:
        token_file.unlink(missing_ok=True)
    assert proc.returncode == 0, f"update_trainjob_status returned False: {proc.stderr}"


def reported(ns, name, metric, value):
    status = (get("trainjob", name, ns).get("status") or {}).get("trainerStatus") or {}
    return any(m["name"] == metric and m["value"] == value for m in status.get("metrics") or [])


def test_a_lost_node_restarts_the_job_without_spending_its_budget_and_it_completes(ns, pool):
    kwok_nodes(pool, 3)
    apply(pool_runtime("spot", pool), ns)
    apply(spot_job("spot", "spot", image="kwok.e2e/run:1"), ns)
    eventually(lambda: exists("jobset", "spot", ns), "the JobSet")
    jobset = get("jobset", "spot", ns)
    rule = jobset["spec"]["failurePolicy"]["rules"][0]
    assert (rule["name"], rule["action"]) == ("RestartOnDisruption", "RestartJobSetAndIgnoreMaxRestarts"), rule
    pods = eventually(lambda: len(running_pods(ns, "spot")) == 2 and running_pods(ns, "spot"), "two running pods")

    # The trainer reports its progress and its last checkpoint, 37 steps back.
    checkpointed = int(time.time()) - 60
    report(ns, "spot", {"kubetrain.dev/step": 437, "kubetrain.dev/checkpoint-step": 400,
                        "kubetrain.dev/checkpoint-time": checkpointed})
    eventually(lambda: reported(ns, "spot", "kubetrain.dev/checkpoint-step", "400"), "the checkpoint in trainerStatus")

    lost = pods[1]["spec"]["nodeName"]
    kubectl("delete", "node", lost)
    e = eventually(lambda: event(ns, "spot", "TrainJobRestarted"), "the TrainJobRestarted event",
                   timeout=DISRUPTION_TIMEOUT)
    assert e["type"] == "Normal" and "a disruption" in e["note"], e
    assert "last checkpoint at step 400" in e["note"] and "37 steps" in e["note"], e["note"]

    h = eventually(lambda: history(ns, "spot"), "the restart history")
    assert (h["disruptions"], h["failures"]) == (1, 0), h
    record = h["records"][0]
    assert record["cause"] == "Disruption" and record["reason"] == "FailurePolicy_RestartOnDisruption", record
    assert (record["step"], record["checkpointStep"], record["stepsLost"]) == (437, 400, 37), record
    # Two nodes' GPUs (16) from the checkpoint to the restart: at least the minute before the node went.
    assert record["gpuSecondsLost"] >= 16 * 60, record
    restarted = condition(get("trainjob", "spot", ns), "Restarted")
    assert restarted["reason"] == "Disruption", restarted
    # No budget spent: the JobSet counts the restart, but not towards maxRestarts.
    js_status = get("jobset", "spot", ns)["status"]
    assert js_status["restarts"] == 1 and js_status.get("restartsCountTowardsMax", 0) == 0, js_status

    # The restarted pods run on the two nodes left; the restarted trainer reports where it resumed.
    pods = eventually(lambda: len(running_pods(ns, "spot")) == 2 and running_pods(ns, "spot"), "two pods again")
    assert all(p["spec"]["nodeName"] != lost for p in pods)
    report(ns, "spot", {"kubetrain.dev/step": 401, "kubetrain.dev/resumed-from-step": 400})
    e = eventually(lambda: event(ns, "spot", "TrainJobResumed"), "the TrainJobResumed event")
    assert "resumed from step 400" in e["note"], e
    assert eventually(lambda: history(ns, "spot")["records"][0].get("resumedFromStep") == 400, "resumedFromStep")
    assert condition(get("trainjob", "spot", ns), "Restarted")["reason"] == "Resumed"

    for pod in pods:
        kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed")
    wait("trainjob/spot", "condition=Complete", ns)
    assert condition(get("trainjob", "spot", ns), "Failed") is None


def test_a_real_failure_spends_the_budget(ns, pool):
    kwok_nodes(pool, 1)
    # One restart allowed; the Job fails at its first failed pod.
    apply(pool_runtime("budget", pool, max_restarts=1, backoff_limit=0), ns)
    apply(spot_job("crash", "budget", image="kwok.e2e/fail:1", num_nodes=1), ns)
    wait("trainjob/crash", "condition=Failed", ns, timeout=180)
    failed = condition(get("trainjob", "crash", ns), "Failed")
    assert failed["reason"] == "ReachedMaxRestarts", failed
    h = eventually(lambda: history(ns, "crash"), "the restart history")
    assert (h["disruptions"], h["failures"]) == (0, 1), h
    assert h["records"][0]["cause"] == "Failure", h
    e = event(ns, "crash", "TrainJobRestarted")
    assert e is not None and e["type"] == "Warning" and "counts against the failure budget" in e["note"], e
    js_status = get("jobset", "crash", ns)["status"]
    assert js_status["restartsCountTowardsMax"] == 1, js_status
