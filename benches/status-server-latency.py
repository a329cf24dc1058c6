#!/usr/bin/env python3
"""Latency of the TrainJob status server on the e2e cluster (issue 16): POSTs as the Python SDK sends them,
with a ServiceAccount token minted by the TokenRequest API, against kubetrain-operator's status port.

    e2e/cluster.sh up
    ~/.cache/kubetrain-e2e/venv-kubeflow-0.5.0/bin/python benches/status-server-latency.py [--requests 300]

Prints, for one client sending one update after another (each waits for its write: a TokenReview on the
first, then a status patch through the real API server) and for 16 clients flooding one TrainJob at once
(coalesced: one write in flight, the newest waiting), the latency percentiles, the rate, and the operator's
own counters (writes, superseded updates).
"""

import argparse
import concurrent.futures
import datetime
import json
import os
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("KUBETRAIN_E2E_STATE", "/tmp/kubetrain-e2e"))
OFFSET = int(os.environ.get("KUBETRAIN_E2E_PORT_OFFSET", "0"))
PORT = 19447 + OFFSET
METRICS = f"http://127.0.0.1:{18080 + OFFSET}/metrics"
CA = str(STATE / "pki" / "ca.crt")


def kubectl(*args, input=None):
    env_line = subprocess.run([str(REPO / "e2e" / "cluster.sh"), "env"], capture_output=True, text=True, check=True).stdout
    path = next(l.split("=", 1)[1].split(":", 1)[0] for l in env_line.splitlines() if l.startswith("export PATH="))
    return subprocess.run([f"{path}/kubectl", "--kubeconfig", str(STATE / "admin.kubeconfig"), *args],
                          input=input, capture_output=True, text=True, check=True).stdout


def metric(name, **labels):
    text = urllib.request.urlopen(METRICS, timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def body(i):
    return {"trainerStatus": {
        "lastUpdatedTime": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "progressPercentage": i % 101,
        "estimatedRemainingSeconds": 1000 - i % 1000,
        "metrics": [{"name": "loss", "value": f"{1 / (i + 1):.6f}"}, {"name": "step", "value": str(i)}],
    }}


def percentiles(samples):
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(q * len(s)))] * 1000
    return f"p50 {pick(0.5):.1f} ms, p90 {pick(0.9):.1f} ms, p99 {pick(0.99):.1f} ms, max {s[-1] * 1000:.1f} ms"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()

    ns = f"bench-status-{int(time.time())}"
    kubectl("create", "namespace", ns)
    try:
        job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": "bench"},
               "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"image": "kwok.e2e/run:1", "numNodes": 1}}}
        kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(job))
        for _ in range(100):
            if "default" in kubectl("get", "sa", "-n", ns, "-o", "name"):
                break
            time.sleep(0.2)
        aud = f"trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/bench/status"
        token = kubectl("create", "token", "default", "-n", ns, "--audience", aud, "--duration", "10m").strip()
        url = f"https://127.0.0.1:{PORT}/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/bench/status"
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

        session = requests.Session()
        first = time.perf_counter()
        assert session.post(url, json=body(0), headers=headers, verify=CA, timeout=10).status_code == 200
        first = time.perf_counter() - first
        written0 = metric("kubetrain_status_updates_total", verdict="written")
        samples = []
        t0 = time.perf_counter()
        for i in range(args.requests):
            t = time.perf_counter()
            r = session.post(url, json=body(i), headers=headers, verify=CA, timeout=10)
            samples.append(time.perf_counter() - t)
            assert r.status_code == 200, r.text
        wall = time.perf_counter() - t0
        print(f"first request (TokenReview + write, new TLS connection): {first * 1000:.1f} ms")
        print(f"1 client, {args.requests} sequential updates (keep-alive): {percentiles(samples)}; {args.requests / wall:.0f}/s")

        sup0 = metric("kubetrain_status_updates_superseded_total")
        writes0 = metric("kubetrain_status_updates_total", verdict="written")

        def client(c):
            s = requests.Session()
            out = []
            for i in range(args.requests // args.clients):
                t = time.perf_counter()
                r = s.post(url, json=body(c * 1000 + i), headers=headers, verify=CA, timeout=10)
                out.append(time.perf_counter() - t)
                assert r.status_code == 200, r.text
            return out

        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            flood = [x for xs in pool.map(client, range(args.clients)) for x in xs]
        wall = time.perf_counter() - t0
        superseded = metric("kubetrain_status_updates_superseded_total") - sup0
        answered = metric("kubetrain_status_updates_total", verdict="written") - writes0
        print(f"{args.clients} clients flooding one TrainJob, {len(flood)} updates: {percentiles(flood)}; "
              f"{len(flood) / wall:.0f}/s; {answered:.0f} answered 200, {superseded:.0f} superseded before "
              f"being written ({answered - superseded:.0f} status patches)")
        status = json.loads(kubectl("get", "trainjob", "bench", "-n", ns, "-o", "json"))["status"]["trainerStatus"]
        print(f"final trainerStatus: {json.dumps(status)}")
        assert written0 >= 1
    finally:
        kubectl("delete", "namespace", ns, "--wait=false")


if __name__ == "__main__":
    main()
