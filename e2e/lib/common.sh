# Shared paths and helpers of the e2e harness; sourced by build.sh, cluster.sh and run.sh.
# shellcheck shell=bash

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$E2E_DIR/.." && pwd)"
# shellcheck source=../versions.env
source "$E2E_DIR/versions.env"

# Built binaries live outside the repository, one folder per component and pinned version (plus a hash of
# the module files, so an edited go.mod rebuilds instead of reusing a stale binary).
E2E_CACHE="${KUBETRAIN_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kubetrain-e2e}"
# Runtime state of a running cluster: certificates, kubeconfigs, etcd data, logs, pids.
E2E_STATE="${KUBETRAIN_E2E_STATE:-${TMPDIR:-/tmp}/kubetrain-e2e}"

# Loopback ports, chosen away from the defaults so a real cluster or another tool on this machine is not hit.
# KUBETRAIN_E2E_PORT_OFFSET shifts every one of them, so a second cluster (with its own KUBETRAIN_E2E_STATE)
# can run beside the first (e2e/side-by-side.sh does).
OFFSET=${KUBETRAIN_E2E_PORT_OFFSET:-0}
ETCD_PORT=$((12379 + OFFSET))
ETCD_PEER_PORT=$((12380 + OFFSET))
API_PORT=$((16443 + OFFSET))
KCM_PORT=$((16257 + OFFSET))
SCHED_PORT=$((16259 + OFFSET))
KWOK_PORT=$((16270 + OFFSET))
OPERATOR_WEBHOOK_PORT=$((19443 + OFFSET))
OPERATOR_METRICS_PORT=$((18080 + OFFSET))
OPERATOR_PROBE_PORT=$((18081 + OFFSET))
OPERATOR_STATUS_PORT=$((19447 + OFFSET))
JOBSET_WEBHOOK_PORT=$((19444 + OFFSET))
JOBSET_PROBE_PORT=$((18091 + OFFSET))
KUEUE_WEBHOOK_PORT=$((19445 + OFFSET))
KUEUE_PROBE_PORT=$((18093 + OFFSET))
UPSTREAM_WEBHOOK_PORT=$((19446 + OFFSET))
UPSTREAM_METRICS_PORT=$((18094 + OFFSET))
UPSTREAM_PROBE_PORT=$((18095 + OFFSET))
UPSTREAM_STATUS_PORT=$((10443 + OFFSET))

log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# module_hash DIR: a short hash of a tools module's inputs (go.mod, go.sum, any .go file).
module_hash() {
    (cd "$1" && find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 | sort -z |
        xargs -0 sha256sum) | sha256sum | cut -c1-10
}

# bin_dir COMPONENT VERSION: where that component's binaries are cached.
bin_dir() {
    echo "$E2E_CACHE/$1-$2-$(module_hash "$E2E_DIR/tools/$1")/bin"
}

K8S_BIN() { bin_dir k8s "$K8S_VERSION"; }
KWOK_BIN() { bin_dir kwok "$KWOK_VERSION"; }
JOBSET_BIN() { bin_dir jobset "$JOBSET_VERSION"; }
KUEUE_BIN() { bin_dir kueue "$KUEUE_VERSION"; }
UPSTREAM_BIN() { bin_dir trainer "$TRAINER_VERSION"; }
HELM_BIN() { bin_dir helm "$HELM_VERSION"; }
PROMETHEUS_BIN() { bin_dir prometheus "$PROMETHEUS_VERSION"; }
VENV="$E2E_CACHE/venv-kubeflow-$KUBEFLOW_SDK_VERSION"

# module_dir MODULE@VERSION: the unpacked module in the Go module cache (downloads it once).
module_dir() {
    (cd "$E2E_DIR/tools/k8s" && go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
}

# The admin kubeconfig (client certificate in system:masters) the harness itself uses.
ADMIN_KUBECONFIG="$E2E_STATE/admin.kubeconfig"

kubectl_admin() { "$(K8S_BIN)/kubectl" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }
