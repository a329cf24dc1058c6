#!/usr/bin/env bash
# A real Kubernetes control plane on 127.0.0.1, built from the components' own Go modules (see docs/e2e.md).
#
#   e2e/cluster.sh up [--operator kubetrain|upstream|none]   build (once) and start everything; returns when ready
#                     [--install kustomize|helm|upstream-chart|upstream-kustomize]
#                                                             how kubetrain is installed (helm: charts/kubetrain;
#                                                             upstream-*: upstream's chart or kustomize overlay
#                                                             with kubetrain's image)
#   e2e/cluster.sh env                                        `export KUBECONFIG=...` lines for a shell
#   e2e/cluster.sh down                                       stop every process `up` started
#   e2e/cluster.sh status                                     which components are running
#   e2e/cluster.sh operator start|stop|kill|webhooks NAME [FLAG...]
#                                                             manage kubetrain-operator replicas (scenarios)
#
# Components: etcd, kube-apiserver (RBAC on), kube-controller-manager, kube-scheduler, kwok (4 fake nodes with
# 8 nvidia.com/gpu each), JobSet with its webhooks, Kueue with its webhooks and the TrainJob integration, and
# the TrainJob operator: kubetrain-operator (default) with exactly the RBAC of examples/manifests/deploy, or
# upstream's trainer-controller-manager, or none.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
source "$E2E_DIR/lib/pki.sh"

LOGS="$E2E_STATE/logs"
PIDS="$E2E_STATE/pids"
NODES=${KUBETRAIN_E2E_NODES:-4}
GPUS_PER_NODE=${KUBETRAIN_E2E_GPUS_PER_NODE:-8}
# The cargo profile of kubetrain-operator and kubetrain (its folder under target/): debug, release or dist.
CARGO_PROFILE=${KUBETRAIN_E2E_PROFILE:-debug}

# start NAME COMMAND...: run COMMAND in its own session (so `down` can stop it and all it forked), log to a file.
start() {
    local name=$1
    shift
    mkdir -p "$LOGS" "$PIDS"
    setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
    echo $! >"$PIDS/$name.pid"
}

# component NAME CMD...: start for the cluster's own Go components. KUBETRAIN_E2E_GOGC sets their GOGC (less garbage
# collection for more memory, on a CPU-bound cluster); never the TrainJob controllers', which the side-by-side
# runs measure.
component() {
    local name=$1
    shift
    if [[ -n ${KUBETRAIN_E2E_GOGC:-} ]]; then
        start "$name" env GOGC="$KUBETRAIN_E2E_GOGC" "$@"
    else
        start "$name" "$@"
    fi
}

alive() { [[ -f "$PIDS/$1.pid" ]] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }

# stop NAME: SIGTERM to the process group, SIGKILL after 15 s.
stop() {
    local name=$1 pid
    [[ -f "$PIDS/$name.pid" ]] || return 0
    pid=$(cat "$PIDS/$name.pid")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        local i
        for i in $(seq 150); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$PIDS/$name.pid"
}

# wait_ready NAME URL [CURL-ARGS...]: until URL answers 2xx; fails with the component's log when it died or
# did not come up within two minutes.
wait_ready() {
    local name=$1 url=$2
    shift 2
    local deadline=$((SECONDS + ${KUBETRAIN_E2E_READY_TIMEOUT:-180}))
    until curl -fsS -o /dev/null --max-time 2 "$@" "$url" 2>/dev/null; do
        if ! alive "$name"; then
            tail -n 40 "$LOGS/$name.log" >&2 || true
            die "$name exited during start-up (log: $LOGS/$name.log)"
        fi
        if ((SECONDS > deadline)); then
            tail -n 40 "$LOGS/$name.log" >&2 || true
            die "$name not ready at $url (log: $LOGS/$name.log)"
        fi
        sleep 0.2
    done
    log "$name ready"
}

manifests() { "$VENV/bin/python" "$E2E_DIR/lib/manifests.py" "$@"; }

# established CRD...: until the API server serves each CRD (a controller started earlier fails "no matches for
# kind"). kubectl wait errors on an object that has no status.conditions yet, so this polls the condition.
established() {
    local crd deadline=$((SECONDS + 60))
    for crd in "$@"; do
        until [[ $(kubectl_admin get crd "$crd" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' \
            2>/dev/null) == True ]]; do
            ((SECONDS < deadline)) || die "CRD $crd is not Established after 60 s"
            sleep 0.2
        done
    done
}

# crd_names FILE...: the metadata.name of every CRD in the files.
crd_names() { "$VENV/bin/python" -c 'import sys, yaml
for f in sys.argv[1:]:
    for d in yaml.safe_load_all(open(f)):
        if d and d.get("kind") == "CustomResourceDefinition": print(d["metadata"]["name"])' "$@"; }

start_etcd() {
    component etcd "$(K8S_BIN)/etcd" --data-dir "$E2E_STATE/etcd" \
        --listen-client-url "http://127.0.0.1:$ETCD_PORT" --listen-peer-url "http://127.0.0.1:$ETCD_PEER_PORT"
    wait_ready etcd "http://127.0.0.1:$ETCD_PORT/health"
}

start_apiserver() {
    component kube-apiserver "$(K8S_BIN)/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
        --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
        --client-ca-file "$PKI/ca.crt" \
        --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
        --service-account-issuer "https://127.0.0.1:$API_PORT" \
        --service-cluster-ip-range 10.0.0.0/24 \
        --authorization-mode Node,RBAC \
        --allow-privileged=true --profiling="${KUBETRAIN_E2E_PROFILING:-false}" \
        --audit-policy-file "$E2E_DIR/audit-policy.yaml" --audit-log-path "$E2E_STATE/audit.log" \
        --cert-dir "$E2E_STATE/apiserver-certs"
    wait_ready kube-apiserver "https://127.0.0.1:$API_PORT/readyz" --cacert "$PKI/ca.crt" \
        --cert "$PKI/admin.crt" --key "$PKI/admin.key"
}

start_controllers() {
    # KUBETRAIN_E2E_NO_ENDPOINTS=1 turns off the Endpoints and EndpointSlice controllers: nothing here resolves
    # JobSet's headless Services, and at thousands of pods their writes are a quarter of the API server's requests.
    local endpoints_off=
    [[ ${KUBETRAIN_E2E_NO_ENDPOINTS:-0} == 1 ]] &&
        endpoints_off=,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller
    # nodelifecycle is off: kwok's nodes send no heartbeats, and the e2e suite does not test node failure.
    # Client-side rate limits off (as kwokctl's disableQPSLimits does), so thousands of fake pods are paced by the
    # CPUs, not by the Job controller's default 20 requests/s; the TrainJob controllers keep their own defaults.
    component kube-controller-manager "$(K8S_BIN)/kube-controller-manager" \
        --kubeconfig "$ADMIN_KUBECONFIG" --leader-elect=false \
        --kube-api-qps 5000 --kube-api-burst 10000 --concurrent-job-syncs 50 \
        --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --cert-dir "$E2E_STATE/kcm-certs" \
        --controllers "*,-nodelifecycle,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller$endpoints_off" \
        --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
        --use-service-account-credentials=false
    component kube-scheduler "$(K8S_BIN)/kube-scheduler" \
        --kubeconfig "$ADMIN_KUBECONFIG" --leader-elect=false \
        --kube-api-qps 5000 --kube-api-burst 10000 \
        --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --cert-dir "$E2E_STATE/scheduler-certs"
    wait_ready kube-controller-manager "https://127.0.0.1:$KCM_PORT/healthz" -k
    wait_ready kube-scheduler "https://127.0.0.1:$SCHED_PORT/healthz" -k
}

start_kwok() {
    local i
    for i in $(seq 0 $((NODES - 1))); do
        cat <<YAML
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
    topology.kubernetes.io/zone: zone-$((i % 2))
status:
  capacity: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "$GPUS_PER_NODE"}
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "$GPUS_PER_NODE"}
---
YAML
    done | kubectl_admin apply --server-side -f - >/dev/null
    component kwok "$(KWOK_BIN)/kwok" --kubeconfig "$ADMIN_KUBECONFIG" -c "$E2E_DIR/kwok-stages.yaml" \
        --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
        --server-address "127.0.0.1:$KWOK_PORT" --node-ip 10.1.0.1 --cidr 10.244.0.0/16
    wait_ready kwok "http://127.0.0.1:$KWOK_PORT/healthz"
    kubectl_admin wait --for=condition=Ready node --all --timeout=120s >/dev/null
    # The API server taints new nodes not-ready; the node-lifecycle controller (off, see above) would lift it.
    kubectl_admin taint nodes --all node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
    log "$NODES kwok nodes ready ($GPUS_PER_NODE nvidia.com/gpu each)"
}

# The coscheduling PodGroup CRD (scheduler-plugins), so gang runtimes render and their PodGroups are stored.
install_podgroup_crd() {
    local src
    src=$(module_dir "sigs.k8s.io/scheduler-plugins@$SCHEDULER_PLUGINS_VERSION")
    kubectl_admin apply --server-side -f "$src/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml" >/dev/null
    established podgroups.scheduling.x-k8s.io
}

start_jobset() {
    local src
    src=$(module_dir "sigs.k8s.io/jobset@$JOBSET_VERSION")
    kubectl_admin create namespace jobset-system --dry-run=client -o yaml | kubectl_admin apply -f - >/dev/null
    kubectl_admin apply --server-side -f "$src/config/components/crd/bases/" >/dev/null
    # shellcheck disable=SC2046
    established $(crd_names "$src"/config/components/crd/bases/*.yaml)
    manifests webhooks --url "https://127.0.0.1:$JOBSET_WEBHOOK_PORT" --ca "$PKI/ca.crt" --prefix jobset- \
        "$src/config/components/webhook/manifests.yaml" | kubectl_admin apply --server-side -f - >/dev/null
    cat >"$E2E_STATE/jobset-config.yaml" <<YAML
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {port: $JOBSET_WEBHOOK_PORT, host: 127.0.0.1, certDir: $PKI/webhook-certs}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$JOBSET_PROBE_PORT"}
# Elastic TrainJobs scale the node Job's parallelism/completions of a running JobSet (docs/operator.md); with the
# gate off JobSet's webhook refuses the change. It changes nothing for a JobSet whose replicas never change.
featureGates: {ElasticJobSet: true}
YAML
    component jobset env KUBECONFIG="$ADMIN_KUBECONFIG" "$(JOBSET_BIN)/jobset" --config "$E2E_STATE/jobset-config.yaml"
    wait_ready jobset "http://127.0.0.1:$JOBSET_PROBE_PORT/readyz"
}

start_kueue() {
    local src
    src=$(module_dir "sigs.k8s.io/kueue@$KUEUE_VERSION")
    kubectl_admin create namespace kueue-system --dry-run=client -o yaml | kubectl_admin apply -f - >/dev/null
    manifests crds --conversion-url "https://127.0.0.1:$KUEUE_WEBHOOK_PORT" --ca "$PKI/ca.crt" \
        --convert localqueues.kueue.x-k8s.io,clusterqueues.kueue.x-k8s.io,cohorts.kueue.x-k8s.io,workloads.kueue.x-k8s.io,multikueueclusters.kueue.x-k8s.io \
        "$src"/config/components/crd/bases/*.yaml | kubectl_admin apply --server-side -f - >/dev/null
    # shellcheck disable=SC2046
    established $(crd_names "$src"/config/components/crd/bases/*.yaml)
    manifests webhooks --url "https://127.0.0.1:$KUEUE_WEBHOOK_PORT" --ca "$PKI/ca.crt" --prefix kueue- \
        "$src/config/components/webhook/manifests.yaml" | kubectl_admin apply --server-side -f - >/dev/null
    cat >"$E2E_STATE/kueue-config.yaml" <<YAML
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {port: $KUEUE_WEBHOOK_PORT, host: 127.0.0.1, certDir: $PKI/webhook-certs}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$KUEUE_PROBE_PORT"}
manageJobsWithoutQueueName: false
# The on-demand visibility API server is an aggregated API with its own fixed certificate path (/visibility);
# nothing here queries it.
featureGates: {VisibilityOnDemand: false}
integrations:
  frameworks: [batch/job, jobset.x-k8s.io/jobset, trainer.kubeflow.org/trainjob]
YAML
    # More Configuration fields (kueue-compare.sh --fair-sharing adds `fairSharing`).
    [[ -z ${KUBETRAIN_E2E_KUEUE_CONFIG_EXTRA:-} ]] || echo "$KUBETRAIN_E2E_KUEUE_CONFIG_EXTRA" >>"$E2E_STATE/kueue-config.yaml"
    # With internal certificate management off, Kueue reads its metrics certificate from a fixed path
    # (cmd/kueue/main.go: /etc/kueue/metrics/certs) and exits when it is missing; give it the webhook pair.
    local metrics_certs=/etc/kueue/metrics/certs
    if ! cmp -s "$PKI/webhook-certs/tls.crt" "$metrics_certs/tls.crt" 2>/dev/null; then
        mkdir -p "$metrics_certs" 2>/dev/null && cp "$PKI/webhook-certs/tls.crt" "$PKI/webhook-certs/tls.key" "$metrics_certs/" ||
            die "Kueue needs its metrics certificate in $metrics_certs (a fixed path); run as root or create it writable"
    fi
    # More flags (kueue-compare.sh raises the log level to see each Cohort reconciled); split on spaces.
    local extra=()
    read -r -a extra <<<"${KUBETRAIN_E2E_KUEUE_ARGS:-}"
    component kueue env KUBECONFIG="$ADMIN_KUBECONFIG" "$(KUEUE_BIN)/kueue" --config "$E2E_STATE/kueue-config.yaml" \
        "${extra[@]}"
    wait_ready kueue "http://127.0.0.1:$KUEUE_PROBE_PORT/readyz"
}

# --- kubetrain-operator ---------------------------------------------------------------------------------

KUBETRAIN_BIN="$("$REPO_DIR/scripts/target-dir.sh")/$CARGO_PROFILE"

build_kubetrain() {
    local flag=()
    case $CARGO_PROFILE in
        debug) ;;
        release) flag=(--release) ;;
        *) flag=(--profile "$CARGO_PROFILE") ;; # e.g. dist, the shipped build (Cargo.toml)
    esac
    # kubetrain-custom-operator: the operator with the example plugins (test_custom_operator.py swaps it in).
    log "cargo build ${flag[*]} -p kubetrain-operator -p kubetrain-custom-operator -p kubetrain-cli"
    (cd "$REPO_DIR" && cargo build -q "${flag[@]}" -p kubetrain-operator -p kubetrain-custom-operator -p kubetrain-cli)
}

# The CRDs from `kubetrain crd` (the Rust types) and the RBAC of the install manifests. The operator then runs
# with a token of its ServiceAccount, so a verb missing from the ClusterRole fails the suite.
install_kubetrain_api() {
    kubectl_admin apply --server-side -f "$REPO_DIR/examples/manifests/deploy/namespace.yaml" >/dev/null
    "$KUBETRAIN_BIN/kubetrain" crd -o yaml | kubectl_admin apply --server-side -f - >/dev/null
    established trainjobs.trainer.kubeflow.org trainingruntimes.trainer.kubeflow.org \
        clustertrainingruntimes.trainer.kubeflow.org optimizationjobs.trainer.kubeflow.org
    kubectl_admin apply --server-side -f "$REPO_DIR/examples/manifests/deploy/rbac.yaml" >/dev/null
}

operator_kubeconfig() {
    local file="$E2E_STATE/operator.kubeconfig" token account=kubetrain-operator
    # --install upstream-*: the ServiceAccount upstream's Deployment runs under.
    [[ -f "$E2E_STATE/operator-service-account" ]] && account=$(cat "$E2E_STATE/operator-service-account")
    token=$(kubectl_admin -n kubeflow-system create token "$account" --duration 48h)
    write_kubeconfig "$file" "    token: $token"
    echo "$file"
}

# operator_start NAME WEBHOOK-PORT METRICS-PORT PROBE-PORT [FLAG...]
# KUBETRAIN_E2E_OPERATOR_BINARY picks another binary with the operator's flags (kubetrain-custom-operator).
operator_start() {
    local name=$1 webhook=$2 metrics=$3 probe=$4
    shift 4
    # --install helm: the Configuration the chart rendered (e2e/lib/helm.sh); the flags below override it.
    local config=() certs=(--webhook-cert-dir "$PKI/webhook-certs") env=()
    # KUBETRAIN_E2E_OPERATOR_CONFIG: another Configuration file (test_prometheus.py: secure metrics with auth).
    local file=${KUBETRAIN_E2E_OPERATOR_CONFIG:-$E2E_STATE/config.yaml}
    [[ -f "$file" ]] && config=(--config "$file")
    # --install upstream-*: the args of upstream's Deployment (its Configuration file) and its built-in
    # certificates, which must also name the address the API server calls (e2e/lib/upstream_chart.sh).
    if [[ $(install_mode) == upstream-* ]]; then
        mapfile -t config <"$UPSTREAM_CHART_DIR/manager/args"
        certs=()
        env=(KUBETRAIN_CERT_EXTRA_NAMES=127.0.0.1)
    fi
    start "$name" env RUST_LOG="${RUST_LOG:-info}" POD_NAME="$name" "${env[@]}" \
        "$KUBETRAIN_BIN/${KUBETRAIN_E2E_OPERATOR_BINARY:-kubetrain-operator}" "${config[@]}" \
        --kubeconfig "$(operator_kubeconfig)" --log-format text \
        --webhook-port "$webhook" "${certs[@]}" \
        --status-server-port $((OPERATOR_STATUS_PORT + webhook - OPERATOR_WEBHOOK_PORT)) \
        --metrics-bind-address "127.0.0.1:$metrics" --health-probe-bind-address "127.0.0.1:$probe" \
        --leader-elect-namespace kubeflow-system "$@"
    wait_ready "$name" "http://127.0.0.1:$probe/readyz"
}

install_kubetrain_webhooks() {
    if [[ $(install_mode) == upstream-* ]]; then
        upstream_chart_webhooks "$1"
        return
    fi
    # --force-conflicts: with --install helm, helm owns the configurations' fields until a scenario re-points them.
    manifests webhooks --url "https://127.0.0.1:$1" --ca "$PKI/ca.crt" \
        "$REPO_DIR/examples/manifests/deploy/webhooks.yaml" |
        kubectl_admin apply --server-side --force-conflicts -f - >/dev/null
}

start_kubetrain() {
    install_kubetrain_webhooks "$OPERATOR_WEBHOOK_PORT"
    operator_start kubetrain-operator "$OPERATOR_WEBHOOK_PORT" "$OPERATOR_METRICS_PORT" "$OPERATOR_PROBE_PORT"
    # The built-in runtimes go through our runtime webhook, as in a real install (the chart installed them;
    # upstream's chart leaves them to a post-install Job, whose list the harness applies).
    case $(install_mode) in
        kustomize)
            kubectl_admin apply --server-side -f "$REPO_DIR/examples/manifests/deploy/runtimes/runtimes.yaml" >/dev/null
            ;;
        upstream-*) upstream_chart_runtimes ;;
    esac
    log "kubetrain-operator ready; $(kubectl_admin get clustertrainingruntimes --no-headers | wc -l) ClusterTrainingRuntimes installed"
}

# --- upstream Kubeflow Trainer (the side-by-side oracle) ---------------------------------------------------

# shellcheck source=lib/upstream.sh
source "$E2E_DIR/lib/upstream.sh"
# shellcheck source=lib/helm.sh
source "$E2E_DIR/lib/helm.sh"
# shellcheck source=lib/upstream_chart.sh
source "$E2E_DIR/lib/upstream_chart.sh"

# How kubetrain was installed (`up --install`): kustomize, helm, upstream-chart or upstream-kustomize.
install_mode() { cat "$E2E_STATE/install" 2>/dev/null || echo kustomize; }

# --- commands -------------------------------------------------------------------------------------------

ALL=(kubetrain-operator-2 kubetrain-operator upstream-trainer kueue jobset kwok kube-scheduler
    kube-controller-manager kube-apiserver etcd)

cmd_up() {
    local operator=kubetrain install=kustomize
    while [[ $# -gt 0 ]]; do
        case $1 in
            --install) install=${2:?--install needs kustomize, helm, upstream-chart or upstream-kustomize}; shift 2 ;;
            --install=*) install=${1#*=}; shift ;;
            --operator) operator=${2:?--operator needs kubetrain, upstream or none}; shift 2 ;;
            --operator=*) operator=${1#*=}; shift ;;
            *) die "up: unknown argument '$1'" ;;
        esac
    done
    case $operator in kubetrain | upstream | none) ;; *) die "--operator must be kubetrain, upstream or none" ;; esac
    if alive kube-apiserver; then
        die "a cluster is already up (state in $E2E_STATE); run 'e2e/cluster.sh down' first"
    fi
    local t0=$SECONDS components=(k8s kwok jobset kueue venv)
    [[ $operator == upstream ]] && components+=(trainer)
    case $install in
        kustomize | upstream-kustomize) ;;
        helm | upstream-chart) components+=(helm) ;;
        *) die "--install must be kustomize, helm, upstream-chart or upstream-kustomize" ;;
    esac
    "$E2E_DIR/build.sh" "${components[@]}"
    # KUBETRAIN_E2E_CARGO_BUILD=0 starts the kubetrain binaries already built (a tree being edited elsewhere).
    [[ ${KUBETRAIN_E2E_CARGO_BUILD:-1} == 0 ]] || build_kubetrain
    local built=$((SECONDS - t0))

    rm -rf "$E2E_STATE" && mkdir -p "$E2E_STATE" "$LOGS" "$PIDS"
    echo "$operator" >"$E2E_STATE/operator"
    echo "$install" >"$E2E_STATE/install"
    make_pki
    admin_kubeconfig
    start_etcd
    start_apiserver
    start_controllers
    start_kwok
    install_podgroup_crd
    case $operator in
        kubetrain)
            case $install in
                helm) install_kubetrain_helm ;;
                upstream-chart) install_upstream_chart ;;
                upstream-kustomize) install_upstream_kustomize ;;
                *) install_kubetrain_api ;;
            esac
            ;;
        upstream) upstream_install_api ;;
    esac
    start_jobset
    # KUBETRAIN_E2E_NO_KUEUE=1 leaves Kueue out: the performance runs submit no queued TrainJobs, and Kueue's
    # Job and Pod webhooks otherwise sit in the path of every Job and pod JobSet and the Job controller create.
    [[ ${KUBETRAIN_E2E_NO_KUEUE:-0} == 1 ]] || start_kueue
    case $operator in
        kubetrain) start_kubetrain ;;
        upstream) upstream_start ;;
        none) ;;
    esac
    log "cluster up in $((SECONDS - t0)) s (builds $built s, start $((SECONDS - t0 - built)) s); operator: $operator"
    log "use it: eval \"\$($E2E_DIR/cluster.sh env)\""
}

cmd_down() {
    local name
    for name in "${ALL[@]}"; do stop "$name"; done
    # Anything else a scenario started through `operator start`.
    for name in "$PIDS"/*.pid; do
        [[ -e $name ]] && stop "$(basename "$name" .pid)"
    done
    rm -rf "$E2E_STATE/etcd"
    log "cluster down (logs kept in $LOGS)"
}

cmd_env() {
    [[ -f "$ADMIN_KUBECONFIG" ]] || die "no cluster state in $E2E_STATE; run 'e2e/cluster.sh up'"
    echo "export KUBECONFIG=$ADMIN_KUBECONFIG"
    echo "export PATH=$(K8S_BIN):\$PATH"
    echo "export KUBETRAIN_E2E_STATE=$E2E_STATE"
}

cmd_status() {
    local name rc=0
    for name in "${ALL[@]}"; do
        if alive "$name"; then echo "$name: running (pid $(cat "$PIDS/$name.pid"))"
        elif [[ -f "$PIDS/$name.pid" ]]; then echo "$name: dead (log: $LOGS/$name.log)"; rc=1
        fi
    done
    return $rc
}

cmd_operator() {
    local action=${1:?operator start|stop NAME} name=${2:?operator start|stop NAME}
    shift 2
    # The first replica keeps the standard ports; any other gets them shifted by 100 (clear of JobSet's and
    # Kueue's ports).
    local n=100
    [[ $name == kubetrain-operator ]] && n=0
    case $action in
        start)
            operator_start "$name" $((OPERATOR_WEBHOOK_PORT + n)) $((OPERATOR_METRICS_PORT + n)) \
                $((OPERATOR_PROBE_PORT + n)) "$@"
            ;;
        # Point both webhook configurations at NAME, as a Service would route to the surviving replica.
        webhooks) install_kubetrain_webhooks $((OPERATOR_WEBHOOK_PORT + n)) ;;
        stop) stop "$name" ;;
        kill) [[ -f "$PIDS/$name.pid" ]] && kill -KILL -- "-$(cat "$PIDS/$name.pid")"; rm -f "$PIDS/$name.pid" ;;
        *) die "operator: start, stop, kill or webhooks" ;;
    esac
}

# Sourcing this file (for debugging a step by hand) defines the functions and runs nothing.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0

case ${1:-} in
    up) shift; cmd_up "$@" ;;
    down) cmd_down ;;
    env) cmd_env ;;
    status) cmd_status ;;
    operator) shift; cmd_operator "$@" ;;
    *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
