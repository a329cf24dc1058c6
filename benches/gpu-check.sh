#!/usr/bin/env bash
# GPU acceptance check of the NCCL backend on ONE GPU (step 3 of a GPU cluster's acceptance test, scaled
# down to what one device can prove). Never run by CI. It:
#   1. shows where NCCL and the CUDA driver were found (`kubetrain collective info`, nvidia-smi);
#   2. runs every collective through NCCL (validated, integer-exact data, #wrong must be 0) from 8 B to
#      MAX_BYTES, every data type and every reduction operator for all-reduce;
#   3. compares the out-of-place all-reduce (one rank: a device copy) with a device-to-device cudaMemcpy of
#      the largest size, and records the 8 B latency (interconnect bandwidth needs two or more GPUs);
#   4. checks that two ranks on one GPU are refused with a clear error (NCCL >= 2.5: ncclInvalidUsage);
#   5. writes the section "Collectives on one GPU (NCCL)" of docs/benchmarks.md, and a copy of it plus the
#      raw output (section.md, raw.tar.gz, gpu-check.log) to $GPU_CHECK_OUT.
#
# Hard time limit: the whole script stops after BUDGET_SECS (default 420); every step runs under `timeout`
# with what is left, and the section is written from whatever finished (a step cut short is marked).
#
# The binary: KUBETRAIN_BIN, else a `cargo build --release -p kubetrain-cli` when cargo is on the PATH.
# GPU machines without a Rust toolchain get a binary built on an x86-64 Linux machine and carried along:
#     cargo build --release -p kubetrain-cli
#     mkdir -p .gpu-bin && cp "$(scripts/target-dir.sh)/release/kubetrain" .gpu-bin/ && strip .gpu-bin/kubetrain
#     echo /.gpu-bin/ >> .git/info/exclude            # ~20 MB stripped
#   then on the GPU machine:  KUBETRAIN_BIN=.gpu-bin/kubetrain GPU_CHECK_OUT=/some/dir benches/gpu-check.sh
#
# NCCL: NCCL_LIBRARY=/path/to/libnccl.so.2, else the one of the python3 on the PATH (an nvidia-nccl-cu12 or
# -cu13 wheel, as PyTorch installs), else the usual lookup (docs/collectives.md).
# Settings: MAX_BYTES=256M ITERS=20 WARMUP=5 BUDGET_SECS=420 GPU_CHECK_OUT=<temp dir>.
set -uo pipefail
cd "$(dirname "$0")/.."
start_s=$SECONDS
BUDGET_SECS="${BUDGET_SECS:-420}"
MAX_BYTES="${MAX_BYTES:-256M}"
ITERS="${ITERS:-20}"
WARMUP="${WARMUP:-5}"
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
results="${GPU_CHECK_OUT:-$(mktemp -d /tmp/kubetrain-gpu-check.XXXXXX)}"
raw="$(mktemp -d /tmp/kubetrain-gpu-raw.XXXXXX)"
mkdir -p "$results"
exec > >(tee "$results/gpu-check.log") 2>&1

left() { echo $((BUDGET_SECS - (SECONDS - start_s))); }
# Runs a step under `timeout` with the time left (at most $1 seconds); 124 when it ran out of time.
step() {
  local cap=$1; shift
  local t; t=$(left)
  if (( t < 5 )); then echo "SKIPPED (time budget spent): $*"; return 124; fi
  (( t > cap )) && t=$cap
  timeout --kill-after=5 "$t" "$@"
}

fail=0
bin="${KUBETRAIN_BIN:-}"
if [[ -z "$bin" ]]; then
  if ! command -v cargo >/dev/null; then
    echo "no KUBETRAIN_BIN and no cargo here: build the CLI elsewhere and carry it (see the header)"; exit 2
  fi
  export CARGO_TARGET_DIR="$(scripts/target-dir.sh)"
  step 900 cargo build --release -q -p kubetrain-cli || { echo "build failed or ran out of time"; exit 2; }
  bin="$CARGO_TARGET_DIR/release/kubetrain"
fi
if [[ -z "${NCCL_LIBRARY:-}" ]] && command -v python3 >/dev/null; then
  wheel_lib=$(python3 - <<'PY' 2>/dev/null
import importlib.util, os
spec = importlib.util.find_spec("nvidia.nccl")
for d in (spec.submodule_search_locations or []) if spec else []:
    p = os.path.join(d, "lib", "libnccl.so.2")
    if os.path.exists(p):
        print(p)
        break
PY
)
  [[ -n "$wheel_lib" ]] && export NCCL_LIBRARY="$wheel_lib"
fi

echo "== where things are"
step 30 "$bin" collective info | tee "$raw/info.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$raw/gpu.txt" 2>/dev/null \
  || echo "unknown GPU" > "$raw/gpu.txt"
if ! grep -q "^cuda driver: found" "$raw/info.txt" || ! grep -q "^nccl: .*(version " "$raw/info.txt"; then
  echo "no CUDA driver or no NCCL library here: nothing to check (see $raw/info.txt)"; exit 2
fi

for op in all_reduce all_gather reduce_scatter broadcast; do
  echo "== $op, 8 B .. $MAX_BYTES"
  step 120 "$bin" collective bench --backend nccl --op "$op" -b 8 -e "$MAX_BYTES" -n "$ITERS" -w "$WARMUP" \
    --memcpy-baseline --timeout-secs 60 -o json > "$raw/op-$op.json"
  rc=$?; (( rc != 0 )) && { echo "FAILED ($rc): $op"; fail=1; }
done
for dt in float double half bfloat16 int32 int64 uint8; do
  step 30 "$bin" collective bench --backend nccl --dtype "$dt" -b 8 -e 1M -f 64 -n 5 -w 2 --timeout-secs 30 \
    -o json > "$raw/dtype-$dt.json" || { echo "FAILED: all_reduce $dt"; fail=1; }
done
for redop in prod min max avg; do
  step 30 "$bin" collective bench --backend nccl --redop "$redop" -b 8 -e 1M -f 64 -n 5 -w 2 --timeout-secs 30 \
    -o json > "$raw/redop-$redop.json" || { echo "FAILED: all_reduce $redop"; fail=1; }
done

echo "== two ranks on one GPU (must be refused)"
step 90 "$bin" collective bench --backend nccl --local-ranks 2 -b 8 -e 8 -n 1 -w 0 --timeout-secs 60 \
  > "$raw/duplicate.txt" 2>&1
rc=$?
if (( rc == 0 )); then
  echo "FAILED: two ranks on one GPU were accepted"; fail=1
elif (( rc == 124 )); then
  echo "FAILED: two ranks on one GPU hung until the time limit"; fail=1
elif grep -q "ncclInvalidUsage" "$raw/duplicate.txt"; then
  echo "ok: refused with ncclInvalidUsage"; grep -m1 "ncclInvalidUsage" "$raw/duplicate.txt"
else
  echo "FAILED: refused, but not with ncclInvalidUsage:"; cat "$raw/duplicate.txt"; fail=1
fi

python3 - "$raw" "$results" "$fail" "$MAX_BYTES" <<'PY'
import json, pathlib, re, sys, time
raw, results, fail, max_bytes = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3] != "0", sys.argv[4]

def rows(name):
    p = raw / name
    out, baseline = [], None
    if p.exists():
        for line in p.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("op") == "memcpy":
                baseline = r
            else:
                out.append(r)
    return out, baseline

gpu = (raw / "gpu.txt").read_text().strip()
nccl = next((l for l in (raw / "info.txt").read_text().splitlines() if l.startswith("nccl:")), "nccl: ?") \
    if (raw / "info.txt").exists() else "nccl: ?"
lines = ["## Collectives on one GPU (NCCL)", "",
         f"Written by `benches/gpu-check.sh` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {gpu}; {nccl}.",
         "One rank per GPU: these rows validate the call path, correctness and latency; an out-of-place",
         "all-reduce on one rank is a device copy, compared with a device-to-device cudaMemcpy of the largest",
         "size (both count bytes once). Interconnect bandwidth needs two or more GPUs.", "",
         "| op | 8 B time (µs) oop / in place | largest size | time (µs) oop / in place | algbw (GB/s) oop / in place | #wrong (all sizes) |",
         "|---|---|---|---|---|---|"]
summary = []
for op in ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]:
    rs, base = rows(f"op-{op}.json")
    if not rs:
        lines.append(f"| {op} | not run or cut short | | | | |")
        continue
    first, last = rs[0], rs[-1]
    wrong = sum(r["wrong"] + r["in_place"]["wrong"] for r in rs)
    lines.append(f"| {op} | {first['time_us']:.1f} / {first['in_place']['time_us']:.1f} | {last['bytes']} B "
                 f"| {last['time_us']:.1f} / {last['in_place']['time_us']:.1f} "
                 f"| {last['algbw_gbps']:.1f} / {last['in_place']['algbw_gbps']:.1f} | {wrong} |")
    if op == "all_reduce" and base:
        ratio = last["algbw_gbps"] / base["gbps"] if base["gbps"] else float("nan")
        summary.append(f"Out-of-place all-reduce of {last['bytes']} B: {last['algbw_gbps']:.1f} GB/s, "
                       f"{100 * ratio:.0f} % of cudaMemcpy DtoD ({base['gbps']:.1f} GB/s).")
checks = []
for kind, names in [("dtype", ["float", "double", "half", "bfloat16", "int32", "int64", "uint8"]),
                    ("redop", ["prod", "min", "max", "avg"])]:
    for n in names:
        rs, _ = rows(f"{kind}-{n}.json")
        checks.append(f"{n} {'not run' if not rs else sum(r['wrong'] + r['in_place']['wrong'] for r in rs)}")
lines += [""] + summary + ["", "All-reduce 8 B to 1 MiB, #wrong per type and operator: " + ", ".join(checks) + "."]
dup = (raw / "duplicate.txt").read_text() if (raw / "duplicate.txt").exists() else ""
m = re.search(r"ncclInvalidUsage[^\n]*", dup)
lines.append("")
lines.append("Two ranks on one GPU: " + (f"refused (`{m.group(0)[:160]}`)." if m else "NOT refused as expected."))
lines.append("")
lines.append(f"Reproduce: `benches/gpu-check.sh` (MAX_BYTES={max_bytes}; needs libnccl.so.2 and a CUDA driver)."
             + (" Some checks FAILED (see gpu-check.log)." if fail else ""))
section = "\n".join(lines) + "\n"
(results / "section.md").write_text(section)
doc = pathlib.Path("docs/benchmarks.md")
text = doc.read_text() if doc.exists() else "# Benchmarks\n"
start = text.find("## Collectives on one GPU (NCCL)")
if start >= 0:
    end = text.find("\n## ", start + 1)
    text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
else:
    text = text.rstrip("\n") + "\n\n" + section
doc.write_text(text)
print(section)
print(f"wrote the section to {doc} and {results}/section.md")
PY
tar -czf "$results/raw.tar.gz" -C "$raw" . 2>/dev/null
echo "results in $results (section.md, raw.tar.gz, gpu-check.log); $((SECONDS - start_s)) s"
exit "$fail"
