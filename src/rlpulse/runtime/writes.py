"""Trusted writes of plain floats into the store: a gauge's value (non-finite values counted,
watched series handed to the step-indexed detector) and a counter's increment.

The ingest writes here once user input has passed its checks; the exporter's own values (batch
statistics, the run-end marks) write here directly, never through the user-input path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from rlpulse import catalog
from rlpulse.detect import signals
from rlpulse.runtime.drops import Drops
from rlpulse.runtime.store import Series, Store

_NO_LABELS: Mapping[str, str] = {}
_UNSEEN = ("", ())  # a slot ``Writes.signal`` has not looked up yet
EPISODIC = catalog.get("rl_episode_return").name  # a mean over episodes: none before the first


class Writes:
    """Writes into ``store``; ``drops`` counts what cannot be written (and is strict or not)."""

    def __init__(self, store: Store, detector: signals.Detector, drops: Drops) -> None:
        self.store = store
        self.detector = detector
        self.drops = drops
        # slot -> (metric, labels) of a series the detector watches, None if it does not
        self._watch: dict[int, tuple[str, tuple[str, ...]] | None] = {}
        self._finite: set[int] = set()  # slots of episode returns that had a finite value

    def signal(self, slot: int, value: float) -> None:
        """Hand a value written to a watched series to the step-indexed detector."""
        entry = self._watch.get(slot, _UNSEEN)
        if entry is _UNSEEN:
            entry = self.watched(slot)
        if entry is not None:
            if entry[0] == EPISODIC and value - value == 0:
                self._finite.add(slot)
            self.detector.observe(entry[0], entry[1], float(value))

    def watched(self, slot: int) -> tuple[str, tuple[str, ...]] | None:
        """The (metric, labels) of a slot the detector watches, None if it does not."""
        entry = self._watch.get(slot, _UNSEEN)
        if entry is _UNSEEN:
            s = self.store.by_slot[slot]
            entry = (s.metric.name, s.labels) if s.metric.name in signals.OBSERVED else None
            self._watch[slot] = entry
        return entry

    def first_finite(self, slot: int) -> bool:
        """Whether ``counted`` of a slot depends on more than its values (an episode return's
        non-finite values count from its first finite value on)."""
        entry = self.watched(slot)
        return entry is not None and entry[0] == EPISODIC

    def counted(self, slot: int, bad: np.ndarray) -> np.ndarray:
        """Which of a slot's values written in a row (``bad``: NaN/±Inf) ``nonfinite`` counts,
        as ``signal`` and ``nonfinite`` one value at a time would: an episode return's before
        its first finite value are not, and a finite value marks it."""
        entry = self.watched(slot)
        if entry is None or entry[0] != EPISODIC or slot in self._finite:
            return bad
        if bad.all():
            return np.zeros_like(bad)
        self._finite.add(slot)
        return bad & (np.arange(len(bad)) > int((~bad).argmax()))

    def nonfinite(self, series: Series, n: int = 1) -> None:
        """Count ``n`` NaN/±Inf values written to ``series``; ``ValueError`` when strict. A
        mean over finished episodes reads NaN until the first episode ends (a mean of no
        episodes): not counted before its first finite value, a failure of the run after it. A
        step's reward mean is defined from the first step: its NaN always counts (a broken
        grader, a reward function returning None)."""
        if series.metric.name == EPISODIC and series.slot not in self._finite:
            return
        nf = self.store.get("rl_nonfinite_values_total", metric=series.metric.name)
        with self.store.lock:
            self.store.values[nf.slot] += n
        if self.drops.strict:
            raise ValueError(f"rlpulse: {series.metric.name}: non-finite value")

    def gauge(self, series: Series, value: float, judged: bool = True) -> None:
        """Set a gauge series (``judged``: a watched one's value goes to the detector too)."""
        self.store.values[series.slot] = value
        if not math.isfinite(value):
            self.nonfinite(series)
        if judged:
            self.signal(series.slot, value)

    def put(
        self, name: str, value: float, labels: Mapping[str, str] = _NO_LABELS, judged: bool = True
    ) -> None:
        """Set a catalog gauge (label values are capped like user data: they may come from it,
        e.g. a reward component's name)."""
        metric = catalog.get(name)
        self.gauge(self.store.bind(metric, dict(labels), capped=metric.labels), value, judged)

    def add(self, series: Series, amount: float, key: str) -> None:
        """Add to a counter series; an amount that is negative or not finite is dropped as
        ``negative_increment`` (under ``key``)."""
        if not (amount >= 0 and math.isfinite(amount)):
            self.drops("negative_increment", key, amount)
            return
        with self.store.lock:
            self.store.values[series.slot] += amount
