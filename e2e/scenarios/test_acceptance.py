"""`kubetrain acceptance run --kubeconfig` (issue 17) on the real cluster: the CLI creates the TrainJobs
through the API server in a Kueue LocalQueue, our operator renders their JobSets, real Kueue admits them,
the real JobSet and Job controllers run the initializer and trainer pods on kwok nodes, and the CLI deletes a
trainer pod through the API. kwok pods run no containers, so this test plays them: it finishes the
initializer pods and posts what `kubetrain collective bench` and `train-demo` would report to the operator's
status server, with ServiceAccount tokens minted by the TokenRequest API for each TrainJob's audience. The
acceptance run must pass and write its report; with the posted busbw below the plan's minimum it must fail
the benchmark step.
"""

import json
import subprocess

import pytest
import requests
import yaml

from conftest import KUBECONFIG, KUBETRAIN, TIMEOUT, eventually, get, kubectl, wait
from test_kueue import queue_setup
from test_status_server import CA, audience, token, url

pytestmark = pytest.mark.kubetrain

JOBSET = "jobset.sigs.k8s.io/jobset-name"
RJOB = "jobset.sigs.k8s.io/replicatedjob-name"
INDEX = "batch.kubernetes.io/job-completion-index"
RUN = "kwok.e2e/run:1"  # kwok keeps such a pod Running until it is annotated or deleted


def runtime(ns):
    """A namespaced torch runtime with dataset and model initializers the trainer depends on (our fixture)."""
    def init(name):
        return {"name": name, "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": name}},
            "spec": {"template": {"spec": {
                "containers": [{"name": name, "image": RUN,
                                "volumeMounts": [{"name": "initializer", "mountPath": "/workspace"}]}],
                # Upstream's rule: initializers mount the "initializer" volume (a shared PVC on a real cluster).
                "volumes": [{"name": "initializer", "emptyDir": {}}]}}}}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": "acceptance-torch", "namespace": ns},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
            init("dataset-initializer"),
            init("model-initializer"),
            {"name": "node",
             "dependsOn": [{"name": "dataset-initializer", "status": "Complete"},
                           {"name": "model-initializer", "status": "Complete"}],
             "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                          "spec": {"template": {"spec": {"containers": [{"name": "node", "image": RUN}]}}}}},
        ]}}},
    }


def plan(ns, min_busbw):
    return {
        "apiVersion": "kubetrain.io/v1alpha1",
        "kind": "AcceptancePlan",
        "metadata": {"name": "e2e"},
        "spec": {
            "trainJob": {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "acc", "namespace": ns},
                "spec": {
                    "runtimeRef": {"name": "acceptance-torch", "apiGroup": "trainer.kubeflow.org",
                                   "kind": "TrainingRuntime"},
                    "trainer": {"image": RUN, "numNodes": 2,
                                "command": ["kubetrain", "collective", "train-demo", "--steps", "100000"],
                                "resourcesPerNode": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                                     "limits": {"nvidia.com/gpu": "1"}}},
                },
            },
            "runtimes": [runtime(ns)],
            "queue": {"name": "team"},
            "dataset": {"uri": "s3://data/sample", "endpoint": "http://minio.storage:9000"},
            "model": {"uri": "hf://org/base"},
            "benchmark": {"minBytes": "1Mi", "maxBytes": "4Mi"},
            "training": {"window": "5s", "samplesPerStep": 1024},
            "checkpoint": {"location": "s3://checkpoints/e2e", "everySteps": 10},
            "podDeletion": {"podIndex": 1, "afterCheckpoints": 2},
            "cost": {"gpuHour": 2.5, "gpusPerNode": 1, "nodeHour": 1.0,
                     "unit": {"name": "1M samples", "samples": 1000000}},
            "baseline": {"name": "rented GPU", "pricePerUnit": 1000},
            "thresholds": {"maxQueueWait": f"{TIMEOUT}s", "minStagingMbps": 0.001, "minBusbwGbps": min_busbw,
                           "minSamplesPerSecond": 100, "maxRestoreTime": f"{TIMEOUT}s"},
            "cluster": {"stepTimeout": f"{TIMEOUT}s"},
        },
    }


@pytest.fixture
def queue(ns):
    kubectl("apply", "--server-side", "-f", "-", input=queue_setup(ns, gpus=8))
    wait(f"clusterqueue/{ns}-cq", "condition=Active")
    yield ns
    kubectl("delete", "clusterqueue", f"{ns}-cq", "--wait=false", check=False)
    kubectl("delete", "resourceflavor", f"{ns}-gpu", "--wait=false", check=False)


def live_pods(ns, jobset, rjob):
    pods = get("pods", namespace=ns, selector=f"{JOBSET}={jobset},{RJOB}={rjob}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def pods_running(ns, jobset, rjob, count):
    return eventually(lambda: (lambda ps: ps if len(ps) == count else None)(live_pods(ns, jobset, rjob)),
                      f"{count} {rjob} pod(s) of {jobset}")


def succeed(ns, pods):
    for p in pods:
        kubectl("annotate", "pod", p["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed",
                "--overwrite")


def play_initializers(ns, jobset):
    for rjob in ("dataset-initializer", "model-initializer"):
        succeed(ns, pods_running(ns, jobset, rjob, 1))


class Trainer:
    """Rank 0 of a TrainJob as the status server sees it: posts with a token of the job's audience."""

    def __init__(self, ns, job):
        self.ns, self.job = ns, job
        self.token = token(ns, audience(ns, job))

    def post(self, metrics, progress=50):
        body = {"trainerStatus": {
            "progressPercentage": progress,
            "metrics": [{"name": k, "value": str(v)} for k, v in metrics.items()],
            "lastUpdatedTime": "2026-12-01T00:00:00Z",
        }}
        answer = requests.post(url(self.ns, self.job), json=body, verify=str(CA), timeout=10,
                               headers={"Authorization": f"Bearer {self.token}"})
        assert answer.status_code == 200, answer.text
        want = body["trainerStatus"]["metrics"]
        eventually(lambda: ((get("trainjob", self.job, self.ns).get("status") or {}).get("trainerStatus")
                            or {}).get("metrics") == want, f"{self.job}'s trainerStatus to show {metrics}")


def bench_metrics(busbw):
    out = {"dataset_bytes": 40_000_000, "model_bytes": 160_000_000}
    for size in (1 << 20, 2 << 20, 4 << 20):
        factor = size / (4 << 20)
        out |= {f"busbw_gbps@{size}": f"{busbw * factor:.4f}", f"algbw_gbps@{size}": f"{busbw * factor / 2:.4f}",
                f"time_us@{size}": "812.50", f"wrong@{size}": "0"}
    return out


def start(ns, tmp_path, min_busbw):
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(plan(ns, min_busbw)))
    out = tmp_path / "report"
    proc = subprocess.Popen([str(KUBETRAIN), "acceptance", "run", "-f", str(plan_file), "--kubeconfig",
                             str(KUBECONFIG), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, out


def stop(proc):
    """Ends a run the test gave up on, printing what it said (pytest shows it with the failure)."""
    if proc.poll() is None:
        proc.kill()
        print(proc.communicate()[0])


def play_bench(ns, busbw):
    play_initializers(ns, "acc-bench")
    nodes = pods_running(ns, "acc-bench", "node", 2)
    Trainer(ns, "acc-bench").post(bench_metrics(busbw), progress=100)
    succeed(ns, nodes)


def test_acceptance_on_the_cluster_passes_and_proves_the_restore(queue, tmp_path):
    ns = queue
    proc, out = start(ns, tmp_path, min_busbw=5.0)
    try:
        play_bench(ns, busbw=12.5)

        play_initializers(ns, "acc")
        nodes = pods_running(ns, "acc", "node", 2)
        victim = next(p for p in nodes if p["metadata"]["labels"][INDEX] == "1")
        rank0 = Trainer(ns, "acc")
        for step, ckpt in ((5, 0), (15, 10), (25, 20)):
            rank0.post({"step": step, "loss": 2.0 / step, "samples_per_second": 20480, "checkpoint_step": ckpt,
                        "checkpoint_bytes": 623, "checkpoint_write_ms": 4.5})
        # checkpoint_step 20 = afterCheckpoints x everySteps: the CLI deletes pod 1 through the API and the
        # Job controller replaces it.
        replacement = eventually(
            lambda: next((p for p in live_pods(ns, "acc", "node")
                          if p["metadata"]["labels"][INDEX] == "1"
                          and p["metadata"]["uid"] != victim["metadata"]["uid"]), None),
            "the deleted trainer pod's replacement")
        assert kubectl("get", "pod", victim["metadata"]["name"], "-n", ns, "--ignore-not-found",
                       "-o", "name").strip() == ""
        for step in (21, 40):
            rank0.post({"step": step, "loss": 1.0 / step, "samples_per_second": 18432, "checkpoint_step": 40 if step == 40 else 20,
                        "checkpoint_bytes": 623, "checkpoint_write_ms": 4.1, "resumed_from_step": 20})
        succeed(ns, [p for p in live_pods(ns, "acc", "node")])
        stdout, _ = proc.communicate(timeout=TIMEOUT * 3)
        print(stdout)
    finally:
        stop(proc)
    assert proc.returncode == 0, stdout
    for n, name in enumerate(["queue", "staging", "benchmark", "training", "restore", "labels", "cost"], 1):
        assert f"[{n}/7] {name}: PASS" in stdout, stdout
    assert "acceptance e2e: PASSED" in stdout, stdout
    report = json.loads((out / "latest" / "acceptance.json").read_text())
    assert (out / "latest" / "acceptance.html").exists() and (out / "latest" / "labels.txt").exists()
    assert report["mode"] == "cluster" and report["passed"] is True
    steps = {s["name"]: s for s in report["steps"]}
    queue_step = steps["queue"]["measurements"]
    assert queue_step["workload"]["cluster_queue"] == f"{ns}-cq", queue_step
    assert queue_step["workload"]["admitted"][0] == "True", queue_step
    assert steps["staging"]["measurements"]["bytes"] == 200_000_000
    assert [r["size"] for r in report["benchmark"]] == [1 << 20, 2 << 20, 4 << 20]
    assert steps["benchmark"]["measurements"]["busbwAtMaxGbps"] == 12.5
    restore = steps["restore"]["measurements"]
    assert restore["resumed_from_step"] == 20 and restore["newestCheckpointStepBeforeDeletion"] == 20, restore
    assert restore["deletedPod"] == victim["metadata"]["name"], restore
    assert replacement["metadata"]["name"] != victim["metadata"]["name"]
    assert steps["training"]["measurements"]["steps"] == 40
    assert {e["kind"] for e in report["events"]} == {"checkpoint", "deletion", "resumed"}
    assert report["labels"]["kubetrain.io/network-busbw-gbps"] == "12.5000"
    assert report["labels"]["kubetrain.io/queue"] == "team"


def test_acceptance_on_the_cluster_fails_when_busbw_is_below_the_minimum(queue, tmp_path):
    ns = queue
    proc, out = start(ns, tmp_path, min_busbw=100.0)
    try:
        play_bench(ns, busbw=12.5)
        stdout, _ = proc.communicate(timeout=TIMEOUT * 2)
    finally:
        stop(proc)
    assert proc.returncode == 1, stdout
    assert "[3/7] benchmark: FAIL" in stdout and "spec.thresholds.minBusbwGbps wants ≥ 100 GB/s, measured 12.5 GB/s" in stdout, stdout
    assert "[4/7] training: SKIPPED" in stdout, stdout
    report = json.loads((out / "latest" / "acceptance.json").read_text())
    assert report["passed"] is False
    assert [s["verdict"] for s in report["steps"]] == ["pass", "pass", "fail", "skipped", "skipped", "skipped", "skipped"]
    # The training TrainJob was never created.
    assert get("trainjobs", namespace=ns)["items"] and all(
        j["metadata"]["name"] == "acc-bench" for j in get("trainjobs", namespace=ns)["items"])
