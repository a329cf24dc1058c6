"""Switching from upstream (issue 31): kubetrain takes over the certificate Secret upstream's cert-controller
filled, with no failed admission call.

Runs on `e2e/cluster.sh up --install upstream-chart` (or `upstream-kustomize`), where kubetrain-operator runs as
upstream's Deployment would, with built-in certificate management (docs/e2e.md, "Upstream's chart, kubetrain's
image"). The scenario stops the operator, leaves the Secret and both webhook configurations as upstream's
cert-controller leaves them (an RSA CA with its PKCS#1 key, a serving certificate it signed, that CA in every
caBundle) and starts the operator again: it serves upstream's certificate at once, then, as the leader, replaces
the CA it cannot sign with by its own (added to the bundles before a certificate it signs is served), while
TrainJobs keep being admitted (server-side dry runs through both webhooks).
"""

import base64
import json
import os
import ssl
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import STATE, cluster, get, kubectl

pytestmark = [
    pytest.mark.kubetrain,
    pytest.mark.skipif(
        not (STATE / "install").exists() or not (STATE / "install").read_text().startswith("upstream-"),
        reason="needs e2e/cluster.sh up --install upstream-chart (or upstream-kustomize): built-in certificates",
    ),
]

OFFSET = int(os.environ.get("KUBETRAIN_E2E_PORT_OFFSET", "0"))
WEBHOOK = 19443 + OFFSET
NS = "kubeflow-system"
SECRET = "kubeflow-trainer-webhook-cert"
SERVICE = "kubeflow-trainer-controller-manager"
CONFIGS = [
    ("validatingwebhookconfiguration", "validator.trainer.kubeflow.org"),
    ("mutatingwebhookconfiguration", "defaulter.trainer.kubeflow.org"),
]
PROBE = """apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: switch-probe, namespace: default}
spec: {runtimeRef: {name: torch-distributed}, trainer: {image: kwok.e2e/succeed:1, numNodes: 1}}
"""


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def upstream_secret(folder):
    """What cert-controller writes: a CA with an RSA key in PKCS#1 PEM and a serving certificate it signed."""
    openssl("genrsa", "-traditional", "-out", "ca.key", "2048", cwd=folder)
    openssl("req", "-x509", "-new", "-key", "ca.key", "-subj", "/O=kubeflow-trainer/CN=kubeflow-trainer-ca",
            "-days", "3650", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", "-out", "ca.crt", cwd=folder)
    openssl("genrsa", "-traditional", "-out", "tls.key", "2048", cwd=folder)
    openssl("req", "-new", "-key", "tls.key", "-subj", f"/CN={SERVICE}.{NS}.svc", "-out", "tls.csr", cwd=folder)
    (folder / "ext").write_text(
        f"subjectAltName=DNS:{SERVICE}.{NS}.svc,DNS:{SERVICE}.{NS}.svc.cluster.local,IP:127.0.0.1\n"
        "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    )
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days",
            "365", "-extfile", "ext", "-out", "tls.crt", cwd=folder)
    return {key: (folder / key).read_text() for key in ("ca.crt", "ca.key", "tls.crt", "tls.key")}


def secret_pem(key):
    data = get("secret", SECRET, NS).get("data") or {}
    return base64.b64decode(data.get(key, "")).decode()


def der(pem):
    return ssl.PEM_cert_to_DER_cert(pem)


def bundle_ders():
    """The CA certificates in each webhook's caBundle."""
    out = []
    marker = "-----END CERTIFICATE-----"
    for kind, name in CONFIGS:
        for hook in get(kind, name)["webhooks"]:
            text = base64.b64decode(hook["clientConfig"].get("caBundle", "")).decode()
            out.append({der(b.strip() + "\n" + marker + "\n") for b in text.split(marker) if "BEGIN" in b})
    return out


def admitted():
    """A server-side dry run: both webhooks are called, nothing is stored."""
    proc = kubectl("create", "--dry-run=server", "-f", "-", input=PROBE, check=False)
    return proc.returncode == 0, proc.stderr.strip()


def test_kubetrain_takes_over_upstreams_certificate_secret_without_a_failed_admission():
    folder = Path(tempfile.mkdtemp())
    upstream = upstream_secret(folder)
    cluster("operator", "stop", "kubetrain-operator")
    secret = get("secret", SECRET, NS)
    secret["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in upstream.items()}
    kubectl("replace", "-f", "-", input=json.dumps(secret))
    for kind, name in CONFIGS:
        config = get(kind, name)
        for hook in config["webhooks"]:
            hook["clientConfig"]["caBundle"] = base64.b64encode(upstream["ca.crt"].encode()).decode()
        kubectl("replace", "-f", "-", input=json.dumps(config))

    # Ready means: serving the Secret's certificate, trusted by both configurations (upstream's, here).
    cluster("operator", "start", "kubetrain-operator")
    upstream_leaf = der(upstream["tls.crt"])
    results, before, after = [], 0, 0
    deadline = time.monotonic() + 90
    # Admissions while upstream's certificate is served, then until the Secret holds kubetrain's own CA and the
    # webhook serves a certificate it signed, then a few more.
    while time.monotonic() < deadline and after < 8:
        served = der(ssl.get_server_certificate(("127.0.0.1", WEBHOOK)))
        results.append(admitted())
        if served == upstream_leaf:
            before += 1
        elif secret_pem("ca.key").startswith("-----BEGIN PRIVATE KEY") and served == der(secret_pem("tls.crt")):
            after += 1
        time.sleep(0.2)
    failures = [message for ok, message in results if not ok]
    print(f"admissions: {len(results)}, {before} while upstream's certificate was served, {after} after the switch")
    assert not failures, f"{len(failures)} of {len(results)} admissions failed: {failures[:3]}"
    assert before >= 1, "no admission while upstream's certificate was served (the operator replaced it first)"
    assert after >= 8, f"the Secret still holds upstream's CA after 90 s (ca.key: {secret_pem('ca.key')[:40]!r})"
    assert secret_pem("ca.crt") != upstream["ca.crt"]
    for trusted in bundle_ders():
        # The new CA was added, upstream's kept (until it expires): both certificates verify during the switch.
        assert der(secret_pem("ca.crt")) in trusted and der(upstream["ca.crt"]) in trusted
