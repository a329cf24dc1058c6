#!/usr/bin/env bash
# crates.io readiness of every publishable crate (publish not false), as `cargo publish --dry-run` checks it:
#  1. `cargo package --no-verify`: the .crate files, each holding README.md and a LICENSE equal to the root's;
#  2. the verification build of every package from its .crate, in dependency order against a local registry
#     of the others, with a Kubernetes version feature: our libraries pick none (as kube-rs's, whose release
#     config passes `enable-features = ["k8s-openapi/latest"]` to cargo publish for the same reason).
# --allow-dirty: the check is about the packages' contents and build, so it also runs on a working tree.
# Usage: scripts/check-package.sh [--no-verify]
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t crates < <(scripts/publishable.py)
pkgs=()
for c in "${crates[@]}"; do pkgs+=(-p "$c"); done

target=$(scripts/target-dir.sh)
cargo package --no-verify --allow-dirty "${pkgs[@]}"
version=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["packages"][0]["version"])')
bad=0
for c in "${crates[@]}"; do
    file="$target/package/$c-$version.crate"
    for f in README.md LICENSE; do
        if ! tar -tzf "$file" "$c-$version/$f" >/dev/null 2>&1; then
            echo "error: $file has no $f (add it to the crate directory, and to \`include\` if the crate has one)" >&2
            bad=1
        fi
    done
    if ! tar -xzOf "$file" "$c-$version/LICENSE" 2>/dev/null | cmp -s - LICENSE; then
        echo "error: the LICENSE in $file differs from the root LICENSE (copy it again: cp LICENSE crates/$c/)" >&2
        bad=1
    fi
done
[[ $bad == 0 ]] || exit 1
echo "ok: ${#crates[@]} packages, each with README.md and the root LICENSE"

[[ "${1:-}" == "--no-verify" ]] && exit 0
# A registry crate counts as unchanged by name and version: cargo never unpacks the local registry's .crate
# again under $CARGO_HOME/registry/src, nor rebuilds it in <target>/debug (which the verification builds share).
# Copies left by an earlier run would be built instead of this tree's packages (a fresh checkout has none).
for c in "${crates[@]}"; do
    rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$c-$version"
done
rm -rf "$target"/package/tmp-registry "$target"/debug/.fingerprint/kubetrain-*
# Without debug info: a packaged manifest carries none of the workspace's [profile] settings, so the verification
# builds would otherwise use cargo's default (full debug info for every crate): measured on 2 cores, 5.7 GB more
# in <target>/debug and 9 min, against 2.7 GB and 6 min with it off. Only whether the packages build is checked.
CARGO_PROFILE_DEV_DEBUG=false cargo package --allow-dirty "${pkgs[@]}" --features k8s-openapi/latest
echo "ok: ${#crates[@]} packages verified (built from their .crate files with k8s-openapi/latest)"
