"""The krew manifest template (.krew.yaml) is a valid krew Plugin once krew-release-bot has
filled it, and names the binary the workspace builds.

Run:  python -m pytest docs/tests -q     (from the repository root)
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / ".krew.yaml"


def filled(tag: str = "v0.1.0") -> dict:
    """The manifest as krew-release-bot renders it for `tag` (a made-up digest)."""
    text = TEMPLATE.read_text().replace("{{ .TagName }}", tag)
    text = re.sub(
        r'\{\{addURIAndSha "([^"]+)" [^}]+\}\}',
        lambda m: f"uri: {m.group(1)}\n    sha256: {'ab' * 32}",
        text,
    )
    assert "{{" not in text, "a template action krew-release-bot does not know"
    return yaml.safe_load(text)


def test_the_manifest_is_a_krew_plugin_for_the_workspace_binary():
    plugin = filled()
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert plugin["kind"] == "Plugin"
    assert plugin["metadata"]["name"] == "visitors", "kubectl visitors"
    spec = plugin["spec"]
    assert spec["version"] == "v0.1.0"
    assert len(spec["shortDescription"]) <= 255
    cargo = (REPO / "kubectl-visitors" / "Cargo.toml").read_text()
    binary = re.search(r'\[\[bin\]\]\s*name = "([^"]+)"', cargo).group(1)
    assert binary == "kubectl-visitors"
    assert spec["platforms"], "at least one platform"
    for platform in spec["platforms"]:
        assert platform["bin"] == binary
        assert platform["uri"].endswith(".tar.gz") and "v0.1.0" in platform["uri"]
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert set(platform["selector"]["matchLabels"]) == {"os", "arch"}
