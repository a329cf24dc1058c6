#!/usr/bin/env bash
# The count-only status write budget at scale on the e2e cluster (issue 39; docs/benchmarks.md, "The budget
# at work"): N TrainJobs whose pods keep running, so every one has running counts to write and no condition
# to carry them, once with the operator's default budget and once with it off (period 0). Prints, per mode,
# the TrainJob status patches the API server counted, how many TrainJobs have their counts written and how
# many wait (kubetrain_status_count_writes_waiting), WINDOW seconds after the last JobSet reported ready.
#
#   e2e/lib/count_budget.sh [N] [WINDOW]     (default 300 TrainJobs, 60 s; needs e2e/cluster.sh up)
set -euo pipefail
E2E_DIR="$(cd "$(dirname "$0")/.." && pwd)"
N=${1:-300} WINDOW=${2:-60}
eval "$("$E2E_DIR/cluster.sh" env)"
METRICS="http://127.0.0.1:$((18080 + ${KUBETRAIN_E2E_PORT_OFFSET:-0}))/metrics"

status_patches() {
    kubectl get --raw /metrics |
        awk '/^apiserver_request_total\{/ && /resource="trainjobs"/ && /subresource="status"/ && /verb="PATCH"/ {s += $NF} END {print s + 0}'
}

waiting() { curl -sf "$METRICS" | awk '/^kubetrain_status_count_writes_waiting / {print $2}'; }

run() {
    local mode=$1 ns="count-budget-$1"
    "$E2E_DIR/cluster.sh" operator stop kubetrain-operator >/dev/null
    if [[ $mode == off ]]; then
        KUBETRAIN_STATUS_COUNT_WRITES_PERIOD=0 "$E2E_DIR/cluster.sh" operator start kubetrain-operator >/dev/null
    else
        "$E2E_DIR/cluster.sh" operator start kubetrain-operator >/dev/null
    fi
    kubectl create namespace "$ns" >/dev/null
    local before start
    before=$(status_patches)
    start=$(date +%s)
    for i in $(seq 1 "$N"); do
        printf -- '---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: job-%d}\n' "$i"
        printf 'spec: {runtimeRef: {name: torch-distributed}, trainer: {numNodes: 1, image: "kwok.e2e/running:1"}}\n'
    done | kubectl apply -n "$ns" -f - >/dev/null
    until [[ $(kubectl get jobsets -n "$ns" -o jsonpath='{range .items[*]}{.status.replicatedJobsStatus[0].ready}{"\n"}{end}' | grep -c '^1$') == "$N" ]]; do
        sleep 2
    done
    local ready=$(($(date +%s) - start))
    sleep "$WINDOW"
    local patches written
    patches=$(($(status_patches) - before))
    written=$(kubectl get trainjobs -n "$ns" -o jsonpath='{range .items[*]}{.status.jobsStatus[0].active}{"\n"}{end}' | grep -c '^1$' || true)
    printf '| %s | %d | %d s | %d | %d | %s |\n' "$mode" "$N" "$((ready + WINDOW))" "$patches" "$written" "$(waiting)"
    kubectl delete namespace "$ns" --wait=true >/dev/null
}

echo "| budget | TrainJobs (running) | elapsed | status patches | counts written | waiting |"
echo "|---|---:|---:|---:|---:|---:|"
run default
run off
"$E2E_DIR/cluster.sh" operator stop kubetrain-operator >/dev/null
"$E2E_DIR/cluster.sh" operator start kubetrain-operator >/dev/null
