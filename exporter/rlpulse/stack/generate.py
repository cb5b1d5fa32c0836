"""Everything ``rlpulse generate`` writes, as one mapping of relative path -> text.

Prometheus config and rules, their promtool tests, Alertmanager config and templates, the Grafana
dashboards, provisioning and docker-compose.yml (``rlpulse.stack.dashboards``), the generated
docs (runbooks, configuration, the metric reference and the framework key maps) and, with
``kubernetes=True``, the prometheus-operator manifests (``rlpulse.stack.kubernetes``). ``drift``
compares a directory with it for ``--check``.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from rlpulse import keys, reference
from rlpulse.stack import alertmanager, configdoc, prometheus, rules, ruletests, runbooks
from rlpulse.stack.config import Config

# Directories whose every file of these kinds is generated: a file there that the source no
# longer generates is stale (reported by --check, removed by a write).
KUBERNETES_DIR = "kubernetes"
OWNED_DIRS: dict[str, tuple[str, ...]] = {
    "prometheus/rules": (".yml",),
    "prometheus/tests": (".yml",),
    "alertmanager/templates": (".tmpl",),
    "grafana/dashboards": (".json",),
    KUBERNETES_DIR: (".yaml",),
}
# Owned directories written only on request (``--kubernetes``): owned only when generated, so a
# plain ``rlpulse generate`` neither reports nor removes them.
OPTIONAL_DIRS = frozenset({KUBERNETES_DIR})


def render(cfg: Config, *, kubernetes: bool = False) -> dict[str, str]:
    """Relative path -> text of every generated file for ``cfg`` (and the Kubernetes manifests
    when ``kubernetes``)."""
    files: dict[str, str] = {}
    files.update(prometheus.render(cfg))
    rule_files = rules.render(cfg)
    files.update(rule_files)
    if rule_files == rules.render(Config()):  # the unit tests are written for the defaults
        files.update(ruletests.render(cfg))
    files.update(alertmanager.render(cfg))
    files.update(runbooks.render(cfg))
    files.update(configdoc.render())
    files["docs/metrics.md"] = reference.as_markdown()
    files["docs/frameworks.md"] = keys.markdown()
    # imported here: the dashboards pull in grafana-foundation-sdk, which the rules do not need
    dashboards = importlib.import_module("rlpulse.stack.dashboards")
    files.update(dashboards.render(cfg))
    if kubernetes:
        files.update(importlib.import_module("rlpulse.stack.kubernetes").render(cfg))
    return dict(sorted(files.items()))


def _stale(files: dict[str, str], out: Path) -> list[str]:
    stale = []
    for sub, suffixes in OWNED_DIRS.items():
        folder = out / sub
        if not folder.is_dir():
            continue
        if sub in OPTIONAL_DIRS and not any(rel.startswith(f"{sub}/") for rel in files):
            continue
        for p in sorted(folder.iterdir()):
            rel = p.relative_to(out).as_posix()
            if p.is_file() and p.suffix in suffixes and rel not in files:
                stale.append(rel)
    return stale


def drift(files: dict[str, str], out: Path) -> list[str]:
    """Paths under ``out`` that differ from ``files``, are missing, or are stale."""
    changed = [
        rel
        for rel, text in files.items()
        if not (out / rel).is_file() or (out / rel).read_text(encoding="utf-8") != text
    ]
    return changed + _stale(files, out)


def write(files: dict[str, str], out: Path) -> list[str]:
    """Write ``files`` under ``out`` (only those that changed) and remove stale ones; the paths
    written or removed."""
    touched = []
    for rel in _stale(files, out):
        (out / rel).unlink()
        touched.append(rel)
    for rel, text in files.items():
        path = out / rel
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        touched.append(rel)
    return touched
