#!/usr/bin/env python3
"""Latency of the local runner's status endpoint (issue 16): `kubetrain run` of a 1-node TrainJob whose trainer
is this script, which POSTs 500 updates as the Python SDK sends them (`requests`, the run's token), one
after another, and prints the percentiles.

    cargo build --release -p kubetrain-cli
    ~/.cache/kubetrain-e2e/venv-kubeflow-0.5.0/bin/python benches/local-status-latency.py [target/release/kubetrain] [--slow N]

With `--slow N` (issue 38) a thread in the trainer keeps N slow-loris connections open to the endpoint the
whole time: each sends the start of a request head, then a byte every 0.5 s, and is reopened as soon as the
endpoint closes it. Before issue 38, N = 64 starved the endpoint (every post waited seconds, or failed).

It plays the user (writes the TrainJob, runs it), and inside the run (`--trainer`) the trainer.
"""

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

REQUESTS = 500


def slow_loris(url, count):
    """Keeps `count` connections trickling a request head that never ends; returns a counter of reopenings."""
    parsed = urlparse(url)
    head = f"POST {parsed.path} HTTP/1.1\r\nHost: {parsed.netloc}\r\nX-Slow: ".encode()
    reopened = [0]

    def connect():
        sock = socket.create_connection((parsed.hostname, parsed.port))
        sock.sendall(head)
        return sock

    def loop():
        socks = [connect() for _ in range(count)]
        while True:
            for i, sock in enumerate(socks):
                try:
                    sock.sendall(b"x")
                except OSError:
                    sock.close()
                    socks[i] = connect()
                    reopened[0] += 1
            time.sleep(0.5)

    threading.Thread(target=loop, daemon=True).start()
    return reopened


def trainer(slow):
    import requests

    url = os.environ["KUBEFLOW_TRAINER_SERVER_URL"]
    token = Path(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read_text().strip()
    reopened = slow_loris(url, slow) if slow else None
    if slow:
        time.sleep(1)  # the slow connections are open before the first post
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
    behind = f" behind {slow} slow connections ({reopened[0]} closed by the endpoint)" if slow else ""
    print(f"{REQUESTS} updates{behind}: p50 {pick(0.5):.2f} ms, p99 {pick(0.99):.2f} ms, max {latencies[-1]:.2f} ms")


def user():
    args = sys.argv[1:]
    slow = 0
    if "--slow" in args:
        i = args.index("--slow")
        slow = int(args[i + 1])
        del args[i : i + 2]
    kubetrain = args[0] if args else "target/release/kubetrain"
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(tmp) / "job.yaml"
        job.write_text(
            "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: status-latency}\n"
            "spec:\n  runtimeRef: {name: torch-distributed}\n"
            f"  trainer: {{numNodes: 1, command: [{sys.executable}, {Path(__file__).resolve()}, --trainer, '{slow}']}}\n")
        out = subprocess.run([kubetrain, "run", "-f", str(job), "--ignore-capacity", "--run-dir", f"{tmp}/run"],
                             capture_output=True, text=True, check=True).stdout
        print(next(line.split("| ", 1)[1] for line in out.splitlines() if " p50 " in line))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--trainer"]:
        trainer(int(sys.argv[2]) if len(sys.argv) > 2 else 0)  # a KeyError: this kubetrain serves no endpoint
    else:
        user()
