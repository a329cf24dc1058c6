"""A real Prometheus (built from github.com/prometheus/prometheus by `e2e/build.sh prometheus`) scrapes
kubetrain-operator over HTTPS with a ServiceAccount token, as the chart's ServiceMonitor does, and is refused
without one (401) or with the token of an account the ClusterRole kubetrain-metrics-reader is not bound to
(403). After a few TrainJobs ran (completed, failed, admitted by Kueue, resumed by hand, preempted, reporting
progress to the status server), every alert and dashboard expression of charts/kubetrain is asked of
Prometheus's HTTP API: the ones returning no series are listed (and fail the scenario), except panels whose
dashboard says they need kube-state-metrics or Kueue's metrics (neither runs here).

The operator is restarted for the module with a Configuration file (`metrics.secureServing: true`,
`metrics.auth.enabled: true`) and back to its usual flags afterwards. Prometheus also scrapes the
kube-apiserver (the KubetrainWebhook* alerts read its admission webhook metrics) and loads the chart's
alerts as a rule file. The full list of queries with their series counts is written to
$KUBETRAIN_E2E_STATE/prometheus/queries.json.
"""

import datetime
import json
import os
import shutil
import subprocess
import time

import pytest
import requests
import yaml

from conftest import (
    E2E_DIR,
    KubectlError,
    REPO_DIR,
    STATE,
    apply,
    cluster,
    eventually,
    get,
    kubectl,
    namespaced,
    torch_runtime,
    trainjob,
    wait,
)
from test_kueue import queue_setup

pytestmark = pytest.mark.kubetrain

OFFSET = int(os.environ.get("KUBETRAIN_E2E_PORT_OFFSET", "0"))
API_PORT = 16443 + OFFSET
WEBHOOK_PORT = 19443 + OFFSET
METRICS_PORT = 18080 + OFFSET
STATUS_PORT = 19447 + OFFSET
PROMETHEUS_PORT = 19090 + OFFSET
PKI = STATE / "pki"
HOME = STATE / "prometheus"
PROM = f"http://127.0.0.1:{PROMETHEUS_PORT}"
# Per run: a namespace of an earlier run may still be terminating.
MONITORING = f"e2e-monitoring-{os.getpid()}"
OPT_IN = "kubetrain.io/trainer-status-metrics"


def prometheus_bin():
    """The cached Prometheus folder; fails (no skip) with the command that builds it."""
    out = subprocess.run(["bash", "-c", f"source {E2E_DIR}/lib/common.sh && PROMETHEUS_BIN"],
                         capture_output=True, text=True, check=True).stdout.strip()
    missing = [b for b in ("prometheus", "promql-series") if not os.access(f"{out}/{b}", os.X_OK)]
    if missing:
        pytest.fail(f"no {', '.join(missing)} in {out}: run e2e/build.sh prometheus")
    return out


def query(expr):
    r = requests.get(f"{PROM}/api/v1/query", params={"query": expr}, timeout=30)
    body = r.json()
    assert body.get("status") == "success", f"{expr}: {body}"
    return body["data"]["result"]


def targets():
    body = requests.get(f"{PROM}/api/v1/targets", timeout=10).json()
    return {t["labels"]["job"]: t for t in body["data"]["activeTargets"]}


def scraped(job):
    """The target of `job` once Prometheus scraped it at least once."""
    t = targets().get(job)
    return t if t and t["health"] != "unknown" else None


def secure_config():
    """The Configuration the operator restarts with: the chart's (with --install helm) or defaults, plus
    HTTPS metrics behind TokenReview and SubjectAccessReview."""
    base = STATE / "config.yaml"
    config = yaml.safe_load(base.read_text()) if base.exists() else {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1", "kind": "Configuration"}
    config.setdefault("metrics", {}).update({"secureServing": True, "auth": {"enabled": True}})
    path = HOME / "operator-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def service_account_token(name, bind):
    kubectl("create", "serviceaccount", name, "-n", MONITORING)
    if bind:
        kubectl("create", "clusterrolebinding", f"{MONITORING}-{name}", "--clusterrole=kubetrain-metrics-reader",
                f"--serviceaccount={MONITORING}:{name}")
    path = HOME / f"{name}.token"
    path.write_text(kubectl("create", "token", name, "-n", MONITORING, "--duration", "2h").strip())
    return path


def scrape_config(reader_token, stranger_token):
    operator = {"scheme": "https", "metrics_path": "/metrics",
                # The operator's metrics certificate is self-signed at start (controller-runtime's behaviour
                # without a metrics certificate directory), so there is no CA to verify it with.
                "tls_config": {"insecure_skip_verify": True},
                "static_configs": [{"targets": [f"127.0.0.1:{METRICS_PORT}"]}]}
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(REPO_DIR / "charts/kubetrain/files/alerts.yaml")],
        "scrape_configs": [
            {"job_name": "kubetrain-operator", **operator,
             "authorization": {"type": "Bearer", "credentials_file": str(reader_token)}},
            {"job_name": "kubetrain-operator-no-token", **operator, "scrape_interval": "2s"},
            {"job_name": "kubetrain-operator-not-a-reader", **operator, "scrape_interval": "2s",
             "authorization": {"type": "Bearer", "credentials_file": str(stranger_token)}},
            # Only its admission webhook series are kept (the KubetrainWebhook* alerts read them).
            {"job_name": "kube-apiserver", "scheme": "https", "scrape_interval": "5s", "scrape_timeout": "5s",
             "tls_config": {"ca_file": str(PKI / "ca.crt"), "cert_file": str(PKI / "admin.crt"),
                            "key_file": str(PKI / "admin.key")},
             "static_configs": [{"targets": [f"127.0.0.1:{API_PORT}"]}],
             "metric_relabel_configs": [{"source_labels": ["__name__"], "regex": "apiserver_admission_webhook_.*",
                                         "action": "keep"}]},
        ],
    }


def done(namespace, name, kind):
    return eventually(lambda: any(c["type"] == kind and c["status"] == "True"
                                  for c in (get("trainjob", name, namespace).get("status") or {}).get("conditions", [])),
                      f"TrainJob {namespace}/{name} {kind}")


def opt_in_runtime(name):
    runtime = torch_runtime(name)
    runtime["spec"]["template"]["metadata"] = {"annotations": {OPT_IN: "true"}}
    return runtime


def status_token(namespace, name):
    aud = f"trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
    eventually(lambda: kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode == 0,
               f"ServiceAccount {namespace}/default")
    return kubectl("create", "token", "default", "-n", namespace, "--duration", "10m", "--audience", aud).strip()


def post_status(namespace, name, token, body):
    url = (f"https://127.0.0.1:{STATUS_PORT}/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}"
           f"/trainjobs/{name}/status")
    return requests.post(url, json=body, headers={"Authorization": f"Bearer {token}"},
                         verify=str(PKI / "ca.crt"), timeout=10)


def workload(ns):
    """A few TrainJobs, each producing the series some panel or alert reads."""
    # Completed, with GPUs, created suspended and resumed by hand: queue wait, a `manual` admission,
    # outcome succeeded, GPU-seconds.
    apply(trainjob("resumed", num_nodes=2, suspend=True,
                   trainer={"resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}), ns)
    eventually(lambda: (get("trainjob", "resumed", ns).get("status") or {}).get("conditions"), "resumed: Suspended")
    kubectl("patch", "trainjob", "resumed", "-n", ns, "--type=merge", "-p", '{"spec": {"suspend": false}}')
    # Admitted by Kueue from a LocalQueue: a `kueue` admission with a queue label.
    kubectl("apply", "--server-side", "-f", "-", input=queue_setup(ns, gpus=8))
    wait(f"clusterqueue/{ns}-cq", "condition=Active")
    apply(trainjob("queued", num_nodes=1, image="kwok.e2e/succeed:1",
                   trainer={"resourcesPerNode": {"requests": {"cpu": "1", "nvidia.com/gpu": 1},
                                                 "limits": {"nvidia.com/gpu": 1}}},
                   metadata={"labels": {"kueue.x-k8s.io/queue-name": "team"}}), ns)
    # Failed at its first pod: outcome failed (reason FailedJobs).
    apply(torch_runtime("torch-no-retry", backoff_limit=0), ns)
    apply(namespaced(trainjob("broken", runtime="torch-no-retry", image="kwok.e2e/fail:1", num_nodes=1)), ns)
    # Resumed, then suspended again while running (Suspended False -> True: a preemption).
    apply(trainjob("preempted", num_nodes=1, image="kwok.e2e/run:1", suspend=True), ns)
    eventually(lambda: (get("trainjob", "preempted", ns).get("status") or {}).get("conditions"),
               "preempted: Suspended")
    kubectl("patch", "trainjob", "preempted", "-n", ns, "--type=merge", "-p", '{"spec": {"suspend": false}}')
    eventually(lambda: any(c["type"] == "Suspended" and c["status"] == "False"
                           for c in get("trainjob", "preempted", ns)["status"]["conditions"]), "preempted: resumed")
    kubectl("patch", "trainjob", "preempted", "-n", ns, "--type=merge", "-p", '{"spec": {"suspend": true}}')
    # Running on a runtime that opts in to the trainer-status gauges, reporting progress (it keeps running
    # while the queries are asked: a finished TrainJob's gauges are removed).
    apply(opt_in_runtime("torch-progress"), ns)
    apply(namespaced(trainjob("reporting", runtime="torch-progress", image="kwok.e2e/run:1", num_nodes=1)), ns)
    token = status_token(ns, "reporting")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"trainerStatus": {"progressPercentage": 40, "estimatedRemainingSeconds": 600, "lastUpdatedTime": now,
                              "metrics": [{"name": "loss", "value": "0.25"},
                                          {"name": "samples_per_second", "value": "812"}]}}
    eventually(lambda: post_status(ns, "reporting", token, body).status_code == 200, "the status update accepted")
    # A token of the wrong audience: the status server refuses it (verdict forbidden).
    wrong = kubectl("create", "token", "default", "-n", ns, "--duration", "10m").strip()
    assert post_status(ns, "reporting", wrong, body).status_code == 403
    # An admission review that is not JSON: the webhook answers 400 (verdict bad_request).
    r = requests.post(f"https://127.0.0.1:{WEBHOOK_PORT}/validate-trainer-kubeflow-org-v1alpha1-trainjob",
                      data=b"not an AdmissionReview", headers={"Content-Type": "application/json"},
                      verify=str(PKI / "ca.crt"), timeout=10)
    assert r.status_code == 400, r.text
    done(ns, "resumed", "Complete")
    done(ns, "queued", "Complete")
    done(ns, "broken", "Failed")
    eventually(lambda: query(f'kubetrain_trainjob_progress_percent{{namespace="{ns}"}}'),
               "Prometheus to scrape the progress gauge")


@pytest.fixture(scope="module")
def prometheus():
    bin_dir = prometheus_bin()
    shutil.rmtree(HOME, ignore_errors=True)
    HOME.mkdir(parents=True)
    kubectl("create", "namespace", MONITORING)
    ns = f"e2e-prometheus-{os.getpid()}"
    kubectl("create", "namespace", ns)
    proc = log = None
    try:
        # The kustomize install applies no metrics-reader ClusterRole (the chart does): apply the manifest's.
        if kubectl("get", "clusterrole", "kubetrain-metrics-reader", "--ignore-not-found", "-o", "name").strip() == "":
            kubectl("apply", "--server-side", "-f", str(REPO_DIR / "examples/manifests/deploy/metrics-reader.yaml"))
        reader = service_account_token("prometheus", bind=True)
        stranger = service_account_token("stranger", bind=False)

        # While the operator is down its webhooks cannot be called: the API server counts the failure
        # (apiserver_admission_webhook_rejection_count{error_type="calling_webhook_error"}).
        cluster("operator", "stop", "kubetrain-operator")
        with pytest.raises(KubectlError, match="failed calling webhook"):
            apply(trainjob("refused"), ns)
        cluster("operator", "start", "kubetrain-operator",
                env={"KUBETRAIN_E2E_OPERATOR_CONFIG": str(secure_config())})

        config = HOME / "prometheus.yml"
        config.write_text(yaml.safe_dump(scrape_config(reader, stranger)))
        log = open(HOME / "prometheus.log", "w")
        proc = subprocess.Popen(
            [f"{bin_dir}/prometheus", f"--config.file={config}", f"--storage.tsdb.path={HOME / 'data'}",
             f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def ready():
            assert proc.poll() is None, f"prometheus exited {proc.returncode}: see {HOME / 'prometheus.log'}"
            try:
                return requests.get(f"{PROM}/-/ready", timeout=2).status_code == 200
            except requests.ConnectionError:
                return False

        eventually(ready, "Prometheus to be ready")
        for job in ("kubetrain-operator", "kubetrain-operator-no-token", "kubetrain-operator-not-a-reader",
                    "kube-apiserver"):
            eventually(lambda: scraped(job), f"a first scrape of {job}")
        workload(ns)
        yield {"namespace": ns, "bin": bin_dir}
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if log is not None:
            log.close()
        kubectl("delete", "namespace", ns, MONITORING, "--wait=false", check=False)
        kubectl("delete", "clusterqueue", f"{ns}-cq", "--wait=false", check=False)
        kubectl("delete", "resourceflavor", f"{ns}-gpu", "--wait=false", check=False)
        kubectl("delete", "clusterrolebinding", f"{MONITORING}-prometheus", check=False)
        cluster("operator", "stop", "kubetrain-operator")
        cluster("operator", "start", "kubetrain-operator")


def test_prometheus_scrapes_the_operator_over_https_with_a_token(prometheus):
    target = targets()["kubetrain-operator"]
    assert target["health"] == "up", target
    assert target["scrapeUrl"].startswith("https://"), target
    assert query('up{job="kubetrain-operator"}')[0]["value"][1] == "1"
    # Plain HTTP gets no metrics: the port speaks TLS only.
    try:
        plain = requests.get(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=5)
        assert plain.status_code != 200 and "kubetrain_" not in plain.text, plain.text[:200]
    except requests.ConnectionError:
        pass


def test_scrapes_without_a_token_or_without_the_cluster_role_are_refused(prometheus):
    # A first scrape was made before the fixture's workload: these are settled.
    no_token = targets()["kubetrain-operator-no-token"]
    assert no_token["health"] == "down", no_token
    assert "401" in no_token["lastError"], no_token
    stranger = targets()["kubetrain-operator-not-a-reader"]
    assert stranger["health"] == "down", stranger
    assert "403" in stranger["lastError"], stranger
    assert query('up{job="kubetrain-operator-no-token"}')[0]["value"][1] == "0"


def test_the_webhook_certificate_expiry_is_exported(prometheus):
    (sample,) = query("kubetrain_webhook_certificate_expiry_timestamp_seconds")
    out = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", str(PKI / "webhook-certs" / "tls.crt")],
                         capture_output=True, text=True, check=True).stdout
    # notAfter=Jan  4 22:10:31 2027 GMT
    not_after = datetime.datetime.strptime(out.split("=", 1)[1].strip(), "%b %d %H:%M:%S %Y %Z")
    expected = not_after.replace(tzinfo=datetime.timezone.utc).timestamp()
    assert float(sample["value"][1]) == expected, (sample, out)


def test_the_charts_alert_rules_load_and_evaluate(prometheus):
    def groups():
        body = requests.get(f"{PROM}/api/v1/rules", timeout=10).json()
        rules = [r for g in body["data"]["groups"] for r in g["rules"]]
        return rules if rules and all(r.get("lastEvaluation", "").startswith("2") for r in rules) else None

    rules = eventually(groups, "every rule evaluated once")
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad
    alerts = yaml.safe_load((REPO_DIR / "charts/kubetrain/files/alerts.yaml").read_text())
    assert len(rules) == sum(len(g["rules"]) for g in alerts["groups"])


def test_every_dashboard_and_alert_query_returns_series(prometheus):
    out = subprocess.run([str(REPO_DIR / "scripts/check-promql.py"), "--series", f"{prometheus['bin']}/promql-series",
                          "--json"], capture_output=True, text=True, check=True)
    queries = json.loads(out.stdout)
    for q in queries:
        assert not q.get("error"), q
    asked = [(q, data) for q in queries for data in q["queries"]]
    # A rate or increase needs two samples of a series: a counter the workload created last shows up in them a
    # scrape or two later. Ask every query, then ask the empty ones again once per scrape interval for 30 s.
    counts = {}
    deadline = time.monotonic() + 30
    while True:
        for q, data in asked:
            if not counts.get(data):
                counts[data] = len(query(data))
        if all(counts[data] or q.get("needs") for q, data in asked) or time.monotonic() > deadline:
            break
        time.sleep(1)
    report = [{"name": q["name"], "query": data, "series": counts[data], "needs": q.get("needs")}
              for q, data in asked]
    empty = [f"{r['name']}: {r['query']}" for r in report if r["series"] == 0 and not r["needs"]]
    (HOME / "queries.json").write_text(json.dumps(report, indent=2))
    exempt = [r for r in report if r["needs"]]
    print(f"\n{len(report)} queries of {len(queries)} expressions asked; {len(exempt)} need another exporter "
          f"({sum(1 for r in exempt if r['series'] == 0)} of them empty); empty: {len(empty)}")
    assert not empty, "queries returning no series:\n  " + "\n  ".join(empty)
