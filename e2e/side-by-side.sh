#!/usr/bin/env bash
# Side by side with the real thing: the same TrainJobs through upstream Kubeflow Trainer v2.3.0's controller
# and through kubetrain-operator, each on a fresh e2e cluster, the objects each made read back and compared
# (docs/e2e.md, "Side by side").
#
#   e2e/side-by-side.sh [--slice] [--count N] [--seed S] [--strict] [--perf-sizes "N..."] [--perf-only]
#                       [--webhook-requests R] [--perf-timeout S]
#
# Per controller, on its own fresh cluster: the render differential (generated cases + upstream's examples),
# the TrainJob status through lifecycles (Created -> Complete / Failed / Suspended), the webhook verdicts on a
# corpus of invalid objects, then the performance runs (N TrainJobs at once, 2-8 nodes each, on kwok; the
# controller restarted fresh before each N) and R server-side dry-run creates for webhook latency.
# --strict (CI) exits 1 when a case differs other than by a documented divergence (docs/e2e.md).
# Ends with the lines `render: N/M identical` and `kueue: N/M agree` and the performance table. --slice (CI)
# runs 20 generated cases and no upstream examples, N = 100 and 1,000 dry-run creates; the default is 200
# generated cases plus every example TrainJob upstream ships (../shared/upstream/trainer/trainjobs, when
# present), N = 100, 1,000 and 5,000 and 10,000 dry-run creates. --perf-only skips the render, lifecycle and
# webhook-corpus steps. SBS_OPERATORS (default "upstream kubetrain") picks the controllers, e.g. to run each in
# its own invocation at the same time (two port offsets, two TMPDIRs). kubetrain-operator is built with the
# dist profile (the shipped build, Cargo.toml) unless KUBETRAIN_E2E_PROFILE says otherwise (--slice keeps the
# debug default), as upstream's binary is its shipped, optimised Go build. The clusters
# run beside any cluster of `e2e/cluster.sh up` (own state folder, ports shifted by 1000).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

count=200 seed=1 examples=1 strict=0 sizes="100 1000 5000" hook_requests=10000 perf_only=0 slice=0 perf_timeout=3600
while [[ $# -gt 0 ]]; do
    case $1 in
        --slice) count=20; examples=0; sizes=100; hook_requests=1000; slice=1; shift ;;
        --count) count=$2; shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --strict) strict=1; shift ;;
        --perf-sizes) sizes=$2; shift 2 ;;
        --perf-only) perf_only=1; shift ;;
        --webhook-requests) hook_requests=$2; shift 2 ;;
        --perf-timeout) perf_timeout=$2; shift 2 ;;
        *) die "unknown argument '$1'" ;;
    esac
done

export KUBETRAIN_E2E_STATE="${KUBETRAIN_E2E_SBS_STATE:-${TMPDIR:-/tmp}/kubetrain-e2e-sbs}"
export KUBETRAIN_E2E_PORT_OFFSET=${KUBETRAIN_E2E_SBS_PORT_OFFSET:-1000}
[[ $slice == 1 ]] || export KUBETRAIN_E2E_PROFILE=${KUBETRAIN_E2E_PROFILE:-dist}
# cluster.sh's functions (start, stop, operator_start, sign, ...) for the perf runs' controller restarts; sourced
# after the exports above so its paths and ports are this cluster's.
# shellcheck source=cluster.sh
source "$E2E_DIR/cluster.sh"
OUT="${KUBETRAIN_E2E_SBS_OUT:-${TMPDIR:-/tmp}/kubetrain-side-by-side}"
rm -rf "$OUT" && mkdir -p "$OUT"
"$E2E_DIR/build.sh" k8s kwok jobset kueue trainer venv

py() { "$VENV/bin/python" "$E2E_DIR/lib/sidebyside.py" "$@"; }
gen=(generate --count "$count" --seed "$seed" --out "$OUT/corpus")
if [[ $examples == 1 ]]; then
    upstream_examples="$REPO_DIR/../shared/upstream/trainer/trainjobs"
    if [[ -d $upstream_examples ]]; then
        gen+=(--upstream-examples "$upstream_examples")
    elif [[ -n ${CI:-} ]]; then
        die "CI is set but $upstream_examples is missing"
    else
        log "no $upstream_examples: generated cases only"
    fi
else
    gen+=(--no-examples)
fi
py "${gen[@]}"
py generate-invalid --out "$OUT/invalid"

# perf_controller OPERATOR: the cluster's TrainJob controller restarted as a fresh process with an identity of
# its own (upstream's otherwise shares the admin certificate with JobSet, Kueue and kwok), so its CPU seconds,
# peak RSS and API requests (an APF FlowSchema matching that identity) are its alone. Both elect a leader, as
# they are deployed (upstream's manifests set leaderElect: true with 15 s / 10 s / 2 s; ours is on by default),
# so both pay for their Lease renewals; the old process's Lease is deleted first, so the new one leads at once,
# and the run starts only once it does. Sets perf_pid and perf_identity.
perf_controller() {
    stop upstream-trainer
    stop kubetrain-operator
    kubectl_admin -n kubeflow-system delete lease trainer.kubeflow.org --ignore-not-found >/dev/null
    case $1 in
        upstream)
            sed 's/^leaderElection: .*$/leaderElection: {leaderElect: true, resourceName: trainer.kubeflow.org, resourceNamespace: kubeflow-system, leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 2s}/' \
                "$E2E_STATE/trainer-config.yaml" >"$E2E_STATE/trainer-config-perf.yaml"
            if [[ ! -f $PKI/upstream-trainer.crt ]]; then
                sign upstream-trainer "/CN=kubeflow-trainer-controller-manager"
                kubectl_admin create clusterrolebinding sbs-upstream-trainer --clusterrole cluster-admin \
                    --user kubeflow-trainer-controller-manager >/dev/null
            fi
            write_kubeconfig "$E2E_STATE/upstream-trainer.kubeconfig" "    client-certificate: $PKI/upstream-trainer.crt
    client-key: $PKI/upstream-trainer.key"
            start upstream-trainer env KUBECONFIG="$E2E_STATE/upstream-trainer.kubeconfig" \
                "$(UPSTREAM_BIN)/trainer-controller-manager" --config "$E2E_STATE/trainer-config-perf.yaml"
            wait_ready upstream-trainer "http://127.0.0.1:$UPSTREAM_PROBE_PORT/readyz"
            perf_pid=$(cat "$PIDS/upstream-trainer.pid") perf_identity=user:kubeflow-trainer-controller-manager
            ;;
        kubetrain)
            operator_start kubetrain-operator "$OPERATOR_WEBHOOK_PORT" "$OPERATOR_METRICS_PORT" "$OPERATOR_PROBE_PORT"
            perf_pid=$(cat "$PIDS/kubetrain-operator.pid")
            perf_identity=serviceaccount:kubeflow-system/kubetrain-operator
            ;;
    esac
    kubectl_admin -n kubeflow-system wait --for=create lease/trainer.kubeflow.org --timeout=60s >/dev/null
}
perf() { KUBETRAIN_E2E_API_PORT=$API_PORT "$VENV/bin/python" "$E2E_DIR/lib/perf.py" "$@"; }

trap '"$E2E_DIR/cluster.sh" down >/dev/null 2>&1 || true' EXIT
for operator in ${SBS_OPERATORS:-upstream kubetrain}; do
    log "side by side: $operator"
    "$E2E_DIR/cluster.sh" up --operator "$operator"
    eval "$("$E2E_DIR/cluster.sh" env)"
    if [[ $perf_only == 0 ]]; then
        KUBECTL="$(K8S_BIN)/kubectl" py run --corpus "$OUT/corpus" --out "$OUT/$operator.json"
        KUBECTL="$(K8S_BIN)/kubectl" py lifecycle --out "$OUT/$operator-lifecycle.json"
        KUBECTL="$(K8S_BIN)/kubectl" py run --corpus "$OUT/invalid" --out "$OUT/$operator-webhooks.json" --settle 0 --timeout 30
    fi
    for n in $sizes; do
        perf_controller "$operator"
        log "perf: $n TrainJobs through $operator (pid $perf_pid)"
        perf jobs --n "$n" --pid "$perf_pid" --identity "$perf_identity" --controller "$operator" \
            --timeout "$perf_timeout" --out "$OUT/perf-$operator-$n.json" || log "perf: $n TrainJobs through $operator did not finish"
    done
    perf webhook --requests "$hook_requests" --controller "$operator" --out "$OUT/perf-$operator-webhook.json" ||
        log "perf: dry-run creates through $operator were refused"
    "$E2E_DIR/cluster.sh" down
done
summary= lifecycles=
if [[ $perf_only == 0 ]]; then
    lifecycles=$(py compare-lifecycle "$OUT/upstream-lifecycle.json" "$OUT/kubetrain-lifecycle.json" \
        --report "$OUT/lifecycle.md")
    echo "$lifecycles"
    py compare-webhooks "$OUT/upstream-webhooks.json" "$OUT/kubetrain-webhooks.json" --report "$OUT/webhooks.md"
    summary=$(py compare "$OUT/upstream.json" "$OUT/kubetrain.json" --report "$OUT/differences.md")
    log "differences, case by case: $OUT/differences.md, $OUT/lifecycle.md, $OUT/webhooks.md"
    echo "$summary"
else
    echo "render: 0/0 identical (--perf-only)"
fi
# The Kueue model against real Kueue on its own cluster (ports shifted by 2000): 10 scenarios with --slice, 100
# otherwise; its last line is `kueue: N/M agree`.
kueue_args=(--count 100)
[[ $examples == 0 ]] && kueue_args=(--slice)
if [[ ${perf_only:-0} == 0 ]]; then
    "$E2E_DIR/kueue-compare.sh" "${kueue_args[@]}" | tail -n 1 || echo "kueue: 0/0 agree (the comparison failed; see its log above)"
else
    echo "kueue: 0/0 agree (--perf-only)"
fi
echo "performance (kubetrain-operator: ${KUBETRAIN_E2E_PROFILE:-debug} build; $(nproc) CPUs, figures in $OUT/perf-*.json):"
perf table "$OUT"/perf-*.json || log "no performance figures in $OUT"
if [[ $strict == 1 && $perf_only == 0 ]]; then
    [[ $lifecycles =~ ^status:\ ([0-9]+)/([0-9]+)\  && ${BASH_REMATCH[1]} == "${BASH_REMATCH[2]}" ]] ||
        die "--strict: a TrainJob status differs through a lifecycle (see $OUT/lifecycle.md)"
    unexplained=$(sed -n 's/^unexplained: \([0-9]*\)$/\1/p' <<<"$summary")
    [[ $unexplained == 0 ]] ||
        die "--strict: $unexplained cases differ beyond the documented divergences (see $OUT/differences.md)"
fi
