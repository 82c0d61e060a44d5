"""Checks that the user documentation says what the code does.

- docs/reference.md is what docs/tools/crdref.py generates from deploy/crds.
- docs/troubleshooting.md explains every reason the controllers can set (condition reasons,
  Event reasons, the `error` label of failed reconciles), and none they cannot.
- docs/monitoring.md lists every metric the controllers register.
- Links between the documents point at files and headings that exist; no document names a
  path of a developer's machine.
- Every file of deploy/examples/ is in README.md's list and named by a document of docs/.

How reasons are found: every CamelCase string literal in the non-test Rust code of api/src
and controllers/*/src is a reason unless NOT_REASONS says what else it is. This fails closed:
a new reason, however it reaches a condition or an Event (a constant, a struct field, an
argument, a tuple), is a new literal somewhere, and the test fails until troubleshooting.md
explains it or NOT_REASONS names it as something else.

Run:  python -m pytest docs/tests -q     (from the repository root)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "docs" / "tools"))
import crdref  # noqa: E402

DOCS = REPO / "docs"
TROUBLESHOOTING = DOCS / "troubleshooting.md"
MONITORING = DOCS / "monitoring.md"
SOURCE_DIRS = ["api/src", *sorted(str(p.relative_to(REPO)) for p in (REPO / "controllers").glob("*/src"))]
# The mock API server of the unit tests: compiled into the crate, but never runs in a controller.
TEST_SUPPORT_FILES = {"controllers/common/src/testing.rs"}

# CamelCase literals of the controllers that are not reasons, and what they are instead.
NOT_REASONS = {
    # kinds and type names (in CRD attributes and lock holders)
    **dict.fromkeys(["VisitorsApp", "VisitorsAppStatus", "MySQLBackup", "MySQLBackupStatus", "MySQLRestore",
                     "MySQLRestoreStatus", "PartialEq", "Default", "StatefulSet", "Deployment", "Service", "Job",
                     "Lease", "Role", "RoleBinding", "ServiceAccount", "Pod", "Secret", "KeyedCertificate",
                     "ServingTls"],
                    "a kind or a Rust type name"),
    # condition types that are never a reason (Ready and Quiesced are both)
    **dict.fromkeys(["BackendReady", "DatabaseReady", "FrontendReady", "LastBackupSucceeded", "ScheduleValid",
                     "Pending", "Deleting", "WritesAcknowledged", "ReplicaFallingBehind"], "a condition type or a phase"),
    **dict.fromkeys(["True", "False", "Unknown"], "a condition status"),
    # printer column names (CRD attributes)
    **dict.fromkeys(["Active", "Age", "App", "Backend", "Duration", "Error", "Last", "LastBackup", "LastSuccessful", "Next",
                     "Method", "Phase", "Reason", "Recoverable", "Rows", "Size", "Primary", "Replicas", "TakenFrom"], "a printer column"),
    # the `action` of an Event (its reason is another argument)
    **dict.fromkeys(["Apply", "Backup", "Create", "CreateJob", "Delete", "GrowClaim", "Quiesce", "Reconcile",
                     "Recreate", "RepairLists", "Restore", "Retention", "Schedule", "Start", "Validate", "DeleteStorage",
                     "Verify", "Drill", "RenewCertificate"], "an Event action"),
    # values of Kubernetes objects the controllers read or write
    **dict.fromkeys(["Complete", "DeletionByPodGC", "DeletionByTaintManager", "DisruptionTarget", "Evicted", "OOMKilled",
                     "PreemptionByScheduler", "Never", "RuntimeDefault", "File", "Opaque", "ClusterIP", "NodePort",
                     "ReadWriteOnce", "OnDelete", "Retain", "None", "Credentials", "Target", "OnRootMismatch",
                     "Required", "Disabled", "Parallel", "OrderedReady", "Yes", "Connecting", "FallbackToLogsOnError"],
                    "a Kubernetes field value, label or enum value"),
    # values of the API's enums that the controllers write into annotations and read back
    **dict.fromkeys(["Replica"], "an enum value of the API (a backup's server role)"),
    **dict.fromkeys(["Ei", "Gi", "Ki", "Mi", "Pi", "Ti"], "a quantity suffix"),
}

# The chart's alert rules: every alert's runbook_url points at its section of troubleshooting.md.
ALERT_RULES = REPO / "helm" / "visitors-operator" / "files" / "prometheus-rules.yaml"

CAMEL = re.compile(r"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")


# --- A small Rust lexer: string literals, comments, test items -----------------------------


def lex(source: str) -> tuple[str, list[tuple[int, str]]]:
    """Returns the code with comments and literal contents blanked (same length), and every
    string literal as (offset, value). Handles //, nested /* */, "..." with escapes, r#"..."#,
    b"...", and char literals versus lifetimes."""
    code = list(source)
    strings: list[tuple[int, str]] = []
    i, n = 0, len(source)

    def blank(start: int, end: int) -> None:
        for k in range(start, end):
            if code[k] != "\n":
                code[k] = " "

    while i < n:
        c = source[i]
        if source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif source.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if source.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif source.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(source, i)) and (i == 0 or not (source[i - 1].isalnum() or source[i - 1] == "_")):
            close = '"' + m.group(1)
            end = source.find(close, m.end())
            strings.append((i, source[m.end():end]))
            blank(m.end(), end)
            i = end + len(close)
        elif c == '"':
            j, value = i + 1, []
            while source[j] != '"':
                if source[j] == "\\":
                    value.append(source[j : j + 2])
                    j += 2
                else:
                    value.append(source[j])
                    j += 1
            strings.append((i, "".join(value)))
            blank(i + 1, j)
            i = j + 1
        elif c == "'":
            if source.startswith("\\", i + 1):  # '\n', '\'', '\u{..}'
                i = source.find("'", i + 3) + 1
            elif i + 2 < n and source[i + 2] == "'":  # 'x'
                blank(i + 1, i + 2)
                i += 3
            else:  # a lifetime or a label
                i += 1
        else:
            i += 1
    return "".join(code), strings


def cfg_test_ranges(code: str) -> list[tuple[int, int]]:
    """Offsets of the items under #[cfg(test)] (a module or a function), in blanked code."""
    ranges = []
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue  # `mod tests;`: the file itself is under tests/ or named *_tests.rs
        depth, j = 0, brace
        while j < len(code):
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
            if depth == 0:
                break
        ranges.append((m.start(), j))
    return ranges


def literals_outside_tests(source: str) -> list[str]:
    code, strings = lex(source)
    tests = cfg_test_ranges(code)
    return [value for offset, value in strings if not any(a <= offset < b for a, b in tests)]


def camel_literals(source: str) -> set[str]:
    return {s for s in literals_outside_tests(source) if CAMEL.match(s)}


def rust_files() -> list[Path]:
    files = []
    for folder in SOURCE_DIRS:
        files.extend(p for p in sorted((REPO / folder).rglob("*.rs")) if str(p.relative_to(REPO)) not in TEST_SUPPORT_FILES)
    return files


def code_reasons() -> dict[str, list[str]]:
    """Every reason the code can set, with the files it appears in."""
    found: dict[str, list[str]] = {}
    for path in rust_files():
        for literal in camel_literals(path.read_text()):
            if literal not in NOT_REASONS:
                found.setdefault(literal, []).append(str(path.relative_to(REPO)))
    return found


def documented_reasons() -> list[str]:
    return re.findall(r"^###\s+`(\w+)`\s*$", TROUBLESHOOTING.read_text(), re.MULTILINE)


# --- The extractor itself -------------------------------------------------------------------

SAMPLE = r'''
pub const REASON_A: &str = "ConstReason";
// a comment with "InComment"
/* a block with "InBlock" /* nested "InNested" */ still "InBlock2" */
fn f<'a>(x: &'a str) -> Desired<'a> {
    let url = "http://example.com/"; let b = "AfterUrl";
    let q = '"'; let e = '\''; let after_chars = "AfterChars";
    wait("ArgReason", format!("{x}"));
    let raw = r#"RawReason"#;
    let pair = ("TupleReason", String::new());
    Desired { type_: READY, status: Status::False, reason: "FieldReason", message: "not Camel".into() }
}
#[cfg(test)]
mod tests {
    fn t() { assert_eq!(x, "OnlyInTests"); let s = "{nested}"; }
}
fn after_tests() -> &'static str { "AfterTests" }
'''


def test_extractor_finds_every_shape_and_skips_comments_and_tests():
    assert camel_literals(SAMPLE) == {
        "ConstReason", "AfterUrl", "AfterChars", "ArgReason", "RawReason", "TupleReason", "FieldReason", "AfterTests",
    }


def test_extractor_sees_reasons_of_every_crate_and_shape():
    found = code_reasons()
    # One of each way a reason is written, from each place reasons come from.
    for reason in ("InvalidSpec", "WaitingForDatabaseLock", "NodeLost", "AgentFailed", "BackupFailed",
                   "WaitingForMysqlPod", "InvalidSchedule", "Forbidden", "Quiesced", "BackendStopped"):
        assert reason in found, f"the extraction no longer finds {reason}: was it renamed, or is the lexer broken?"


# --- Troubleshooting -----------------------------------------------------------------------


def test_every_reason_the_code_sets_is_explained():
    documented = set(documented_reasons())
    missing = {r: files for r, files in code_reasons().items() if r not in documented}
    assert not missing, (
        "docs/troubleshooting.md does not explain these reasons (add a `### `Reason`` section, or, if one is not "
        f"a reason, add it to NOT_REASONS in docs/tests/test_docs.py saying what it is): {missing}"
    )


def test_troubleshooting_explains_only_real_reasons_once_each():
    documented = documented_reasons()
    duplicates = sorted({r for r in documented if documented.count(r) > 1})
    assert not duplicates, f"explained twice in docs/troubleshooting.md: {duplicates}"
    stale = sorted(set(documented) - set(code_reasons()))
    assert not stale, f"docs/troubleshooting.md explains reasons the code never sets: {stale}"


def test_a_literal_is_either_a_reason_or_not():
    both = sorted(set(NOT_REASONS) & set(documented_reasons()))
    assert not both, f"explained in docs/troubleshooting.md but listed in NOT_REASONS: {both}"


def alert_names() -> list[str]:
    import yaml  # noqa: PLC0415

    if not ALERT_RULES.exists():
        return []
    groups = yaml.safe_load(ALERT_RULES.read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]


def test_alert_rules_are_found():
    if not ALERT_RULES.exists():
        pytest.skip(f"{ALERT_RULES.relative_to(REPO)} does not exist: the chart ships no alerts yet")
    assert len(alert_names()) >= 5, f"fewer alerts than expected in {ALERT_RULES.relative_to(REPO)}: {alert_names()}"


@pytest.mark.parametrize("alert", alert_names())
def test_every_alert_has_a_runbook(alert):
    sections = re.split(r"^### ", TROUBLESHOOTING.read_text(), flags=re.MULTILINE)
    body = next((s for s in sections if s.split("\n", 1)[0].strip() == alert), None)
    assert body is not None, f"docs/troubleshooting.md has no section `### {alert}` (anchor #{alert.lower()})"
    assert len(body.split()) > 40, f"the runbook of {alert} is too short to help"
    assert f"| {alert} |" in MONITORING.read_text(), f"docs/monitoring.md's table of alerts lacks {alert}"


# --- Reference and metrics -----------------------------------------------------------------


def test_reference_is_fresh():
    path = DOCS / "reference.md"
    assert path.exists(), "docs/reference.md is missing: run python docs/tools/crdref.py --write"
    assert path.read_text() == crdref.reference(), "docs/reference.md is stale: run python docs/tools/crdref.py --write"


def test_reference_lists_every_field():
    import yaml  # noqa: PLC0415

    text = (DOCS / "reference.md").read_text()
    for crd_path in sorted((REPO / "deploy" / "crds").glob("*.yaml")):
        crd = yaml.safe_load(crd_path.read_text())
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for name in schema["properties"]["spec"]["properties"]:
            assert f"| `{name}` |" in text, f"{crd['spec']['names']['kind']}.spec.{name} is not in docs/reference.md"


def registered_metrics() -> set[str]:
    names = set()
    for path in rust_files():
        code, _ = lex(path.read_text())
        kept = path.read_text()
        for a, b in cfg_test_ranges(code):
            kept = kept[:a] + " " * (b - a) + kept[b:]
        names.update(re.findall(r"\.register\(\s*\"([a-z_]+)\"", kept))
    return names


def test_monitoring_lists_every_metric():
    names = registered_metrics()
    assert {"reconciles", "reconcile_failures", "backup_runs"} <= names, f"metric extraction broken: {names}"
    text = MONITORING.read_text()
    missing = sorted(n for n in names if f"`visitors_operator_{n}" not in text)
    assert not missing, f"docs/monitoring.md does not list visitors_operator_ metrics {missing}"


# --- Links and paths -----------------------------------------------------------------------


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    headings = {slug(h) for h in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.MULTILINE)}
    return headings | set(re.findall(r'<a id="([^"]+)"></a>', text))


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_links_resolve(document):
    text = re.sub(r"```.*?```", "", document.read_text(), flags=re.DOTALL)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto
        file_part, _, anchor = target.partition("#")
        linked = (document.parent / file_part).resolve() if file_part else document
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(target)
    assert not broken, f"{document.relative_to(REPO)}: broken links {broken}"


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_path_of_this_machine(document):
    text = document.read_text()
    found = re.findall(r"(?:/work/|/home/\w+|/root/|/tmp/bash_jobs)[^\s)`]*", text)
    assert not found, f"{document.relative_to(REPO)} names paths of a machine: {found}"


# --- Examples ------------------------------------------------------------------------------


def example_files() -> list[str]:
    return sorted(p.name for p in (REPO / "deploy" / "examples").glob("*.yaml"))


def test_readme_lists_every_example():
    readme = (REPO / "README.md").read_text()
    missing = [f for f in example_files() if f"](deploy/examples/{f})" not in readme]
    assert not missing, f"README.md's list of examples lacks {missing}"


@pytest.mark.parametrize("example", example_files())
def test_every_example_is_named_where_its_feature_is_described(example):
    named_in = [d.name for d in sorted(DOCS.glob("*.md")) if f"deploy/examples/{example}" in d.read_text()]
    assert named_in, f"no document of docs/ names deploy/examples/{example}"
