#!/usr/bin/env bash
# Side-by-side comparison of the CPU backend of `kubetrain collective` with Open MPI's MPI_Allreduce
# (Debian openmpi-bin + python3-mpi4py, the usual CPU reference) on this machine: float32 all-reduce,
# 8 B to 64 MiB, 2 and 4 local ranks, plus single-thread memcpy bandwidth. Runs alternate between the two
# implementations ROUNDS times and the medians are reported, because the machine may be shared.
#
# Needs: apt-get install -y openmpi-bin libopenmpi-dev python3-mpi4py python3-numpy
# Usage: benches/collective-vs-mpi.sh    (ROUNDS=3 ITERS=20 WARMUP=5 RANKS="2 4" MAX=64M by default)
# Prints a markdown table (the one in docs/benchmarks.md); raw JSON lines are kept in $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
ROUNDS="${ROUNDS:-3}"
ITERS="${ITERS:-20}"
WARMUP="${WARMUP:-5}"
RANKS="${RANKS:-2 4}"
MAX="${MAX:-64M}"
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

for round in $(seq 1 "$ROUNDS"); do
  for n in $RANKS; do
    "$bin" collective bench --backend cpu --local-ranks "$n" -b 8 -e "$MAX" -n "$ITERS" -w "$WARMUP" \
      -o json --memcpy-baseline > "$out/kubetrain-n$n-r$round.json"
    mpirun --allow-run-as-root --oversubscribe -n "$n" "$PY" benches/collective_mpi.py \
      -b 8 -e "$max_bytes" -n "$ITERS" -w "$WARMUP" > "$out/openmpi-n$n-r$round.json"
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
def med(rs, key, mode="out_of_place"):
    return statistics.median((r if mode == "out_of_place" else r["in_place"])[key] for r in rs)
print("| ranks | size | kubetrain time (us) | Open MPI time (us) | kubetrain busbw (GB/s) | Open MPI busbw (GB/s) | ratio busbw | memcpy 1 thread (GB/s) |")
print("|---|---|---|---|---|---|---|---|")
for n in ranks:
    k, mc = load("kubetrain", n)
    m, _ = load("openmpi", n)
    memcpy = statistics.median(mc) if mc else float("nan")
    for size in [8, 65536, 1 << 20, max_bytes]:
        if size not in k or size not in m:
            continue
        kb, mb = med(k[size], "busbw_gbps"), med(m[size], "busbw_gbps")
        print(f"| {n} | {size} B | {med(k[size], 'time_us'):.1f} | {med(m[size], 'time_us'):.1f} | {kb:.2f} | {mb:.2f} | "
              f"{kb / mb if mb else float('nan'):.2f} | {memcpy:.2f} |")
print(f"\nraw JSON lines: {out}")
PY
