#!/usr/bin/env bash
# Checks the Helm chart charts/kubetrain with the helm CLI built from its Go module (e2e/build.sh helm):
#   - the chart's copies of the CRDs and built-in runtimes are current (scripts/gen-chart.py --check);
#   - `helm lint` and `helm template` are clean with the default values, with upstream Kubeflow Trainer
#     v2.3.0's own values.yaml, and with every optional part switched on;
#   - scripts/check-chart.py: every upstream values key is accepted, RBAC/webhooks/CRDs equal
#     examples/manifests/deploy and `kubetrain crd`, dashboards and alerts query exported metrics only, and the
#     rendered Configuration passes `kubetrain-operator --check-config`;
#   - scripts/check-promql.py: every alert and dashboard expression parses with promtool (`check rules`) and
#     Prometheus's parser, both built from github.com/prometheus/prometheus (e2e/build.sh promtool).
# Usage: scripts/check-chart.sh   (HELM=path overrides the cached helm, PROMTOOL=path the cached promtool;
# KUBETRAIN_REQUIRE_UPSTREAM=1 fails instead of skipping when upstream's chart is not in the Go module cache)
set -euo pipefail
cd "$(dirname "$0")/.."
source e2e/lib/common.sh
HELM="${HELM:-$(HELM_BIN)/helm}"
[[ -x "$HELM" ]] || die "no helm at $HELM: run e2e/build.sh helm"
PROMTOOL="${PROMTOOL:-$(PROMETHEUS_BIN)/promtool}"
[[ -x "$PROMTOOL" && -x "$(dirname "$PROMTOOL")/promql-series" ]] ||
    die "no promtool and promql-series in $(dirname "$PROMTOOL"): run e2e/build.sh promtool"
chart=charts/kubetrain

scripts/gen-chart.py --check

# Upstream's chart comes with its Go module (the one e2e/tools/trainer pins); a warm module cache makes this a no-op.
(cd e2e/tools/trainer && go mod download "github.com/kubeflow/trainer/v2@$TRAINER_VERSION") ||
    log "could not download github.com/kubeflow/trainer/v2@$TRAINER_VERSION"
upstream_values=$(go env GOMODCACHE 2>/dev/null || echo "$HOME/go/pkg/mod")/github.com/kubeflow/trainer/v2@$TRAINER_VERSION/charts/kubeflow-trainer/values.yaml
variants=("defaults:" "everything:--set runtimes.defaultEnabled=true --set dataCache.runtimes.torchDistributedWithCache.enabled=true --set metrics.serviceMonitor.enabled=true --set metrics.prometheusRule.enabled=true --set metrics.dashboards.enabled=true"
    "cert-manager, no Deployment:--set manager.config.certManagement.enable=false --set webhook.certManager.enabled=true --set manager.enabled=false --set webhook.url=https://127.0.0.1:9443")
if [[ -f "$upstream_values" ]]; then
    variants+=("upstream's values.yaml:-f $upstream_values")
elif [[ "${KUBETRAIN_REQUIRE_UPSTREAM:-0}" == 1 ]]; then
    die "upstream's chart is not at $upstream_values (e2e/build.sh trainer downloads it)"
else
    log "SKIP upstream's values.yaml: not at $upstream_values"
fi
for variant in "${variants[@]}"; do
    name=${variant%%:*}
    # shellcheck disable=SC2206  # the flags are words
    args=(${variant#*:})
    out=$("$HELM" lint --strict "$chart" --namespace kubeflow-system "${args[@]}" 2>&1) ||
        die "helm lint ($name):"$'\n'"$out"
    "$HELM" template kubetrain "$chart" --namespace kubeflow-system "${args[@]}" >/dev/null ||
        die "helm template ($name) failed"
    log "chart: helm lint and template clean ($name)"
done

target=$(scripts/target-dir.sh)
extra=()
[[ -x "$target/debug/kubetrain" ]] && extra+=(--kubetrain "$target/debug/kubetrain")
[[ -x "$target/debug/kubetrain-operator" ]] && extra+=(--operator "$target/debug/kubetrain-operator")
scripts/check-chart.py --helm "$HELM" "${extra[@]}"
scripts/check-promql.py --promtool "$PROMTOOL" --series "$(dirname "$PROMTOOL")/promql-series"
