"""The catalog as data for tools (JSON) and as the generated metric reference (Markdown)."""

from __future__ import annotations

import json
from typing import Any

from rlpulse import catalog, keys
from rlpulse.catalog import IDENTITY_LABELS, Metric

LAYER_TITLES = {
    "system": "System: GPUs, host, throughput, timing, liveness",
    "rl": "RL: reward, divergence, entropy, advantages, losses",
    "task": "Task: evaluation, responses, episodes",
    "meta": "Run metadata",
    "self": "Exporter health",
}


def _aliases(metric: Metric) -> list[str]:
    return list(keys.aliases(metric.name))


def entries() -> list[dict[str, Any]]:
    """One object per metric: name, type, unit, help, labels, layer, aliases, buckets."""
    return [
        {
            "name": m.name,
            "type": m.type,
            "unit": m.unit,
            "help": m.help,
            "labels": list(m.labels),
            "layer": m.layer,
            "aliases": _aliases(m),
            **({"buckets": list(m.buckets)} if m.buckets else {}),
        }
        for m in catalog.CATALOG
    ]


def as_json() -> str:
    """The catalog as a JSON list (``rlpulse catalog --format json``)."""
    return json.dumps(entries(), indent=2) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def as_markdown() -> str:
    """docs/reference/metrics.md: the metric reference, one table per layer."""
    lines = [
        "# Metric reference",
        "",
        "Generated from `src/rlpulse/catalog.py` by `rlpulse catalog --format markdown`;",
        "do not edit by hand. Every series also carries the identity labels "
        + ", ".join(f"`{lbl}`" for lbl in IDENTITY_LABELS)
        + " (plus `job`/`instance` from the scrape). Histograms expose `_bucket`, `_sum` and",
        "`_count`. *Aliases* are the framework keys that `rlpulse.log()` maps onto the metric",
        "(see [frameworks.md](frameworks.md)).",
        "",
    ]
    for layer, title in LAYER_TITLES.items():
        rows = [e for e in entries() if e["layer"] == layer]
        lines += [f"## {title}", "", "| metric | type | unit | labels | description | aliases |"]
        lines.append("|---|---|---|---|---|---|")
        for e in rows:
            aliases = ", ".join(f"`{a}`" for a in e["aliases"][:12])
            if len(e["aliases"]) > 12:
                aliases += f" … (+{len(e['aliases']) - 12})"
            labels = ", ".join(f"`{lbl}`" for lbl in e["labels"])
            lines.append(
                f"| `{e['name']}` | {e['type']} | {e['unit']} | {labels} | "
                f"{_cell(e['help'])} | {_cell(aliases)} |"
            )
        lines.append("")
    return "\n".join(lines)
