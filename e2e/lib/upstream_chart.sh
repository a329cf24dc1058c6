# shellcheck shell=bash
# `e2e/cluster.sh up --install upstream-chart`: kubetrain installed with *upstream's own* Helm chart,
# charts/kubeflow-trainer of Kubeflow Trainer $TRAINER_VERSION (its files come with the kubeflow/trainer Go module,
# read in the Go module cache, never copied into the repository), with only the image values changed to
# kubetrain's: what a platform team that installed upstream does to switch (docs/operator.md, "Switching from
# upstream"). `--install upstream-kustomize`: the same with upstream's kustomize overlay manifests/overlays/manager
# and a kustomize `images:` entry.
#
# The chart is rendered with `helm template` (the helm CLI of e2e/build.sh helm), the overlay with `kubectl
# kustomize`; upstream_chart.py splits the result. kwok has no kubelet, so the Deployment's container runs as a
# host process, the way the Deployment runs it: its command (the chart's `/manager`, or the image's ENTRYPOINT
# for the overlay, which sets none; both checked against examples/operator/Dockerfile) and its args
# (`--config=<the mounted ConfigMap file>`, and the overlay's `--zap-log-level=2`), its ServiceAccount's token
# and RBAC, and built-in certificate management (certManagement.enable: true; upstream's empty Secret).
#
# What the harness changes, each because of the harness, not of kubetrain:
#   - chart values jobset.install=false / the overlay's third-party/jobset resource left out: the cluster
#     already runs JobSet (and neither the subchart nor JobSet's release manifest is in the Go module);
#   - chart values runtimes.defaultEnabled=true: the scenarios use the built-in runtimes. The chart applies
#     them with a post-install hook Job (an alpine image that installs kubectl); the harness applies the same
#     list itself (for the overlay: upstream's overlays/runtimes, as its installation guide does next);
#   - the Deployment's ports become loopback ports (flags after its args, as flags override the file), the
#     in-cluster ServiceAccount token a kubeconfig holding one, and the pod's namespace --leader-elect-namespace;
#   - the webhook configurations call https://127.0.0.1:<port> instead of the Service, and the serving
#     certificate also names 127.0.0.1 (KUBETRAIN_CERT_EXTRA_NAMES); the operator still creates it, fills
#     upstream's Secret and injects the CA bundle.

UPSTREAM_CHART_RELEASE=kubeflow-trainer
UPSTREAM_CHART_NAMESPACE=kubeflow-system
# Rendered and split chart, and the Deployment's container (e2e/lib/upstream_chart.py writes it).
UPSTREAM_CHART_DIR="$E2E_STATE/upstream-chart"

# kubetrain's image as charts/kubetrain installs it by default: docker.io/kubetrain-operator:<appVersion>.
kubetrain_image_tag() {
    sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$REPO_DIR/charts/kubetrain/Chart.yaml"
}

install_upstream_chart() {
    local chart tag values rendered="$UPSTREAM_CHART_DIR/rendered.yaml"
    chart="$(module_dir "github.com/kubeflow/trainer/v2@$TRAINER_VERSION")/charts/kubeflow-trainer"
    [[ -f $chart/Chart.yaml ]] || die "no upstream chart at $chart"
    tag=$(kubetrain_image_tag)
    mkdir -p "$UPSTREAM_CHART_DIR"
    values="$UPSTREAM_CHART_DIR/values.yaml"
    cat >"$values" <<VALUES
# The switch: kubetrain's image in place of upstream's.
image:
  registry: docker.io
  repository: kubetrain-operator
  tag: "$tag"
# The harness's (e2e/lib/upstream_chart.sh): JobSet already runs; the scenarios use the built-in runtimes.
jobset:
  install: false
runtimes:
  defaultEnabled: true
VALUES
    # The chart declares the JobSet and LeaderWorkerSet subcharts (OCI registries; both off here) and helm
    # refuses to render a chart whose declared dependencies are missing from charts/: render a copy (in the
    # state directory; the module cache is read-only) with an empty stand-in chart for each. Upstream's own
    # files are not changed.
    local copy="$UPSTREAM_CHART_DIR/chart" dep version
    rm -rf "$copy" && cp -r "$chart" "$copy" && chmod -R u+w "$copy"
    "$VENV/bin/python" -c 'import sys, yaml
for d in yaml.safe_load(open(sys.argv[1])).get("dependencies") or []: print(d["name"], d["version"])' \
        "$copy/Chart.yaml" | while read -r dep version; do
        mkdir -p "$copy/charts/$dep"
        printf 'apiVersion: v2\nname: %s\nversion: %s\ndescription: "%s"\n' "$dep" "$version" \
            "a stand-in, never rendered (its condition is off)" >"$copy/charts/$dep/Chart.yaml"
    done
    "$(HELM_BIN)/helm" template "$UPSTREAM_CHART_RELEASE" "$copy" --namespace "$UPSTREAM_CHART_NAMESPACE" \
        -f "$values" >"$rendered" 2>"$LOGS/upstream-render.log" ||
        die "helm template of upstream's chart failed (log: $LOGS/upstream-render.log)"
    upstream_install_rendered "$rendered" "kubetrain-operator:$tag" "upstream chart $TRAINER_VERSION"
}

# `--install upstream-kustomize`: upstream's overlay manifests/overlays/manager, as its installation guide
# applies it, with JobSet left out (the overlay's own comment: "Comment this line if JobSet is installed") and
# kubetrain's image (kustomize `images:`); then upstream's overlays/runtimes, as the guide's next step.
install_upstream_kustomize() {
    local src tag rendered="$UPSTREAM_CHART_DIR/rendered.yaml"
    src="$(module_dir "github.com/kubeflow/trainer/v2@$TRAINER_VERSION")/manifests"
    tag=$(kubetrain_image_tag)
    mkdir -p "$UPSTREAM_CHART_DIR/kustomize"
    "$VENV/bin/python" "$E2E_DIR/lib/upstream_chart.py" overlay --overlay "$src/overlays/manager" \
        --out "$UPSTREAM_CHART_DIR/kustomize" --image "kubetrain-operator:$tag" ||
        die "cannot read upstream's overlay $src/overlays/manager"
    kubectl_admin kustomize "$UPSTREAM_CHART_DIR/kustomize" >"$rendered" 2>"$LOGS/upstream-render.log" ||
        die "kubectl kustomize of upstream's overlay failed (log: $LOGS/upstream-render.log)"
    upstream_install_rendered "$rendered" "kubetrain-operator:$tag" "upstream kustomize overlay $TRAINER_VERSION"
    local runtimes="$UPSTREAM_CHART_DIR/runtimes.yaml"
    kubectl_admin kustomize "$src/overlays/runtimes" >"$runtimes" 2>>"$LOGS/upstream-render.log" ||
        die "kubectl kustomize of upstream's runtimes overlay failed (log: $LOGS/upstream-render.log)"
    log "upstream runtimes overlay: $(grep -c '^kind: ClusterTrainingRuntime' "$runtimes") ClusterTrainingRuntimes" \
        "(applied once the operator is ready)"
}

# upstream_install_rendered FILE IMAGE WHAT: split what upstream's manifests rendered (upstream_chart.py) and
# apply it but the Deployment, whose container operator_start runs.
upstream_install_rendered() {
    local rendered=$1 image=$2 what=$3
    "$VENV/bin/python" "$E2E_DIR/lib/upstream_chart.py" split --rendered "$rendered" --out "$UPSTREAM_CHART_DIR" \
        --url "https://127.0.0.1:$OPERATOR_WEBHOOK_PORT" --image "$image" \
        --dockerfile "$REPO_DIR/examples/operator/Dockerfile" >"$LOGS/upstream-split.log" 2>&1 ||
        { cat "$LOGS/upstream-split.log" >&2; die "$what rendered something the harness cannot run"; }
    kubectl_admin create namespace "$UPSTREAM_CHART_NAMESPACE" --dry-run=client -o yaml |
        kubectl_admin apply -f - >/dev/null
    kubectl_admin apply --server-side -f "$UPSTREAM_CHART_DIR/crds.yaml" >/dev/null
    # shellcheck disable=SC2046
    established $(crd_names "$UPSTREAM_CHART_DIR/crds.yaml")
    kubectl_admin apply --server-side -f "$UPSTREAM_CHART_DIR/objects.yaml" >/dev/null
    # What operator_start reads: the container's args (with the mounted Configuration file) and ServiceAccount.
    cp "$UPSTREAM_CHART_DIR/manager/service-account" "$E2E_STATE/operator-service-account"
    # How the scenarios scrape the operator's metrics (conftest.operator_metric): the file's secureServing.
    cp "$UPSTREAM_CHART_DIR/manager/metrics-scheme" "$E2E_STATE/metrics-scheme"
    log "$what rendered with image $image: $(cat "$LOGS/upstream-split.log")"
}

# upstream_chart_webhooks PORT: the chart's webhook configurations, calling PORT, with no CA bundle (the
# operator's built-in certificate management injects it).
upstream_chart_webhooks() {
    "$VENV/bin/python" "$E2E_DIR/lib/upstream_chart.py" repoint --url "https://127.0.0.1:$1" \
        "$UPSTREAM_CHART_DIR/webhooks.yaml" | kubectl_admin apply --server-side --force-conflicts -f - >/dev/null
}

# The runtimes the chart's post-install Job applies (or upstream's runtimes overlay), once the operator serves
# the webhooks.
upstream_chart_runtimes() {
    [[ -s $UPSTREAM_CHART_DIR/runtimes.yaml ]] &&
        kubectl_admin apply --server-side --force-conflicts -f "$UPSTREAM_CHART_DIR/runtimes.yaml" >/dev/null
    return 0
}
