"""`kubetrain tenancy add-team` and `kubetrain tenancy check` on the real control plane: Pod Security admission
(on by default in kube-apiserver 1.35) and the audit policy e2e/audit-policy.yaml (cluster.sh passes it with
--audit-policy-file and writes $KUBETRAIN_E2E_STATE/audit.log). The team's objects are applied and judged, a
group member's TrainJob submission is in the audit log, and removing the team's quota fails the check with
its fix."""

import json
import uuid

import pytest
import yaml

from conftest import E2E_DIR, STATE, condition, eventually, get, kubectl, kubetrain, trainjob

pytestmark = pytest.mark.kubetrain

AUDIT_POLICY = str(E2E_DIR / "audit-policy.yaml")


@pytest.fixture
def team():
    """A team name; its namespace, ClusterQueue and ClusterRoleBinding are deleted afterwards (the shared
    ClusterRoles and ResourceFlavor stay, as add-team leaves them for every team)."""
    name = f"team-{uuid.uuid4().hex[:6]}"
    yield name
    kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
    kubectl("delete", "clusterqueue", name, "--wait=false", "--ignore-not-found", check=False)
    kubectl("delete", "clusterrolebinding", f"kubetrain-runtime-viewer-{name}", "--ignore-not-found", check=False)


def add_team(name):
    args = ["tenancy", "add-team", name, "--gpus", "8", "--cpu", "16", "--memory", "64Gi", "--storage", "100Gi",
            "--group", f"ml-{name}", "--cohort", "e2e-teams", "--apply"]
    return kubetrain(*args).stdout


def check(name, *extra):
    return kubetrain("tenancy", "check", "--namespace", name, "--audit-policy", AUDIT_POLICY, *extra, check=False)


def items(report):
    return {item["id"]: item for item in report["items"]}


def audit_events():
    with open(STATE / "audit.log") as log:
        return [json.loads(line) for line in log if line.strip()]


def test_add_team_then_check_passes_and_the_submission_is_audited(team, tmp_path):
    first = add_team(team)
    assert f"Namespace {team} created" in first, first
    assert f"LocalQueue {team}/default created" in first, first
    again = add_team(team)
    assert "created" not in again and "configured" not in again, again
    assert again.count("unchanged") == 12, again

    ns = get("namespace", team)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert ns["metadata"]["labels"]["kubetrain.dev/team"] == team
    eventually(lambda: (condition(get("clusterqueue", team), "Active") or {}).get("status") == "True",
               f"ClusterQueue {team} to be Active")

    html = tmp_path / "report.html"
    proc = check(team, "-o", "json", "--html", str(html))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["teamNamespaces"] == [team]
    assert report["verdict"] != "fail", report
    by_id = items(report)
    for item in ["team-namespaces", "rbac-groups", "quotas", "pod-security", "audit", "runtimes"]:
        assert by_id[item]["verdict"] == "pass", by_id[item]
    assert f"{team}: bound to group(s) ml-{team}" in by_id["rbac-groups"]["evidence"]
    assert f"{team}: LocalQueue default -> ClusterQueue {team}" in by_id["team-namespaces"]["evidence"]
    assert f"{team}: default deny for ingress and egress" in by_id["network-policies"]["evidence"]
    assert f"{AUDIT_POLICY}: TrainJob creation logged at RequestResponse" in by_id["audit"]["evidence"]
    page = html.read_text()
    assert 'id="item-quotas" class="pass"' in page and "<script" not in page

    # Pod Security admission is on: baseline refuses a privileged pod in the team's namespace.
    privileged = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "priv"},
                  "spec": {"containers": [{"name": "c", "image": "busybox",
                                           "securityContext": {"privileged": True}}]}}
    refused = kubectl("create", "--dry-run=server", "-n", team, "-f", "-", input=privileged, check=False)
    assert refused.returncode != 0 and "violates PodSecurity" in refused.stderr, refused.stderr

    # RBAC: the group's member may submit, a user outside it may not.
    as_member = ["--as", "alice", "--as-group", f"ml-{team}"]
    assert kubectl("auth", "can-i", "create", "trainjobs.trainer.kubeflow.org", "-n", team, *as_member).strip() == "yes"
    outsider = kubectl("auth", "can-i", "create", "trainjobs.trainer.kubeflow.org", "-n", team, "--as", "bob",
                       check=False)
    assert outsider.stdout.strip() == "no", outsider.stdout
    job = trainjob("audited", num_nodes=1)
    kubectl("create", "-n", team, *as_member, "-f", "-", input=yaml.safe_dump(job))

    def submission():
        for event in audit_events():
            ref = event.get("objectRef") or {}
            if (event.get("verb") == "create" and ref.get("resource") == "trainjobs"
                    and ref.get("namespace") == team and ref.get("name") == "audited"
                    and event.get("stage") == "ResponseComplete"):
                return event
        return None

    event = eventually(submission, f"the audit log to hold the creation of TrainJob {team}/audited")
    # Who submitted: the member the admin acted as (the audit event keeps both).
    assert event["impersonatedUser"]["username"] == "alice", event
    assert f"ml-{team}" in event["impersonatedUser"]["groups"], event
    assert event["level"] == "RequestResponse"
    assert event["responseStatus"]["code"] == 201, event["responseStatus"]
    assert event["requestObject"]["spec"]["runtimeRef"]["name"] == "torch-distributed"


def test_removing_the_quota_makes_check_fail_with_the_fix(team):
    add_team(team)
    kubectl("delete", "resourcequota", "kubetrain-team", "-n", team)

    proc = check(team)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL  quotas" in proc.stdout, proc.stdout
    assert f"- {team}: no ResourceQuota" in proc.stdout, proc.stdout
    assert f"fix: kubetrain tenancy add-team {team} --gpus N --cpu Q --memory Q --storage Q --apply" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1].startswith("FAIL: "), proc.stdout

    # add-team puts it back; the check passes again.
    assert f"ResourceQuota {team}/kubetrain-team created" in add_team(team)
    assert check(team).returncode == 0


def test_check_reads_the_training_policy(team):
    """The image-policy item reads the training policy's registries from its ConfigMap."""
    add_team(team)
    policy = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kubetrain-training-policy", "namespace": "kubeflow-system"},
        "data": {"policy.yaml": yaml.safe_dump({
            "apiVersion": "kubetrain.dev/v1alpha1", "kind": "TrainingPolicy", "metadata": {"name": "e2e"},
            "spec": {"registries": ["ghcr.io/kubeflow/", "kwok.e2e/"]},
        })},
    }
    kubectl("apply", "-f", "-", input=policy)
    try:
        proc = check(team, "-o", "json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        image = items(json.loads(proc.stdout))["image-policy"]
        assert image["verdict"] == "pass", image
        assert image["evidence"] == [
            "training policy in kubeflow-system/kubetrain-training-policy allows images from: ghcr.io/kubeflow/, kwok.e2e/"
        ], image
    finally:
        kubectl("delete", "configmap", "kubetrain-training-policy", "-n", "kubeflow-system", "--ignore-not-found")
