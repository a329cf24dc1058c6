#!/usr/bin/env python3
"""Prints the workspace's publishable crates (publish not false), one per line: `scripts/publishable.py` (names)
or `scripts/publishable.py --docsrs` (name|cargo flags|rustdoc args of its docs.rs metadata; `|`, not a tab,
because `read` collapses empty tab-separated fields)."""
import json, subprocess, sys

meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"],
                                 capture_output=True, text=True, check=True).stdout)
for p in sorted(meta["packages"], key=lambda p: p["name"]):
    if p.get("publish") == []:
        continue
    if "--docsrs" not in sys.argv:
        print(p["name"])
        continue
    docsrs = ((p.get("metadata") or {}).get("docs") or {}).get("rs") or {}
    flags = []
    if docsrs.get("all-features"):
        flags.append("--all-features")
    if docsrs.get("features"):
        flags += ["--features", ",".join(docsrs["features"])]
    if docsrs.get("no-default-features"):
        flags.append("--no-default-features")
    args = " ".join(docsrs.get("rustdoc-args", []))
    print(f"{p['name']}|{' '.join(flags)}|{args}")
