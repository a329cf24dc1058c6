"""The Kubeflow Python SDK (`kubeflow` from PyPI, pinned in e2e/versions.env), a client no one here wrote,
against our operator: runtimes, train() with a CustomTrainer, jobs, steps, waiting and deletion.

Pod logs (`get_job_logs`) need a kubelet, which this cluster does not have (kwok fakes pod status only);
docs/e2e.md says so. Everything else the SDK does goes through the API server and is checked here."""

import pytest
from kubeflow.common.types import KubernetesBackendConfig
from kubeflow.trainer import CustomTrainer, TrainerClient

from conftest import KUBECONFIG, eventually, exists, get

pytestmark = pytest.mark.kubetrain


def train_fn(lr: float):
    print(f"training with lr={lr}")


@pytest.fixture
def client(ns):
    return TrainerClient(KubernetesBackendConfig(namespace=ns, config_file=str(KUBECONFIG)))


def test_runtimes_as_the_sdk_sees_them(client):
    runtimes = {r.name: r for r in client.list_runtimes()}
    assert "torch-distributed" in runtimes and "deepspeed-distributed" in runtimes
    torch = client.get_runtime("torch-distributed")
    assert torch.name == "torch-distributed"
    assert torch.trainer.framework == "torch"
    assert runtimes["deepspeed-distributed"].trainer.framework == "deepspeed"


def test_train_wait_get_list_delete(client, ns):
    name = client.train(
        runtime=client.get_runtime("torch-distributed"),
        trainer=CustomTrainer(
            func=train_fn,
            func_args={"lr": 0.1},
            image="kwok.e2e/succeed:1",
            num_nodes=2,
            resources_per_node={"gpu": 1, "cpu": 1},
        ),
    )
    stored = get("trainjob", name, ns)
    assert stored["spec"]["trainer"]["numNodes"] == 2
    # Stored as the quantity "1": the TrainJob defaulting webhooks re-serialise quantities (Kueue's, in Go).
    assert str(stored["spec"]["trainer"]["resourcesPerNode"]["limits"]["nvidia.com/gpu"]) == "1"
    assert "train_fn" in " ".join(stored["spec"]["trainer"]["command"])

    job = client.wait_for_job_status(name, {"Complete"}, timeout=180, polling_interval=1)
    assert job.status == "Complete"

    job = client.get_job(name)
    assert job.runtime.name == "torch-distributed"
    assert job.num_nodes == 2
    steps = sorted(s.name for s in job.steps)
    assert steps == ["node-0", "node-1"], steps
    assert all(s.status == "Succeeded" for s in job.steps), [(s.name, s.status) for s in job.steps]
    assert all(s.device == "gpu" and s.device_count == "1" for s in job.steps), job.steps

    assert name in [j.name for j in client.list_jobs()]

    client.delete_job(name)
    eventually(lambda: not exists("trainjob", name, ns), f"TrainJob {name} to be deleted")
