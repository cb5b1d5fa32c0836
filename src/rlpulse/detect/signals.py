"""Step-indexed detection signals: RL dynamics measured per logged step, not per minute.

Trainers log at any cadence (every 50 ms to every 20 minutes), so statistics about RL dynamics
are computed here, on every logged value of a watched series, and exported as the catalog gauges
``rl_step_signal{signal, series}`` (the statistic) and ``rl_step_signal_baseline{signal, series}``
(what it is compared with: the run's peak, floor, median or best so far). The generated Prometheus
rules only threshold them; ``rlpulse replay`` feeds a log through the same exporter, so a replayed
log and a live run agree by construction.

Every statistic works on the run's own values, in steps:

- *smoothed*: the median of the last ``smooth`` values (one noisy step moves nothing);
- *sustained*: the median of the last ``2 * smooth`` values (half of them must agree);
- *peak* / *floor*: the highest / lowest smoothed value once ``warmup`` values were seen;
- *start*: the first smoothed value after warm-up;
- *noise*: the noise of the history: the robust spread (MAD around their median, so a steady
  trend adds nothing) of its step-to-step differences / sqrt 2, or of its second differences at
  lags 2 to 24 over the last ``4 * history`` values / sqrt 6 where larger (a second difference
  ``x[t+L] - 2 x[t] + x[t-L]`` leaves out a steady trend; a lag counts once the values span 6 of
  them, so a short run's own bending learning curve does not read as noise). A running mean
  (SB3's 100-episode ``ep_rew_mean``, a windowed TRL mean) barely moves from one value to the
  next but wanders over many: the longer lags see that wander;
- *history*: the last ``history`` raw values before the current one (median and MAD for spikes).

An exported value is the worst of the last ``hold`` values and of those logged in the last
``hold_seconds`` of the run's clock: a function of the logged steps and their times alone, so it
is the same whenever it is read, and it changes only when the run logs; a scrape sees every value
of a trainer that logs many steps between two scrapes.

The values are read in batches: the exporter's apply only appends each to those waiting, and a
read works out every value since the last one at once (``Detector``, ``Track``, numpy windows in
``rlpulse.detect.windows``), bit for bit what one value at a time gives.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import os
import statistics
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal, cast

import numpy as np

from rlpulse import catalog, keys
from rlpulse.detect import band, windows
from rlpulse.detect.windows import TRAIL, Held, Scratch, Trail

log = logging.getLogger("rlpulse")
SIGNAL = catalog.get("rl_step_signal")
BASELINE = catalog.get("rl_step_signal_baseline")
INTERVAL = catalog.get("rl_step_interval_seconds")
BAND = catalog.get("rl_reference_band")
BAND_GAP = "reference_band_gap"  # the signal against earlier healthy runs (``_band_gap``)

Worse = Literal["above", "below"]
Pair = tuple[np.ndarray, np.ndarray]  # a signal's values and baselines at the values of a read
Lost = tuple[np.ndarray, np.ndarray, int | None]  # a discrete reward's drops in a read (``Drops``)
# how a value reads: a share (shown as %), a multiple (x), nats, or robust standard deviations
Unit = Literal["fraction", "multiple", "nats", "sigma"]


NOISE_LAGS = (2, 4, 8, 16, 24)  # longer lags of the noise estimate
NOISE_SPAN = 4  # the noise looks at this many histories of values (a 100-episode mean wanders
# over 25 values logged every 4 episodes: a few such windows are needed to see its spread)
NOISE_MIN_SPAN = 6  # a lag counts once the values span this many lags (a short run's own
# learning curve bends within a few long lags and would read as noise)


@dataclass(frozen=True)
class StepWindows:
    """How many logged values each statistic looks at."""

    smooth: int = 5
    history: int = 50
    warmup: int = 5
    hold: int = 3
    # ...and every value of the last ``hold_seconds`` of the run's clock: two shipped scrape
    # intervals, so a scrape sees each value of a trainer that logs many steps between scrapes
    hold_seconds: float = 30.0


# ---- per-series state ------------------------------------------------------------------------


class Track:
    """The running statistics of one watched series (one metric with one label set).

    Its finite values are appended in batches (``extend``: every value logged since the last
    read), and the statistics of every value of a batch are worked out at once with numpy
    sliding windows: per *row* (row 0 the state before the batch, row r the state after its
    r-th value) the smoothed and sustained medians, the peak, floor and start. ``at(r)`` puts a
    row's statistics in the attributes the per-value signals read (``last``, ``smoothed`` ...).
    It keeps the last ``NOISE_SPAN * history + 1 + GAIN_NOISE_LAG`` values (1.7 kB at the default
    windows)."""

    def __init__(self, w: StepWindows) -> None:
        self.w = w
        # values kept: the noise's span before the last, as of GAIN_NOISE_LAG values ago
        self.keep = NOISE_SPAN * w.history + 1 + GAIN_NOISE_LAG
        self.x = np.empty(0)  # the kept values, then those of the batch being read
        self.base = 0  # the index in ``x`` of the batch's first value
        self.n = 0  # values seen at the current row
        self.n0 = 0  # ... before the batch
        self.pos = -1  # the index in ``x`` of the current row's latest value
        self.last = math.nan
        self.smoothed = math.nan
        self.peak = math.nan
        self.floor = math.nan
        self.start = math.nan
        # the same, of the sustained level (median of the last 2 x smooth values)
        self.level = math.nan
        self.level_peak = math.nan
        self.level_start = math.nan
        self.rows: dict[str, np.ndarray] = {}  # per statistic, its value at each row
        self._history: tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] | None = None
        self._lists: dict[str, list[float]] = {}  # the same as lists (``at``)
        # the noise a gain is judged by (``gains``): the (n, pos) it is measured at until
        # worked out, then its value
        self._gain_noise: tuple[int, int] | float = math.nan
        self.gain_measured = False
        # the gains asked of this reward in the read (``Detector._ask_gains``): (where, gain)
        self.gains: tuple[np.ndarray, np.ndarray] = (np.empty(0, np.int64), np.empty(0))
        # a discrete reward's drop at each value of the read (``Drops.extend``), NaN where not
        # asked, and the newest value's lag
        self.lost: Lost = (np.empty(0), np.empty(0), None)
        self._noise: tuple[int, int, float] = (-1, 0, math.nan)  # (n, longest, noise) last asked
        self.best3 = math.nan  # the best median of three readings (``_drop_from_best``)
        self.settled = False  # the reward held its best before entropy halved (``_entropy...``)
        self.halved_from = math.nan  # the smoothed reward as entropy last stood above half
        self.halved_at = 0  # its peak, and this track's values then
        self.gain_seen = 0.0  # the reward's largest significant gain while entropy was read
        self.learned = False  # it gained ``LEARNED_SINCE`` of it since entropy halved
        self.stretches: Stretches | None = None  # a reward's runs of one value (``_frozen``)
        self.drops: Drops | None = None  # a discrete reward's drop (``_gain_lost``)
        self.falls: Falls | None = None  # single continuous episodes' fall (``_episode_lost``)
        self.relapse = Relapse()  # a classic return's fall, paged once it holds (``_gain_lost``)
        self.discrete = np.zeros(1, bool)  # per row of the read: a discrete reward (``Drops``)
        self.back: int | None = None  # the lag of the value a signal just computed, if not
        # its own (``lag``): set by the signal, taken by the detector
        self.id = -1  # the detector's number for the series
        self.born = sys.maxsize  # the detector's sequence number of the series' first value
        self.looped = False  # some of its values are read one at a time (``Detector._loop``)
        self.batch = 0  # the detector's read that read it last, its values' sequence numbers
        self.seqs = np.empty(0, np.int64)  # and the row after each (``Detector.reward_rows``)
        self.ev_rows = np.empty(0, np.int64)
        self.scratch = Scratch()  # its reader's reused matrices (the detector's)
        self.extend(np.empty(0))

    @property
    def warm(self) -> bool:
        return self.n >= self.w.warmup

    def add(self, value: float) -> None:
        """One value (non-finite ones count for nothing), its statistics at once."""
        if math.isfinite(value):
            self.extend(np.array([value]))
            self.at(1)

    def extend(self, values: np.ndarray) -> None:
        """A batch of finite values: the statistics of every row (the current row stays 0)."""
        extend_tracks([self], [values])

    def _append(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``extend``'s first half: ``values`` appended; ``windows.last_medians``'s series."""
        self._drop_old()
        prev = self.x
        self.n0, m = self.n, len(values)
        self.x = np.concatenate((prev, values))
        self.base = len(prev)
        n = np.arange(self.n0, self.n0 + m + 1)
        return self.x, np.arange(self.base - 1, self.base + m), n

    def _statistics(
        self, values: np.ndarray, n: np.ndarray, smoothed: np.ndarray, level: np.ndarray
    ) -> None:
        """``extend``'s second half: every row's statistics from its medians (``n`` counts up
        from ``n0``: the rows before a count are a slice)."""
        w = self.w
        level[: max(2 * w.smooth - self.n0, 0)] = math.nan
        cold = max(w.warmup - self.n0, 0)  # the rows before warm-up
        start = self.start
        if start != start:
            start = float(smoothed[cold]) if cold < len(n) else math.nan
        peaked = smoothed.copy()
        peaked[:cold] = math.nan
        peaked[0] = self.peak
        low = peaked.copy()
        low[0] = self.floor
        level_start = self.level_start
        if level_start != level_start:
            level_start = _first(level, level == level)
        topped = level.copy()
        topped[0] = self.level_peak
        self.rows = {
            "n": n,
            "last": np.concatenate(([self.last], values)),
            "smoothed": smoothed,
            "peak": np.fmax.accumulate(peaked),
            "floor": np.fmin.accumulate(low),
            "start": _after(cold, start, len(n)),
            "level": level,
            "level_peak": np.fmax.accumulate(topped),
            "level_start": np.where(level == level, level_start, math.nan),
        }
        self._lists = {}
        self._history = None
        self.n, self.pos = self.n0, self.base - 1  # (row 0: the state before the batch)

    def at(self, row: int) -> None:
        """Read the statistics of ``row`` (the state after the batch's ``row``-th value)."""
        lists = self._lists or self._listed()
        self.n = self.n0 + row
        self.pos = self.base - 1 + row
        self.last = lists["last"][row]
        self.smoothed = lists["smoothed"][row]
        self.peak = lists["peak"][row]
        self.floor = lists["floor"][row]
        self.start = lists["start"][row]
        self.level = lists["level"][row]
        self.level_peak = lists["level_peak"][row]
        self.level_start = lists["level_start"][row]

    def _listed(self) -> dict[str, list[float]]:
        self._lists = {k: v.tolist() for k, v in self.rows.items() if k != "n"}
        return self._lists

    def finish(self) -> None:
        """The batch is read: its last row is the current state, and only what the next batch
        reads is kept (the last row, the last values)."""
        self._drop_old()
        self.rows = rows = {k: v[-1:] for k, v in self.rows.items()}
        self.n0 = self.n = int(rows["n"][0])
        self.base = len(self.x)
        self.pos = self.base - 1
        self._lists, self._history = {}, None
        for k in _STATE:
            setattr(self, k, float(rows[k][0]))

    def _drop_old(self) -> None:
        """Keep the last ``keep`` values (a gain's noise measured on older ones is worked out
        first)."""
        cut = max(len(self.x) - self.keep, 0)
        if isinstance(self._gain_noise, tuple):
            n, pos = self._gain_noise
            if pos - cut < min(n - 1, NOISE_SPAN * self.w.history):
                self.gain_noise()
            else:
                self._gain_noise = (n, pos - cut)
        self.x = self.x[cut:]

    def recent(self, k: int) -> list[float]:
        """The last ``k`` values at the current row (fewer before ``k`` were seen)."""
        return self.x[max(self.pos - min(k, self.n) + 1, 0) : self.pos + 1].tolist()

    def noise(self, longest: int = NOISE_LAGS[-1]) -> float:
        """The history's noise (the last ``history`` values before the current one):
        step-to-step, or over up to ``longest`` steps where larger (a smoothed series is quiet
        from one value to the next, not over many); see the module doc. Worked out once per
        value (several signals ask for it)."""
        if self._noise[:2] == (self.n, longest):
            return self._noise[2]
        noise = self._noise_at(self.n, self.pos, longest)
        self._noise = (self.n, longest, noise)
        return noise

    def gain_point(self, row: int) -> tuple[int, int]:
        """Where a gain measured at ``row`` takes its noise (``gains``): the noise as of
        ``GAIN_NOISE_LAG`` values ago (a fall's first values, still in the gain's upper half,
        would read as noise and hide it), once enough values are left before then to tell the
        noise by (``GAIN_MIN_READINGS``); as (values seen, index in ``x``)."""
        n, pos = self.n0 + row, self.base - 1 + row
        diffs = min(n - 1, self.w.history) - 1
        lag = max(0, min(GAIN_NOISE_LAG, diffs - GAIN_MIN_READINGS))
        return n - lag, pos - lag

    def gain_noise(self, point: tuple[int, int] | None = None) -> float:
        """The noise a gain is judged by: measured at ``point`` (``gain_point``), or where it
        was measured last (NaN before it was)."""
        if point is not None:
            return self._noise_at(*point, NOISE_LAGS[-1])
        if isinstance(self._gain_noise, tuple):
            self._gain_noise = self._noise_at(*self._gain_noise, NOISE_LAGS[-1])
        return self._gain_noise

    def gain_noises(
        self, points: list[tuple[int, int] | None], within: np.ndarray | None = None
    ) -> np.ndarray:
        """``gain_noise`` at each of ``points`` (those given measured at once). ``within``: per
        point, the largest gain judged against its noise; where the step-to-step noise alone
        holds it within ``GAIN_NOISE`` times, that noise is given, the longer lags not worked
        out (they could only raise it: no gain counts either way)."""
        out = np.array([self.gain_noise() if p is None else math.nan for p in points])
        given = [i for i, p in enumerate(points) if p is not None]
        if given:
            ns, poss = zip(*(points[i] for i in given), strict=True)
            bound = None if within is None else within[given]
            out[given] = self._noises(list(ns), list(poss), NOISE_LAGS[-1], bound)
        return out

    def _noise_at(self, n: int, pos: int, longest: int) -> float:
        before = max(n - 1, 0)
        history = self.x[pos - min(before, self.w.history) : pos]
        if len(history) < 3:
            return math.nan
        d = sorted(np.diff(history).tolist())
        mad = _mad(d)
        noise = (1.4826 * mad if mad > 0 else _pstdev(d)) / math.sqrt(2)
        size = min(before, NOISE_SPAN * self.w.history)
        lags = [lag for lag in NOISE_LAGS if lag <= longest and size >= NOISE_MIN_SPAN * lag]
        if lags:
            mad = float(_lag_mads(self.x[pos - size : pos], tuple(lags)).max())
            noise = max(noise, 1.4826 * mad / math.sqrt(6))
        return noise

    def _noises(
        self, ns: list[int], poss: list[int], longest: int, within: np.ndarray | None
    ) -> np.ndarray:
        """``_noise_at`` of several points, bit for bit (a few one by one; more with as many
        values behind them at once, one numpy pass each), but where ``within``
        (``gain_noises``)."""
        if len(ns) < NOISES_AT_ONCE:
            return np.array([self._noise_at(n, p, longest) for n, p in zip(ns, poss, strict=True)])
        out = np.full(len(ns), math.nan)
        w = self.w.history
        spans: dict[tuple[int, int], list[int]] = {}
        for i, n in enumerate(ns):
            before = max(n - 1, 0)
            spans.setdefault((min(before, w), min(before, NOISE_SPAN * w)), []).append(i)
        for (k, size), at in spans.items():
            if k >= 3:  # (fewer: no noise)
                bound = None if within is None else within[at]
                out[at] = self._noises_of(np.array([poss[i] for i in at]), k, size, longest, bound)
        return out

    def _noises_of(
        self, pos: np.ndarray, k: int, size: int, longest: int, within: np.ndarray | None
    ) -> np.ndarray:
        """``_noise_at`` at each of ``pos``, each with ``k`` values of history and ``size`` of
        span, in numpy; but where ``within`` (``gain_noises``)."""
        d = np.diff(self.x[pos[:, None] + np.arange(-k, 0)], axis=1)
        d.sort(axis=1)
        mad = _row_medians(np.sort(np.abs(d - _row_medians(d)[:, None]), axis=1))
        noise = 1.4826 * mad
        for j in np.flatnonzero(~(mad > 0)).tolist():  # (steps of one size: their spread)
            noise[j] = _pstdev(d[j].tolist())
        noise = noise / math.sqrt(2)
        lags = tuple(lag for lag in NOISE_LAGS if lag <= longest and size >= NOISE_MIN_SPAN * lag)
        if lags:  # (one sort per point: a sort of them all at once costs as much)
            mads = np.full(len(pos), -math.inf)  # (-inf: not worked out, the noise stays)
            need = np.ones(len(pos), bool) if within is None else ~(within <= GAIN_NOISE * noise)
            mads[need] = [_lag_mads(self.x[p - size : p], lags).max() for p in pos[need].tolist()]
            wander = 1.4826 * mads / math.sqrt(6)
            noise = np.where(wander > noise, wander, noise)  # (Python's max(noise, wander))
        return noise

    def history(self, rows: np.ndarray, keep: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Per row of ``rows``, its history (the last ``history`` values before its latest, NaN
        where fewer were seen) sorted, and how many values it holds (kept for the batch: the
        signals of a series ask with the same rows, in ``scratch`` until another series asks;
        not ``keep``: the asker may overwrite it, a later ask works it out again)."""
        kept = self._history
        if not keep:
            self._history = None
        if kept is not None and kept[0] is rows and self.scratch.holds(HISTORY, self):
            return kept[1]
        ends = np.maximum(self.base - 2 + rows, -1)
        size = np.minimum(np.maximum(self.rows["n"][rows] - 1, 0), self.w.history)  # (np.clip:
        # ~20 us of Python)
        out = self.scratch.get(HISTORY, len(rows), self.w.history, self)
        history = windows.windows(self.x, ends, self.w.history, out)
        history.sort(axis=1)
        if keep:
            self._history = (rows, (history, size))
        return history, size


_STATE = ("last", "smoothed", "peak", "floor", "start", "level", "level_peak", "level_start")
HISTORY = "history"  # a read's reused matrix (``windows.Scratch``)


def extend_tracks(tracks: list[Track], batches: list[np.ndarray]) -> None:
    """``Track.extend`` of each of ``tracks`` (of one ``StepWindows``) with its batch, the
    medians of all worked out at once (``windows.last_medians``)."""
    series = [t._append(v) for t, v in zip(tracks, batches, strict=True)]
    smooth = tracks[0].w.smooth if tracks else 0
    # (in the histories' matrix: the medians are worked out before any signal reads; one
    # matrix less to fault in at a detector's first long read)
    scratch = tracks[0].scratch if tracks else None
    pairs = windows.last_medians(series, smooth, scratch, HISTORY)
    for t, v, (_, _, n), pair in zip(tracks, batches, series, pairs, strict=True):
        t._statistics(v, n, *pair)


def _after(cold: int, value: float, n: int) -> np.ndarray:
    """``n`` rows of ``value``, NaN in the first ``cold``."""
    out = np.full(n, value)
    out[:cold] = math.nan
    return out


def _first(values: np.ndarray, where: np.ndarray) -> float:
    """The first of ``values`` where ``where`` holds (NaN if nowhere)."""
    at = where.nonzero()[0]
    return float(values[at[0]]) if len(at) else math.nan


def _median(ordered: list[float]) -> float:
    """The median of an ascending, non-empty list."""
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _pstdev(values: list[float]) -> float:
    """The population standard deviation in floats (``statistics.pstdev``'s exact fractions
    cost 19 us on 49 values; this differs from it by at most one unit in the last place)."""
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((x - mean) ** 2 for x in values) / len(values))


def _lag_mads(h: np.ndarray, lags: tuple[int, ...]) -> np.ndarray:
    """Per lag L (ascending), the MAD of the second differences ``x[t+L] - 2 x[t] + x[t-L]``
    of ``h``, all lags in one sort: each lag's row is padded to the first's length with as many
    values below all of its own as above them (-inf and +inf, then 0 and +inf for the absolute
    deviations), which leaves its median where it was. Bit for bit ``_median`` of each."""
    at, before, after, into, template, low = _lag_layout(h.size, lags)
    rows = template.copy()
    rows.flat[into] = h[after] - 2 * h[at] + h[before]
    dev = np.abs(rows - _row_medians(np.sort(rows, axis=1))[:, None])
    dev.flat[low] = 0.0
    return _row_medians(np.sort(dev, axis=1))


@functools.lru_cache(maxsize=64)
def _lag_layout(size: int, lags: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Where ``_lag_mads`` reads and writes for a history of ``size`` values: the indexes of
    x[t], x[t-L] and x[t+L] of every lag's second differences, where they go in the padded
    rows, the rows' padding (-inf, +inf) and the flat indexes of the low pads."""
    width = size - 2 * lags[0]
    template = np.empty((len(lags), width))
    at, into, low = [], [], []
    for i, lag in enumerate(lags):
        n = size - 2 * lag
        half = n + (width - n) // 2  # widths differ by 4 x the lags' difference: even
        template[i, n:half], template[i, half:] = -math.inf, math.inf
        at.append((np.arange(n) + lag, np.full(n, lag)))
        into.append(i * width + np.arange(n))
        low.append(i * width + np.arange(n, half))
    t = np.concatenate([a for a, _ in at])
    lag_of = np.concatenate([lg for _, lg in at])
    return t, t - lag_of, t + lag_of, np.concatenate(into), template, np.concatenate(low)


def _row_medians(ordered: np.ndarray) -> np.ndarray:
    """``_median`` of each ascending row (along the last axis)."""
    mid = ordered.shape[-1] // 2
    if ordered.shape[-1] % 2:
        return ordered[..., mid]
    return (ordered[..., mid - 1] + ordered[..., mid]) / 2


def _mad(ordered: list[float]) -> float:
    """The median absolute deviation from the median of an ascending, non-empty list."""
    mid = _median(ordered)
    return _median(sorted(abs(x - mid) for x in ordered))


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 and math.isfinite(num) else math.nan


def _ratios(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``_ratio`` of each pair."""
    out = np.full(len(num), math.nan)
    return np.divide(num, den, out=out, where=(den > 0) & np.isfinite(num))


# ---- signal definitions --------------------------------------------------------------------------

# A signal's value and baseline from the detector's tracks (NaN: not defined yet), one value
# at a time (the track's row set, ``Track.at``)...
Compute = Callable[["Detector", Track, str], tuple[float, float]]  # (detector, track, metric)
# ...or at every value of a batch at once: (detector, track, the track's row and the detector's
# sequence number at each value) -> (values, baselines)
Batched = Callable[["Detector", Track, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Signal:
    """One step-indexed statistic of a watched metric."""

    name: str
    metric: str
    worse: Worse
    compute: Compute | Batched
    doc: str
    unit: Unit


def _ratio_to_peak(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    peak = t.rows["peak"][rows]  # NaN until warm
    return _ratios(t.rows["smoothed"][rows], peak), peak


def _ratio_to_start(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    start = t.rows["start"][rows]  # NaN until warm
    return _ratios(t.rows["smoothed"][rows], start), start


def _level(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    """The smoothed level itself (no peak to wait for), once ``smooth`` values were seen: the
    alert says "median of the last 5 logged steps", so a 3-step run has no such median."""
    seen = t.rows["n"][rows] >= d.w.smooth
    median = windows.medians(*t.history(rows))
    return np.where(seen, t.rows["smoothed"][rows], math.nan), np.where(seen, median, math.nan)


def _sustained(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    """A level that half of the last ``2 * smooth`` values must reach (not a spike)."""
    return t.rows["level"][rows], windows.medians(*t.history(rows))


KL_FLOOR = 0.02  # nats: KL jumps are measured in at least this unit (a KL of ~0 has no spread)
KL_MIN = 0.1  # nats: below this a KL "jump" is harmless whatever its z-score


def _kl_jump(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    """The robust z-score of the latest KL against its history (0 while KL is small)."""
    history, size = t.history(rows, keep=False)  # (its last asker: the deviations go there)
    median = windows.medians(history, size)  # (a copy)
    dev = np.abs(np.subtract(history, median[:, None], out=history), out=history)
    dev.sort(axis=1)
    mad = windows.medians(dev, size)
    scale = np.maximum(np.maximum(1.4826 * mad, 0.1 * np.abs(median)), KL_FLOOR)
    last = t.rows["last"][rows]
    z = np.where(last < KL_MIN, 0.0, (last - median) / scale)
    seen = size >= d.w.warmup
    return np.where(seen, z, math.nan), np.where(seen, median, math.nan)


def _spike_ratio(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    """The latest value against the history's 90th percentile (steps with no learning signal
    and a near-zero norm do not make every normal step a spike)."""
    history, size = t.history(rows)
    at = np.maximum(np.minimum((0.9 * size).astype(np.int64), size - 1), 0)
    q90 = history[np.arange(len(rows)), at]
    seen = size >= d.w.warmup
    return np.where(seen, _ratios(t.rows["last"][rows], q90), math.nan), np.where(
        seen, q90, math.nan
    )


def _ratio_to_typical(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    """The smoothed level against the history's median magnitude: never a division by zero
    (a sparse-reward value loss of 0 gives no ratio) nor by a negative loss."""
    history, size = t.history(rows, keep=False)  # (its only asker: the magnitudes go there)
    magnitude = history  # (no sign bit anywhere, -0.0 neither: the magnitudes themselves)
    if np.signbit(history).any():
        magnitude = np.abs(history, out=history)
        magnitude.sort(axis=1)
    typical = windows.medians(magnitude, size)
    seen = size >= d.w.warmup
    ratio = _ratios(t.rows["smoothed"][rows], typical)
    return np.where(seen, ratio, math.nan), np.where(seen, typical, math.nan)


NOISES_AT_ONCE = 8  # noises asked together worked out in numpy (fewer: one by one)
GAIN_NOISE = 6.0  # a gain counts beyond this many times the series' noise
GAIN_MIN_READINGS = 15  # and once this many values were seen (3 x smooth)
GAIN_NOISE_LAG = 10  # the noise a gain is judged by leaves out up to this many latest values


def gains(t: Track, rows: np.ndarray) -> np.ndarray:
    """The run's gain asked at each of ``rows`` in turn (rows of the read, not decreasing): the
    start -> peak of the sustained level (learning must hold over half of 2 x smooth steps), or
    0 while it does not stand out of the series' own noise (a dip of the smoothed level below a
    peak that is within the noise is noise itself) or too few values were seen; NaN before the
    sustained level exists. The noise is measured while the level is in its upper half (and at
    the first ask), and kept through a fall (a fall's own step would read as noise and clear a
    persisting collapse): where it was measured is carried from one ask to the next."""
    r = t.rows
    level, start, peak = r["level"][rows], r["level_start"][rows], r["level_peak"][rows]
    known = level == level
    g = peak - start
    upper = start + g / 2
    measure = known & (r["smoothed"][rows] >= upper) & (r["last"][rows] >= upper)
    if not t.gain_measured and known.any():
        measure[known.argmax()] = True
    big = np.maximum(np.abs(start), np.abs(peak))
    judged = known & (r["n"][rows] >= GAIN_MIN_READINGS) & (g > np.maximum(0.01 * big, 1e-12))
    out = np.where(known, 0.0, math.nan)
    measured = np.maximum.accumulate(np.where(measure, np.arange(len(rows)), -1))
    if judged.any():  # the noise is worked out only where it decides
        noise = np.full(len(rows), math.nan)
        ms, first = np.unique(measured[judged], return_index=True)  # (ascending: in runs)
        points = [t.gain_point(int(rows[m])) if m >= 0 else None for m in ms.tolist()]
        within = np.maximum.reduceat(g[judged], first)  # the largest gain each noise judges
        noise[judged] = t.gain_noises(points, within)[np.searchsorted(ms, measured[judged])]
        won = judged & (g > GAIN_NOISE * noise)
        out[won] = g[won]
    if measure.any():
        t._gain_noise, t.gain_measured = t.gain_point(int(rows[measured[-1]])), True
    return out


DISCRETE_VALUES = 8  # a reward that took at most this many values is discrete (0/1 success)
DISCRETE_MIN = 100  # once this many readings were seen
DISCRETE_START = 20  # readings the start level is the mean of
DISCRETE_SPAN = 200  # readings the typical level is the mean of
DISCRETE_FAIL = 0.98  # the share of readings below the typical level once the reward collapsed
DISCRETE_CHANCE = 6.0  # log10 odds past which the readings since a drop are no luck
DISCRETE_PAGE = DISCRETE_SPAN  # readings a drop must last before it reads past UNCONFIRMED
UNCONFIRMED = 0.7  # a shorter drop reads at most this (RLRewardCollapse warns, does not page)
FALLS_SPAN = 50  # single episodes whose share at or below the start level is ``Falls``'s q
FALLS_LENGTH = 0.5  # an episode this much shorter than the learned policy's is not a fall there
FALLS_BACK = 0.25  # an episode that kept at most this share of the gain fell back to the start


class _Cusum:
    """One CUSUM of ``Drops``: the log10 likelihood ratio of the readings since it last stood
    at 0 (a collapse against the run's own frequency), their count and sum."""

    __slots__ = ("odds", "since", "total")

    def __init__(self) -> None:
        self.odds, self.since, self.total = 0.0, 0, 0.0

    def add(self, value: float, step: float) -> None:
        self.odds += step
        if self.odds <= 0:
            self.odds, self.since, self.total = 0.0, 0, 0.0
        else:
            self.since += 1
            self.total += value


def _cusum_steps(q: float, fail: float) -> tuple[float, float]:
    """A CUSUM's log10 likelihood ratio step for a reading below and one above the typical
    level: each below with ``fail`` against the run's own ``q`` (-inf both: no such collapse)."""
    if not 0 < q < fail:
        return -math.inf, -math.inf
    return math.log10(fail / q), math.log10((1 - fail) / (1 - q))


class Drops:
    """A discrete reward's drop (a 0/1 episode success, a grader's few score levels), whose
    single readings are too noisy for a smoothed level: CUSUMs of the readings below its
    typical level. *Typical level*: the mean of the last 200 readings (kept as counts of its
    few values); each reading is below it with the run's own frequency ``q`` (the share of
    those readings below it), or, once the reward collapsed, with ``DISCRETE_FAIL`` (the
    policy lost it all) or half-way from ``q`` to that (it lost about half): one CUSUM each,
    whose log10 likelihood ratio says how much likelier that collapse is than the run's own
    luck. ``q`` and the typical level are measured while the mean of the last 20 readings is in
    the upper half of the gain (start: the mean of the first 20) and kept through a fall. A
    drop reads in full once it lasted ``DISCRETE_PAGE`` readings, before that at most
    ``UNCONFIRMED``: a learning policy's outcomes are not independent draws, and a tabular
    Q-learner's greedy policy goes bad for up to ~80 episodes and mends itself (16 of 64
    healthy slippery FrozenLake runs, alpha 0.1-0.8), far beyond the luck of its own rate."""

    def __init__(self) -> None:
        self.first: list[float] = []
        self.recent: deque[float] = deque(maxlen=DISCRETE_START)
        self.span: deque[float] = deque(maxlen=DISCRETE_SPAN)
        self.counts: dict[float, int] = {}  # of the values in ``span`` (a few)
        self.start = self.typical = self.q = math.nan
        self.cusums = (_Cusum(), _Cusum())  # all lost, half lost
        self._q, self._steps = math.nan, ((math.nan, math.nan),) * 2
        self._stale = True  # the counts changed since the typical level was worked out

    def add(self, value: float) -> None:
        if len(self.first) < DISCRETE_START:
            self.first.append(value)
            if len(self.first) == DISCRETE_START:
                self.start = math.fsum(self.first) / DISCRETE_START
        self.recent.append(value)
        span, counts = self.span, self.counts
        if len(span) == DISCRETE_SPAN:
            if span[0] != value:  # (the same value in and out: the counts stay)
                self._stale = True
            counts[span[0]] -= 1
        else:
            self._stale = True
        span.append(value)
        counts[value] = counts.get(value, 0) + 1
        if len(span) < DISCRETE_MIN or math.isnan(self.start):
            return
        # the typical level is a function of the counts alone: worked out again once they changed
        # and while the mean of the last DISCRETE_START readings is in the gain's upper half
        if self._stale and (
            math.isnan(self.typical)
            or math.fsum(self.recent) / len(self.recent) >= (self.start + self.typical) / 2
        ):
            n = len(span)
            self.typical = math.fsum(v * c for v, c in counts.items()) / n
            self.q = sum(c for v, c in counts.items() if v < self.typical) / n
            self._stale = False
        q = self.q
        if q != self._q:  # each CUSUM's step below and above the typical level, per q
            half = (q + DISCRETE_FAIL) / 2
            self._q, self._steps = q, (_cusum_steps(q, DISCRETE_FAIL), _cusum_steps(q, half))
        (down, up), (half_down, half_up) = self._steps
        all_lost, half_lost = self.cusums
        if value < self.typical:
            all_lost.add(value, down)
            half_lost.add(value, half_down)
        else:
            all_lost.add(value, up)
            half_lost.add(value, half_up)

    def extend(self, values: list[float]) -> list[tuple[float, float, int | None]]:
        """Read each value in turn (a non-finite one adds nothing): the drop after it
        (``lost``), the typical level, and the drop's own lag (the readings before its first
        bad one, where the CUSUM began; None without a drop)."""
        out: list[tuple[float, float, int | None]] = []
        all_lost, half_lost = self.cusums
        for value in values:
            if value - value == 0:  # (neither NaN nor infinite)
                self.add(value)
            if all_lost.odds < DISCRETE_CHANCE and half_lost.odds < DISCRETE_CHANCE:
                out.append((0.0, self.typical, None))  # (``lost``'s answer, at once)
                continue
            lost, since = self.lost()
            if since < DISCRETE_PAGE:
                lost = min(lost, UNCONFIRMED)
            out.append((lost, self.typical, since - 1 if lost > 0 else None))
        return out

    def read(self, values: np.ndarray, at: np.ndarray, n: int) -> Lost:
        """``extend`` of ``values`` (those at ``at`` of ``n`` rows), as the rows' drops and
        typical levels (NaN at the others) and the last row's lag (``Track.lost``); a quiet
        stretch first (``_quiet``) is read at once."""
        quiet = self._quiet(values)
        drop, typical = np.full(n, math.nan), np.full(n, math.nan)
        drop[at[:quiet]], typical[at[:quiet]] = 0.0, self.typical
        lag = None
        if quiet < len(values):
            got, rest = self.extend(values[quiet:].tolist()), at[quiet:]
            drop[rest], typical[rest], lags = zip(*got, strict=True)
            lag = lags[-1]
        return drop, typical, lag if len(at) and at[-1] == n - 1 else None

    def _quiet(self, values: np.ndarray) -> int:
        """How many of ``values`` change nothing but which readings are recent (read here at
        once): with the typical level worked out and no change of the counts waiting, each
        reading replaces an equal one in the span (the counts stay), and each CUSUM stands at 0
        and takes a step that is not positive at each (it stays at 0). A reward that holds one
        value (a solved task's constant return) reads so."""
        span = self.span
        if (
            len(values) < DISCRETE_MIN  # (numpy's fixed cost: a short batch goes one by one)
            or len(span) < DISCRETE_SPAN
            or self._stale
            or math.isnan(self.typical)
            or any(c.odds for c in self.cusums)
        ):
            return 0
        finite = values - values == 0
        f = values[finite]
        leaving = np.concatenate((np.array(span), f[: max(len(f) - DISCRETE_SPAN, 0)]))
        below = f < self.typical
        (down, up), (half_down, half_up) = self._steps
        moves = (f != leaving[: len(f)]) | (below & ((down > 0) | (half_down > 0)))
        moves |= ~below & ((up > 0) | (half_up > 0))
        changed = np.flatnonzero(moves)
        taken = int(changed[0]) if len(changed) else len(f)  # finite readings read at once
        quiet = int(np.flatnonzero(finite)[taken]) if taken < len(f) else len(values)
        self.recent.extend(f[max(taken - DISCRETE_START, 0) : taken].tolist())  # (the rest
        span.extend(f[max(taken - DISCRETE_SPAN, 0) : taken].tolist())  # would leave again)
        return quiet

    def lost(self) -> tuple[float, int]:
        """The drop of the readings a CUSUM past ``DISCRETE_CHANCE`` counts (at least the last
        ``DISCRETE_START``) below the typical level, as a share of the gain (start to typical
        level: back at the start is 1), the larger of the two, and the readings that CUSUM
        counts (where the drop began); (0, 0) while neither is past it."""
        g = self.typical - self.start
        lost, since = 0.0, 0
        if not g > 0:
            return lost, since
        for c in self.cusums:
            if c.odds < DISCRETE_CHANCE:
                continue
            drop = (self.typical - _fallen_mean(c, self.recent)) / g
            if drop > lost:
                lost, since = drop, c.since
        return lost, since


HELD_FALL = 40  # readings a classic return's fall lasts before it reads past UNCONFIRMED
RELEARN = 0.05  # the share of the gain a fall regained over those readings: still relearning
RELEARN_NOISE = 2.0  # and at least this many times the noise the gain was judged by
FALL_FROM = 0.5  # a fall begins where it lost this share of the gain (RLRewardCollapse warns)
FALL_ONSET = 0.25  # its onset: where it last lost less than this share


class Relapse:
    """A classic return's fall, paged once it holds: a healthy policy can collapse and relearn
    (A2C on CartPole, default settings: 3 of 4 seeds fell from 148-338 to 10-15, or to half,
    within a few logged rows and were back 17-39 rows later). The gain lost reads at most
    ``UNCONFIRMED`` (RLRewardCollapse warns, as fast as before) until the fall (from where it
    lost ``FALL_FROM`` of the gain) lasted ``HELD_FALL`` readings, and again while it regained
    ``RELEARN`` of the gain (and ``RELEARN_NOISE`` times the gain's noise) over its last
    ``HELD_FALL`` readings: a run stuck at its low pages, one still relearning warns. A fall
    that read in full once reads so until it ends (a page does not flap as the run mends), and
    names where the level began to fall (``back``)."""

    __slots__ = ("begun", "held", "last", "least", "recent", "since")

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=HELD_FALL)  # the fall's last lost shares
        self.since = 0  # readings since the fall began (0: none)
        self.begun = 0  # readings since it last lost less than ``FALL_ONSET``
        self.held = False  # the fall read in full
        self.least = RELEARN  # what counts as relearning in this fall: as at its first reading
        self.last = 0.0  # the last reading's answer (a repeated row's)

    def read(self, lost: np.ndarray, rows: np.ndarray, relearn: np.ndarray) -> np.ndarray:
        """``lost`` as it reads at ``rows`` of the read (a repeated row is no new reading;
        row 0 is the one before the read); ``relearn``: per row, the share of the gain that
        counts as relearning (a fall keeps its first reading's: the noise and gain a fall's own
        steps re-measure would move it)."""
        if not self.since and not (lost >= FALL_ONSET).any():
            if len(lost):
                self.last, self.begun = float(lost[-1]), 0
            return lost
        out = np.empty(len(lost))
        prev, recent = 0, self.recent
        each = zip(lost.tolist(), rows.tolist(), relearn.tolist(), strict=True)
        for i, (v, row, least) in enumerate(each):
            if row != prev and v == v:
                self.begun = self.begun + 1 if v >= FALL_ONSET else 0
                if v < FALL_FROM:
                    self.since, self.held = 0, False
                    recent.clear()
                else:
                    self.since += 1
                    if self.since == 1:
                        self.least = least
                    recent.append(v)
                    self.held |= self.since >= HELD_FALL and max(recent) - v < self.least
                    v = v if self.held else min(v, UNCONFIRMED)
                self.last = v
            out[i], prev = (self.last if row == prev else v), row
        return out

    def back(self, lag: int) -> int | None:
        """The lag of a fall that reads in full (``lag``: the level's own), None otherwise."""
        return self.begun - 1 + lag if self.held else None


def _fallen_mean(c: _Cusum, recent: deque[float]) -> float:
    """The mean of the readings a CUSUM counts, or of the ``recent`` ones while it counts fewer
    than ``DISCRETE_START``: a short stretch is picked for its failures, and its own mean would
    overstate the drop."""
    if c.since >= DISCRETE_START:
        return c.total / c.since
    return math.fsum(recent) / len(recent)


class Falls:
    """Single episodes whose continuous return fell back to where the run started while they last as
    long as the learned policy's (a reward wrapper that answers 0, a broken grader, a critic
    whose targets blew up: the behaviour went on, the return did not), which a 100-episode
    mean shows only after dozens of episodes. A policy that collapsed into short failing
    episodes (it falls, crashes, loses at once) is left to that mean, which many short
    episodes move within a few logged rows, and to which such a collapse that the run
    recovers from (an off-policy agent's brief fall) is one dip. *Start level*: the mean of
    the first ``DISCRETE_START`` episodes; *learned level*: the best mean of
    ``DISCRETE_START`` episodes in a row, and their mean length. An episode that kept at most
    ``FALLS_BACK`` of the gain (start to learned level) and lasted at least ``FALLS_LENGTH``
    of that length is one with the current policy's own frequency ``q`` (of the last
    ``FALLS_SPAN`` episodes, one added to each count so that a policy that never fell there
    still has a finite chance), or, once the reward broke, with ``DISCRETE_FAIL``: one CUSUM
    after the first ``DISCRETE_MIN`` episodes, as ``Drops``. ``q`` and the learned level are
    measured while the CUSUM stands at 0 and kept through a fall; a gain smaller than the
    first episodes' spread is none (an early lull is no fall). The drop: ``Drops.lost``'s, of
    the learned level: the mean of the last ``DISCRETE_START`` episodes (or of the CUSUM's,
    once as many) below it, as a share of the gain."""

    def __init__(self) -> None:
        self.first: list[float] = []
        self.recent: deque[float] = deque(maxlen=DISCRETE_START)
        self.recent_lengths: deque[float] = deque(maxlen=DISCRETE_START)
        self.span: deque[bool] = deque(maxlen=FALLS_SPAN)  # whether each episode fell
        self.lengths: deque[float] = deque()  # of the episodes waiting to be read, in order
        self.batch: list[float] = []  # of the episodes being read (``take``)
        self.falls = 0  # in ``span``
        self.n = 0
        self.start = self.spread = self.typical = self.length = math.nan
        self.cusum = _Cusum()
        self._steps = (-math.inf, -math.inf)

    def add(self, value: float, length: float) -> None:
        self.n += 1
        self.recent.append(value)
        self.recent_lengths.append(length)
        if len(self.first) < DISCRETE_START:
            self.first.append(value)
            if len(self.first) == DISCRETE_START:
                self.start = math.fsum(self.first) / DISCRETE_START
                self.spread = statistics.pstdev(self.first)
                self.typical = self.start
                self.length = math.fsum(self.recent_lengths) / DISCRETE_START
            return
        floor = self.start + FALLS_BACK * (self.typical - self.start)
        fell = value <= floor and not length < FALLS_LENGTH * self.length
        if len(self.span) == FALLS_SPAN:
            self.falls -= self.span[0]
        self.span.append(fell)
        self.falls += fell
        if not self.cusum.odds:
            mean = math.fsum(self.recent) / DISCRETE_START
            if mean > self.typical:
                self.typical = mean
                self.length = math.fsum(self.recent_lengths) / DISCRETE_START
            self._steps = _cusum_steps((self.falls + 1) / (len(self.span) + 2), DISCRETE_FAIL)
        if self.n > DISCRETE_MIN:
            down, up = self._steps
            self.cusum.add(value, down if fell else up)

    def take(self, n: int) -> None:
        """The lengths of the ``n`` episodes a read is about to read, taken before it works on
        any of them: a read that fails half-way leaves the next one's lengths beside their own
        values."""
        lengths = self.lengths
        self.batch = [lengths.popleft() if lengths else math.nan for _ in range(n)]

    def read(self, values: np.ndarray, at: np.ndarray, n: int) -> Lost:
        """Each of ``values`` in turn with its length (``take``; those at ``at`` of ``n`` rows;
        a non-finite one adds nothing): the rows' drops and typical levels (NaN at the others)
        and the last row's lag (``Track.lost``)."""
        drop, typical = np.full(n, math.nan), np.full(n, math.nan)
        lag = None
        c = self.cusum
        for i, value, length in zip(at.tolist(), values.tolist(), self.batch, strict=True):
            if value - value == 0:
                self.add(value, length)
            g = self.typical - self.start
            lost = 0.0
            if c.odds >= DISCRETE_CHANCE and g > self.spread:
                lost = max((self.typical - _fallen_mean(c, self.recent)) / g, 0.0)
            drop[i], typical[i] = lost, self.typical
            lag = c.since - 1 if lost > 0 else None
        return drop, typical, lag if len(at) and at[-1] == n - 1 else None


def _gain_lost(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    """The fraction of the run's gain (``gains``) that the smoothed level has lost again (a
    collapse shows within three logged values; back at the start is 1, whatever the level).
    A discrete reward, whose median of 5 readings is no level (three failures in a row after a
    long streak of successes would read as all of the gain lost), is judged by the readings
    since it dropped below its typical level (``Drops``) alone. So is the episodes' mean return
    where the episodes themselves are read and discrete (``Detector.discrete_episodes``): 0
    here."""
    r = t.rows
    level, top = r["level"][rows], r["level_peak"][rows]
    g = _gain_at(t, seqs)  # asked wherever the level exists and the reward is not discrete
    lost = np.divide(top - r["smoothed"][rows], g, out=np.zeros(len(rows)), where=g > 0)
    known = level == level
    discrete = known & t.discrete[rows]
    values, baselines = np.where(known, lost, math.nan), np.where(known, top, math.nan)
    values = np.where(discrete, t.lost[0], values)
    if t is d.episodes_mean():
        mean_of = known & d.discrete_episodes(seqs)
        values, discrete = np.where(mean_of, 0.0, values), discrete & ~mean_of
    classic = t is d.returns()
    if classic:
        noise = t.gain_noise()
        noise = RELEARN_NOISE * noise if noise == noise else 0.0
        least = np.maximum(RELEARN, np.divide(noise, g, out=np.zeros(len(g)), where=g > 0))
        continuous = known & ~discrete
        held = t.relapse.read(np.where(continuous, values, math.nan), rows, least)
        values = np.where(continuous, held, values)
    t.back = t.lost[2] if discrete[-1] else t.relapse.back(d.w.smooth // 2) if classic else None
    return values, np.where(discrete, t.lost[1], baselines)


def _gain_at(reward: Track, seqs: np.ndarray) -> np.ndarray:
    """The gains asked of ``reward`` at the values ``seqs`` of the read (``Detector._ask_gains``),
    NaN where none was."""
    asked, g = reward.gains
    if not len(asked):
        return np.full(len(seqs), math.nan)
    j = np.minimum(np.searchsorted(asked, seqs), len(asked) - 1)
    return np.where(asked[j] == seqs, g[j], math.nan)


HOLDS_BEST = 0.25  # a reward within this share of its gain from its peak holds its best
DIP_KEPT = 0.5  # and once entropy fell, within this share (RLRewardCollapse's warning level)
FALL_BEGUN = 0.5  # entropy below this share of its peak has begun to fall
LEARNED_SINCE = 0.5  # the share of its gain a reward gained while entropy fell: learning
RISING_GRACE = GAIN_MIN_READINGS  # entropy values a reward at new bests has to show its gain


def _entropy_collapse(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    """Smoothed entropy against its peak; 1 while the reward rose significantly and holds its best
    (within ``HOLDS_BEST`` of its gain) if it held it before entropy had halved (a policy
    converging: the return stopped improving first). Entropy gone while the return stood still,
    or a return falling with it, is a collapse. So is an LLM's token entropy gone while its
    reward rose: it ends the sampling's exploration and the groups' learning signal (a
    temperature driven to 0 raises the reward: greedy answers). A classic RL policy, whose
    episodes' return is the reward, turns deterministic as it learns what to do: there entropy is
    also calm once the return gained ``LEARNED_SINCE`` of its largest gain since entropy last
    stood above half its peak, and for ``RISING_GRACE`` values after it halved while the return
    sets new bests above where it stood then (entropy leads the return it buys by a few logged
    steps, before that gain stands out of the noise); such a calm entropy stays calm through a
    dip of up to ``DIP_KEPT`` of the largest gain, one the return's own alert does not warn on."""
    peak = t.rows["peak"][rows]  # NaN until warm
    ratio = _ratios(t.rows["smoothed"][rows], peak)
    asked, holds = np.zeros(len(rows), bool), np.zeros(len(rows), bool)
    smooth, gain, drop = (np.full(len(rows), math.nan) for _ in range(3))
    best, classic = np.zeros(len(rows), bool), np.zeros(len(rows), bool)
    for reward, at in d.reward_rows(seqs):
        mine = (at >= 0) & (ratio == ratio)
        classic[mine] = reward is d.returns()
        g, r = _gain_at(reward, seqs[mine]), reward.rows
        top = r["level_peak"][at[mine]]
        dip = top - r["smoothed"][at[mine]]
        holds[mine] = (g > 0) & (dip <= HOLDS_BEST * g)
        smooth[mine], gain[mine], drop[mine] = r["smoothed"][at[mine]], g, dip
        best[mine] = r["level"][at[mine]] >= top
        asked |= mine
    begun = asked & (ratio >= FALL_BEGUN)  # entropy not halved yet: whether the reward holds
    last = np.maximum.accumulate(np.where(begun, np.arange(len(rows)), -1))
    before = np.concatenate(([-1], last[:-1]))
    n = t.rows["n"][rows]
    settled = np.where(before >= 0, holds[before], t.settled)
    since = np.where(before >= 0, smooth[before], t.halved_from)
    # the largest gain seen, kept through a dip (whose own steps can read as noise and void it)
    seen = np.fmax.accumulate(np.concatenate(([t.gain_seen], np.where(gain > 0, gain, 0.0))))[1:]
    t.gain_seen = float(seen[-1])
    keeps = np.where(classic, (seen > 0) & (drop <= DIP_KEPT * seen), holds)
    # learning, once the reward gained that much since entropy last stood above half its peak
    # (NaN: not known to have)
    grown = (seen > 0) & (smooth - since >= LEARNED_SINCE * seen)
    grew = np.maximum.accumulate(np.where(grown, np.arange(len(rows)), -1))
    learnt = (grew > last) | ((last < 0) & t.learned)
    t.learned = bool(learnt[-1])
    learned = classic & keeps & learnt
    rising = classic & best & (smooth > since)  # (a new best, above where it stood at halving)
    rising &= n - np.where(before >= 0, n[before], t.halved_at) <= RISING_GRACE
    if last[-1] >= 0:
        t.settled, t.halved_from = bool(holds[last[-1]]), float(smooth[last[-1]])
        t.halved_at = int(n[last[-1]])
    calm = asked & ~begun & ((keeps & settled) | learned | rising)
    return np.where(calm, 1.0, ratio), peak


FROZEN_MIN = 10  # readings at one value that are never unusual, whatever the run did before
FROZEN_RECENT = 500  # readings an ended stretch stays the baseline for
FROZEN_VALUES = 64  # distinct values whose frequency is counted (a discrete reward has few)
FROZEN_CHANCE = -6.0  # log10 chance below which a stretch is not the value's own frequency


class Stretches:
    """Runs of one value in a series: the current one, the longest that ended within the last
    ``FROZEN_RECENT`` readings, and how often each value was read (the first
    ``FROZEN_VALUES`` distinct ones; a continuous series reads each value about once).
    ``extend`` reads a batch of values at once, and keeps in ``rows`` what each value left."""

    def __init__(self) -> None:
        self.n = 0
        self.value = math.nan
        self.same = 0
        self.varied = False
        # (reading the stretch ended at, its length), lengths decreasing: a sliding maximum
        self._ended: deque[tuple[int, int]] = deque()
        self._counts: dict[float, int] = {}
        self.rows: dict[str, np.ndarray] = {}

    def longest(self) -> int:
        """The longest stretch that ended within the last ``FROZEN_RECENT`` readings."""
        return self._ended[0][1] if self._ended else 0

    def extend(self, values: np.ndarray) -> None:
        """Read a batch of finite values; per row (0: before the batch, i: after its i-th value)
        ``rows`` holds the readings seen (``n``), the current stretch's length (``same``),
        whether the series varied, the longest stretch ended in the window, the values counted
        (``distinct``) and how often the current value was read (``count``)."""
        m, n0, counts = len(values), self.n, self._counts
        first_row = {
            "same": self.same,
            "varied": self.varied,
            "longest": self.longest(),
            "distinct": len(counts),
            "count": counts.get(self.value, 0),
        }
        rows = {"n": n0 + np.arange(m + 1)}
        if not m:
            self.rows = rows | {k: np.array([v]) for k, v in first_row.items()}
            return
        i = np.arange(m)
        change = values != np.concatenate(([self.value], values[:-1]))
        begun = np.maximum.accumulate(np.where(change, i, -1))
        same = np.where(begun >= 0, i - begun + 1, self.same + i + 1)
        before = np.concatenate(([self.same], same[:-1]))
        ended = change & (before > 0)  # a stretch ended at reading n0 + i
        old = np.array(self._ended, np.int64).reshape(-1, 2)
        ends = np.concatenate((old[:, 0], n0 + i[ended]))
        lengths = np.concatenate((old[:, 1], before[ended]))
        n = n0 + i + 1
        lo = np.searchsorted(ends, n - FROZEN_RECENT, "right")
        longest = windows.range_max(lengths, lo, np.searchsorted(ends, n - 1, "right"))
        distinct, count = self._count(values)
        for key, tail in (
            ("same", same),
            ("varied", self.varied | (np.cumsum(ended) > 0)),
            ("longest", longest),
            ("distinct", distinct),
            ("count", count),
        ):
            rows[key] = np.concatenate(([first_row[key]], tail))
        self.rows = rows
        self.n, self.value, self.same = n0 + m, float(values[-1]), int(same[-1])
        self.varied = bool(rows["varied"][-1])
        # the sliding maximum's entries: each longer than every later one, in the window
        later = np.concatenate((np.maximum.accumulate(lengths[::-1])[::-1][1:], [-1]))
        keep = (lengths > later) & (ends > self.n - FROZEN_RECENT)
        self._ended = deque(zip(ends[keep].tolist(), lengths[keep].tolist(), strict=True))

    def _count(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Count a batch's values (a new one while fewer than ``FROZEN_VALUES`` are counted):
        the values counted after each, and how often each had been read then (0: not
        counted). One dict lookup a value while a new value may still be counted; from where
        none can (all counted, or every value left counted before) at once (``_count_known``)."""
        counts, n = self._counts, len(values)
        distinct, count = np.empty(n, np.int64), np.zeros(n, np.int64)
        vals: list[float] = []
        i = 0
        while i < n:
            stop = n
            if n - i >= 64:  # (numpy's fixed cost: a short batch goes one by one)
                keys = np.sort(np.fromiter(counts, float, len(counts)))
                which = np.searchsorted(keys, values[i:])
                known = (
                    keys[np.minimum(which, len(keys) - 1)] == values[i:] if len(keys) else which < 0
                )
                if len(counts) >= FROZEN_VALUES or known.all():
                    distinct[i:] = len(counts)
                    self._count_known(keys, which, known, count[i:])
                    break
                stop = i + int(known.argmin()) + 1  # through the next new value, then again
            vals = vals or values.tolist()
            for j in range(i, stop):
                v = vals[j]
                c = counts.get(v)
                if c is not None or len(counts) < FROZEN_VALUES:
                    c = counts[v] = (c or 0) + 1
                distinct[j], count[j] = len(counts), c or 0
            i = stop
        return distinct, count

    def _count_known(
        self, keys: np.ndarray, which: np.ndarray, known: np.ndarray, count: np.ndarray
    ) -> None:
        """Count the ``known`` of a batch's values (each counted before, ``keys[which]``, the
        counted values in order; no new one is): how often each had been read after it, into
        ``count``."""
        at = np.flatnonzero(known)
        if not len(at):
            return
        which = which[at]
        times = np.bincount(which, minlength=len(keys))
        # each value's readings in turn: its place among the readings of the same value
        place = np.empty(len(at), np.int64)
        place[np.argsort(which, kind="stable")] = np.arange(len(at)) - np.repeat(
            np.cumsum(times) - times, times
        )
        read = np.flatnonzero(times)
        got = keys[read].tolist()
        before = np.zeros(len(keys), np.int64)
        before[read] = [self._counts[v] for v in got]
        count[at] = before[which] + place + 1
        for v, b, k in zip(got, before[read].tolist(), times[read].tolist(), strict=True):
            self._counts[v] = b + k


def _frozen(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    """Readings in a row at one value below the reward's peak, as a multiple of the longest
    such stretch in the last ``FROZEN_RECENT`` readings (at least ``FROZEN_MIN``): a reward
    that varied and now never moves comes from a dead reward signal (a grader returning a
    constant, a reward wrapper zeroing it). At the peak it is a solved task (CartPole's 500).
    0 until the reward varied once, and while the value's own frequency explains the stretch
    (chance above 1e-6: a 0/1 reward that is mostly 0 is flat for long healthy stretches).
    Not judged on the episodes' mean return once the episodes themselves are read
    (``Detector.episodes``): a windowed mean's readings repeat each other (a sparse success's
    100-episode mean sits at one value for hundreds of healthy readings), and the episodes' own
    stretches tell a dead reward at once."""
    assert t.stretches is not None
    if t is d.episodes_mean():
        nothing = np.where(t.rows["n"][rows] >= d.w.warmup, 0.0, math.nan)
        return nothing, nothing
    s, r = t.stretches.rows, t.rows
    warm = r["n"][rows] >= d.w.warmup
    base = np.maximum(s["longest"][rows], FROZEN_MIN)
    same = s["same"][rows]
    live = s["varied"][rows] & (r["last"][rows] < r["peak"][rows])
    chance = _log_chance(same[live], s["count"][rows][live], s["n"][rows][live])
    frozen = np.zeros(len(rows), bool)
    frozen[live] = chance <= FROZEN_CHANCE
    value = np.where(frozen, same / base, 0.0)
    return np.where(warm, value, math.nan), np.where(warm, base, math.nan)


def _log_chance(same: np.ndarray, count: np.ndarray, n: np.ndarray) -> np.ndarray:
    """log10 of the chance that a current stretch is luck: each reading taking this value as
    often as it did before the stretch (Laplace-smoothed), independently. Within a hair of
    ``FROZEN_CHANCE`` it is worked out by ``math.log10`` as the per-value detector did."""
    ratio = (np.maximum(count - same, 0) + 1) / (n - same + 2)
    chance = same * np.log10(ratio)
    close = np.flatnonzero(np.abs(chance - FROZEN_CHANCE) < 1e-9)
    for j in close.tolist():
        chance[j] = int(same[j]) * math.log10(float(ratio[j]))
    return chance


SQRT2 = math.sqrt(2)
EVAL_SMOOTH = 3  # eval readings are rare: a drop must hold over the median of the last three


def _drop_from_best(d: Detector, t: Track, key: str) -> tuple[float, float]:
    """How far the held-out score (median of its last three readings) is below the best such
    median of the whole run, as a fraction of that best; 0 while the drop is within what noise
    explains (``_drop_guard``). The best never decays: a failure that persists keeps its drop."""
    if t.n < EVAL_SMOOTH:
        return math.nan, math.nan
    now = statistics.median(t.recent(EVAL_SMOOTH))
    t.best3 = now if math.isnan(t.best3) else max(t.best3, now)
    best = t.best3
    if not best > 0:
        return math.nan, best
    drop = best - now
    # a drop counts when it stands out of the readings' own noise (small eval sets are noisy;
    # each reading is its own evaluation, so step-to-step: a persisting drop is no noise)
    guard = _drop_guard(t.n - EVAL_SMOOTH + 1)
    if not drop > guard * t.noise(longest=1):
        return 0.0, best
    # a score's dips are heavier-tailed than a Gaussian's (quantised, a few hard prompts): the
    # robust noise misses them, the readings' spread does not; at most twice the robust noise,
    # so a learning curve's early jumps in the history do not hide a collapse (worked out only
    # for a drop)
    history = t.recent(d.w.history + 1)[:-1]
    if len(history) >= 3:
        spread = min(_pstdev(np.diff(history).tolist()) / SQRT2, 2 * t.noise(longest=1))
        if not drop > guard * spread:
            return 0.0, best
    return drop / best, best


def _drop_guard(medians: int) -> float:
    """How many readings' noise a held-out drop must exceed, when the best was picked from
    ``medians`` medians of three (sd ~0.67 of a reading): the best of m such medians sits about
    sqrt(2 ln m) of their sd above their level, the latest can sit as far below it by chance
    over the m chances it had, and one sd more covers the noise's own estimate; never under 2.
    2.6 for 3 medians, 3.5 for 10, 5.0 for 200."""
    return max(2.0, 0.67 * (2 * math.sqrt(2 * math.log(max(medians, 1))) + 1))


def _hacking_rise(d: Detector, t: Track, key: str) -> tuple[float, float]:
    """How much the training reward rose since the true objective was last at its best, once a
    later objective reading failed to improve on it (the least over the objective series: any
    objective still improving clears it). Once the run declared its true objective (a key
    mapped to ``objective``), only declared objectives count: a held-out score of the training
    reward itself (TRL's ``eval_reward``) rises with the hack."""
    if not t.warm or not d.objectives:
        return math.nan, math.nan
    declared = [o for labels, o in d.objectives.items() if labels[-1:] == (DECLARED,)]
    rises = []
    for obj in declared or d.objectives.values():
        if obj.since_best == 0:
            return 0.0, math.nan  # this objective just improved or has one reading
        # the objective peaked before this reward warmed up: its first warm level is the start
        ref = obj.proxy_at_best.setdefault(key, t.smoothed)
        rise = t.smoothed - ref
        # a rise counts when it stands out of the reward's step-to-step noise (worked out
        # only for a rise)
        if not (rise > 0 and rise > 3 * t.noise()):
            rise = 0.0
        scale = max(abs(ref), 0.25 * (t.peak - t.floor), 1e-12)
        rises.append((rise / scale, ref))
    return min(rises)


def _zero_std(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    """The zero-std share of groups over the last ``2 * smooth`` batches, 0 while the reward
    is at its best (a solved task has one reward per group and nothing to learn)."""
    span = 2 * d.w.smooth
    seen = t.rows["n"][rows] >= span  # the alert says "of the last 10 batches"
    share = np.full(len(rows), math.nan)
    share[seen] = _window_sums(t.x, t.base - 1 + rows[seen], span) / span  # statistics.fmean
    peak = np.full(len(rows), math.nan)
    best = np.zeros(len(rows), bool)
    for reward, at in d.reward_rows(seqs):
        r = reward.rows
        top, start = r["peak"][at], r["start"][at]
        low = np.minimum(r["floor"][at], start)
        mine = at >= 0
        best[mine] = ((top > start) & (r["smoothed"][at] >= top - 0.05 * (top - low)))[mine]
        peak[mine] = top[mine]
    return np.where(seen, np.where(best, 0.0, share), math.nan), np.where(seen, peak, math.nan)


def _window_sums(x: np.ndarray, ends: np.ndarray, w: int) -> np.ndarray:
    """``math.fsum`` of each window of ``w`` values of ``x`` ending at ``ends`` (ascending), as
    differences of running sums where each is exact: values that ``_exact_sums`` adds exactly
    adding up to less than 2**32 in magnitude (every running sum is a multiple of 2**-20 below
    2**33, and so is every difference), or values whose windows ``_integers`` adds in int64
    (running sums that wrap past 2**63 still differ by the exact window sum, modulo 2**64);
    no -0.0. Else ``_sums`` of the windows."""
    lo = int(ends[0]) - w + 1 if len(ends) else -1
    if lo >= 0:
        span = x[lo : int(ends[-1]) + 1]
        at = ends - lo + 1
        if not (np.signbit(span) & (span == 0)).any():
            if _exact_sums(span) and np.abs(span).sum() < 2.0**32:
                running = np.concatenate(([0.0], np.cumsum(span)))
                return running[at] - running[at - w]
            scaled = _integers(span, w)
            if scaled is not None:
                whole, shift = scaled
                counted = np.concatenate(([0], np.cumsum(whole)))
                return np.ldexp((counted[at] - counted[at - w]).astype(float), shift)
    return _sums(windows.windows(x, ends, w))


def _exact_sums(values: np.ndarray) -> bool:
    """Whether ``values`` are multiples of 2**-20 below 2**28 (such as a share of a few
    groups): numpy adds a few of them exactly."""
    scaled = values * 2.0**20
    return bool((np.abs(values) < 2.0**28).all() and (scaled == np.floor(scaled)).all())


def _sums(rows: np.ndarray) -> np.ndarray:
    """``math.fsum`` of each row: added by numpy where every partial sum is exact (multiples
    of 2**-20 below 2**28, such as a share of a few groups, no -0.0), in integers where the
    values' exponents are close (``_integers``), else one by one."""
    if (np.signbit(rows) & (rows == 0)).any():  # (-0.0: fsum's sign of a zero, one by one)
        return np.fromiter(map(math.fsum, rows.tolist()), float, len(rows))
    if _exact_sums(rows):
        return rows.sum(axis=1)
    scaled = _integers(rows, rows.shape[1])
    if scaled is not None:
        whole, shift = scaled
        return np.ldexp(whole.sum(axis=1).astype(float), shift)  # (one rounding: to nearest)
    return np.fromiter(map(math.fsum, rows.tolist()), float, len(rows))


def _integers(values: np.ndarray, width: int) -> tuple[np.ndarray, int] | None:
    """``values`` as int64 multiples of one power of two (2**(lo - 53), ``lo`` their least
    exponent; exact: 53 bits each) and that power's exponent, where ``width`` of them add up
    within int64 (exponents at most ``63 - 53 - bits(width)`` apart: a share like k/6 of a
    few groups), so that a sum of ``width`` is exact and its float the correctly rounded sum
    (``math.fsum``'s); None elsewhere (or where the result could be subnormal)."""
    if not np.isfinite(values).all():
        return None
    exponents = np.frexp(values)[1][values != 0]
    if not exponents.size:
        return np.zeros(values.shape, np.int64), 0
    lo, hi = int(exponents.min()), int(exponents.max())
    if hi - lo + 53 + width.bit_length() > 63 or lo - 53 < -1021:
        return None
    return np.ldexp(values, 53 - lo).astype(np.int64), lo - 53


def _band_gap(d: Detector, t: Track, key: str) -> tuple[float, float]:
    """The smoothed value against the reference band at the run's latest logged step
    (``Detector.band``; ``_add`` says which series' curve), and the band's edge on the worse
    side (its low for "both")."""
    curve = d.curve
    if curve is None or d.step_now is None or not t.warm:
        return math.nan, math.nan
    found = curve.gap(t.smoothed, d.step_now)
    if found is None:  # past the steps the references reached: no band, nothing exported
        d.band_now.pop(d.banded, None)
        d.band_ended = True
        return math.nan, math.nan
    gap, low, high = found
    d.band_now[d.banded] = (low, high)
    return gap, high if curve.worse == "above" else low


REWARDS = ("rl_reward_mean", "rl_episode_return")
OBJECTIVE = "rl_eval_score"
DECLARED = keys.OBJECTIVE  # the split of a key declared the run's true objective
ZERO_STD = "rl_zero_std_groups_ratio"

SIGNALS: tuple[Signal, ...] = (
    Signal(
        "entropy_ratio_to_peak",
        "rl_entropy",
        "below",
        _entropy_collapse,
        "Smoothed policy entropy as a fraction of its peak so far; 1 while the reward rose "
        "significantly and holds its best (convergence).",
        "fraction",
    ),
    Signal(
        "entropy_ratio_to_start",
        "rl_entropy",
        "above",
        _ratio_to_start,
        "Smoothed policy entropy as a multiple of its level at the run's start.",
        "multiple",
    ),
    Signal(
        "kl_reference_level",
        "rl_kl_reference",
        "above",
        _sustained,
        "KL to the reference (nats) that half of the last 2 x smooth values reach; baseline: "
        "the history's median.",
        "nats",
    ),
    Signal(
        "kl_reference_zscore",
        "rl_kl_reference",
        "above",
        _kl_jump,
        "Robust z-score of the latest KL to the reference against its history (0 below 0.1 nats).",
        "sigma",
    ),
    Signal(
        "grad_norm_spike_ratio",
        "rl_grad_norm",
        "above",
        _spike_ratio,
        "Latest gradient norm as a multiple of its history's 90th percentile.",
        "multiple",
    ),
    Signal(
        "value_loss_ratio",
        "rl_value_loss",
        "above",
        _ratio_to_typical,
        "Smoothed value loss as a multiple of its history's median magnitude.",
        "multiple",
    ),
    *(
        Signal(
            "reward_gain_lost_ratio",
            m,
            "above",
            _gain_lost,
            "Fraction of the run's reward gain (start to peak of the sustained level) lost since "
            "the peak; 0 while the gain is within 6x the series' noise or before 15 values. A "
            "discrete reward (a 0/1 success) too noisy for that: the drop of its readings since "
            "a CUSUM found them likely collapsed (odds 1e6), against its typical level.",
            "fraction",
        )
        for m in REWARDS
    ),
    *(
        Signal(
            "reward_frozen_ratio",
            m,
            "above",
            _frozen,
            "Readings in a row at one value below the reward's peak, as a multiple of the "
            "longest such stretch in the last 500 readings (at least 10); 0 at the peak (a "
            "solved task) and while the value's own frequency explains the stretch (chance "
            "above 1e-6).",
            "multiple",
        )
        for m in REWARDS
    ),
    *(
        Signal(
            "reward_hacking_rise_ratio",
            m,
            "above",
            _hacking_rise,
            "Rise of the smoothed training reward since the true objective (held-out or "
            "objective score) was last at its best, relative to the reward then.",
            "fraction",
        )
        for m in REWARDS
    ),
    Signal(
        "eval_drop_ratio",
        OBJECTIVE,
        "above",
        _drop_from_best,
        "Held-out / objective score (median of its last 3 readings) below its best such median, "
        "as a fraction of the best; 0 within twice the readings' noise.",
        "fraction",
    ),
    Signal(
        "zero_std_unsolved_ratio",
        ZERO_STD,
        "above",
        _zero_std,
        "Share of prompt groups with one reward over the last 2 x smooth batches, 0 while the "
        "reward is at its best.",
        "fraction",
    ),
    Signal(
        "advantage_std_ratio_to_peak",
        "rl_advantage_std",
        "below",
        _ratio_to_peak,
        "Smoothed advantage standard deviation as a fraction of its peak so far.",
        "fraction",
    ),
    Signal(
        "length_ratio_to_start",
        "rl_response_length_mean_tokens",
        "above",
        _ratio_to_start,
        "Smoothed mean response length as a multiple of its level at the run's start.",
        "multiple",
    ),
    Signal(
        "length_ratio_to_peak",
        "rl_response_length_mean_tokens",
        "below",
        _ratio_to_peak,
        "Smoothed mean response length as a fraction of its peak so far.",
        "fraction",
    ),
    Signal(
        "truncation_level",
        "rl_truncation_ratio",
        "above",
        _level,
        "Smoothed share of responses cut at the length limit.",
        "fraction",
    ),
    Signal(
        "format_ratio_to_peak",
        "rl_format_compliance_ratio",
        "below",
        _ratio_to_peak,
        "Smoothed format compliance as a fraction of its peak so far.",
        "fraction",
    ),
    *(
        Signal(
            BAND_GAP,
            m,
            "above",
            _band_gap,
            "How far the smoothed value is outside the reference band (earlier healthy runs at "
            "the same step, rlpulse.detect.band) on its worse side, as a share of the "
            "references' whole range; the series label names the banded series, the baseline "
            "is the band's edge on that side. Only with a reference band.",
            "fraction",
        )
        for m in band.BANDED
    ),
)
SIGNAL_NAMES = frozenset(s.name for s in SIGNALS)


def _episode_lost(d: Detector, t: Track, rows: np.ndarray, seqs: np.ndarray) -> Pair:
    """Single episodes' returns: a discrete reward's drop (``Drops``), a continuous return's
    fall back to the run's start (``Falls``); no smoothed level (single episodes are too noisy
    for one: the 100-episode mean is judged as ``rl_episode_return``)."""
    asked = t.rows["n"][rows] >= DISCRETE_MIN
    t.back = t.lost[2] if asked[-1] else None
    return np.where(asked, t.lost[0], math.nan), np.where(asked, t.lost[1], math.nan)


def _either(a: Lost, b: Lost, first: np.ndarray) -> Lost:
    """Two readers' drops of one read: ``a``'s at the rows ``first`` picks, ``b``'s at the
    others."""
    last = b[2] if not len(first) or not first[-1] else a[2]
    return np.where(first, a[0], b[0]), np.where(first, a[1], b[1]), last


EPISODES = "episodes"  # the series of single episodes' returns (``Detector.episodes``)
_MEAN = {s.compute: s for s in SIGNALS if s.metric == REWARDS[1]}
_LOST, _FROZEN = _MEAN[_gain_lost], _MEAN[_frozen]
EPISODE_SIGNALS = (
    Signal(
        _FROZEN.name,
        _FROZEN.metric,
        "above",
        _frozen,
        "The same, of single episodes' returns (series episodes).",
        _FROZEN.unit,
    ),
    Signal(
        _LOST.name,
        _LOST.metric,
        "above",
        _episode_lost,
        "The same, of single episodes' returns (series episodes): where they are discrete "
        "(a 0/1 success), their drop since a CUSUM found them likely collapsed; where they are "
        "continuous, once a CUSUM found them likely fallen back to the run's first episodes' "
        "level.",
        _LOST.unit,
    ),
)


def lag(signal: str, w: StepWindows) -> int:
    """How many bad input values before the one that turns ``signal`` bad: half a median's
    window (the median of ``smooth`` turns at its (smooth // 2 + 1)-th bad value, the sustained
    median of ``2 * smooth`` at its (smooth + 1)-th), none for a latest-value signal."""
    compute = _COMPUTE[signal]
    if compute in (_kl_jump, _spike_ratio):
        return 0
    if compute is _drop_from_best:
        return EVAL_SMOOTH // 2
    if compute in (_sustained, _zero_std):
        return w.smooth
    return w.smooth // 2


_COMPUTE = {s.name: s.compute for s in SIGNALS}
_ABOVE = {s.name: s.worse == "above" for s in (*SIGNALS, *EPISODE_SIGNALS)}  # worse above
# the signals worked out one value at a time: they depend on a best so far or on another series
# at that value (the objectives, a band); ``Detector._paths`` prepares the other path-dependent
# state (a reward's runs, drops and gains) before the batched signals read it
_PER_VALUE = frozenset((_drop_from_best, _hacking_rise, _band_gap))
# every watched metric is a catalog entry (a misspelt name raises KeyError at import)
for _s in SIGNALS:
    catalog.get(_s.metric)
_BY_METRIC: dict[str, tuple[Signal, ...]] = {}
for _s in SIGNALS:
    _BY_METRIC[_s.metric] = (*_BY_METRIC.get(_s.metric, ()), _s)
WATCHED = frozenset(_BY_METRIC)
# rl_reward_std == 0 means every group of the batch had one reward: zero-std evidence for
# trainers that log no zero-std share (older TRL); group outcomes all_good + all_bad likewise
_REWARD_STD = catalog.get("rl_reward_std").name
_OUTCOME = catalog.get("rl_group_outcome_ratio").name
# an end-of-sequence share is the complement of truncation (tinker's format_eos)
_EOS = catalog.get("rl_completion_eos_ratio").name
TRUNCATION = catalog.get("rl_truncation_ratio").name
OBSERVED = WATCHED | {_REWARD_STD, _OUTCOME, _EOS}


@dataclass
class _Objective:
    """One true-objective series: its best, readings since, and the rewards at the best."""

    best: float | None = None
    since_best: int = 0
    proxy_at_best: dict[str, float] = field(default_factory=dict)


# ---- the detector ----------------------------------------------------------------------------


SeriesKey = tuple[str, tuple[str, ...]]
SETTLE_AT = 16384  # values and steps waiting for a read past which the applier reads them
STEP = -1  # the series id of a logged step among the values waiting
_ZERO_STD, _COMPLEMENT = "zero_std", "complement"  # values ``observe`` turns into another's


class _Out:
    """A signal's values at the values of one read, before they are exported."""

    __slots__ = ("back", "baselines", "ended", "values", "where")

    def __init__(self) -> None:
        self.values: list[float] | np.ndarray = []
        self.baselines: list[float] | np.ndarray = []
        self.where: list[int] | np.ndarray = []  # each value's place in the read
        self.back: int | None = None  # the newest value's own lag (``Track.back``)
        self.ended = -1  # the last value at which the band ended (``_band_gap``)


class Detector:
    """Watches the series the signals read and keeps their exported values.

    ``observe`` is called with every value written to a watched metric (when the exporter
    applies a ``log()`` snapshot): it appends the value to those waiting (and ``step`` the
    step), nothing more. A read (``samples``, ``onset`` ...) works out every signal at every
    value waiting: each series' statistics at once with numpy (``Track``), most signals too,
    those that depend on their own path as well (a reward's runs of one value and gains,
    entropy's convergence: ``Stretches.extend``, ``gains``); what depends on a discrete reward's
    CUSUMs, the objectives' bests or a band goes through its values one at a time in the order
    they were logged (``_loop``). So what a read finds does not depend on when it reads. Past
    ``SETTLE_AT`` waiting values the applier reads them itself (a run nobody scrapes keeps no
    more).
    """

    def __init__(self, windows: StepWindows | None = None) -> None:
        self.w = windows or StepWindows()
        self._tracks: dict[SeriesKey, Track] = {}
        self._falls: list[tuple[int, Falls]] = []  # the episodes' tracks' ids and ``Falls``
        self._plain: dict[SeriesKey, Track] = {}  # watched series ``observe`` hands on as they are
        self._series: list[tuple[Track, SeriesKey, tuple[Signal, ...], str]] = []  # by id
        self._held: dict[tuple[str, str], Held] = {}
        self._trails: dict[tuple[str, str], Trail] = {}
        self.objectives: dict[tuple[str, ...], _Objective] = {}  # per objective series
        self._outcomes: dict[tuple[str, ...], float] = {}  # group outcome -> latest share
        self._stamps: deque[float] = deque(maxlen=self.w.history)
        self._last_step: float | None = None
        self._zero_std_direct = False
        self._truncation_direct = False
        self._calls = 0
        self._steps: deque[tuple[int, float]] = deque(maxlen=TRAIL)  # (call, step)
        # waiting: a series id (or STEP) and its value (or the step) each, the rows of
        # ``observe_rows`` as arrays (``_chunks``, older than the lists); the steps' times
        self._ids: list[int] = []
        self._values: list[float] = []
        self._times: list[float] = []
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []
        self._chunked = 0  # values in ``_chunks``
        self._lock = threading.Lock()  # one reader at a time (a fresh one in a forked child)
        self._pending = threading.Lock()  # taking what waits against ``observe_rows`` adding
        _detectors.add(self)
        self._seq = 0  # values and steps read so far
        self._read_calls = 0  # steps among them
        self._read_step = math.nan  # the newest of them, and its time
        self._read_stamp = math.nan
        self._batch = 0  # reads so far
        self.seq_now = 0  # the sequence number of the value being read (``_reward``)
        self.step_now: float | None = None  # the run's latest step at that value
        # the log() call a signal's latest value says its failure began at, where it says so
        self._began: dict[tuple[str, str], int] = {}
        self.band: band.Band | None = None  # earlier healthy runs' band (``_band_gap``)
        self.curve: band.Curve | None = None  # the band of the series being read
        self.banded = ""  # that series' name (``band.series_name``)
        self.band_now: dict[str, tuple[float, float]] = {}  # series -> (low, high) at the step
        self.band_ended = False  # the band ended at the value just read (``_band_gap``)
        self.scratch = Scratch()  # the reads' reused matrices (one reader at a time)

    @property
    def tracks(self) -> dict[SeriesKey, Track]:
        """The watched series, read up to the latest logged value."""
        self.settle()
        return self._tracks

    @property
    def held(self) -> dict[tuple[str, str], Held]:
        """The exported signals by (signal, series), read up to the latest logged value."""
        self.settle()
        return self._held

    # -- input
    def observe(self, metric: str, labels: tuple[str, ...], value: float) -> None:
        """A value written to ``metric`` with its own label values (catalog order)."""
        track = self._plain.get((metric, labels))
        if track is not None:  # (a watched series seen here before: ``_add`` at once)
            self._ids.append(track.id)
            self._values.append(value)
            if len(self._values) + self._chunked >= SETTLE_AT:
                self.settle()
            return
        if metric == _REWARD_STD:
            if not self._zero_std_direct and math.isfinite(value):
                self._add(ZERO_STD, (), 1.0 if value == 0 else 0.0)
            return
        if metric == _OUTCOME:
            self._outcome(labels, value)
            return
        if metric == _EOS:
            if not self._truncation_direct and math.isfinite(value):
                self._add(TRUNCATION, (), 1.0 - value)
            return
        if metric == TRUNCATION:
            self._truncation_direct = True
        if metric == ZERO_STD:
            self._zero_std_direct = True
        if metric == OBJECTIVE and labels[-1:] == ("train",):
            return  # a score on the training split is not a held-out objective
        if metric in WATCHED:
            self._plain[(metric, labels)] = self._add(metric, labels, value)

    def observe_rows(
        self,
        series: list[SeriesKey],
        values: np.ndarray,
        steps: np.ndarray | None,
        stamps: np.ndarray,
    ) -> None:
        """Rows of ``observe`` calls (one value per series of ``series``, in its order), each
        row followed by ``step`` (``steps``: None when no row has one): the same as those calls
        one by one, appended at once once each series goes where it went before (``_routes``)."""
        routes = self._routes(series)
        if routes is None:
            for r, row in enumerate(values.tolist()):
                for (metric, labels), v in zip(series, row, strict=True):
                    self.observe(metric, labels, v)
                if steps is not None:
                    self.step(float(steps[r]), float(stamps[r]))
            return
        n, k = values.shape
        ids = np.empty((n, k + 1), np.int64)
        ids[:] = [track for track, _ in routes] + [STEP]
        got = np.empty((n, k + 1))
        got[:, :k] = values  # (a column that goes nowhere is not kept)
        keep = np.ones((n, k + 1), bool)
        for j, (_, how) in enumerate(routes):
            if how is None:
                continue
            column = values[:, j]
            keep[:, j] = np.isfinite(column) if how else False
            if how == _ZERO_STD:
                got[:, j] = np.where(column == 0, 1.0, 0.0)
            elif how == _COMPLEMENT:
                got[:, j] = 1.0 - column
        keep[:, k] = False
        if steps is not None:
            prior = -math.inf if self._last_step is None else self._last_step
            newer = steps > np.maximum.accumulate(np.concatenate(([prior], steps[:-1])))
            got[:, k], keep[:, k] = steps, newer
            taken, times = steps[newer].tolist(), stamps[newer].tolist()
            if taken:
                self._last_step = taken[-1]
                self._stamps.extend(times)
                calls = range(self._calls, self._calls + len(taken))
                self._steps.extend(zip(calls, taken, strict=True))
                self._calls += len(taken)
                self._times.extend(times)  # before their entries (``step``)
        flat = keep.ravel()
        with self._pending:  # (the values ``observe`` left in the lists come first)
            if self._values:
                n = len(self._values)
                self._chunks.append(_arrays(self._ids[:n], self._values[:n]))
                del self._ids[:n], self._values[:n]
                self._chunked += n
            self._chunks.append((ids.ravel()[flat], got.ravel()[flat]))
            self._chunked += int(np.count_nonzero(flat))
        if len(self._values) + self._chunked >= SETTLE_AT:
            self.settle()

    def _routes(self, series: list[SeriesKey]) -> list[tuple[int, str | None]] | None:
        """Where ``observe`` puts each series' values: (track id, None) as they are, (id,
        ``_ZERO_STD``/``_COMPLEMENT``) the finite ones made into that, (id, "") nowhere; None
        where a series is new here or its value decides more (a group outcome)."""
        routes: list[tuple[int, str | None]] = []
        derived = {
            _REWARD_STD: (ZERO_STD, self._zero_std_direct, _ZERO_STD),
            _EOS: (TRUNCATION, self._truncation_direct, _COMPLEMENT),
        }
        for key in series:
            track = self._plain.get(key)
            metric, labels = key
            if track is not None:
                routes.append((track.id, None))
            elif metric in derived:
                into, direct, how = derived[metric]
                target = self._tracks.get((into, ()))
                if direct:
                    routes.append((STEP, ""))
                elif target is None:
                    return None
                else:
                    routes.append((target.id, how))
            elif metric == OBJECTIVE and labels[-1:] == ("train",):
                routes.append((STEP, ""))
            else:  # a watched series not seen yet, a group outcome
                return None
        return routes

    def _outcome(self, labels: tuple[str, ...], value: float) -> None:
        self._outcomes[labels] = value
        if labels == ("all_bad",) and not self._zero_std_direct:
            share = value + self._outcomes.get(("all_good",), 0.0)
            if math.isfinite(share):
                self._add(ZERO_STD, (), share)

    def step(self, step: float, stamp: float) -> None:
        """A logged step at wall time ``stamp``: feeds the run's own step interval."""
        if self._last_step is not None and step <= self._last_step:
            return
        self._last_step = step
        self._stamps.append(stamp)
        self._steps.append((self._calls, step))
        self._calls += 1
        self._times.append(stamp)  # before its entry: a reader that sees the entry finds it
        self._ids.append(STEP)
        self._values.append(step)
        if len(self._values) + self._chunked >= SETTLE_AT:
            self.settle()

    def episodes(self, returns: list[float], lengths: list[float]) -> None:
        """Finished episodes' own returns and lengths (``observe_episodes``), series
        ``episodes``: a reward signal lost, a discrete reward's drop and a return's fall to the
        start level show in them before the 100-episode mean (``rl_episode_return``) has
        moved."""
        key = (REWARDS[1], (EPISODES,))
        for value, length in zip(returns, lengths, strict=True):
            track = self._tracks.get(key) or self._track(key, EPISODE_SIGNALS, EPISODES)
            assert track.falls is not None
            track.falls.lengths.append(length)  # before its value: a read that sees it finds it
            self._add(REWARDS[1], (EPISODES,), value, EPISODE_SIGNALS, EPISODES)

    def _add(
        self,
        metric: str,
        labels: tuple[str, ...],
        value: float,
        signals: tuple[Signal, ...] | None = None,
        series: str | None = None,
    ) -> Track:
        track = self._tracks.get((metric, labels))
        if track is None:
            track = self._track((metric, labels), signals, series)
        self._ids.append(track.id)
        self._values.append(value)
        if len(self._values) + self._chunked >= SETTLE_AT:
            self.settle()
        return track

    def _track(
        self, key: SeriesKey, signals: tuple[Signal, ...] | None, series: str | None
    ) -> Track:
        metric, labels = key
        track = Track(self.w)
        track.scratch = self.scratch
        if metric in REWARDS:
            track.stretches, track.drops = Stretches(), Drops()
        if series == EPISODES:
            track.falls = Falls()
            self._falls.append((len(self._series), track.falls))
        sigs = _BY_METRIC[metric] if signals is None else signals
        # the two reward metrics feed the same signals: the series label tells them apart
        if series is None:
            series = metric.removeprefix("rl_") if metric in REWARDS else ",".join(labels)
        track.id = len(self._series)
        track.looped = (
            metric in REWARDS or metric == OBJECTIVE or any(s.compute in _PER_VALUE for s in sigs)
        )
        self._series.append((track, key, sigs, series))
        self._tracks[key] = track
        return track

    # -- reading the values waiting
    def settle(self) -> None:
        """Work out every signal at every value logged since the last read (the class doc).
        Safe to call from any thread."""
        with self._lock:
            with self._pending:
                chunks, self._chunks, self._chunked = self._chunks, [], 0
                n = len(self._values)  # appended last: their ids and times are there too
                if n:
                    chunks.append(_arrays(self._ids[:n], self._values[:n]))
                    del self._ids[:n], self._values[:n]
            if not chunks:
                return
            ids = np.concatenate([i for i, _ in chunks]) if len(chunks) > 1 else chunks[0][0]
            values = np.concatenate([v for _, v in chunks]) if len(chunks) > 1 else chunks[0][1]
            steps = ids == STEP
            k = int(np.count_nonzero(steps))
            times = np.array(self._times[:k], float)
            del self._times[:k]
            for i, falls in self._falls:
                falls.take(int(np.count_nonzero(ids == i)))
            try:
                self._read(ids, values, steps, times)
            except Exception:  # a bug, not the trainer's: a scrape still answers
                log.warning("rlpulse: reading the step detector's values failed", exc_info=True)

    def _read(
        self, ids: np.ndarray, values: np.ndarray, steps: np.ndarray, times: np.ndarray
    ) -> None:
        self._batch += 1
        seqs = np.arange(self._seq, self._seq + len(ids))
        self._seq += len(ids)
        # per entry: its log() call, and the time and step of the latest step before it
        before = np.concatenate(([0], np.cumsum(steps)))[: len(steps)]  # (not cumsum - steps:
        # a second pass, over bools)
        calls = self._read_calls + before
        stamps = np.concatenate(([self._read_stamp], times))[before]
        stepped = np.concatenate(([self._read_step], values[steps]))  # (by ``before``)
        self._read_calls += len(times)
        if len(times):
            self._read_stamp, self._read_step = float(times[-1]), float(values[steps][-1])
        # each series' values: their statistics at once
        read: list[tuple[Track, np.ndarray]] = []
        batches = []
        for i in np.flatnonzero(np.bincount(ids + 1)[1:]).tolist():  # (STEP is -1)
            where = np.flatnonzero(ids == i)
            track = self._series[i][0]
            v = values[where]
            finite = np.isfinite(v)
            track.born = min(track.born, int(seqs[where[0]]))
            batches.append(v[finite])
            if track.stretches is not None:
                track.stretches.extend(batches[-1])
                track.discrete = track.stretches.rows["distinct"] <= DISCRETE_VALUES
            track.batch, track.seqs, track.ev_rows = self._batch, seqs[where], np.cumsum(finite)
            read.append((track, where))
        extend_tracks([t for t, _ in read], batches)
        out: dict[tuple[str, str], _Out] = {}
        looped = [(t, w) for t, w in read if t.looped]
        if looped:
            self._loop(looped, seqs, values, (stepped, before), out)
        self._ask_gains(read)
        for track, where in read:
            _, _, sigs, series = self._series[track.id]
            for sig in sigs:
                if sig.compute not in _PER_VALUE:
                    o = out[(sig.name, series)] = _Out()
                    batched = cast(Batched, sig.compute)
                    o.values, o.baselines = batched(self, track, track.ev_rows, track.seqs)
                    o.back, track.back = track.back, None
                    o.where = where
        for track, _ in read:
            track.finish()
        for key, o in out.items():
            self._export(key, o, _ABOVE[key[0]], calls, stamps)

    def _loop(
        self,
        read: list[tuple[Track, np.ndarray]],
        seqs: np.ndarray,
        values: np.ndarray,
        at_step: tuple[np.ndarray, np.ndarray],
        out: dict[tuple[str, str], _Out],
    ) -> None:
        """What is still worked out one value at a time, in the order the values were logged:
        a discrete reward's drops (``Drops``, read at each of its values: ``Drops.extend``), the
        objectives' bests, and the signals that read them or a band at that value
        (``_PER_VALUE``). ``at_step``: the read's steps (the one before it first), and the
        steps before each entry."""
        live = bool(self.objectives) or any(self._series[t.id][1][0] == OBJECTIVE for t, _ in read)
        plans, parts = [], []
        for t, where in read:
            _, (metric, labels), sigs, series = self._series[t.id]
            banded, curve = "", None
            if self.band is not None and sigs is _BY_METRIC[metric] and metric in band.BANDED:
                banded = band.series_name(metric, labels)
                curve = self.band.curves.get(banded)
            outs = []
            for sig in sigs:
                name = series
                if sig.compute not in _PER_VALUE or (sig.compute is _hacking_rise and not live):
                    continue  # (no objective yet: no rise, nothing exported)
                if sig.compute is _band_gap:  # one signal over several metrics: its own series
                    if curve is None:
                        continue
                    name = banded
                o = out[(sig.name, name)] = _Out()
                o.values, o.baselines = np.full(len(where), math.nan), np.full(len(where), math.nan)
                o.where = where
                outs.append((cast(Compute, sig.compute), o))
            drops = t.drops
            dropped = t.discrete[t.ev_rows] if drops is not None else np.zeros(len(where), bool)
            if outs or metric == OBJECTIVE:  # every value in the order they were logged
                lost: list[tuple[int, float, float, int | None]] = []  # (value, drop, typ., lag)
                plans.append((t, metric, labels, outs, banded, curve, drops, lost))
                take = np.arange(len(where))
                parts.append((where[take], np.full(len(take), len(plans) - 1), take, dropped))
            elif drops is not None:  # a reward's discrete values: in their own order
                take = np.flatnonzero(dropped)
                t.lost = drops.read(values[where[take]], take, len(where))
                if t.falls is not None:  # single episodes' returns: every one read
                    falls = t.falls.read(values[where], np.arange(len(where)), len(where))
                    t.lost = _either(t.lost, falls, dropped)
        where = np.concatenate([w for w, _, _, _ in parts] or [np.empty(0, np.int64)])
        several = sum(len(w) > 0 for w, _, _, _ in parts) > 1
        order = np.argsort(where, kind="stable") if several else np.arange(len(where))
        where = where[order]
        for p, k, drop, value, step, seq in zip(
            np.concatenate([p for _, p, _, _ in parts] or [where])[order].tolist(),
            np.concatenate([k for _, _, k, _ in parts] or [where])[order].tolist(),
            np.concatenate([d for _, _, _, d in parts] or [where])[order].tolist(),
            values[where].tolist(),
            at_step[0][at_step[1][where]].tolist(),
            seqs[where].tolist(),
            strict=True,
        ):
            t, metric, labels, outs, banded, curve, drops, lost = plans[p]
            t.at(int(t.ev_rows[k]))
            if drop:
                lost.append((k, *drops.extend([value])[0]))
            self.seq_now, self.step_now = seq, None if step != step else step
            if metric == OBJECTIVE:
                self._objective(labels, t)
            if banded:
                self.banded, self.curve = banded, curve
            for compute, o in outs:
                o.values[k], o.baselines[k] = compute(self, t, metric)
                o.back, t.back = t.back, None
                if self.band_ended:
                    o.ended, self.band_ended = k, False
        for t, *_, drops, lost in plans:
            if drops is not None:
                n = len(t.ev_rows)
                t.lost = (np.full(n, math.nan), np.full(n, math.nan), None)
                if lost:
                    at, drop, typical, back = zip(*lost, strict=True)
                    t.lost[0][list(at)], t.lost[1][list(at)] = drop, typical
                    t.lost = (*t.lost[:2], back[-1] if at[-1] == n - 1 else None)

    def _ask_gains(self, read: list[tuple[Track, np.ndarray]]) -> None:
        """Each reward's gains (``gains``), asked where and in the order the signals ask them:
        at the reward's own values where its level exists and it is not discrete
        (``_gain_lost``), and at entropy's values with a ratio (``_entropy_collapse``)."""
        asks: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}  # reward id -> (seqs, rows)
        for t, _ in read:
            computes = {s.compute for s in self._series[t.id][2]}
            rows = t.ev_rows
            if _gain_lost in computes:
                level = t.rows["level"][rows]
                mine = (level == level) & ~t.discrete[rows]
                asks.setdefault(t.id, []).append((t.seqs[mine], rows[mine]))
            if _entropy_collapse in computes:
                ratio = _ratios(t.rows["smoothed"][rows], t.rows["peak"][rows])
                for reward, at in self.reward_rows(t.seqs):
                    mine = (at >= 0) & (ratio == ratio)
                    asks.setdefault(reward.id, []).append((t.seqs[mine], at[mine]))
        for t, _ in read:
            t.gains = (np.empty(0, np.int64), np.empty(0))
        for tid, parts in asks.items():
            track = self._series[tid][0]
            asked = np.concatenate([s for s, _ in parts])
            order = np.argsort(asked, kind="stable")
            rows = np.concatenate([r for _, r in parts])[order]
            track.gains = (asked[order], gains(track, rows))

    def _export(
        self, key: tuple[str, str], o: _Out, above: bool, calls: np.ndarray, stamps: np.ndarray
    ) -> None:
        """Hold a signal's values of one read, keep them in its trail."""
        values = np.asarray(o.values, float)
        baselines = np.asarray(o.baselines, float)
        where = np.asarray(o.where, np.int64)
        kept = values == values
        every = bool(kept.all())
        if key not in self._held and not (every or kept.any()):
            return  # never exported yet: nothing to hold
        cut = o.ended + 1  # the band ended at value ``o.ended``: what came before is let go
        if cut:
            self._hold(key, above, values[:cut], baselines[:cut], stamps[where[:cut]])
            self._held.pop(key, None)
        if every:  # (no value to leave out: no copies)
            self._hold(key, above, values[cut:], baselines[cut:], stamps[where[cut:]], True)
        else:
            self._hold(key, above, values[cut:], baselines[cut:], stamps[where[cut:]])
        trail = self._trails.get(key)
        if trail is None:
            trail = self._trails[key] = Trail()
        if every:
            trail.extend(calls[where], values)
        else:
            trail.extend(calls[where[kept]], values[kept])
        if key not in self._held:
            return
        if o.back is not None:  # the newest value says where its failure began
            self._began[key] = int(trail.calls[max(len(trail) - 1 - o.back, 0)])
        else:
            self._began.pop(key, None)

    def _hold(
        self,
        key: tuple[str, str],
        above: bool,
        values: np.ndarray,
        baselines: np.ndarray,
        stamps: np.ndarray,
        every: bool = False,
    ) -> None:
        """Hold ``values`` (NaN ones left out; ``every``: none is NaN)."""
        if not every:
            kept = values == values
            if not kept.any():
                return
            values, baselines, stamps = values[kept], baselines[kept], stamps[kept]
        elif not len(values):
            return
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = Held(above, self.w.hold, self.w.hold_seconds)
        held.extend(values, baselines, stamps)

    def _objective(self, labels: tuple[str, ...], track: Track) -> None:
        """A true-objective reading: at a new best of its level, remember each reward's level
        then."""
        # its level is the median of its last three readings: one lucky reading (0.010 on an
        # objective that reads 0.000-0.010) is no improvement the proxy's rise could go with,
        # while an objective that rises through its noise keeps setting new bests; before its
        # third reading it has no level, and hacking is not judged against it
        if track.n < EVAL_SMOOTH:
            return
        obj = self.objectives.setdefault(labels, _Objective())
        level = statistics.median(track.recent(EVAL_SMOOTH))
        if obj.best is not None and not level > obj.best:
            obj.since_best += 1
            return
        obj.best, obj.since_best = level, 0
        for metric in REWARDS:
            reward = self._reward(metric)
            if reward is not None and reward.warm:
                obj.proxy_at_best[metric] = reward.smoothed

    def _reward(self, metric: str) -> Track | None:
        """The series of a reward metric, if it was logged before the value being read."""
        t = self._tracks.get((metric, ()))
        return t if t is not None and t.born < self.seq_now else None

    def returns(self) -> Track | None:
        """The track of the episodes' mean return (classic RL's reward), once logged."""
        return self._tracks.get((REWARDS[1], ()))

    def episodes_mean(self) -> Track | None:
        """The track of the episodes' mean return once single episodes are read too."""
        return self.returns() if self._falls else None

    def reward_rows(self, seqs: np.ndarray) -> Iterator[tuple[Track, np.ndarray]]:
        """Per reward series, its row at each value ``seqs`` of a read where it is the run's
        reward (the first of ``REWARDS`` logged before that value), -1 where it is not."""
        taken = np.zeros(len(seqs), bool)
        for metric in REWARDS:
            t = self._tracks.get((metric, ()))
            if t is None:
                continue
            mine = (seqs > t.born) & ~taken
            taken |= mine
            if t.batch == self._batch:  # read now: its row after its latest value before
                j = np.searchsorted(t.seqs, seqs) - 1
                rows = np.where(j >= 0, t.ev_rows[np.maximum(j, 0)], 0)
            else:
                rows = np.full(len(seqs), len(t.rows["n"]) - 1)
            yield t, np.where(mine, rows, -1)

    def discrete_episodes(self, seqs: np.ndarray) -> np.ndarray:
        """Whether the single episodes read before each value ``seqs`` of a read are discrete
        (a 0/1 success): their mean return is then a running mean of a discrete reward, whose
        readings share all but a few episodes with the one before. Its noise shows only over
        a whole window, which a sparse success's first hundreds of readings do not span: a
        lucky success or two read as a gain, and their leaving the window as a collapse. The
        episodes' own ``Drops`` judges them reading by reading (a policy that broke warns
        there within 40 episodes, and pages once the drop lasted ``DISCRETE_PAGE``)."""
        e = self._tracks.get((REWARDS[1], (EPISODES,)))
        if e is None:
            return np.zeros(len(seqs), bool)
        if e.batch == self._batch:  # read now: its row after its latest value before each
            j = np.searchsorted(e.seqs, seqs) - 1
            at = np.where(j >= 0, e.ev_rows[np.maximum(j, 0)], 0)
        else:
            at = np.full(len(seqs), len(e.discrete) - 1)
        return (seqs > e.born) & e.discrete[at]

    # -- output
    def interval(self) -> float:
        """The median seconds between the run's last logged steps (NaN before two steps)."""
        s = list(self._stamps)
        gaps = [b - a for a, b in itertools.pairwise(s) if b >= a]
        return statistics.median(gaps) if gaps else math.nan

    def onset(
        self, signal: str, series: str, bad: Callable[[float], bool]
    ) -> tuple[float, float] | None:
        """(last good step, onset step) of the signal's latest excursion past ``bad``. The
        signal turns bad some values after its input did (a median of 5 at the third bad
        value, of 10 at the sixth, a latest-value signal at once: ``lag``), so the failure's
        first bad value is that many logged steps before the signal's first bad one: the onset
        is that step, the last good step the one before it (NaN when the kept trail does not
        reach back that far). None when no kept value is bad or the trainer logs no steps. Safe
        to call from another thread."""
        self.settle()
        kept = self._trails.get((signal, series))
        trail, steps = kept.pairs() if kept is not None else [], dict(tuple(self._steps))
        last = next((i for i in range(len(trail) - 1, -1, -1) if bad(trail[i][1])), None)
        if last is None or not steps:
            return None
        first = last
        while first > 0 and bad(trail[first - 1][1]):
            first -= 1
        back = lag(signal, self.w)  # the failure's first bad value, ``back`` values before
        start = max(first - back, 0)
        began = self._began.get((signal, series))
        if began is not None and last == len(trail) - 1:  # the latest value knows its start
            start = next((i for i, (c, _) in enumerate(trail) if c >= began), 0)
            back = first - start if trail[0][0] <= began else first + 1  # past the kept trail
        call = trail[start][0]
        onset = steps.get(call, math.nan)
        if math.isnan(onset):
            return None
        # the logged step before (a signal fed by two metrics may take two values in one step)
        before = [c for c, _ in trail[:start] if c != call]
        good = steps.get(before[-1], math.nan) if before and first >= back else math.nan
        return good, onset

    def latest(self, signal: str, series: str) -> tuple[int, float] | None:
        """The signal's newest kept value and the log() call it belongs to."""
        self.settle()
        trail = self._trails.get((signal, series))
        return (int(trail.calls[-1]), float(trail.values[-1])) if trail else None

    def series_of(self, signal: str) -> list[str]:
        """The series values ``signal`` has been exported for."""
        self.settle()
        return [series for name, series in list(self._trails) if name == signal]

    def samples(self) -> Iterator[tuple[catalog.Metric, tuple[str, ...], float]]:
        """The exported gauges (read at scrape time)."""
        self.settle()
        for (name, series), held in list(self._held.items()):
            value = held.read()
            if math.isnan(value):
                continue
            yield SIGNAL, (name, series), value
            if not math.isnan(held.baseline):
                yield BASELINE, (name, series), held.baseline
        for series, (low, high) in list(self.band_now.items()):
            yield BAND, (series, "low"), low
            yield BAND, (series, "high"), high
        gap = self.interval()
        if not math.isnan(gap):
            yield INTERVAL, (), gap


def _arrays(ids: list[int], values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Waiting series ids and values as arrays."""
    return np.array(ids, np.int64), np.array(values, float)


_detectors: weakref.WeakSet[Detector] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A parent thread may have been reading a detector at the fork: fresh locks."""
    for det in list(_detectors):
        det._lock, det._pending = threading.Lock(), threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
