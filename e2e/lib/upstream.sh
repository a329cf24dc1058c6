# Upstream Kubeflow Trainer v2.3.0's trainer-controller-manager as the e2e cluster's TrainJob controller: the
# live oracle of e2e/side-by-side.sh. Sourced by cluster.sh (`up --operator upstream`).
# shellcheck shell=bash

# Upstream's CRDs, before Kueue starts (Kueue enables its TrainJob integration only when the CRD is served).
upstream_install_api() {
    local src
    src=$(module_dir "github.com/kubeflow/trainer/v2@$TRAINER_VERSION")
    kubectl_admin create namespace kubeflow-system --dry-run=client -o yaml | kubectl_admin apply -f - >/dev/null
    local crd
    for crd in "$src"/manifests/base/crds/trainer.kubeflow.org_*.yaml; do
        kubectl_admin apply --server-side -f "$crd" >/dev/null
    done
    # shellcheck disable=SC2046
    established $(crd_names "$src"/manifests/base/crds/trainer.kubeflow.org_*.yaml)
}

upstream_start() {
    local src
    src=$(module_dir "github.com/kubeflow/trainer/v2@$TRAINER_VERSION")
    # Named as upstream's kustomize patches name them (the API server calls mutating webhooks in name order,
    # so the name decides whether Kueue's runtime patch is stamped); paths, rules and failure policies are
    # its manifests' own. Not carried over: the patches' objectSelector for runtimes labelled
    # webhook-validation=disabled.
    manifests webhooks --url "https://127.0.0.1:$UPSTREAM_WEBHOOK_PORT" --ca "$PKI/ca.crt" \
        --rename mutating-webhook-configuration=defaulter.trainer.kubeflow.org \
        --rename validating-webhook-configuration=validator.trainer.kubeflow.org \
        "$src/manifests/base/webhook/manifests.yaml" | kubectl_admin apply --server-side -f - >/dev/null
    # controller-runtime's default certificate folder (Go's os.TempDir(), so $TMPDIR): upstream's Configuration
    # has no certDir.
    local certs="${TMPDIR:-/tmp}/k8s-webhook-server/serving-certs"
    mkdir -p "$certs" && cp "$PKI/webhook-certs/tls.crt" "$PKI/webhook-certs/tls.key" "$certs/"
    cat >"$E2E_STATE/trainer-config.yaml" <<YAML
apiVersion: config.trainer.kubeflow.org/v1alpha1
kind: Configuration
health: {healthProbeBindAddress: "127.0.0.1:$UPSTREAM_PROBE_PORT", readinessEndpointName: readyz, livenessEndpointName: healthz}
metrics: {bindAddress: "127.0.0.1:$UPSTREAM_METRICS_PORT", secureServing: false}
webhook: {port: $UPSTREAM_WEBHOOK_PORT, host: 127.0.0.1}
leaderElection: {leaderElect: false}
certManagement: {enable: false}
statusServer: {port: $UPSTREAM_STATUS_PORT}
YAML
    start upstream-trainer env KUBECONFIG="$ADMIN_KUBECONFIG" "$(UPSTREAM_BIN)/trainer-controller-manager" \
        --config "$E2E_STATE/trainer-config.yaml"
    wait_ready upstream-trainer "http://127.0.0.1:$UPSTREAM_PROBE_PORT/readyz"
    # Upstream's own runtimes, through its own runtime webhook.
    local f
    for f in "$src"/manifests/base/runtimes/*.yaml "$src"/manifests/base/runtimes/torchtune/*/*.yaml \
        "$src"/manifests/base/runtimes/data-cache/*.yaml; do
        [[ $(basename "$f") == kustomization.yaml ]] && continue
        kubectl_admin apply --server-side -f "$f" >/dev/null
    done
    log "upstream trainer-controller-manager $TRAINER_VERSION ready; $(kubectl_admin get clustertrainingruntimes --no-headers | wc -l) ClusterTrainingRuntimes installed"
}
