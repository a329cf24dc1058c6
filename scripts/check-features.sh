#!/usr/bin/env bash
# Every feature of every library builds on its own: cargo-hack's `--each-feature` (each feature alone, none,
# all) with `cargo check` of the library targets — bounded: no powerset, no tests. Installs cargo-hack from
# crates.io when missing. Crates that use Kubernetes types get `k8s-openapi/latest` (libraries pick no
# version). The facade has its own check, a powerset: scripts/check-minimal-facade.sh.
# Usage: scripts/check-features.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if ! cargo hack --version >/dev/null 2>&1; then
    cargo install cargo-hack --locked
fi
hack() { cargo hack check --each-feature --skip default "$@"; }

# No Kubernetes types.
hack -p kubetrain-yaml -p kubetrain-nccl-sys -p kubetrain-collective -p kubetrain-initializer
# Quantities: each feature without Kubernetes types, then `k8s-openapi` with the version the builds pick.
cargo hack check --each-feature --skip k8s-openapi -p kubetrain-quantity
cargo check -p kubetrain-quantity --features k8s-openapi,k8s-openapi/latest
# Kubernetes types: the version the builds pick.
hack -p kubetrain-api -p kubetrain-merge -p kubetrain-jobset -p kubetrain-kueue -p kubetrain-client \
    -p kubetrain-controller -p kubetrain-acceptance --features k8s-openapi/latest
# The facade: scripts/check-minimal-facade.sh (a feature powerset with `latest`, and the minimal build's tree).
echo "ok: every feature of every library checks on its own"
