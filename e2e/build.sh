#!/usr/bin/env bash
# Builds the real components of the e2e cluster from their Go modules, once, into the cache
# (${XDG_CACHE_HOME:-~/.cache}/kubetrain-e2e/<component>-<version>-<hash>/bin). A warm cache makes this a no-op.
#
#   e2e/build.sh [k8s|kwok|jobset|kueue|trainer|training-operator|helm|prometheus|promtool|venv|all]...
#   (default: everything `cluster.sh up` needs; training-operator, the v1 operator of e2e/migrate-compare.sh, helm,
#   the chart's CLI, and prometheus (or promtool alone), the scrape scenario's server, only when named)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

command -v go >/dev/null || die "go is not on PATH (the harness builds the components with the Go toolchain)"
export GOFLAGS="${GOFLAGS:--buildvcs=false} -mod=readonly"
export CGO_ENABLED=0

# build NAME VERSION LDFLAGS PACKAGE...: go build every package into NAME's cache folder, all or nothing.
# BUILD_TAGS (optional): Go build tags for that component.
build() {
    local name=$1 version=$2 ldflags=$3
    shift 3
    local dir
    dir=$(bin_dir "$name" "$version")
    local missing=0 pkg
    for pkg in "$@"; do
        [[ -x "$dir/$(basename "$pkg")" ]] || missing=1
    done
    if [[ $missing == 0 ]]; then
        log "$name $version: cached in $dir"
        return
    fi
    log "$name $version: building $* (cold: minutes)"
    local start=$SECONDS tmp="$dir.partial"
    rm -rf "$tmp" && mkdir -p "$tmp"
    # KUBETRAIN_E2E_DROP_GO_CACHE=1 (CI): this component's Go build cache lives in a folder of its own, removed
    # once it is built. The components pin different Kubernetes versions and share little beyond the standard
    # library, while one shared cache grows past 10 GB; on a machine built once, that is disk for nothing.
    local own_cache=""
    [[ "${KUBETRAIN_E2E_DROP_GO_CACHE:-0}" == 1 ]] && own_cache="$tmp.gocache"
    (cd "$E2E_DIR/tools/$name" && GOCACHE="${own_cache:-$(go env GOCACHE)}" go build -trimpath ${BUILD_TAGS:+-tags "$BUILD_TAGS"} -ldflags "-s -w $ldflags" -o "$tmp/" "$@")
    [[ -z "$own_cache" ]] || rm -rf "$own_cache"
    rm -rf "$dir" && mv "$tmp" "$dir"
    log "$name $version: built in $((SECONDS - start)) s ($(du -sh "$dir" | cut -f1))"
}

k8s_ldflags() {
    local v=$K8S_VERSION minor
    minor=$(echo "$v" | cut -d. -f2)
    local x
    for x in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        printf -- '-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean ' \
            "$x" "$v" "$x" "$x" "$minor" "$x"
    done
}

build_k8s() {
    build k8s "$K8S_VERSION" "$(k8s_ldflags)" ./etcd k8s.io/kubernetes/cmd/kube-apiserver \
        k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler \
        k8s.io/kubernetes/cmd/kubectl
}
build_kwok() { build kwok "$KWOK_VERSION" "-X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok; }
build_jobset() { build jobset "$JOBSET_VERSION" "-X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION" sigs.k8s.io/jobset; }
build_kueue() { build kueue "$KUEUE_VERSION" "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue; }
build_trainer() {
    build trainer "$TRAINER_VERSION" "" github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager
}
build_helm() {
    build helm "$HELM_VERSION" "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
        helm.sh/helm/v4/cmd/helm
}
# Prometheus (the module's tags are v0.3MM.P for Prometheus 3.MM.P) without its service-discovery plugins
# (remove_all_sd: static, file and HTTP discovery stay; the scenario scrapes fixed 127.0.0.1 targets) and
# without the web UI's assets (no builtinassets tag: the HTTP API is all the harness uses). promql-series
# (e2e/tools/prometheus/promql-series) is Prometheus's PromQL parser, for scripts/check-promql.py.
prometheus_ldflags() {
    local v=${PROMETHEUS_VERSION#v0.} x=github.com/prometheus/common/version
    # v0.316.0 -> 3.16.0
    printf -- '-X %s.Version=%s.%s.%s -X %s.Branch=release -X %s.Revision=%s' "$x" "${v:0:1}" "$((10#${v:1:2}))" \
        "${v#*.}" "$x" "$x" "$PROMETHEUS_VERSION"
}
build_prometheus() {
    BUILD_TAGS=remove_all_sd build prometheus "$PROMETHEUS_VERSION" "$(prometheus_ldflags)" \
        github.com/prometheus/prometheus/cmd/prometheus github.com/prometheus/prometheus/cmd/promtool ./promql-series
}
# What CI's chart check needs: promtool and the parser, not the server (which scripts/check-chart.sh does not run).
build_promtool() {
    if [[ -x "$(PROMETHEUS_BIN)/promtool" && -x "$(PROMETHEUS_BIN)/promql-series" ]]; then
        log "promtool $PROMETHEUS_VERSION: cached in $(PROMETHEUS_BIN)"
        return
    fi
    BUILD_TAGS=remove_all_sd build prometheus "$PROMETHEUS_VERSION" "$(prometheus_ldflags)" \
        github.com/prometheus/prometheus/cmd/promtool ./promql-series
}
build_training_operator() {
    build training-operator "$TRAINING_OPERATOR_VERSION" "" \
        github.com/kubeflow/training-operator/cmd/training-operator.v1
}

# The Kubeflow Python SDK (a real client no one here wrote) and the scenarios' test runner, in a venv.
build_venv() {
    if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c 'import kubeflow.trainer, pytest, yaml' 2>/dev/null; then
        log "venv: cached in $VENV"
        return
    fi
    log "venv: installing kubeflow==$KUBEFLOW_SDK_VERSION, pytest, pyyaml"
    rm -rf "$VENV.partial"
    python3 -m venv "$VENV.partial"
    "$VENV.partial/bin/pip" install --quiet --disable-pip-version-check \
        "kubeflow==$KUBEFLOW_SDK_VERSION" "pytest==8.4.2" "pyyaml==6.0.3"
    rm -rf "$VENV" && mv "$VENV.partial" "$VENV"
    # A venv records its own path in scripts; a moved venv still runs `bin/python -m ...`, which is all we use.
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(k8s kwok jobset kueue venv)
[[ " ${targets[*]} " == *" all "* ]] && targets=(k8s kwok jobset kueue trainer training-operator helm prometheus venv)
# One build at a time per cache: a second run (another cluster, a helper's shell) would otherwise delete the
# first one's `.partial` folder under it. The lock goes with the process, so a killed build never holds it.
mkdir -p "$E2E_CACHE"
exec 9>"$E2E_CACHE/.build.lock"
if ! flock -n 9; then
    log "another e2e/build.sh is building into $E2E_CACHE; waiting for it"
    flock 9
fi
start=$SECONDS
for t in "${targets[@]}"; do
    case $t in
        k8s | kwok | jobset | kueue | trainer | helm | prometheus | promtool | venv) "build_$t" ;;
        training-operator) build_training_operator ;;
        *) die "unknown component '$t' (k8s, kwok, jobset, kueue, trainer, training-operator, helm, prometheus, promtool, venv, all)" ;;
    esac
done
log "components ready in $((SECONDS - start)) s; cache: $E2E_CACHE ($(du -sh "$E2E_CACHE" 2>/dev/null | cut -f1))"
