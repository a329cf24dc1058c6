#!/usr/bin/env bash
# Side by side with the real thing: the same TrainJobs through upstream Kubeflow Trainer v2.3.0's controller
# and through kubetrain-operator, each on a fresh e2e cluster, the objects each made read back and compared
# (docs/e2e.md, "Side by side").
#
#   e2e/side-by-side.sh [--slice] [--count N] [--seed S] [--strict]
#
# --strict (CI) exits 1 when a case differs other than by a documented divergence (docs/e2e.md).
# Ends with the lines `render: N/M identical` and `kueue: N/M agree`. --slice (CI) runs 20 generated cases
# and no upstream examples; the default is 200 generated cases plus every example TrainJob upstream ships
# (../shared/upstream/trainer/trainjobs, when present). The clusters run beside any cluster of
# `e2e/cluster.sh up` (own state folder, ports shifted by 1000).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

count=200 seed=1 examples=1 strict=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --slice) count=20; examples=0; shift ;;
        --count) count=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --strict) strict=1; shift ;;
        *) die "unknown argument '$1'" ;;
    esac
done

export KUBETRAIN_E2E_STATE="${KUBETRAIN_E2E_SBS_STATE:-${TMPDIR:-/tmp}/kubetrain-e2e-sbs}"
export KUBETRAIN_E2E_PORT_OFFSET=1000
OUT="${KUBETRAIN_E2E_SBS_OUT:-${TMPDIR:-/tmp}/kubetrain-side-by-side}"
rm -rf "$OUT" && mkdir -p "$OUT"
"$E2E_DIR/build.sh" k8s kwok jobset kueue trainer venv

py() { "$VENV/bin/python" "$E2E_DIR/lib/sidebyside.py" "$@"; }
gen=(generate --count "$count" --seed "$seed" --out "$OUT/corpus")
if [[ $examples == 1 ]]; then
    upstream_examples="$REPO_DIR/../shared/upstream/trainer/trainjobs"
    if [[ -d $upstream_examples ]]; then
        gen+=(--upstream-examples "$upstream_examples")
    elif [[ -n ${CI:-} ]]; then
        die "CI is set but $upstream_examples is missing"
    else
        log "no $upstream_examples: generated cases only"
    fi
else
    gen+=(--no-examples)
fi
py "${gen[@]}"

trap '"$E2E_DIR/cluster.sh" down >/dev/null 2>&1 || true' EXIT
for operator in upstream kubetrain; do
    log "side by side: $operator"
    "$E2E_DIR/cluster.sh" up --operator "$operator"
    eval "$("$E2E_DIR/cluster.sh" env)"
    KUBECTL="$(K8S_BIN)/kubectl" py run --corpus "$OUT/corpus" --out "$OUT/$operator.json"
    "$E2E_DIR/cluster.sh" down
done
summary=$(py compare "$OUT/upstream.json" "$OUT/kubetrain.json" --report "$OUT/differences.md")
log "differences, case by case: $OUT/differences.md"
echo "$summary"
# The Kueue model against real Kueue on its own cluster (ports shifted by 2000): 10 scenarios with --slice, 100
# otherwise; its last line is `kueue: N/M agree`.
kueue_args=(--count 100)
[[ $examples == 0 ]] && kueue_args=(--slice)
if [[ ${perf_only:-0} == 0 ]]; then
    "$E2E_DIR/kueue-compare.sh" "${kueue_args[@]}" | tail -n 1 || echo "kueue: 0/0 agree (the comparison failed; see its log above)"
else
    echo "kueue: 0/0 agree (--perf-only)"
fi
if [[ $strict == 1 ]]; then
    unexplained=$(sed -n 's/^unexplained: \([0-9]*\)$/\1/p' <<<"$summary")
    [[ $unexplained == 0 ]] ||
        die "--strict: $unexplained cases differ beyond the documented divergences (see $OUT/differences.md)"
fi
