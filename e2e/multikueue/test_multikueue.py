"""MultiKueue for TrainJobs across two real clusters (issue 37 item 2; run by e2e/multikueue.sh).

The manager cluster (KUBETRAIN_E2E_STATE) runs Kueue with MultiKueue and kubetrain-operator; the worker cluster
(KUBETRAIN_E2E_WORKER_STATE) runs Kueue and kubetrain-operator. A TrainJob submitted to the manager is copied
to the worker by Kueue's MultiKueue TrainJob adapter, runs there, and its status is copied back; kubetrain-operator
on the manager leaves it alone (`spec.managedBy: kueue.x-k8s.io/multikueue`).
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import KUBETRAIN, STATE, condition, eventually, kubectl, trainjob

WORKER_STATE = Path(os.environ.get("KUBETRAIN_E2E_WORKER_STATE", ""))
WORKER_KUBECONFIG = WORKER_STATE / "admin.kubeconfig"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
TRAINJOB_CONTROLLER = "trainer.kubeflow.org/trainjob-controller"
EXPORTED = "workloads,clusterqueues,localqueues,resourceflavors,cohorts,admissionchecks,multikueueclusters,multikueueconfigs"


def on_worker(*args, **kw):
    return kubectl(*args, kubeconfig=WORKER_KUBECONFIG, **kw)


def get_json(run, *args):
    return json.loads(run("get", *args, "-o", "json"))


def queues(ns, check=None):
    """A ResourceFlavor, a ClusterQueue (16 GPUs) and the LocalQueue `team` in `ns`; with `check`, the
    ClusterQueue requires that AdmissionCheck (the manager's)."""
    cq = {
        "namespaceSelector": {},
        "resourceGroups": [{
            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
            "flavors": [{"name": f"{ns}-gpu", "resources": [
                {"name": "cpu", "nominalQuota": "100"},
                {"name": "memory", "nominalQuota": "1Ti"},
                {"name": "nvidia.com/gpu", "nominalQuota": "16"},
            ]}],
        }],
    }
    if check:
        cq["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": f"{ns}-gpu"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"{ns}-cq"},
         "spec": cq},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "team", "namespace": ns},
         "spec": {"clusterQueue": f"{ns}-cq"}},
    ]


@pytest.fixture
def clusters(ns):
    """`ns` on both clusters, the worker's queues, and on the manager the worker's kubeconfig Secret, the
    MultiKueueCluster `worker1`, the MultiKueueConfig, the MultiKueue AdmissionCheck and the queues using it."""
    assert WORKER_KUBECONFIG.exists(), f"no worker cluster ({WORKER_KUBECONFIG}); run e2e/multikueue.sh"
    on_worker("create", "namespace", ns)
    on_worker("apply", "--server-side", "-f", "-", input=queues(ns))
    # Kueue refuses kubeconfigs that point at files (v0.19: no tokenFile, no insecure TLS): embed the data.
    worker_kubeconfig = on_worker("config", "view", "--raw", "--flatten", "--minify")
    secret = f"{ns}-worker1"
    kubectl("create", "secret", "generic", secret, "-n", "kueue-system",
            f"--from-literal=kubeconfig={worker_kubeconfig}")
    check = f"{ns}-mk"
    kubectl("apply", "--server-side", "-f", "-", input=[
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": "worker1"},
         "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": secret}}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": check},
         "spec": {"clusters": ["worker1"]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": check},
         "spec": {"controllerName": MULTIKUEUE,
                  "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": check}}},
    ] + queues(ns, check=check))
    kubectl("wait", "multikueuecluster/worker1", "--for=condition=Active", "--timeout=120s")
    kubectl("wait", f"admissioncheck/{check}", "--for=condition=Active", "--timeout=120s")
    kubectl("wait", f"clusterqueue/{ns}-cq", "--for=condition=Active", "--timeout=120s")
    yield ns
    for run in (kubectl, on_worker):
        run("delete", "clusterqueue", f"{ns}-cq", "--wait=false", check=False)
        run("delete", "resourceflavor", f"{ns}-gpu", "--wait=false", check=False)
    on_worker("delete", "namespace", ns, "--wait=false", check=False)
    kubectl("delete", "admissioncheck,multikueueconfig", check, "--wait=false", check=False)
    kubectl("delete", "multikueuecluster", "worker1", "--wait=false", check=False)
    kubectl("delete", "secret", secret, "-n", "kueue-system", check=False)


def explain(workload, files, workers, tmp_path):
    """`kubetrain queue explain WORKLOAD -f FILE... --worker NAME=FILE... -o json`, parsed."""
    args = [str(KUBETRAIN), "queue", "explain", workload, "-o", "json"]
    for f in files:
        args += ["-f", str(f)]
    for name, f in workers.items():
        args += ["--worker", f"{name}={f}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kubetrain queue explain failed: {out.stderr}"
    return json.loads(out.stdout)


def test_trainjob_dispatched_to_worker_runs_there(clusters, tmp_path):
    ns = clusters
    job = trainjob("remote", image="kwok.e2e/running:1", num_nodes=2,
                   trainer={"resourcesPerNode": {"requests": {"cpu": "1", "nvidia.com/gpu": 4},
                                                 "limits": {"nvidia.com/gpu": 4}}},
                   metadata={"labels": {"kueue.x-k8s.io/queue-name": "team"}})
    kubectl("apply", "-n", ns, "-f", "-", input=job)
    # Kueue's TrainJob webhook defaults managedBy for a queue whose ClusterQueue has a MultiKueue check.
    local = get_json(kubectl, "trainjob", "remote", "-n", ns)
    assert local["spec"].get("managedBy") == MULTIKUEUE, local["spec"]

    # The manager reserves quota, the dispatcher offers the Workload to worker1, the worker's Kueue admits it.
    def admitted_on_worker():
        wls = get_json(kubectl, "workloads", "-n", ns)["items"]
        wl = wls[0] if wls else None
        if not wl or (wl.get("status") or {}).get("clusterName") != "worker1":
            return None
        return wl if (condition(wl, "Admitted") or {}).get("status") == "True" else None
    wl = eventually(admitted_on_worker, "the manager's Workload admitted with clusterName worker1", timeout=180)
    checks = {c["name"]: c for c in wl["status"].get("admissionChecks", [])}
    assert checks[f"{ns}-mk"]["state"] == "Ready", checks
    assert "worker1" in checks[f"{ns}-mk"]["message"], checks

    # The copy runs on the worker: the worker's kubetrain-operator made its JobSet and kwok runs the pods.
    # A JobSet just created has no status yet: read it as "not running" rather than fail on the missing key.
    def worker_jobset_active():
        status = get_json(on_worker, "jobset", "remote", "-n", ns).get("status") or {}
        replicated = status.get("replicatedJobsStatus") or [{}]
        return replicated[0].get("active") == 1
    eventually(worker_jobset_active, "the worker's JobSet to run", timeout=180)
    remote = get_json(on_worker, "trainjob", "remote", "-n", ns)
    # The adapter clears managedBy on the copy; our webhook defaults it to our controller: ours to run.
    assert remote["spec"].get("managedBy", TRAINJOB_CONTROLLER) == TRAINJOB_CONTROLLER, remote["spec"]
    # The manager's operator left it alone: no JobSet, no pods there.
    assert get_json(kubectl, "jobsets", "-n", ns)["items"] == []
    assert get_json(kubectl, "pods", "-n", ns)["items"] == []

    # The model, fed both clusters' exported objects, names the worker Kueue chose.
    manager_yaml, worker_yaml = tmp_path / "manager.yaml", tmp_path / "worker.yaml"
    manager_yaml.write_text(kubectl("get", EXPORTED, "-A", "-o", "yaml"))
    worker_yaml.write_text(on_worker("get", "workloads,clusterqueues,localqueues,resourceflavors,cohorts",
                                     "-A", "-o", "yaml"))
    name = f"{ns}/{wl['metadata']['name']}"
    e = explain(name, [manager_yaml], {"worker1": worker_yaml}, tmp_path)
    assert e["multiKueue"]["cluster"] == "worker1", e["multiKueue"]
    # And deciding it itself (no recorded status): the same worker.
    fresh = tmp_path / "fresh.yaml"
    docs = [d for d in yaml.safe_load(manager_yaml.read_text())["items"] if d["kind"] != "Workload"]
    docs.append({k: v for k, v in local.items() if k != "status"})
    fresh.write_text(yaml.safe_dump_all(docs))
    fresh_worker = tmp_path / "fresh-worker.yaml"
    fresh_worker.write_text(yaml.safe_dump_all(
        [d for d in yaml.safe_load(worker_yaml.read_text())["items"] if d["kind"] != "Workload"]))
    e = explain(f"{ns}/remote", [fresh], {"worker1": fresh_worker}, tmp_path)
    assert e["multiKueue"]["cluster"] == "worker1", e["multiKueue"]

    # The pods finish on the worker; the TrainJob's Complete condition comes back to the manager's copy.
    for pod in get_json(on_worker, "pods", "-n", ns)["items"]:
        on_worker("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed")
    eventually(lambda: (condition(get_json(kubectl, "trainjob", "remote", "-n", ns), "Complete") or {})
               .get("status") == "True", "the Complete condition copied back to the manager's TrainJob", timeout=180)
    assert get_json(kubectl, "jobsets", "-n", ns)["items"] == []
    # Once the manager's Workload is finished, MultiKueue removes the worker's copies (upstream
    # workload_test.go "the local Job is marked finished, the remote objects are removed").
    eventually(lambda: (condition(get_json(kubectl, "workload", wl["metadata"]["name"], "-n", ns), "Finished")
                        or {}).get("status") == "True", "the manager's Workload to finish", timeout=180)
    eventually(lambda: not on_worker("get", "trainjob,workload", "-n", ns, "--ignore-not-found", "-o", "name").strip(),
               "MultiKueue to remove the worker's TrainJob and Workload", timeout=180)
