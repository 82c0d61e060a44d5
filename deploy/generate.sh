#!/usr/bin/env bash
# Regenerates deploy/manifests/visitors-operator.yaml (plain manifests for installing without
# Helm) from the Helm chart, rendered by the real Helm library (helm-sdkpy) with default values.
# Run it after changing the chart or the CRDs (`cargo run --bin crdgen` first for the CRDs).
#
# Needs Python with helm-sdkpy; by default the project venv:
#   python3 -m venv ~/.cache/visitors-operator/venv
#   ~/.cache/visitors-operator/venv/bin/pip install --ignore-requires-python helm-sdkpy
set -euo pipefail
cd "$(dirname "$0")/.."

venv_python="${HOME}/.cache/visitors-operator/venv/bin/python"
python="${PYTHON:-$([ -x "$venv_python" ] && echo "$venv_python" || echo python3)}"

out=deploy/manifests/visitors-operator.yaml
tmp="$(mktemp "${out}.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
# Written to a temporary file first, so that a failed render leaves the old file in place.
"$python" helm/tools/helmrender.py --plain-manifests >"$tmp"
chmod 644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out"
