"""Tests of the Helm chart helm/visitors-operator, with the real Helm library (helm-sdkpy).

Run:  python -m pytest helm/tests -q     (from the repository root, in the project venv)

helm-sdkpy cannot `helm template`; helm/tools/helmrender.py renders by running a real
`helm install` against a small in-memory fake API server, and returns Helm's manifest.
Without helm-sdkpy the Helm tests are skipped with the reason, or fail when
VISITORS_REQUIRE_HELM=1 (as CI sets it).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "helm" / "tools"))
import helmrender  # noqa: E402

CHART = REPO / "helm" / "visitors-operator"
CHART_META = yaml.safe_load((CHART / "Chart.yaml").read_text())
APP_VERSION = str(CHART_META["appVersion"])
DEFAULT_IMAGE = f"ghcr.io/visitors-operator/visitors-operator:{APP_VERSION}"
RELEASE = "visitors-operator"
NAMESPACE = "visitors-operator-system"
CONTROLLERS = ("visitors", "backup", "restore")
STANDARD_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
)


# --- Helm availability ---------------------------------------------------------------------


@functools.cache
def _helm_problem() -> str | None:
    try:
        helmrender.import_helm()
        return None
    except RuntimeError as e:
        return str(e)


@pytest.fixture(scope="session")
def helm():
    """Fails (VISITORS_REQUIRE_HELM=1) or skips, saying why, when helm-sdkpy cannot be loaded."""
    problem = _helm_problem()
    if problem:
        if os.environ.get("VISITORS_REQUIRE_HELM") == "1":
            pytest.fail(f"VISITORS_REQUIRE_HELM=1 but {problem}", pytrace=False)
        pytest.skip(f"helm-sdkpy not available ({problem}); set VISITORS_REQUIRE_HELM=1 to make this fail")


@functools.cache
def _render_cached(values_json: str, release: str, namespace: str) -> tuple[list[dict], str, tuple]:
    r = helmrender.render(json.loads(values_json), release, namespace)
    docs = [d for d in yaml.safe_load_all(r.manifest) if d]
    return docs, r.notes, tuple(json.dumps(o) for o in r.created)


def render(values: dict | None = None, release: str = RELEASE, namespace: str = NAMESPACE) -> list[dict]:
    """Rendered objects of the chart (CRDs excluded), parsed."""
    return _render_cached(json.dumps(values or {}, sort_keys=True), release, namespace)[0]


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def deployments(docs: list[dict]) -> dict[str, dict]:
    """Deployments keyed by controller key (visitors, backup, restore), from the component label."""
    out = {}
    for d in by_kind(docs, "Deployment").values():
        component = d["metadata"]["labels"]["app.kubernetes.io/component"]
        assert component.endswith("-controller"), f"unexpected component label {component!r}"
        out[component.removesuffix("-controller")] = d
    return out


def container(deployment: dict) -> dict:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, f"{deployment['metadata']['name']}: expected one container, got {len(containers)}"
    return containers[0]


def env_of(deployment: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container(deployment).get("env", [])}


# --- Chart files (no Helm needed) ----------------------------------------------------------


def test_chart_metadata():
    assert CHART_META["apiVersion"] == "v2"
    assert CHART_META["name"] == "visitors-operator"
    assert str(CHART_META["version"]) == "0.1.0"
    assert APP_VERSION == "0.1.0"


def test_chart_crds_equal_deploy_crds():
    """The chart's crds/ is written by crdgen together with deploy/crds/; they must not drift."""
    chart_crds = {p.name: p.read_text() for p in (CHART / "crds").glob("*.yaml")}
    deploy_crds = {p.name: p.read_text() for p in (REPO / "deploy" / "crds").glob("*.yaml")}
    assert deploy_crds, "deploy/crds/ has no CRDs"
    assert sorted(chart_crds) == sorted(deploy_crds), "run `cargo run --bin crdgen`"
    for name in deploy_crds:
        assert chart_crds[name] == deploy_crds[name], f"crds/{name} differs from deploy/crds/{name}: run `cargo run --bin crdgen`"


# Keys whose children are plain Kubernetes fields (documented by Kubernetes), not chart settings.
PASSTHROUGH_KEYS = {"podSecurityContext", "securityContext", "strategy"}


def test_every_value_is_commented():
    """Each chart setting in values.yaml (top level and one level down) has a comment above it."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    parent = None
    missing = []
    for i, line in enumerate(lines):
        m = re.match(r"^( *)([A-Za-z][\w.-]*):", line)
        if not m:
            continue
        indent, key = len(m.group(1)), m.group(2)
        if indent == 0:
            parent = key
        if indent > 2 or (indent == 2 and parent in PASSTHROUGH_KEYS):
            continue
        if i == 0 or not lines[i - 1].lstrip().startswith("#"):
            missing.append(f"line {i + 1}: {line.strip()}")
    assert not missing, "values.yaml settings without a comment above them:\n" + "\n".join(missing)


# --- Lint ----------------------------------------------------------------------------------


def test_lint_is_clean(helm):
    result = helmrender.lint(CHART)
    # Severity: 1 info, 2 warning, 3 error. Info ("icon is recommended") is accepted.
    problems = [m for m in result.get("Messages") or [] if m.get("Severity", 0) >= 2]
    assert result.get("TotalChartsLinted") == 1, result
    assert not problems, (
        "helm lint found warnings or errors (helm-sdkpy drops the text of some; a render "
        f"test shows Helm's full message): {json.dumps(problems)}"
    )
    assert not result.get("Errors"), result


def test_render_reports_helm_errors(helm, tmp_path):
    """The harness must surface a template error, not return an empty render."""
    broken = tmp_path / "chart"
    shutil.copytree(CHART, broken)
    with (broken / "templates" / "service.yaml").open("a") as f:
        f.write("\n{{ .Values.doesNotExist.field }}\n")
    with pytest.raises(RuntimeError, match="doesNotExist"):
        helmrender.render({}, RELEASE, NAMESPACE, broken)


# --- Default render ------------------------------------------------------------------------


def test_default_render_has_one_deployment_per_controller(helm):
    docs = render()
    deps = deployments(docs)
    assert sorted(deps) == sorted(CONTROLLERS)
    for key, d in deps.items():
        assert d["metadata"]["name"] == f"{RELEASE}-{key}-controller"
        assert container(d)["command"] == [f"/usr/local/bin/{key}-controller"], key
        assert container(d)["image"] == DEFAULT_IMAGE, key
        assert d["spec"]["replicas"] == 1, key
        # A standby replica is Ready, so rolling updates work (see values.yaml).
        assert d["spec"]["strategy"] == {"type": "RollingUpdate"}, key
    assert not by_kind(docs, "ServiceMonitor"), "ServiceMonitor must be off by default"


def test_every_object_is_labelled_and_namespaced(helm):
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding"}
    for d in render():
        name = f'{d["kind"]}/{d["metadata"]["name"]}'
        labels = d["metadata"].get("labels", {})
        missing = [label for label in STANDARD_LABELS if label not in labels]
        assert not missing, f"{name} lacks labels {missing}"
        assert labels["app.kubernetes.io/part-of"] == "visitors-operator", name
        assert labels["app.kubernetes.io/version"] == APP_VERSION, name
        if d["kind"] in cluster_scoped:
            assert "namespace" not in d["metadata"], name
        else:
            # Explicit, so that the plain manifests apply without `-n`.
            assert d["metadata"].get("namespace") == NAMESPACE, name


def test_pods_run_non_root_read_only(helm):
    for key, d in deployments(render()).items():
        pod = d["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, key
        assert pod["securityContext"]["runAsUser"] == 65532, key
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, key
        sc = container(d)["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True, key
        assert sc["allowPrivilegeEscalation"] is False, key
        assert sc["capabilities"]["drop"] == ["ALL"], key
        assert "privileged" not in sc or sc["privileged"] is False, key


def test_probes_ports_and_resources(helm):
    for key, d in deployments(render()).items():
        c = container(d)
        assert c["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}], key
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}, key
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}, key
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"], key
        assert c["resources"]["limits"]["memory"], key


def test_default_env(helm):
    for key, d in deployments(render()).items():
        env = env_of(d)
        assert env["WATCH_NAMESPACE"]["value"] == "", key
        assert env["METRICS_ADDRESS"]["value"] == "0.0.0.0:8080", key
        assert env["LOG_FORMAT"]["value"] == "json", key
        assert env["LEADER_ELECTION"]["value"] == "true", key
        assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}, key
        assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}, key
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in env, f"{key}: tracing must be off by default"
        assert "RUST_LOG" not in env, key
        # Every controller starts agent Jobs; the VisitorsApp controller's seed a replicated
        # app's empty server from a backup run.
        assert env["AGENT_IMAGE"]["value"] == DEFAULT_IMAGE, key


def test_env_names_are_the_controllers_flags(helm):
    """The chart's variables must be the ones controllers/common/src/args.rs reads."""
    args_rs = (REPO / "controllers" / "common" / "src" / "args.rs").read_text()
    declared = set(re.findall(r'env = "([A-Z_]+)"', args_rs))
    for key, d in deployments(render()).items():
        for name in ("WATCH_NAMESPACE", "METRICS_ADDRESS", "LOG_FORMAT", "LEADER_ELECTION", "POD_NAME"):
            assert name in env_of(d), f"{key} lacks {name}"
            assert name in declared, f"{name} is set by the chart but not read by args.rs (declared: {sorted(declared)})"


def test_metrics_services_select_the_pods(helm):
    docs = render()
    services = by_kind(docs, "Service")
    for key, d in deployments(docs).items():
        svc = services[f"{RELEASE}-{key}-controller-metrics"]
        pod_labels = d["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= pod_labels.items(), key
        assert d["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"], key
        assert svc["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}], key


def test_service_accounts_exist(helm):
    docs = render()
    sas = by_kind(docs, "ServiceAccount")
    for key, d in deployments(docs).items():
        assert d["spec"]["template"]["spec"]["serviceAccountName"] in sas, key
    assert len(sas) == 3


def test_helm_installs_the_crds_before_the_rest(helm):
    created = [json.loads(o) for o in _render_cached("{}", RELEASE, NAMESPACE)[2]]
    crds = [o["metadata"]["name"] for o in created if o["kind"] == "CustomResourceDefinition"]
    expected = sorted(yaml.safe_load(p.read_text())["metadata"]["name"] for p in (REPO / "deploy" / "crds").glob("*.yaml"))
    assert sorted(crds) == expected
    assert all(o["kind"] == "CustomResourceDefinition" for o in created[: len(crds)]), "CRDs must be created first"
    assert len(created) == len(crds) + len(render()), "Helm sent a different set of objects than it rendered"


def test_notes_render(helm):
    notes = _render_cached("{}", RELEASE, NAMESPACE)[1]
    assert "all namespaces" in notes
    assert "not removed by" in notes and "helm uninstall" in notes


# --- RBAC ----------------------------------------------------------------------------------

WRITE = {"get", "list", "watch", "create", "patch", "update", "delete"}
READ = {"get", "list", "watch"}
LEADER = {"get", "list", "watch", "create", "update", "patch"}
EVENTS = {("events.k8s.io", "events"): {"create", "patch"}}
JOBS = {
    ("batch", "jobs"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "pods"): READ,
    ("", "secrets"): {"get"},
    ("", "persistentvolumeclaims"): {"get"},
    ("coordination.k8s.io", "leases"): LEADER | {"delete"},
}
# What each controller may do in the namespaces it watches: (apiGroup, resource) -> verbs.
WATCHED_RULES = {
    "visitors": {
        ("example.com", "visitorsapps"): {"get", "list", "watch", "patch"},
        ("example.com", "visitorsapps/status"): {"get", "patch"},
        ("example.com", "visitorsapps/finalizers"): {"update"},
        ("", "secrets"): {"get", "create", "patch"},
        # A Service whose clusterIP cannot change in place is deleted and created again.
        ("", "services"): {"get", "list", "watch", "create", "patch", "delete"},
        # A replicated app's claim of diverged transactions is applied (issue 29).
        ("", "persistentvolumeclaims"): {"get", "create", "patch"},
        # A replicated app's MySQL pods: watched, labelled with their role, deleted to restart
        # or re-seed a server; its seeding tokens; the Job copying a diverged server's writes.
        ("", "pods"): {"get", "list", "watch", "patch", "delete"},
        ("", "configmaps"): {"get", "create", "patch"},
        ("batch", "jobs"): {"get", "create"},
        # An empty server behind purged binary logs is loaded from the newest verified run.
        ("example.com", "mysqlbackups"): {"get", "list"},
        ("apps", "statefulsets"): {"get", "list", "watch", "create", "patch"},
        ("apps", "deployments"): {"get", "list", "watch", "create", "patch"},
        # Restores that hold an app's database keep its backend at 0 replicas.
        ("example.com", "mysqlrestores"): READ,
        **EVENTS,
    },
    "backup": {
        ("example.com", "mysqlbackups"): WRITE,
        ("example.com", "mysqlbackups/status"): {"get", "patch", "update"},
        ("example.com", "mysqlbackups/finalizers"): {"update"},
        ("example.com", "visitorsapps"): READ,
        # The database lock reads the run holding it, which may be a restore.
        ("example.com", "mysqlrestores"): {"get"},
        # A schedule's point-in-time archiver runs under its own account and Role (issue 21).
        ("", "serviceaccounts"): {"get", "create", "patch", "delete"},
        ("rbac.authorization.k8s.io", "roles"): {"get", "create", "patch", "delete"},
        ("rbac.authorization.k8s.io", "rolebindings"): {"get", "create", "patch", "delete"},
        **JOBS,
        # A restore drill's throwaway MySQL and the Secret of its root password (issue 22).
        ("", "pods"): READ | {"create", "delete"},
        ("", "secrets"): {"get", "create", "delete"},
        **EVENTS,
    },
    "restore": {
        ("example.com", "mysqlrestores"): {"get", "list", "watch", "patch", "update"},
        ("example.com", "mysqlrestores/status"): {"get", "patch", "update"},
        ("example.com", "mysqlrestores/finalizers"): {"update"},
        ("example.com", "mysqlbackups"): READ,
        ("example.com", "visitorsapps"): READ,
        # A quiescing restore waits for the app's backend to stop.
        ("apps", "deployments"): READ,
        **JOBS,
        **EVENTS,
    },
}
CRD_READ = {("apiextensions.k8s.io", "customresourcedefinitions"): READ}


def permissions(docs: list[dict]) -> dict[str, dict[tuple[str, str, str], set[str]]]:
    """Effective permissions per ServiceAccount: (scope, apiGroup, resource) -> verbs, where
    scope is "*" for a ClusterRoleBinding or the RoleBinding's namespace."""
    roles = {("ClusterRole", None, n): r for n, r in by_kind(docs, "ClusterRole").items()}
    roles |= {("Role", r["metadata"]["namespace"], n): r for n, r in by_kind(docs, "Role").items()}
    perms: dict[str, dict] = {}
    for binding in [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]:
        name = f'{binding["kind"]}/{binding["metadata"]["name"]}'
        scope = "*" if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        ref = binding["roleRef"]
        assert ref["apiGroup"] == "rbac.authorization.k8s.io", name
        role_ns = None if ref["kind"] == "ClusterRole" else binding["metadata"]["namespace"]
        role = roles.get((ref["kind"], role_ns, ref["name"]))
        assert role is not None, f"{name} refers to a missing {ref['kind']} {ref['name']}"
        for subject in binding["subjects"]:
            assert subject["kind"] == "ServiceAccount" and subject["namespace"] == NAMESPACE, name
            sa = perms.setdefault(subject["name"], {})
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        sa.setdefault((scope, group, resource), set()).update(rule["verbs"])
    return perms


def expected_permissions(watch_namespace: str, leader_election: bool = True) -> dict[str, dict]:
    watched = watch_namespace or "*"
    out = {}
    for key, rules in WATCHED_RULES.items():
        perms: dict[tuple[str, str, str], set[str]] = {}

        def add(scope, table):
            for (group, resource), verbs in table.items():
                perms.setdefault((scope, group, resource), set()).update(verbs)

        add(watched, rules)
        add("*", CRD_READ)
        if leader_election:
            add(NAMESPACE, {("coordination.k8s.io", "leases"): LEADER})
        out[f"{RELEASE}-{key}-controller"] = perms
    return out


def assert_permissions(actual: dict, expected: dict) -> None:
    assert sorted(actual) == sorted(expected), "ServiceAccounts with RBAC differ"
    for sa in expected:
        a, e = actual[sa], expected[sa]
        missing = {k: sorted(v - a.get(k, set())) for k, v in e.items() if v - a.get(k, set())}
        extra = {k: sorted(v - e.get(k, set())) for k, v in a.items() if v - e.get(k, set())}
        assert not missing, f"{sa} lacks permissions (scope, group, resource): {missing}"
        assert not extra, f"{sa} has permissions beyond what it needs: {extra}"


def assert_no_wildcards(docs: list[dict]) -> None:
    for role in [d for d in docs if d["kind"] in ("ClusterRole", "Role")]:
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), f'{role["kind"]}/{role["metadata"]["name"]} has "*" in {field}'
            assert "nonResourceURLs" not in rule, role["metadata"]["name"]


def test_rbac_cluster_wide_by_default(helm):
    docs = render()
    assert_no_wildcards(docs)
    assert_permissions(permissions(docs), expected_permissions(""))
    # The leader Lease Role is in the release namespace.
    for role in by_kind(docs, "Role").values():
        assert role["metadata"]["namespace"] == NAMESPACE


def test_rbac_namespaced_when_watching_one_namespace(helm):
    docs = render({"watchNamespace": "team-a"})
    assert_no_wildcards(docs)
    assert_permissions(permissions(docs), expected_permissions("team-a"))
    # Only the CRD readers stay cluster-wide.
    for kind in ("ClusterRole", "ClusterRoleBinding"):
        names = sorted(by_kind(docs, kind))
        assert names and all(n.endswith("-crds") for n in names), f"{kind}s beyond the CRD readers: {names}"
    assert {r["metadata"]["namespace"] for r in by_kind(docs, "Role").values()} == {"team-a", NAMESPACE}
    for key, d in deployments(docs).items():
        assert env_of(d)["WATCH_NAMESPACE"]["value"] == "team-a", key
    assert "namespace team-a" in _render_cached(json.dumps({"watchNamespace": "team-a"}, sort_keys=True), RELEASE, NAMESPACE)[1]


def test_rbac_without_leader_election(helm):
    docs = render({"leaderElection": {"enabled": False}})
    assert_permissions(permissions(docs), expected_permissions("", leader_election=False))
    for key, d in deployments(docs).items():
        assert env_of(d)["LEADER_ELECTION"]["value"] == "false", key


# --- Values --------------------------------------------------------------------------------


@pytest.mark.parametrize("kube_version", ["v1.28.7", "v1.33.0"])
def test_installs_on_every_supported_kubernetes(helm, kube_version):
    """The e2e suite runs on a v1.28 control plane: the chart must not refuse it."""
    assert len(deployments(helmrender.render({}, kube_version=kube_version).manifest_docs())) == 3


def test_refuses_kubernetes_older_than_supported(helm):
    with pytest.raises(RuntimeError, match="kubeVersion|incompatible"):
        helmrender.render({}, kube_version="v1.27.9")


def test_per_controller_metrics_ports(helm):
    """Controllers sharing one network namespace (the test cluster's node) need one port each."""
    values = {"metrics": {"port": 9000}, "backup": {"metricsPort": 18081}, "restore": {"metricsPort": 18082}}
    docs = render(values)
    services = by_kind(docs, "Service")
    for key, port in (("visitors", 9000), ("backup", 18081), ("restore", 18082)):
        d = deployments(docs)[key]
        assert env_of(d)["METRICS_ADDRESS"]["value"] == f"0.0.0.0:{port}", key
        assert container(d)["ports"][0]["containerPort"] == port, key
        assert services[f"{RELEASE}-{key}-controller-metrics"]["spec"]["ports"][0]["port"] == port, key


def test_tracing_sets_the_otlp_endpoint(helm):
    endpoint = "http://jaeger-collector.observability:4318"
    for key, d in deployments(render({"tracing": {"otlpEndpoint": endpoint}})).items():
        assert env_of(d)["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == endpoint, key


def test_a_disabled_controller_renders_nothing(helm):
    docs = render({"backup": {"enabled": False}})
    assert sorted(deployments(docs)) == ["restore", "visitors"]
    leftovers = [f'{d["kind"]}/{d["metadata"]["name"]}' for d in docs if "backup-controller" in d["metadata"]["name"]]
    assert not leftovers, f"objects of the disabled backup controller: {leftovers}"
    assert not [sa for sa in permissions(docs) if "backup-controller" in sa]


def test_replicas(helm):
    deps = deployments(render({"visitors": {"replicas": 2}, "backup": {"replicas": 2}, "restore": {"replicas": 2}}))
    for key, d in deps.items():
        assert d["spec"]["replicas"] == 2, key
        assert env_of(d)["LEADER_ELECTION"]["value"] == "true", key


def test_image_tag_and_agent_image_follow_the_values(helm):
    values = {"image": {"repository": "localhost/visitors-operator", "tag": "dev", "pullPolicy": "Never"}}
    for key, d in deployments(render(values)).items():
        assert container(d)["image"] == "localhost/visitors-operator:dev", key
        assert container(d)["imagePullPolicy"] == "Never", key
        if key != "visitors":
            assert env_of(d)["AGENT_IMAGE"]["value"] == "localhost/visitors-operator:dev", key


def test_per_controller_and_pod_settings(helm):
    values = {
        "logFormat": "text",
        "logLevel": "debug",
        "imagePullSecrets": [{"name": "regcred"}],
        "podAnnotations": {"example.com/a": "1"},
        "podLabels": {"team": "db"},
        "restore": {
            "extraArgs": ["--resync-seconds", "60"],
            "extraEnv": [{"name": "BACKOFF_MAX_SECONDS", "value": "30"}],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "affinity": {"nodeAffinity": {}},
            "resources": {"requests": {"cpu": "10m"}},
        },
    }
    deps = deployments(render(values))
    restore, visitors = deps["restore"], deps["visitors"]
    pod = restore["spec"]["template"]
    assert container(restore)["args"] == ["--resync-seconds", "60"]
    assert env_of(restore)["BACKOFF_MAX_SECONDS"]["value"] == "30"
    assert env_of(restore)["LOG_FORMAT"]["value"] == "text"
    assert env_of(restore)["RUST_LOG"]["value"] == "debug"
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod["spec"]["affinity"] == {"nodeAffinity": {}}
    # Helm merges maps: the cpu request changes, the default memory request and limit stay.
    assert container(restore)["resources"]["requests"] == {"cpu": "10m", "memory": "64Mi"}
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["metadata"]["annotations"] == {"example.com/a": "1"}
    assert pod["metadata"]["labels"]["team"] == "db"
    # Per-controller settings stay with their controller.
    assert "args" not in container(visitors)
    assert "BACKOFF_MAX_SECONDS" not in env_of(visitors)
    assert "nodeSelector" not in visitors["spec"]["template"]["spec"]


def test_service_monitor_toggle(helm):
    docs = render({"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}})
    monitors = by_kind(docs, "ServiceMonitor")
    services = by_kind(docs, "Service")
    assert len(monitors) == 3
    for name, m in monitors.items():
        assert m["metadata"]["labels"]["release"] == "prometheus", name
        assert m["spec"]["endpoints"][0]["port"] == "metrics", name
        # The metrics' namespace and pod labels are the app's and the MySQL server's: Prometheus
        # must not replace them with the controller pod's target labels.
        assert m["spec"]["endpoints"][0]["honorLabels"] is True, name
        selected = [s for s in services.values() if m["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
        assert len(selected) == 1, f"{name} selects {len(selected)} Services"


def test_release_name_prefixes_every_name(helm):
    docs = render(release="vo", namespace="ops")
    for d in docs:
        assert d["metadata"]["name"].startswith("vo-visitors-operator-"), d["metadata"]["name"]
        if d["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert d["metadata"]["namespace"] == "ops"


# --- Plain manifests -----------------------------------------------------------------------


def test_plain_manifests_are_fresh(helm):
    path = REPO / "deploy" / "manifests" / "visitors-operator.yaml"
    assert path.exists(), "deploy/manifests/visitors-operator.yaml is missing: run deploy/generate.sh"
    assert path.read_text() == helmrender.plain_manifests(CHART), (
        "deploy/manifests/visitors-operator.yaml is stale: run deploy/generate.sh"
    )


def test_plain_manifests_content():
    text = (REPO / "deploy" / "manifests" / "visitors-operator.yaml").read_text()
    assert text.startswith("# visitors-operator: plain Kubernetes manifests"), "header comment missing"
    docs = [d for d in yaml.safe_load_all(text) if d]
    assert docs[0] == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    crds = [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == len(list((REPO / "deploy" / "crds").glob("*.yaml")))
    assert [d["kind"] for d in docs[1 : 1 + len(crds)]] == ["CustomResourceDefinition"] * len(crds), "CRDs must come right after the Namespace"
    assert len([d for d in docs if d["kind"] == "Deployment"]) == 3


# --- Values schema -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"logFormat": "yaml"}, "logFormat"),
        ({"backup": {"replica": 2}}, "replica"),  # a typo of "replicas"
        ({"visitors": {"replicas": "two"}}, "replicas"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    ],
)
def test_schema_rejects_bad_values(helm, values, field):
    with pytest.raises(RuntimeError, match=field):
        helmrender.render(values)


# --- Alerts (PrometheusRule) ---------------------------------------------------------------

RULES_FILE = CHART / "files" / "prometheus-rules.yaml"
RUNBOOK_BASE = "https://github.com/visitors-operator/visitors-operator/blob/main/docs/troubleshooting.md"


def rule_file_alerts() -> dict[str, dict]:
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"]}


def rendered_alerts(docs: list[dict]) -> dict[str, dict]:
    rules = by_kind(docs, "PrometheusRule")
    assert len(rules) == 1, f"expected one PrometheusRule, got {sorted(rules)}"
    (rule,) = rules.values()
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def test_prometheus_rule_is_off_by_default(helm):
    assert not by_kind(render(), "PrometheusRule")


def test_the_alerts_of_the_issue_are_in_the_rules_file():
    """A schedule's last backup failed, a schedule overdue, a restore failed, a controller
    failing its reconciles or without a leader (issue 12); a point-in-time archive lagging, with
    a gap, or without its archiver (issue 21); a failed restore drill, and no verified backup for
    too long (issue 22); writes not acknowledged, replication broken or lagging, a failover
    (issue 29); a replica falling behind for good (issue 40); docs link to these names."""
    assert sorted(rule_file_alerts()) == sorted(
        [
            "VisitorsMySQLReplicaFallingBehind",
            "VisitorsMySQLWritesNotAcknowledged",
            "VisitorsMySQLReplicationBroken",
            "VisitorsMySQLReplicationLagging",
            "VisitorsMySQLFailover",
            "VisitorsBackupFailed",
            "VisitorsBackupOverdue",
            "VisitorsBinlogArchiveLagging",
            "VisitorsBinlogArchiveGap",
            "VisitorsBinlogArchiverDown",
            "VisitorsBackupDrillFailed",
            "VisitorsBackupUnverified",
            "VisitorsRestoreFailed",
            "VisitorsControllerReconcileErrors",
            "VisitorsControllerNoLeader",
        ]
    )


def test_prometheus_rule_renders_every_alert_with_severity_summary_description_and_runbook(helm):
    values = {"prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}, "alertLabels": {"team": "db"}}}
    docs = render(values)
    (rule,) = by_kind(docs, "PrometheusRule").values()
    assert rule["metadata"]["name"] == f"{RELEASE}-alerts"
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["metadata"]["labels"]["app.kubernetes.io/component"] == "alerts"
    alerts = rendered_alerts(docs)
    source = rule_file_alerts()
    assert sorted(alerts) == sorted(source)
    for name, alert in alerts.items():
        # The expression and its duration are the file's, untouched by the template.
        assert alert["expr"] == source[name]["expr"], name
        assert alert.get("for") == source[name].get("for"), name
        assert alert["labels"]["severity"] in ("warning", "critical"), name
        assert alert["labels"]["team"] == "db", name
        annotations = alert["annotations"]
        assert annotations["summary"].strip() and annotations["description"].strip(), name
        assert annotations["runbook_url"] == f"{RUNBOOK_BASE}#{name.lower()}", name
        # Prometheus' own templating reaches Prometheus unrendered by Helm.
        assert "{{ $labels." in annotations["summary"] + annotations["description"], name


def test_an_alerts_own_severity_wins_over_alert_labels(helm):
    alerts = rendered_alerts(render({"prometheusRule": {"enabled": True, "alertLabels": {"severity": "page"}}}))
    assert {a["labels"]["severity"] for a in alerts.values()} <= {"warning", "critical"}


def test_runbook_base_url_follows_the_value(helm):
    base = "https://wiki.example.com/visitors"
    alerts = rendered_alerts(render({"prometheusRule": {"enabled": True, "runbookBaseUrl": base}}))
    for name, alert in alerts.items():
        assert alert["annotations"]["runbook_url"] == f"{base}#{name.lower()}", name


def github_anchors(markdown: str) -> set[str]:
    """Anchors GitHub gives the headings of a Markdown page (lower case, punctuation dropped,
    spaces to dashes)."""
    anchors = set()
    for line in markdown.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            text = re.sub(r"[^\w\- ]", "", m.group(1).lower())
            anchors.add(text.replace(" ", "-"))
    return anchors


def test_every_runbook_anchor_exists_in_the_troubleshooting_page():
    page = REPO / "docs" / "troubleshooting.md"
    if not page.exists():
        pytest.skip("docs/troubleshooting.md does not exist yet; the runbook links point at its anchors")
    missing = sorted(name.lower() for name in rule_file_alerts() if name.lower() not in github_anchors(page.read_text()))
    assert not missing, f"docs/troubleshooting.md lacks a heading for the alerts' runbook anchors: {missing}"


# --- Jaeger all-in-one ---------------------------------------------------------------------

JAEGER = f"{RELEASE}-jaeger"


def assert_restricted_pod_security(pod: dict, name: str) -> None:
    """The restricted Pod Security Standard, field by field (the e2e suite also has the API
    server admit the chart's pods under enforce=restricted)."""
    pod_sc = pod.get("securityContext", {})
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(flag), f"{name}: {flag}"
    for volume in pod.get("volumes", []):
        allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
        assert set(volume) - {"name"} <= allowed, f"{name}: volume {volume}"
    for c in pod["containers"] + pod.get("initContainers", []):
        sc = c.get("securityContext", {})
        where = f"{name}/{c['name']}"
        assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, where
        assert sc.get("runAsUser", pod_sc.get("runAsUser", 1)) != 0, where
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {}))
        assert seccomp.get("type") in ("RuntimeDefault", "Localhost"), where
        assert sc.get("allowPrivilegeEscalation") is False, where
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
        assert not sc.get("capabilities", {}).get("add"), where
        assert not sc.get("privileged"), where
        assert all("hostPort" not in p for p in c.get("ports", [])), where


def test_jaeger_is_off_by_default(helm):
    docs = render()
    assert JAEGER not in by_kind(docs, "Deployment") and JAEGER not in by_kind(docs, "Service")


def test_jaeger_all_in_one_receives_the_controllers_traces(helm):
    docs = render({"tracing": {"jaeger": {"enabled": True}}})
    deployment = by_kind(docs, "Deployment")[JAEGER]
    service = by_kind(docs, "Service")[JAEGER]
    for obj in (deployment, service):
        assert obj["metadata"]["namespace"] == NAMESPACE
        assert obj["metadata"]["labels"]["app.kubernetes.io/component"] == "jaeger"
    pod = deployment["spec"]["template"]["spec"]
    assert_restricted_pod_security(pod, JAEGER)
    assert container(deployment)["image"].startswith("jaegertracing/jaeger:2.")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports == {"otlp-grpc": 4317, "otlp-http": 4318, "ui": 16686}
    container_ports = {p["name"]: p["containerPort"] for p in container(deployment)["ports"]}
    assert container_ports == ports
    # The controllers (and, through their environment, the agent Jobs) send to its OTLP/HTTP port.
    endpoint = f"http://{JAEGER}.{NAMESPACE}.svc:{ports['otlp-http']}"
    controllers = {k: d for k, d in by_kind(docs, "Deployment").items() if k != JAEGER}
    assert len(controllers) == 3
    for name, d in controllers.items():
        assert env_of(d)["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == endpoint, name
    notes = _render_cached(json.dumps({"tracing": {"jaeger": {"enabled": True}}}, sort_keys=True), RELEASE, NAMESPACE)[1]
    assert f"port-forward svc/{JAEGER} 16686" in notes and endpoint in notes


def test_an_explicit_otlp_endpoint_wins_over_the_charts_jaeger(helm):
    endpoint = "http://collector.observability:4318"
    docs = render({"tracing": {"otlpEndpoint": endpoint, "jaeger": {"enabled": True}}})
    controllers = [d for d in by_kind(docs, "Deployment").values() if d["metadata"]["name"] != JAEGER]
    assert len(controllers) == 3
    for d in controllers:
        assert env_of(d)["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == endpoint, d["metadata"]["name"]


def test_every_pod_of_the_chart_meets_the_restricted_pod_security_standard(helm):
    docs = render({"tracing": {"jaeger": {"enabled": True}}})
    for name, d in by_kind(docs, "Deployment").items():
        assert_restricted_pod_security(d["spec"]["template"]["spec"], name)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"prometheusRule": {"enable": True}}, "enable"),
        ({"prometheusRule": {"alertLabels": {"team": 1}}}, "team"),
        ({"tracing": {"jaeger": {"enabled": "yes"}}}, "enabled"),
        ({"tracing": {"jaeger": {"image": {"tag": ""}}}}, "tag"),
    ],
)
def test_schema_rejects_bad_observability_values(helm, values, field):
    with pytest.raises(RuntimeError, match=field):
        helmrender.render(values)


def test_rendered_alert_rules_pass_promtool(helm, tmp_path):
    """The PrometheusRule's groups as the chart renders them (runbook links and alert labels
    added) are rules Prometheus' own checker accepts, templates of the annotations included."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("VISITORS_REQUIRE_PROMETHEUS") == "1":
            pytest.fail("VISITORS_REQUIRE_PROMETHEUS=1 but promtool is not installed (Debian: prometheus)", pytrace=False)
        pytest.skip("promtool is not installed (Debian's prometheus package); set VISITORS_REQUIRE_PROMETHEUS=1 to make this fail")
    docs = render({"prometheusRule": {"enabled": True, "alertLabels": {"team": "db"}}})
    (rule,) = by_kind(docs, "PrometheusRule").values()
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    result = subprocess.run([promtool, "check", "rules", str(rules_file)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rule_file_alerts())} rules found" in result.stdout + result.stderr


# --- Grafana dashboard ---------------------------------------------------------------------

DASHBOARD_FILE = CHART / "files" / "grafana-dashboard.json"
DASHBOARD_KEY = "visitors-operator.json"
DASHBOARD_ROWS = ["Apps", "Backups and drills", "Point-in-time archiving", "Restores", "Controllers' health"]
MONITORING = REPO / "docs" / "monitoring.md"
# The words of PromQL the dashboard's queries use (functions, aggregations, keywords); any other
# word of a query is taken for a metric name, which the controllers must export: a new function
# joins this list on purpose rather than passing unchecked as a metric.
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "rate", "increase", "histogram_quantile", "time",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
}


def dashboard() -> dict:
    return json.loads(DASHBOARD_FILE.read_text())


def dashboard_panels(board: dict) -> list[dict]:
    """Every panel, rows included, in order (a collapsed row holds its panels inside)."""
    out = []
    for panel in board["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def query_panels(board: dict) -> list[dict]:
    return [p for p in dashboard_panels(board) if p["type"] != "row"]


def registered_metric_names() -> set[str]:
    """The names (after the visitors_operator_ prefix, before any suffix) the controllers
    register, read from their metrics modules, without the modules' tests."""
    names = set()
    for path in [REPO / "controllers" / "common" / "src" / "metrics.rs", *REPO.glob("controllers/*/src/metrics.rs")]:
        code = path.read_text().split("#[cfg(test)]")[0]
        names.update(re.findall(r'\.register\(\s*"([a-z_]+)"', code))
    return names


def documented_metrics() -> dict[str, tuple[str, set[str]]]:
    """Metric name -> (type, label names), from the tables of docs/monitoring.md."""
    out = {}
    for name, kind, labels in re.findall(r"^\| `(visitors_operator_\w+)` \| (\w+) \| ([^|]*) \|", MONITORING.read_text(), re.M):
        out[name] = (kind, set(re.findall(r"`(\w+)`", labels)))
    return out


def exported_series() -> dict[str, set[str]]:
    """Every sample name the controllers export -> its label names: each metric the code
    registers, with the suffixes its type (from docs/monitoring.md) gives it."""
    documented = documented_metrics()
    out = {}
    for base in registered_metric_names():
        name = next((n for n in (f"visitors_operator_{base}", f"visitors_operator_{base}_total") if n in documented), None)
        assert name, f"the controllers register {base} but docs/monitoring.md does not list it"
        kind, labels = documented[name]
        if kind == "histogram":
            out |= {f"{name}_bucket": labels | {"le"}, f"{name}_sum": labels, f"{name}_count": labels}
        else:
            assert kind in ("counter", "gauge"), f"{name}: type {kind}"
            out[name] = labels
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: every word left once strings, matchers,
    ranges, label lists and numbers are taken out, that is not one of PROMQL_WORDS."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "{}", text)
    text = re.sub(r"\[[^\]]*\]", "[]", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", text)
    text = re.sub(r"(?<![\w.])\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", "0", text)
    return {word for word in re.findall(r"[A-Za-z_:][\w:]*", text) if word not in PROMQL_WORDS}


def test_metric_names_are_found_in_every_shape_of_query():
    expr = 'sum by (le, namespace) (rate(a_bucket{namespace=~"$namespace", x="b c"}[$__rate_interval])) / on (namespace) b * 1e3 > 0.25'
    assert metric_names(expr) == {"a_bucket", "b"}
    # A word the list does not know is a metric name, which then fails the check below.
    assert metric_names("clamp_min(up, 1)") == {"clamp_min", "up"}
    series = exported_series()
    assert len(series) >= 30, sorted(series)
    assert {"visitors_operator_reconciles_total", "visitors_operator_backup_size_bytes_bucket"} <= set(series)
    assert "le" in series["visitors_operator_reconcile_duration_seconds_bucket"]
    assert "visitors_operator_reconciles" not in series, "a counter's samples end in _total"


def test_grafana_dashboard_is_off_by_default(helm):
    assert not by_kind(render(), "ConfigMap")


def test_grafana_dashboard_is_a_configmap_for_the_sidecar(helm):
    docs = render({"grafana": {"dashboard": {"enabled": True}}})
    maps = by_kind(docs, "ConfigMap")
    assert sorted(maps) == [f"{RELEASE}-dashboard"]
    (configmap,) = maps.values()
    assert configmap["metadata"]["namespace"] == NAMESPACE
    labels = configmap["metadata"]["labels"]
    assert labels["grafana_dashboard"] == "1"
    assert labels["app.kubernetes.io/component"] == "dashboard"
    assert all(label in labels for label in STANDARD_LABELS)
    assert "annotations" not in configmap["metadata"]
    assert list(configmap["data"]) == [DASHBOARD_KEY]
    assert json.loads(configmap["data"][DASHBOARD_KEY]) == dashboard(), "the ConfigMap holds the file as is"
    notes = _render_cached(json.dumps({"grafana": {"dashboard": {"enabled": True}}}, sort_keys=True), RELEASE, NAMESPACE)[1]
    assert f"ConfigMap {RELEASE}-dashboard in namespace {NAMESPACE}" in notes


def test_grafana_dashboard_label_namespace_and_annotations_follow_the_values(helm):
    values = {"grafana": {"dashboard": {
        "enabled": True, "label": "example.com/dashboard", "labelValue": "visitors", "namespace": "monitoring",
        "annotations": {"grafana_folder": "Databases"}, "labels": {"team": "db"},
    }}}
    (configmap,) = by_kind(render(values), "ConfigMap").values()
    metadata = configmap["metadata"]
    assert metadata["namespace"] == "monitoring"
    assert metadata["labels"]["example.com/dashboard"] == "visitors"
    assert metadata["labels"]["team"] == "db"
    assert "grafana_dashboard" not in metadata["labels"]
    assert metadata["annotations"] == {"grafana_folder": "Databases"}


def test_grafana_dashboard_has_a_row_per_concern_and_a_query_in_every_panel():
    board = dashboard()
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 30
    panels = dashboard_panels(board)
    assert [p["title"] for p in panels if p["type"] == "row"] == DASHBOARD_ROWS
    assert panels[0]["type"] == "row", "every panel is under a row"
    for above, below in zip(panels, panels[1:]):
        assert not (above["type"] == "row" and below["type"] == "row"), f"row {above['title']} is empty"
    assert panels[-1]["type"] != "row", f"row {panels[-1]['title']} is empty"
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in query_panels(board):
        title = panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, title
        assert panel.get("description"), f"{title}: no description"
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, title
        assert panel["targets"], f"{title}: no query"
        for target in panel["targets"]:
            assert target["expr"].strip(), f"{title}: an empty query"
            assert target["datasource"] == panel["datasource"], title


def test_grafana_dashboard_variables_are_the_datasource_and_the_namespace():
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert sorted(variables) == ["datasource", "namespace"]
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    namespace = variables["namespace"]
    assert namespace["datasource"]["uid"] == "${datasource}"
    assert namespace["query"]["query"] == namespace["definition"]
    assert re.fullmatch(r'label_values\(\{__name__=~"visitors_operator_\.\+"\}, namespace\)', namespace["definition"])
    assert namespace["multi"] and namespace["includeAll"] and namespace["allValue"] == ".*"


def test_every_dashboard_query_reads_only_metrics_the_controllers_export():
    series = exported_series()
    problems = []
    for panel in query_panels(dashboard()):
        for target in panel["targets"]:
            used = metric_names(target["expr"])
            if not used:
                problems.append(f"{panel['title']}: reads no metric: {target['expr']}")
            problems += [f"{panel['title']}: {name} is not exported" for name in sorted(used - set(series))]
    assert not problems, "\n".join(problems)


def test_every_namespaced_metric_of_the_dashboard_follows_the_namespace_variable():
    series = exported_series()
    unfiltered = []
    for panel in query_panels(dashboard()):
        for target in panel["targets"]:
            for name, matchers in re.findall(r"(visitors_operator_\w+)\s*(\{[^}]*\})?", target["expr"]):
                if "namespace" in series.get(name, set()) and 'namespace=~"$namespace"' not in matchers:
                    unfiltered.append(f"{panel['title']}: {name}{matchers}")
    assert not unfiltered, "queries of namespaced metrics without namespace=~\"$namespace\":\n" + "\n".join(unfiltered)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"grafana": {"dashboard": {"enabled": "yes"}}}, "enabled"),
        ({"grafana": {"dashbord": {"enabled": True}}}, "dashbord"),
        ({"grafana": {"dashboard": {"label": ""}}}, "label"),
        ({"grafana": {"dashboard": {"annotations": {"grafana_folder": 1}}}}, "grafana_folder"),
    ],
)
def test_schema_rejects_bad_dashboard_values(helm, values, field):
    with pytest.raises(RuntimeError, match=field):
        helmrender.render(values)
