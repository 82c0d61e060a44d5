"""Installs (or upgrades) the chart into the cluster of KUBECONFIG with the real Helm library
(helm-sdkpy), and waits until its Deployments are ready. Used by e2e/run.sh.

    python e2e/helm_install.py --release R --namespace NS --values-json '{...}'
    python e2e/helm_install.py --release R --namespace NS --uninstall

The namespace must exist (e2e-setup creates it with its PodSecurity labels): the chart's
pods are admitted under the namespace's enforced profile, or the install fails saying why.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

CHART = Path(__file__).resolve().parents[1] / "helm" / "visitors-operator"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--values-json", default="{}")
    parser.add_argument("--timeout", type=int, default=300, help="seconds to wait for the Deployments")
    parser.add_argument("--uninstall", action="store_true")
    args = parser.parse_args()

    try:
        import helm_sdkpy as helm  # noqa: PLC0415
    except ImportError as e:
        print(f"helm_install: helm-sdkpy is not installed ({e}); see e2e/requirements.txt", file=sys.stderr)
        return 2
    kubeconfig = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    config = helm.Configuration(namespace=args.namespace, kubeconfig=kubeconfig)
    try:
        if args.uninstall:
            asyncio.run(helm.Uninstall(config).run(args.release, wait=True, timeout=args.timeout))
            print(f"uninstalled {args.release}")
            return 0
        result = asyncio.run(
            helm.Upgrade(config).run(
                args.release,
                str(CHART),
                values=json.loads(args.values_json),
                install=True,
                wait=True,
                timeout=args.timeout,
            )
        )
    except helm.HelmError as e:
        print(f"helm_install: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    info = result.get("info") or {}
    print(f"release {args.release} revision {result.get('version')}: {info.get('status', 'unknown')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
