#!/usr/bin/env bash
# High availability of a replicated VisitorsApp on the local test cluster (../shared/test-cluster:
# a real control plane, three real MariaDB servers): sets the cluster up and installs the suite
# as the e2e suite does (e2e/run.sh --local --keep, with only the quick CRD scenarios), runs one
# benchmark, then stops and wipes the cluster.
#
#   bench/high-availability/run.sh failover [DELETIONS] [FREEZES] [SWITCHOVERS] [TRY_SECONDS] [WRITERS] [CHAINED]
#       write gaps of failovers and switchovers under the pooled writer's load, CHAINED being a
#       replica frozen 15 s then the primary (e2e/src/bin/failover-bench.rs); default 5 5 3 2 4 5
#   bench/high-availability/run.sh lag [RATE] [SECONDS]
#       replication lag under load (e2e/src/bin/replication-bench.rs); default 500 60
#   bench/high-availability/run.sh load [WRITERS] [SECONDS] [APPLIER_THREADS]
#       each replica's apply rate against the primary's commit rate, WRITERS pooled sessions at
#       full speed (e2e/src/bin/replication-bench.rs, e2e/src/bin/pooled-writer.rs); default 4 60
#   bench/high-availability/run.sh seed [MIB] [WRITERS]
#       seeding a replica whose volume was lost, while WRITERS pooled sessions write at full
#       speed (e2e/src/bin/replication-bench.rs); default 1024 0
#   bench/high-availability/run.sh seed-backup [MIB]
#       the same with every binary log purged: seeded from a drilled backup run; default 1024
#   bench/high-availability/run.sh controller [APPS] [SECONDS]
#       the VisitorsApp controller's CPU and memory with APPS apps of three servers, all
#       replicating, over SECONDS (e2e/src/bin/replication-bench.rs); default 10 120
#
# Needs what e2e/run.sh --local needs (KUBE_BIN_DIR). Results go in docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bench=${1:-failover}
shift || true
case "$bench" in
    failover) binary=failover-bench; args=("$@") ;;
    lag | load | seed | seed-backup | controller) binary=replication-bench; args=("$bench" "$@") ;;
    *) echo "usage: $0 failover|lag|load|seed|seed-backup|controller [ARGS...]" >&2; exit 2 ;;
esac
export TEST_CLUSTER_STATE=${TEST_CLUSTER_STATE:-${XDG_CACHE_HOME:-$HOME/.cache}/visitors-operator/test-cluster}
e2e/run.sh --local --keep --test crds
eval "$(../shared/test-cluster/cluster.sh env)"
# The controllers' metrics ports on the node, as e2e/run.sh gives them.
export E2E_METRICS_PORTS=${E2E_METRICS_PORTS:-visitors=18080,backup=18081,restore=18082}
cleanup() { ../shared/test-cluster/cluster.sh stop --reset >/dev/null 2>&1 || true; }
trap cleanup EXIT
cargo run --quiet --locked -p visitors-e2e --bin "$binary" -- "${args[@]}"
