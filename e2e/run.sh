#!/usr/bin/env bash
# Runs the e2e scenarios (e2e/scenarios, pytest in the harness venv) against the cluster of
# `e2e/cluster.sh up`. Ends with the line `N passed, M failed`; exits non-zero when any failed.
#
#   e2e/run.sh [PYTEST-ARGS...]       e.g. e2e/run.sh -k kueue
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

if [[ ! -f "$E2E_STATE/operator" ]]; then
    echo "no e2e cluster is up ($E2E_STATE); start one with: e2e/cluster.sh up" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
[[ -x "$VENV/bin/python" ]] || die "no harness venv at $VENV; run e2e/build.sh venv"
export KUBETRAIN_E2E_STATE="$E2E_STATE"
cd "$E2E_DIR/scenarios"
rm -f "$E2E_STATE/e2e-summary"
rc=0
"$VENV/bin/python" -m pytest -p no:cacheprovider -q -rfEs --durations=5 "$@" || rc=$?
summary=$(cat "$E2E_STATE/e2e-summary" 2>/dev/null || echo "0 passed, 1 failed")
[[ $rc == 0 || $summary != *" 0 failed"* ]] || summary="${summary/ 0 failed/ 1 failed}"  # pytest itself failed
echo "$summary"
exit $rc
