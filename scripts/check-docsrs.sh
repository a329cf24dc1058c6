#!/usr/bin/env bash
# A docs.rs-style build of every publishable crate on its own: `cargo doc -p <crate> --no-deps` with the
# features of its [package.metadata.docs.rs] and warnings denied. docs.rs builds with nightly and
# `--cfg docsrs` (which turns on `#![cfg_attr(docsrs, feature(doc_cfg))]`): done here too when a nightly
# toolchain is installed (in its own target dir, <target>/docsrs), else on stable without the cfg, saying so.
# Also checks that every library declares that attribute. Usage: scripts/check-docsrs.sh
set -euo pipefail
cd "$(dirname "$0")/.."

missing=0
while IFS='|' read -r crate _ _; do
    dir=$(cargo metadata --format-version 1 --no-deps | python3 -c "
import json, os, sys
p = next(p for p in json.load(sys.stdin)['packages'] if p['name'] == '$crate')
print(os.path.dirname(p['manifest_path']))")
    if ! grep -q '^#!\[cfg_attr(docsrs, feature(doc_cfg))\]' "$dir/src/lib.rs"; then
        echo "error: $dir/src/lib.rs lacks #![cfg_attr(docsrs, feature(doc_cfg))]" >&2
        missing=1
    fi
done < <(scripts/publishable.py --docsrs)
[[ $missing == 0 ]] || exit 1

if rustup run nightly rustc --version >/dev/null 2>&1; then
    toolchain=(+nightly)
    target=(--target-dir "$(scripts/target-dir.sh)/docsrs")
    echo "docs.rs-style builds with $(rustup run nightly rustc --version) and --cfg docsrs"
else
    toolchain=()
    target=()
    echo "note: no nightly toolchain; docs.rs-style builds on stable without --cfg docsrs (rustup toolchain install nightly to add it)"
fi
n=0
while IFS='|' read -r crate flags rustdoc_args; do
    args=()
    [[ ${#toolchain[@]} -gt 0 ]] && args=($rustdoc_args)
    echo "==> $crate ${flags:-(default features)}"
    # shellcheck disable=SC2086 # flags are cargo words
    RUSTDOCFLAGS="-D warnings ${args[*]:-}" cargo "${toolchain[@]}" doc -q -p "$crate" --no-deps "${target[@]}" $flags
    n=$((n + 1))
done < <(scripts/publishable.py --docsrs)
echo "ok: $n crates documented on their own with their docs.rs features"
