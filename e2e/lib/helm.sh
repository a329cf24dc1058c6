# shellcheck shell=bash
# `e2e/cluster.sh up --install helm`: kubetrain installed from charts/kubetrain with the helm CLI built from its
# Go module (e2e/build.sh helm). kwok has no kubelet, so the operator still runs as a host process: the chart
# installs the CRDs, RBAC, built-in runtimes, the Configuration ConfigMap and webhook configurations that point
# at the host operator's URL, with its Deployment switched off (manager.enabled=false); the host operator then
# starts with `--config` holding the Configuration read back from that ConfigMap (flags for the harness's ports
# and PKI override it, as flags override the file).
#
# Overrides of the chart's defaults, each because of the harness, not of kubetrain:
#   - certManagement.enable=false: the API server calls https://127.0.0.1:<port>, a name the built-in
#     certificate (<service>.<namespace>.svc) does not hold; the harness's PKI serves the webhooks instead;
#   - metrics.secureServing=false: the scenarios scrape the operator's metrics over plain HTTP;
#   - runtimes.defaultEnabled=true (and the data cache runtime): the scenarios use the built-in runtimes.

HELM_RELEASE=kubetrain
HELM_NAMESPACE=kubeflow-system

helm_admin() { "$(HELM_BIN)/helm" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

install_kubetrain_helm() {
    local values="$E2E_STATE/helm-values.yaml"
    cat >"$values" <<VALUES
manager:
  enabled: false
  config:
    certManagement: {enable: false}
    metrics: {secureServing: false}
webhook:
  url: https://127.0.0.1:$OPERATOR_WEBHOOK_PORT
  caBundle: $(base64 -w0 "$PKI/ca.crt")
runtimes:
  defaultEnabled: true
dataCache:
  runtimes:
    torchDistributedWithCache: {enabled: true}
VALUES
    helm_admin install "$HELM_RELEASE" "$REPO_DIR/charts/kubetrain" --namespace "$HELM_NAMESPACE" \
        --create-namespace -f "$values" >"$LOGS/helm-install.log" 2>&1 ||
        die "helm install failed (log: $LOGS/helm-install.log)"
    established trainjobs.trainer.kubeflow.org trainingruntimes.trainer.kubeflow.org \
        clustertrainingruntimes.trainer.kubeflow.org optimizationjobs.trainer.kubeflow.org
    # The Configuration the chart rendered: what the in-cluster Deployment would mount.
    kubectl_admin -n "$HELM_NAMESPACE" get configmap "$HELM_RELEASE-config" -o jsonpath='{.data.config\.yaml}' \
        >"$E2E_STATE/config.yaml"
    [[ -s "$E2E_STATE/config.yaml" ]] || die "the chart rendered no Configuration (configmap $HELM_RELEASE-config)"
    log "helm: release $HELM_RELEASE installed ($(kubectl_admin get clustertrainingruntimes --no-headers | wc -l) ClusterTrainingRuntimes); the operator reads $E2E_STATE/config.yaml"
}
