#!/usr/bin/env bash
# Regenerates the Operator Lifecycle Manager bundle (bundle/manifests, bundle/metadata,
# bundle/bundle.Dockerfile) from the Helm chart, rendered by the real Helm library
# (helm-sdkpy), its CRDs and deploy/examples; see helm/tools/olmbundle.py for what comes from
# where. Run it after changing the chart, the CRDs or the examples; helm/tests/test_bundle.py
# fails when the bundle is stale.
#
# Needs Python with helm-sdkpy and PyYAML; by default the project venv (see deploy/generate.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

venv_python="${HOME}/.cache/visitors-operator/venv/bin/python"
python="${PYTHON:-$([ -x "$venv_python" ] && echo "$venv_python" || echo python3)}"

"$python" helm/tools/olmbundle.py --write
