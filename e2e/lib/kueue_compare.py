#!/usr/bin/env python3
"""The Kueue model against real Kueue (docs/e2e.md, "Kueue model vs real Kueue"; issue 14 item 4).

    kueue_compare.py settle --kubectl KUBECTL --out cluster.json [--quiet-seconds S] [--timeout S]
        Waits until real Kueue's admission settles: no Workload status changed for S seconds. Standalone
        Workloads have no job controller, so an evicted Workload would keep its quota forever; this
        finishes each eviction the way Kueue's own integration tests do (test/util FinishEvictionForWorkloads:
        QuotaReserved=False/Pending, admission cleared, Admitted=False/NoReservation). Writes every
        Workload as the cluster holds it.
    kueue_compare.py model-input --scenarios FILE --cluster cluster.json --out FILE [--order N]
        The scenario objects with the Workloads as the cluster stored them (their UIDs and creation
        timestamps: the queue order of ties), all arriving together (they existed before Kueue started),
        for `kubetrain queue simulate`; --order N shuffles the Workloads' and ClusterQueues' documents (seed N).
    kueue_compare.py fair-weights --scenarios FILE [--seed S] --out FILE
        The scenarios with a fair-sharing weight on every ClusterQueue (0.5, 1 or 2), for --fair-sharing.
    kueue_compare.py trainjobs --scenarios FILE [--seed S] [--share PERCENT] --out FILE
        The scenarios with a seeded share of their Workloads (default 35 %) submitted as TrainJobs instead: same
        name, LocalQueue, priority (a WorkloadPriorityClass), pod count and requests (`numNodes`,
        `resourcesPerNode`), on the ClusterTrainingRuntime RUNTIME, suspended as Kueue's webhook leaves them.
        Kueue's TrainJob integration builds their Workloads; the model builds its own from the same TrainJob
        (crates/kubetrain-kueue/src/trainjob.rs). A TrainJob carries no node selector, toleration or minCount.
    kueue_compare.py gate --scenarios FILE --out FILE
        The scenarios with every ClusterQueue's namespaceSelector also requiring the label GATE_LABEL, which
        no scenario namespace has yet: Kueue can load everything but admit nothing until `open`.
    kueue_compare.py wait-cache --scenarios FILE --log KUEUE.LOG --pid-file FILE --exe KUEUE [--timeout S]
        Waits until Kueue's caches hold the whole of every scenario: each Cohort object reconciled (its V(2)
        log line), and in the dump Kueue writes on SIGUSR2 (pkg/debugger) every ClusterQueue under its
        cohort, every cohort, and every Workload queued (pending or inadmissible). The process is signalled
        only while /proc/PID/exe is the Kueue binary given.
    kueue_compare.py open --kubectl KUBECTL --scenarios FILE
        Labels every scenario namespace with GATE_LABEL in one command: Kueue moves each namespace's
        Workloads back to its queues together, with the whole cohort tree in its cache.
    kueue_compare.py compare cluster.json model.json [--alternatives MODEL.json...] [--report FILE]
        Per Workload: admitted or not, the ClusterQueue and flavors of an admission, whether it was
        preempted, and the QuotaReserved reason of a pending one. A scenario (namespace) agrees when
        every Workload in it agrees, as simulated or in one of the alternatives (the model run with the
        Workloads shuffled: another order of heads that Kueue ranks equal and orders at random). A Workload
        in a preempt-and-readmit loop on both sides (Kueue preempted it at least twice; the model marks it
        `repeating`) agrees whatever phase each side stopped in. Prints `kueue: N/M agree`.
"""

import argparse
import datetime
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import yaml

WORKLOADS = "workloads.v1beta2.kueue.x-k8s.io"
# Held off every ClusterQueue's namespaceSelector until Kueue's caches hold every scenario whole (`open`).
GATE_LABEL = "kueue-compare.kubetrain.dev/open"
# The ClusterTrainingRuntime every TrainJob of the random scenarios runs on (`trainjobs`).
RUNTIME = "kueue-compare-torch"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def trainjob_owner(w):
    """The name of the TrainJob that owns Workload `w` (Kueue's TrainJob integration), or None."""
    for o in w.get("metadata", {}).get("ownerReferences") or []:
        if o.get("kind") == "TrainJob" and o.get("apiVersion", "").startswith("trainer.kubeflow.org/"):
            return o["name"]
    return None


def workload_key(w):
    """`namespace/name` as the model names it: a TrainJob's Workload is `trainjob-NAME` there (Kueue adds a hash)."""
    ns = w["metadata"]["namespace"]
    owner = trainjob_owner(w)
    return f"{ns}/trainjob-{owner}" if owner else f'{ns}/{w["metadata"]["name"]}'


def kubectl(k, *args, stdin=None):
    return subprocess.run([k, *args], input=stdin, capture_output=True, text=True, check=False)


def list_workloads(k):
    r = kubectl(k, "get", WORKLOADS, "-A", "-o", "json")
    if r.returncode != 0:
        raise SystemExit(f"kubectl get workloads: {r.stderr}")
    return json.loads(r.stdout)["items"]


def cond(wl, type_):
    for c in wl.get("status", {}).get("conditions", []) or []:
        if c["type"] == type_:
            return c
    return None


def finish_eviction(k, wl):
    """Unsets the quota reservation of an evicted Workload, as Kueue's integration tests do."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = wl.setdefault("status", {})
    status.pop("admission", None)
    conds = [c for c in status.get("conditions", []) if c["type"] not in ("QuotaReserved", "Admitted")]
    conds.append({"type": "QuotaReserved", "status": "False", "reason": "Pending",
                  "message": "Eviction finished by test", "lastTransitionTime": now})
    conds.append({"type": "Admitted", "status": "False", "reason": "NoReservation",
                  "message": "The workload has no reservation", "lastTransitionTime": now})
    status["conditions"] = conds
    wl.get("metadata", {}).pop("managedFields", None)
    r = kubectl(k, "replace", "--subresource=status", "-f", "-", stdin=json.dumps(wl))
    return r.returncode == 0


def fingerprint(items):
    return sorted(
        (w["metadata"]["namespace"], w["metadata"]["name"],
         json.dumps(w.get("status", {}).get("admission"), sort_keys=True),
         json.dumps(sorted((c["type"], c["status"], c["reason"]) for c in
                           w.get("status", {}).get("conditions", []) or [])))
        for w in items)


def settle(args):
    deadline = time.monotonic() + args.timeout
    last, stable_since, finished = None, time.monotonic(), 0
    while True:
        items = list_workloads(args.kubectl)
        for w in items:
            ev = cond(w, "Evicted")
            # A TrainJob's Workload is finished by Kueue's job reconciler once it has suspended the TrainJob.
            if ev and ev["status"] == "True" and w.get("status", {}).get("admission") and not trainjob_owner(w):
                if finish_eviction(args.kubectl, w):
                    finished += 1
        fp = fingerprint(items)
        now = time.monotonic()
        if fp != last:
            last, stable_since = fp, now
        elif now - stable_since >= args.quiet_seconds:
            break
        if now > deadline:
            print(f"kueue_compare: not settled after {args.timeout} s; comparing what is there",
                  file=sys.stderr)
            break
        time.sleep(1)
    with open(args.out, "w") as f:
        json.dump(items, f, indent=1)
    print(f"settled: {len(items)} workloads, {finished} evictions finished", file=sys.stderr)


def clean_workload(w):
    m = w["metadata"]
    meta = {k: m[k] for k in ("name", "namespace", "uid", "creationTimestamp", "labels", "annotations")
            if k in m}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta, "spec": w["spec"]}


def fair_weights(args):
    """Gives every ClusterQueue a fair-sharing weight (seeded: 0.5, 1 or 2) for the fair-sharing pass."""
    rng = random.Random(args.seed)
    with open(args.scenarios) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        if d.get("kind") == "ClusterQueue":
            d["spec"]["fairSharing"] = {"weight": rng.choice(["500m", "1", "2"])}
    with open(args.out, "w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)


def runtime_doc():
    """One torch ClusterTrainingRuntime: a single `node` replicated job, numNodes set by each TrainJob."""
    job = {"template": {"spec": {"containers": [{"name": "node", "image": "kwok.e2e/succeed:1"}]}}}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": RUNTIME},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}},
                 "template": {"spec": {"replicatedJobs": [{
                     "name": "node",
                     "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                  "spec": job}}]}}},
    }


def priority_class(value):
    return f"kueue-compare-p{value}"


def to_trainjob(wl):
    """The TrainJob standing for Workload `wl`: its name, queue, priority, pod count and per-pod requests."""
    ps = wl["spec"]["podSets"][0]
    requests = ps["template"]["spec"]["containers"][0]["resources"].get("requests") or {}
    # Extended resources must have limits equal to their requests (cpu needs none).
    limits = {r: v for r, v in requests.items() if r != "cpu"}
    labels = {QUEUE_LABEL: wl["spec"]["queueName"]}
    priority = wl["spec"].get("priority") or 0
    if priority:
        labels[PRIORITY_LABEL] = priority_class(priority)
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": wl["metadata"]["name"], "namespace": wl["metadata"]["namespace"], "labels": labels},
        "spec": {
            "runtimeRef": {"name": RUNTIME, "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"},
            # What Kueue's TrainJob webhook adds on create (trainjob_webhook.go Default); its webhooks are off while
            # the objects are created: the job suspended, and Kueue's own runtime patch, which its job reconciler
            # fills on admission and empties to finish an eviction (without it, a preempted TrainJob's Workload
            # keeps its quota: "error restoring info to the trainjob").
            "suspend": True,
            "runtimePatches": [{"manager": "kueue.x-k8s.io/manager",
                                "trainingRuntimeSpec": {"template": {"spec": {}}}}],
            "trainer": {"numNodes": ps["count"],
                        "resourcesPerNode": {"requests": dict(requests), **({"limits": limits} if limits else {})}},
        },
    }


def trainjobs(args):
    """Submits a seeded share of the Workloads as TrainJobs (see the module docs)."""
    rng = random.Random(f"trainjobs-{args.seed}")
    docs = read_docs(args.scenarios)
    out, priorities, converted = [], set(), 0
    for d in docs:
        if d.get("kind") == "Workload" and rng.random() * 100 < args.share:
            d = to_trainjob(d)
            converted += 1
            if PRIORITY_LABEL in d["metadata"]["labels"]:
                priorities.add(int(d["metadata"]["labels"][PRIORITY_LABEL].rsplit("p", 1)[1]))
        out.append(d)
    head = [runtime_doc()] if converted else []
    head += [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
              "metadata": {"name": priority_class(v)}, "value": v, "description": "kueue-compare"}
             for v in sorted(priorities)]
    with open(args.out, "w") as f:
        yaml.safe_dump_all(head + out, f, sort_keys=False)
    print(f"{converted} of the Workloads submitted as TrainJobs", file=sys.stderr)


def rfc3339_ms(t):
    return int(datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp() * 1000)


def model_input(args):
    with open(args.cluster) as f:
        items = json.load(f)
    stored = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in items if not trainjob_owner(w)}
    owned = {(w["metadata"]["namespace"], trainjob_owner(w)): w for w in items if trainjob_owner(w)}
    out = []
    with open(args.scenarios) as f:
        for d in yaml.safe_load_all(f):
            if not d:
                continue
            if d.get("kind") == "Workload":
                key = (d["metadata"].get("namespace", "default"), d["metadata"]["name"])
                if key in stored:
                    d = clean_workload(stored[key])
            elif d.get("kind") == "TrainJob":
                key = (d["metadata"].get("namespace", "default"), d["metadata"]["name"])
                if key in owned:
                    # Kueue orders a TrainJob by its Workload, created when Kueue's TrainJob reconciler first saw
                    # the TrainJob (after Kueue started): the model takes the TrainJob's creation time as its
                    # Workload's, and the job UID Kueue labels the Workload with.
                    wl = owned[key]["metadata"]
                    d["metadata"]["creationTimestamp"] = wl["creationTimestamp"]
                    d["metadata"]["uid"] = (wl.get("labels") or {}).get("kueue.x-k8s.io/job-uid", "")
                    d["metadata"]["annotations"] = {"kueue-compare.kubetrain.dev/workload-uid": wl["uid"]}
            out.append(d)
    # Every Workload existed before Kueue started, so all reach its queues together, after the last was
    # created; the model still orders them by creation time (kubetrain.dev/arrival sets the arrival only).
    # The TrainJobs' Workloads were created while every queue was held shut (`gate`), so they arrive then too.
    queued = ("Workload", "TrainJob")
    created = [rfc3339_ms(d["metadata"]["creationTimestamp"]) for d in out
               if d.get("kind") in queued and d["metadata"].get("creationTimestamp")]
    if created:
        arrival = f"{max(created) - min(created)}ms"
        for d in out:
            if d.get("kind") in queued:
                d["metadata"].setdefault("annotations", {})["kubetrain.dev/arrival"] = arrival
    # Kueue takes one head per ClusterQueue per cycle from a Go map and sorts them without a final tie-break
    # (with fair sharing, a cohort's tournament keeps the first of equal ClusterQueues from a set's unsorted
    # list), so equal-ranked heads are processed in a random order; the model takes them in document order
    # (Workloads, and ClusterQueues for the tournament). --order N shuffles both (seed N): another such order.
    rng = random.Random(args.order) if args.order else None
    if rng:
        for kind in ("Workload", "ClusterQueue"):
            slots = [i for i, d in enumerate(out) if d.get("kind") == kind]
            docs = [out[i] for i in slots]
            rng.shuffle(docs)
            for i, d in zip(slots, docs):
                out[i] = d
    order_trainjobs(out, rng)
    with open(args.out, "w") as f:
        yaml.safe_dump_all(out, f, sort_keys=False)


def order_trainjobs(out, rng):
    """Orders the TrainJob documents for the model, which builds their Workloads after every other Workload,
    in document order, and gives each the UID `uid-<index>`: within a ClusterQueue the order of their
    Workloads' UIDs in the cluster (Kueue's last tie-break of equal creation times), across ClusterQueues
    the document order (shuffled by `rng`, as the Workloads are: equal-ranked heads)."""
    slots = [i for i, d in enumerate(out) if d.get("kind") == "TrainJob"]
    if not slots:
        return
    local_queues = {(d["metadata"].get("namespace"), d["metadata"]["name"]): d["spec"]["clusterQueue"]
                    for d in out if d.get("kind") == "LocalQueue"}

    def queue_of(d):
        m = d["metadata"]
        return local_queues.get((m.get("namespace"), m["labels"].get(QUEUE_LABEL)), "")

    def uid_of(d):
        return (d["metadata"].get("annotations") or {}).get("kueue-compare.kubetrain.dev/workload-uid", "")

    docs = [out[i] for i in slots]
    if rng:
        rng.shuffle(docs)
    else:
        docs.sort(key=uid_of)
    # Each ClusterQueue keeps the places the shuffle gave it, filled in UID order.
    by_queue = {}
    for d in docs:
        by_queue.setdefault(queue_of(d), []).append(d)
    for q in by_queue.values():
        q.sort(key=uid_of)
    for i, d in zip(slots, docs):
        out[i] = by_queue[queue_of(d)].pop(0)


# What Kueue writes on a Workload tried while its namespace was still gated (`gate`): the gate's mark, not an
# outcome. A Workload Kueue never tried again after `open` (it skips one equal to a Workload that did not fit)
# keeps it, where the model, which never gated, wrote nothing.
GATE_MESSAGE = "workload namespace doesn't match ClusterQueue selector"


def outcome_cluster(w):
    st = w.get("status", {})
    adm = st.get("admission")
    qr = cond(w, "QuotaReserved")
    if qr and qr.get("message") == GATE_MESSAGE:
        qr = None
    return {
        "admitted": bool(adm) and bool(qr) and qr["status"] == "True",
        "clusterQueue": adm.get("clusterQueue") if adm else None,
        "flavors": [sorted((p.get("flavors") or {}).items()) for p in adm.get("podSetAssignments", [])]
        if adm else None,
        "counts": [p.get("count") for p in adm.get("podSetAssignments", [])] if adm else None,
        "preempted": cond(w, "Preempted") is not None,
        "reason": None if (qr and qr["status"] == "True") else (qr or {}).get("reason"),
        "message": None if (qr and qr["status"] == "True") else (qr or {}).get("message"),
        "looping": preempted_times(w) >= 2,
    }


def preempted_times(w):
    """How often Kueue preempted Workload `w` (its own count, `status.schedulingStats.evictions`). Nothing in a
    scenario finishes, so a Workload preempted twice was readmitted in between: a preempt-and-readmit loop
    (docs/e2e.md, s5 of the 2026-12-06 runs), which goes on as long as evictions are finished."""
    stats = (w.get("status", {}).get("schedulingStats") or {}).get("evictions") or []
    return sum(e.get("count", 0) for e in stats if e.get("reason") == "Preempted")


def outcome_model(w):
    conds = {c["type"]: c for c in w.get("conditions", [])}
    qr = conds.get("QuotaReserved")
    # A reservation waiting for its checks is QuotaReserved in the model; the cluster side counts QuotaReserved=True.
    admitted = w.get("state") in ("Admitted", "QuotaReserved")
    psa = w.get("podSetAssignments") or []
    return {
        "admitted": admitted,
        "clusterQueue": w.get("clusterQueue") if admitted else None,
        "flavors": [sorted((p.get("flavors") or {}).items()) for p in psa] if admitted else None,
        "counts": [p.get("count") for p in psa] if admitted else None,
        "preempted": "Preempted" in conds,
        "reason": None if admitted else (qr or {}).get("reason"),
        "message": None if admitted else (qr or {}).get("message"),
        # Caught in the livelock the simulation stopped on (`repeating`: admitted and preempted over and over).
        "looping": bool(w.get("repeating")),
    }


FIELDS = ("admitted", "clusterQueue", "flavors", "counts", "preempted", "reason")


def workload_diffs(c, m, cluster, model):
    """The fields in which Kueue's outcome `c` and the model's `m` of one workload differ (`cluster` and
    `model`: every workload's). A workload caught in a preempt-and-readmit loop on both sides agrees whatever
    phase each side stopped in: Kueue's is the phase the last eviction the harness finished left, the model's
    the one its livelock check stopped on. Its preemptor is compared as any workload: in Kueue a finished
    eviction that lands between a cycle's `Heads` and its `Snapshot` lets the preemptor alone see the freed
    quota and ends the loop with it admitted (docs/e2e.md, s5), a race the model does not copy; the difference
    then says so."""
    if c["looping"] and m["looping"]:
        return []
    diffs = [f"{f}: kueue {c[f]!r}, model {m[f]!r}" for f in FIELDS if c[f] != m[f]]
    if c["looping"] != m["looping"]:
        diffs.append(f"preempt-and-readmit loop: kueue {c['looping']!r}, model {m['looping']!r}")
    victim = c.get("loopOf")
    if diffs and victim and cluster[victim]["looping"] and (model.get(victim) or {}).get("looping"):
        ended = " (Kueue's loop ended: a finished eviction between a cycle's Heads and Snapshot)" \
            if c["admitted"] and not m["admitted"] else ""
        diffs.append(f"preemptor in the preempt-and-readmit loop of {victim}{ended}")
    return diffs


def load_model(path):
    with open(path) as f:
        return {w["key"]: outcome_model(w) for w in json.load(f)["workloads"]}


def scenario_agrees(cluster, model, ns):
    keys = {k for k in set(cluster) | set(model) if k.split("/")[0] == ns}
    return all(k in cluster and k in model and not workload_diffs(cluster[k], model[k], cluster, model)
               for k in keys)


def mark_loop_preemptors(items, cluster):
    """Marks the preemptor of each Workload caught in a preempt-and-readmit loop in Kueue (the UID its
    `Preempted` condition names) with `loopOf`: the looping Workload's key."""
    keys = {w["metadata"].get("uid"): workload_key(w) for w in items}
    for w in items:
        key = workload_key(w)
        preempted = cond(w, "Preempted")
        found = re.search(r"\(UID: ([^,)]+)", (preempted or {}).get("message", ""))
        if cluster[key]["looping"] and found and found.group(1) in keys:
            cluster[keys[found.group(1)]]["loopOf"] = key


def compare(args):
    with open(args.cluster) as f:
        items = json.load(f)
    cluster = {workload_key(w): outcome_cluster(w) for w in items}
    mark_loop_preemptors(items, cluster)
    model = load_model(args.model)
    alternatives = [load_model(p) for p in args.alternatives]
    scenarios = {}
    lines = []
    messages_same = messages_total = 0
    looping = []
    for key in sorted(set(cluster) | set(model),
                      key=lambda k: (int(k.split("/")[0][1:]) if k[1:].split("/")[0].isdigit() else 0, k)):
        ns = key.split("/")[0]
        c, m = cluster.get(key), model.get(key)
        diffs = []
        if c is None or m is None:
            diffs.append(f"only in {'model' if c is None else 'cluster'}")
        else:
            diffs = workload_diffs(c, m, cluster, model)
            if not diffs and c["looping"]:
                looping.append(key)
            elif c["message"] is not None and c["reason"] == m["reason"]:
                messages_total += 1
                if c["message"] == m["message"]:
                    messages_same += 1
                else:
                    lines.append(f"- `{key}` (message only): kueue {c['message']!r}; model {m['message']!r}")
        scenarios.setdefault(ns, []).extend(diffs)
        if diffs:
            lines.append(f"- `{key}`: " + "; ".join(diffs))
    agree = sum(1 for d in scenarios.values() if not d)
    # A scenario that differs as simulated may agree when equal-ranked heads of different ClusterQueues are
    # taken in another order: Kueue's order for them is random (a Go map, no tie-break), so any is Kueue's.
    tie_order = sorted((ns for ns, d in scenarios.items()
                        if d and any(scenario_agrees(cluster, alt, ns) for alt in alternatives)),
                       key=lambda n: (len(n), n))
    differ = sorted((ns for ns, d in scenarios.items() if d and ns not in tie_order), key=lambda n: (len(n), n))
    summary = f"kueue: {agree + len(tie_order)}/{len(scenarios)} agree"
    workloads_agree = sum(1 for k in cluster if k in model and not workload_diffs(cluster[k], model[k], cluster, model))
    detail = (f"workloads: {workloads_agree}/{len(set(cluster) | set(model))} agree as simulated; "
              f"pending messages identical: {messages_same}/{messages_total}; "
              f"in a preempt-and-readmit loop in both: {len(looping)} ({' '.join(looping) or '-'})")
    split = (f"scenarios: {agree} agree as simulated, {len(tie_order)} under another order of equal-ranked heads "
             f"({len(alternatives)} orders tried: {' '.join(tie_order) or '-'}), {len(differ)} differ "
             f"({' '.join(differ) or '-'})")
    if args.report:
        with open(args.report, "w") as f:
            f.write(f"# Kueue model vs real Kueue\n\n{summary}\n\n{split}\n\n{detail}\n\n")
            f.write("Differences as simulated (document order of the Workloads):\n\n")
            f.write("\n".join(lines) + "\n")
    print(detail)
    print(split)
    print(summary)


def read_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def gate(args):
    docs = read_docs(args.scenarios)
    for d in docs:
        if d.get("kind") == "ClusterQueue":
            selector = d["spec"].get("namespaceSelector") or {}
            selector.setdefault("matchLabels", {})[GATE_LABEL] = "true"
            d["spec"]["namespaceSelector"] = selector
    with open(args.out, "w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)


def expected_state(docs):
    """What Kueue's caches must hold: ClusterQueue -> cohort, every cohort, the declared Cohorts, the Workloads."""
    queues = {d["metadata"]["name"]: d["spec"].get("cohortName") for d in docs if d.get("kind") == "ClusterQueue"}
    declared = {d["metadata"]["name"] for d in docs if d.get("kind") == "Cohort"}
    parents = {d["spec"]["parentName"] for d in docs if d.get("kind") == "Cohort" and d["spec"].get("parentName")}
    cohorts = declared | parents | {c for c in queues.values() if c}
    workloads = {f'{d["metadata"]["namespace"]}/{d["metadata"]["name"]}' for d in docs if d.get("kind") == "Workload"}
    # A TrainJob's Workload, once Kueue's TrainJob reconciler has built it: `trainjob-NAME-<5-character hash>`.
    trainjobs = {f'{d["metadata"]["namespace"]}/trainjob-{d["metadata"]["name"]}-' for d in docs
                 if d.get("kind") == "TrainJob"}
    return queues, cohorts, declared, workloads, trainjobs


def kueue_pid(pid_file, exe):
    """Kueue's pid, only while that process is the Kueue binary (a pid alone may have been reused)."""
    with open(pid_file) as f:
        pid = int(f.read().strip())
    try:
        running = os.path.realpath(f"/proc/{pid}/exe")
    except OSError:
        running = None
    if running != os.path.realpath(exe):
        sys.exit(f"kueue_compare: process {pid} of {pid_file} is {running}, not Kueue ({exe})")
    return pid


def log_lines(path, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    out = []
    for raw in data.splitlines():
        try:
            out.append(json.loads(raw))
        except ValueError:
            continue
    return out


def ref_name(value):
    return value.get("name") if isinstance(value, dict) else value


def dump(args, pid):
    """Signals Kueue for a dump of its caches and returns its lines (waits for the "Ended dump" line)."""
    offset = os.path.getsize(args.log)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        lines = [l for l in log_lines(args.log, offset) if l.get("logger", "").endswith("dumper")]
        if any(l.get("msg") == "Ended dump" for l in lines):
            return lines
        time.sleep(0.2)
    sys.exit("kueue_compare: Kueue wrote no dump within 30 s of SIGUSR2")


def cache_gaps(docs, log_path, lines):
    queues, cohorts, declared, workloads, trainjobs = expected_state(docs)
    # The Cohort reconciler's line just before it puts the Cohort (with its parent edge) into the cache.
    reconciled = {l.get("name") for l in log_lines(log_path, 0)
                  if l.get("msg") == "Cohort is being created or updated"}
    seen_queues, seen_cohorts, queued = {}, set(), set()
    for l in lines:
        if l.get("msg") == "Found ClusterQueue":
            cohort = l.get("cohort")
            seen_queues[ref_name(l.get("clusterQueue"))] = None if cohort == "<none>" else cohort
        elif l.get("msg") == "Found cohort":
            seen_cohorts.add(l.get("cohort"))
        elif l.get("msg") == "Found pending and inadmissible workloads in ClusterQueue":
            queued.update(l.get("pending") or [])
            queued.update(l.get("inadmissible") or [])
    gaps = []
    gaps += [f"Cohort {c} not reconciled" for c in sorted(declared - reconciled)]
    gaps += [f"ClusterQueue {q} not under {c}" for q, c in sorted(queues.items()) if seen_queues.get(q, "?") != c]
    gaps += [f"cohort {c} not in the cache" for c in sorted(cohorts - seen_cohorts)]
    gaps += [f"Workload {w} not queued" for w in sorted(workloads - queued)]
    gaps += [f"the Workload of TrainJob {p[:-1].replace('/trainjob-', '/')} not queued" for p in sorted(trainjobs)
             if not any(q.startswith(p) and len(q) == len(p) + 5 for q in queued)]
    return gaps


def wait_cache(args):
    docs = read_docs(args.scenarios)
    deadline = time.monotonic() + args.timeout
    while True:
        pid = kueue_pid(args.pid_file, args.exe)
        gaps = cache_gaps(docs, args.log, dump(args, pid))
        if not gaps:
            print("kueue caches hold every scenario", file=sys.stderr)
            return
        if time.monotonic() > deadline:
            sys.exit(f"kueue_compare: after {args.timeout} s Kueue's caches still lack: "
                     + "; ".join(gaps[:10]) + (f" (and {len(gaps) - 10} more)" if len(gaps) > 10 else ""))
        time.sleep(1)


def open_gate(args):
    namespaces = [d["metadata"]["name"] for d in read_docs(args.scenarios) if d.get("kind") == "Namespace"]
    r = subprocess.run([args.kubectl, "label", "namespace", *namespaces, f"{GATE_LABEL}=true"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"kueue_compare: labelling the namespaces failed: {r.stderr.strip()}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("settle")
    s.add_argument("--kubectl", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--quiet-seconds", type=float, default=15)
    s.add_argument("--timeout", type=float, default=600)
    s.set_defaults(fn=settle)
    m = sub.add_parser("model-input")
    m.add_argument("--scenarios", required=True)
    m.add_argument("--cluster", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--order", type=int, default=0,
                   help="0: Workloads in stored order; N: shuffled with seed N (another order of tied heads)")
    m.set_defaults(fn=model_input)
    w = sub.add_parser("fair-weights")
    w.add_argument("--scenarios", required=True)
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--out", required=True)
    w.set_defaults(fn=fair_weights)
    t = sub.add_parser("trainjobs")
    t.add_argument("--scenarios", required=True)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--share", type=float, default=35, help="percent of the Workloads submitted as TrainJobs")
    t.add_argument("--out", required=True)
    t.set_defaults(fn=trainjobs)
    g = sub.add_parser("gate")
    g.add_argument("--scenarios", required=True)
    g.add_argument("--out", required=True)
    g.set_defaults(fn=gate)
    wc = sub.add_parser("wait-cache")
    wc.add_argument("--scenarios", required=True)
    wc.add_argument("--log", required=True)
    wc.add_argument("--pid-file", required=True)
    wc.add_argument("--exe", required=True)
    wc.add_argument("--timeout", type=float, default=180)
    wc.set_defaults(fn=wait_cache)
    o = sub.add_parser("open")
    o.add_argument("--kubectl", required=True)
    o.add_argument("--scenarios", required=True)
    o.set_defaults(fn=open_gate)
    c = sub.add_parser("compare")
    c.add_argument("cluster")
    c.add_argument("model")
    c.add_argument("--report")
    c.add_argument("--alternatives", nargs="*", default=[],
                   help="model outputs for other orders of equal-ranked heads (model-input --order N)")
    c.set_defaults(fn=compare)
    args = p.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
