#!/usr/bin/env bash
# Side-by-side comparison of the CPU backend of `kubetrain collective` with Open MPI's MPI_Allreduce
# (Debian openmpi-bin + python3-mpi4py, the usual CPU reference) on this machine: float32 all-reduce,
# 8 B to 64 MiB, 2 and 4 local ranks, plus single-thread memcpy bandwidth. Runs alternate between the two
# implementations ROUNDS times and the medians are reported, because the machine may be shared.
#
# Needs: apt-get install -y openmpi-bin libopenmpi-dev python3-mpi4py python3-numpy
# Usage: benches/collective-vs-mpi.sh    (ROUNDS=3 ITERS=20 WARMUP=5 RANKS="2 4" MAX=64M FACTOR=2 by default:
#        sizes 8 B, 16 B, ... ×FACTOR up to MAX)
# Prints a markdown table (the one in docs/benchmarks.md); raw JSON lines are kept in $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="$(scripts/target-dir.sh)"
ROUNDS="${ROUNDS:-3}"
ITERS="${ITERS:-20}"
WARMUP="${WARMUP:-5}"
RANKS="${RANKS:-2 4}"
MAX="${MAX:-64M}"
FACTOR="${FACTOR:-2}"
out="${OUT:-$(mktemp -d /tmp/collective-vs-mpi.XXXXXX)}"
mkdir -p "$out"
PY="${MPI_PYTHON:-/usr/bin/python3}"

# KUBETRAIN_BIN skips the build (e.g. a binary built elsewhere).
bin="${KUBETRAIN_BIN:-}"
if [[ -z "$bin" ]]; then
  cargo build --release -q -p kubetrain-cli
  bin="$CARGO_TARGET_DIR/release/kubetrain"
fi
max_bytes=$("$PY" -c "import sys; s=sys.argv[1]; m={'K':1<<10,'M':1<<20,'G':1<<30}; print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$MAX")

# The load average (other processes on the machine) is recorded before every run: figures from a busy
# machine are only comparable side by side.
for round in $(seq 1 "$ROUNDS"); do
  for n in $RANKS; do
    echo "kubetrain n=$n round=$round $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
    "$bin" collective bench --backend cpu --local-ranks "$n" -b 8 -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" \
      -o json --memcpy-baseline > "$out/kubetrain-n$n-r$round.json"
    echo "openmpi n=$n round=$round $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/load.txt"
    mpirun --allow-run-as-root --oversubscribe -n "$n" "$PY" benches/collective_mpi.py \
      -b 8 -e "$max_bytes" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" > "$out/openmpi-n$n-r$round.json"
  done
done

"$PY" - "$out" "$RANKS" "$max_bytes" <<'PY'
import json, pathlib, statistics, sys
out, ranks, max_bytes = pathlib.Path(sys.argv[1]), sys.argv[2].split(), int(sys.argv[3])
def load(impl, n):
    rows, memcpy = {}, []
    for f in sorted(out.glob(f"{impl}-n{n}-r*.json")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r.get("op") == "memcpy":
                memcpy.append(r["gbps"])
            else:
                rows.setdefault(r["bytes"], []).append(r)
    return rows, memcpy
def med(rs, key, mode):
    return statistics.median((r if mode == "oop" else r["in_place"])[key] for r in rs)
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"
loads = [float(l.split()[3]) for l in (out / "load.txt").read_text().splitlines()]
print(f"load average (1 min) before the runs: {min(loads):.1f} to {max(loads):.1f}, median {statistics.median(loads):.1f}")
print()
print("| ranks | size | kubetrain time (µs) oop / in place | Open MPI time (µs) oop / in place | kubetrain busbw (GB/s) oop / in place | Open MPI busbw (GB/s) oop / in place | busbw ratio (best mode) | kubetrain best busbw / memcpy |")
print("|---|---|---|---|---|---|---|---|")
for n in ranks:
    k, mc = load("kubetrain", n)
    m, _ = load("openmpi", n)
    memcpy = statistics.median(mc) if mc else float("nan")
    for b in sorted(k):
        if b not in m or not (b == 8 or b >= 1 << 16):
            continue
        kt = [med(k[b], "time_us", x) for x in ("oop", "ip")]
        mt = [med(m[b], "time_us", x) for x in ("oop", "ip")]
        kb = [med(k[b], "busbw_gbps", x) for x in ("oop", "ip")]
        mb = [med(m[b], "busbw_gbps", x) for x in ("oop", "ip")]
        ratio = max(kb) / max(mb) if max(mb) else float("nan")
        print(f"| {n} | {size(b)} | {kt[0]:.1f} / {kt[1]:.1f} | {mt[0]:.1f} / {mt[1]:.1f} | {kb[0]:.2f} / {kb[1]:.2f} "
              f"| {mb[0]:.2f} / {mb[1]:.2f} | {ratio:.2f} | {100 * max(kb) / memcpy:.0f} % of {memcpy:.2f} |")
print(f"\nraw JSON lines and load.txt: {out}")
PY
