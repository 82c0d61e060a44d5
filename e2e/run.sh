#!/usr/bin/env bash
# Runs the end-to-end tests against the cluster of KUBECONFIG (default ~/.kube/config), which
# must have the suite installed (see e2e/README.md). Without a reachable cluster it says so
# and skips. Extra arguments go to the test binary, e.g. a test name filter.
set -euo pipefail
cd "$(dirname "$0")/.."

config="${KUBECONFIG:-$HOME/.kube/config}"
if [ ! -f "${config%%:*}" ]; then
    echo "e2e skipped: no cluster given (set KUBECONFIG, or create ~/.kube/config)"
    exit 0
fi
if command -v kubectl >/dev/null && ! kubectl version --request-timeout=5s >/dev/null 2>&1; then
    echo "e2e skipped: the cluster in ${config} does not answer (kubectl version failed)"
    exit 0
fi
exec cargo test -p visitors-e2e -- --ignored --test-threads=2 "$@"
