"""Plain in-memory storage for metric values, read by the exporter's collector at scrape time.

The training thread only writes Python floats into lists and numpy arrays; turning them into
Prometheus samples (label rendering, families) happens in the HTTP thread. Each series is a
*slot*: an index into ``Store.values`` (gauges and counters) or a ``Histogram`` object.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlpulse import catalog
from rlpulse.catalog import OVERFLOW_VALUE, Metric
from rlpulse.detect import windows

MAX_LABEL_CHARS = 256  # a longer label value is cut here (and counted as a label overflow)


@dataclass
class Exemplar:
    """The rollout id last seen in a histogram bucket, with its value and time."""

    rollout_id: str
    value: float
    timestamp: float


class Histogram:
    """A Prometheus histogram fed in batches: numpy bucket counts, sum and count."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = np.asarray(buckets, dtype=float)
        self.counts = np.zeros(len(self.bounds) + 1, dtype=np.int64)  # last slot: +Inf
        self.sum = 0.0
        self.exemplars: list[Exemplar | None] = [None] * (len(self.bounds) + 1)
        self._lock = threading.Lock()

    def observe_one(self, value: float) -> None:
        """Add one finite value."""
        idx = int(np.searchsorted(self.bounds, value, side="left"))
        with self._lock:
            self.counts[idx] += 1
            self.sum += value

    def observe_many(self, values: np.ndarray, ids: Sequence[Any] | None = None) -> None:
        """Add a 1-d array of finite values; ``ids`` (same length, None where a sample has no
        stored rollout) become bucket exemplars."""
        if values.size == 0:
            return
        if ids is None:
            hits, idx = windows.bin_counts(values, self.bounds, le=True), None
        else:
            idx = np.searchsorted(self.bounds, values, side="left")
            hits = np.bincount(idx, minlength=len(self.counts))
        total = float(values.sum())
        with self._lock:
            self.counts += hits
            self.sum += total
            if idx is not None and ids is not None:
                self._exemplars(idx, values, ids)

    def _exemplars(self, idx: np.ndarray, values: np.ndarray, ids: Sequence[Any]) -> None:
        """Per bucket, the last sample of the batch that has an id (None: no exemplar)."""
        with_id = np.flatnonzero(np.fromiter((i is not None for i in ids), bool, len(ids)))
        if with_id.size == 0:
            return
        buckets, first = np.unique(idx[with_id][::-1], return_index=True)
        now = time.time()
        for b, j in zip(buckets.tolist(), first.tolist(), strict=True):
            pos = int(with_id[with_id.size - 1 - j])
            self.exemplars[b] = Exemplar(str(ids[pos])[:64], float(values[pos]), now)

    def snapshot(self) -> tuple[list[int], float, list[Exemplar | None]]:
        """Cumulative bucket counts (+Inf last), the sum and the exemplars, consistently."""
        with self._lock:
            cumulative = np.cumsum(self.counts).tolist()
            return cumulative, self.sum, list(self.exemplars)


@dataclass
class Series:
    """One bound series: its metric, its own label values (catalog order) and its storage."""

    metric: Metric
    labels: tuple[str, ...]
    slot: int = -1  # index into Store.values for gauges and counters
    hist: Histogram | None = None


@dataclass
class Store:
    """Every series the exporter knows, with bounded user-supplied label values.

    A series is created when it is first written, so a gauge never shows a value nobody set.
    """

    label_cap: int
    values: list[float] = field(default_factory=list)
    series: list[Series] = field(default_factory=list)
    by_slot: list[Series] = field(default_factory=list)
    by_key: dict[tuple[str, tuple[str, ...]], Series] = field(default_factory=dict)
    _distinct: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    overflowed: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bind(self, metric: Metric, labels: dict[str, str], *, capped: Iterable[str] = ()) -> Series:
        """The series of ``metric`` with ``labels``, created on first use.

        Label names listed in ``capped`` carry user data: past ``label_cap`` distinct values
        per metric they fold into ``__overflow__`` (counted in ``overflowed``). A value longer
        than ``MAX_LABEL_CHARS`` is cut (counted too). Two threads binding the same new series
        get one series.
        """
        if not labels and not metric.labels:  # (most writes: a series without labels, seen)
            found = self.by_key.get((metric.name, ()))
            if found is not None:
                return found
        if set(labels) != set(metric.labels):
            raise ValueError(
                f"{metric.name} takes labels {list(metric.labels)}, got {sorted(labels)}"
            )
        values = tuple(str(labels[name]) for name in metric.labels)
        key = (metric.name, values)
        found = self.by_key.get(key)
        if found is not None:
            return found
        with self.lock:
            capped_set = set(capped)
            values = tuple(
                self._cap(metric.name, n, self._clip(n, v)) if n in capped_set else self._clip(n, v)
                for n, v in zip(metric.labels, values, strict=True)
            )
            key = (metric.name, values)
            found = self.by_key.get(key)
            if found is not None:
                return found
            series = Series(metric, values)
            if metric.type == "histogram":
                series.hist = Histogram(metric.buckets)
            else:
                series.slot = len(self.values)
                self.values.append(0.0)
                self.by_slot.append(series)
            self.series.append(series)
            self.by_key[key] = series
            return series

    def _clip(self, label: str, value: str) -> str:
        if len(value) <= MAX_LABEL_CHARS:
            return value
        self.overflowed[label] = self.overflowed.get(label, 0) + 1
        return value[:MAX_LABEL_CHARS]

    def _cap(self, metric: str, label: str, value: str) -> str:
        seen = self._distinct.setdefault((metric, label), set())
        if value in seen:
            return value
        if len(seen) >= self.label_cap:
            self.overflowed[label] = self.overflowed.get(label, 0) + 1
            return OVERFLOW_VALUE
        seen.add(value)
        return value

    def get(self, name: str, **labels: str) -> Series:
        """Bind a catalog metric by name (labels must match the catalog entry)."""
        return self.bind(catalog.get(name), labels)
