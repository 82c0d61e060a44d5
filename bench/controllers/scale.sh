#!/usr/bin/env bash
# The VisitorsApp controller at scale on a real control plane (no node: the figure is the
# controller's, not a thousand databases'). For each N: a fresh control plane, the release
# build of visitors-controller as a local process, N book VisitorsApps created at once;
# reports seconds until every app has observedGeneration 1 and its children, reconciles per
# waiting app per minute over an idle window, and the controller's peak RSS. Without a node no
# database becomes ready, so every app waits, and the backend (gated on the database) is not
# created: "its children" are the MySQL StatefulSet, Services, Secret and frontend Deployment.
#
#   bench/controllers/scale.sh [N ...]          default: 100 1000
#   NAMESPACES=100 bench/controllers/scale.sh 10000
#
# NAMESPACES (default 1): the apps go round-robin over that many namespaces, as a fleet's apps
# do (a team, a tenant or an app each); 1 keeps every app in one, the figures of issues 8 and
# 32. FLOOR (default 1): after each controller run, the floor on a fresh control plane: the
# same apps in the same layout, and for each the writes of its first reconcile made by
# scale-bench itself, no controller (see e2e/src/bin/scale-bench/floor.rs); the report gives
# both and their ratio. FLOOR=0 skips it, FLOOR=only runs the floor alone. FLOOR_MODE=floor-and-checks:
# the floor also makes the two requests a first reconcile makes besides its writes (the
# finalizer's patch and the claim's read), so what is left between it and the controller is
# the controller's own pacing and CPU.
#
# Needs KUBE_BIN_DIR (default ~/.cache/visitors-operator/kube-bin) like e2e/run.sh --local.
# Settings: IDLE_SECONDS (default 300), the idle window, long enough for backoffs to grow;
# RESYNC_SECONDS (default: the controller's, 600), so that an idle window can span resyncs.
# Each phase also reports where the work went (see e2e/src/bin/scale-bench.rs): CPU seconds of
# etcd, kube-apiserver, kube-controller-manager and the controller, and the API server's requests.
# APISERVER_PROFILE=FILE: also a Go CPU profile of kube-apiserver during the burst, taken from
# APISERVER_PROFILE_AFTER seconds (default 20) after the apps' creation starts, for
# APISERVER_PROFILE_SECONDS (default 35); with several counts, FILE.N for each. Read it with
# `go tool pprof -top FILE`. KCM_PROFILE=FILE: the same of kube-controller-manager, at the same
# times.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$(pwd)

# shellcheck source=bench/bench-cluster.sh
source "$REPO/bench/bench-cluster.sh"
IDLE_SECONDS=${IDLE_SECONDS:-300}
NAMESPACES=${NAMESPACES:-1}
FLOOR=${FLOOR:-1}
FLOOR_MODE=${FLOOR_MODE:-floor}
METRICS=127.0.0.1:18090
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(100 1000)

# BIN_DIR: measure the binaries there (visitors-controller, e2e-setup, scale-bench) instead of
# building the release ones, for example a copy kept from an earlier commit.
if [ -n "${BIN_DIR:-}" ]; then
    bin=$BIN_DIR
else
    cargo build --locked --release --bin visitors-controller --bin e2e-setup --bin scale-bench
    bin=${CARGO_TARGET_DIR:-target}/release
fi

controller_pid= profile_pids=()
stop_all() {
    [ -z "$controller_pid" ] || kill "$controller_pid" 2>/dev/null || true
    [ ${#profile_pids[@]} -eq 0 ] || kill "${profile_pids[@]}" 2>/dev/null || true
    "$CLUSTER_SH" stop --reset >/dev/null 2>&1 || true
}
trap stop_all EXIT

# The API server and kube-controller-manager serve Go's pprof (--profiling, on by default) to
# the cluster's admin. The wait counts from about when scale-bench starts creating apps (its
# watches start within a second).
start_profiles() {
    local suffix= query="/debug/pprof/profile?seconds=${APISERVER_PROFILE_SECONDS:-35}"
    local pki=$TEST_CLUSTER_STATE/run/pki
    [ ${#counts[@]} -eq 1 ] || suffix=.$1
    if [ -n "${APISERVER_PROFILE:-}" ]; then
        (sleep "${APISERVER_PROFILE_AFTER:-20}"; kubectl get --raw "$query" > "$APISERVER_PROFILE$suffix") &
        profile_pids+=($!)
    fi
    if [ -n "${KCM_PROFILE:-}" ]; then
        (sleep "${APISERVER_PROFILE_AFTER:-20}"
         curl -fsS --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
             "https://127.0.0.1:$TEST_CLUSTER_KCM_PORT$query" -o "$KCM_PROFILE$suffix") &
        profile_pids+=($!)
    fi
}

control_plane_pids() {
    local part
    for part in etcd kube-apiserver kube-controller-manager; do
        echo "--pid" "$part=$(cat "$TEST_CLUSTER_STATE/run/$part.pid")"
    done
}

# The controller's run: its report, with the controller's peak RSS, in $ours. Not in a
# subshell, so that the EXIT trap knows the controller's pid.
controller_run() {
    local n=$1 report peak_rss_kib
    fresh_bench_cluster "$bin"
    # DATABASE_CHECK=pod: no database ever starts without a node; the SQL check would only
    # add timeouts to the figure.
    [ -z "${RESYNC_SECONDS:-}" ] || export RESYNC_SECONDS
    METRICS_ADDRESS=$METRICS LEADER_ELECTION=false LOG_FORMAT=json RUST_LOG=warn DATABASE_CHECK=pod \
        "$bin/visitors-controller" > "${TMPDIR:-/tmp}/scale-bench-controller.log" 2>&1 &
    controller_pid=$!
    start_profiles "$n"
    # shellcheck disable=SC2046
    report=$("$bin/scale-bench" --apps "$n" --namespace "scale-$n" --namespaces "$NAMESPACES" \
        --metrics "http://$METRICS/metrics" --idle-seconds "$IDLE_SECONDS" \
        --pid "controller=$controller_pid" $(control_plane_pids))
    for pid in "${profile_pids[@]}"; do wait "$pid" || echo "a control plane profile failed" >&2; done
    profile_pids=()
    peak_rss_kib=$(awk '/VmHWM/ {print $2}' "/proc/$controller_pid/status")
    kill "$controller_pid"; wait "$controller_pid" 2>/dev/null || true; controller_pid=
    ours=$(echo "$report" | python3 -c "import json,sys; r=json.load(sys.stdin); r['controller_peak_rss_mib']=round($peak_rss_kib/1024,1); print(json.dumps(r))")
}

# The floor's run on a fresh control plane: the same apps, their first writes made by
# scale-bench, no controller.
floor_run() {
    local n=$1
    fresh_bench_cluster "$bin"
    # shellcheck disable=SC2046
    "$bin/scale-bench" --mode "$FLOOR_MODE" --apps "$n" --namespace "scale-$n" --namespaces "$NAMESPACES" \
        $(control_plane_pids)
}

for n in "${counts[@]}"; do
    echo "==> $n apps over $NAMESPACES namespace(s)"
    ours='null' floor='null'
    [ "$FLOOR" = only ] || controller_run "$n"
    [ "$FLOOR" = 0 ] || floor=$(floor_run "$n")
    python3 - "$ours" "$floor" <<'EOF'
import json, sys
ours, floor = (json.loads(arg) for arg in sys.argv[1:])
report = {"controller": ours, "floor": floor}
if ours and floor:
    report["controller_over_floor"] = {
        key: round(ours["first_status"][key] / floor["first_status"][key], 2)
        for key in ("p50_seconds", "p99_seconds", "last_seconds")
        if floor["first_status"][key] > 0
    }
print(json.dumps(report, indent=1))
EOF
done
