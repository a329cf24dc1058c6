#!/usr/bin/env bash
# The declared MSRV is true for the dependency graph: every locked dependency's own `rust-version` (as
# `cargo metadata` reports it, dev and optional dependencies included) is at most the workspace's
# `rust-version`. Only one toolchain can be installed here, so this is the check that stands in for a build
# with the old compiler; clippy's `incompatible_msrv` lint (on by default, -D warnings in CI) covers our own
# use of newer standard-library APIs against the same declared version.
#
# Usage: scripts/check-msrv.sh   (prints the five newest requirements; exits 1 naming every offender)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo metadata --format-version 1 | python3 -c '
import json, re, sys

def version(text):
    parts = [int(x) for x in re.findall(r"\d+", text)][:3]
    return tuple(parts + [0] * (3 - len(parts)))

meta = json.load(sys.stdin)
members = set(meta["workspace_members"])
declared = {p["rust_version"] for p in meta["packages"] if p["id"] in members and p.get("rust_version")}
if len(declared) != 1:
    found = sorted(declared) or "no"
    sys.exit(f"check-msrv: workspace members declare {found} rust-version; expected one (rust-version.workspace = true)")
msrv = declared.pop()
deps = sorted(
    ((version(p["rust_version"]), p["rust_version"], p["name"], p["version"])
     for p in meta["packages"] if p["id"] not in members and p.get("rust_version")),
    reverse=True,
)
print(f"declared rust-version: {msrv}; newest requirements in the lock:")
for _, rv, name, ver in deps[:5]:
    print(f"  {name} {ver}: {rv}")
bad = [d for d in deps if d[0] > version(msrv)]
if bad:
    for _, rv, name, ver in bad:
        print(f"error: {name} {ver} needs rust {rv} > the declared {msrv}", file=sys.stderr)
    need = bad[0][1]
    sys.exit(f"check-msrv: raise rust-version in the root Cargo.toml to {need} or pin those crates to older versions")
print(f"ok: all {len(deps)} dependencies with a rust-version fit {msrv}")
'
