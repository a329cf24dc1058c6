#!/usr/bin/env python3
"""Copies the generated install files into charts/kubetrain/files/, or checks that the copies are current.

    scripts/gen-chart.py           # rewrite charts/kubetrain/crds/*.json and files/runtimes/*.yaml
    scripts/gen-chart.py --check   # exit 1 (naming the stale files) when a copy differs

The sources are examples/manifests/deploy/crds.yaml (the output of `kubetrain crd -o yaml`, kept equal to the
code by the manifests_deploy test of kubetrain-controller) and examples/manifests/deploy/runtimes/runtimes.yaml
(kubetrain's built-in ClusterTrainingRuntimes, kept equal to kubetrain_jobset::builtin the same way). The
chart keeps one file per runtime so that each can be switched on by its own value, and one compact JSON file
per CRD in crds/, where Helm installs them (and waits until they are established) before the runtimes: Helm
stores the chart in a release Secret limited to 1 MiB, which the CRDs as indented YAML (2.6 MB) would overflow.
"""
import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "examples/manifests/deploy"
CHART = ROOT / "charts/kubetrain"


def wanted():
    """The generated files, path relative to the chart -> text."""
    crds = [d for d in yaml.safe_load_all((DEPLOY / "crds.yaml").read_text()) if d]
    out = {f"crds/{c['metadata']['name']}.json": json.dumps(c, separators=(",", ":")) + "\n" for c in crds}
    text = (DEPLOY / "runtimes/runtimes.yaml").read_text()
    for doc in re.split(r"(?m)^---\n", text):
        if not doc.strip():
            continue
        name = re.search(r"(?m)^  name: (\S+)$", doc)
        if name is None:
            sys.exit("runtimes.yaml: a document without metadata.name")
        out[f"files/runtimes/{name.group(1)}.yaml"] = doc if doc.endswith("\n") else doc + "\n"
    return out


def main():
    check = "--check" in sys.argv[1:]
    files = wanted()
    stale = []
    for rel, text in files.items():
        path = CHART / rel
        if path.exists() and path.read_text() == text:
            continue
        stale.append(rel)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    extra = sorted(
        str(p.relative_to(CHART)) for p in [*(CHART / "files/runtimes").glob("*.yaml"), *(CHART / "crds").glob("*")]
        if str(p.relative_to(CHART)) not in files
    )
    if check and (stale or extra):
        for rel in stale:
            print(f"charts/kubetrain/{rel}: out of date", file=sys.stderr)
        for rel in extra:
            print(f"charts/kubetrain/{rel}: no longer generated", file=sys.stderr)
        print("regenerate with scripts/gen-chart.py", file=sys.stderr)
        sys.exit(1)
    if not check:
        for rel in extra:
            (CHART / rel).unlink()
        print(f"charts/kubetrain: {len(stale)} file(s) written, {len(extra)} removed")


if __name__ == "__main__":
    main()
