#!/usr/bin/env python3
"""Checks charts/kubetrain against upstream's chart and kubetrain's own install manifests.

    scripts/check-chart.py --helm PATH [--kubetrain PATH] [--operator PATH]

1. Every key path of upstream Kubeflow Trainer v2.3.0's charts/kubeflow-trainer/values.yaml (read from the Go
   module cache, where e2e/build.sh's trainer module puts it) exists in ours. When the module is absent the
   check prints why and is skipped, unless KUBETRAIN_REQUIRE_UPSTREAM=1 (CI) makes that a failure.
2. `helm template` with default values yields exactly the RBAC rules, the webhook configurations (names,
   paths, rules, failurePolicy, selectors) and the CRDs of examples/manifests/deploy (and of `kubetrain crd`
   when --kubetrain is given): the chart and the kustomize manifests cannot drift.
3. Every metric the dashboards and alerts query is one kubetrain-operator registers (kube-apiserver's,
   kube-state-metrics' and Kueue's series are allowed by prefix: the panels say they need them).
4. The Configuration the chart renders (defaults, and upstream's values.yaml) passes
   `kubetrain-operator --config FILE --check-config` when --operator is given.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART = ROOT / "charts/kubetrain"
DEPLOY = ROOT / "examples/manifests/deploy"
UPSTREAM_VERSION = "v2.3.0"
PROBLEMS = []


def problem(msg):
    PROBLEMS.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr)


def gomodcache():
    env = os.environ.get("GOMODCACHE")
    if env:
        return pathlib.Path(env)
    try:
        out = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True)
        return pathlib.Path(out.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return pathlib.Path.home() / "go/pkg/mod"


def upstream_values():
    path = gomodcache() / f"github.com/kubeflow/trainer/v2@{UPSTREAM_VERSION}/charts/kubeflow-trainer/values.yaml"
    return path if path.exists() else None


def key_paths(node, prefix=""):
    """Every key path of a values tree (maps only; lists are leaves)."""
    out = set()
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            out.add(path)
            out |= key_paths(value, path)
    return out


def check_readme():
    """Every value (leaf, or a map whose keys are free-form) is listed in the chart README's table."""
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def leaves(node, prefix=""):
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict) and value and "/" not in "".join(value):
                yield from leaves(value, path)
            else:
                yield path

    keys = list(leaves(values))
    missing = [key for key in keys if f"| `{key}` |" not in readme]
    for key in missing:
        problem(f"charts/kubetrain/README.md does not list the value {key}")
    table = readme[readme.index("## Values"):] if "## Values" in readme else ""
    for line in table.splitlines():
        if line.startswith("| `") and line.split("`")[1] not in keys:
            problem(f"charts/kubetrain/README.md lists {line.split('`')[1]}, which values.yaml does not have")
    print(f"README: {len(missing)} value(s) unlisted")


def check_upstream_keys(up):
    ours = key_paths(yaml.safe_load((CHART / "values.yaml").read_text()))
    theirs = key_paths(yaml.safe_load(up.read_text()))
    missing = sorted(theirs - ours)
    for key in missing:
        problem(f"values.yaml lacks upstream's key {key}")
    print(f"upstream keys: {len(theirs)} in upstream's values.yaml, {len(missing)} missing from ours")


def helm_template(helm, *args):
    cmd = [helm, "template", "kubetrain", str(CHART), "--namespace", "kubeflow-system", "--include-crds", *args]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {out.returncode}\n{out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def docs(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def one(objs, kind, name=None, where=""):
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    if len(found) != 1:
        problem(f"{where}: expected one {kind} {name or ''}, found {len(found)}")
        return {}
    return found[0]


def triples(rules):
    """(group, resource, verb) triples and nonResourceURL pairs, however the rules are grouped."""
    out = set()
    for rule in rules or []:
        for url in rule.get("nonResourceURLs", []):
            out |= {("url", url, verb) for verb in rule["verbs"]}
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                names = tuple(rule.get("resourceNames", []))
                out |= {(group, resource, verb, names) if names else (group, resource, verb) for verb in rule["verbs"]}
    return out


def webhook_shape(config):
    """What the API server uses of a webhook configuration, minus where the Service lives and the CA."""
    out = {}
    for hook in config.get("webhooks", []):
        client = hook["clientConfig"]
        out[hook["name"]] = {
            "path": (client.get("service") or {}).get("path"),
            "rules": hook.get("rules"),
            "failurePolicy": hook.get("failurePolicy"),
            "sideEffects": hook.get("sideEffects"),
            "admissionReviewVersions": hook.get("admissionReviewVersions"),
            "objectSelector": hook.get("objectSelector"),
            "namespaceSelector": hook.get("namespaceSelector"),
        }
    return out


def strip_crd(crd):
    crd = yaml.safe_load(yaml.safe_dump(crd))
    crd["metadata"].pop("labels", None)
    crd["metadata"].pop("annotations", None)
    return crd


def check_drift(rendered, kubetrain):
    deploy_rbac = docs(DEPLOY / "rbac.yaml")
    for kind, name in [("ClusterRole", "kubetrain-operator"), ("Role", "kubetrain-operator-leader-election")]:
        chart = triples(one(rendered, kind, name, "chart").get("rules"))
        kustomize = triples(one(deploy_rbac, kind, name, "rbac.yaml").get("rules"))
        if chart != kustomize:
            problem(f"{kind} {name}: chart and examples/manifests/deploy/rbac.yaml differ: "
                    f"only in the chart {sorted(chart - kustomize)}, only in rbac.yaml {sorted(kustomize - chart)}")
    reader = triples(one(rendered, "ClusterRole", "kubetrain-metrics-reader", "chart").get("rules"))
    if reader != triples(one(docs(DEPLOY / "metrics-reader.yaml"), "ClusterRole", None, "metrics-reader.yaml").get("rules")):
        problem("the metrics-reader ClusterRole differs from examples/manifests/deploy/metrics-reader.yaml")
    deploy_hooks = docs(DEPLOY / "webhooks.yaml")
    for kind in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]:
        chart = one(rendered, kind, None, "chart")
        kustomize = one(deploy_hooks, kind, None, "webhooks.yaml")
        if chart.get("metadata", {}).get("name") != kustomize.get("metadata", {}).get("name"):
            problem(f"{kind}: names differ")
        if webhook_shape(chart) != webhook_shape(kustomize):
            problem(f"{kind}: chart and webhooks.yaml differ:\n  chart: {webhook_shape(chart)}\n  "
                    f"webhooks.yaml: {webhook_shape(kustomize)}")
    chart_crds = {c["metadata"]["name"]: strip_crd(c) for c in rendered if c["kind"] == "CustomResourceDefinition"}
    sources = {"examples/manifests/deploy/crds.yaml": docs(DEPLOY / "crds.yaml")}
    if kubetrain:
        out = subprocess.run([kubetrain, "crd", "-o", "json"], capture_output=True, text=True, check=True)
        sources["kubetrain crd -o json"] = json.loads(out.stdout)
    for where, crds in sources.items():
        theirs = {c["metadata"]["name"]: strip_crd(c) for c in crds}
        if theirs != chart_crds:
            problem(f"the chart's CRDs differ from {where} (regenerate: scripts/gen-chart.py)")
    print(f"drift: RBAC, webhooks and {len(chart_crds)} CRDs compared with {', '.join(['rbac.yaml', 'webhooks.yaml', *sources])}")


EXTERNAL = ("apiserver_", "kube_", "kueue_")


def registered_metrics():
    """Metric names kubetrain-operator registers (the string literals registered in kubetrain-controller)."""
    import re
    names = set()
    for path in (ROOT / "crates/kubetrain-controller/src").rglob("*.rs"):
        for line in path.read_text().splitlines():
            for name in re.findall(r'^\s*"(kubetrain_[a-z_]+)",\s*$', line):
                names.add(name)
    allowed = set()
    for name in names:
        allowed |= {name, f"{name}_total", f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    return names, allowed


def check_metrics():
    import json
    import re
    names, allowed = registered_metrics()
    if not names:
        problem("no metric registrations found in crates/kubetrain-controller/src")
        return
    queries = []
    for path in sorted((CHART / "files/dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text())
        for panel in dashboard["panels"]:
            queries += [(f"{path.name}: {panel['title']}", t["expr"]) for t in panel["targets"]]
    for group in yaml.safe_load((CHART / "files/alerts.yaml").read_text())["groups"]:
        queries += [(f"alerts.yaml: {r['alert']}", r["expr"]) for r in group["rules"]]
    for where, expr in queries:
        for metric in re.findall(r"\b((?:kubetrain|apiserver|kube|kueue)_[a-z_]+)", expr):
            if metric.startswith(EXTERNAL):
                continue
            if metric not in allowed:
                problem(f"{where}: {metric} is not a metric kubetrain-operator exports")
    print(f"metrics: {len(queries)} dashboard and alert queries use only exported series ({len(names)} registered)")


def check_config(rendered, operator, label):
    config = one(rendered, "ConfigMap", "kubetrain-config", label)
    if not config:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(config["data"]["config.yaml"])
        f.flush()
        out = subprocess.run([operator, "--config", f.name, "--check-config"], capture_output=True, text=True)
    if out.returncode != 0:
        problem(f"{label}: kubetrain-operator refuses the rendered Configuration:\n{out.stdout}{out.stderr}")
    else:
        print(f"{label}: the rendered Configuration passes kubetrain-operator --check-config")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--helm", required=True)
    parser.add_argument("--kubetrain", help="the kubetrain CLI, to compare the CRDs with `kubetrain crd`")
    parser.add_argument("--operator", help="kubetrain-operator, to check the rendered Configuration")
    args = parser.parse_args()
    up = upstream_values()
    if up is None:
        msg = f"upstream's chart (github.com/kubeflow/trainer/v2@{UPSTREAM_VERSION}) is not in the Go module cache"
        if os.environ.get("KUBETRAIN_REQUIRE_UPSTREAM") == "1":
            problem(msg + " (run e2e/build.sh trainer)")
        else:
            print(f"SKIP upstream key check: {msg}")
    else:
        check_upstream_keys(up)
    check_readme()
    rendered = helm_template(args.helm)
    check_drift(rendered, args.kubetrain)
    check_metrics()
    if args.operator:
        check_config(rendered, args.operator, "default values")
        if up is not None:
            check_config(helm_template(args.helm, "-f", str(up)), args.operator, "upstream's values.yaml")
    if PROBLEMS:
        sys.exit(f"{len(PROBLEMS)} problem(s)")
    print("chart: OK")


if __name__ == "__main__":
    main()
