#!/usr/bin/env bash
# `kubetrain migrate` against the real Training Operator v1 ($TRAINING_OPERATOR_VERSION of e2e/versions.env)
# (docs/migrate.md, "Proof against the real v1 operator"; issue 34 item 5).
#
#   e2e/migrate-compare.sh [--slice]
#
# The corpus: every PyTorchJob, TFJob, MPIJob, XGBoostJob and PaddleJob among the examples of the v1 module
# (MXJob has no V2 runtime; v1.8.1 has no JAXJob), plus the generated jobs of e2e/lib/migrate_compare.py
# (--slice: the generated jobs and one example per kind). Each v1 job is applied in namespace `v1`, where the
# real v1 operator makes its pods; `kubetrain migrate` turns the same job (in namespace `v2`) into runtimes and
# a TrainJob, which kubetrain-operator and JobSet turn into pods. kwok runs neither side's processes, so the
# pods are compared as written: what each training process would see, rank by rank (world size, rank, local
# rank and processes per node, a master address and port that reach the rank-0 pod, image, command and args,
# resources, volumes and mounts, node selector and tolerations). A job is equivalent when every difference is
# one docs/migrate.md lists as equivalent. Ends with `migrate: N/M equivalent`, and exits 1 when a job differs
# though its migration report claims everything carried; the differences, job by job, are in
# ${TMPDIR:-/tmp}/kubetrain-migrate-compare/differences.md.
# Runs its own cluster beside others (ports shifted by 3000, state in ${TMPDIR:-/tmp}/kubetrain-e2e-migrate),
# without Kueue (no job here is queued), on 16 kwok nodes.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

slice=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --slice) slice=1; shift ;;
        *) die "unknown argument '$1' (--slice)" ;;
    esac
done

export KUBETRAIN_E2E_STATE="${KUBETRAIN_E2E_MIGRATE_STATE:-${TMPDIR:-/tmp}/kubetrain-e2e-migrate}"
export KUBETRAIN_E2E_PORT_OFFSET=${KUBETRAIN_E2E_MIGRATE_PORT_OFFSET:-3000}
export KUBETRAIN_E2E_NO_KUEUE=1
# Both sides' pods at once: enough fake GPUs that every pod schedules (V2's MPI launcher waits for Ready workers).
export KUBETRAIN_E2E_NODES=${KUBETRAIN_E2E_NODES:-16}
OUT="${KUBETRAIN_E2E_MIGRATE_OUT:-${TMPDIR:-/tmp}/kubetrain-migrate-compare}"
rm -rf "$OUT" && mkdir -p "$OUT"

"$E2E_DIR/build.sh" training-operator
"$E2E_DIR/cluster.sh" up
trap '"$E2E_DIR/cluster.sh" down >/dev/null 2>&1 || true' EXIT
# The cluster's functions (start, wait_ready, kubectl_admin, manifests, ...) for this state folder.
source "$E2E_DIR/cluster.sh"
export KUBECONFIG="$ADMIN_KUBECONFIG"
KUBETRAIN="$("$REPO_DIR/scripts/target-dir.sh")/${KUBETRAIN_E2E_PROFILE:-debug}/kubetrain"
V1_SRC=$(module_dir "github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION")
V1_WEBHOOK_PORT=$((19448 + OFFSET))
V1_METRICS_PORT=$((18096 + OFFSET))
V1_PROBE_PORT=$((18097 + OFFSET))
py() { "$VENV/bin/python" "$E2E_DIR/lib/migrate_compare.py" "$@"; }

# The v1 operator's webhook certificates. Its cert-controller rotator keeps them in the Secret
# kubeflow/training-operator-webhook-cert and accepts what it finds there when the CA is an RSA (PKCS#1) CA
# for the name "training-operator-ca" and the serving certificate is valid for training-operator.kubeflow.svc;
# ours is also valid for 127.0.0.1, where the API server calls the webhook. It then injects that CA into the
# ValidatingWebhookConfiguration itself.
v1_certs() {
    local dir="$E2E_STATE/training-operator-certs"
    mkdir -p "$dir"
    openssl genrsa -traditional -out "$dir/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "$dir/ca.key" -subj "/CN=training-operator-ca" -days 3650 -sha256 \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -addext "subjectAltName=DNS:training-operator-ca" -out "$dir/ca.crt" 2>/dev/null
    openssl genrsa -traditional -out "$dir/tls.key" 2048 2>/dev/null
    openssl req -new -key "$dir/tls.key" -subj "/CN=training-operator.kubeflow.svc" -out "$dir/tls.csr" 2>/dev/null
    printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
        "extendedKeyUsage=serverAuth" "subjectAltName=DNS:training-operator.kubeflow.svc,IP:127.0.0.1" \
        >"$dir/tls.ext"
    openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial -days 3650 \
        -sha256 -extfile "$dir/tls.ext" -out "$dir/tls.crt" 2>/dev/null
    echo "$dir"
}

# The v1 operator outside the cluster: its CRDs and webhooks from its module, the admin certificate.
start_training_operator() {
    local certs
    certs=$(v1_certs)
    local crd
    for crd in "$V1_SRC"/manifests/base/crds/kubeflow.org_*.yaml; do
        kubectl_admin apply --server-side -f "$crd" >/dev/null
    done
    # shellcheck disable=SC2046
    established $(crd_names "$V1_SRC"/manifests/base/crds/kubeflow.org_*.yaml)
    kubectl_admin create namespace kubeflow --dry-run=client -o yaml | kubectl_admin apply -f - >/dev/null
    kubectl_admin -n kubeflow create secret generic training-operator-webhook-cert \
        --from-file="$certs/ca.crt" --from-file="$certs/ca.key" --from-file="$certs/tls.crt" \
        --from-file="$certs/tls.key" --dry-run=client -o yaml | kubectl_admin apply -f - >/dev/null
    # Named as its kustomize overlay names it (the rotator looks it up by that name).
    manifests webhooks --url "https://127.0.0.1:$V1_WEBHOOK_PORT" --ca "$certs/ca.crt" \
        --rename validating-webhook-configuration=validator.training-operator.kubeflow.org \
        "$V1_SRC/manifests/base/webhook/manifests.yaml" | kubectl_admin apply --server-side -f - >/dev/null
    # The webhook server reads $TMPDIR/k8s-webhook-server/serving-certs (controller-runtime's default), as a
    # kubelet would mount the Secret there; the rotator waits for /tmp/k8s-webhook-server/serving-certs/tls.crt
    # (a fixed path in v1.8.1), so that file must exist: it is created only when missing, never overwritten
    # (another cluster's upstream trainer may be serving from it).
    local tmp="$E2E_STATE/training-operator-tmp"
    mkdir -p "$tmp/k8s-webhook-server/serving-certs"
    cp "$certs/tls.crt" "$certs/tls.key" "$tmp/k8s-webhook-server/serving-certs/"
    if [[ ! -e /tmp/k8s-webhook-server/serving-certs/tls.crt ]]; then
        mkdir -p /tmp/k8s-webhook-server/serving-certs
        cp "$certs/tls.crt" "$certs/tls.key" /tmp/k8s-webhook-server/serving-certs/
    fi
    start training-operator env KUBECONFIG="$ADMIN_KUBECONFIG" TMPDIR="$tmp" MY_POD_NAMESPACE=kubeflow \
        "$(bin_dir training-operator "$TRAINING_OPERATOR_VERSION")/training-operator.v1" \
        --webhook-server-port "$V1_WEBHOOK_PORT" --metrics-bind-address "127.0.0.1:$V1_METRICS_PORT" \
        --health-probe-bind-address "127.0.0.1:$V1_PROBE_PORT" \
        --enable-scheme pytorchjob --enable-scheme tfjob --enable-scheme mpijob --enable-scheme xgboostjob \
        --enable-scheme paddlejob
    wait_ready training-operator "http://127.0.0.1:$V1_PROBE_PORT/readyz"
}

start_training_operator
for ns in v1 v2; do
    kubectl_admin create namespace "$ns" --dry-run=client -o yaml | kubectl_admin apply -f - >/dev/null
done

# The corpus, one file per job: v1/NAME.yaml (namespace v1) and v2-input/NAME.yaml (namespace v2).
corpus=(--examples "$V1_SRC/examples")
[[ $slice == 0 ]] || corpus+=(--slice)
py corpus "${corpus[@]}" --out "$OUT"
mkdir -p "$OUT/v2" "$OUT/reports"
for f in "$OUT"/v2-input/*.yaml; do
    name=$(basename "$f" .yaml)
    rc=0
    "$KUBETRAIN" migrate -f "$f" --report "$OUT/reports/$name.json" >"$OUT/v2/$name.yaml" \
        2>"$OUT/reports/$name.txt" || rc=$?
    echo "$rc" >"$OUT/reports/$name.rc"
    if [[ $rc == 1 ]]; then log "migrate refused $name: $(tail -n 1 "$OUT/reports/$name.txt")"; fi
done

log "migrate compare: $(find "$OUT/v1" -name '*.yaml' | wc -l) v1 jobs; applying both sides"
# A v1 example the v1 API itself refuses (one has fields its CRD does not declare) is left out of the count.
mkdir -p "$OUT/refused-v1"
for f in "$OUT"/v1/*.yaml; do
    name=$(basename "$f" .yaml)
    kubectl_admin apply --server-side -f "$f" >/dev/null 2>"$OUT/refused-v1/$name.txt" ||
        log "the v1 API server refused $name: $(head -c 300 "$OUT/refused-v1/$name.txt")"
    if [[ ! -s "$OUT/refused-v1/$name.txt" ]]; then rm -f "$OUT/refused-v1/$name.txt"; fi
done
for f in "$OUT"/v2/*.yaml; do
    [[ -s $f ]] || continue
    kubectl_admin apply --server-side -f "$f" >>"$OUT/apply-v2.log" 2>&1 ||
        log "$(basename "$f" .yaml): the migrated objects were refused (see $OUT/apply-v2.log)"
done

py settle --kubectl "$(K8S_BIN)/kubectl" --out "$OUT" --timeout "${KUBETRAIN_E2E_MIGRATE_TIMEOUT:-180}"
# Fails (exit 1) when a job differs though its migration report claims everything carried.
rc=0
summary=$(py compare --out "$OUT" --report "$OUT/differences.md") || rc=$?
log "differences, job by job: $OUT/differences.md"
echo "$summary"
exit $rc
