#!/usr/bin/env bash
# `kubectl visitors status` against a real control plane with N apps present (no node, no
# controller: every object carries a status as the controllers write them). For each N: a
# fresh control plane, the suite's CRDs, N VisitorsApps each with a schedule that archives and
# drills and RUNS runs (e2e/src/bin/plugin-bench.rs); then the release build of the plugin run
# REPEAT times for one app and for the list. Reports the median and slowest seconds per run
# (the process included) and the API requests each sends.
#
#   bench/plugin/status.sh [N ...]          default: 1000
#
# Needs KUBE_BIN_DIR (default ~/.cache/visitors-operator/kube-bin) like e2e/run.sh --local.
# Settings: RUNS (default 3), REPEAT (default 10).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)

CLUSTER_SH=${TEST_CLUSTER_DIR:-$REPO/../shared/test-cluster}/cluster.sh
export KUBE_BIN_DIR=${KUBE_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/visitors-operator/kube-bin}
# Its own state and ports (those of bench/controllers/scale.sh, which it never runs beside).
export TEST_CLUSTER_STATE=${XDG_CACHE_HOME:-$HOME/.cache}/visitors-operator/bench-cluster
export TEST_CLUSTER_APISERVER_PORT=16443 TEST_CLUSTER_ETCD_PORT=22379 TEST_CLUSTER_KCM_PORT=20257
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1000)

cargo build --locked --release --bin kubectl-visitors --bin e2e-setup --bin plugin-bench
bin=${CARGO_TARGET_DIR:-target}/release
trap '"$CLUSTER_SH" stop --reset >/dev/null 2>&1 || true' EXIT

for n in "${counts[@]}"; do
    echo "==> $n apps"
    "$CLUSTER_SH" stop --reset >/dev/null 2>&1 || true
    "$CLUSTER_SH" start --no-node >/dev/null
    eval "$("$CLUSTER_SH" env)"
    export KUBECONFIG
    "$bin/e2e-setup" --namespace visitors-operator-system >/dev/null
    "$bin/plugin-bench" --plugin "$bin/kubectl-visitors" --apps "$n" --runs "${RUNS:-3}" --repeat "${REPEAT:-10}"
done
