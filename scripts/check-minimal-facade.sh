#!/usr/bin/env bash
# Every switch is reachable from the `kubetrain` facade (issue 36 item 5), checked two ways:
# 1. the minimal facade (`--no-default-features` plus one Kubernetes version and rendering) builds neither
#    kube-cel, nor cudarc, nor a TLS stack, and its dependency count is printed;
# 2. a feature powerset of the facade checks (cargo-hack, depth 3: the Kubernetes version plus any two other
#    features, 79 builds; the version is always `latest`, one version being all k8s-openapi accepts).
# Usage: scripts/check-minimal-facade.sh [--tree-only]
set -euo pipefail
cd "$(dirname "$0")/.."

minimal=(-p kubetrain --no-default-features --features latest,render -e normal)
deps=$(cargo tree "${minimal[@]}" --prefix none | sed 's/ (\*)$//' | sort -u)
unwanted=$(grep -E '^(kube-cel|cel|cudarc|rustls|ring|aws-lc-rs|aws-lc-sys|openssl|openssl-sys|native-tls) ' <<<"$deps" || true)
if [[ -n "$unwanted" ]]; then
    echo "error: the minimal facade (cargo tree ${minimal[*]}) builds what a feature should switch off:" >&2
    sed 's/^/    /' <<<"$unwanted" >&2
    echo "See why with: cargo tree -p kubetrain --no-default-features --features latest,render -e features -i <crate>" >&2
    exit 1
fi
echo "ok: the minimal facade (latest,render) has $(wc -l <<<"$deps") crates and no kube-cel, cudarc or TLS stack"

[[ "${1:-}" == "--tree-only" ]] && exit 0
if ! cargo hack --version >/dev/null 2>&1; then
    cargo install cargo-hack --locked
fi
versions=latest,earliest,v1_33,v1_34,v1_35,v1_36,v1_37
cargo hack check -p kubetrain --feature-powerset --depth 3 \
    --mutually-exclusive-features "$versions" --at-least-one-of "$versions" \
    --include-features latest,render,yaml,kueue,collective,initializer,migrate,tenancy,optimize,client,controller,cel,nccl,ring,aws-lc-rs
echo "ok: every combination of up to two facade features checks with the latest Kubernetes version"
