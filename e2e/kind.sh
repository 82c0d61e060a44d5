#!/usr/bin/env bash
# A local cluster for the end-to-end tests: creates a kind cluster, builds the suite's image,
# loads it into the cluster and installs the Helm chart with it.
#
#   e2e/kind.sh          create (or reuse) the cluster, build, load, install / upgrade
#   e2e/kind.sh down     delete the cluster
#
# Then:  VISITORS_E2E=1 cargo test -p visitors-e2e
#
# Needs docker (with a running engine), kind, kubectl and helm on PATH.
# Settings (environment):
#   CLUSTER     kind cluster name              (default visitors-e2e)
#   NODE_IMAGE  kind node image, e.g. kindest/node:v1.33.1 (default: kind's own default)
#   IMAGE       image to build and load        (default localhost/visitors-operator:dev)
#   RELEASE     Helm release name              (default visitors-operator)
#   NAMESPACE   namespace of the controllers   (default visitors-operator-system)
#   HELM_ARGS   extra `helm upgrade` arguments, e.g. "--set tracing.otlpEndpoint=http://..."
set -euo pipefail
cd "$(dirname "$0")/.."

CLUSTER="${CLUSTER:-visitors-e2e}"
IMAGE="${IMAGE:-localhost/visitors-operator:dev}"
RELEASE="${RELEASE:-visitors-operator}"
NAMESPACE="${NAMESPACE:-visitors-operator-system}"

if [[ "${1:-up}" == "down" ]]; then
    kind delete cluster --name "$CLUSTER"
    exit 0
fi

for tool in docker kind kubectl helm; do
    command -v "$tool" >/dev/null || { echo "kind.sh: $tool is not on PATH" >&2; exit 1; }
done

if ! kind get clusters | grep -qx "$CLUSTER"; then
    kind create cluster --name "$CLUSTER" ${NODE_IMAGE:+--image "$NODE_IMAGE"} --wait 120s
fi
kubectl config use-context "kind-$CLUSTER"

docker build -t "$IMAGE" .
# kind nodes cannot pull from the local Docker engine: copy the image into every node.
kind load docker-image "$IMAGE" --name "$CLUSTER"

# `helm upgrade` never updates CRDs, so apply the current ones first (server-side: no
# last-applied annotation, and it takes over the fields a previous install set).
kubectl apply --server-side --force-conflicts -f deploy/crds/

# ${IMAGE%:*} is everything before the last colon (the repository), ${IMAGE##*:} the tag.
# shellcheck disable=SC2086  # HELM_ARGS is a list of arguments
helm upgrade --install "$RELEASE" helm/visitors-operator \
    --namespace "$NAMESPACE" --create-namespace \
    --set image.repository="${IMAGE%:*}" \
    --set image.tag="${IMAGE##*:}" \
    --set image.pullPolicy=IfNotPresent \
    --wait --timeout 5m \
    ${HELM_ARGS:-}

# The tag does not change between builds, so restart the pods to run the image just loaded.
kubectl -n "$NAMESPACE" rollout restart deployment -l app.kubernetes.io/instance="$RELEASE"
kubectl -n "$NAMESPACE" rollout status deployment -l app.kubernetes.io/instance="$RELEASE" --timeout 5m

kubectl -n "$NAMESPACE" get deployments,pods
echo
echo "Ready. Run the end-to-end tests with:"
echo "  VISITORS_E2E=1 cargo test -p visitors-e2e"
