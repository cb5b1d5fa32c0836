"""Runs against earlier healthy runs at the same step: the reference band.

A user marks a few finished healthy runs of one configuration as references (``rlpulse band
build``). Per watched series (the reward or episode return, KL to the reference, entropy, a
held-out score), their smoothed values at each logged step make a band:

- *timing*: healthy seeds learn at different speeds, so at step ``s`` each reference counts with
  every value it had within ``tolerance`` of ``s`` (steps ``s (1 - tolerance)`` to
  ``s (1 + tolerance)``): the band is the lowest to the highest of them, over all references;
- *noise*: widened on both sides by ``NOISE_MARGIN`` times the references' reading-to-reading
  noise (the median over them of the robust spread of their step-to-step differences / sqrt 2);
- the band covers the steps every reference reached, on a grid of at most ``GRID`` points
  (linear in between): its size does not grow with the number of references or their length,
  and a live run exports two series per banded series whatever the band was built from.

A run's ``reference_band_gap`` (``rlpulse.detect.signals``) is how far its smoothed value is
outside the band at its latest logged step, on the side that is worse for that series (both for
entropy), as a share of the references' whole range (the band's lowest low to highest high): a
scale-free "10 % of the learning curve below every healthy seed at this step". Undefined before
the band's first step and after its last.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rlpulse.detect import files

FORMAT = 1  # the band file's version
GRID = 256  # grid points a band keeps per series at most
TOLERANCE = 0.25  # a healthy run may be this share of the steps ahead or behind
NOISE_MARGIN = 2.0  # the band is widened by this many times the references' reading noise
SPREAD_MARGIN = 1.0  # and by this many times their typical spread at one step
Side = Literal["below", "above", "both"]
# the series a band covers and the side that is worse: a reward or score below the healthy
# runs, a KL above them, an entropy out of theirs either way
BANDED: dict[str, Side] = {
    "rl_reward_mean": "below",
    "rl_episode_return": "below",
    "rl_eval_score": "below",
    "rl_kl_reference": "above",
    "rl_entropy": "both",
}


def series_name(metric: str, labels: Sequence[str]) -> str:
    """The band's and the exported signal's name of one series: ``episode_return``,
    ``eval_score{gsm8k,test}``."""
    name = metric.removeprefix("rl_")
    return f"{name}{{{','.join(labels)}}}" if labels else name


@dataclass(frozen=True)
class Curve:
    """One series' band: ``low[i]``..``high[i]`` at ``steps[i]`` (ascending)."""

    metric: str
    worse: Side
    steps: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]

    @functools.cached_property
    def span(self) -> float:
        """The references' whole range (at least a millionth of its magnitude)."""
        lo, hi = min(self.low), max(self.high)
        return max(hi - lo, 1e-6 * max(abs(lo), abs(hi)), 1e-12)

    def at(self, step: float) -> tuple[float, float] | None:
        """(low, high) at ``step``, None outside the steps the references reached."""
        steps = self.steps
        if not steps[0] <= step <= steps[-1]:
            return None
        i = bisect.bisect_left(steps, step)
        if steps[i] == step:
            return self.low[i], self.high[i]
        f = (step - steps[i - 1]) / (steps[i] - steps[i - 1])
        lo = self.low[i - 1] + f * (self.low[i] - self.low[i - 1])
        hi = self.high[i - 1] + f * (self.high[i] - self.high[i - 1])
        return lo, hi

    def gap(self, value: float, step: float) -> tuple[float, float, float] | None:
        """(gap, low, high): how far ``value`` is outside the band at ``step`` on the worse
        side, as a share of ``span`` (0 inside it); None outside the band's steps."""
        bounds = self.at(step)
        if bounds is None or not math.isfinite(value):
            return None
        lo, hi = bounds
        below = max(lo - value, 0.0) if self.worse in ("below", "both") else 0.0
        above = max(value - hi, 0.0) if self.worse in ("above", "both") else 0.0
        return max(below, above) / self.span, lo, hi


@dataclass(frozen=True)
class Band:
    """The reference band of every banded series the references logged."""

    runs: tuple[str, ...]
    tolerance: float
    curves: Mapping[str, Curve]

    def to_json(self) -> str:
        return json.dumps(
            {
                "rlpulse_band": FORMAT,
                "runs": list(self.runs),
                "tolerance": self.tolerance,
                "series": {
                    name: {
                        "metric": c.metric,
                        "worse": c.worse,
                        "steps": list(c.steps),
                        "low": list(c.low),
                        "high": list(c.high),
                    }
                    for name, c in self.curves.items()
                },
            },
            indent=1,
        )


def load(path: str | os.PathLike[str]) -> Band:
    """The band in a file ``rlpulse band build`` wrote; ``ValueError`` naming what is wrong."""
    data = files.read(path, "reference band", "rlpulse_band", FORMAT)
    curves: dict[str, Curve] = {}
    for name, c in files.mapping(data.get("series"), f"{path}: series").items():
        where = f"reference band {path}: series {name!r}"
        c = files.mapping(c, where)
        metric, worse = c.get("metric"), c.get("worse")
        if metric not in BANDED or worse != BANDED[metric]:
            raise ValueError(f"{where}: metric {metric!r} with worse {worse!r} is not banded")
        steps, low, high = (_numbers(c.get(k), f"{where}: {k}") for k in ("steps", "low", "high"))
        if not len(steps) == len(low) == len(high) >= 2 or list(steps) != sorted(set(steps)):
            raise ValueError(f"{where}: steps, low and high must be as long, steps ascending")
        if any(lo > hi for lo, hi in zip(low, high, strict=True)):
            raise ValueError(f"{where}: a low above its high")
        curves[str(name)] = Curve(metric, worse, steps, low, high)
    runs = tuple(str(r) for r in data.get("runs", ()))
    return Band(runs, float(data.get("tolerance", TOLERANCE)), curves)


def _numbers(value: Any, where: str) -> tuple[float, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list of numbers")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"{where}: {v!r} is not a finite number")
        out.append(float(v))
    return tuple(out)


# a reference run: series name -> (metric, [(step, raw value, smoothed value)]) in step order
Reference = Mapping[str, tuple[str, Sequence[tuple[float, float, float]]]]


def build(refs: Mapping[str, Reference], tolerance: float = TOLERANCE) -> Band:
    """The band of the series every reference in ``refs`` (run name -> its series) logged at
    least twice; ``ValueError`` with fewer than two references or no series in common."""
    if len(refs) < 2:
        raise ValueError(f"a reference band needs at least 2 runs, got {len(refs)}")
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance {tolerance} must be in [0, 1)")
    common = set.intersection(*(set(r) for r in refs.values()))
    curves = {}
    for name in sorted(common):
        metric = next(iter(refs.values()))[name][0]
        points = [r[name][1] for r in refs.values()]
        if metric not in BANDED or any(len(p) < 2 for p in points):
            continue
        first, last = max(p[0][0] for p in points), min(p[-1][0] for p in points)
        if not last > first:
            continue
        n = min(GRID, max(len(p) for p in points))
        grid = [first + (last - first) * i / (n - 1) for i in range(n)]
        # between seeds: the references' typical range at one step (the envelope of a few
        # references is narrower than the seeds' spread: a new seed falls outside it often)
        at = [[_within(p, s, 0.0)[-1] for p in points] for s in grid]
        spread = statistics.median(max(v) - min(v) for v in at)
        noise = statistics.median(_noise([v for _, v, _ in p]) for p in points)
        margin = NOISE_MARGIN * noise + SPREAD_MARGIN * spread
        low, high = [], []
        for s in grid:
            near = [v for p in points for v in _within(p, s, tolerance)]
            low.append(min(near) - margin)
            high.append(max(near) + margin)
        curves[name] = Curve(metric, BANDED[metric], tuple(grid), tuple(low), tuple(high))
    if not curves:
        raise ValueError("the reference runs share no banded series (reward, KL, entropy, eval)")
    return Band(tuple(refs), tolerance, curves)


def _within(points: Sequence[tuple[float, float, float]], step: float, tol: float) -> list[float]:
    """A reference's smoothed values within ``tol`` of ``step``, and its value at ``step``
    (linear between its logged steps)."""
    steps = [p[0] for p in points]
    lo, hi = step * (1 - tol), step * (1 + tol)
    if lo > hi:
        lo, hi = hi, lo
    out = [p[2] for p in points[bisect.bisect_left(steps, lo) : bisect.bisect_right(steps, hi)]]
    i = bisect.bisect_left(steps, step)
    if 0 < i < len(points):
        (s0, _, v0), (s1, _, v1) = points[i - 1], points[i]
        out.append(v0 + (step - s0) / (s1 - s0) * (v1 - v0))
    elif i < len(points):
        out.append(points[i][2])
    return out


def _noise(values: Sequence[float]) -> float:
    """The robust reading-to-reading noise of ``values``: 1.4826 MAD of their differences /
    sqrt 2 (0 for fewer than three)."""
    diffs = [b - a for a, b in itertools.pairwise(values)]
    if len(diffs) < 2:
        return 0.0
    mid = statistics.median(diffs)
    return 1.4826 * statistics.median(abs(d - mid) for d in diffs) / math.sqrt(2)
