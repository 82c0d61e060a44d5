#!/usr/bin/env bash
# Failover and switchover write gaps of a replicated VisitorsApp on the local test cluster
# (../shared/test-cluster: a real control plane, three real MariaDB servers): sets the cluster
# up and installs the suite as the e2e suite does (e2e/run.sh --local --keep, with only the
# quick CRD scenarios), runs e2e/src/bin/failover-bench.rs, then stops and wipes the cluster.
#
#   bench/high-availability/run.sh [DELETIONS] [FREEZES] [SWITCHOVERS] [TRY_SECONDS]     default: 5 5 3 5
#
# Needs what e2e/run.sh --local needs (KUBE_BIN_DIR). Results go in docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
export TEST_CLUSTER_STATE=${TEST_CLUSTER_STATE:-${XDG_CACHE_HOME:-$HOME/.cache}/visitors-operator/test-cluster}
e2e/run.sh --local --keep --test crds
eval "$(../shared/test-cluster/cluster.sh env)"
cleanup() { ../shared/test-cluster/cluster.sh stop --reset >/dev/null 2>&1 || true; }
trap cleanup EXIT
cargo run --quiet --locked -p visitors-e2e --bin failover-bench -- "$@"
