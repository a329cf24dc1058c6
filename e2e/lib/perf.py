"""The performance side of e2e/side-by-side.sh: N TrainJobs submitted at once onto kwok nodes through one
TrainJob controller (upstream's or kubetrain's), measured from outside the controller.

  perf.py jobs --n N --pid PID --identity KIND:NAME --out FILE [--seed S] [--timeout S]
      submit N TrainJobs (torch-distributed, 2-8 nodes each, pods that succeed after 0.5 s) at once and
      measure: seconds until every JobSet exists and until every TrainJob is Complete, the controller's CPU
      seconds and peak RSS (/proc/PID), and the API requests it made (the API server's APF metrics of a
      FlowSchema that matches only the controller's identity)
  perf.py webhook --requests R --out FILE
      R server-side dry-run creates of a TrainJob: the API server calls the admission webhooks as for a real
      create; latency from the API server's own webhook histogram and, finer, from the client
  perf.py table FILE...   the markdown table of docs/benchmarks.md from the JSON files above

The API server is reached with the harness's admin certificate (KUBECONFIG's folder layout: $E2E_STATE/pki);
only the Python standard library is used, so the numbers do not depend on a client library's overhead.
"""

import argparse
import http.client
import json
import math
import os
import random
import re
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TRAINER = "/apis/trainer.kubeflow.org/v1alpha1"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"
PODS_PER_NODE = 110  # the kwok nodes' pod capacity (e2e/cluster.sh)


# --- a small API client -----------------------------------------------------------------------------------


class Api:
    """One keep-alive HTTPS connection per thread to the e2e API server, as the admin user."""

    def __init__(self):
        state = Path(os.environ.get("KUBETRAIN_E2E_STATE", "/tmp/kubetrain-e2e"))
        pki = state / "pki"
        self.port = int(os.environ["KUBETRAIN_E2E_API_PORT"])
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.local = threading.local()

    def conn(self, fresh=False):
        if fresh or getattr(self.local, "conn", None) is None:
            self.local.conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=120)
        return self.local.conn

    def call(self, method, path, body=None, content_type="application/json"):
        """(status, parsed body or text); retries once on a dropped keep-alive connection."""
        data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        for attempt in (0, 1):
            try:
                c = self.conn(fresh=attempt == 1)
                c.request(method, path, body=data, headers=headers)
                resp = c.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError):
                if attempt == 1:
                    raise
        text = raw.decode("utf-8", "replace")
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text

    def ok(self, method, path, body=None, content_type="application/json", allow=()):
        status, out = self.call(method, path, body, content_type)
        if status >= 300 and status not in allow:
            raise RuntimeError(f"{method} {path}: HTTP {status}: {str(out)[:300]}")
        return out

    def metrics(self):
        """The API server's /metrics as {(name, frozenset(labels)): value}."""
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=60)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$", line)
            if not m:
                continue
            labels = frozenset(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            try:
                out[(m.group(1), labels)] = float(m.group(3))
            except ValueError:
                pass
        return out

    def watch(self, path, rv, on_event, stop):
        """Calls on_event(type, object) for every event of a watch from resourceVersion rv until stop is set;
        re-establishes the watch when the server ends it (its timeout), from the last version seen."""
        while not stop.is_set():
            c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=30)
            try:
                c.request("GET", f"{path}?watch=1&allowWatchBookmarks=true&resourceVersion={rv}",
                          headers={"Accept": "application/json"})
                resp = c.getresponse()
                if resp.status != 200:
                    raise RuntimeError(f"watch {path}: HTTP {resp.status}")
                while not stop.is_set():
                    line = resp.readline()
                    if not line:
                        break
                    event = json.loads(line)
                    if event["type"] == "ERROR":  # 410 Gone: start again from a fresh list
                        rv = self.ok("GET", f"{path}?limit=1")["metadata"]["resourceVersion"]
                        break
                    rv = event["object"]["metadata"].get("resourceVersion", rv)
                    if event["type"] != "BOOKMARK":
                        on_event(event["type"], event["object"])
            except (TimeoutError, OSError, http.client.HTTPException):
                continue  # an idle watch timed out on our side: re-establish it
            finally:
                c.close()


# --- the process under test -------------------------------------------------------------------------------


def proc_sample(pid):
    """CPU seconds (user + system, all threads) and current/peak RSS in MiB of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    kib = lambda key: int(status[key].split()[0])  # noqa: E731
    return {"cpu_s": cpu, "rss_mib": kib("VmRSS") / 1024, "peak_rss_mib": kib("VmHWM") / 1024,
            "comm": Path(f"/proc/{pid}/comm").read_text().strip()}


def load_avg():
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


# --- setup: enough kwok nodes and a FlowSchema per controller identity ---------------------------------------


def ensure_nodes(api, pods):
    """Adds kwok nodes (kwok-perf-node-N, the harness's node template) until every pod fits at once."""
    want = math.ceil(pods / PODS_PER_NODE)
    nodes = api.ok("GET", "/api/v1/nodes")["items"]
    have = [n for n in nodes if (n["metadata"].get("annotations") or {}).get("kwok.x-k8s.io/node") == "fake"]
    template = have[0]
    added = []
    for i in range(len(have), want):
        name = f"kwok-perf-node-{i}"
        labels = dict(template["metadata"].get("labels") or {}, **{"kubernetes.io/hostname": name})
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": labels,
                             "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
                "status": {"capacity": template["status"]["capacity"],
                           "allocatable": template["status"]["allocatable"]}}
        api.ok("POST", "/api/v1/nodes", node, allow=(409,))
        added.append(name)
    # The API server taints new nodes not-ready (TaintNodesByCondition); the node-lifecycle controller that
    # would lift it is off in the harness (kwok sends no heartbeats), so lift it once kwok marks them Ready.
    deadline = time.monotonic() + 300
    for name in added:
        while True:
            node = api.ok("GET", f"/api/v1/nodes/{name}")
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
            if ready:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"kwok node {name} not Ready after 300 s")
            time.sleep(0.2)
        api.ok("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, "application/merge-patch+json")
    return max(want, len(have))


def flow_schema_name(identity):
    return "sbs-perf-" + re.sub(r"[^a-z0-9-]", "-", identity.lower())[:50]


def ensure_flow_schema(api, identity):
    """A FlowSchema matching only the controller (KIND:NAME, KIND user or serviceaccount NS/NAME), on the exempt
    priority level so neither controller is throttled by API Priority and Fairness; its dispatch counter is the
    count of API requests the controller made."""
    kind, name = identity.split(":", 1)
    if kind == "serviceaccount":
        ns, sa = name.split("/")
        subject = {"kind": "ServiceAccount", "serviceAccount": {"namespace": ns, "name": sa}}
    else:
        subject = {"kind": "User", "user": {"name": name}}
    fs = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
          "metadata": {"name": flow_schema_name(identity)},
          "spec": {"matchingPrecedence": 500, "priorityLevelConfiguration": {"name": "exempt"},
                   "rules": [{"subjects": [subject],
                              "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                 "clusterScope": True, "namespaces": ["*"]}],
                              "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}
    api.ok("POST", f"{FLOWCONTROL}/flowschemas", fs, allow=(409,))


def requests_of(metrics, schema):
    """Requests the API server dispatched (or rejected) under one FlowSchema."""
    total = 0.0
    for (name, labels), value in metrics.items():
        if dict(labels).get("flow_schema") != schema:
            continue
        if name in ("apiserver_flowcontrol_dispatched_requests_total", "apiserver_flowcontrol_rejected_requests_total"):
            total += value
    return total


# Resources the TrainJob controllers write or read; the breakdown of a run counts every client's requests to
# them (kwok, the JobSet and Job controllers touch none of these but events and leases).
BREAKDOWN_RESOURCES = ("trainjobs", "jobsets", "configmaps", "events", "leases", "secrets", "trainingruntimes",
                       "clustertrainingruntimes")


def requests_by_kind(before, after):
    """Cluster-wide `apiserver_request_total` growth by verb, resource and subresource, for the resources the
    controllers under test use: where a controller's requests go (the FlowSchema count has no such labels)."""
    out = {}
    for (name, labels), value in after.items():
        labels_d = dict(labels)
        if name != "apiserver_request_total" or labels_d.get("resource") not in BREAKDOWN_RESOURCES:
            continue
        key = " ".join(x for x in (labels_d.get("verb"), labels_d["resource"], labels_d.get("subresource")) if x)
        grown = value - before.get((name, labels), 0.0)
        if grown:
            out[key] = out.get(key, 0) + int(grown)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def wait_admission(api, ns, timeout=120):
    """Until a dry-run create of a TrainJob passes every webhook: a restarted controller reports ready before
    its webhook server and runtime cache may be serving."""
    deadline = time.monotonic() + timeout
    while True:
        status, out = api.call("POST", f"{TRAINER}/namespaces/{ns}/trainjobs?dryRun=All", trainjob("ready", 2, "ready"))
        if status == 201:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"TrainJob admission not ready after {timeout} s: HTTP {status}: {str(out)[:300]}")
        time.sleep(0.5)


# --- N TrainJobs at once ------------------------------------------------------------------------------------


def trainjob(name, nodes, label):
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "labels": {"e2e.kubetrain.dev/perf": label}},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": nodes, "image": "kwok.e2e/succeed:1"}}}


def jobs(args):
    api = Api()
    rng = random.Random(args.seed)
    sizes = [rng.randint(2, 8) for _ in range(args.n)]
    label = f"n{args.n}"
    namespaces = [f"perf-{label}-{i}" for i in range(min(10, args.n))]
    for ns in namespaces:
        api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, allow=(409,))
    nodes = ensure_nodes(api, sum(sizes))
    ensure_flow_schema(api, args.identity)
    wait_admission(api, namespaces[0])
    schema = flow_schema_name(args.identity)
    ours = set(namespaces)

    jobset_seen, complete, failed = {}, {}, {}
    lock = threading.Lock()
    t0 = [None]

    def on_jobset(kind, obj):
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if kind == "ADDED" and key[0] in ours:
            with lock:
                jobset_seen.setdefault(key, time.monotonic())

    def on_trainjob(kind, obj):
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if key[0] not in ours:
            return
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("status") == "True" and c.get("type") in ("Complete", "Failed"):
                with lock:
                    (complete if c["type"] == "Complete" else failed).setdefault(key, time.monotonic())

    stop = threading.Event()
    watchers = []
    for path, fn in ((JOBSETS, on_jobset), (f"{TRAINER}/trainjobs", on_trainjob)):
        rv = api.ok("GET", f"{path}?limit=1")["metadata"]["resourceVersion"]
        w = threading.Thread(target=api.watch, args=(path, rv, fn, stop), daemon=True)
        w.start()
        watchers.append(w)

    before_proc = proc_sample(args.pid)
    before_metrics = api.metrics()
    loads = [load_avg()]
    t0[0] = time.monotonic()

    def submit(i):
        ns = namespaces[i % len(namespaces)]
        status, out = api.call("POST", f"{TRAINER}/namespaces/{ns}/trainjobs", trainjob(f"pj-{i:05d}", sizes[i], label))
        return None if status == 201 else f"pj-{i:05d}: HTTP {status}: {str(out)[:200]}"

    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        errors = [e for e in pool.map(submit, range(args.n)) if e]
    submitted = time.monotonic() - t0[0]
    if errors:
        raise RuntimeError(f"{len(errors)} of {args.n} TrainJobs refused, e.g. {errors[0]}")

    deadline = t0[0] + args.timeout
    peak_rss = before_proc["rss_mib"]
    next_progress = args.progress
    while time.monotonic() < deadline:
        with lock:
            done = len(complete) + len(failed)
        if done >= args.n:
            break
        time.sleep(1)
        peak_rss = max(peak_rss, proc_sample(args.pid)["rss_mib"])
        elapsed = int(time.monotonic() - t0[0])
        if elapsed % 10 == 0:
            loads.append(load_avg())
        if args.progress and elapsed >= next_progress:
            # A long run (N = 5,000 runs past an hour on 2 CPUs) says how far it is, on stderr.
            next_progress = elapsed + args.progress
            with lock:
                counts = (len(jobset_seen), len(complete), len(failed))
            print(f"perf: {args.controller} t={elapsed}s jobsets {counts[0]}/{args.n} complete {counts[1]}/{args.n}"
                  f" failed {counts[2]} load {load_avg()[0]:.1f}", file=sys.stderr, flush=True)
    stop.set()
    after_proc = proc_sample(args.pid)
    after_metrics = api.metrics()
    loads.append(load_avg())

    def last(d):
        return round(max(d.values()) - t0[0], 1) if len(d) >= args.n else None

    result = {
        "controller": args.controller, "n": args.n, "pods": sum(sizes), "nodes": nodes,
        "submitted_s": round(submitted, 1),
        "jobsets_s": last(jobset_seen), "jobsets": len(jobset_seen),
        "complete_s": last({**complete, **failed}), "complete": len(complete), "failed": len(failed),
        "cpu_s": round(after_proc["cpu_s"] - before_proc["cpu_s"], 1),
        "peak_rss_mib": round(after_proc["peak_rss_mib"], 1), "rss_sampled_peak_mib": round(peak_rss, 1),
        "process": after_proc["comm"],
        "api_requests": int(requests_of(after_metrics, schema) - requests_of(before_metrics, schema)),
        "requests_by_kind": requests_by_kind(before_metrics, after_metrics),
        "load_avg_1m": {"min": min(x[0] for x in loads), "max": max(x[0] for x in loads)},
        "cpus": os.cpu_count(), "timed_out": len(complete) + len(failed) < args.n,
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 1 if result["timed_out"] else 0


# --- webhook latency ----------------------------------------------------------------------------------------


def histogram(metrics, name, match):
    """{webhook name: {le: cumulative count}} of one histogram, series whose `name` label matches."""
    out = {}
    for (metric, labels), value in metrics.items():
        lab = dict(labels)
        if metric != name + "_bucket" or not match(lab.get("name", "")):
            continue
        le = math.inf if lab["le"] == "+Inf" else float(lab["le"])
        series = out.setdefault(f"{lab['name']} ({lab.get('type', '')})", {})
        series[le] = series.get(le, 0) + value
    return out


def quantile(buckets, q):
    """histogram_quantile: linear interpolation inside the bucket holding the q-th observation."""
    les = sorted(buckets)
    total = buckets[les[-1]]
    if total == 0:
        return None
    rank, prev_le, prev_count = q * total, 0.0, 0.0
    for le in les:
        count = buckets[le]
        if count >= rank:
            if le == math.inf:
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_count) / max(count - prev_count, 1e-9)
        prev_le, prev_count = le, count
    return les[-1]


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def webhook(args):
    api = Api()
    ns = "perf-webhook"
    api.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, allow=(409,))
    wait_admission(api, ns)
    name = "apiserver_admission_webhook_admission_duration_seconds"
    trainer_hooks = lambda n: "trainer.kubeflow.org" in n  # noqa: E731  (ours and upstream's, not Kueue's kb.io)
    before = histogram(api.metrics(), name, trainer_hooks)
    body = trainjob("dry-run", 4, "webhook")
    loads = [load_avg()]

    def one(_):
        t = time.perf_counter()
        status, out = api.call("POST", f"{TRAINER}/namespaces/{ns}/trainjobs?dryRun=All", body)
        return time.perf_counter() - t, status

    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        results = list(pool.map(one, range(args.requests)))
    loads.append(load_avg())
    bad = [s for _, s in results if s != 201]
    after = histogram(api.metrics(), name, trainer_hooks)
    hooks = {}
    for key, buckets in after.items():
        delta = {le: c - before.get(key, {}).get(le, 0) for le, c in buckets.items()}
        if delta[math.inf] > 0:
            hooks[key] = {"count": int(delta[math.inf]),
                          "p50_ms": round(quantile(delta, 0.5) * 1000, 2),
                          "p99_ms": round(quantile(delta, 0.99) * 1000, 2)}
    lat = [t for t, _ in results]
    result = {"controller": args.controller, "requests": args.requests, "refused": len(bad),
              "client_p50_ms": round(percentile(lat, 0.5) * 1000, 2),
              "client_p99_ms": round(percentile(lat, 0.99) * 1000, 2),
              "webhooks": hooks, "load_avg_1m": {"min": min(x[0] for x in loads), "max": max(x[0] for x in loads)}}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 1 if bad else 0


# --- the table ------------------------------------------------------------------------------------------------


def fmt(v, unit=""):
    return "—" if v is None else f"{v:g}{unit}"


def table(args):
    runs = [json.loads(Path(f).read_text()) for f in args.files]
    perf = sorted((r for r in runs if "n" in r), key=lambda r: (r["n"], r["controller"] != "upstream"))
    hooks = [r for r in runs if "requests" in r]
    lines = ["| N (pods) | controller | all JobSets exist | all Complete | CPU | peak RSS | API requests | load (1 min) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in perf:
        done = fmt(r["complete_s"], " s") if not r["timed_out"] else f"{r['complete'] + r['failed']}/{r['n']} (timed out)"
        lines.append(
            f"| {r['n']:,} ({r['pods']:,}) | {r['controller']} | {fmt(r['jobsets_s'], ' s')} | {done} | "
            f"{r['cpu_s']:g} s | {r['peak_rss_mib']:g} MiB | {r['api_requests']:,} | "
            f"{r['load_avg_1m']['min']:g}–{r['load_avg_1m']['max']:g} on {r['cpus']} CPUs |")
    if hooks:
        lines += ["", "| webhook, dry-run creates | controller | client p50 / p99 | API server's histogram p50 / p99 (per webhook) |",
                  "|---|---|---|---|"]
        for r in sorted(hooks, key=lambda r: r["controller"] != "upstream"):
            per = "; ".join(f"{k}: {v['p50_ms']:g} / {v['p99_ms']:g} ms" for k, v in sorted(r["webhooks"].items()))
            lines.append(f"| {r['requests']:,} | {r['controller']} | {r['client_p50_ms']:g} / {r['client_p99_ms']:g} ms | {per} |")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("jobs")
    j.add_argument("--n", type=int, required=True)
    j.add_argument("--pid", type=int, required=True)
    j.add_argument("--identity", required=True, help="user:NAME or serviceaccount:NS/NAME of the controller")
    j.add_argument("--controller", required=True)
    j.add_argument("--out", required=True)
    j.add_argument("--seed", type=int, default=1)
    j.add_argument("--parallel", type=int, default=16)
    j.add_argument("--timeout", type=int, default=3600)
    j.add_argument("--progress", type=int, default=60, help="seconds between progress lines on stderr (0: none)")
    j.set_defaults(run=jobs)
    w = sub.add_parser("webhook")
    w.add_argument("--requests", type=int, default=10000)
    w.add_argument("--parallel", type=int, default=8)
    w.add_argument("--controller", required=True)
    w.add_argument("--out", required=True)
    w.set_defaults(run=webhook)
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    t.set_defaults(run=table)
    args = p.parse_args()
    sys.exit(args.run(args) or 0)


if __name__ == "__main__":
    main()
