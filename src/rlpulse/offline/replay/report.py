"""Replay results as text (the terminal), JSON, Markdown (charts as PNG files beside it) or
HTML (charts embedded)."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Sequence
from pathlib import Path

from rlpulse.offline.replay import ReplayResult, run_id_of
from rlpulse.offline.replay.charts import chart_png
from rlpulse.offline.replay.onsets import AlertOnset

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")  # a run_id as part of a file name ("run/DQN #2")
HEADERS = ("alert", "severity", "labels", "onset step", "value at onset", "firing", "episodes")


def _labels(a: AlertOnset) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(a.labels.items()))


def _value(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"


def _duration(secs: float) -> str:
    if secs >= 3600:
        return f"{secs / 3600:.1f}h"
    return f"{secs / 60:.0f}m" if secs >= 60 else f"{secs:.0f}s"


def rows(result: ReplayResult) -> list[tuple[str, ...]]:
    """The alert table of one run, one row per alert (name, severity, labels)."""
    return [
        (
            a.alert,
            a.severity,
            _labels(a),
            "" if a.onset_step is None else str(a.onset_step),
            _value(a.value),
            _duration(a.firing_seconds(result.eval_interval)),
            str(len(a.intervals)),
        )
        for a in result.alerts
    ]


def summary(result: ReplayResult) -> str:
    """One paragraph: what was replayed, over how long."""
    tl = result.timeline
    run = "" if result.run_id == run_id_of(result.log) else f" run {result.run_id}"
    scaled = "" if result.time_scale == 1 else f" (compressed x{1 / result.time_scale:.3g})"
    return (
        f"{result.log}{run} ({result.format}, key map {result.framework or 'auto'}): "
        f"{len(tl.record_steps)} records, steps {tl.record_steps[0]}..{tl.record_steps[-1]}, "
        f"{_duration(tl.duration)} of run time{scaled}, {len(tl.series)} series"
    )


def text(results: Sequence[ReplayResult]) -> str:
    """A plain-text report for the terminal."""
    out = []
    for r in results:
        out.append(summary(r))
        table = rows(r)
        if not table:
            out.append("  no alert fired\n")
            continue
        widths = [max(len(h), *(len(row[i]) for row in table)) for i, h in enumerate(HEADERS)]
        for row in (HEADERS, *table):
            out.append(
                "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            )
        out.append("")
    return "\n".join(out)


def as_json(results: Sequence[ReplayResult]) -> str:
    """``--json``: one object per log with its list of alerts."""
    return json.dumps([r.as_dict() for r in results], indent=2)


def _md_table(table: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in table]
    return lines


def markdown(results: Sequence[ReplayResult], path: Path) -> None:
    """A Markdown report at ``path``; each run's chart is written beside it as a PNG."""
    lines = ["# rlpulse replay", ""]
    for r in results:
        lines += [f"## {r.run_id}", "", summary(r), ""]
        png = chart_png(r)
        if png is not None:
            chart = path.with_name(f"{path.stem}-{_SLUG.sub('_', r.run_id)}.png")
            chart.write_bytes(png)
            lines += [f"![{r.run_id}]({chart.name})", ""]
        table = rows(r)
        lines += _md_table(table) if table else ["No alert fired."]
        lines.append("")
    path.write_text("\n".join(lines))


def html_report(results: Sequence[ReplayResult], path: Path) -> None:
    """A self-contained HTML report at ``path`` (charts embedded as data URIs)."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>rlpulse replay</title>",
        "<style>body{font-family:sans-serif;max-width:960px;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;"
        "font-size:13px}.critical{color:#d62728}.warning{color:#ff7f0e}</style></head><body>",
        "<h1>rlpulse replay</h1>",
    ]
    for r in results:
        parts += [f"<h2>{html.escape(r.run_id)}</h2>", f"<p>{html.escape(summary(r))}</p>"]
        png = chart_png(r)
        if png is not None:
            data = base64.b64encode(png).decode()
            parts.append(f"<img alt='{html.escape(r.run_id)}' src='data:image/png;base64,{data}'>")
        table = rows(r)
        if not table:
            parts.append("<p>No alert fired.</p>")
            continue
        parts.append("<table><tr>" + "".join(f"<th>{h}</th>" for h in HEADERS) + "</tr>")
        for row in table:
            cells = "".join(f"<td>{html.escape(c)}</td>" for c in row)
            parts.append(f"<tr class='{html.escape(row[1])}'>{cells}</tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts))


def write(results: Sequence[ReplayResult], path: Path) -> None:
    """``--report FILE``: Markdown for ``.md``, HTML for ``.html``/``.htm``."""
    suffix = path.suffix.lower()
    if suffix == ".md":
        markdown(results, path)
    elif suffix in (".html", ".htm"):
        html_report(results, path)
    else:
        raise ValueError(f"--report {path}: use a .md or .html file name")
