"""`kubetrain checkpoint-advice NAME` on the real control plane: the inputs come from the TrainJob (its node count
and what its trainer reported in trainerStatus), the answer is Young/Daly's (docs/acceptance.md)."""

import json
from datetime import datetime, timezone

import pytest

from conftest import apply, kubectl, kubetrain, trainjob, wait

pytestmark = pytest.mark.kubetrain


def test_checkpoint_advice_reads_the_jobs_reported_checkpoints(ns):
    apply(trainjob("spot", image="kwok.e2e/running:1", num_nodes=4), ns)
    wait("jobset/spot", "jsonpath={.status.replicatedJobsStatus[0].active}=1", ns)
    # What a trainer posts through the status server (the acceptance metrics): a 30 s checkpoint, 1000 samples/s.
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"status": {"trainerStatus": {"lastUpdatedTime": now, "metrics": [
        {"name": "checkpoint_write_ms", "value": "30000"},
        {"name": "samples_per_second", "value": "1000"},
    ]}}}
    kubectl("patch", "trainjob", "spot", "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(status))
    out = kubetrain("checkpoint-advice", "spot", "-n", ns, "--interruption-rate", "0.05",
                    "--every-steps", "600", "--samples-per-step", "1000", "--gpus-per-node", "8", "-o", "json")
    advice = json.loads(out.stdout)
    # 4 nodes at 0.05 per node-hour: one interruption per 5 h; 600 steps × 1000 samples at 1000/s = 600 s.
    assert advice["nodes"] == 4 and abs(advice["mtbfSeconds"] - 18000) < 1e-6, advice
    assert abs(advice["checkpointSeconds"] - 30) < 1e-9 and abs(advice["currentIntervalSeconds"] - 600) < 1e-9
    young = (2 * 30 * 18000) ** 0.5
    assert abs(advice["optimalIntervalSeconds"] / young - 1) < 0.05, advice
    lost = advice["lostGpuHoursPerWeek"]
    assert lost["optimal"] <= lost["current"], lost
    # A job that reported nothing: the flag is asked for by name.
    apply(trainjob("quiet", image="kwok.e2e/running:1", num_nodes=1), ns)
    proc = kubetrain("checkpoint-advice", "quiet", "-n", ns, "--interruption-rate", "0.05",
                     "--interval-seconds", "600", check=False)
    assert proc.returncode != 0 and "--checkpoint-seconds" in proc.stderr, proc.stderr
