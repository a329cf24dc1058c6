"""Shared fixtures of the e2e scenarios: a kubectl wrapper, fresh namespaces, waiting on the cluster's state.

Every scenario asserts the cluster's state (objects, conditions, owner references), never logs. Waiting is on
events: `kubectl wait` (a watch) or, where kubectl cannot express the condition, a poll of the object with a
deadline whose failure message says what was expected and what was last seen.
"""

import json
import os
import ssl
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

E2E_DIR = Path(__file__).resolve().parent.parent
REPO_DIR = E2E_DIR.parent
STATE = Path(os.environ.get("KUBETRAIN_E2E_STATE", "/tmp/kubetrain-e2e"))
KUBECONFIG = STATE / "admin.kubeconfig"
PROFILE = os.environ.get("KUBETRAIN_E2E_PROFILE", "debug")
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", REPO_DIR / "target")) / PROFILE
KUBETRAIN = TARGET / "kubetrain"

# Default wait for a cluster-side change (a controller reacting). Generous: 2 CPU cores run ten processes.
TIMEOUT = int(os.environ.get("KUBETRAIN_E2E_TIMEOUT", "120"))


def cluster_operator():
    try:
        return (STATE / "operator").read_text().strip()
    except FileNotFoundError:
        return None


def pytest_collection_modifyitems(config, items):
    """Marks: `operator_kubetrain` scenarios need our operator; without a cluster every scenario fails loudly."""
    operator = cluster_operator()
    if operator is None and os.environ.get("CI"):
        raise pytest.UsageError(f"CI is set but no e2e cluster is up ({STATE}/operator missing): run e2e/cluster.sh up")
    for item in items:
        if operator is None:
            item.add_marker(pytest.mark.skip(reason=f"no e2e cluster (no {STATE}/operator); run e2e/cluster.sh up"))
        elif "kubetrain" in item.keywords and operator != "kubetrain":
            item.add_marker(pytest.mark.skip(reason=f"needs --operator kubetrain (cluster runs {operator})"))


def pytest_terminal_summary(terminalreporter):
    """The closing line e2e/run.sh and CI read: `N passed, M failed` (skips after it)."""
    stats = terminalreporter.stats
    passed = len(stats.get("passed", []))
    failed = len(stats.get("failed", [])) + len(stats.get("error", []))
    skipped = len(stats.get("skipped", []))
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    terminalreporter.write_line("")
    terminalreporter.write_line(line)
    # e2e/run.sh prints it again as the very last line, after pytest's own summary.
    (STATE / "e2e-summary").write_text(line + "\n")


class KubectlError(Exception):
    def __init__(self, args, proc):
        self.stderr = proc.stderr
        self.stdout = proc.stdout
        super().__init__(f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")


def find_kubectl():
    for line in subprocess.run(
        [str(E2E_DIR / "cluster.sh"), "env"], capture_output=True, text=True, check=True
    ).stdout.splitlines():
        if line.startswith("export PATH="):
            return str(Path(line.split("=", 1)[1].split(":", 1)[0]) / "kubectl")
    raise RuntimeError("cluster.sh env printed no PATH")


_KUBECTL = None


def kubectl(*args, input=None, check=True, kubeconfig=KUBECONFIG, timeout=TIMEOUT + 30):
    """Runs kubectl against the e2e cluster; returns stdout, raises KubectlError on failure when `check`."""
    global _KUBECTL
    if _KUBECTL is None:
        _KUBECTL = find_kubectl()
    if isinstance(input, (dict, list)):
        input = yaml.safe_dump_all(input if isinstance(input, list) else [input])
    proc = subprocess.run(
        [_KUBECTL, "--kubeconfig", str(kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise KubectlError(args, proc)
    return proc.stdout if check else proc


def get(kind, name=None, namespace=None, selector=None, managed_fields=False):
    args = ["get", kind, "-o", "json"]
    if managed_fields:
        args.append("--show-managed-fields")
    if name:
        args.insert(2, name)
    if namespace:
        args += ["-n", namespace]
    if selector:
        args += ["-l", selector]
    return json.loads(kubectl(*args))


def exists(kind, name, namespace=None):
    args = ["get", kind, name, "--ignore-not-found", "-o", "name"]
    if namespace:
        args += ["-n", namespace]
    return bool(kubectl(*args).strip())


def wait(resource, condition, namespace=None, timeout=TIMEOUT):
    """`kubectl wait --for=<condition>`: a watch, returns as soon as the condition holds. kubectl fails at once
    on an object that does not exist yet, so first wait for it to be created (a controller's job)."""
    if condition != "delete":
        kind, name = resource.split("/", 1)
        eventually(lambda: exists(kind, name, namespace), f"{resource} to be created", timeout=timeout)
    args = ["wait", resource, f"--for={condition}", f"--timeout={timeout}s"]
    if namespace:
        args += ["-n", namespace]
    kubectl(*args, timeout=timeout + 30)


def eventually(check, what, timeout=TIMEOUT):
    """Re-reads the cluster until `check()` returns a truthy value; fails naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            last = check()
        except KubectlError as e:
            last = e
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")
        time.sleep(0.25)


def condition(obj, type_):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


@pytest.fixture
def ns(request):
    """A fresh namespace per scenario, deleted afterwards (its objects are garbage-collected with it)."""
    name = f"e2e-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")[:63].strip("-")
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


def trainjob(name, runtime="torch-distributed", image="kwok.e2e/succeed:1", num_nodes=2, **spec):
    """A TrainJob manifest; `image` picks what kwok does with its pods (see e2e/kwok-stages.yaml)."""
    trainer = {"image": image, "numNodes": num_nodes}
    trainer.update(spec.pop("trainer", {}))
    body = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer, **spec},
    }
    return body


def torch_runtime(name, pod_group_policy=None, backoff_limit=None):
    """A namespaced torch TrainingRuntime: one `node` replicated job, optionally a gang or a backoff limit."""
    job_spec = {"template": {"spec": {"containers": [{"name": "node", "image": "pytorch/pytorch:2.7.1"}]}}}
    if backoff_limit is not None:
        job_spec["backoffLimit"] = backoff_limit
    spec = {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                            "spec": job_spec,
                        },
                    }
                ]
            }
        },
    }
    if pod_group_policy:
        spec["podGroupPolicy"] = pod_group_policy
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name},
        "spec": spec,
    }


def namespaced(job):
    job["spec"]["runtimeRef"].update({"kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"})
    return job


def apply(obj, namespace, server_side=False):
    args = ["apply", "-n", namespace, "-f", "-"]
    if server_side:
        args.insert(1, "--server-side")
    return kubectl(*args, input=obj)


def operator_metric(name, **labels):
    """A sample of kubetrain-operator's /metrics (0 when absent), e.g. admission verdicts."""
    port = 18080 + int(os.environ.get("KUBETRAIN_E2E_PORT_OFFSET", "0"))
    # HTTPS (self-signed) where the install's Configuration says secureServing (e2e/lib/upstream_chart.sh).
    scheme = (STATE / "metrics-scheme").read_text().strip() if (STATE / "metrics-scheme").exists() else "http"
    context = None
    if scheme == "https":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    text = urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/metrics", timeout=10, context=context).read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def kubetrain(*args, check=True, env=None, timeout=TIMEOUT + 30):
    """Runs the `kubetrain` CLI with the admin kubeconfig."""
    full_env = {**os.environ, "KUBECONFIG": str(KUBECONFIG), **(env or {})}
    proc = subprocess.run([str(KUBETRAIN), *args], capture_output=True, text=True, env=full_env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubetrain {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def cluster(*args, env=None):
    """Runs `e2e/cluster.sh ARGS` (e.g. `operator stop kubetrain-operator`) with `env` added to ours (the
    operator takes every flag from the environment too); fails with the script's error output."""
    proc = subprocess.run([str(E2E_DIR / "cluster.sh"), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise AssertionError(f"cluster.sh {' '.join(args)}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
