"""Where a failure began: its onset step, the last good step before it, and the checkpoint to
resume from, for every step alert of a run, from the run's own step-indexed data.

For an alert on a step signal (its signal, direction and levels: ``rlpulse.alertindex`` for
the shipped rules, the ``alert_levels.yml`` the generator wrote for another config), the onset is
the first logged step of the signal's latest excursion past the alert's first level (its
warning, else its critical: where the failure began, whichever tier pages), and the last good
step the logged step before the failure's first bad value (``Detector.onset``). The checkpoint
is the newest one the trainer reported at or before that step (``Exporter.checkpoint_saved``).
The exporter exports the three for every alert whose signal had an excursion (``Onsets``, at
each scrape), so a page carries them from its first notification; a run that acts on its
alerts (``rlpulse.control``) names the same. An alert on no step signal (NaN loss, a stall)
names no step: its checkpoint is the latest reported before the alert began.
"""

from __future__ import annotations

import bisect
import functools
import math
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rlpulse import alertindex, catalog, notices
from rlpulse.detect.signals import Detector

MAX_CHECKPOINTS = 1024  # reported checkpoints kept (oldest forgotten first)
ONSET = catalog.get("rl_failure_onset_step")
LAST_GOOD = catalog.get("rl_last_good_step")
RESUME = catalog.get("rl_resume_checkpoint_step")


@dataclass(frozen=True)
class Level:
    """Where an alert's failure begins on its step signal (its first level)."""

    signal: str
    above: bool
    level: float
    subject: str
    unit: str

    def bad(self, value: float) -> bool:
        return value > self.level if self.above else value < self.level

    def crossed(self) -> str:
        """E.g. "Policy entropy (entropy_ratio_to_peak) below 35%"."""
        shown = f"{self.level * 100:.4g}%" if self.unit == "fraction" else f"{self.level:g}"
        return f"{self.subject} ({self.signal}) {'above' if self.above else 'below'} {shown}"


def _first_tiers(rows: Mapping[tuple[str, str], tuple[Any, ...]]) -> dict[str, Level]:
    """Alert name -> the Level of its first tier (warning, else critical)."""
    out: dict[str, Level] = {}
    for (name, _severity), row in sorted(rows.items(), key=lambda kv: kv[0][1] != "warning"):
        out.setdefault(name, Level(*row))
    return out


@functools.lru_cache(maxsize=4)
def levels(path: str | None = None) -> Mapping[str, Level]:
    """Alert name -> Level of every step alert: the shipped rules'
    (``rlpulse.alertindex``), or those of the ``alert_levels.yml`` at ``path`` (``rlpulse
    generate`` writes it next to the rules of a config). Empty, with a notice, if it cannot be
    read: pages and stops then name no onset step."""
    if not path:
        return _first_tiers(alertindex.LEVELS)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        rows = {
            (str(name), sev): (
                str(e["signal"]),
                e["worse"] == "above",
                float(e[sev]),
                str(e["subject"]),
                str(e["unit"]),
            )
            for name, e in data["alerts"].items()
            for sev in ("warning", "critical")
            if sev in e
        }
        return _first_tiers(rows)
    except Exception as exc:
        notices.warn(
            "alert_levels",
            "rlpulse: cannot read the alert levels in %s (%s): pages and stops name no onset "
            "step (rules_config / RLPULSE_RULES_CONFIG must be the alert_levels.yml that "
            "rlpulse generate wrote)",
            path,
            exc,
        )
        return {}


def levels_path() -> str | None:
    """The levels file a run reads: ``RLPULSE_RULES_CONFIG``, else the shipped one (None)."""
    return os.environ.get("RLPULSE_RULES_CONFIG") or None


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


@dataclass(frozen=True)
class _Seen:
    """The onset of one alert's series as last worked out."""

    call: int  # the newest signal value it saw (its log() call)
    span: tuple[float, float] | None  # (last good step, onset step)
    failing: bool  # that value was bad: the excursion went on


class Onsets:
    """The onset, last good step and resume checkpoint of every step alert of a run, worked
    out again only when an excursion begins (a signal turns bad after a good value), so a scrape
    costs a dict lookup per alert and series."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._lock = threading.Lock()

    def _span(
        self, detector: Detector, name: str, level: Level, series: str
    ) -> tuple[float, float] | None:
        latest = detector.latest(level.signal, series)
        if latest is None:
            return None
        call, value = latest
        key = (name, series)
        seen = self._seen.get(key)
        if seen is not None and (seen.call == call or seen.failing or not level.bad(value)):
            span = seen.span  # unchanged, an excursion that goes on, or one that ended
        else:
            span = detector.onset(level.signal, series, level.bad)
        self._seen[key] = _Seen(call, span, level.bad(value))
        return span

    def samples(
        self, detector: Detector, table: Mapping[str, Level], checkpoints: Checkpoints
    ) -> Iterator[tuple[catalog.Metric, tuple[str, ...], float]]:
        """The gauges of every alert in ``table`` whose signal had an excursion past its first
        level, per series (read at scrape time)."""
        with self._lock:
            spans = [
                (name, series, self._span(detector, name, level, series))
                for name, level in table.items()
                for series in detector.series_of(level.signal)
            ]
        for name, series, span in spans:
            if span is None:
                continue
            good, onset = span
            yield ONSET, (name, series), onset
            if math.isnan(good):
                continue
            yield LAST_GOOD, (name, series), good
            point = checkpoints.at_or_before(good)
            if point is not None:
                yield RESUME, (name, series, point[1]), point[0]


def level_of(table: Mapping[str, Level], labels: Mapping[str, Any]) -> Level | None:
    """The level of the alert with ``labels`` (by its name), if it is a step alert."""
    return table.get(str(labels.get("alertname", "")))
