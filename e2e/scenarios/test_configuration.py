"""kubetrain-operator started the way upstream's chart starts its manager: `--config` with upstream's
`Configuration` file, built-in webhook certificates (no cert-manager, no hand-made Secret) and secure metrics.

The module swaps the harness's operator (flags, the harness's PKI) for a second instance on its own ports
(webhook/metrics/probe/status = harness ports + 200) started with a Configuration file, points both webhook
configurations at it without a caBundle (the instance must inject one), and restores the harness's operator
and webhooks afterwards (docs/e2e.md, "Configuration file scenario").
"""

import base64
import json
import os
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import E2E_DIR, STATE, TARGET, cluster, eventually, exists, get, kubectl, trainjob

pytestmark = pytest.mark.kubetrain

OFFSET = int(os.environ.get("KUBETRAIN_E2E_PORT_OFFSET", "0"))
WEBHOOK, METRICS, PROBE, STATUS = (p + 200 + OFFSET for p in (19443, 18080, 18081, 19447))
NS = "kubeflow-system"
SECRET = "kubeflow-trainer-webhook-cert"
CONFIGS = [
    ("validatingwebhookconfiguration", "validator.trainer.kubeflow.org"),
    ("mutatingwebhookconfiguration", "defaulter.trainer.kubeflow.org"),
]
# Serving certificates live 60 s (renewed 20 s before the end), the CA 180 s (renewed 60 s before the end).
VALIDITY = "60s"

CONFIG = f"""apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health:
  healthProbeBindAddress: 127.0.0.1:{PROBE}
  readinessEndpointName: readyz
  livenessEndpointName: healthz
metrics:
  bindAddress: 127.0.0.1:{METRICS}
  secureServing: true
  auth:
    enabled: true
webhook:
  port: {WEBHOOK}
  host: 127.0.0.1
leaderElection:
  leaderElect: true
  resourceName: trainer.kubeflow.org
  resourceNamespace: {NS}
  leaseDuration: 15s
  renewDeadline: 10s
  retryPeriod: 2s
certManagement:
  enable: true
  webhookServiceName: kubeflow-trainer-controller-manager
  webhookSecretName: {SECRET}
statusServer:
  port: {STATUS}
featureGates:
  TrainJobStatus: true
"""


def readyz():
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{PROBE}/readyz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


def scrape(token=None):
    """GET https://127.0.0.1:METRICS/metrics (self-signed certificate) with an optional bearer token."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"https://127.0.0.1:{METRICS}/metrics")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def secret_pem(key):
    data = get("secret", SECRET, NS).get("data") or {}
    return base64.b64decode(data.get(key, "")).decode()


def der_of(pem):
    return ssl.PEM_cert_to_DER_cert(pem) if pem else b""


def pem_blocks(text):
    marker = "-----END CERTIFICATE-----"
    return [block.strip() + "\n" + marker + "\n" for block in text.split(marker) if "BEGIN" in block]


def bundles():
    out = []
    for kind, name in CONFIGS:
        for hook in get(kind, name)["webhooks"]:
            out.append(base64.b64decode(hook["clientConfig"].get("caBundle", "")).decode())
    return out


def served_leaf():
    return der_of(ssl.get_server_certificate(("127.0.0.1", WEBHOOK)))


def repointed(config):
    """A webhook configuration (as read) calling our instance, with no caBundle and no server-set fields."""
    config = json.loads(json.dumps(config))
    for field in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
        config["metadata"].pop(field, None)
    for hook in config["webhooks"]:
        path = hook["clientConfig"].get("url", "").split("/", 3)[-1] if hook["clientConfig"].get("url") else ""
        if not path:
            path = hook["clientConfig"].get("service", {}).get("path", "").lstrip("/")
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{WEBHOOK}/{path}"}
    return config


@pytest.fixture(scope="module")
def operator():
    """The operator started with the Configuration file; yields (process, readiness bodies seen before ready)."""
    saved = [get(kind, name) for kind, name in CONFIGS]
    cluster("operator", "stop", "kubetrain-operator")
    kubectl("delete", "secret", SECRET, "-n", NS, "--ignore-not-found")
    validating, mutating = (repointed(c) for c in saved)
    kubectl("replace", "-f", "-", input=validating)
    # No mutating configuration yet: the instance must stay not-ready and say why.
    kubectl("delete", CONFIGS[1][0], CONFIGS[1][1])
    config = Path(tempfile.mkdtemp()) / "controller_manager_config.yaml"
    config.write_text(CONFIG)
    log = open(STATE / "logs" / "kubetrain-operator-config.log", "w")
    env = {
        **os.environ,
        "RUST_LOG": "info",
        "POD_NAME": "kubetrain-operator-config",
        "KUBETRAIN_CERT_VALIDITY": VALIDITY,
        "KUBETRAIN_CERT_EXTRA_NAMES": "127.0.0.1",
    }
    process = subprocess.Popen(
        [
            str(TARGET / "kubetrain-operator"),
            "--config",
            str(config),
            "--kubeconfig",
            str(STATE / "operator.kubeconfig"),
            "--log-format",
            "text",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        reasons = []

        def says_why():
            status, body = readyz()
            reasons.append((status, body))
            return status == 503 and "webhook-certificate (" in body and "MutatingWebhookConfiguration" in body

        eventually(says_why, "readyz to say why it is not ready")
        kubectl("create", "-f", "-", input=mutating)
        eventually(lambda: readyz()[0] == 200, "the operator to be ready with its own certificate")
        yield process, reasons
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
        kubectl("delete", "secret", SECRET, "-n", NS, "--ignore-not-found", check=False)
        # Recreated from the harness's manifests (server-side apply would meet our writes' field managers).
        for kind, name in CONFIGS:
            kubectl("delete", kind, name, "--ignore-not-found", check=False)
        cluster("operator", "webhooks", "kubetrain-operator")
        cluster("operator", "start", "kubetrain-operator")


def test_readyz_says_why_until_the_certificate_is_served_and_trusted(operator):
    _, reasons = operator
    not_ready = [body for status, body in reasons if status == 503]
    assert any("webhook-certificate (" in body for body in not_ready), reasons
    assert readyz() == (200, "ok\n")


def test_the_secret_holds_a_ca_and_a_serving_certificate_the_webhooks_trust(operator):
    ca, tls = secret_pem("ca.crt"), secret_pem("tls.crt")
    assert ca and tls and secret_pem("ca.key") and secret_pem("tls.key")
    for bundle in bundles():
        assert der_of(ca) in [der_of(b) for b in pem_blocks(bundle)], "every webhook trusts the Secret's CA"
    assert served_leaf() == der_of(tls), "the webhook serves the Secret's certificate"


def test_trainjobs_are_admitted_through_the_built_in_certificates(operator, ns):
    kubectl("apply", "-n", ns, "-f", "-", input=trainjob("admitted", image="kwok.e2e/running:1", num_nodes=1))
    eventually(lambda: get("trainjob", "admitted", ns), "the TrainJob to be stored")
    # Our validating webhook answers (a missing runtime is refused with its message).
    refused = kubectl("apply", "-n", ns, "-f", "-", input=trainjob("refused", runtime="no-such-runtime"), check=False)
    assert refused.returncode != 0 and "no-such-runtime" in refused.stderr, refused.stderr


def test_metrics_are_https_and_need_a_token_with_rbac(operator, ns):
    kubectl("apply", "--server-side", "-f", str(E2E_DIR.parent / "examples/manifests/deploy/metrics-reader.yaml"))
    for account in ("scraper", "stranger"):
        kubectl("create", "serviceaccount", account, "-n", ns)
    binding = f"{ns}-metrics-reader"
    kubectl("create", "clusterrolebinding", binding, "--clusterrole", "kubetrain-metrics-reader",
            "--serviceaccount", f"{ns}:scraper")
    try:
        scraper = kubectl("create", "token", "scraper", "-n", ns).strip()
        stranger = kubectl("create", "token", "stranger", "-n", ns).strip()
        assert scrape()[0] == 401
        assert scrape("not-a-token")[0] == 401
        status, body = scrape(stranger)
        assert status == 403 and f"system:serviceaccount:{ns}:stranger" in body, body
        # RBAC changes reach the API server's authorizer at once; the operator caches verdicts 10 s at most.
        status, body = eventually(lambda: (lambda r: r if r[0] == 200 else None)(scrape(scraper)), "a 200 scrape")
        assert "kubetrain_trainjob_reconcile" in body
    finally:
        kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found", check=False)


def test_certificates_rotate_while_trainjobs_are_created_without_a_failed_admission(operator, ns):
    first_ca, first_tls = secret_pem("ca.crt"), secret_pem("tls.crt")
    seen_tls, seen_ca, served = {first_tls}, {first_ca}, {served_leaf()}
    created = failed = 0
    failures = []
    # The CA (180 s, renewed in its last 60 s) was issued at start-up: within about two minutes it is renewed
    # once and the serving certificate (60 s, renewed in its last 20 s) about three times.
    deadline = time.monotonic() + 200
    while time.monotonic() < deadline and (len(seen_ca) < 2 or len(seen_tls) < 3):
        name = f"rot-{created + failed}"
        proc = kubectl("create", "-n", ns, "-f", "-", input=trainjob(name, image="kwok.e2e/succeed:1", num_nodes=1),
                       check=False)
        if proc.returncode == 0:
            created += 1
            kubectl("delete", "trainjob", name, "-n", ns, "--wait=false", check=False)
        else:
            failed += 1
            failures.append(proc.stderr.strip())
        seen_tls.add(secret_pem("tls.crt"))
        seen_ca.add(secret_pem("ca.crt"))
        served.add(served_leaf())
    print(f"rotation: {created} TrainJobs admitted, {failed} failed; {len(seen_tls)} serving certificates, "
          f"{len(seen_ca)} CAs, {len(served)} served")
    assert failed == 0, failures[:3]
    assert len(seen_tls) >= 3, "the serving certificate rotated twice"
    assert len(seen_ca) >= 2, "the CA rotated"
    assert len(served) >= 3, "the webhook server picked up each certificate without a restart"
    assert operator[0].poll() is None, "no restart"
    assert readyz()[0] == 200


def test_trainjob_status_pods_trust_the_secrets_current_ca(operator, ns):
    """TrainJobStatus with built-in certificates: `<job>-tls-config` holds the certificate Secret's CA, as
    upstream's plugin copies it, and a renewed CA (the rotation above) reaches new TrainJobs with no restart."""
    kubectl("apply", "-n", ns, "-f", "-", input=trainjob("trusting", image="kwok.e2e/running:1", num_nodes=1))

    def same_ca():
        if not exists("configmap", "trusting-tls-config", ns):
            return None
        ca = get("configmap", "trusting-tls-config", ns).get("data", {}).get("ca.crt")
        return ca if ca and ca == secret_pem("ca.crt") else None

    ca = eventually(same_ca, "the TrainJob's tls-config to hold the Secret's CA")
    assert "BEGIN CERTIFICATE" in ca
    assert operator[0].poll() is None, "no restart"


def test_upstreams_own_configuration_files_pass_check_config():
    """The kustomize base from upstream's Go module (the harness builds upstream from it)."""
    cache = Path(os.environ.get("GOMODCACHE", Path.home() / "go/pkg/mod"))
    path = cache / "github.com/kubeflow/trainer/v2@v2.3.0/manifests/base/manager/controller_manager_config.yaml"
    if not path.exists():
        pytest.skip(f"{path} is not in the Go module cache")
    proc = subprocess.run([str(TARGET / "kubetrain-operator"), "--config", str(path), "--check-config"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "webhookSecretName: kubeflow-trainer-webhook-cert" in proc.stdout
    bad = Path(tempfile.mkdtemp()) / "bad.yaml"
    bad.write_text("kind: Configuration\nwebhook: {port: 0}\nmetrics: {secureServing: maybe}\n")
    proc = subprocess.run([str(TARGET / "kubetrain-operator"), "--config", str(bad), "--check-config"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 3, proc.stderr
    assert "webhook.port: must be between 1 and 65535" in proc.stderr
