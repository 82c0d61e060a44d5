# Sourced by the benchmarks that start their own control plane (bench/controllers/scale.sh,
# bench/plugin/status.sh): the test cluster's script, the Kubernetes binaries, and a state and
# ports of their own, so that a benchmark never meets an e2e cluster. They never run beside
# each other. Needs REPO (the repository's root).
CLUSTER_SH=${TEST_CLUSTER_DIR:-$REPO/../shared/test-cluster}/cluster.sh
export KUBE_BIN_DIR=${KUBE_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/visitors-operator/kube-bin}
export TEST_CLUSTER_STATE=${XDG_CACHE_HOME:-$HOME/.cache}/visitors-operator/bench-cluster
export TEST_CLUSTER_APISERVER_PORT=16443 TEST_CLUSTER_ETCD_PORT=22379 TEST_CLUSTER_KCM_PORT=20257

# A fresh control plane without a node, the suite's CRDs in it, and KUBECONFIG pointing at it.
# $1: the folder of the e2e-setup binary.
fresh_bench_cluster() {
    "$CLUSTER_SH" stop --reset >/dev/null 2>&1 || true
    "$CLUSTER_SH" start --no-node >/dev/null
    eval "$("$CLUSTER_SH" env)"
    export KUBECONFIG
    "$1/e2e-setup" --namespace visitors-operator-system >/dev/null
}
