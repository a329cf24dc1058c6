"""KEP-2899 on the real control plane: ttlSecondsAfterFinished deletes a finished TrainJob with its JobSet and
pods, on time and across an operator restart; a runtime's runPolicy is the default; the API server refuses the
lifecycle fields inside a runtime's templates; and kubeflow/trainer#3779: a Failed TrainJob whose JobSet is
deleted never gets a new one."""

import json
import time
from datetime import datetime, timezone

import pytest

from conftest import (
    KubectlError,
    apply,
    cluster,
    condition,
    eventually,
    exists,
    get,
    kubectl,
    kubetrain,
    namespaced,
    operator_metric,
    torch_runtime,
    trainjob,
    wait,
)

pytestmark = pytest.mark.kubetrain

# A negative assertion ("no new JobSet") can only watch for a bounded time: this long after a reconcile of the
# TrainJob was observed, well above the operator's reconcile latency on this cluster (below one second).
QUIET_SECONDS = 5


def parse_time(text):
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)


def ttl_event(ns, name):
    """The TTLExpired event about TrainJob `name`, or None."""
    events = get("events.events.k8s.io", namespace=ns)["items"]
    for e in events:
        if e.get("reason") == "TTLExpired" and (e.get("regarding") or {}).get("name") == name:
            return e
    return None


def pods_of(ns, name):
    return get("pods", namespace=ns, selector=f"jobset.sigs.k8s.io/jobset-name={name}")["items"]


def test_ttl_deletes_the_finished_trainjob_with_its_jobset_and_pods_on_time(ns, tmp_path):
    manifest = tmp_path / "ttl.yaml"
    manifest.write_text(json.dumps(trainjob("ttl", image="kwok.e2e/running:1", num_nodes=2)))
    # Submitted through the CLI's flag.
    kubetrain("submit", "-f", str(manifest), "-n", ns, "--ttl-seconds-after-finished", "4")
    assert get("trainjob", "ttl", ns)["spec"]["ttlSecondsAfterFinished"] == 4
    wait("jobset/ttl", "jsonpath={.status.replicatedJobsStatus[0].active}=1", ns)
    started = get("trainjob", "ttl", ns)["status"]
    assert "startTime" in started and "completionTime" not in started, started
    assert pods_of(ns, "ttl"), "the job has pods"

    for pod in pods_of(ns, "ttl"):
        kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed")
    wait("trainjob/ttl", "condition=Complete", ns)
    status = get("trainjob", "ttl", ns)["status"]
    completed = parse_time(status["completionTime"])
    assert completed == parse_time(condition({"status": status}, "Complete")["lastTransitionTime"])

    # Deleted by the operator (foreground: the TrainJob goes after its children), with a TTLExpired event.
    wait("trainjob/ttl", "delete", ns)
    gone = datetime.now(timezone.utc)
    assert not exists("jobset", "ttl", ns)
    assert pods_of(ns, "ttl") == []
    event = eventually(lambda: ttl_event(ns, "ttl"), "the TTLExpired event")
    assert event["type"] == "Normal" and "ttlSecondsAfterFinished=4" in event["note"], event
    # On time: not before the TTL (second resolution of the stored times), and not long after it.
    deleted_at = datetime.fromisoformat(event["eventTime"].replace("Z", "+00:00"))
    assert (deleted_at - completed).total_seconds() >= 3, (deleted_at, completed)
    assert (gone - completed).total_seconds() < 4 + 30, (gone, completed)


def test_a_ttl_that_expired_while_the_operator_was_down_deletes_at_once(ns):
    apply(trainjob("down", image="kwok.e2e/running:1", num_nodes=1, ttlSecondsAfterFinished=0), ns)
    wait("jobset/down", "jsonpath={.status.replicatedJobsStatus[0].active}=1", ns)
    cluster("operator", "stop", "kubetrain-operator")
    try:
        # While the operator is down the job finishes (the JobSet controller still runs): its TTL of 0 is
        # past before any operator sees the TrainJob finished.
        for pod in pods_of(ns, "down"):
            kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed")
        wait("jobset/down", "condition=Completed", ns)
        assert exists("trainjob", "down", ns)
    finally:
        cluster("operator", "start", "kubetrain-operator")
    # The first reconcile after the restart copies Complete, then deletes: no timer survives in memory.
    wait("trainjob/down", "delete", ns)
    assert not exists("jobset", "down", ns)
    eventually(lambda: ttl_event(ns, "down"), "the TTLExpired event")


def test_a_restart_keeps_the_completion_time_and_an_edited_ttl_recomputes(ns):
    apply(trainjob("kept", num_nodes=1, ttlSecondsAfterFinished=3600), ns)
    wait("trainjob/kept", "condition=Complete", ns)
    completion = get("trainjob", "kept", ns)["status"]["completionTime"]
    cluster("operator", "stop", "kubetrain-operator")
    cluster("operator", "start", "kubetrain-operator")
    cluster("operator", "webhooks", "kubetrain-operator")
    # A reconcile after the restart (forced by an edit) keeps the job and its completion time.
    before = operator_metric("kubetrain_trainjob_reconcile_total")
    kubectl("annotate", "trainjob", "kept", "-n", ns, "e2e.kubetrain.dev/touch=1")
    eventually(lambda: operator_metric("kubetrain_trainjob_reconcile_total") > before, "a reconcile of the job")
    job = get("trainjob", "kept", ns)
    assert job["status"]["completionTime"] == completion
    assert job["metadata"].get("deletionTimestamp") is None
    # The TTL is mutable: shortened to 1 s, counted from the same completion time, it has expired.
    kubectl("patch", "trainjob", "kept", "-n", ns, "--type=merge", "-p", '{"spec":{"ttlSecondsAfterFinished":1}}')
    wait("trainjob/kept", "delete", ns)


def test_the_runtime_run_policy_is_the_default_and_the_job_overrides_it(ns):
    runtime = torch_runtime("torch-ttl")
    runtime["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": 0}
    apply(runtime, ns)
    apply(namespaced(trainjob("defaulted", runtime="torch-ttl", num_nodes=1)), ns)
    apply(namespaced(trainjob("own", runtime="torch-ttl", num_nodes=1, ttlSecondsAfterFinished=3600)), ns)
    wait("trainjob/defaulted", "delete", ns)
    wait("trainjob/own", "condition=Complete", ns)
    assert "completionTime" in get("trainjob", "own", ns)["status"]
    assert exists("trainjob", "own", ns), "the job's own TTL overrides the runtime's"


def test_the_api_server_refuses_lifecycle_fields_in_runtime_templates(ns):
    jobset_ttl = torch_runtime("bad-jobset-ttl")
    jobset_ttl["spec"]["template"]["spec"]["ttlSecondsAfterFinished"] = 10
    job_deadline = torch_runtime("bad-job-deadline")
    job_deadline["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["activeDeadlineSeconds"] = 5
    for runtime, message in [
        (jobset_ttl, "ttlSecondsAfterFinished must not be set in the JobSet template"),
        (job_deadline, "activeDeadlineSeconds and ttlSecondsAfterFinished must not be set in the Job templates"),
    ]:
        with pytest.raises(KubectlError) as refused:
            apply(runtime, ns)
        assert message in refused.value.stderr, refused.value.stderr
    bad_ttl = trainjob("negative", num_nodes=1, ttlSecondsAfterFinished=-1)
    with pytest.raises(KubectlError) as refused:
        apply(bad_ttl, ns)
    assert "spec.ttlSecondsAfterFinished" in refused.value.stderr, refused.value.stderr


def test_a_failed_trainjob_whose_jobset_is_deleted_never_gets_a_new_one(ns):
    """kubeflow/trainer#3779."""
    apply(torch_runtime("torch-no-retry", backoff_limit=0), ns)
    apply(namespaced(trainjob("broken", runtime="torch-no-retry", image="kwok.e2e/fail:1", num_nodes=1)), ns)
    wait("trainjob/broken", "condition=Failed", ns)
    kubectl("delete", "jobset", "broken", "-n", ns)
    wait("jobset/broken", "delete", ns)

    # Force reconciles (an edit of the TrainJob, and the JobSet's deletion itself), see one happen, then watch
    # for QUIET_SECONDS that no JobSet comes back.
    before = operator_metric("kubetrain_trainjob_reconcile_total")
    kubectl("annotate", "trainjob", "broken", "-n", ns, "e2e.kubetrain.dev/touch=1")
    eventually(lambda: operator_metric("kubetrain_trainjob_reconcile_total") > before, "a reconcile of the job")
    quiet_until = time.monotonic() + QUIET_SECONDS
    while time.monotonic() < quiet_until:
        assert not exists("jobset", "broken", ns), "a Failed TrainJob got a new JobSet (kubeflow/trainer#3779)"
        time.sleep(0.25)
    failed = condition(get("trainjob", "broken", ns), "Failed")
    assert failed["status"] == "True" and failed["reason"] == "FailedJobs", failed
