"""Webhooks: the real API server calls our admission webhooks; kubectl shows our field-path messages."""

import json

import pytest

from conftest import apply, get, kubectl, operator_metric, trainjob, wait

pytestmark = pytest.mark.kubetrain


def test_invalid_trainjob_is_refused_with_field_paths(ns):
    bad = trainjob("bad", num_nodes=2, trainer={"env": [{"name": "PET_NNODES", "value": "3"}]})
    proc = kubectl("apply", "-n", ns, "-f", "-", input=bad, check=False)
    assert proc.returncode != 0
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request' in proc.stderr
    assert "spec.trainer.env" in proc.stderr and "PET_NNODES" in proc.stderr, proc.stderr
    assert not kubectl("get", "trainjob", "-n", ns, "-o", "name").strip()


def test_missing_runtime_is_refused(ns):
    # Kueue's TrainJob webhook (vtrainjob.kb.io) refuses it too and may answer first; our verdict is counted.
    webhook = "validator.trainjob.trainer.kubeflow.org"
    before = operator_metric("kubetrain_admission_reviews_total", webhook=webhook, verdict="denied")
    proc = kubectl("apply", "-n", ns, "-f", "-", input=trainjob("orphan", runtime="no-such-runtime"), check=False)
    assert proc.returncode != 0
    assert "no-such-runtime" in proc.stderr, proc.stderr
    after = operator_metric("kubetrain_admission_reviews_total", webhook=webhook, verdict="denied")
    assert after == before + 1, (before, after)


def test_cel_rule_of_the_crd_is_enforced_by_the_api_server(ns):
    # numNodes is a CRD-level constraint (minimum 0 / CEL), enforced by the API server before webhooks.
    proc = kubectl("apply", "-n", ns, "-f", "-", input=trainjob("neg", num_nodes=-1), check=False)
    assert proc.returncode != 0
    assert "spec.trainer.numNodes" in proc.stderr, proc.stderr


def patches(label, manager="e2e.kubetrain.dev/test"):
    """A runtime patch (v2.3's `runtimePatches[]`) that labels the `node` Job template."""
    job = {"name": "node", "template": {"metadata": {"labels": {"e2e.kubetrain.dev/patched": label}}}}
    return [{"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}}}]


def test_defaulting_webhook_stamps_runtime_patches(ns):
    job = trainjob("stamped", image="kwok.e2e/running:1")
    job["spec"]["suspend"] = True
    job["spec"]["runtimePatches"] = patches("stamped")
    apply(job, ns)
    stored = get("trainjob", "stamped", ns)
    assert stored["spec"]["runtimePatches"][0].get("time"), stored["spec"]["runtimePatches"]


def test_runtime_patches_of_an_active_job_cannot_change(ns):
    job = trainjob("active", image="kwok.e2e/running:1", num_nodes=1)
    apply(job, ns)
    wait("jobset/active", "jsonpath={.status.replicatedJobsStatus[0].active}=1", ns)
    change = [{"op": "add", "path": "/spec/runtimePatches", "value": patches("active")}]
    proc = kubectl("patch", "trainjob", "active", "-n", ns, "--type=json", "-p", json.dumps(change), check=False)
    assert proc.returncode != 0
    assert "runtimePatches" in proc.stderr, proc.stderr
