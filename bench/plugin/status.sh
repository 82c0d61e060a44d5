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

# shellcheck source=bench/bench-cluster.sh
source "$REPO/bench/bench-cluster.sh"
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1000)

cargo build --locked --release --bin kubectl-visitors --bin e2e-setup --bin plugin-bench
bin=${CARGO_TARGET_DIR:-target}/release
trap '"$CLUSTER_SH" stop --reset >/dev/null 2>&1 || true' EXIT

for n in "${counts[@]}"; do
    echo "==> $n apps"
    fresh_bench_cluster "$bin"
    "$bin/plugin-bench" --plugin "$bin/kubectl-visitors" --apps "$n" --runs "${RUNS:-3}" --repeat "${REPEAT:-10}"
done
