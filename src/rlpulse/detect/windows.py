"""Numpy building blocks of the batched detector: sliding windows over a series' values, their
medians, and one exported signal's held value and trail, each worked out once per read over the
values logged since the last one (``rlpulse.detect.signals``)."""

from __future__ import annotations

import functools
import math

import numpy as np

Pair = tuple[np.ndarray, np.ndarray]  # per row: a smoothed value and its sustained level

HELD_MAX = 4096  # candidates an exported signal keeps at most (a trainer logging faster
# than HELD_MAX values per hold_seconds holds its values for less than hold_seconds)
TRAIL = 1024  # signal values kept per exported series with their step, for ``onset``


SCRATCH_MAX = 1 << 18  # floats a reused matrix holds at most (2 MB: 5,242 rows of 50)


class Scratch:
    """Float matrices one reader reuses from read to read (a read of 1,500 values makes a few
    1,500 x 50 matrices: fresh memory costs a page fault every 4 kB, ~20 % of the read), each
    under a name and held by one owner at a time; larger ones are made afresh."""

    def __init__(self) -> None:
        self._kept: dict[str, np.ndarray] = {}
        self._owners: dict[str, object] = {}

    def get(self, name: str, rows: int, cols: int, owner: object = None) -> np.ndarray:
        """A ``rows`` x ``cols`` matrix (contents undefined) that ``owner`` holds until the
        next ``get`` of ``name``."""
        size = rows * cols
        self._owners[name] = owner
        if size > SCRATCH_MAX:
            self._kept.pop(name, None)
            return np.empty((rows, cols))
        kept = self._kept.get(name)
        if kept is None or kept.size < size:
            kept = self._kept[name] = np.empty(size)
        return kept[:size].reshape(rows, cols)

    def holds(self, name: str, owner: object) -> bool:
        """Whether ``owner`` still holds the matrix of ``name``."""
        return self._owners.get(name) is owner


def windows(x: np.ndarray, ends: np.ndarray, w: int, out: np.ndarray | None = None) -> np.ndarray:
    """Rows ``x[e - w + 1 : e + 1]`` for each ``e`` of ``ends`` (not decreasing, -1 allowed),
    NaN before ``x`` starts (written into ``out`` if given)."""
    padded = np.concatenate((_nans(w), x))
    if len(ends) < 64:  # a few rows: one index
        return np.take(padded, ends[:, None] + _offsets(w), out=out, mode="clip")
    view = _window_view(padded, w)
    first, last = int(ends[0]) + 1, int(ends[-1]) + 1
    if last - first == len(ends) - 1:  # one after the other: a slice of the rows, copied
        # (np.take into ``out`` goes through a fresh buffer of the whole matrix)
        return (
            view[first : last + 1].copy() if out is None else _copied(out, view[first : last + 1])
        )
    # (whole rows copied: no per-item index; the indexes are in range)
    return np.take(view, ends + 1, axis=0, out=out, mode="clip")


def _copied(out: np.ndarray, rows: np.ndarray) -> np.ndarray:
    np.copyto(out, rows)
    return out


def _window_view(x: np.ndarray, w: int) -> np.ndarray:
    """``sliding_window_view(x, w)`` of a contiguous float vector, made in C (that function
    checks its arguments in Python: ~10 us)."""
    return np.ndarray((len(x) - w + 1, w), x.dtype, x, 0, (x.itemsize, x.itemsize))


@functools.cache
def _offsets(w: int) -> np.ndarray:
    return np.arange(1, w + 1)


@functools.cache
def _nans(w: int) -> np.ndarray:
    return np.full(w, math.nan)


def bin_counts(values: np.ndarray, edges: np.ndarray | tuple[float, ...], le: bool) -> np.ndarray:
    """How many ``values`` fall in each of the ``len(edges) + 1`` bins between ascending
    ``edges``: bin ``i`` holds ``edges[i-1] < v <= edges[i]`` (``le``: a Prometheus bucket) or
    ``edges[i-1] <= v < edges[i]``. One sort and a search per edge (a search per value costs
    ~3x more for a few thousand values)."""
    below = np.searchsorted(np.sort(values), edges, side="right" if le else "left")
    cumulative = np.concatenate(([0], below, [len(values)]))
    return cumulative[1:] - cumulative[:-1]


def medians(ordered: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The median of the first ``counts`` values of each ascending row (NaN where 0; counts
    never fall from one row to the next): bit for bit ``_median`` of each."""
    w = ordered.shape[1]
    if w and counts[0] == w:  # every row full (counts ascend: a series past its first values)
        mid = w // 2
        # (a copy: ``ordered`` may be a reused matrix, ``Scratch``)
        return ordered[:, mid].copy() if w % 2 else (ordered[:, mid - 1] + ordered[:, mid]) / 2
    rows = np.arange(len(counts))
    mid = counts // 2
    hi = ordered[rows, np.minimum(mid, max(w - 1, 0))] if w else np.full(len(counts), math.nan)
    lo = ordered[rows, np.maximum(mid - 1, 0)] if w else hi
    return np.where(counts == 0, math.nan, np.where(counts % 2 == 1, hi, (lo + hi) / 2))


def last_medians(
    series: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    w: int,
    scratch: Scratch | None = None,
    name: str = "network",
) -> list[Pair]:
    """Per series ``(x, ends, n)``, per row the median of the last ``min(n, w)`` and of the last
    ``min(n, 2 w)`` values of finite ``x`` up to ``ends`` (a smoothed value and its sustained
    level; ``ends`` ascending, ``n`` not falling). Many full windows that end one after the
    other (``w`` at most ``NETWORK``) are ordered column by column (``_ordered_columns``), those
    of every series in one pass over their values laid end to end (the windows across two
    series' values are left out): a window of 2 w values is two ordered halves, whose middle
    values ``_kth`` picks (worked in ``scratch``'s reused matrix ``name``: a read's heap grows by
    ~0.5 MB otherwise, which the allocator hands back and the next read faults in again). The
    same values as sorting each window."""
    out: list[Pair] = []
    runs: list[tuple[Pair, int, np.ndarray]] = []  # (the series' pair, its first full row, values)
    for x, ends, n in series:
        full = int(np.searchsorted(n, 2 * w))  # the rows before have fewer than 2 w values
        many = len(ends) - full >= 64 and ends[-1] - ends[full] == len(ends) - 1 - full
        if not (many and w <= NETWORK and ends[full] >= 2 * w - 1):  # (windows inside x)
            out.append(
                (
                    _sorted_medians(x, ends, np.minimum(n, w), w),
                    _sorted_medians(x, ends, np.minimum(n, 2 * w), 2 * w),
                )
            )
            continue
        pair = np.empty(len(ends)), np.empty(len(ends))
        if full:
            pair[0][:full], pair[1][:full] = last_medians([(x, ends[:full], n[:full])], w)[0]
        out.append(pair)
        runs.append((pair, full, x[int(ends[full]) - 2 * w + 1 : int(ends[-1]) + 1]))
    if runs:
        laid = np.concatenate([r[2] for r in runs]) if len(runs) > 1 else runs[0][2]
        length = len(laid) - w + 1  # (windows of w ending at each value from the w-th)
        space = (scratch or Scratch()).get(name, w + 5, length)
        cols = _ordered_columns(laid, w - 1, w, space[: w + 1])
        older, newer = [c[:-w] for c in cols], [c[w:] for c in cols]
        half = w // 2
        smoothed = newer[half] if w % 2 else (newer[half - 1] + newer[half]) / 2
        lo = _kth(older, newer, w, space[w + 1 : w + 3, : length - w])
        hi = _kth(older, newer, w + 1, space[w + 3 : w + 5, : length - w])
        level = np.divide(np.add(lo, hi, out=lo), 2, out=lo)  # (lo + hi) / 2
        at = 0  # where a series' values begin in ``laid``
        for (s, lv), full, values in runs:
            rows = len(values) - 2 * w + 1
            s[full:], lv[full:] = smoothed[at : at + rows], level[at : at + rows]
            at += len(values)
    return out


NETWORK = 6  # windows of at most this many values (and twice) are ordered by a network


def _sorted_medians(x: np.ndarray, ends: np.ndarray, counts: np.ndarray, w: int) -> np.ndarray:
    """The median of the ``counts`` values of ``x`` up to each of ``ends`` (at most ``w``)."""
    rows = windows(x, ends, w)
    rows.sort(axis=1)
    return medians(rows, counts)


def _ordered_columns(x: np.ndarray, first: int, w: int, space: np.ndarray) -> list[np.ndarray]:
    """Per rank, the rank-th smallest of each window of ``w`` values ending at ``first``, ...
    (all inside ``x``), as many as ``space`` (``w + 1`` rows, worked in) is long."""
    rows = space.shape[1]
    cols = list(space[:w])
    for j in range(w):
        np.copyto(cols[j], x[first - w + 1 + j : first - w + 1 + j + rows])
    spare = space[w]
    for i in range(1, w):
        for j in range(i, 0, -1):
            low = np.minimum(cols[j - 1], cols[j], out=spare)
            np.maximum(cols[j - 1], cols[j], out=cols[j])
            spare, cols[j - 1] = cols[j - 1], low
    return cols


def _kth(a: list[np.ndarray], b: list[np.ndarray], k: int, out: np.ndarray) -> np.ndarray:
    """Per row, the k-th smallest (from 1) of two ordered lists of columns taken together: the
    least, over the ways to take i of them from ``a`` and k - i from ``b``, of the largest taken
    (into ``out``: two rows as long as the columns)."""
    h = len(a)
    best, top = out
    for i in range(max(0, k - h), min(k, h) + 1):
        j = k - i
        pick = (
            a[i - 1] if j == 0 else b[j - 1] if i == 0 else np.maximum(a[i - 1], b[j - 1], out=top)
        )
        if i == max(0, k - h):
            np.copyto(best, pick)
        else:
            np.minimum(best, pick, out=best)
    return best


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
        self.cand: list[tuple[int, float, float]] = []  # (index, stamp, value), worst first
        self.baseline = math.nan
        self.worst = math.nan

    def extend(self, values: np.ndarray, baselines: np.ndarray, stamps: np.ndarray) -> None:
        """The signal's values (none NaN) logged at ``stamps`` (NaN: not known, held by count
        alone), oldest first."""
        k = len(values)
        if not k:
            return
        self.baseline = float(baselines[-1])
        # the new candidates: each worse than every later value (an equal later one replaces
        # it); an older one stays if it is worse than all of them
        if self.above:
            later = np.maximum.accumulate(values[::-1])[::-1]
            new = (values[:-1] > later[1:]).nonzero()[0]
            cand = [c for c in self.cand if c[2] > later[0]]
        else:
            later = np.minimum.accumulate(values[::-1])[::-1]
            new = (values[:-1] < later[1:]).nonzero()[0]
            cand = [c for c in self.cand if c[2] < later[0]]
        new = np.concatenate((new, [k - 1]))
        cand += zip(
            (new + self.n + 1).tolist(), stamps[new].tolist(), values[new].tolist(), strict=True
        )
        self.n += k
        newest = cand[-1][1]
        known = newest == newest  # no step logged yet (or none at all): held by count alone
        since = newest - self.hold_seconds if known else math.inf
        oldest_kept = self.n - self.hold
        first = 0
        while first < len(cand) - 1 and cand[first][0] <= oldest_kept:
            stamp = cand[first][1]
            if stamp == stamp and stamp >= since:
                break
            first += 1
        self.cand = cand[max(first, len(cand) - HELD_MAX) :]
        self.worst = self.cand[0][2]

    def read(self) -> float:
        return self.worst


class Trail:
    """An exported signal's last ``TRAIL`` values with the log() call each belongs to."""

    __slots__ = ("calls", "values")

    def __init__(self) -> None:
        self.calls = np.empty(0, np.int64)
        self.values = np.empty(0)

    def extend(self, calls: np.ndarray, values: np.ndarray) -> None:
        if len(values) >= TRAIL:  # (the kept ones all leave)
            self.calls, self.values = calls[-TRAIL:].copy(), values[-TRAIL:].copy()
        elif len(values):
            self.calls = np.concatenate((self.calls, calls))[-TRAIL:]
            self.values = np.concatenate((self.values, values))[-TRAIL:]

    def pairs(self) -> list[tuple[int, float]]:
        """(log() call, value) of the kept values, oldest first."""
        return list(zip(self.calls.tolist(), self.values.tolist(), strict=True))

    def __len__(self) -> int:
        return len(self.values)


def range_max(a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The largest of ``a[lo[i] : hi[i]]`` for each ``i`` (0 where the range is empty; ``a``
    holds counts), from a sparse table of the maxima of ``a``'s runs of 1, 2, 4 ... values."""
    out = np.zeros(len(lo), np.int64)
    width = hi - lo
    some = width > 0
    if not some.any():
        return out
    levels = [a]
    while 2 ** len(levels) <= width.max():
        k = 2 ** (len(levels) - 1)
        levels.append(np.maximum(levels[-1][:-k], levels[-1][k:]))
    level = np.zeros(len(lo), np.int64)
    level[some] = np.log2(width[some]).astype(np.int64)
    for lv in np.unique(level[some]).tolist():
        at = some & (level == lv)
        out[at] = np.maximum(levels[lv][lo[at]], levels[lv][hi[at] - 2**lv])
    return out
