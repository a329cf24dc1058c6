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
    kueue_compare.py compare cluster.json model.json [--alternatives MODEL.json...] [--report FILE]
        Per Workload: admitted or not, the ClusterQueue and flavors of an admission, whether it was
        preempted, and the QuotaReserved reason of a pending one. A scenario (namespace) agrees when
        every Workload in it agrees, as simulated or in one of the alternatives (the model run with the
        Workloads shuffled: another order of heads that Kueue ranks equal and orders at random). Prints
        `kueue: N/M agree`.
"""

import argparse
import datetime
import json
import random
import subprocess
import sys
import time

import yaml

WORKLOADS = "workloads.v1beta2.kueue.x-k8s.io"


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
            if ev and ev["status"] == "True" and w.get("status", {}).get("admission"):
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


def rfc3339_ms(t):
    return int(datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp() * 1000)


def model_input(args):
    with open(args.cluster) as f:
        stored = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in json.load(f)}
    out = []
    with open(args.scenarios) as f:
        for d in yaml.safe_load_all(f):
            if not d:
                continue
            if d.get("kind") == "Workload":
                key = (d["metadata"].get("namespace", "default"), d["metadata"]["name"])
                if key in stored:
                    d = clean_workload(stored[key])
            out.append(d)
    # Every Workload existed before Kueue started, so all reach its queues together, after the last was
    # created; the model still orders them by creation time (kubetrain.dev/arrival sets the arrival only).
    created = [rfc3339_ms(d["metadata"]["creationTimestamp"]) for d in out
               if d.get("kind") == "Workload" and d["metadata"].get("creationTimestamp")]
    if created:
        arrival = f"{max(created) - min(created)}ms"
        for d in out:
            if d.get("kind") == "Workload":
                d["metadata"].setdefault("annotations", {})["kubetrain.dev/arrival"] = arrival
    # Kueue takes one head per ClusterQueue per cycle from a Go map and sorts them without a final tie-break
    # (with fair sharing, a cohort's tournament keeps the first of equal ClusterQueues from a set's unsorted
    # list), so equal-ranked heads are processed in a random order; the model takes them in document order
    # (Workloads, and ClusterQueues for the tournament). --order N shuffles both (seed N): another such order.
    if args.order:
        rng = random.Random(args.order)
        for kind in ("Workload", "ClusterQueue"):
            slots = [i for i, d in enumerate(out) if d.get("kind") == kind]
            docs = [out[i] for i in slots]
            rng.shuffle(docs)
            for i, d in zip(slots, docs):
                out[i] = d
    with open(args.out, "w") as f:
        yaml.safe_dump_all(out, f, sort_keys=False)


def outcome_cluster(w):
    st = w.get("status", {})
    adm = st.get("admission")
    qr = cond(w, "QuotaReserved")
    return {
        "admitted": bool(adm) and bool(qr) and qr["status"] == "True",
        "clusterQueue": adm.get("clusterQueue") if adm else None,
        "flavors": [sorted((p.get("flavors") or {}).items()) for p in adm.get("podSetAssignments", [])]
        if adm else None,
        "counts": [p.get("count") for p in adm.get("podSetAssignments", [])] if adm else None,
        "preempted": cond(w, "Preempted") is not None,
        "reason": None if (qr and qr["status"] == "True") else (qr or {}).get("reason"),
        "message": None if (qr and qr["status"] == "True") else (qr or {}).get("message"),
    }


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
    }


FIELDS = ("admitted", "clusterQueue", "flavors", "counts", "preempted", "reason")


def load_model(path):
    with open(path) as f:
        return {w["key"]: outcome_model(w) for w in json.load(f)["workloads"]}


def scenario_agrees(cluster, model, ns):
    keys = {k for k in set(cluster) | set(model) if k.split("/")[0] == ns}
    return all(k in cluster and k in model and all(cluster[k][f] == model[k][f] for f in FIELDS) for k in keys)


def compare(args):
    with open(args.cluster) as f:
        cluster = {f'{w["metadata"]["namespace"]}/{w["metadata"]["name"]}': outcome_cluster(w)
                   for w in json.load(f)}
    model = load_model(args.model)
    alternatives = [load_model(p) for p in args.alternatives]
    scenarios = {}
    lines = []
    messages_same = messages_total = 0
    for key in sorted(set(cluster) | set(model), key=lambda k: (int(k.split("/")[0][1:]) if k[1:].split("/")[0].isdigit() else 0, k)):
        ns = key.split("/")[0]
        c, m = cluster.get(key), model.get(key)
        diffs = []
        if c is None or m is None:
            diffs.append(f"only in {'model' if c is None else 'cluster'}")
        else:
            diffs = [f"{f}: kueue {c[f]!r}, model {m[f]!r}" for f in FIELDS if c[f] != m[f]]
            if c["message"] is not None and c["reason"] == m["reason"]:
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
    workloads_agree = sum(1 for k in cluster if k in model and all(cluster[k][f] == model[k][f] for f in FIELDS))
    detail = (f"workloads: {workloads_agree}/{len(set(cluster) | set(model))} agree as simulated; "
              f"pending messages identical: {messages_same}/{messages_total}")
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
