#!/usr/bin/env python3
"""Latency of the local runner's status endpoint (issue 16): `kubetrain run` of a 1-node TrainJob whose trainer
is this script, which POSTs 500 updates as the Python SDK sends them (`requests`, the run's token), one
after another, and prints the percentiles.

    cargo build --release -p kubetrain-cli
    ~/.cache/kubetrain-e2e/venv-kubeflow-0.5.0/bin/python benches/local-status-latency.py [target/release/kubetrain]

It plays the user (writes the TrainJob, runs it), and inside the run (`--trainer`) the trainer.
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REQUESTS = 500


def trainer():
    import requests

    url = os.environ["KUBEFLOW_TRAINER_SERVER_URL"]
    token = Path(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read_text().strip()
    session = requests.Session()
    latencies = []
    for i in range(REQUESTS):
        body = {"trainerStatus": {"progressPercentage": i * 100 // REQUESTS, "estimatedRemainingSeconds": REQUESTS - i,
                                  "metrics": [{"name": "loss", "value": str(1.0 / (i + 1))}],
                                  "lastUpdatedTime": "2026-12-01T00:00:00Z"}}
        start = time.perf_counter()
        answer = session.post(url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=5)
        latencies.append((time.perf_counter() - start) * 1000)
        assert answer.status_code == 200, answer.text
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]
    print(f"{REQUESTS} updates: p50 {pick(0.5):.2f} ms, p99 {pick(0.99):.2f} ms, max {latencies[-1]:.2f} ms")


def user():
    kubetrain = sys.argv[1] if len(sys.argv) > 1 else "target/release/kubetrain"
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.yaml"
        job.write_text(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: status-latency}\n"
            "spec:\n  runtimeRef: {name: torch-distributed}\n"
            f"  trainer: {{numNodes: 1, command: [{sys.executable}, {Path(__file__).resolve()}, --trainer]}}\n")
        out = subprocess.run([kubetrain, "run", "-f", str(job), "--ignore-capacity", "--run-dir", f"{tmp}/run"],
                             capture_output=True, text=True, check=True).stdout
        print(next(line.split("| ", 1)[1] for line in out.splitlines() if " updates: " in line))


if __name__ == "__main__":
    if sys.argv[1:] == ["--trainer"]:
        trainer()  # a KeyError here: this kubetrain serves no status endpoint (too old)
    else:
        user()
