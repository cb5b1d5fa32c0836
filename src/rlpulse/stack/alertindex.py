"""Writes ``rlpulse/alertindex.py``: the alerts the generated rules can raise, by name, with
their severities and the shipped levels of the step alerts, for the runtime to read without
importing the generator (``python -m rlpulse.stack.alertindex > src/rlpulse/alertindex.py
&& ruff format src/rlpulse/alertindex.py``; a test checks it is current)."""

from __future__ import annotations

from typing import Any

from rlpulse.stack import config, rules
from rlpulse.stack.alerts import STEP_ALERTS


def tables() -> tuple[dict[str, tuple[str, ...]], dict[tuple[str, str], tuple[Any, ...]]]:
    """(alertname -> severities, (alertname, severity) -> step level) of the shipped config."""
    cfg = config.Config()
    severities: dict[str, set[str]] = {}
    for _, alert in rules.all_alerts(cfg):
        severities.setdefault(alert.name, set()).add(alert.severity)
    levels: dict[tuple[str, str], tuple[Any, ...]] = {}
    for group in STEP_ALERTS.values():
        for a in group:
            for severity, level in a.tiers(getattr(cfg.alerts, a.key)):
                levels[(a.name, severity)] = (a.signal, a.above, level, a.subject, a.sig.unit)
    return {n: tuple(sorted(s)) for n, s in severities.items()}, levels


def render() -> str:
    """The module's text."""
    severities, levels = tables()
    lines = [
        '"""The alerts the generated rules can raise (written by rlpulse.stack.alertindex; do',
        "not edit): each name with its severities, and each step alert's signal and shipped level",
        'per severity. The runtime reads it (``rlpulse.control``) without the generator."""',
        "",
        "SEVERITIES: dict[str, tuple[str, ...]] = {",
        *(f"    {n!r}: {s!r}," for n, s in sorted(severities.items())),
        "}",
        "# (alertname, severity) -> (signal, fires above, level, subject, unit)",
        "LEVELS: dict[tuple[str, str], tuple[str, bool, float, str, str]] = {",
        *(f"    {k!r}: {v!r}," for k, v in sorted(levels.items())),
        "}",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
