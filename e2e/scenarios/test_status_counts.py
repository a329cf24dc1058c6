"""The count-only status write budget on the real control plane (issue 39; docs/operator-internals.md, status
mapping, step 6): beyond the budget a TrainJob's jobsStatus counts wait in line while its condition is written
at once with its counts, and the line's pump writes the waiting counts when tokens come, with no further
event from the cluster."""

import pytest

from conftest import apply, cluster, condition, eventually, get, kubectl, operator_metric, trainjob, wait

pytestmark = pytest.mark.kubetrain

JOBS = ("count-a", "count-b", "count-c", "count-d")
WAITING = "kubetrain_status_count_writes_waiting"


def restart_operator(**flags):
    """Restarts our operator with `flags` as environment (KUBETRAIN_STATUS_COUNT_WRITES_*); none: defaults."""
    cluster("operator", "stop", "kubetrain-operator")
    cluster("operator", "start", "kubetrain-operator", env=flags)


def counts(ns, name):
    """The TrainJob's written `jobsStatus` as (active, ready) per replicated job; [] while none is written."""
    written = (get("trainjob", name, ns).get("status") or {}).get("jobsStatus") or []
    return [(c.get("active", 0), c.get("ready", 0)) for c in written]


@pytest.fixture
def one_write_per_hour():
    """Our operator with a budget of one count-only write, refilled once an hour; defaults restored after."""
    restart_operator(KUBETRAIN_STATUS_COUNT_WRITES_BURST="1", KUBETRAIN_STATUS_COUNT_WRITES_PERIOD="1h")
    try:
        yield
    finally:
        restart_operator()


def test_counts_beyond_the_budget_wait_conditions_carry_them_and_the_pump_writes_the_rest(ns, one_write_per_hour):
    for name in JOBS:
        apply(trainjob(name, image="kwok.e2e/running:1", num_nodes=1), ns)
    for name in JOBS:
        wait(f"jobset/{name}", "jsonpath={.status.replicatedJobsStatus[0].ready}=1", ns)
    # One token (which a TrainJob elsewhere in the cluster may have taken): at most one of ours has its counts
    # written, the others wait in line with none written, and stay so (their pods send nothing more).
    eventually(lambda: operator_metric(WAITING) >= 3, "three TrainJobs waiting for the budget")
    waiting = [name for name in JOBS if counts(ns, name) == []]
    assert len(waiting) >= 3, {name: counts(ns, name) for name in JOBS}

    # A condition never waits: the finished job's Complete goes out at once, with its counts.
    done = waiting[0]
    for pod in get("pods", namespace=ns, selector=f"jobset.sigs.k8s.io/jobset-name={done}")["items"]:
        kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed")
    wait(f"trainjob/{done}", "condition=Complete", ns)
    job = get("trainjob", done, ns)
    assert condition(job, "Complete")["status"] == "True"
    assert [c["succeeded"] for c in job["status"]["jobsStatus"]] == [1], job["status"]
    assert all(counts(ns, name) == [] for name in waiting[1:]), {name: counts(ns, name) for name in JOBS}

    # A new leader with one token, then one every 2 s: its first reconciles write one job's counts and put the
    # others in line; the pump reconciles them as tokens come and writes their counts (their pods run on, so
    # no event of the cluster reconciles them).
    restart_operator(KUBETRAIN_STATUS_COUNT_WRITES_BURST="1", KUBETRAIN_STATUS_COUNT_WRITES_PERIOD="2s")
    running = [name for name in JOBS if name != done]
    eventually(lambda: all(counts(ns, name) == [(1, 1)] for name in running), "every running job's counts")
    eventually(lambda: operator_metric(WAITING) == 0, "an empty line")
