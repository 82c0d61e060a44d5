#!/usr/bin/env bash
# Runs the end-to-end scenarios on a real Kubernetes control plane and prints a pass/fail table.
#
#   e2e/run.sh --local [--keep] [FILTER...]
#       starts ../shared/test-cluster (real etcd, kube-apiserver and kube-controller-manager,
#       an emulated node that runs our binaries from target/debug as the pods' processes and
#       MySQL images as real mariadbd), installs the chart with real Helm, runs every scenario,
#       and stops and wipes the cluster (--keep leaves it running: `eval "$(../shared/test-cluster/cluster.sh env)"`).
#       Needs kube-apiserver and kube-controller-manager in KUBE_BIN_DIR (default:
#       ~/.cache/visitors-operator/kube-bin); without them it prints `e2e skipped: <reason>`.
#   e2e/run.sh [FILTER...]
#       the same scenarios on the cluster of KUBECONFIG (kind, a real cluster). With IMAGE set
#       (an image of this checkout the cluster can pull) it installs the chart first; without,
#       the suite must already be installed (see e2e/README.md).
#
# --test FILE: only the scenarios of e2e/tests/FILE.rs (repeatable).
# E2E_PROFILE=release (--local): the node runs release builds of our binaries (the benchmarks
# of bench/high-availability measure them); default debug.
# FILTER: test name filters passed to the test binaries (e.g. `drift`).
# Logs of a failed run (controllers, Jobs, MariaDB, the control plane) are copied to
# target/e2e-logs/<time>/ (--local only: on another cluster use kubectl logs).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)

RELEASE=${RELEASE:-visitors-operator}
NAMESPACE=${NAMESPACE:-visitors-operator-system}
# One scenario at a time by default within a file: on the emulated node, two MariaDB data
# folders initialised at the same moment can collide in the host's shared /tmp
# (mariadb-install-db fails with "Unknown table 'mysql.tmp_user_sys'"), which made a parallel run
# fail now and then; the files of SIDE_BY_SIDE (below) run beside them, their apps taking turns.
TEST_THREADS=${E2E_TEST_THREADS:-1}
# Where the tests' OTLP receiver listens, and where the chart points the controllers (--local).
OTLP_LISTEN=${E2E_OTLP_LISTEN:-127.0.0.1:14318}
# The controllers' metrics ports on the emulated node, where every pod shares the host's ports.
VISITORS_PORT=18080 BACKUP_PORT=18081 RESTORE_PORT=18082

local_cluster=0 keep=0 filters=() test_files=()
while [ $# -gt 0 ]; do
    case $1 in
        --local) local_cluster=1 ;;
        --keep) keep=1 ;;
        --test) test_files+=(--test "$2"); shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) filters+=("$1") ;;
    esac
    shift
done

skip() { echo "e2e skipped: $*"; exit 0; }
step() { printf '\n==> e2e: %s\n' "$*"; }

python_with_helm() {
    local venv=${VISITORS_CI_VENV:-$HOME/.cache/visitors-operator/venv}
    for py in "$venv/bin/python" python3; do
        if "$py" -c 'import helm_sdkpy' 2>/dev/null; then echo "$py"; return 0; fi
    done
    return 1
}

# ---------- the local test cluster ----------
CLUSTER_SH=${TEST_CLUSTER_DIR:-$REPO/../shared/test-cluster}/cluster.sh
export KUBE_BIN_DIR=${KUBE_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/visitors-operator/kube-bin}
export TEST_CLUSTER_STATE=${TEST_CLUSTER_STATE:-${XDG_CACHE_HOME:-$HOME/.cache}/visitors-operator/test-cluster}

# The node runs each pod's binary from its host path, and the backup and restore Jobs' pods
# mount an emptyDir at /tmp: binaries under /tmp would vanish from their view (bwrap: execvp
# ... No such file or directory) and every Job would fail.
refuse_a_bin_dir_under_tmp() {
    local absolute; absolute=$(realpath -m "$1")
    case "$absolute/" in
        /tmp/*)
            echo "e2e: the binaries the node runs would be in $absolute, under /tmp, which the Job pods mount an emptyDir over; clone the repository elsewhere (or set CARGO_TARGET_DIR outside /tmp)" >&2
            exit 2 ;;
    esac
}

start_local_cluster() {
    [ -x "$CLUSTER_SH" ] || skip "no test cluster at $CLUSTER_SH (set TEST_CLUSTER_DIR)"
    for binary in kube-apiserver kube-controller-manager; do
        [ -x "$KUBE_BIN_DIR/$binary" ] || skip "no $binary in KUBE_BIN_DIR=$KUBE_BIN_DIR (build them from Kubernetes' source; see e2e/README.md)"
    done
    # One run at a time per cluster: a second run would wipe the first one's cluster.
    mkdir -p "$(dirname "$TEST_CLUSTER_STATE")"
    exec 9>"$TEST_CLUSTER_STATE.lock"
    if ! flock -n 9; then
        echo "e2e: waiting for another e2e run on $TEST_CLUSTER_STATE to finish"
        flock 9
    fi
    local profile=${E2E_PROFILE:-debug}
    local bin_dir=${CARGO_TARGET_DIR:-target}/$profile
    refuse_a_bin_dir_under_tmp "$bin_dir"
    step "building the binaries the node runs, and the kubectl plugin ($bin_dir)"
    cargo build --locked --profile "$([ "$profile" = debug ] && echo dev || echo "$profile")" --bin visitors-controller --bin backup-controller --bin restore-controller --bin visitors-agent --bin kubectl-visitors \
        --bin visitors-archiver --bin pooled-writer
    step "starting the test cluster (state: $TEST_CLUSTER_STATE)"
    # A cluster left by an interrupted run would hold other pods and volumes: start afresh.
    "$CLUSTER_SH" stop --reset >/dev/null 2>&1 || true
    # A killed run can leave pod processes behind its node (a mariadbd still bound to the
    # address the next MySQL pod gets): end whatever still runs from the node's folders.
    pkill -f -- "$TEST_CLUSTER_STATE/run/node/" 2>/dev/null && sleep 2 || true
    # The cluster outlives this run (--keep): its processes must not inherit the lock.
    "$CLUSTER_SH" start --bin-dir "$bin_dir" 9>&-
    eval "$("$CLUSTER_SH" env)"
    export KUBECONFIG
}

# Values that fit the emulated node: every pod is a process on the host, so one replica each
# and a metrics port per controller; the image is never pulled (the node runs target/debug).
local_values() {
    cat <<EOF
{"image": {"repository": "localhost/visitors-operator", "tag": "dev", "pullPolicy": "Never"},
 "logFormat": "text", "logLevel": "info,kube=warn",
 "tracing": {"otlpEndpoint": "http://$OTLP_LISTEN"},
 "visitors": {"replicas": 1, "metricsPort": $VISITORS_PORT},
 "backup": {"replicas": 1, "metricsPort": $BACKUP_PORT},
 "restore": {"replicas": 1, "metricsPort": $RESTORE_PORT}}
EOF
}

install_suite() { # install_suite VALUES_JSON
    local python
    python=$(python_with_helm) || { echo "e2e: helm-sdkpy is missing: pip install -r scripts/requirements-test.txt" >&2; exit 1; }
    step "preparing the release namespace and the CRDs"
    cargo run --locked -q -p visitors-e2e --bin e2e-setup -- --namespace "$NAMESPACE"
    step "installing the chart with Helm (release $RELEASE in $NAMESPACE)"
    "$python" e2e/helm_install.py --release "$RELEASE" --namespace "$NAMESPACE" --values-json "$1"
}

keep_logs() {
    [ "$local_cluster" = 1 ] || return 0
    local dest
    dest="${CARGO_TARGET_DIR:-$REPO/target}/e2e-logs/$(date -u +%Y%m%dT%H%M%SZ)"
    mkdir -p "$dest"
    cp -r "$TEST_CLUSTER_STATE/run/node/logs" "$dest/pods" 2>/dev/null || true
    cp "$TEST_CLUSTER_STATE"/run/*.log "$dest/" 2>/dev/null || true
    echo "e2e: logs of the failed run kept in $dest"
}

clean_up() {
    if [ "$local_cluster" = 1 ] && [ "$keep" = 0 ]; then
        "$CLUSTER_SH" stop --reset >/dev/null 2>&1 || true
    fi
}

# ---------- the scenarios ----------
trap clean_up EXIT

if [ "$local_cluster" = 1 ]; then
    start_local_cluster
    install_suite "$(local_values)"
    export E2E_NODE_LOGS="$TEST_CLUSTER_STATE/run/node/logs" E2E_OTLP_LISTEN=$OTLP_LISTEN
    export E2E_METRICS_PORTS=visitors=$VISITORS_PORT,backup=$BACKUP_PORT,restore=$RESTORE_PORT
else
    config="${KUBECONFIG:-$HOME/.kube/config}"
    [ -f "${config%%:*}" ] || skip "no cluster given (use --local, set KUBECONFIG, or create ~/.kube/config)"
    if [ -n "${IMAGE:-}" ]; then
        install_suite "{\"image\": {\"repository\": \"${IMAGE%:*}\", \"tag\": \"${IMAGE##*:}\"}}"
    fi
    # tests/plugin.rs drives the kubectl plugin of this checkout.
    cargo build --locked --bin kubectl-visitors
fi
export E2E_RELEASE_NAMESPACE=$NAMESPACE E2E_RELEASE=$RELEASE

step "building the scenarios"
# Each scenario file is a test binary, run directly (cargo would hold its lock while one runs):
# those of SIDE_BY_SIDE in the background, their scenarios in parallel, while the others run
# one file after another. Apps of every scenario take turns to initialise their database
# (visitors_e2e::AppInitLock), which is what kept the suite sequential.
SIDE_BY_SIDE=" point_in_time drill security high_availability replication_under_load backup_schedule plugin examples physical "
# Files that measure a controller's own counters (reconciles of the whole controller) run
# last, alone: another file's apps reconciling meanwhile would count as theirs.
ALONE=" bad_input "
binaries=$(cargo test --locked --no-run -p visitors-e2e "${test_files[@]}" --message-format=json 2>/dev/null |
    jq -r 'select(.reason == "compiler-artifact" and .profile.test and (.target.kind | index("test"))) | "\(.target.name) \(.executable)"')
[ -n "$binaries" ] || { echo "e2e: no scenario binaries were built" >&2; exit 1; }
outputs=$(mktemp -d)
trap 'rm -rf "$outputs"; clean_up' EXIT

step "running the scenarios"
status=0
background=()
while read -r name executable; do
    case "$SIDE_BY_SIDE" in
        *" $name "*)
            "$executable" --ignored --test-threads=8 "${filters[@]}" > "$outputs/$name.out" 2>&1 &
            background+=("$!:$name") ;;
    esac
done <<< "$binaries"
run_file() {
    echo "     Running tests/$1.rs"
    "$2" --ignored --test-threads="$TEST_THREADS" "${filters[@]}" 2>&1 | tee "$outputs/$1.out" || status=$?
}
while read -r name executable; do
    case "$SIDE_BY_SIDE$ALONE" in *" $name "*) continue ;; esac
    run_file "$name" "$executable"
done <<< "$binaries"
for entry in "${background[@]}"; do
    pid=${entry%%:*} name=${entry#*:}
    wait "$pid" || status=$?
    echo "     Running tests/$name.rs (side by side)"
    cat "$outputs/$name.out"
done
while read -r name executable; do
    case "$ALONE" in *" $name "*) run_file "$name" "$executable" ;; esac
done <<< "$binaries"

echo
echo "e2e results:"
for out in "$outputs"/*.out; do
    name=$(basename "$out" .out)
    awk -v file="$name" '/^test [^ ]+ \.\.\. / { printf "  %-90s %s\n", file "::" $2, $4 }' "$out"
done
if [ "$status" != 0 ]; then
    keep_logs
    exit "$status"
fi
