#!/usr/bin/env python3
"""`kubetrain migrate` against the real Training Operator v1 (docs/migrate.md, "Proof against the real v1
operator"; issue 34 item 5). Used by e2e/migrate-compare.sh.

    migrate_compare.py corpus --examples DIR [--slice] --out OUT
        OUT/v1/NAME.yaml (namespace v1) and OUT/v2-input/NAME.yaml (namespace v2): every PyTorchJob, TFJob,
        MPIJob, XGBoostJob and PaddleJob among the v1 module's examples (names made unique), plus the
        generated jobs below; --slice keeps one example per kind.
    migrate_compare.py settle --kubectl KUBECTL --out OUT [--timeout S]
        Waits until each job has as many pods on each side as its v1 replicas add up to (or the deadline),
        then writes OUT/cluster.json: the pods, Services and ConfigMaps of both namespaces.
    migrate_compare.py compare --out OUT [--report FILE]
        What each training process would see, rank by rank, on both sides; prints `migrate: N/M equivalent`.
"""

import argparse
import copy
import json
import os
import re
import subprocess
import sys
import time

import yaml

KINDS = {
    # kind: (replica-specs field, the v1 operator's container name, the trainer replica types in rank order)
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch", ["Master", "Worker"]),
    "XGBoostJob": ("xgbReplicaSpecs", "xgboost", ["Master", "Worker"]),
    "PaddleJob": ("paddleReplicaSpecs", "paddle", ["Master", "Worker"]),
    "TFJob": ("tfReplicaSpecs", "tensorflow", ["Worker"]),
    "MPIJob": ("mpiReplicaSpecs", "mpi", ["Worker"]),
}
# The rendezvous env each kind's processes read (v1's names, which the TrainJob sets too).
WORLD_ENV = {
    # With elasticPolicy, v1 also gave torchrun its elastic env (pkg/controller.v1/pytorch/elastic.go).
    "PyTorchJob": ["WORLD_SIZE", "RANK", "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_RDZV_BACKEND",
                   "PET_RDZV_ID", "PET_RDZV_CONF", "PET_MAX_RESTARTS", "PET_STANDALONE"],
    "XGBoostJob": ["WORLD_SIZE", "RANK", "WORKER_PORT"],
    "PaddleJob": ["PADDLE_NNODES", "PADDLE_JOB_ID"],
    "TFJob": [],
    "MPIJob": [],
}
# Env values that are addresses of another pod: compared by the rank they reach.
ADDRESS_ENV = {
    "PyTorchJob": ["MASTER_ADDR", "PET_MASTER_ADDR", "PET_RDZV_ENDPOINT"],
    "XGBoostJob": ["MASTER_ADDR", "WORKER_ADDRS"],
    "PaddleJob": ["PADDLE_MASTER"],
}
PORT_ENV = {"PyTorchJob": ["MASTER_PORT", "PET_MASTER_PORT"], "XGBoostJob": ["MASTER_PORT"]}


# --- the corpus -------------------------------------------------------------------------------------------


def container(name, image, command=None, args=None, **extra):
    c = {"name": name, "image": image}
    if command:
        c["command"] = command
    if args:
        c["args"] = args
    c.update(extra)
    return c


def replica(n, c, restart="OnFailure", **pod):
    return {"replicas": n, "restartPolicy": restart, "template": {"spec": {"containers": [c], **pod}}}


def generated():
    """v1 jobs the examples do not cover: GPUs, nprocPerNode, scheduling constraints, volumes, more nodes."""
    gpu = {"limits": {"nvidia.com/gpu": "2", "cpu": "4", "memory": "8Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}}
    sched = {
        "nodeSelector": {"type": "kwok"},
        "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
        "volumes": [{"name": "scratch", "emptyDir": {}}, {"name": "shm", "emptyDir": {"medium": "Memory"}}],
    }
    mounts = [{"name": "scratch", "mountPath": "/scratch"}, {"name": "shm", "mountPath": "/dev/shm"}]
    torch = container("pytorch", "kwok.e2e/torch:gen", ["torchrun"], ["/opt/train.py", "--epochs=3"],
                      resources=gpu, volumeMounts=mounts, env=[{"name": "NCCL_DEBUG", "value": "INFO"}])
    jobs = [
        {"kind": "PyTorchJob", "metadata": {"name": "gen-torch-gpu"},
         "spec": {"nprocPerNode": "2", "pytorchReplicaSpecs": {
             "Master": replica(1, torch, **sched), "Worker": replica(3, torch, **sched)}}},
        {"kind": "PyTorchJob", "metadata": {"name": "gen-torch-plain"},
         "spec": {"pytorchReplicaSpecs": {
             "Master": replica(1, container("pytorch", "kwok.e2e/torch:plain", ["python3", "/opt/mnist.py"])),
             "Worker": replica(2, container("pytorch", "kwok.e2e/torch:plain", ["python3", "/opt/mnist.py"]))}}},
        {"kind": "PyTorchJob", "metadata": {"name": "gen-torch-exitcode"},
         "spec": {"pytorchReplicaSpecs": {
             "Master": replica(1, container("pytorch", "kwok.e2e/torch:ec", ["python3", "/opt/t.py"]), "ExitCode"),
             "Worker": replica(1, container("pytorch", "kwok.e2e/torch:ec", ["python3", "/opt/t.py"]), "ExitCode")}}},
        # torchrun with v1's default nprocPerNode (auto after v1's defaulting), on GPUs and on CPUs, and with an
        # explicit auto.
        {"kind": "PyTorchJob", "metadata": {"name": "gen-torchrun-default"},
         "spec": {"pytorchReplicaSpecs": {"Master": replica(1, torch, **sched), "Worker": replica(1, torch, **sched)}}},
        {"kind": "PyTorchJob", "metadata": {"name": "gen-torchrun-cpu-default"},
         "spec": {"pytorchReplicaSpecs": {
             "Master": replica(1, container("pytorch", "kwok.e2e/torch:cpu", ["torchrun"], ["/opt/train.py"])),
             "Worker": replica(1, container("pytorch", "kwok.e2e/torch:cpu", ["torchrun"], ["/opt/train.py"]))}}},
        {"kind": "PyTorchJob", "metadata": {"name": "gen-torchrun-auto"},
         "spec": {"nprocPerNode": "auto", "pytorchReplicaSpecs": {"Master": replica(1, torch, **sched),
                                                                  "Worker": replica(1, torch, **sched)}}},
        {"kind": "XGBoostJob", "metadata": {"name": "gen-xgboost"},
         "spec": {"xgbReplicaSpecs": {
             "Master": replica(1, container("xgboost", "kwok.e2e/xgb:gen", args=["--n_estimators=10"],
                                           ports=[{"name": "xgboostjob-port", "containerPort": 9991}])),
             "Worker": replica(2, container("xgboost", "kwok.e2e/xgb:gen", args=["--n_estimators=10"],
                                           ports=[{"name": "xgboostjob-port", "containerPort": 9991}]))}}},
        {"kind": "PaddleJob", "metadata": {"name": "gen-paddle"},
         "spec": {"paddleReplicaSpecs": {"Worker": replica(
             3, container("paddle", "kwok.e2e/paddle:gen", ["python"], ["-m", "paddle.distributed.launch", "t.py"],
                          ports=[{"name": "master", "containerPort": 37777}]), **sched)}}},
        {"kind": "TFJob", "metadata": {"name": "gen-tf-ps"},
         "spec": {"tfReplicaSpecs": {
             "PS": replica(1, container("tensorflow", "kwok.e2e/tf:gen", ["python", "/opt/t.py"])),
             "Worker": replica(2, container("tensorflow", "kwok.e2e/tf:gen", ["python", "/opt/t.py"]))}}},
        {"kind": "MPIJob", "metadata": {"name": "gen-mpi"},
         "spec": {"slotsPerWorker": 2, "mpiReplicaSpecs": {
             "Launcher": replica(1, container("mpi", "kwok.e2e/mpi:gen", ["mpirun"], ["-np", "4", "/opt/hello"])),
             "Worker": replica(2, container("mpi", "kwok.e2e/mpi:gen", resources=gpu))}}},
    ]
    for j in jobs:
        j["apiVersion"] = "kubeflow.org/v1"
    return jobs


def examples(root):
    found = []
    for dirpath, _, files in sorted(os.walk(root)):
        for f in sorted(files):
            if not f.endswith((".yaml", ".yml")):
                continue
            with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                for doc in yaml.safe_load_all(fh):
                    if doc and doc.get("apiVersion") == "kubeflow.org/v1" and doc.get("kind") in KINDS:
                        doc["_source"] = os.path.relpath(os.path.join(dirpath, f), root)
                        found.append(doc)
    return found


def cmd_corpus(a):
    jobs = examples(a.examples)
    if a.slice:
        seen, kept = set(), []
        for j in jobs:
            if j["kind"] not in seen:
                seen.add(j["kind"])
                kept.append(j)
        jobs = kept
    jobs += generated()
    names = set()
    for d in ("v1", "v2-input"):
        os.makedirs(os.path.join(a.out, d), exist_ok=True)
    sources = {}
    for j in jobs:
        base = j["metadata"].get("name") or j["metadata"].get("generateName", "job").rstrip("-")
        name, n = base, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.add(name)
        sources[name] = j.pop("_source", "generated")
        j["metadata"] = {k: v for k, v in j["metadata"].items() if k != "generateName"}
        j["metadata"]["name"] = name
        for ns, d in (("v1", "v1"), ("v2", "v2-input")):
            doc = copy.deepcopy(j)
            doc["metadata"]["namespace"] = ns
            with open(os.path.join(a.out, d, f"{name}.yaml"), "w", encoding="utf-8") as fh:
                yaml.safe_dump(doc, fh, sort_keys=False)
    with open(os.path.join(a.out, "sources.json"), "w", encoding="utf-8") as fh:
        json.dump(sources, fh, indent=1)


def load_jobs(out):
    jobs = {}
    d = os.path.join(out, "v1")
    for f in sorted(os.listdir(d)):
        with open(os.path.join(d, f), encoding="utf-8") as fh:
            j = yaml.safe_load(fh)
        jobs[j["metadata"]["name"]] = j
    return jobs


def replicas(job):
    field = KINDS[job["kind"]][0]
    return {t: int(s.get("replicas", 1) if s.get("replicas") is not None else 1)
            for t, s in (job["spec"].get(field) or {}).items()}


# --- settle -----------------------------------------------------------------------------------------------


def kubectl_json(k, *args):
    r = subprocess.run([k, *args, "-o", "json"], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
    return json.loads(r.stdout)["items"]


def v1_job_of(pod):
    return pod["metadata"].get("labels", {}).get("training.kubeflow.org/job-name")


def v2_job_of(pod):
    return pod["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name")


def cmd_settle(a):
    jobs = {n: j for n, j in load_jobs(a.out).items()
            if not os.path.exists(os.path.join(a.out, "refused-v1", f"{n}.txt"))}
    want = {n: sum(replicas(j).values()) for n, j in jobs.items()}
    deadline = time.monotonic() + a.timeout
    while True:
        state = {ns: {kind: kubectl_json(a.kubectl, "-n", ns, "get", kind) for kind in
                      ("pods", "services", "configmaps")} for ns in ("v1", "v2")}
        have = {n: (sum(1 for p in state["v1"]["pods"] if v1_job_of(p) == n),
                    sum(1 for p in state["v2"]["pods"] if v2_job_of(p) == n)) for n in jobs}
        short = [n for n in jobs if have[n] != (want[n], want[n])]
        if not short or time.monotonic() > deadline:
            break
        time.sleep(2)
    if short:
        print(f"[migrate] after {a.timeout} s, still short of pods (v1, v2 / wanted): " +
              ", ".join(f"{n} {have[n]}/{want[n]}" for n in short), file=sys.stderr)
    with open(os.path.join(a.out, "cluster.json"), "w", encoding="utf-8") as fh:
        json.dump(state, fh)


# --- what a process sees ----------------------------------------------------------------------------------


def field_ref(pod, path):
    m = re.fullmatch(r"metadata\.(annotations|labels)\['(.+)'\]", path)
    if m:
        return pod["metadata"].get(m.group(1), {}).get(m.group(2))
    simple = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": pod["metadata"]["namespace"],
              "status.podIP": pod.get("status", {}).get("podIP", "<podIP>"),
              "spec.nodeName": pod["spec"].get("nodeName")}
    return simple.get(path, f"<{path}>")


def env_of(pod, c):
    """The container's env as the process sees it: fieldRefs resolved, $(VAR) expanded, the last one wins."""
    env = {}
    for e in c.get("env") or []:
        if "value" in e:
            v = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        elif "fieldRef" in (e.get("valueFrom") or {}):
            v = field_ref(pod, e["valueFrom"]["fieldRef"]["fieldPath"])
        elif e.get("valueFrom"):
            v = "<" + next(iter(e["valueFrom"])) + ">"
        else:
            v = ""
        env[e["name"]] = v
    return env


class Side:
    """One side's pods of one job, keyed by ("node", rank) for trainer pods or (type, index) for others."""

    def __init__(self, ns_state, pods, key_of):
        self.services = {s["metadata"]["name"]: s for s in ns_state["services"]}
        self.configmaps = {c["metadata"]["name"]: c for c in ns_state["configmaps"]}
        self.pods = {}
        for p in pods:
            k = key_of(p)
            if k is not None:
                self.pods[k] = p

    def key_by_name(self, name):
        return next((k for k, p in self.pods.items() if p["metadata"]["name"] == name), None)

    def reach(self, host):
        """The key of the pod an address reaches, or a string saying why none."""
        host = host.split(":")[0] if host.count(":") == 1 else host
        for k, p in self.pods.items():
            if p.get("status", {}).get("podIP") and p["status"]["podIP"] == host:
                return k
        labels = host.split(".")
        if len(labels) >= 2 and labels[1] in self.services:
            svc = self.services[labels[1]]
            for k, p in self.pods.items():
                if (p["spec"].get("hostname"), p["spec"].get("subdomain")) == (labels[0], labels[1]) and \
                        selects(svc, p):
                    return k
            return f"no pod with hostname {labels[0]} in headless Service {labels[1]}"
        if labels[0] in self.services:
            hits = [k for k, p in self.pods.items() if selects(self.services[labels[0]], p)]
            return hits[0] if len(hits) == 1 else f"Service {labels[0]} selects {len(hits)} pods"
        k = self.key_by_name(labels[0])
        return k if k is not None else f"nothing answers to {host}"


def selects(svc, pod):
    sel = svc["spec"].get("selector") or {}
    labels = pod["metadata"].get("labels", {})
    return bool(sel) and all(labels.get(k) == v for k, v in sel.items())


def v1_key(job):
    order = KINDS[job["kind"]][2]
    counts = replicas(job)
    trainer = [t for t in order if t in counts]
    if job["kind"] == "TFJob" and not trainer:
        trainer = [t for t in ("Chief", "Master") if t in counts][:1]
    offsets, n = {}, 0
    for t in trainer:
        offsets[t.lower()] = n
        n += counts[t]

    def key(pod):
        labels = pod["metadata"].get("labels", {})
        # MPIJob's launcher has no replica-index label: it is the only one.
        t, i = labels.get("training.kubeflow.org/replica-type"), labels.get("training.kubeflow.org/replica-index", 0)
        if t is None:
            return None
        return ("node", offsets[t] + int(i)) if t in offsets else (t, int(i))

    return key


def v2_key(pod):
    labels = pod["metadata"].get("labels", {})
    rj = labels.get("jobset.sigs.k8s.io/replicatedjob-name")
    idx = pod["metadata"].get("annotations", {}).get("batch.kubernetes.io/job-completion-index")
    if rj is None or idx is None:
        return None
    # The converter writes one Job per replicated job (replicas: 1); another would show as a type of its own.
    job_index = labels.get("jobset.sigs.k8s.io/job-index", "0")
    return (rj if job_index == "0" else f"{rj}[{job_index}]", int(idx))


def main_container(pod, names):
    cs = pod["spec"]["containers"]
    for n in names:
        for c in cs:
            if c["name"] == n:
                return c
    return cs[0]


INJECTED = re.compile(r"^kube-api-access-")


def view(job, side, key, v2):
    """What the process of one pod sees, in terms that compare across the two operators."""
    pod = side.pods[key]
    kind = job["kind"]
    c = main_container(pod, (["node"] if v2 else []) + [KINDS[kind][1], job["spec"].get("mainContainer", "")])
    env = env_of(pod, c)
    v = {
        "image": c.get("image"), "command": c.get("command"), "args": c.get("args"),
        "resources": c.get("resources") or {},
        "volumeMounts": sorted((m for m in c.get("volumeMounts") or [] if not INJECTED.match(m["name"])),
                               key=lambda m: m["mountPath"]),
        "volumes": sorted((vol for vol in pod["spec"].get("volumes") or [] if not INJECTED.match(vol["name"])),
                          key=lambda x: x["name"]),
        "nodeSelector": pod["spec"].get("nodeSelector") or {},
        "tolerations": sorted(pod["spec"].get("tolerations") or [], key=json.dumps),
    }
    if key[0] == "node":
        for name in WORLD_ENV.get(kind, []):
            v[f"env {name}"] = env.get(name)
        for name in PORT_ENV.get(kind, []):
            v[f"env {name}"] = env.get(name)
        for name in ADDRESS_ENV.get(kind, []):
            if name in env:
                v[f"env {name} reaches"] = [side.reach(h) for h in env[name].split(",") if h]
            else:
                v[f"env {name} reaches"] = None
        if kind == "PyTorchJob" and env.get("PET_RDZV_ENDPOINT"):
            v["env PET_RDZV_ENDPOINT port"] = env["PET_RDZV_ENDPOINT"].rsplit(":", 1)[-1]
            # The c10d rendezvous id only has to be the one of every node of the job.
            v["env PET_RDZV_ID same on every node"] = all(
                env_of(p, main_container(p, ["node", "pytorch"])).get("PET_RDZV_ID") == env.get("PET_RDZV_ID")
                for k, p in side.pods.items() if k[0] == "node")
        if kind == "PyTorchJob" and torchrun(v):
            v["torchrun nproc_per_node"] = torchrun_option(v, "nproc_per_node", env)
        if kind == "PaddleJob" and env.get("PADDLE_MASTER"):
            v["env PADDLE_MASTER port"] = env["PADDLE_MASTER"].rsplit(":", 1)[-1]
        if kind == "TFJob":
            v["env TF_CONFIG"] = tf_config(side, env.get("TF_CONFIG"))
        v["user env"] = {k: env.get(k) for k in user_env_names(job)}
    if kind == "MPIJob" and key[0] == "node":
        v["ranks started by"] = mpi_rank_start(side)
    if kind == "MPIJob" and key[0] == "launcher":
        v["hostfile"] = hostfile(side, pod)
        v["launcher files in /etc/mpi besides the transport's"] = mpi_files(pod, c)
    return v


def mpi_rank_start(side):
    """How the launcher's mpirun starts the ranks on a worker, and so which env they inherit: read from the
    launcher's OMPI_MCA_plm_rsh_agent (v1 points it at kubexec.sh; without one Open MPI uses ssh)."""
    launcher = side.pods.get(("launcher", 0))
    if launcher is None:
        return None
    agent = env_of(launcher, main_container(launcher, ["launcher", "node", "mpi"])).get("OMPI_MCA_plm_rsh_agent")
    if agent and agent.endswith("kubexec.sh"):
        return ("kubectl exec into the worker's container: the ranks inherit its env (the image's ENV and the "
                "template's env)")
    return ("ssh to the worker's sshd: the ranks get the SSH session's env (sshd's defaults), plus what mpirun "
            "forwards (-x)")


def mpi_files(pod, c):
    """The files the launcher finds under /etc/mpi, less v1's kubexec.sh (the kubectl exec transport)."""
    mounted = {m["name"] for m in c.get("volumeMounts") or [] if m["mountPath"] == "/etc/mpi"}
    files = []
    for vol in pod["spec"].get("volumes") or []:
        if vol["name"] in mounted and vol.get("configMap"):
            files += [i["path"] for i in vol["configMap"].get("items") or [] if i["path"] != "kubexec.sh"]
    return sorted(files)


def tf_config(side, text):
    """TF_CONFIG with each cluster address replaced by the pod it reaches and its port (the two operators name
    pods differently: v1's `<job>-<type>-<i>.<ns>.svc`, V2's JobSet DNS names)."""
    if not text:
        return None
    try:
        config = json.loads(text)
    except ValueError:
        return f"not JSON: {text}"
    cluster = config.get("cluster") or {}
    config["cluster"] = {role: [[side.reach(a), a.rsplit(":", 1)[-1]] for a in addresses]
                         for role, addresses in cluster.items()}
    return config


def user_env_names(job):
    field = KINDS[job["kind"]][0]
    names = set()
    for spec in (job["spec"].get(field) or {}).values():
        for c in spec.get("template", {}).get("spec", {}).get("containers", []):
            names.update(e["name"] for e in c.get("env") or [])
    return sorted(names)


def hostfile(side, pod):
    """The MPI hostfile the launcher reads: each host as the key of the pod it reaches, with its slots."""
    for vol in pod["spec"].get("volumes") or []:
        cm = side.configmaps.get((vol.get("configMap") or {}).get("name"))
        if cm and "hostfile" in (cm.get("data") or {}):
            hosts = []
            for line in cm["data"]["hostfile"].splitlines():
                parts = line.split()
                if parts:
                    slots = next((p.split("=")[1] for p in parts[1:] if p.startswith(("slots=", "max_slots="))), "1")
                    hosts.append([side.reach(parts[0]), slots])
            return hosts
    return None


# --- equivalences docs/migrate.md lists -------------------------------------------------------------------

# MPI: v1 starts the remote processes with `kubectl exec` (a delivery init container, kubexec.sh and the
# hostfile in one ConfigMap); V2 with SSH (a key Secret and a hostfile ConfigMap of its own).
MPI_TRANSPORT_VOLUMES = {"mpi-job-kubectl", "mpi-job-config", "mpi-ssh-auth", "mpi-hostfile"}


def equivalent(job, field, a, b, view_v1, view_v2):
    """The docs/migrate.md entry that makes this difference equivalent, or None."""
    if field == "env PET_NPROC_PER_NODE" and a == "auto" and str(b).isdigit() and not torchrun(view_v1):
        return ("PET_NPROC_PER_NODE: v1's default auto vs V2's CPU count of a pod without GPUs; only torchrun "
                "reads it, and this process is not started by torchrun (WORLD_SIZE and RANK are equal)")
    if field == "env PET_NPROC_PER_NODE" and torchrun(view_v1) and torchrun(view_v2) and \
            view_v1.get("torchrun nproc_per_node") == view_v2.get("torchrun nproc_per_node"):
        return ("PET_NPROC_PER_NODE: torchrun's --nproc-per-node on the command line wins over the env, and the "
                "value torchrun uses is the same")
    if field in ("command", "args") and without_inserted_nproc(view_v2) == (view_v1.get("command"),
                                                                           view_v1.get("args")):
        return ("torchrun's --nproc-per-node=<v1's value> inserted after torchrun by the converter, so that torchrun "
                "counts processes as v1's did (V2 sets PET_NPROC_PER_NODE to the pod's CPU count without GPUs)")
    if field == "env PET_MASTER_PORT" and b == "29500" and a is not None:
        return "PET_MASTER_PORT: torchrun's rendezvous port on rank 0 is V2's 29500 on every rank (v1: the master port)"
    elastic = c10d(view_v1) and c10d(view_v2)
    if elastic and field in ("env PET_MASTER_ADDR reaches", "env PET_MASTER_PORT", "env PET_NODE_RANK"):
        return ("elastic: with a c10d rendezvous torchrun ignores PET_MASTER_ADDR, PET_MASTER_PORT and PET_NODE_RANK "
                "(they serve the static rendezvous only); the rendezvous assigns node ranks")
    if elastic and field == "env PET_RDZV_ENDPOINT port" and b == "29500":
        return ("elastic: the c10d store's port on the rank-0 pod, V2's 29500 on every rank (v1: rdzvPort, else the "
                "worker's pytorchjob-port)")
    if elastic and field == "env PET_RDZV_ID" and b and view_v2.get("env PET_RDZV_ID same on every node"):
        return ("elastic: the rendezvous id only names the rendezvous on its endpoint, the job's own rank-0 pod; "
                "every node of the TrainJob has the same one (its UID)")
    if job["kind"] == "MPIJob" and field == "launcher files in /etc/mpi besides the transport's" and \
            [f for f in a if f != "discover_hosts.sh"] == b and \
            not any("discover_hosts" in w for w in (view_v1.get("command") or []) + (view_v1.get("args") or [])):
        return ("MPI: v1's discover_hosts.sh (for Horovod elastic's --host-discovery-script), which this launcher's "
                "command does not name")
    if job["kind"] == "MPIJob" and field in ("volumes", "volumeMounts"):
        strip = lambda xs: [x for x in xs if x["name"] not in MPI_TRANSPORT_VOLUMES]  # noqa: E731
        if strip(a) == strip(b):
            return "MPI launch transport: kubectl exec (v1) vs SSH (V2)"
    return None


def torchrun(v):
    words = (v.get("command") or []) + (v.get("args") or [])
    return any("torchrun" in w or "torch.distributed.run" in w or "torch.distributed.launch" in w for w in words)


def c10d(v):
    return v.get("env PET_RDZV_BACKEND") == "c10d"


def torchrun_at(words):
    """The index of the word that starts torchrun (`torchrun`, or `torch.distributed.run`/`.launch` after -m)."""
    for i, w in enumerate(words):
        if os.path.basename(w) == "torchrun" or \
                (w in ("torch.distributed.run", "torch.distributed.launch") and i > 0 and words[i - 1] == "-m"):
            return i
    return None


def torchrun_option(v, name, env):
    """What torchrun uses for option `name`: its flag on the command line (`--nproc-per-node`, `--nproc_per_node`,
    `=` or a separate word), else its PET_ env (torch.distributed.argparse_util's `env` action)."""
    words = (v.get("command") or []) + (v.get("args") or [])
    at = torchrun_at(words)
    flags = {f"--{name}", f"--{name.replace('_', '-')}"}
    if at is not None:
        for i, w in enumerate(words[at + 1:], at + 1):
            flag, eq, value = w.partition("=")
            if flag in flags:
                return value if eq else (words[i + 1] if i + 1 < len(words) else None)
    return env.get(f"PET_{name.upper()}")


def without_inserted_nproc(v):
    """V2's command and args less a `--nproc-per-node=...` word right after the torchrun word (the converter's)."""
    command, args = list(v.get("command") or []), list(v.get("args") or [])
    at = torchrun_at(command + args)
    if at is not None:
        lst, i = (command, at) if at < len(command) else (args, at - len(command))
        if i + 1 < len(lst) and lst[i + 1].startswith("--nproc-per-node="):
            del lst[i + 1]
    return (command or None, args or None)


def compare_job(job, v1, v2):
    diffs, equiv = [], []
    for key in sorted(set(v1.pods) | set(v2.pods), key=lambda k: (k[0] != "node", k)):
        if key not in v1.pods or key not in v2.pods:
            diffs.append(f"{key_str(key)}: pod only in {'v1' if key in v1.pods else 'V2'}")
            continue
        a, b = view(job, v1, key, False), view(job, v2, key, True)
        for field in sorted(set(a) | set(b)):
            if a.get(field) == b.get(field):
                continue
            why = equivalent(job, field, a.get(field), b.get(field), a, b)
            line = f"{key_str(key)} {field}: v1 {json.dumps(a.get(field))} vs V2 {json.dumps(b.get(field))}"
            (equiv if why else diffs).append(line + (f" (equivalent: {why})" if why else ""))
    return diffs, equiv


def key_str(key):
    return f"rank {key[1]}" if key[0] == "node" else f"{key[0]} {key[1]}"


def cmd_compare(a):
    jobs = load_jobs(a.out)
    with open(os.path.join(a.out, "cluster.json"), encoding="utf-8") as fh:
        state = json.load(fh)
    with open(os.path.join(a.out, "sources.json"), encoding="utf-8") as fh:
        sources = json.load(fh)
    ok, lines, skipped = 0, ["# kubetrain migrate vs Training Operator v1, job by job", ""], []
    # A job that differs is flagged when its migration report says a person must act (exit 2); one whose
    # report claims everything carried (exit 0) but differs is a converter bug, and fails the run.
    flagged, unexplained = [], []
    for name, job in jobs.items():
        rc = read(os.path.join(a.out, "reports", f"{name}.rc")).strip()
        refused = read(os.path.join(a.out, "refused-v1", f"{name}.txt")).strip()
        if refused:
            skipped.append(f"- {job['kind']}/{name} ({sources.get(name)}): the v1 API server refused it: "
                           + " ".join(refused.split()))
            continue
        v1 = Side(state["v1"], [p for p in state["v1"]["pods"] if v1_job_of(p) == name], v1_key(job))
        v2 = Side(state["v2"], [p for p in state["v2"]["pods"] if v2_job_of(p) == name], v2_key)
        if rc == "1":
            diffs, equiv = ["kubetrain migrate refused it: " + read(os.path.join(a.out, "reports", f"{name}.txt"))
                            .strip().splitlines()[-1]], []
        elif not v1.pods or not v2.pods:
            diffs, equiv = [f"no pods: v1 {len(v1.pods)}, V2 {len(v2.pods)}"], []
        else:
            diffs, equiv = compare_job(job, v1, v2)
        ok += not diffs
        if diffs:
            (flagged if rc == "2" else unexplained).append(f"{job['kind']}/{name}")
        verdict = "equivalent" if not diffs else "DIFFERENT"
        lines.append(f"## {job['kind']}/{name}: {verdict} ({sources.get(name)}; migrate exit {rc}; "
                     f"{len(v1.pods)} v1 pods, {len(v2.pods)} V2 pods)")
        lines += [f"- {d}" for d in diffs] + [f"- {e}" for e in equiv]
        if diffs:
            lines += [f"- the report: {ln.strip()}" for ln in
                      read(os.path.join(a.out, "reports", f"{name}.txt")).splitlines() if "NOT CARRIED" in ln]
        lines.append("")
    if skipped:
        lines += ["## Not in the corpus", ""] + skipped + [""]
    summary = f"migrate: {ok}/{len(jobs) - len(skipped)} equivalent"
    gate = (f"{len(flagged)} differ, each flagged by its migration report (exit 2); "
            f"{len(unexplained)} differ though their report says everything carried"
            + (f": {', '.join(unexplained)}" if unexplained else ""))
    if a.report:
        with open(a.report, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines + [gate, summary, ""]))
    print(gate)
    print(summary)
    if unexplained:
        sys.exit(1)


def read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--examples", required=True)
    c.add_argument("--slice", action="store_true")
    c.add_argument("--out", required=True)
    s = sub.add_parser("settle")
    s.add_argument("--kubectl", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--timeout", type=float, default=180)
    m = sub.add_parser("compare")
    m.add_argument("--out", required=True)
    m.add_argument("--report")
    a = p.parse_args()
    {"corpus": cmd_corpus, "settle": cmd_settle, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    main()
