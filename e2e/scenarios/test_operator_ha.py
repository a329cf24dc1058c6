"""Deadlines, deletion, restarts and leader election of kubetrain-operator on the real control plane."""

import json

import pytest

from conftest import apply, cluster, condition, eventually, exists, get, kubectl, trainjob, wait

pytestmark = pytest.mark.kubetrain

LEASE = ("lease", "trainer.kubeflow.org", "kubeflow-system")


def holder():
    return get(LEASE[0], LEASE[1], LEASE[2])["spec"].get("holderIdentity") or ""


def test_active_deadline_fails_the_job_and_deletes_its_jobset(ns):
    apply(trainjob("late", image="kwok.e2e/running:1", num_nodes=1, activeDeadlineSeconds=3), ns)
    wait("trainjob/late", "condition=Failed", ns)
    failed = condition(get("trainjob", "late", ns), "Failed")
    assert failed["reason"] == "DeadlineExceeded", failed
    wait("jobset/late", "delete", ns)


def test_deleting_a_trainjob_garbage_collects_its_children(ns):
    apply(trainjob("gone", runtime="deepspeed-distributed", image="kwok.e2e/running:1", num_nodes=2), ns)
    wait("jobset/gone", "jsonpath={.status.replicatedJobsStatus[0].active}=1", ns)
    assert exists("secret", "gone-mpi-ssh-auth", ns) and exists("configmap", "gone-mpi-hostfile", ns)
    kubectl("delete", "trainjob", "gone", "-n", ns, "--wait=false")
    # The real garbage collector follows our owner references.
    for resource in ["jobset/gone", "secret/gone-mpi-ssh-auth", "configmap/gone-mpi-hostfile"]:
        wait(resource, "delete", ns)


def test_operator_restart_mid_flight_keeps_objects_and_status(ns):
    apply(trainjob("steady", image="kwok.e2e/running:1", num_nodes=1), ns)
    wait("jobset/steady", "jsonpath={.status.replicatedJobsStatus[0].active}=1", ns)
    uid = get("jobset", "steady", ns)["metadata"]["uid"]

    cluster("operator", "stop", "kubetrain-operator")
    try:
        # While the operator is down the job finishes (the JobSet controller still runs).
        for pod in get("pods", namespace=ns, selector="jobset.sigs.k8s.io/jobset-name=steady")["items"]:
            kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed")
        wait("jobset/steady", "condition=Completed", ns)
        assert condition(get("trainjob", "steady", ns), "Complete") is None
    finally:
        cluster("operator", "start", "kubetrain-operator")

    wait("trainjob/steady", "condition=Complete", ns)
    jobsets = get("jobsets", namespace=ns)["items"]
    assert [j["metadata"]["uid"] for j in jobsets] == [uid], "the restarted operator must not recreate the JobSet"


def test_follower_takes_over_when_the_leader_dies(ns):
    first = eventually(holder, "a Lease holder")
    assert first.startswith("kubetrain-operator_"), first
    cluster("operator", "start", "kubetrain-operator-2")
    try:
        cluster("operator", "webhooks", "kubetrain-operator-2")
        assert holder() == first, "a second replica must not take a held Lease"
        lease = get(*LEASE[:2], LEASE[2])
        transitions = lease["spec"].get("leaseTransitions", 0)
        duration = lease["spec"]["leaseDurationSeconds"]

        cluster("operator", "kill", "kubetrain-operator")  # SIGKILL: no release, the Lease must expire
        new = eventually(lambda: holder() if holder() != first else None,
                         "the follower to take the Lease", timeout=duration + 30)
        assert new.startswith("kubetrain-operator-2_"), new
        assert get(*LEASE[:2], LEASE[2])["spec"]["leaseTransitions"] == transitions + 1

        apply(trainjob("after", num_nodes=1), ns)
        wait("trainjob/after", "condition=Complete", ns)
    finally:
        cluster("operator", "stop", "kubetrain-operator-2")
        cluster("operator", "start", "kubetrain-operator")
        cluster("operator", "webhooks", "kubetrain-operator")
    eventually(lambda: holder().startswith("kubetrain-operator_"), "the restarted operator to lead again", timeout=60)
