"""The last good step of a failing run, and the checkpoint to resume from.

For an alert on a step signal (its ``signal`` and ``series`` labels), the onset is the first
logged step of the signal's latest run of values past the alert's level (the level of its
severity in the rlpulse config the rules were generated from), and the last good step the one
before the failure's first values (``Detector.onset``: half a smoothing window before the onset).
The checkpoint is the latest one the trainer reported at or before that step.
An alert on no step signal (NaN loss, a stall) names no step: its checkpoint is the latest one
reported before the alert began.
"""

from __future__ import annotations

import bisect
import functools
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlpulse import alertindex, notices
from rlpulse.signals import Detector

MAX_CHECKPOINTS = 1024  # reported checkpoints kept (oldest forgotten first)


@dataclass(frozen=True)
class Level:
    """Where one alert tier fires on its step signal."""

    signal: str
    above: bool
    level: float
    subject: str
    unit: str

    def bad(self, value: float) -> bool:
        return value > self.level if self.above else value < self.level

    def crossed(self) -> str:
        """E.g. "Policy entropy (entropy_ratio_to_peak) below 20%"."""
        shown = f"{self.level * 100:.4g}%" if self.unit == "fraction" else f"{self.level:g}"
        return f"{self.subject} ({self.signal}) {'above' if self.above else 'below'} {shown}"


@functools.lru_cache(maxsize=4)
def levels(config: str | None = None) -> Mapping[tuple[str, str], Level]:
    """(alertname, severity) -> Level of every step alert, with the thresholds of the rlpulse
    config at ``config`` (None: the shipped ones). Empty, with a notice, if they cannot be read:
    the run then acts on its alerts without naming an onset step."""
    if not config:  # the shipped levels, without importing the generator
        return {key: Level(*row) for key, row in alertindex.LEVELS.items()}
    try:
        from rlpulse.stack import config as stack_config
        from rlpulse.stack.alerts import STEP_ALERTS

        cfg = stack_config.load(config)
        out: dict[tuple[str, str], Level] = {}
        for alerts in STEP_ALERTS.values():
            for a in alerts:
                knobs = getattr(cfg.alerts, a.key)
                for severity, level in a.tiers(knobs):
                    out[(a.name, severity)] = Level(a.signal, a.above, level, a.subject, a.sig.unit)
        return out
    except Exception as exc:
        notices.warn(
            "alert_levels",
            "rlpulse: cannot read the alert levels (%s): a stopped run names its checkpoint "
            "but no onset step",
            exc,
        )
        return {}


class Checkpoints:
    """The checkpoints a trainer reported: (step, path, Unix time), by step; thread-safe."""

    def __init__(self) -> None:
        self._items: list[tuple[float, str, float]] = []
        self._lock = threading.Lock()

    def add(self, step: float, path: str, stamp: float) -> None:
        with self._lock:
            bisect.insort(self._items, (step, path, stamp))
            if len(self._items) > MAX_CHECKPOINTS:
                del self._items[0]

    def at_or_before(self, step: float) -> tuple[float, str] | None:
        with self._lock:
            i = bisect.bisect_right(self._items, (step, "\uffff", math.inf))
            return self._items[i - 1][:2] if i else None

    def before_time(self, stamp: float) -> tuple[float, str] | None:
        with self._lock:
            earlier = [c for c in self._items if c[2] < stamp]
        return max(earlier)[:2] if earlier else None


@dataclass(frozen=True)
class LastGood:
    """What a stopped run says about where to resume."""

    step: float | None  # the last good logged step (None: not known)
    onset: float | None  # the first logged step past the alert's level
    crossed: str  # what crossed, e.g. "Policy entropy (entropy_ratio_to_peak) below 20%"
    checkpoint: tuple[float, str] | None  # (step, path) to resume from

    def describe(self) -> str:
        """E.g. "resume from checkpoint-1200 (step 1200); Policy entropy ... from step 1243"."""
        if self.checkpoint is not None:
            step, path = self.checkpoint
            head = f"resume from {Path(path).name or path} (step {step:.0f})"
        else:
            head = "no checkpoint reported at or before the last good step"
        if self.onset is None:
            return head
        good = f"; last good step {self.step:.0f}" if self.step is not None else ""
        return f"{head}; {self.crossed} from step {self.onset:.0f}{good}"


def find(
    detector: Detector,
    labels: Mapping[str, str],
    level: Level | None,
    checkpoints: Checkpoints,
    started: float,
) -> LastGood:
    """The last good step of the alert with ``labels`` (begun at Unix time ``started``)."""
    span = None
    if level is not None and labels.get("signal", level.signal) == level.signal:
        span = detector.onset(level.signal, labels.get("series", ""), level.bad)
    if level is None or span is None:
        name = labels.get("alertname", "the alert")
        return LastGood(None, None, name, checkpoints.before_time(started))
    good, onset = span
    last = None if math.isnan(good) else good
    point = checkpoints.at_or_before(onset - 1 if last is None else last)
    return LastGood(last, onset, level.crossed(), point)


def level_of(table: Mapping[tuple[str, str], Level], labels: Mapping[str, Any]) -> Level | None:
    """The level of the alert with ``labels`` (its name and severity), if it is a step alert."""
    return table.get((str(labels.get("alertname", "")), str(labels.get("severity", ""))))
