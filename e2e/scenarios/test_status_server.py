"""The TrainJob status server (issue 16) on the real API server: a ServiceAccount token minted by the
TokenRequest API with the TrainJob's audience (what the TrainJobStatus plugin projects into trainer pods),
posted by Kubeflow's Python SDK (`kubeflow.trainer.update_trainjob_status`) and by our Rust reporter (from
`kubetrain collective train-demo`, rank 0 of a real CPU all-reduce run), and `status.trainerStatus` read back
with kubectl. Tokens of the wrong audience or
of another namespace are refused (403); a status the CRD refuses gets the API server's own message (422).
With `--trainjob-status` the operator renders the pod side (env, projected token, CA ConfigMap), and a token
minted for the audience in the pod's own volume is accepted. The last scenario checks the operator's platform metrics of the same issue (queue wait, admissions, outcomes,
GPU-seconds) on a TrainJob that is created suspended, admitted and completes.
"""

import datetime
import json
import os
import re
import subprocess
import sys

import pytest
import requests

from conftest import E2E_DIR as E2E, STATE, apply, eventually, get, kubectl, kubetrain, operator_metric, trainjob

pytestmark = pytest.mark.kubetrain

PORT = 19447 + int(os.environ.get("KUBETRAIN_E2E_PORT_OFFSET", "0"))
CA = STATE / "pki" / "ca.crt"


def audience(namespace, name):
    return f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def url(namespace, name):
    return f"https://127.0.0.1:{PORT}/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def token(namespace, aud=None, account="default"):
    """A token of `namespace`'s ServiceAccount from the TokenRequest API (as the kubelet gets one for a pod)."""
    eventually(lambda: kubectl("get", "serviceaccount", account, "-n", namespace, check=False).returncode == 0,
               f"ServiceAccount {namespace}/{account}")
    args = ["create", "token", account, "-n", namespace, "--duration", "10m"]
    if aud:
        args += ["--audience", aud]
    return kubectl(*args).strip()


def pod_env(tmp_path, namespace, name, tok):
    """The env the TrainJobStatus plugin gives a trainer container, with the token and CA as files."""
    token_file = tmp_path / "token"
    token_file.write_text(tok)
    return {
        "KUBEFLOW_TRAINER_SERVER_URL": url(namespace, name),
        "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(CA),
        "KUBEFLOW_TRAINER_SERVER_TOKEN": str(token_file),
    }


def trainer_status(namespace, name):
    return (get("trainjob", name, namespace).get("status") or {}).get("trainerStatus")


def post(namespace, name, tok, body):
    headers = {"Content-Type": "application/json"}
    if tok is not None:
        headers["Authorization"] = f"Bearer {tok}"
    return requests.post(url(namespace, name), json=body, headers=headers, verify=str(CA), timeout=10)


@pytest.fixture
def job(ns):
    # A pod image kwok keeps Running: the job is live while its trainer reports.
    apply(trainjob("progress", image="kwok.e2e/run:1", num_nodes=1), ns)
    return "progress"


SDK_CALL = """
import sys
from kubeflow.trainer import update_trainjob_status
ok = update_trainjob_status(progress_percent=40, estimated_remaining_seconds=600, metrics={"loss": 0.25, "step": 40})
sys.exit(0 if ok else 1)
"""


def test_python_sdk_update_lands_in_trainer_status(ns, job, tmp_path):
    written_before = operator_metric("kubetrain_status_updates_total", verdict="written")
    env = {**os.environ, **pod_env(tmp_path, ns, job, token(ns, audience(ns, job)))}
    # A separate process, as training code: the SDK reads the env once and throttles per process.
    proc = subprocess.run([sys.executable, "-c", SDK_CALL], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"update_trainjob_status returned False: {proc.stderr}"
    status = trainer_status(ns, job)
    assert status is not None, get("trainjob", job, ns).get("status")
    assert status["progressPercentage"] == 40
    assert status["estimatedRemainingSeconds"] == 600
    assert status["metrics"] == [{"name": "loss", "value": "0.25"}, {"name": "step", "value": "40"}]
    # metav1.Time: whole seconds, UTC.
    assert status["lastUpdatedTime"].endswith("Z") and "." not in status["lastUpdatedTime"], status
    managers = {(m["manager"], m.get("subresource")) for m in get("trainjob", job, ns, managed_fields=True)["metadata"]["managedFields"]}
    assert ("trainer-status", "status") in managers, managers
    # Our CLI (the TrainerClient's Kubernetes backend) shows what the SDK reported.
    view = json.loads(kubetrain("get", job, "-o", "json", "-n", ns).stdout)
    assert view["trainer_status"]["progress_percentage"] == 40, view
    assert view["trainer_status"]["metrics"] == [{"name": "loss", "value": "0.25"}, {"name": "step", "value": "40"}]
    line = next(l for l in kubetrain("get", job, "-n", ns).stdout.splitlines() if l.startswith("progress: "))
    assert line.startswith("progress: 40% done, about 10m left (reported ") and line.endswith(" ago); loss=0.25 step=40"), line
    assert operator_metric("kubetrain_status_updates_total", verdict="written") >= written_before + 1


def test_rust_reporter_from_train_demo_lands_in_trainer_status(ns, job, tmp_path):
    env = pod_env(tmp_path, ns, job, token(ns, audience(ns, job)))
    proc = kubetrain("collective", "train-demo", "--local-ranks", "2", "--steps", "30", env=env)
    assert "final progress reported" in proc.stderr, proc.stderr
    assert "failed" not in proc.stderr, proc.stderr
    status = trainer_status(ns, job)
    assert status is not None, get("trainjob", job, ns).get("status")
    assert status["progressPercentage"] == 100, status
    assert status["estimatedRemainingSeconds"] == 0, status
    metrics = {m["name"]: m["value"] for m in status["metrics"]}
    # The demo's own metrics, and the step under the name the operator reads for restarts (docs/operator.md).
    assert set(metrics) == {"loss", "step", "samples_per_second", "kubetrain.dev/step"}, metrics
    assert metrics["step"] == "30" and metrics["kubetrain.dev/step"] == "30", metrics
    # The loss the demo printed before its last step is the one reported.
    last_loss = [line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("step")][-1]
    assert metrics["loss"] == last_loss, (metrics, proc.stdout)
    assert float(metrics["samples_per_second"]) > 0
    assert status["lastUpdatedTime"].endswith("Z")


def test_tokens_that_may_not_update_this_trainjob_are_refused(ns, job):
    body = {"trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": "2026-12-01T00:00:00Z"}}
    forbidden = {"metadata": {}, "status": "Failure", "message": "Forbidden", "reason": "Forbidden", "code": 403}
    cases = {
        "no token": None,
        "not a token": "forged",
        "the API server's audience": token(ns),
        "another TrainJob's audience": token(ns, audience(ns, "other")),
        "a ServiceAccount of another namespace": token("default", audience(ns, job)),
    }
    for what, tok in cases.items():
        answer = post(ns, job, tok, body)
        assert (answer.status_code, answer.json()) == (403, forbidden), what
    assert trainer_status(ns, job) is None


def errors(message):
    """The errors of an API server `... is invalid: ` message, as a set (their order varies between calls)."""
    listed = message.split(" is invalid: ", 1)[1]
    if listed.startswith("["):
        listed = listed[1:-1]
    return set(re.split(r", (?=status\.|<nil>)", listed))


def api_server_errors(ns, job, trainer_status):
    """What the API server itself says about a status merge patch (as admin, with the CRD's validation)."""
    patch = json.dumps({"status": {"trainerStatus": trainer_status}})
    raw = kubectl("patch", "trainjob", job, "-n", ns, "--subresource=status", "--type=merge", "-p", patch,
                  "-v=0", check=False)
    assert raw.returncode != 0, f"the API server accepted {trainer_status}"
    # kubectl prints one error per line ("* ...") when there are several.
    text = raw.stderr.strip()
    lines = [line[2:] for line in text.splitlines() if line.startswith("* ")]
    return set(lines) if lines else {text.split(" is invalid: ", 1)[1]}


T = "2026-12-01T00:00:00Z"
INVALID = {
    "progress over 100": {"progressPercentage": 101, "lastUpdatedTime": T},
    "negative remaining time": {"estimatedRemainingSeconds": -1, "lastUpdatedTime": T},
    "no lastUpdatedTime": {"progressPercentage": 5},
    "several": {"progressPercentage": -1, "estimatedRemainingSeconds": -2},
    "metric value too long": {"metrics": [{"name": "loss", "value": "9" * 65}], "progressPercentage": 101},
    "metric without a name": {"metrics": [{"value": "1"}], "lastUpdatedTime": T},
    "257 metrics": {"metrics": [{"name": f"m{i}", "value": "1"} for i in range(257)], "lastUpdatedTime": T},
}


def test_invalid_status_gets_the_api_servers_message(ns, job):
    tok = token(ns, audience(ns, job))
    for what, status in INVALID.items():
        answer = post(ns, job, tok, {"trainerStatus": status})
        assert answer.status_code == 422, (what, answer.text)
        ours = answer.json()["message"]
        assert ours.startswith(f'TrainJob.trainer.kubeflow.org "{job}" is invalid: '), ours
        assert errors(ours) == api_server_errors(ns, job, status), what

    answer = post(ns, job, tok, "not a request")
    assert (answer.status_code, answer.json()["message"]) == (422, "Invalid payload")
    assert trainer_status(ns, job) is None


def test_missing_trainjob_and_bad_path(ns):
    tok = token(ns, audience(ns, "missing"))
    answer = post(ns, "missing", tok, {"trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": "2026-12-01T00:00:00Z"}})
    assert (answer.status_code, answer.json()["message"]) == (404, "Train job not found")
    answer = requests.get(url(ns, "missing"), verify=str(CA), timeout=10)
    assert (answer.status_code, answer.json()["message"]) == (404, "Not found")


def test_status_platform_metrics_queue_wait_outcome_gpu_seconds(ns):
    """Issue 16, item 3: a TrainJob created suspended, unsuspended (as Kueue would), then completing."""
    runtime = "torch-distributed"
    before = {
        "admissions": operator_metric("kubetrain_trainjob_admissions_total", namespace=ns),
        "waits": operator_metric("kubetrain_trainjob_queue_wait_seconds_count", namespace=ns),
        "outcomes": operator_metric("kubetrain_trainjob_outcomes_total", runtime=runtime, outcome="succeeded"),
        "gpu": operator_metric("kubetrain_trainjob_gpu_seconds_total", namespace=ns, outcome="succeeded"),
    }
    job = trainjob("metered", runtime=runtime, num_nodes=2, suspend=True,
                   trainer={"resourcesPerNode": {"limits": {"nvidia.com/gpu": 2}}})
    apply(job, ns)
    eventually(lambda: (((get("trainjob", "metered", ns).get("status") or {}).get("conditions")) or [None])[0],
               "the Suspended condition")
    kubectl("patch", "trainjob", "metered", "-n", ns, "--type=merge", "-p", '{"spec": {"suspend": false}}')
    eventually(lambda: any(c["type"] == "Complete" and c["status"] == "True"
                           for c in (get("trainjob", "metered", ns).get("status") or {}).get("conditions", [])),
               "the TrainJob to complete")
    eventually(lambda: operator_metric("kubetrain_trainjob_outcomes_total", runtime=runtime, outcome="succeeded")
               >= before["outcomes"] + 1, "the outcome to be counted")
    assert operator_metric("kubetrain_trainjob_admissions_total", namespace=ns) == before["admissions"] + 1
    assert operator_metric("kubetrain_trainjob_queue_wait_seconds_count", namespace=ns) == before["waits"] + 1
    # 2 nodes x 2 GPUs, from the resume to the completion (the conditions' times, whole seconds).
    conditions = {c["type"]: c for c in get("trainjob", "metered", ns)["status"]["conditions"]}
    seconds = (datetime.datetime.fromisoformat(conditions["Complete"]["lastTransitionTime"])
               - datetime.datetime.fromisoformat(conditions["Suspended"]["lastTransitionTime"])).total_seconds()
    assert conditions["Suspended"]["reason"] == "Resumed"
    gpu = operator_metric("kubetrain_trainjob_gpu_seconds_total", namespace=ns, outcome="succeeded")
    assert gpu == before["gpu"] + 4 * seconds, (gpu, seconds)


@pytest.fixture
def trainjob_status_operator():
    """kubetrain-operator restarted with --trainjob-status (upstream's TrainJobStatus gate), and back after."""
    cluster = str(E2E / "cluster.sh")

    def restart(*flags):
        subprocess.run([cluster, "operator", "stop", "kubetrain-operator"], check=True, capture_output=True)
        subprocess.run([cluster, "operator", "start", "kubetrain-operator", *flags], check=True, capture_output=True)

    restart("--trainjob-status", "--status-server-ca-file", str(CA))
    yield
    restart()


def test_status_trainjob_status_plugin_pods_get_a_token_the_server_accepts(ns, trainjob_status_operator):
    apply(trainjob("reporting", image="kwok.e2e/run:1", num_nodes=2), ns)
    pods = eventually(lambda: [p for p in get("pods", namespace=ns)["items"]
                               if p["metadata"]["labels"].get("jobset.sigs.k8s.io/jobset-name") == "reporting"]
                      if len(get("pods", namespace=ns)["items"]) >= 2 else None, "the trainer pods")
    aud = audience(ns, "reporting")
    for pod in pods:
        container = pod["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env["KUBEFLOW_TRAINER_SERVER_URL"] == (
            f"https://kubetrain-operator.kubeflow-system.svc:{PORT}"
            f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/reporting/status"), env
        assert env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] == "/var/run/secrets/kubeflow/trainer/ca.crt"
        assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == "/var/run/secrets/kubeflow/trainer/token"
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "kubeflow-trainer-token")
        sources = volume["projected"]["sources"]
        token_source = next(s["serviceAccountToken"] for s in sources if "serviceAccountToken" in s)
        assert token_source["audience"] == aud
        assert next(s["configMap"] for s in sources if "configMap" in s)["name"] == "reporting-tls-config"
    tls = get("configmap", "reporting-tls-config", ns)
    assert tls["data"]["ca.crt"] == CA.read_text()
    # What the kubelet would project for the pod's ServiceAccount: a token for that audience. The server
    # (reached on loopback instead of the Service) accepts it; the pod's own CA file verifies the server.
    account = pods[0]["spec"].get("serviceAccountName", "default")
    tok = token(ns, token_source["audience"], account=account)
    answer = post(ns, "reporting", tok, {"trainerStatus": {"progressPercentage": 3, "lastUpdatedTime": "2026-12-01T00:00:00Z"}})
    assert answer.status_code == 200, answer.text
    assert trainer_status(ns, "reporting")["progressPercentage"] == 3
