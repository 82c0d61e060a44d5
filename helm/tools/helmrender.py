"""Render and lint the chart with the real Helm library (helm-sdkpy), without a cluster.

helm-sdkpy (the Helm v4 Go library behind a C ABI) has no `helm template` and no dry-run:
its only way to render a chart is `Install`, which talks to a Kubernetes API server. So this
module starts a tiny in-memory API server on 127.0.0.1 that answers what a client-side
install needs (version, discovery, GET -> 404 for new objects, POST create) and runs a real
`helm install` against it, in a child process with in-memory release storage
(HELM_DRIVER=memory). Helm renders the chart exactly as `helm template`/`helm install` would;
the release's manifest is what we return, and the objects Helm actually sent to the API are
recorded too. No other address than 127.0.0.1 is ever contacted.

Used by helm/tests/test_chart.py and by deploy/generate.sh (plain manifests).

    python helm/tools/helmrender.py [--release NAME] [--namespace NS] [--set-json JSON]
        prints the rendered manifest (CRDs excluded, as `helm template`).
    python helm/tools/helmrender.py --plain-manifests
        prints deploy/manifests/visitors-operator.yaml (Namespace, CRDs, default render).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "visitors-operator"

# The Kubernetes version the fake API server reports by default (the suite is built against
# v1.33); render(kube_version=...) reports another.
KUBE_VERSION = "v1.33.0"


def version_info(git_version: str) -> dict:
    """The /version answer of a server of `git_version` (for example v1.28.7)."""
    major, minor = git_version.lstrip("v").split(".")[:2]
    return {"major": major, "minor": minor, "gitVersion": git_version, "platform": "linux/amd64"}

# (group, version) -> [(plural, kind, namespaced)]: every kind the chart may render, plus
# the kinds Helm itself stores or creates (Secrets for releases, CRDs from crds/).
API_RESOURCES: dict[tuple[str, str], list[tuple[str, str, bool]]] = {
    ("", "v1"): [
        ("namespaces", "Namespace", False),
        ("secrets", "Secret", True),
        ("configmaps", "ConfigMap", True),
        ("serviceaccounts", "ServiceAccount", True),
        ("services", "Service", True),
    ],
    ("apps", "v1"): [("deployments", "Deployment", True)],
    ("rbac.authorization.k8s.io", "v1"): [
        ("clusterroles", "ClusterRole", False),
        ("clusterrolebindings", "ClusterRoleBinding", False),
        ("roles", "Role", True),
        ("rolebindings", "RoleBinding", True),
    ],
    ("apiextensions.k8s.io", "v1"): [("customresourcedefinitions", "CustomResourceDefinition", False)],
    ("coordination.k8s.io", "v1"): [("leases", "Lease", True)],
    ("monitoring.coreos.com", "v1"): [("servicemonitors", "ServiceMonitor", True), ("prometheusrules", "PrometheusRule", True)],
}

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


class FakeApiServer:
    """A minimal, in-memory Kubernetes API server good enough for `helm install` (no wait)."""

    def __init__(self, kube_version: str = KUBE_VERSION) -> None:
        self.version = version_info(kube_version)
        self.objects: dict[str, dict] = {}  # item path -> object
        self.created: list[dict] = []  # every object POSTed, in order
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict:
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def do_GET(self):
                code, body = server.get(self.path)
                self._send(code, body)

            def _json_only(self) -> bool:
                # Helm's Secret release storage speaks protobuf; we only speak JSON, and use
                # in-memory release storage instead (HELM_DRIVER=memory, see below).
                if "json" in (self.headers.get("Content-Type") or "json"):
                    return True
                self._send(415, status(415, "UnsupportedMediaType", "the fake API speaks JSON only: was HELM_DRIVER=memory set before helm_sdkpy was loaded?"))
                return False

            def do_POST(self):
                if not self._json_only():
                    return
                code, body = server.create(self.path, self._body())
                self._send(code, body)

            def do_PUT(self):
                if not self._json_only():
                    return
                code, body = server.replace(self.path, self._body())
                self._send(code, body)

            def do_DELETE(self):
                code, body = server.delete(self.path)
                self._send(code, body)

            def do_PATCH(self):
                self._send(405, status(405, "MethodNotAllowed", "PATCH is not supported by the fake API"))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.tmp = tempfile.TemporaryDirectory(prefix="visitors-fake-kube-")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "FakeApiServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.tmp.cleanup()

    def kubeconfig(self) -> str:
        """Path of a kubeconfig file (JSON is valid YAML) pointing at this server."""
        path = Path(self.tmp.name) / "config"
        path.write_text(json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "fake", "user": {"token": "fake"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
                "current-context": "fake",
            }
        ))
        return str(path)

    # --- request handling -------------------------------------------------------------

    def get(self, raw_path: str) -> tuple[int, dict]:
        url = urlsplit(raw_path)
        path = url.path.rstrip("/")
        if path == "/version":
            return 200, self.version
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            return 200, {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                        "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v},
                    }
                    for (g, v) in API_RESOURCES
                    if g
                ],
            }
        for (g, v), resources in API_RESOURCES.items():
            if path == (f"/apis/{g}/{v}" if g else f"/api/{v}"):
                return 200, {
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": f"{g}/{v}" if g else v,
                    "resources": [
                        {"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind, "verbs": VERBS}
                        for (plural, kind, namespaced) in resources
                    ],
                }
        parsed = parse_path(path)
        if parsed is None:
            return 404, status(404, "NotFound", f"the fake API does not serve {path}")
        with self.lock:
            if parsed["name"] is None:
                items = [o for p, o in self.objects.items() if p.rsplit("/", 1)[0] == path]
                items = [o for o in items if matches(o, parse_qs(url.query).get("labelSelector", [""])[0])]
                return 200, {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}
            if path in self.objects:
                return 200, self.objects[path]
        return 404, status(404, "NotFound", f'{parsed["plural"]} "{parsed["name"]}" not found')

    def create(self, raw_path: str, obj: dict) -> tuple[int, dict]:
        path = urlsplit(raw_path).path.rstrip("/")
        if parse_path(path) is None:
            return 404, status(404, "NotFound", f"the fake API does not serve {path}")
        meta = obj.setdefault("metadata", {})
        item = f"{path}/{meta.get('name')}"
        with self.lock:
            if item in self.objects:
                return 409, status(409, "AlreadyExists", f"{item} already exists")
            meta.setdefault("uid", str(uuid.uuid4()))
            meta["resourceVersion"] = "1"
            self.objects[item] = obj
            self.created.append(obj)
        return 201, obj

    def replace(self, raw_path: str, obj: dict) -> tuple[int, dict]:
        path = urlsplit(raw_path).path.rstrip("/")
        with self.lock:
            if path not in self.objects:
                return 404, status(404, "NotFound", f"{path} not found")
            self.objects[path] = obj
        return 200, obj

    def delete(self, raw_path: str) -> tuple[int, dict]:
        path = urlsplit(raw_path).path.rstrip("/")
        with self.lock:
            if self.objects.pop(path, None) is None:
                return 404, status(404, "NotFound", f"{path} not found")
        return 200, status(200, "Success", "deleted")


def status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Success" if code < 300 else "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


_PATH = re.compile(
    r"^/(?:api/v1|apis/[^/]+/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$"
)


def parse_path(path: str) -> dict | None:
    m = _PATH.match(path)
    return m.groupdict() if m else None


def matches(obj: dict, selector: str) -> bool:
    """Equality-based label selectors (`a=b,c=d`), which is all Helm's storage uses."""
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, _, value = term.replace("==", "=").partition("=")
        if labels.get(key) != value:
            return False
    return True


# --- Helm ---------------------------------------------------------------------------------


def import_helm():
    """Imports helm_sdkpy, with a clear error naming the install command when it is missing."""
    try:
        import helm_sdkpy  # noqa: PLC0415

        helm_sdkpy.get_version()  # loads the native library
        return helm_sdkpy
    except Exception as e:  # ImportError or HelmLibraryNotFound
        raise RuntimeError(
            "the Helm library is unavailable: pip install --ignore-requires-python helm-sdkpy "
            f"(in ~/.cache/visitors-operator/venv); cause: {e!r}"
        ) from e


def _helm_env(env: dict) -> dict:
    """Keeps Helm's caches and config out of the user's home, and stores releases in memory."""
    base = Path(tempfile.gettempdir()) / "visitors-helmrender"
    for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")):
        env.setdefault(var, str(base / sub))
    # Helm's default release storage is Secrets in protobuf, which the fake API does not speak.
    env["HELM_DRIVER"] = "memory"
    return env


class Rendered:
    """What one install produced."""

    def __init__(self, manifest: str, notes: str, created: list[dict]):
        self.manifest = manifest  # the rendered templates, as `helm template` prints them
        self.notes = notes  # rendered NOTES.txt
        self.created = created  # the objects Helm sent to the API, in order (CRDs first)

    def manifest_docs(self) -> list[dict]:
        """The rendered objects, parsed (needs PyYAML)."""
        import yaml  # noqa: PLC0415

        return [d for d in yaml.safe_load_all(self.manifest) if d]


def render(
    values: dict | None = None,
    release: str = "visitors-operator",
    namespace: str = "visitors-operator-system",
    chart: Path = CHART,
    kube_version: str = KUBE_VERSION,
) -> Rendered:
    """Installs `chart` with `values` into a fresh fake API server and returns what Helm rendered.

    Runs in a child process: the Go runtime inside helm-sdkpy reads the environment only as
    it was when the process started, so HELM_DRIVER=memory cannot be set from here.
    Raises RuntimeError with Helm's message when the install fails.
    """
    request = {
        "values": values or {},
        "release": release,
        "namespace": namespace,
        "chart": str(chart),
        "kubeVersion": kube_version,
    }
    proc = subprocess.run(
        [sys.executable, __file__, "--worker"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=_helm_env(dict(os.environ)),
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"helm install (render) failed:\n{proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    return Rendered(out["manifest"], out["notes"], out["created"])


def _worker() -> int:
    """Child process of render(): one install, request on stdin, result as JSON on stdout."""
    request = json.load(sys.stdin)
    if os.environ.get("HELM_DRIVER") != "memory":
        print("helmrender worker: HELM_DRIVER=memory must be set when the process starts", file=sys.stderr)
        return 2
    helm = import_helm()
    with FakeApiServer(request["kubeVersion"]) as api:
        config = helm.Configuration(namespace=request["namespace"], kubeconfig=api.kubeconfig())
        try:
            result = asyncio.run(
                helm.Install(config).run(
                    request["release"],
                    request["chart"],
                    values=request["values"] or None,
                    wait=False,
                    timeout=60,
                )
            )
        except helm.HelmError as e:
            print(f"{type(e).__name__}: {e}", file=sys.stderr)
            return 1
        created = list(api.created)
    json.dump(
        {"manifest": result.get("manifest", ""), "notes": (result.get("info") or {}).get("notes", ""), "created": created},
        sys.stdout,
    )
    return 0


def lint(chart: Path = CHART) -> dict:
    """Runs `helm lint` on the chart (offline)."""
    helm = import_helm()
    with FakeApiServer() as api:  # Lint needs a Configuration, though it never calls the API
        config = helm.Configuration(namespace="default", kubeconfig=api.kubeconfig())
        return asyncio.run(helm.Lint(config).run(str(chart)))


PLAIN_RELEASE = "visitors-operator"
PLAIN_NAMESPACE = "visitors-operator-system"
PLAIN_HEADER = """\
# visitors-operator: plain Kubernetes manifests, for installing without Helm.
#
# GENERATED; do not edit. deploy/generate.sh renders the Helm chart helm/visitors-operator
# with its default values, release "{release}", namespace "{namespace}",
# with the real Helm library (helm-sdkpy; see helm/tools/helmrender.py), and puts the
# Namespace and the chart's CRDs first. helm/tests/test_chart.py fails when it is stale.
#
# Install:    kubectl apply -f deploy/manifests/visitors-operator.yaml
# Uninstall:  see docs/install.md (deleting the CRDs deletes every VisitorsApp and backup object).
"""


def plain_manifests(chart: Path = CHART) -> str:
    """The content of deploy/manifests/visitors-operator.yaml: Namespace, CRDs, the rendered chart."""
    rendered = render({}, PLAIN_RELEASE, PLAIN_NAMESPACE, chart)
    parts = [
        PLAIN_HEADER.format(release=PLAIN_RELEASE, namespace=PLAIN_NAMESPACE),
        f"---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {PLAIN_NAMESPACE}\n",
    ]
    for crd in sorted((chart / "crds").glob("*.yaml")):
        parts.append("---\n" + crd.read_text().rstrip("\n") + "\n")
    # Helm's manifest starts each document with "---" and a "# Source:" comment.
    parts.append(rendered.manifest.strip("\n") + "\n")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--release", default="visitors-operator")
    parser.add_argument("--namespace", default="visitors-operator-system")
    parser.add_argument("--set-json", default="{}", help="values as a JSON object")
    parser.add_argument("--plain-manifests", action="store_true", help="print deploy/manifests/visitors-operator.yaml")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker()
    if args.plain_manifests:
        sys.stdout.write(plain_manifests())
        return 0
    out = render(json.loads(args.set_json), args.release, args.namespace)
    sys.stdout.write(out.manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
