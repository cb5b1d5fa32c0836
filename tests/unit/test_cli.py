"""The ``rlpulse`` command line: version, the catalog, and the generated metric reference."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rlpulse import __version__, catalog
from rlpulse.stack.docs import reference

ROOT = Path(__file__).resolve().parents[2]


def _rlpulse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlpulse.cli", *args], capture_output=True, text=True, check=False
    )


def test_version() -> None:
    out = _rlpulse("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"rlpulse {__version__}"


def test_catalog_json_lists_every_metric_with_its_fields() -> None:
    out = _rlpulse("catalog", "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["name"] for r in rows] == [m.name for m in catalog.CATALOG]
    for row in rows:
        assert {"name", "type", "unit", "help", "labels", "layer", "aliases"} <= set(row)
        assert row["type"] in {"counter", "gauge", "histogram", "info"}
        assert row["layer"] in {"system", "rl", "task", "meta", "self"}
    by_name = {r["name"]: r for r in rows}
    assert "train/entropy_loss" in by_name["rl_entropy"]["aliases"]
    assert by_name["rl_gpu_utilization_ratio"]["labels"] == ["gpu", "uuid", "model"]


def test_catalog_follows_the_naming_conventions() -> None:
    for m in catalog.CATALOG:
        assert m.name.startswith("rlpulse_" if m.layer == "self" else "rl_"), m.name
        assert m.name.endswith("_total") == (m.type == "counter"), m.name
        if m.unit in ("seconds", "bytes", "watts", "celsius", "hertz", "ratio"):
            assert f"_{m.unit}" in m.name, m.name
        assert m.help.endswith("."), m.name
        assert not set(m.labels) & set(catalog.IDENTITY_LABELS), m.name
        assert (m.type == "histogram") == bool(m.buckets), m.name
    assert len(catalog.BY_NAME) == len(catalog.CATALOG)


def test_docs_metrics_md_is_fresh() -> None:
    committed = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    stale = "docs/reference/metrics.md is stale: run `rlpulse generate`"
    assert committed == reference.as_markdown(), stale


def test_unknown_subcommand_is_a_usage_error() -> None:
    out = _rlpulse("nope")
    assert out.returncode == 2 and "invalid choice" in out.stderr
