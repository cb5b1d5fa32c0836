"""The building blocks of every setting: Prometheus durations, documented fields, alert knobs.

Shared by ``stack.config`` (the whole Config) and the alert definitions in ``stack.alerts``, which
declare their own knobs next to their rules.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NewType

Duration = NewType("Duration", str)
"""A Prometheus duration such as ``90s``, ``5m`` or ``1h30m``."""

_UNITS: dict[str, float] = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}
_DURATION_RE = re.compile(r"^(?:\d+(?:ms|s|m|h|d|w|y))+$")
_PART_RE = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def seconds(duration: str) -> float:
    """The length of a Prometheus duration string, in seconds."""
    if not _DURATION_RE.match(duration):
        raise ValueError(f"{duration!r} is not a Prometheus duration (e.g. 30s, 5m, 1h)")
    return sum(int(n) * _UNITS[u] for n, u in _PART_RE.findall(duration))


def duration(secs: float) -> Duration:
    """The shortest Prometheus duration string for ``secs`` (whole milliseconds)."""
    ms = round(secs * 1000)
    if ms <= 0:
        return Duration("0s")
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        size = round(_UNITS[unit] * 1000)
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    return Duration("".join(parts))


def _doc(text: str, choices: frozenset[str] | None = None) -> dict[str, Any]:
    """Field metadata: the sentence docs/reference/configuration.md shows, and the strings a user
    may set."""
    return {"doc": text, "choices": choices}


def setting(default: Any, text: str, choices: frozenset[str] | None = None) -> Any:
    """A config field: its default, the sentence docs/configuration.md shows and the strings a
    user may set."""
    return field(default=default, metadata=_doc(text, choices))


def section(factory: Callable[[], Any], text: str) -> Any:
    """A config field holding a section (a dataclass of settings), and its sentence."""
    return field(default_factory=factory, metadata=_doc(text))


def doc(f: dataclasses.Field[Any]) -> str:
    """The documentation sentence of a config field."""
    return str(f.metadata.get("doc", ""))


@dataclass(frozen=True)
class AlertConfig:
    """Settings every alert has."""

    enabled: bool = setting(True, "Generate this alert.")
    for_: Duration = setting(Duration("10m"), "How long the condition must hold before firing.")
