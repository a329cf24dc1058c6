"""The live render differential of e2e/side-by-side.sh: the same TrainJobs applied once with upstream's
controller and once with kubetrain's, the objects each produced read back and compared.

  sidebyside.py generate --count N --seed S --out DIR   the corpus: DIR/NNN-<name>.yaml, one case per file
  sidebyside.py run --corpus DIR --out FILE              apply every case (own namespace), wait, dump objects
  sidebyside.py compare UPSTREAM.json KUBETRAIN.json [--report FILE]
                                                         prints `render: N/M identical` (and the verdicts line)

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
        if same_verdict and env_order_only(uo, ko):
            known.append("env order: upstream's plugin order is random (Go map iteration)")
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
    c = sub.add_parser("compare")
    c.add_argument("upstream")
    c.add_argument("kubetrain")
    c.add_argument("--report")
    c.set_defaults(run=compare)
    args = p.parse_args()
    sys.exit(args.run(args) or 0)


if __name__ == "__main__":
    main()
