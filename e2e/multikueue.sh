#!/usr/bin/env bash
# MultiKueue across two real clusters (docs/kueue.md, "Across clusters (MultiKueue)"; issue 37 item 2).
#
#   e2e/multikueue.sh [--keep] [PYTEST-ARGS...]
#
# Starts two e2e clusters side by side (e2e/cluster.sh, each with its own port offset and state folder):
#   worker   Kueue and kubetrain-operator: the TrainJob runs here (kwok completes its pods);
#   manager  Kueue with MultiKueue (v0.19.2: the MultiKueue feature gate is on by default; the `multiKueue`
#            Configuration section below) and kubetrain-operator, which must leave the TrainJob alone
#            (`spec.managedBy: kueue.x-k8s.io/multikueue`).
# then runs the scenario e2e/multikueue/test_multikueue.py (a kubeconfig Secret for the worker in kueue-system,
# MultiKueueCluster, MultiKueueConfig, the `kueue.x-k8s.io/multikueue` AdmissionCheck and the ClusterQueues;
# a TrainJob submitted to the manager runs on the worker and its status comes back; `kubetrain queue explain`
# on the two clusters' exported objects names the worker Kueue chose) and stops both clusters (--keep leaves
# them up). Ends with the line `multikueue: N passed, M failed`.
#
# Ports and state: KUBETRAIN_E2E_MK_MANAGER_OFFSET / KUBETRAIN_E2E_MK_WORKER_OFFSET (default 2000 / 2200, beside
# a cluster of `e2e/cluster.sh up` and the side-by-side runs' 1000) and KUBETRAIN_E2E_MK_MANAGER_STATE /
# KUBETRAIN_E2E_MK_WORKER_STATE (default ${TMPDIR:-/tmp}/kubetrain-e2e-mk-{manager,worker}). The other
# KUBETRAIN_E2E_* settings of e2e/cluster.sh apply to both (KUBETRAIN_E2E_CARGO_BUILD=0 reuses built binaries).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

keep=0
if [[ ${1:-} == --keep ]]; then keep=1; shift; fi
MANAGER_OFFSET=${KUBETRAIN_E2E_MK_MANAGER_OFFSET:-2000}
WORKER_OFFSET=${KUBETRAIN_E2E_MK_WORKER_OFFSET:-2200}
MANAGER_STATE=${KUBETRAIN_E2E_MK_MANAGER_STATE:-${TMPDIR:-/tmp}/kubetrain-e2e-mk-manager}
WORKER_STATE=${KUBETRAIN_E2E_MK_WORKER_STATE:-${TMPDIR:-/tmp}/kubetrain-e2e-mk-worker}
# Kueue's MultiKueue controller settings on the manager (config.kueue.x-k8s.io/v1beta2 `multiKueue`): the
# incremental dispatcher (clusters offered in the MultiKueueConfig's order, `stepSize` at a time).
MANAGER_KUEUE_CONFIG="multiKueue:
  gcInterval: 30s
  origin: kubetrain-e2e-manager
  workerLostTimeout: 2m
  dispatcherName: kueue.x-k8s.io/multikueue-dispatcher-incremental
  incrementalDispatcherConfig: {stepSize: 1}"

cluster() { # cluster manager|worker ARGS...: e2e/cluster.sh on that cluster
    local which=$1
    shift
    if [[ $which == manager ]]; then
        KUBETRAIN_E2E_PORT_OFFSET=$MANAGER_OFFSET KUBETRAIN_E2E_STATE=$MANAGER_STATE \
            KUBETRAIN_E2E_KUEUE_CONFIG_EXTRA="$MANAGER_KUEUE_CONFIG" "$E2E_DIR/cluster.sh" "$@"
    else
        KUBETRAIN_E2E_PORT_OFFSET=$WORKER_OFFSET KUBETRAIN_E2E_STATE=$WORKER_STATE "$E2E_DIR/cluster.sh" "$@"
    fi
}

finish() {
    local rc=$?
    if [[ $keep == 0 ]]; then
        cluster manager down >/dev/null 2>&1 || true
        cluster worker down >/dev/null 2>&1 || true
    else
        log "clusters kept: manager $MANAGER_STATE, worker $WORKER_STATE (stop them with e2e/cluster.sh down)"
    fi
    exit $rc
}
trap finish EXIT

summary="multikueue: 0 passed, 1 failed"
# The worker first: its kubeconfig goes into the manager's Secret. The second `up` reuses the first's builds.
if ! cluster worker up >&2 || ! KUBETRAIN_E2E_CARGO_BUILD=0 cluster manager up >&2; then
    log "a cluster did not come up (logs in $WORKER_STATE/logs and $MANAGER_STATE/logs)"
    echo "$summary"
    exit 1
fi
[[ -x "$VENV/bin/python" ]] || die "no harness venv at $VENV; run e2e/build.sh venv"

rc=0
rm -f "$MANAGER_STATE/e2e-summary"
# The scenario reuses the fixtures and the closing-line hook of e2e/scenarios/conftest.py (loaded as a plugin);
# its KUBETRAIN_E2E_STATE is the manager's.
(cd "$E2E_DIR/multikueue" && KUBETRAIN_E2E_STATE=$MANAGER_STATE KUBETRAIN_E2E_WORKER_STATE=$WORKER_STATE \
    PYTHONPATH="$E2E_DIR/scenarios${PYTHONPATH:+:$PYTHONPATH}" \
    "$VENV/bin/python" -m pytest -p no:cacheprovider -p conftest -q -rfEs "$@") || rc=$?
line=$(cat "$MANAGER_STATE/e2e-summary" 2>/dev/null || echo "0 passed, 1 failed")
[[ $rc == 0 || $line != *" 0 failed"* ]] || line="${line/ 0 failed/ 1 failed}"
echo "multikueue: $line"
exit $rc
