#!/usr/bin/env bash
# An embedder's first build works with one dependency line: tests/embed is a crate outside the workspace that
# depends on `kubetrain = { features = ["latest"] }` only (no k8s-openapi line; the facade forwards the version
# feature and re-exports k8s_openapi). It is built against the repository's Cargo.lock (copied in, so no
# newer versions are fetched) and run; its output must name the rendered JobSet.
set -euo pipefail
cd "$(dirname "$0")/.."
cp Cargo.lock tests/embed/Cargo.lock
trap 'rm -f tests/embed/Cargo.lock' EXIT
out=$(cargo run -q --manifest-path tests/embed/Cargo.toml --target-dir "$(scripts/target-dir.sh)")
echo "$out"
[[ "$out" == "jobset embed PET_NNODES=2" ]] || { echo "check-embedding: unexpected output" >&2; exit 1; }
echo "ok: a crate with only \`kubetrain = { features = [\"latest\"] }\` builds and renders"
