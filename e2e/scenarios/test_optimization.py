"""OptimizationJobs on the real control plane (issue 33): kubetrain-operator runs the search, its trials are
TrainJobs that report their objective through the status server (as training code does with the SDK's
`update_trainjob_status`), and the job ends with `status.result` naming the best trial. The Python SDK reads
every trial as a TrainJob; `kubetrain get optimizationjob` shows the search.

Trial pods run on kwok (no code runs): the scenario plays the training code, posting `loss` for each trial
computed from the learning rate the controller injected (`KUBEFLOW_TRAINER_OPT_LR`), then finishes the pods.
"""

import json
import math
import os
import urllib.request

import pytest
from kubeflow.common.types import KubernetesBackendConfig
from kubeflow.trainer import TrainerClient

from conftest import KUBECONFIG, apply, cluster, condition, eventually, get, kubectl, kubetrain, operator_metric, wait
from test_kueue import queue_setup
from test_status_server import audience, post, token

pytestmark = pytest.mark.kubetrain

NAME = "lr-sweep"


def optimization_job(num_trials=4, parallel=2):
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "OptimizationJob",
        "metadata": {"name": NAME},
        "spec": {
            "objectives": [{"metric": "loss", "direction": "Minimize"}],
            "searchAlgorithm": {"random": {"seed": 42}},
            "parameters": [
                {"name": "lr", "searchSpace": {"logUniform": {"min": "0.0001", "max": "0.1"}}},
                {"name": "batch_size", "searchSpace": {"categorical": {"choices": ["16", "32"]}}},
            ],
            "numTrials": num_trials,
            "parallelTrials": parallel,
            "trainJobTemplate": {
                # A pod image kwok keeps Running until the scenario finishes it.
                "spec": {"runtimeRef": {"name": "torch-distributed"},
                         "trainer": {"image": "kwok.e2e/run:1", "numNodes": 1}},
            },
        },
    }


def job_sample(metric, labels):
    """One sample of the operator's /metrics by its exact label set (`operator_metric` has a `name` argument)."""
    port = 18080 + int(os.environ.get("KUBETRAIN_E2E_PORT_OFFSET", "0"))
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(f"{metric}{{{labels}}} "):
            return float(line.rsplit(" ", 1)[1])
    return None


def loss_of(lr):
    """The objective the fake training reports: best at lr = 1e-2."""
    return round((math.log10(lr) + 2) ** 2, 6)


def trials(ns):
    items = get("trainjob", namespace=ns, selector=f"trainer.kubeflow.org/optimization-job={NAME}")["items"]
    return {t["metadata"]["name"]: t for t in items}


def env(trial):
    return {e["name"]: e.get("value") for e in trial["spec"]["trainer"].get("env", [])}


def report_and_finish(ns, trial):
    """Plays the trial's training code: posts its loss to the status server, then lets its pods succeed."""
    name = trial["metadata"]["name"]
    lr = float(env(trial)["KUBEFLOW_TRAINER_OPT_LR"])
    body = {"trainerStatus": {"progressPercentage": 100, "metrics": [{"name": "loss", "value": str(loss_of(lr))}],
                              "lastUpdatedTime": "2026-12-01T00:00:00Z"}}
    reply = post(ns, name, token(ns, audience(ns, name)), body)
    assert reply.status_code == 200, reply.text
    pods = eventually(lambda: get("pod", namespace=ns, selector=f"jobset.sigs.k8s.io/jobset-name={name}")["items"],
                      f"the pods of trial {name}")
    for pod in pods:
        kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed", "--overwrite")
    eventually(lambda: (condition(get("trainjob", name, ns), "Complete") or {}).get("status") == "True",
               f"trial {name} to complete")
    return loss_of(lr)


def test_random_search_runs_its_trials_and_names_the_best(ns):
    created_before = operator_metric("kubetrain_optimization_trials_created_total")
    apply(optimization_job(), ns)
    losses = {}
    while len(losses) < 4:
        # Never more than parallelTrials unfinished trials, never more than numTrials in all.
        current = eventually(lambda: [t for n, t in trials(ns).items() if n not in losses] or None,
                             "a trial to run", timeout=60)
        seen = trials(ns)
        assert len(seen) <= 4, sorted(seen)
        assert len(seen) - len(losses) <= 2, (sorted(seen), sorted(losses))
        for trial in current:
            owner = trial["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"], owner["controller"]) == ("OptimizationJob", NAME, True)
            assert set(env(trial)) >= {"KUBEFLOW_TRAINER_OPT_LR", "KUBEFLOW_TRAINER_OPT_BATCH_SIZE"}, env(trial)
            losses[trial["metadata"]["name"]] = report_and_finish(ns, trial)

    job = eventually(lambda: (lambda j: j if (condition(j, "Complete") or {}).get("status") == "True" else None)(
        get("optimizationjob", NAME, ns)), "the OptimizationJob to complete")
    assert sorted(trials(ns)) == [f"{NAME}-{i}" for i in range(4)]
    best = min(losses, key=losses.get)
    result = job["status"]["result"]
    assert result["trainJobName"] == best, (result, losses)
    best_env = env(trials(ns)[best])
    assert {p["name"]: p["value"] for p in result["parameters"]} == {
        "lr": best_env["KUBEFLOW_TRAINER_OPT_LR"], "batch_size": best_env["KUBEFLOW_TRAINER_OPT_BATCH_SIZE"]}
    assert (condition(job, "Running") or {}).get("status") == "False"

    # Events on the job and the operator's metrics.
    # Repeated events become one event with a series (kube-runtime's recorder, events.k8s.io/v1).
    events = [e for e in get("events.events.k8s.io", namespace=ns)["items"]
              if (e.get("regarding") or {}).get("name") == NAME]
    counts = {}
    for e in events:
        counts[e["reason"]] = counts.get(e["reason"], 0) + ((e.get("series") or {}).get("count") or 1)
    assert counts.get("TrialCreated") == 4 and counts.get("OptimizationJobCompleted") == 1, counts
    job_labels = f'namespace="{ns}",name="{NAME}"'
    assert job_sample("kubetrain_optimization_trials", job_labels + ',state="Succeeded"') == 4
    assert job_sample("kubetrain_optimization_best_objective", job_labels) == losses[best]
    assert operator_metric("kubetrain_optimization_trials_created_total") == created_before + 4

    # The Python SDK reads each trial as a TrainJob.
    client = TrainerClient(KubernetesBackendConfig(namespace=ns, config_file=str(KUBECONFIG)))
    for name in losses:
        view = client.get_job(name)
        assert view.name == name and view.status == "Complete", (name, view.status)
        assert view.runtime.name == "torch-distributed"
    assert set(losses) <= {j.name for j in client.list_jobs()}

    # Our CLI shows the search and its trials.
    shown = json.loads(kubetrain("get", "optimizationjob", NAME, "-n", ns, "-o", "json").stdout)
    assert shown["optimizationJob"]["status"]["result"]["trainJobName"] == best
    assert {t["name"]: float(t["objective"]) for t in shown["trials"]} == losses
    table = kubetrain("list", "optimizationjobs", "-n", ns).stdout
    assert NAME in table and "Complete" in table, table


def test_an_invalid_search_is_refused_by_the_crd(ns):
    bad = optimization_job(num_trials=2, parallel=3)
    proc = kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(bad), check=False)
    assert proc.returncode != 0
    assert "parallelTrials cannot exceed numTrials" in proc.stderr, proc.stderr


def report(ns, trial):
    name = trial["metadata"]["name"]
    lr = float(env(trial)["KUBEFLOW_TRAINER_OPT_LR"])
    body = {"trainerStatus": {"metrics": [{"name": "loss", "value": str(loss_of(lr))}],
                              "lastUpdatedTime": "2026-12-01T00:00:00Z"}}
    reply = post(ns, name, token(ns, audience(ns, name)), body)
    assert reply.status_code == 200, reply.text
    return loss_of(lr)


def finish_pods(ns, name):
    pods = eventually(lambda: get("pod", namespace=ns, selector=f"jobset.sigs.k8s.io/jobset-name={name}")["items"],
                      f"the pods of trial {name}")
    for pod in pods:
        kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed", "--overwrite")


def test_an_operator_restart_resumes_the_search_without_repeating_a_trial(ns):
    apply(optimization_job(), ns)
    first = eventually(lambda: (lambda t: t if len(t) == 2 else None)(trials(ns)), "the first two trials")
    uids = {name: t["metadata"]["uid"] for name, t in first.items()}
    losses = {name: report(ns, t) for name, t in first.items()}
    cluster("operator", "stop", "kubetrain-operator")
    try:
        # While the operator is down the first two trials' pods finish.
        for name in first:
            finish_pods(ns, name)
            wait(f"jobset/{name}", "condition=Completed", ns)
        assert len(trials(ns)) == 2
    finally:
        cluster("operator", "start", "kubetrain-operator")
    # The restarted operator completes them and creates exactly the next two indices.
    rest = eventually(lambda: (lambda t: t if len(t) == 4 else None)(trials(ns)), "trials 2 and 3")
    assert sorted(rest) == [f"{NAME}-{i}" for i in range(4)]
    assert {name: rest[name]["metadata"]["uid"] for name in first} == uids, "the first trials are kept"
    for name in sorted(set(rest) - set(first)):
        losses[name] = report(ns, rest[name])
        finish_pods(ns, name)
    wait(f"optimizationjob/{NAME}", "condition=Complete", ns)
    assert len(trials(ns)) == 4
    assert get("optimizationjob", NAME, ns)["status"]["result"]["trainJobName"] == min(losses, key=losses.get)


def test_trials_queue_through_kueue_like_any_trainjob(ns):
    kubectl("apply", "--server-side", "-f", "-", input=queue_setup(ns, gpus=4))
    wait(f"clusterqueue/{ns}-cq", "condition=Active")
    try:
        job = optimization_job(num_trials=2, parallel=2)
        template = job["spec"]["trainJobTemplate"]
        template["metadata"] = {"labels": {"kueue.x-k8s.io/queue-name": "team"}}
        # Each trial asks for all 4 GPUs of the queue: one runs, the other waits for quota.
        template["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": "1", "nvidia.com/gpu": "4"},
                                                           "limits": {"nvidia.com/gpu": "4"}}
        apply(job, ns)
        both = eventually(lambda: (lambda t: t if len(t) == 2 else None)(trials(ns)), "both trials")
        eventually(lambda: sorted(t["spec"].get("suspend", False) for t in trials(ns).values()) == [False, True],
                   "one trial admitted, one held by Kueue")
        losses = {}
        for _ in range(2):
            running = eventually(lambda: [t for n, t in trials(ns).items()
                                          if n not in losses and not t["spec"].get("suspend")] or None,
                                 "an admitted trial")[0]
            name = running["metadata"]["name"]
            losses[name] = report(ns, running)
            finish_pods(ns, name)
            wait(f"trainjob/{name}", "condition=Complete", ns)
        wait(f"optimizationjob/{NAME}", "condition=Complete", ns)
        assert sorted(losses) == sorted(both)
        assert get("optimizationjob", NAME, ns)["status"]["result"]["trainJobName"] == min(losses, key=losses.get)
    finally:
        kubectl("delete", "clusterqueue", f"{ns}-cq", "--wait=false", check=False)
        kubectl("delete", "resourceflavor", f"{ns}-gpu", "--wait=false", check=False)
