#!/usr/bin/env bash
# `kubetrain render` on a mixed stream (issue 13, item 9): torch, deepspeed (MPI: one new SSH key per TrainJob),
# jax and xgboost TrainJobs in equal parts, 8 nodes each, the shape of benches/lib.rs's TORCH_8_NODES.
# Prints user CPU, wall time and TrainJobs/s for the validated and the --no-validate mode.
#
#   cargo build --release -p kubetrain-cli && benches/render-mixed-stream.sh
#   N=5000 RUNTIMES=deepspeed-distributed BIN=/tmp/kubetrain-before benches/render-mixed-stream.sh
set -euo pipefail
N=${N:-10000}
BIN=${BIN:-$("$(dirname "$0")/../scripts/target-dir.sh")/release/kubetrain}
RUNTIMES=${RUNTIMES:-"torch-distributed deepspeed-distributed jax-distributed xgboost-distributed"}
FILE=${FILE:-/tmp/render-mixed-$N-$(echo "$RUNTIMES" | tr ' ' '+' | md5sum | cut -c1-8).yaml}
if [ ! -s "$FILE" ]; then
  read -r -a runtimes <<< "$RUNTIMES"
  for ((i = 0; i < N; i++)); do
    runtime=${runtimes[$((i % ${#runtimes[@]}))]}
    printf -- '---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: job-%05d, namespace: team-%d, uid: 5f0c1d2e-%05d}\nspec:\n  runtimeRef: {name: %s}\n  trainer:\n    numNodes: 8\n    image: example.com/train:1\n    command: [python, train.py]\n    env: [{name: EPOCHS, value: '"'"'3'"'"'}]\n    resourcesPerNode: {limits: {cpu: '"'"'8'"'"', memory: 32Gi, nvidia.com/gpu: '"'"'8'"'"'}}\n' \
      "$i" "$((i % 7))" "$i" "$runtime"
  done > "$FILE"
fi
echo "stream: $FILE ($N TrainJobs: $RUNTIMES); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in validated --no-validate; do
  args=(render -f "$FILE")
  [ "$mode" = --no-validate ] && args+=(--no-validate)
  out=$({ /usr/bin/time -f "%U %e %M" "$BIN" "${args[@]}" > /dev/null; } 2>&1 | tail -1)
  read -r user wall rss <<< "$out"
  awk -v n="$N" -v u="$user" -v w="$wall" -v r="$rss" -v m="$mode" \
    'BEGIN { printf "%-14s user %5.2f s  wall %5.2f s  %8.0f TrainJobs/s (user CPU)  %8.0f TrainJobs/s (wall)  max RSS %d MB\n", m, u, w, n / (u > 0 ? u : 0.01), n / (w > 0 ? w : 0.01), r / 1024 }'
done
