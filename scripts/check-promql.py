#!/usr/bin/env python3
"""Checks that every PromQL expression of charts/kubetrain parses, with Prometheus's own tools.

    scripts/check-promql.py --promtool PATH [--series PATH]   check (promtool, and promql-series when given)
    scripts/check-promql.py --series PATH --json              the queries and their data queries, as JSON

The expressions: every alert of files/alerts.yaml (the PrometheusRule), every target `expr` of the Grafana
dashboards in files/dashboards/, and each dashboard variable's `label_values(SELECTOR, label)` selector.
Grafana's variables are replaced first: `$__range`/`$__interval`/`$__rate_interval` by durations, a query
variable by its `allValue` (`.*`), a constant by its value.

- `promtool check rules` (the real one, built from github.com/prometheus/prometheus by
  `e2e/build.sh prometheus`) on a rule file holding the alert group as the chart ships it plus one recording
  rule per dashboard query: parse errors, bad templates in annotations, duplicate rules.
- `promql-series` (e2e/tools/prometheus/promql-series, Prometheus's parser) parses each expression again and
  prints its data queries (the expression minus its threshold; see that file): `--json` hands them to
  e2e/scenarios/test_prometheus.py, which asks a real Prometheus for each.

Each query is named `<file>: <panel or alert>`; a query of a panel whose description says it needs
kube-state-metrics or Kueue's metrics carries `"needs"` (the e2e cluster runs neither exporter).
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART = ROOT / "charts/kubetrain"
# What a panel's description names when its series come from another exporter.
NEEDS = {"kube-state-metrics": "kube-state-metrics", "Kueue's metrics": "Kueue's metrics endpoint"}
BUILTIN_VARIABLES = {"__range": "1h", "__interval": "1m", "__rate_interval": "5m", "__range_s": "3600"}


def substitute(expr, variables):
    """Grafana's `$name` and `${name}` replaced; unknown variables are left for the parser to refuse."""

    def value(match):
        name = match.group(1) or match.group(2)
        return variables.get(name, match.group(0))

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def dashboard_queries():
    queries = []
    for path in sorted((CHART / "files/dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text())
        variables = dict(BUILTIN_VARIABLES)
        selectors = []
        for var in dashboard.get("templating", {}).get("list", []):
            if var["type"] == "constant":
                variables[var["name"]] = str(var["query"])
            elif var["type"] == "query":
                variables[var["name"]] = var.get("allValue") or ".*"
                query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
                match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query, re.S)
                if not match:
                    raise SystemExit(f"{path.name}: variable {var['name']}: not label_values(SELECTOR, label): {query}")
                selectors.append((f"{path.name}: variable {var['name']}", match.group(1)))
        for where, selector in selectors:
            queries.append({"name": where, "expr": substitute(selector, variables)})
        for panel in dashboard["panels"]:
            text = f"{panel.get('title', '')} {panel.get('description', '')}"
            needs = [what for key, what in NEEDS.items() if key in text]
            for target in panel.get("targets", []):
                query = {
                    "name": f"{path.name}: {panel['title']} ({target.get('refId', '?')})",
                    "expr": substitute(target["expr"], variables),
                }
                if needs:
                    query["needs"] = needs[0]
                queries.append(query)
    return queries


def alerts():
    return yaml.safe_load((CHART / "files/alerts.yaml").read_text())


def alert_queries():
    return [
        {"name": f"alerts.yaml: {rule['alert']}", "expr": rule["expr"]}
        for group in alerts()["groups"]
        for rule in group["rules"]
    ]


def check_promtool(promtool, dashboards):
    """`promtool check rules` on the alerts plus the dashboard queries as recording rules."""
    rules = alerts()
    rules["groups"].append(
        {
            "name": "kubetrain-dashboards",
            "rules": [
                {"record": f"kubetrain_dashboard:query_{i}", "expr": q["expr"], "labels": {"query": q["name"]}}
                for i, q in enumerate(dashboards)
            ],
        }
    )
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="kubetrain-promql-") as f:
        yaml.safe_dump(rules, f, sort_keys=False)
        f.flush()
        out = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout + out.stderr, file=sys.stderr)
        return False
    print(f"promtool check rules: {out.stdout.strip().splitlines()[-1]}")
    return True


def run_series(series, queries):
    out = subprocess.run([series], input=json.dumps(queries), capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise SystemExit(f"{series}: exit {out.returncode}: {out.stderr}")
    parsed = json.loads(out.stdout)
    for query, result in zip(queries, parsed):
        result.update({k: v for k, v in query.items() if k not in result})
    return parsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--promtool", help="promtool (e2e/build.sh prometheus)")
    parser.add_argument("--series", help="promql-series (e2e/build.sh prometheus)")
    parser.add_argument("--json", action="store_true", help="print the queries and their data queries")
    args = parser.parse_args()
    if not args.promtool and not args.series:
        parser.error("give --promtool, --series or both")
    dashboards, rules = dashboard_queries(), alert_queries()
    queries = rules + dashboards
    if args.json:
        if not args.series:
            parser.error("--json needs --series")
        print(json.dumps(run_series(args.series, queries), indent=2))
        return
    ok = True
    if args.promtool:
        ok &= check_promtool(args.promtool, dashboards)
    if args.series:
        bad = [q for q in run_series(args.series, queries) if q.get("error")]
        for q in bad:
            print(f"FAIL: {q['name']}: {q['error']}\n  {q['expr']}", file=sys.stderr)
        ok &= not bad
        print(f"promql-series: {len(queries) - len(bad)} of {len(queries)} expressions parse")
    if not ok:
        sys.exit("PromQL: problems above")
    print(f"PromQL: {len(rules)} alert and {len(dashboards)} dashboard expressions parse")


if __name__ == "__main__":
    main()
