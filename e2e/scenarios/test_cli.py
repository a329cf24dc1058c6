"""`kubetrain submit|get|list|wait|delete|runtimes` (the TrainerClient's Kubernetes backend) against the
real API server and our operator."""

import json

import pytest
import yaml

from conftest import apply, eventually, exists, kubetrain, namespaced, torch_runtime, trainjob

pytestmark = pytest.mark.kubetrain


def test_runtimes_lists_the_builtin_runtimes():
    out = kubetrain("runtimes").stdout
    assert "torch-distributed" in out and "deepspeed-distributed" in out, out


def test_submit_get_list_wait_delete(ns, tmp_path):
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(trainjob("cli", num_nodes=2)))
    kubetrain("submit", "-f", str(manifest), "-n", ns)

    waited = kubetrain("wait", "cli", "--for", "Complete", "--timeout", "180", "--interval", "1", "-n", ns)
    assert waited.returncode == 0

    view = json.loads(kubetrain("get", "cli", "-o", "json", "-n", ns).stdout)
    assert view["name"] == "cli" and view["status"] == "Complete", view
    assert view["runtime"] == "torch-distributed"
    assert view["num_nodes"] == 2

    listed = kubetrain("list", "-n", ns).stdout
    assert "cli" in listed and "Complete" in listed, listed

    kubetrain("delete", "cli", "-n", ns)
    eventually(lambda: not exists("trainjob", "cli", ns), "TrainJob cli to be deleted")


def test_failed_job_makes_wait_fail(ns, tmp_path):
    manifest = tmp_path / "job.yaml"
    apply(torch_runtime("torch-no-retry", backoff_limit=0), ns)
    job = namespaced(trainjob("doomed", runtime="torch-no-retry", image="kwok.e2e/fail:1", num_nodes=1))
    manifest.write_text(yaml.safe_dump(job))
    kubetrain("submit", "-f", str(manifest), "-n", ns)
    proc = kubetrain("wait", "doomed", "--for", "Complete", "--timeout", "180", "--interval", "1", "-n", ns,
                     check=False)
    assert proc.returncode != 0
    assert 'TrainJob "doomed" failed' in proc.stderr, proc.stderr
