"""Numpy building blocks of the batched detector: sliding windows over a series' values, their
medians, and one exported signal's held value and trail, each worked out once per read over the
values logged since the last one (``rlpulse.detect.signals``)."""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

HELD_MAX = 4096  # candidates an exported signal keeps at most (a trainer logging faster
# than HELD_MAX values per hold_seconds holds its values for less than hold_seconds)
TRAIL = 1024  # signal values kept per exported series with their step, for ``onset``


def windows(x: np.ndarray, ends: np.ndarray, w: int) -> np.ndarray:
    """Rows ``x[e - w + 1 : e + 1]`` for each ``e`` of ``ends`` (-1 allowed), NaN before
    ``x`` starts (a view: no copy)."""
    padded = np.concatenate((np.full(w, math.nan), x))
    return sliding_window_view(padded, w)[ends + 1]


def medians(ordered: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The median of the first ``counts`` values of each ascending row (NaN where 0): bit for
    bit ``_median`` of each."""
    if not ordered.shape[1]:
        return np.full(len(counts), math.nan)
    rows = np.arange(len(counts))
    mid = counts // 2
    hi = ordered[rows, np.minimum(mid, ordered.shape[1] - 1)]
    lo = ordered[rows, np.maximum(mid - 1, 0)]
    return np.where(counts == 0, math.nan, np.where(counts % 2 == 1, hi, (lo + hi) / 2))


def last_medians(x: np.ndarray, ends: np.ndarray, counts: np.ndarray, w: int) -> np.ndarray:
    """The median of the ``counts`` values of ``x`` up to each of ``ends`` (at most ``w``)."""
    return medians(np.sort(windows(x, ends, w), axis=1), counts)


class Held:
    """One exported signal: the worst of its last ``hold`` values and of every value logged in
    the last ``hold_seconds`` of the run's clock before the newest (what a scrape reads), and
    its baseline. Between two reads it keeps only the values that can still be the worst (those
    worse than every later one, at most ``HELD_MAX``): a few, whatever the run logged."""

    __slots__ = ("above", "baseline", "cand", "hold", "hold_seconds", "n", "worst")

    def __init__(self, above: bool, hold: int, hold_seconds: float) -> None:
        self.above = above
        self.hold = hold
        self.hold_seconds = hold_seconds
        self.n = 0
        # (index, stamp, value) of the candidates, oldest (and worst) first
        self.cand = (np.empty(0, np.int64), np.empty(0), np.empty(0))
        self.baseline = math.nan
        self.worst = math.nan

    def extend(self, values: np.ndarray, baselines: np.ndarray, stamps: np.ndarray) -> None:
        """The signal's values (none NaN) logged at ``stamps`` (NaN: not known, held by count
        alone), oldest first."""
        k = len(values)
        if not k:
            return
        self.baseline = float(baselines[-1])
        index = np.arange(self.n + 1, self.n + k + 1)
        self.n += k
        stamps = np.where(stamps == stamps, stamps, -math.inf)
        ci, cs, cv = (
            np.concatenate(p) for p in zip(self.cand, (index, stamps, values), strict=True)
        )
        # a candidate is worse than every later value (an equal later one replaces it)
        if self.above:
            later = np.maximum.accumulate(cv[::-1])[::-1]
            keep = cv > np.append(later[1:], -math.inf)
        else:
            later = np.minimum.accumulate(cv[::-1])[::-1]
            keep = cv < np.append(later[1:], math.inf)
        newest = stamps[-1]
        since = newest - self.hold_seconds if newest > -math.inf else math.inf
        keep &= (ci > self.n - self.hold) | (cs >= since)
        at = np.flatnonzero(keep)[-HELD_MAX:]
        self.cand = (ci[at], cs[at], cv[at])
        self.worst = float(cv[at[0]])

    def read(self) -> float:
        return self.worst


class Trail:
    """An exported signal's last ``TRAIL`` values with the log() call each belongs to."""

    __slots__ = ("calls", "values")

    def __init__(self) -> None:
        self.calls = np.empty(0, np.int64)
        self.values = np.empty(0)

    def extend(self, calls: np.ndarray, values: np.ndarray) -> None:
        if len(values):
            self.calls = np.concatenate((self.calls, calls))[-TRAIL:]
            self.values = np.concatenate((self.values, values))[-TRAIL:]

    def pairs(self) -> list[tuple[int, float]]:
        """(log() call, value) of the kept values, oldest first."""
        return list(zip(self.calls.tolist(), self.values.tolist(), strict=True))

    def __len__(self) -> int:
        return len(self.values)
