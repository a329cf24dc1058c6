#!/usr/bin/env bash
# The Kueue model against real Kueue ($KUEUE_VERSION of e2e/versions.env: v0.19.2) (docs/e2e.md, "Kueue model vs
# real Kueue"; issue 14 item 4, issue 37 item 3).
#
#   e2e/kueue-compare.sh [--slice] [--random N | --count N] [--seed S] [--trainjobs PERCENT] [--tie-orders K]
#                        [--fair-sharing] [--strict]
#
# Generates N random scenarios with `kubetrain queue generate --random N --seed S` (--random N, or its older
# spelling --count N; default 100; --slice: 10),
# each in its own namespace with its own flavors, cohort and queues, so they run side by side without touching
# each other. A seeded share of the Workloads (--trainjobs PERCENT, default 35; 0 for none) is submitted as
# TrainJobs on one ClusterTrainingRuntime instead (`kueue_compare.py trainjobs`): Kueue's TrainJob integration
# builds their Workloads, the model builds its own from the same TrainJobs (crates/kubetrain-kueue/src/trainjob.rs). Every object is created while Kueue is stopped (and its webhooks are off), so nothing depends on
# when Kueue first sees a workload; then Kueue starts, admits, preempts (this script finishes each eviction, as
# Kueue's integration tests do for Workloads without a job), and once nothing has changed for a while the
# Workloads are read back. `kubetrain queue simulate` runs on the same objects (the stored Workloads with their
# UIDs and creation timestamps, and Kueue's feature-gate defaults of that release) and the two are compared per
# workload: admitted or not, ClusterQueue, flavors, admitted counts, preempted or not, and the pending reason.
# Every Workload existed before Kueue started, so in the model they all arrive together (ordered by creation
# time). A scenario agrees when all its workloads do, as simulated or with the Workloads' documents shuffled
# (K more model runs, default 7): Kueue takes one head per ClusterQueue from a Go map and sorts them without
# a final tie-break, so heads equal in borrowing, priority and creation second meet in a random order, which
# the model takes from the document order. A Workload caught in a preempt-and-readmit loop on both sides (Kueue
# preempted it twice or more, `status.schedulingStats`; the model's livelock check marks it `repeating`) agrees
# whatever phase each side stopped in (docs/e2e.md, s5). --fair-sharing turns fair sharing on in Kueue's Configuration
# (`fairSharing` with both preemption strategies) and in the model's, every ClusterQueue weighted 0.5, 1 or 2.
# Ends with `kueue: N/M agree`; the differences, workload by workload, are in
# ${TMPDIR:-/tmp}/kubetrain-kueue-compare/differences.md. --strict exits 1 unless all agree.
# Runs its own cluster beside others (ports shifted by 2000, state in ${TMPDIR:-/tmp}/kubetrain-e2e-kueue).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

count=100 seed=1 strict=0 tie_orders=7 fair=0 trainjob_share=35
while [[ $# -gt 0 ]]; do
    case $1 in
        --slice) count=10; shift ;;
        --random | --count) count=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --tie-orders) tie_orders=$2; shift 2 ;;
        --trainjobs) trainjob_share=$2; shift 2 ;;
        --fair-sharing) fair=1; shift ;;
        --strict) strict=1; shift ;;
        *) die "unknown argument '$1'" ;;
    esac
done

export KUBETRAIN_E2E_STATE="${KUBETRAIN_E2E_KUEUE_STATE:-${TMPDIR:-/tmp}/kubetrain-e2e-kueue}"
export KUBETRAIN_E2E_PORT_OFFSET=${KUBETRAIN_E2E_KUEUE_PORT_OFFSET:-2000}
OUT="${KUBETRAIN_E2E_KUEUE_OUT:-${TMPDIR:-/tmp}/kubetrain-kueue-compare}"
fair_sharing="fairSharing: {preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]}"
[[ $fair == 0 ]] || export KUBETRAIN_E2E_KUEUE_CONFIG_EXTRA="$fair_sharing"
rm -rf "$OUT" && mkdir -p "$OUT"

"$E2E_DIR/cluster.sh" up --operator none
trap '"$E2E_DIR/cluster.sh" down >/dev/null 2>&1 || true' EXIT
# The cluster's functions (stop, start_kueue, kubectl_admin) for this state folder.
source "$E2E_DIR/cluster.sh"
export KUBECONFIG="$ADMIN_KUBECONFIG"
KUBETRAIN="${KUBETRAIN_E2E_CLI:-$("$REPO_DIR/scripts/target-dir.sh")/${KUBETRAIN_E2E_PROFILE:-debug}/kubetrain}"
py() { "$VENV/bin/python" "$E2E_DIR/lib/kueue_compare.py" "$@"; }

"$KUBETRAIN" queue generate --random "$count" --seed "$seed" >"$OUT/scenarios.yaml"
if [[ $fair == 1 ]]; then
    py fair-weights --scenarios "$OUT/scenarios.yaml" --seed "$seed" --out "$OUT/scenarios-fair.yaml"
    mv "$OUT/scenarios-fair.yaml" "$OUT/scenarios.yaml"
fi
if [[ $trainjob_share != 0 ]]; then
    py trainjobs --scenarios "$OUT/scenarios.yaml" --seed "$seed" --share "$trainjob_share" \
        --out "$OUT/scenarios-trainjobs.yaml"
    mv "$OUT/scenarios-trainjobs.yaml" "$OUT/scenarios.yaml"
fi
# The TrainJob and runtime CRDs (`kubetrain crd`), for Kueue's TrainJob integration; no operator runs: Kueue
# builds the TrainJobs' Workloads itself, and admission is all this compares.
"$KUBETRAIN" crd -o yaml | kubectl_admin apply --server-side -f - >/dev/null
established trainjobs.trainer.kubeflow.org clustertrainingruntimes.trainer.kubeflow.org
log "kueue compare: $count scenarios (seed $seed, ${trainjob_share}% TrainJobs$([[ $fair == 1 ]] && echo ", fair sharing")), created while Kueue is stopped"
stop kueue
kubectl_admin delete --ignore-not-found mutatingwebhookconfiguration kueue-mutating-webhook-configuration >/dev/null
kubectl_admin delete --ignore-not-found validatingwebhookconfiguration kueue-validating-webhook-configuration >/dev/null
# Kueue loads ClusterQueues, Cohorts and queues by separate reconcilers, and admits as soon as it starts: a
# cohort still being assembled borrows differently (docs/e2e.md, "start-up race"). So every ClusterQueue waits
# behind a namespace label until Kueue's own dump of its caches shows each scenario whole, then all open.
py gate --scenarios "$OUT/scenarios.yaml" --out "$OUT/scenarios-gated.yaml"
kubectl_admin apply --server-side -f "$OUT/scenarios-gated.yaml" >/dev/null
KUBETRAIN_E2E_KUEUE_ARGS="--zap-log-level=2" start_kueue
# Kueue's TrainJob reconciler builds about two Workloads a second on a loaded machine (413 TrainJobs: 2 min).
py wait-cache --scenarios "$OUT/scenarios.yaml" --log "$LOGS/kueue.log" --pid-file "$PIDS/kueue.pid" \
    --exe "$(KUEUE_BIN)/kueue" --timeout 600
py open --kubectl "$(K8S_BIN)/kubectl" --scenarios "$OUT/scenarios.yaml"
py settle --kubectl "$(K8S_BIN)/kubectl" --out "$OUT/cluster.json"

# Kueue v0.19's defaults for the gates the model reads (the model defaults to v0.20's).
config="$OUT/kueue-$KUEUE_VERSION-config.yaml"
cat >"$config" <<'YAML'
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
featureGates: {UnadmittedWorkloadsObservability: false}
YAML
[[ $fair == 0 ]] || echo "$fair_sharing" >>"$config"
# simulate INPUT OUTPUT: the model on one input. A simulation that does not end within the limit is a model bug
# to report, never a result: the run fails with the input named (a hang would otherwise hold CI to its limit).
simulate() {
    timeout "${KUBETRAIN_E2E_SIMULATE_TIMEOUT:-600}" "$KUBETRAIN" queue simulate -f "$1" -f "$config" -o json >"$2" ||
        die "queue simulate on $1 failed or ran past ${KUBETRAIN_E2E_SIMULATE_TIMEOUT:-600} s (exit $?)"
}
py model-input --scenarios "$OUT/scenarios.yaml" --cluster "$OUT/cluster.json" --out "$OUT/model-input.yaml"
simulate "$OUT/model-input.yaml" "$OUT/model.json"
alternatives=()
for ((order = 1; order <= tie_orders; order++)); do
    py model-input --scenarios "$OUT/scenarios.yaml" --cluster "$OUT/cluster.json" --order "$order" \
        --out "$OUT/model-input-$order.yaml"
    simulate "$OUT/model-input-$order.yaml" "$OUT/model-$order.json"
    alternatives+=("$OUT/model-$order.json")
done
summary=$(py compare "$OUT/cluster.json" "$OUT/model.json" --alternatives "${alternatives[@]}" \
    --report "$OUT/differences.md")
log "differences, workload by workload: $OUT/differences.md"
echo "$summary"
if [[ $strict == 1 ]]; then
    read -r agree total < <(sed -n 's|^kueue: \([0-9]*\)/\([0-9]*\) agree$|\1 \2|p' <<<"$summary")
    [[ $agree == "$total" ]] || die "--strict: $((total - agree)) scenarios differ (see $OUT/differences.md)"
fi
