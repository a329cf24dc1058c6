"""Install: our CRDs (from `kubetrain crd`) are served by the real API server, every CEL rule included, and
the nine built-in runtimes went in through our runtime webhook."""

import pytest
import yaml

from conftest import KUBETRAIN, condition, get, kubectl, kubetrain, wait

pytestmark = pytest.mark.kubetrain

CRDS = ["trainjobs", "trainingruntimes", "clustertrainingruntimes"]
BUILTIN = [
    "deepspeed-distributed",
    "jax-distributed",
    "mlx-distributed",
    "torch-distributed",
    "torch-distributed-with-cache",
    "torchtune-llama3.2-1b",
    "torchtune-llama3.2-3b",
    "torchtune-qwen2.5-1.5b",
    "xgboost-distributed",
]


def cel_rules(node):
    """Every x-kubernetes-validations rule in a schema, as (path, rule)."""
    found = []

    def walk(n, path):
        if isinstance(n, dict):
            for v in n.get("x-kubernetes-validations") or []:
                found.append((path, v["rule"]))
            for k, v in n.items():
                walk(v, f"{path}.{k}")
        elif isinstance(n, list):
            for i, v in enumerate(n):
                walk(v, f"{path}[{i}]")

    walk(node, "")
    return sorted(found)


@pytest.mark.parametrize("plural", CRDS)
def test_crd_is_established_with_every_cel_rule(plural):
    stored = get("crd", f"{plural}.trainer.kubeflow.org")
    assert condition(stored, "Established")["status"] == "True"
    assert condition(stored, "NamesAccepted")["status"] == "True"
    assert condition(stored, "NonStructuralSchema") is None, "the API server found a non-structural schema"
    generated = crd_from_kubetrain(f"{plural}.trainer.kubeflow.org")
    # The API server compiled and kept every rule we generate (a rule it cannot compile fails `apply`).
    assert cel_rules(stored["spec"]["versions"]) == cel_rules(generated["spec"]["versions"])
    if plural == "trainjobs":
        assert cel_rules(generated["spec"]["versions"]), "the TrainJob CRD carries CEL rules"


def crd_from_kubetrain(name):
    for doc in yaml.safe_load_all(kubetrain("crd", "-o", "yaml").stdout):
        if doc and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"`{KUBETRAIN} crd` printed no CRD {name}")


def test_builtin_runtimes_are_installed():
    names = sorted(r["metadata"]["name"] for r in get("clustertrainingruntimes")["items"])
    assert names == BUILTIN


def test_runtime_webhook_refuses_an_invalid_runtime():
    bad = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "e2e-bad-runtime"},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}, "mpi": {}},
            "template": {"spec": {"replicatedJobs": []}},
        },
    }
    proc = kubectl("apply", "-f", "-", input=bad, check=False)
    assert proc.returncode != 0
    assert "e2e-bad-runtime" in proc.stderr
    assert "mlPolicy" in proc.stderr, proc.stderr


def test_legacy_finalizer_is_removed_so_an_old_runtime_can_be_deleted():
    # Trainer releases before v2.3 put this finalizer on runtimes; v2.3 (and kubetrain) remove it.
    name = "e2e-legacy-runtime"
    legacy = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {
            "name": name,
            "finalizers": ["trainer.kubeflow.org/resource-in-use"],
            "labels": {"trainer.kubeflow.org/webhook-validation": "disabled"},
        },
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": []}},
        },
    }
    kubectl("apply", "-f", "-", input=legacy)
    kubectl("delete", "clustertrainingruntime", name, "--wait=false")
    wait(f"clustertrainingruntime/{name}", "delete")
