"""The live render differential of e2e/side-by-side.sh: the same TrainJobs applied once with upstream's
controller and once with kubetrain's, the objects each produced read back and compared.

  sidebyside.py generate --count N --seed S --out DIR   the corpus: DIR/NNN-<name>.yaml, one case per file
  sidebyside.py run --corpus DIR --out FILE              apply every case (own namespace), wait, dump objects
  sidebyside.py compare UPSTREAM.json KUBETRAIN.json [--report FILE]
                                                         prints `render: N/M identical` (and the verdicts line)
  sidebyside.py generate-invalid --out DIR               the webhook corpus: objects admission should refuse
  sidebyside.py lifecycle --out FILE                     TrainJobs driven to Complete / Failed / Suspended on
                                                         kwok, the status recorded at each step
  sidebyside.py compare-lifecycle|compare-webhooks UPSTREAM.json KUBETRAIN.json [--report FILE]
                                                         prints `status: N/M lifecycles identical` /
                                                         `webhooks: N/M verdicts agree ...`

A case is a list of objects (runtimes first, then one TrainJob). The generated cases cross the built-in
runtimes with namespaced ones (MPI with patches, coscheduling gangs, JAX, XGBoost), trainer overrides
(numNodes, image, command, args, env, resources with GPUs), labels and annotations, suspend, managedBy,
initializers and runtime patches; about one in ten is invalid on purpose (the webhook verdicts are compared).
Upstream's own example TrainJobs (../shared/upstream/trainer/trainjobs) are added when present.
"""

import argparse
import base64
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

BUILTIN = [
    "torch-distributed",
    "torch-distributed-with-cache",
    "deepspeed-distributed",
    "mlx-distributed",
    "jax-distributed",
    "xgboost-distributed",
    "torchtune-llama3.2-1b",
    "torchtune-llama3.2-3b",
    "torchtune-qwen2.5-1.5b",
]
TRAINJOB_API = "trainer.kubeflow.org/v1alpha1"


# --- the corpus -----------------------------------------------------------------------------------------


def runtime(name, ml_policy, jobs, pod_group_policy=None):
    spec = {"mlPolicy": ml_policy, "template": {"spec": {"replicatedJobs": jobs}}}
    if pod_group_policy:
        spec["podGroupPolicy"] = pod_group_policy
    return {"apiVersion": TRAINJOB_API, "kind": "TrainingRuntime", "metadata": {"name": name}, "spec": spec}


def job(name, image, ancestor=None, extra=None):
    pod = {"containers": [{"name": "node", "image": image, **(extra or {})}]}
    tpl = {"spec": {"template": {"spec": pod}}}
    if ancestor:
        tpl["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}}
    return {"name": name, "template": tpl}


def custom_runtimes(rng):
    """Namespaced runtimes beside the built-ins; each entry is (runtime object, extra policy notes)."""
    mpi_node = job("node", "mpioperator/base:v0.6.0", extra={"command": ["/usr/sbin/sshd", "-De"]})
    mpi_launcher = job("launcher", "mpioperator/base:v0.6.0", ancestor="trainer")
    mpi_launcher["dependsOn"] = [{"name": "node", "status": "Ready"}]
    return {
        "mpi-custom": runtime(
            "mpi-custom",
            {"numNodes": 1, "mpi": {"numProcPerNode": rng.choice([1, 2, 4]), "mpiImplementation": "OpenMPI",
                                    "sshAuthMountPath": "/root/.ssh", "runLauncherAsNode": rng.choice([True, False])}},
            [mpi_launcher, mpi_node],
        ),
        "torch-gang": runtime(
            "torch-gang",
            {"numNodes": 1, "torch": {}},
            [job("node", "pytorch/pytorch:2.7.1", ancestor="trainer")],
            {"coscheduling": {"scheduleTimeoutSeconds": rng.choice([30, 60, 120])}},
        ),
        "jax-custom": runtime(
            "jax-custom",
            {"numNodes": 1, "jax": {}},
            [job("node", "nvcr.io/nvidia/jax:25.04-py3", ancestor="trainer")],
        ),
        "xgboost-custom": runtime(
            "xgboost-custom",
            {"numNodes": 1, "xgboost": {}},
            [job("node", "ghcr.io/kubeflow/trainer/xgboost-runtime", ancestor="trainer")],
        ),
        "plain-custom": runtime(
            "plain-custom",
            {"numNodes": 1},
            [job("node", "busybox:1.36", ancestor="trainer")],
        ),
    }


def resources(rng):
    choice = rng.randrange(5)
    if choice == 0:
        return None
    req = {"cpu": rng.choice(["500m", "1", "4", "16"]), "memory": rng.choice(["1Gi", "8Gi", "64Gi"])}
    res = {"requests": req}
    if choice >= 2:
        gpus = rng.choice([1, 2, 4, 8])
        res["limits"] = {"nvidia.com/gpu": gpus}
        if choice == 3:
            req["nvidia.com/gpu"] = gpus
    return res


def trainjob_case(rng, index):
    customs = custom_runtimes(rng)
    objects = []
    if rng.random() < 0.35:
        rname = rng.choice(sorted(customs))
        objects.append(customs[rname])
        ref = {"name": rname, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}
    else:
        rname = rng.choice(BUILTIN)
        ref = {"name": rname}
    trainer = {}
    if rng.random() < 0.8:
        trainer["numNodes"] = rng.choice([1, 2, 3, 4, 8])
    if rng.random() < 0.9:
        trainer["image"] = "kwok.e2e/running:1"
    if rng.random() < 0.4:
        trainer["command"] = ["python", "-m", "train"]
    if rng.random() < 0.3:
        trainer["args"] = ["--epochs", str(rng.randint(1, 9))]
    if rng.random() < 0.4:
        trainer["env"] = [{"name": f"E2E_VAR_{i}", "value": str(rng.randint(0, 99))} for i in range(rng.randint(1, 3))]
    res = resources(rng)
    if res:
        trainer["resourcesPerNode"] = res
    metadata = {"name": f"case-{index:03d}"}
    if rng.random() < 0.3:
        metadata["labels"] = {"team": rng.choice(["vision", "nlp"]), "e2e.kubetrain.dev/case": str(index)}
    if rng.random() < 0.2:
        metadata["annotations"] = {"e2e.kubetrain.dev/note": f"case {index}"}
    spec = {"runtimeRef": ref}
    if trainer:
        spec["trainer"] = trainer
    if rng.random() < 0.5:
        spec["suspend"] = True
    if rng.random() < 0.1:
        spec["managedBy"] = "trainer.kubeflow.org/trainjob-controller"
    if rname.startswith("torchtune") and rng.random() < 0.5:
        spec["initializer"] = {
            "dataset": {"storageUri": "hf://tatsu-lab/alpaca"},
            "model": {"storageUri": "hf://meta-llama/Llama-3.2-1B-Instruct"},
        }
    if rng.random() < 0.2:
        target = "node"
        spec["runtimePatches"] = [
            {
                "manager": "e2e.kubetrain.dev/generator",
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {"name": target, "template": {"metadata": {"labels": {"e2e.kubetrain.dev/patched": "yes"}}}}
                            ]
                        }
                    }
                },
            }
        ]
    # About one case in ten is invalid on purpose: a reserved env, a missing runtime, a negative numNodes.
    bad = rng.random()
    if bad < 0.04:
        spec.setdefault("trainer", {})["env"] = [{"name": "PET_NNODES", "value": "9"}]
    elif bad < 0.07:
        spec["runtimeRef"] = {"name": "no-such-runtime"}
        objects = []
    elif bad < 0.10:
        spec.setdefault("trainer", {})["numNodes"] = -1
    objects.append({"apiVersion": TRAINJOB_API, "kind": "TrainJob", "metadata": metadata, "spec": spec})
    return objects


def generate(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    for i in range(args.count):
        with open(out / f"{i:03d}-generated.yaml", "w") as f:
            yaml.safe_dump_all(trainjob_case(rng, i), f, sort_keys=True)
    examples = Path(args.upstream_examples) if args.upstream_examples else None
    n = args.count
    if examples and examples.is_dir() and not args.no_examples:
        for path in sorted(examples.glob("*.yaml")):
            docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
            if not any(d.get("kind") == "TrainJob" for d in docs):
                continue
            for d in docs:
                d.get("metadata", {}).pop("namespace", None)
            with open(out / f"{n:03d}-upstream-{path.stem}.yaml", "w") as f:
                yaml.safe_dump_all(docs, f, sort_keys=True)
            n += 1
    print(f"corpus: {n} cases in {out}")


def invalid_cases():
    """The webhook corpus: objects each controller's admission (CRD schema, CEL, webhooks) should refuse, and
    a few updates (a valid object, then the refused change). Name -> list of objects applied in order."""

    def tj(name, spec=None, trainer=None, runtime_ref=None, meta=None):
        spec = dict(spec or {})
        spec.setdefault("runtimeRef", runtime_ref or {"name": "torch-distributed"})
        spec.setdefault("trainer", {"image": "kwok.e2e/running:1", "numNodes": 2, **(trainer or {})})
        return {"apiVersion": TRAINJOB_API, "kind": "TrainJob", "metadata": {"name": name, **(meta or {})},
                "spec": spec}

    def patch(target, **tpl):
        return [{"manager": "e2e.kubetrain.dev/generator",
                 "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": target, "template": tpl}]}}}}]

    node = lambda: job("node", "busybox:1.36", ancestor="trainer")  # noqa: E731
    plain = lambda name, **kw: runtime(name, {"numNodes": 1, **kw}, [node()])  # noqa: E731
    two_policies = plain("two-policies", torch={}, mpi={"numProcPerNode": 1})
    replicas = plain("ancestor-replicas")
    replicas["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = 2
    no_node = runtime("no-node-container", {"numNodes": 1, "torch": {}}, [job("node", "busybox:1.36", ancestor="trainer")])
    no_node["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["name"] = "main"
    both_gangs = runtime("both-gangs", {"numNodes": 1}, [node()],
                         {"coscheduling": {"scheduleTimeoutSeconds": 60}, "volcano": {}})
    launcher_as_node = runtime("launcher-as-node", {"numNodes": 2, "mpi": {"numProcPerNode": 1, "runLauncherAsNode": True}},
                               [job("node", "mpioperator/base:v0.6.0", ancestor="trainer")])
    negative_nodes = plain("negative-nodes")
    negative_nodes["spec"]["mlPolicy"]["numNodes"] = -1
    startup = plain("startup-and-depends-on")
    rjobs = startup["spec"]["template"]["spec"]["replicatedJobs"]
    rjobs.insert(0, job("launcher", "busybox:1.36"))
    rjobs[1]["dependsOn"] = [{"name": "launcher", "status": "Complete"}]
    startup["spec"]["template"]["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    claim_ns = plain("claim-namespace")
    claim_ns["spec"]["template"]["spec"]["volumeClaimPolicies"] = [
        {"templates": [{"metadata": {"name": "data", "namespace": "other"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}]
    cluster = lambda rt, name: {**rt, "kind": "ClusterTrainingRuntime", "metadata": {"name": name}}  # noqa: E731

    suspended = tj("update", spec={"suspend": True})
    running = tj("update")
    cases = {
        "tj-reserved-env-torch": [tj("reserved-env", trainer={"env": [{"name": "PET_NNODES", "value": "9"}]})],
        "tj-reserved-env-mpi": [tj("reserved-env", runtime_ref={"name": "deepspeed-distributed"},
                                   trainer={"env": [{"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "1"}]})],
        "tj-reserved-env-xgboost": [tj("reserved-env", runtime_ref={"name": "xgboost-distributed"},
                                       trainer={"env": [{"name": "DMLC_NUM_WORKER", "value": "3"}]})],
        "tj-missing-cluster-runtime": [tj("missing", runtime_ref={"name": "no-such-runtime"})],
        "tj-missing-namespaced-runtime": [tj("missing", runtime_ref={"name": "nope", "kind": "TrainingRuntime",
                                                                     "apiGroup": "trainer.kubeflow.org"})],
        "tj-runtime-kind": [tj("kind", runtime_ref={"name": "torch-distributed", "kind": "Deployment"})],
        "tj-runtime-api-group": [tj("group", runtime_ref={"name": "torch-distributed", "apiGroup": "example.com"})],
        "tj-num-nodes-negative-torch": [tj("nodes", trainer={"numNodes": -1})],
        "tj-num-proc-zero": [tj("procs", trainer={"numProcPerNode": 0})],
        "tj-name-too-long": [tj("n" * 64)],
        "tj-name-digit": [tj("1job")],
        "tj-managed-by": [tj("managed", spec={"managedBy": "example.com/other"})],
        "tj-unknown-field": [tj("unknown", trainer={"numNode": 2})],
        "tj-patch-manager": [tj("manager", spec={"runtimePatches": [{**patch("node", metadata={"labels": {"a": "b"}})[0],
                                                                      "manager": "generator"}]})],
        "tj-patch-unknown-job": [tj("patch-job", spec={"runtimePatches": patch("nope", metadata={"labels": {"a": "b"}})})],
        "tj-patch-env-on-node": [tj("patch-env", spec={"runtimePatches": patch(
            "node", spec={"template": {"spec": {"containers": [{"name": "node", "env": [{"name": "X", "value": "1"}]}]}}})})],
        "tj-initializer-missing-job": [tj("init", spec={"initializer": {"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}}})],
        "tj-storage-uri": [tj("uri", runtime_ref={"name": "torchtune-llama3.2-1b"}, trainer={"numNodes": 1},
                              spec={"initializer": {"dataset": {"storageUri": "not a uri"}}})],
        "tj-torchtune-two-nodes": [tj("tune", runtime_ref={"name": "torchtune-llama3.2-1b"}, trainer={"numNodes": 2})],
        "tj-cpu-negative": [tj("cpu", trainer={"resourcesPerNode": {"requests": {"cpu": "-1"}}})],
        "tj-gpu-fraction": [tj("gpu", trainer={"resourcesPerNode": {"limits": {"nvidia.com/gpu": "0.5"}}})],
        "tj-deadline-zero": [tj("deadline", spec={"activeDeadlineSeconds": 0})],
        "tj-update-runtime-ref": [suspended, tj("update", spec={"suspend": True},
                                                runtime_ref={"name": "deepspeed-distributed"})],
        "tj-update-patches-active": [running, tj("update", spec={"runtimePatches": patch("node", metadata={"labels": {"a": "b"}})})],
        "tj-update-managed-by": [suspended, tj("update", spec={"suspend": True, "managedBy": "kueue.x-k8s.io/multikueue"})],
        "tj-update-deadline": [tj("update", spec={"suspend": True, "activeDeadlineSeconds": 60}),
                               tj("update", spec={"suspend": True, "activeDeadlineSeconds": 120})],
        "rt-two-policies": [two_policies],
        "rt-ancestor-replicas": [replicas],
        "rt-no-node-container": [no_node],
        "rt-both-gangs": [both_gangs],
        "rt-launcher-as-node": [launcher_as_node],
        "rt-negative-nodes": [negative_nodes],
        "rt-startup-and-depends-on": [startup],
        "rt-claim-namespace": [claim_ns],
        "crt-two-policies": [cluster(two_policies, "sbs-invalid-two-policies")],
        "crt-ancestor-replicas": [cluster(replicas, "sbs-invalid-ancestor-replicas")],
    }
    return cases


def generate_invalid(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, objects in invalid_cases().items():
        with open(out / f"{name}.yaml", "w") as f:
            yaml.safe_dump_all(objects, f, sort_keys=True)
    print(f"webhook corpus: {len(invalid_cases())} cases in {out}")


# --- applying a corpus and reading back what the controller made ----------------------------------------


def kubectl(*args, input=None, check=True):
    proc = subprocess.run(
        [os.environ.get("KUBECTL", "kubectl"), *args], input=input, capture_output=True, text=True, timeout=120
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def case_namespace(path):
    return "sbs-" + re.sub(r"[^a-z0-9-]", "-", path.stem.lower())[:50].strip("-")


def apply_case(path):
    """Applies one case in its own namespace; returns (verdicts, (namespace, TrainJob name) or None)."""
    ns = case_namespace(path)
    kubectl("create", "namespace", ns, check=False)
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    outcome, job = [], None
    for doc in docs:
        proc = kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(doc), check=False)
        outcome.append({"kind": doc.get("kind"), "allowed": proc.returncode == 0,
                        "message": normalise_message(proc.stderr.strip())})
        if doc.get("kind") == "TrainJob" and proc.returncode == 0:
            job = (ns, doc["metadata"]["name"])
    return outcome, job


def run(args):
    from concurrent.futures import ThreadPoolExecutor

    corpus = sorted(Path(args.corpus).glob("*.yaml"))
    verdicts, jobs = {}, {}
    # Cases are independent (one namespace each): apply them a few at a time, as many clients would.
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        for path, (outcome, job) in zip(corpus, pool.map(apply_case, corpus)):
            verdicts[path.stem] = outcome
            if job:
                jobs[path.stem] = job
    # Wait until every admitted TrainJob has its JobSet (or the controller gave up with a condition/event).
    deadline = time.monotonic() + args.timeout
    pending = dict(jobs)
    while pending and time.monotonic() < deadline:
        for case, (ns, name) in list(pending.items()):
            if kubectl("get", "jobset", name, "-n", ns, "-o", "name", check=False).returncode == 0:
                pending.pop(case)
        if pending:
            time.sleep(1)
    time.sleep(args.settle)  # let status writes that follow creation land (status is compared too)
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        dump = dict(zip(jobs, pool.map(lambda job: read_back(*job), jobs.values())))
    Path(args.out).write_text(json.dumps({"verdicts": verdicts, "objects": dump, "missing": sorted(pending)},
                                         indent=1, sort_keys=True))
    print(f"{len(jobs)} TrainJobs admitted of {len(corpus)} cases; {len(pending)} without a JobSet")


def read_back(ns, name):
    out = {}
    for kind in ["jobsets.jobset.x-k8s.io", "secrets", "configmaps", "podgroups.scheduling.x-k8s.io"]:
        items = json.loads(kubectl("get", kind, "-n", ns, "-o", "json", check=False).stdout or '{"items": []}')["items"]
        for obj in items:
            owners = obj["metadata"].get("ownerReferences", [])
            if any(o.get("kind") == "TrainJob" and o.get("name") == name for o in owners):
                out[f"{obj['kind']}/{obj['metadata']['name']}"] = normalise(obj)
    tj = json.loads(kubectl("get", "trainjob", name, "-n", ns, "-o", "json").stdout)
    out["TrainJob.status"] = normalise_status(tj.get("status") or {})
    spec = tj["spec"]
    # runtimePatches[].time is when the defaulting webhook ran: compare that it is set, not its value.
    for patch in spec.get("runtimePatches") or []:
        if "time" in patch:
            patch["time"] = "<set>"
    out["TrainJob.spec"] = spec
    return out


SERVER_SET = ["uid", "resourceVersion", "managedFields", "creationTimestamp", "generation", "selfLink"]


def normalise(obj):
    obj = json.loads(json.dumps(obj))
    meta = obj["metadata"]
    for key in SERVER_SET:
        meta.pop(key, None)
    meta.pop("namespace", None)
    for ref in meta.get("ownerReferences", []):
        ref.pop("uid", None)
    obj.pop("status", None)
    if obj["kind"] == "ConfigMap" and "runtime" in (obj.get("data") or {}):
        # The runtime snapshot embeds the stored runtime: compare it without its server-set metadata.
        runtime = yaml.safe_load(obj["data"]["runtime"])
        rmeta = runtime.get("metadata", {})
        for key in SERVER_SET:
            rmeta.pop(key, None)
        (rmeta.get("annotations") or {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
        if rmeta.get("annotations") == {}:
            rmeta.pop("annotations")
        # Go marshals empty structs (`metadata: {}`, `resources: {}`, `status: {}`) that kubetrain omits; the
        # YAML parses to the same runtime (a documented divergence, docs/e2e.md).
        obj["data"]["runtime"] = drop_empty(runtime)
    if obj["kind"] == "Secret":
        # Random key material: compare which keys exist and their format, never the bytes.
        fmt = {}
        for key, value in (obj.get("data") or {}).items():
            text = base64.b64decode(value).decode("utf-8", "replace")
            fmt[key] = text.split("\n", 1)[0][:40] if text.startswith("-----") else text.split(" ", 1)[0][:40]
        obj["data"] = fmt
    return obj


def drop_empty(node):
    if isinstance(node, dict):
        out = {k: drop_empty(v) for k, v in node.items()}
        return {k: v for k, v in out.items() if v not in ({}, None)}
    if isinstance(node, list):
        return [drop_empty(v) for v in node]
    return node


def normalise_status(status):
    conditions = [
        {k: c.get(k) for k in ("type", "status", "reason", "message")} for c in status.get("conditions") or []
    ]
    return {"conditions": sorted(conditions, key=lambda c: c["type"]), "jobsStatus": status.get("jobsStatus")}


def normalise_message(text):
    # Namespaces and object names differ per run only where the case put them; drop the "STDIN" wording.
    return re.sub(r'error when (creating|applying) "STDIN": ', "", text)


# --- the TrainJob status through a lifecycle -------------------------------------------------------------

# Each scenario: a TrainJob (torch-distributed unless `runtime` says otherwise) and steps. A step is
# ("pods", n): until n of its pods are Ready; ("finish",): annotate its pods so kwok succeeds them;
# ("patch", spec): a merge patch of spec; ("gone",): until it has no pods left; ("until", TYPE): until the
# condition TYPE is True; ("jobset",): until its JobSet exists; ("status", LABEL): record the status once it
# has not changed for 3 s. The images pick what kwok does with the pods (e2e/kwok-stages.yaml).
NO_RETRY = {name: {"name": name, "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}
            for name in ("torch-no-retry", "jax-no-retry")}


def no_retry_runtimes():
    """Namespaced runtimes whose node Job has backoffLimit 0: a failed pod fails the TrainJob at once instead
    of after six retries with exponential backoff (minutes)."""
    out = []
    for name, policy in (("torch-no-retry", "torch"), ("jax-no-retry", "jax")):
        rt = runtime(name, {"numNodes": 1, policy: {}}, [job("node", "busybox:1.36", ancestor="trainer")])
        rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] = 0
        out.append(rt)
    return out


LIFECYCLE = {
    "complete": ({"numNodes": 2, "image": "kwok.e2e/running:1"}, {},
                 [("pods", 2), ("status", "running"), ("finish",), ("until", "Complete"), ("status", "complete")]),
    "complete-at-once": ({"numNodes": 1, "image": "kwok.e2e/succeed:1"}, {},
                         [("until", "Complete"), ("status", "complete")]),
    "failed": ({"numNodes": 2, "image": "kwok.e2e/fail:1"}, {"runtimeRef": NO_RETRY["torch-no-retry"]},
               [("until", "Failed"), ("status", "failed")]),
    "suspended-then-resumed": ({"numNodes": 2, "image": "kwok.e2e/running:1"}, {"suspend": True},
                               [("jobset",), ("status", "suspended"), ("patch", {"suspend": False}), ("pods", 2),
                                ("status", "resumed"), ("finish",), ("until", "Complete"), ("status", "complete")]),
    "suspended-while-running": ({"numNodes": 2, "image": "kwok.e2e/running:1"}, {},
                                [("pods", 2), ("patch", {"suspend": True}), ("gone",), ("status", "suspended")]),
    "deadline": ({"numNodes": 2, "image": "kwok.e2e/running:1"}, {"activeDeadlineSeconds": 5},
                 [("until", "Failed"), ("status", "failed")]),
    "mpi-complete": ({"numNodes": 2, "image": "kwok.e2e/succeed:1"}, {"runtimeRef": {"name": "deepspeed-distributed"}},
                     [("until", "Complete"), ("status", "complete")]),
    "jax-failed": ({"numNodes": 3, "image": "kwok.e2e/fail:1"}, {"runtimeRef": NO_RETRY["jax-no-retry"]},
                   [("until", "Failed"), ("status", "failed")]),
}


# Lifecycles whose final jobsStatus depends on timing in both controllers (see compare_lifecycle).
TIMING_DEPENDENT_JOBS_STATUS = {"deadline"}


def normalise_full_status(status):
    """The whole status, minus timestamps (conditions sorted by type)."""
    status = json.loads(json.dumps(status or {}))
    for c in status.get("conditions") or []:
        c.pop("lastTransitionTime", None)
    if "conditions" in status:
        status["conditions"] = sorted(status["conditions"], key=lambda c: c["type"])
    return status


def lifecycle_scenario(name, trainer, spec, steps, timeout):
    ns = f"sbs-life-{name}"
    kubectl("create", "namespace", ns, check=False)
    for rt in no_retry_runtimes():
        kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(rt))
    full = {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer, **spec}
    tj = {"apiVersion": TRAINJOB_API, "kind": "TrainJob", "metadata": {"name": name}, "spec": full}
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(tj))
    record, deadline = [], time.monotonic() + timeout

    def get():
        return json.loads(kubectl("get", "trainjob", name, "-n", ns, "-o", "json").stdout)

    def pods():
        out = kubectl("get", "pods", "-n", ns, "-l", f"jobset.sigs.k8s.io/jobset-name={name}", "-o", "json")
        return json.loads(out.stdout)["items"]

    def until(what, ok):
        while not ok():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: {what} not reached in {timeout} s (status {get().get('status')})")
            time.sleep(0.5)

    for step in steps:
        kind = step[0]
        if kind == "pods":
            until(f"{step[1]} pods Ready", lambda: sum(
                any(c["type"] == "Ready" and c["status"] == "True" for c in (p.get("status") or {}).get("conditions", []))
                for p in pods()) >= step[1])
        elif kind == "finish":
            for pod in pods():
                kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "e2e.kubetrain.dev/finish=succeed",
                        "--overwrite")
        elif kind == "patch":
            kubectl("patch", "trainjob", name, "-n", ns, "--type", "merge", "-p", json.dumps({"spec": step[1]}))
        elif kind == "gone":
            until("no pods", lambda: not pods())
        elif kind == "jobset":
            until("JobSet", lambda: kubectl("get", "jobset", name, "-n", ns, check=False).returncode == 0)
        elif kind == "until":
            until(f"condition {step[1]}", lambda: any(
                c["type"] == step[1] and c["status"] == "True" for c in (get().get("status") or {}).get("conditions", [])))
        elif kind == "status":
            # Settled: unchanged for 3 s (status writes that follow a transition land), at most 30 s.
            last, since, end = None, time.monotonic(), time.monotonic() + 30
            while time.monotonic() < end:
                now = normalise_full_status(get().get("status"))
                if now != last:
                    last, since = now, time.monotonic()
                elif time.monotonic() - since >= 3:
                    break
                time.sleep(0.5)
            record.append({"step": step[1], "status": last})
    return record


def lifecycle(args):
    from concurrent.futures import ThreadPoolExecutor

    def one(item):
        name, (trainer, spec, steps) = item
        try:
            return name, lifecycle_scenario(name, trainer, spec, steps, args.timeout)
        except (TimeoutError, RuntimeError) as e:
            return name, [{"step": "error", "status": str(e)}]

    with ThreadPoolExecutor(max_workers=len(LIFECYCLE)) as pool:
        out = dict(pool.map(one, LIFECYCLE.items()))
    Path(args.out).write_text(json.dumps(out, indent=1, sort_keys=True))
    print(f"lifecycle: {len(out)} scenarios recorded")


def compare_lifecycle(args):
    up = json.loads(Path(args.upstream).read_text())
    kt = json.loads(Path(args.kubetrain).read_text())
    same, report = 0, []
    for name in sorted(set(up) | set(kt)):
        u, k = up.get(name, []), kt.get(name, [])
        problems = []
        if [s["step"] for s in u] != [s["step"] for s in k]:
            problems.append(f"steps: upstream {[s['step'] for s in u]} != kubetrain {[s['step'] for s in k]}")
        for su, sk in zip(u, k):
            us, ks = su["status"], sk["status"]
            if name in TIMING_DEPENDENT_JOBS_STATUS:
                # Both controllers keep the jobsStatus the JobSet last reported before the deadline deleted it:
                # whether its pods had turned Ready within the 5 s is a race, not a controller difference.
                us, ks = ({k2: v for k2, v in st.items() if k2 != "jobsStatus"} for st in (us, ks))
            problems += [f"{su['step']}: {p}" for p in diff(us, ks, ".status")]
        if problems:
            report.append(f"## lifecycle {name}\n" + "\n".join(f"- {p}" for p in problems))
        else:
            same += 1
    text = "\n\n".join(report) or "no differences"
    if args.report:
        Path(args.report).write_text(text + "\n")
    print(f"status: {same}/{len(set(up) | set(kt))} lifecycles identical")


# The time each cluster's defaulting webhook stamped on a runtime patch, printed in denials that show the
# patches (`"time":"2026-12-01T18:04:37Z"`): the two runs differ in it by construction.
STAMPED_TIME = re.compile(r'(\\?"time\\?":\\?")\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ')


def same_messages(uv, kv):
    norm = lambda vs: [dict(v, message=STAMPED_TIME.sub(r"\1<time>", v["message"])) for v in vs]
    return norm(uv) == norm(kv)


def compare_webhooks(args):
    up = json.loads(Path(args.upstream).read_text())["verdicts"]
    kt = json.loads(Path(args.kubetrain).read_text())["verdicts"]
    cases = sorted(set(up) | set(kt))
    verdicts, messages, report = 0, 0, []
    for case in cases:
        uv, kv = up.get(case) or [], kt.get(case) or []
        same = [v["allowed"] for v in uv] == [v["allowed"] for v in kv]
        verdicts += same
        messages += same_messages(uv, kv)
        lines = [f"- {'verdicts agree' if same else 'VERDICTS DIFFER'}"]
        for i, (u, k) in enumerate(zip(uv, kv)):
            lines.append(f"- object {i + 1} ({u['kind']}): upstream {'allowed' if u['allowed'] else 'refused'}: "
                         f"`{u['message'][:400]}`; kubetrain {'allowed' if k['allowed'] else 'refused'}: "
                         f"`{k['message'][:400]}`")
        report.append(f"## {case}\n" + "\n".join(lines))
    if args.report:
        Path(args.report).write_text("\n\n".join(report) + "\n")
    print(f"webhooks: {verdicts}/{len(cases)} verdicts agree on invalid objects; messages identical: {messages}/{len(cases)}")


# --- comparing two runs ---------------------------------------------------------------------------------


def diff(a, b, path=""):
    """Paths where two JSON values differ (first 20)."""
    out = []
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{path}.{k}: only kubetrain")
            elif k not in b:
                out.append(f"{path}.{k}: only upstream")
            else:
                out += diff(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            out += diff(x, y, f"{path}[{i}]")
    elif a != b:
        out.append(f"{path}: upstream {json.dumps(a)[:160]} != kubetrain {json.dumps(b)[:160]}")
    return out[:20]


def known_divergences(case, uv, kv, uo, ko):
    """The documented, deliberate divergences a case shows (docs/e2e.md); an empty list when there are none.
    Each is checked narrowly, so anything else still counts as a difference."""
    known = []
    allowed_u = [v["allowed"] for v in uv or []]
    allowed_k = [v["allowed"] for v in kv or []]
    if allowed_u != allowed_k and any(
        not v["allowed"] and "spec.trainer.numNodes" in v["message"] and "greater than or equal to 0" in v["message"]
        for v in kv or []
    ):
        known.append("numNodes < 0: refused by kubetrain's CRD, accepted by upstream v2.3.0 for non-torch runtimes")
    return known


def env_order_only(uo, ko):
    """True when two object sets differ only in the order of some container env lists (upstream's plugin order
    comes from Go map iteration, so XGBoost's and Flux's env order changes between upstream restarts)."""

    def canon(node):
        if isinstance(node, dict):
            out = {k: canon(v) for k, v in node.items()}
            if isinstance(out.get("env"), list) and "name" in out:
                out["env"] = sorted(out["env"], key=lambda e: json.dumps(e, sort_keys=True))
            return out
        if isinstance(node, list):
            return [canon(v) for v in node]
        return node

    return uo != ko and canon(uo) == canon(ko)


ZERO_COUNTS = "first jobsStatus with every count zero: held back by kubetrain until a count or a condition"


def zero_counts_held_back(uo, ko):
    """Upstream's objects with the TrainJob's all-zero `jobsStatus` dropped where ours has none: kubetrain holds
    a first all-zero jobsStatus back (docs/operator-internals.md, "Status", step 5), so a TrainJob read before
    its Jobs have pods shows none where upstream shows zeros. Anything else still counts as a difference."""
    if not isinstance(uo, dict) or not isinstance(ko, dict):
        return uo
    us, ks = uo.get("TrainJob.status"), ko.get("TrainJob.status")
    if not isinstance(us, dict):
        return uo
    counts = us.get("jobsStatus")
    if not counts or (ks or {}).get("jobsStatus"):
        return uo
    keys = ("active", "ready", "succeeded", "failed", "suspended")
    if any(j.get(k, 0) for j in counts for k in keys):
        return uo
    us = {k: v for k, v in us.items() if k != "jobsStatus"}
    if isinstance(ks, dict) and "jobsStatus" in ks:
        us["jobsStatus"] = ks["jobsStatus"]
    return {**uo, "TrainJob.status": us}


def compare(args):
    up = json.loads(Path(args.upstream).read_text())
    kt = json.loads(Path(args.kubetrain).read_text())
    cases = sorted(set(up["verdicts"]) | set(kt["verdicts"]))
    identical, explained, verdict_same, message_same = 0, 0, 0, 0
    report, kinds = [], {}
    for case in cases:
        uv, kv = up["verdicts"].get(case), kt["verdicts"].get(case)
        same_verdict = [v["allowed"] for v in uv or []] == [v["allowed"] for v in kv or []]
        verdict_same += same_verdict
        message_same += (uv == kv)
        problems = [] if same_verdict else [f"verdicts: upstream {uv} != kubetrain {kv}"]
        uo, ko = up["objects"].get(case), kt["objects"].get(case)
        if uo is not None or ko is not None:
            problems += diff(uo or {}, ko or {})
        if not problems:
            identical += 1
            continue
        known = known_divergences(case, uv, kv, uo, ko)
        held = zero_counts_held_back(uo, ko)
        if same_verdict and held is not uo:
            known.append(ZERO_COUNTS)
        if same_verdict and (env_order_only(held, ko) or (held is not uo and held == ko)):
            if held != ko:
                known.append("env order: upstream's plugin order is random (Go map iteration)")
        elif ZERO_COUNTS in known:
            known.remove(ZERO_COUNTS)
        if known:
            explained += 1
            for k in known:
                kinds[k] = kinds.get(k, 0) + 1
        tag = f" (documented: {'; '.join(known)})" if known else ""
        report.append(f"## {case}{tag}\n" + "\n".join(f"- {p}" for p in problems))
    n = len(cases)
    text = "\n\n".join(report) or "no differences"
    if args.report:
        Path(args.report).write_text(text + "\n")
    print(f"webhook verdicts: {verdict_same}/{n} agree; messages identical: {message_same}/{n}")
    for kind, count in sorted(kinds.items()):
        print(f"documented divergence: {count} x {kind}")
    print(f"unexplained: {n - identical - explained}")
    print(f"render: {identical}/{n} identical")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("--count", type=int, default=200)
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--out", required=True)
    g.add_argument("--upstream-examples")
    g.add_argument("--no-examples", action="store_true")
    g.set_defaults(run=generate)
    r = sub.add_parser("run")
    r.add_argument("--corpus", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--timeout", type=int, default=180)
    r.add_argument("--settle", type=int, default=5)
    r.add_argument("--parallel", type=int, default=8)
    r.set_defaults(run=run)
    i = sub.add_parser("generate-invalid")
    i.add_argument("--out", required=True)
    i.set_defaults(run=generate_invalid)
    life = sub.add_parser("lifecycle")
    life.add_argument("--out", required=True)
    life.add_argument("--timeout", type=int, default=240)
    life.set_defaults(run=lifecycle)
    for cmd, fn in (("compare-lifecycle", compare_lifecycle), ("compare-webhooks", compare_webhooks)):
        cl = sub.add_parser(cmd)
        cl.add_argument("upstream")
        cl.add_argument("kubetrain")
        cl.add_argument("--report")
        cl.set_defaults(run=fn)
    c = sub.add_parser("compare")
    c.add_argument("upstream")
    c.add_argument("kubetrain")
    c.add_argument("--report")
    c.set_defaults(run=compare)
    args = p.parse_args()
    sys.exit(args.run(args) or 0)


if __name__ == "__main__":
    main()
