#!/usr/bin/env bash
# Download throughput of kubetrain-initializer vs curl on loopback, side by side in one run:
# 1 GiB in 16 objects of 64 MiB from one in-memory S3 server (SigV4 on both sides), written to
# /dev/shm. Prints the criterion medians and the ratio initializer / curl for 1 and 8 parallel
# downloads. The issue's bar: the ratio is at least 0.80.
#
# Usage: benches/initializer-vs-curl.sh [extra criterion args]
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(scripts/target-dir.sh)
command -v curl >/dev/null || { echo "curl is not installed: nothing to compare against" >&2; exit 1; }
cargo bench -p kubetrain-benches --bench initializer_throughput -- "$@"
dir="$target/criterion/initializer_vs_curl_1GiB"
python3 - "$dir" <<'PY'
import json, pathlib, sys
base = pathlib.Path(sys.argv[1])
GIB = 1 << 30
def median_s(name):
    path = base / name / "new" / "estimates.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())["median"]["point_estimate"] / 1e9
print(f"{'case':<28}{'median s':>10}{'MiB/s':>10}")
for jobs in (1, 8):
    ours, theirs = median_s(f"initializer_jobs_{jobs}"), median_s(f"curl_parallel_{jobs}")
    for label, secs in ((f"initializer, {jobs} at a time", ours), (f"curl, {jobs} at a time", theirs)):
        if secs:
            print(f"{label:<28}{secs:>10.3f}{GIB / secs / (1 << 20):>10.0f}")
    if ours and theirs:
        print(f"ratio initializer/curl ({jobs}): {theirs / ours:.2f}")
PY
