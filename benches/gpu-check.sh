#!/usr/bin/env bash
# GPU acceptance check of the NCCL backend on ONE GPU (step 3 of a GPU cluster's acceptance test, scaled
# down to what one device can prove). Never run by CI. It:
#   1. builds the CLI and shows where NCCL and the CUDA driver were found;
#   2. runs every collective through NCCL (validated, integer-exact data, #wrong must be 0) from 8 B to
#      MAX_BYTES, and every data type for all-reduce;
#   3. measures the out-of-place copy rate against a device-to-device cudaMemcpy baseline (one rank:
#      NCCL turns an out-of-place all-reduce into a device copy; interconnect bandwidth needs 2+ GPUs);
#   4. checks that two ranks on one GPU are refused with a clear error (NCCL >= 2.5: ncclInvalidUsage);
#   5. writes the figures to docs/benchmarks.md (section "Collectives on one GPU (NCCL)").
# Needs libnccl.so.2: NCCL_LIBRARY=/path/to/libnccl.so.2, or `pip install nvidia-nccl-cu12` beforehand.
# Usage: benches/gpu-check.sh            (MAX_BYTES=256M ITERS=20 WARMUP=5 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-lo}"
MAX_BYTES="${MAX_BYTES:-256M}"
ITERS="${ITERS:-20}"
WARMUP="${WARMUP:-5}"
out="${OUT:-$(mktemp -d /tmp/kubetrain-gpu-check.XXXXXX)}"
mkdir -p "$out"

cargo build --release -q -p kubetrain-cli
bin="$CARGO_TARGET_DIR/release/kubetrain"
"$bin" collective info | tee "$out/info.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/gpu.txt" 2>/dev/null || echo "unknown GPU" > "$out/gpu.txt"

fail=0
for op in all_reduce all_gather reduce_scatter broadcast; do
  echo "== $op"
  if ! "$bin" collective bench --backend nccl --op "$op" -b 8 -e "$MAX_BYTES" -n "$ITERS" -w "$WARMUP" \
      --memcpy-baseline -o table | tee "$out/$op.txt"; then
    fail=1
  fi
done
for dt in float double half bfloat16 int32 int64 uint8; do
  echo "== all_reduce $dt"
  "$bin" collective bench --backend nccl --dtype "$dt" -b 8 -e 1M -f 64 -n 5 -w 2 -o json > "$out/dtype-$dt.json" || fail=1
done

echo "== two ranks on one GPU (must be refused)"
if "$bin" collective bench --backend nccl --local-ranks 2 -b 8 -e 8 -n 1 -w 0 --timeout-secs 60 > "$out/duplicate.txt" 2>&1; then
  echo "FAILED: two ranks on one GPU were accepted"; fail=1
elif grep -q "ncclInvalidUsage" "$out/duplicate.txt"; then
  echo "ok: refused with ncclInvalidUsage"; grep -m1 "ncclInvalidUsage" "$out/duplicate.txt"
else
  echo "FAILED: refused, but not with ncclInvalidUsage:"; cat "$out/duplicate.txt"; fail=1
fi

python3 - "$out" "$fail" <<'PY'
import pathlib, re, sys
out, fail = pathlib.Path(sys.argv[1]), sys.argv[2] != "0"
gpu = (out / "gpu.txt").read_text().strip()
lines = ["## Collectives on one GPU (NCCL)", "",
         f"Written by `benches/gpu-check.sh` on: {gpu}. One rank per GPU: these rows validate the call path,",
         "correctness and latency; an out-of-place all-reduce on one rank is a device copy, compared with a",
         "device-to-device cudaMemcpy of the largest size. Interconnect bandwidth needs two or more GPUs.", ""]
for op in ["all_reduce", "all_gather", "reduce_scatter", "broadcast"]:
    text = (out / f"{op}.txt").read_text() if (out / f"{op}.txt").exists() else ""
    rows = [l for l in text.splitlines() if l.strip() and not l.startswith("#")]
    memcpy = [l for l in text.splitlines() if "memcpy" in l or "device copy" in l]
    lines.append(f"### {op}")
    lines.append("")
    lines.append("```")
    lines.extend([l for l in text.splitlines() if l.startswith("#  ") or l.startswith("#   ")][:2])
    lines.extend(rows[:1] + rows[len(rows) // 2: len(rows) // 2 + 1] + rows[-1:])
    lines.extend(memcpy)
    lines.append("```")
    lines.append("")
dup = (out / "duplicate.txt").read_text() if (out / "duplicate.txt").exists() else ""
m = re.search(r"ncclInvalidUsage[^\n]*", dup)
lines.append("Two ranks on one GPU: " + (f"refused (`{m.group(0)[:160]}`)." if m else "NOT refused as expected."))
lines.append("")
lines.append("Reproduce: `benches/gpu-check.sh` (needs libnccl.so.2 and a CUDA driver)." + (" Some checks FAILED." if fail else ""))
section = "\n".join(lines) + "\n"
doc = pathlib.Path("docs/benchmarks.md")
text = doc.read_text() if doc.exists() else "# Benchmarks\n"
start = text.find("## Collectives on one GPU (NCCL)")
if start >= 0:
    end = text.find("\n## ", start + 1)
    text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
else:
    text = text.rstrip("\n") + "\n\n" + section
doc.write_text(text)
print(f"wrote the section to {doc}; raw output in {out}")
PY
exit "$fail"
