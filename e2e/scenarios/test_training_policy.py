"""The training policy (docs/training-policy.md) on the real control plane: the operator watches ConfigMap
kubeflow-system/kubetrain-training-policy (its namespace is the leader-election namespace cluster.sh gives it),
so creating the ConfigMap switches the policy on without a restart. A privileged TrainJob is then refused with
its field path in a team namespace and admitted in the namespace the policy excepts; an image from another
registry and a host-network runtime are refused; the denial is an Event; deleting the ConfigMap restores
upstream's behaviour."""

import json
import uuid

import pytest
import yaml

from conftest import eventually, kubectl, torch_runtime, trainjob

pytestmark = pytest.mark.kubetrain

CONFIGMAP = "kubetrain-training-policy"
OPERATOR_NAMESPACE = "kubeflow-system"
WEBHOOK = 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request'
PRIVILEGED_PATH = (
    "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
    ".template.spec.template.spec.containers[0].securityContext.privileged"
)


def policy_configmap(allowed_namespace):
    policy = {
        "apiVersion": "kubetrain.dev/v1alpha1",
        "kind": "TrainingPolicy",
        "metadata": {"name": "e2e"},
        "spec": {
            "registries": ["kwok.e2e/", "docker.io/pytorch/", "ghcr.io/kubeflow/"],
            "exceptions": [{"name": "infra", "namespaces": [allowed_namespace], "allow": {"privileged": True}}],
        },
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP, "namespace": OPERATOR_NAMESPACE},
        "data": {"policy.yaml": yaml.safe_dump(policy)},
    }


def privileged_job(name):
    job = trainjob(name, num_nodes=1, suspend=True)
    pod = {"containers": [{"name": "node", "securityContext": {"privileged": True}}]}
    job["spec"]["runtimePatches"] = [
        {
            "manager": "e2e.kubetrain.dev/test",
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": pod}}}}]}
                }
            },
        }
    ]
    return job


def dry_run(obj, namespace):
    """A server-side dry run: the webhooks judge it, nothing is stored."""
    return kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=obj, check=False)


@pytest.fixture
def infra_namespace():
    name = f"e2e-policy-infra-{uuid.uuid4().hex[:5]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def policy(infra_namespace):
    """The policy ConfigMap, deleted afterwards whatever happens (it applies cluster-wide)."""
    kubectl("apply", "-f", "-", input=policy_configmap(infra_namespace))
    yield infra_namespace
    kubectl("delete", "configmap", CONFIGMAP, "-n", OPERATOR_NAMESPACE, "--ignore-not-found", check=False)


def test_the_policy_configmap_refuses_and_its_removal_restores_upstream(ns, policy):
    infra = policy
    job = privileged_job("privileged")

    # The ConfigMap is watched: the policy applies without a restart, a moment after it is created.
    def refused():
        proc = dry_run(job, ns)
        return proc.returncode != 0 and PRIVILEGED_PATH in proc.stderr

    eventually(refused, "the privileged TrainJob to be refused once the policy ConfigMap exists")
    proc = kubectl("apply", "-n", ns, "-f", "-", input=job, check=False)
    assert proc.returncode != 0
    assert WEBHOOK in proc.stderr, proc.stderr
    assert f'{PRIVILEGED_PATH}: container "node" runs privileged' in proc.stderr, proc.stderr
    assert 'training policy "e2e"' in proc.stderr, proc.stderr
    assert not kubectl("get", "trainjob", "-n", ns, "-o", "name").strip()

    # The denial is an Event about the TrainJob, naming who asked.
    def denied_event():
        events = json.loads(kubectl("get", "events", "-n", ns, "-o", "json"))["items"]
        return [e for e in events if e.get("reason") == "TrainJobDenied" and e["involvedObject"]["name"] == "privileged"]

    eventually(denied_event, "a TrainJobDenied event in the namespace")
    assert PRIVILEGED_PATH in denied_event()[0]["message"]

    # The excepted namespace admits the same TrainJob.
    kubectl("apply", "-n", infra, "-f", "-", input=job)
    assert kubectl("get", "trainjob", "privileged", "-n", infra, "-o", "name").strip()

    # Images from unlisted registries are refused at spec.trainer.image, everywhere.
    proc = dry_run(trainjob("foreign", image="quay.io/someone/miner:1", num_nodes=1, suspend=True), infra)
    assert proc.returncode != 0
    assert 'spec.trainer.image: image "quay.io/someone/miner:1" is not from a registry' in proc.stderr, proc.stderr

    # Runtimes are judged too, at their own paths.
    runtime = torch_runtime("host-net")
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "hostNetwork"
    ] = True
    proc = kubectl("apply", "-n", ns, "-f", "-", input=runtime, check=False)
    assert proc.returncode != 0
    assert (
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.hostNetwork: the pods share the host's network"
        in proc.stderr
    ), proc.stderr

    # Without the ConfigMap, upstream's behaviour: nothing is refused for the policy's reasons.
    kubectl("delete", "configmap", CONFIGMAP, "-n", OPERATOR_NAMESPACE)
    eventually(lambda: dry_run(job, ns).returncode == 0, "the privileged TrainJob to be admitted without a policy")
    kubectl("apply", "-n", ns, "-f", "-", input=job)
    kubectl("apply", "-n", ns, "-f", "-", input=runtime)
