#!/usr/bin/env bash
# Prints the workspace's target directory as cargo resolves it (CARGO_TARGET_DIR, build.target-dir in
# .cargo/config.toml, else <repo>/target), so scripts never assume `target/`. Relative values resolve from
# the repository root, where the other scripts run cargo. Without cargo (a machine given prebuilt
# binaries) it falls back to CARGO_TARGET_DIR, else <repo>/target.
# Usage: target=$(scripts/target-dir.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null; then
    dir="${CARGO_TARGET_DIR:-target}"
    [[ "$dir" == /* ]] || dir="$PWD/$dir"
    echo "$dir"
    exit 0
fi
cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
