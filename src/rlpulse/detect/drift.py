"""Drift: a feature's distribution now against its reference.

Per feature (an observation dimension, an action, a prompt's length or source tag, a reward
component ...) the run keeps a *reference* and a *window*:

- reference: the feature's first ``REFERENCE`` samples in this run (1,000: enough that the
  score's null spread is a few hundredths, few enough that a run fills it in its first minutes),
  or a pinned reference from an earlier run (``save`` / ``load``: per feature its bin edges or
  categories and their proportions);
- window: its latest ``WINDOW`` samples after the reference; the score is worked out every
  ``EVERY`` new samples (from the first ``EVERY``: a dead channel shows a quarter of a window
  after the reference is made), so it does not depend on when it is read.

The score is the population stability index over the reference's deciles (numbers) or its
categories (text, discrete actions): ``sum((c - r) ln(c / r))`` over bins with reference share
``r`` and window share ``c`` (empty bins count as ``EPS``), less its expectation when nothing
changed, ``(k - 1)(1/n_ref + 1/n_now)`` for ``k`` bins (the small-sample bias), at least 0.
By convention 0.1 is a small shift and 0.25 (``SHIFT``) a large one. Three changes no sample
size explains score ``EVENT``: a feature that varied in its reference and now reads one value
(in ``DEAD_SHARE`` of its latest ``n`` samples for an ``n`` of ``DEAD_SPANS`` over
``DEAD_RUNS`` times the longest run of one value its reference had, or of ``EVERY``; checked on
every new batch of samples, so a dead continuous sensor shows within 8 samples, 16 with a reset
among them, while a flag that stays put for long stretches is judged on its longer spans), a
new environment or grader version (``version``), and new dynamics (``transitions``: the
environment's step no longer follows its model, ``rlpulse.detect.dynamics``; kept from then
on, as a version is). ``onset`` is the step since which a feature is
drifted (its score at ``SHIFT`` or above; an input's only, or any kind's ``EVENT``), cleared
once it is back under ``CLEAR``.

Bounded: at most ``MAX_DIMS`` dimensions of a vector feature (evenly spaced over its dimensions
when it has more; the feature keeps its own index, ``obs[17]``), ``MAX_FEATURES`` features per
kind (more are counted and ignored), ``MAX_CATEGORIES`` categories per feature (more fall into
``OTHER``); every feature holds at most ``REFERENCE + WINDOW`` numbers.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rlpulse import catalog
from rlpulse.detect import dynamics, files, windows

SCORE = catalog.get("rl_drift_score")
ONSET = catalog.get("rl_drift_onset_step")

Kind = Literal["input", "observation", "behaviour"]
KINDS: tuple[Kind, ...] = ("input", "observation", "behaviour")
FORMAT = 1  # the reference file's version
REFERENCE = 1000  # samples a feature's own reference takes
WINDOW = 1000  # samples the score compares with it
EVERY = WINDOW // 4  # new samples between two scores
BINS = 10  # quantile bins of a numeric reference
EPS = 1e-4  # the share an empty bin counts as
SHIFT = 0.25  # a large shift: a feature at or above it is drifted
CLEAR = 0.1  # and stays drifted until back under this
EVENT = 100.0  # a change no sample size explains (dead channel, new version, new dynamics)
CAP = 50.0  # scores of a shift stop here (below EVENT)
DEAD_SHARE = 0.9  # the latest EVERY samples this much one value, from a reference that varied
DEAD_SPANS = (8, 16, 32, 64, 128, EVERY)  # latest samples judged for a dead feature ...
DEAD_RUNS = 3  # ... when over this many times the reference's longest run of one value
VARIED_SHARE = 0.5  # a reference varied when no value holds this share of it
MAX_DIMS = 16  # dimensions of a vector feature that are watched
MAX_FEATURES = 64  # features per kind
MAX_CATEGORIES = 32  # categories per feature
MAX_NAME_CHARS = 64
DYNAMICS = "dynamics"  # the observation feature of the environment's step (detect.dynamics)
OTHER = "other"  # the category of those past MAX_CATEGORIES


@dataclass(frozen=True)
class Reference:
    """What a feature is compared with: numeric ``edges`` (bin ``i`` holds values in
    ``[edges[i-1], edges[i])``) or ``categories``, the share of each bin, whether it varied,
    how many samples it was made of, and its longest run of one value in sample order."""

    shares: tuple[float, ...]
    n: int
    varied: bool
    edges: tuple[float, ...] | None = None
    categories: tuple[str, ...] | None = None
    run: int = EVERY  # (a pinned file without one: judged on EVERY samples alone)

    @classmethod
    def of(cls, values: np.ndarray | list[str]) -> Reference:
        """The reference of a feature's samples (a float array, or category texts)."""
        if isinstance(values, np.ndarray):
            edges = np.unique(np.quantile(values, np.linspace(0, 1, BINS + 1)[1:-1]))
            counts = np.bincount(
                np.searchsorted(edges, values, side="right"), minlength=edges.size + 1
            )
            _, same = np.unique(values, return_counts=True)
            varied = same.max() < VARIED_SHARE * values.size
            shares = counts / values.size
            edged = tuple(edges.tolist())
            return cls(tuple(shares.tolist()), values.size, bool(varied), edged, run=_run(values))
        cats, which, same = np.unique(
            np.asarray(values, dtype=object), return_inverse=True, return_counts=True
        )
        varied = same.max() < VARIED_SHARE * len(values)
        shares = same / len(values)
        named = tuple(map(str, cats))
        return cls(tuple(shares.tolist()), len(values), bool(varied), None, named, _run(which))

    def dead(self, values: np.ndarray | list[str]) -> bool:
        """Whether a feature that varied reads one value now (``values``: its latest): in
        ``DEAD_SHARE`` of its latest ``n``, for each ``n`` of ``DEAD_SPANS`` longer than
        ``DEAD_RUNS`` times the reference's longest run (``EVERY`` always)."""
        if not self.varied:
            return False
        spans = [n for n in DEAD_SPANS if n == EVERY or n > DEAD_RUNS * self.run]
        if isinstance(values, np.ndarray):
            spans = _repeating(values, spans)
        return any(len(values) >= n and _top_share(values[-n:]) >= DEAD_SHARE for n in spans)

    def score(self, values: np.ndarray | list[str]) -> float:
        """The debiased PSI of ``values`` against this reference (``EVENT`` for a dead
        feature, ``dead``)."""
        n = len(values)
        if self.dead(values):
            return EVENT
        if self.edges is not None:
            arr = np.asarray(values, dtype=np.float64)
            k = len(self.edges) + 1
            now = windows.bin_counts(arr, self.edges, le=False) / n
            ref = np.asarray(self.shares)
        else:
            assert self.categories is not None
            cats, same = np.unique(np.asarray(values, dtype=object), return_counts=True)
            seen = dict(zip(map(str, cats), (same / n).tolist(), strict=True))
            names = list(self.categories) + [c for c in seen if c not in self.categories]
            k = len(names)
            given = dict(zip(self.categories, self.shares, strict=True))
            ref = np.array([given.get(c, 0.0) for c in names])
            now = np.array([seen.get(c, 0.0) for c in names])
        ref, now = np.maximum(ref, EPS), np.maximum(now, EPS)
        psi = float(np.sum((now - ref) * np.log(now / ref)))
        bias = (k - 1) * (1 / self.n + 1 / n)
        return min(max(psi - bias, 0.0), CAP)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "n": self.n,
            "varied": self.varied,
            "run": self.run,
            "shares": list(self.shares),
        }
        if self.edges is not None:
            out["edges"] = list(self.edges)
        else:
            out["categories"] = list(self.categories or ())
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> Reference:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a mapping")
        shares, n = data.get("shares"), data.get("n")
        edges, cats = data.get("edges"), data.get("categories")
        if not isinstance(n, int) or n < 1 or not isinstance(shares, list):
            raise ValueError(f"{where}: needs n (a positive count) and shares (a list)")
        if not all(isinstance(s, int | float) and 0 <= s <= 1 for s in shares):
            raise ValueError(f"{where}: shares must be numbers in [0, 1]")
        run = data.get("run", EVERY)
        if not isinstance(run, int) or run < 1:
            raise ValueError(f"{where}: run must be a positive count")
        if (edges is None) == (cats is None):
            raise ValueError(f"{where}: give edges (numbers) or categories (texts), not both")
        size = len(edges) + 1 if isinstance(edges, list) else len(cats or ())
        if len(shares) != size:
            raise ValueError(f"{where}: {len(shares)} shares for {size} bins")
        if edges is not None:
            if not all(isinstance(e, int | float) and math.isfinite(e) for e in edges):
                raise ValueError(f"{where}: edges must be finite numbers")
            if list(edges) != sorted(set(edges)):
                raise ValueError(f"{where}: edges must ascend")
            varied, bins = bool(data.get("varied")), tuple(map(float, shares))
            return cls(bins, n, varied, tuple(edges), run=run)
        assert isinstance(cats, list)
        varied, bins = bool(data.get("varied")), tuple(map(float, shares))
        return cls(bins, n, varied, None, tuple(map(str, cats)), run)


def _run(values: np.ndarray) -> int:
    """The longest run of one value in ``values`` (in their order)."""
    changes = np.flatnonzero(values[1:] != values[:-1])
    edges = np.concatenate(([-1], changes, [values.size - 1]))
    return int(np.diff(edges).max())


def _repeating(values: np.ndarray, spans: list[int]) -> list[int]:
    """The spans whose latest values repeat enough to be one value's ``DEAD_SHARE``: ``c`` of
    ``n`` values equal to one value, the others ``n - c``, make at least ``2c - n - 1`` pairs
    of equal neighbours (0.8 n - 1 at c = 0.9 n); fewer pairs (by a margin of one) cannot."""
    last = values[-max(spans, default=0) :]
    same = (last[1:] == last[:-1]) | ((last[1:] != last[1:]) & (last[:-1] != last[:-1]))
    within = [n for n in spans if 2 <= n <= len(last)]
    pairs = np.cumsum(same[::-1])[[n - 2 for n in within]].tolist()  # in the last n values
    enough = {n for n, p in zip(within, pairs, strict=True) if p >= (2 * DEAD_SHARE - 1) * n - 2}
    return [n for n in spans if n in enough or n not in within]


def _top_share(values: np.ndarray | list[str]) -> float:
    """The share of the most common value."""
    _, same = np.unique(
        np.asarray(values, dtype=object if isinstance(values, list) else None), return_counts=True
    )
    return float(same.max()) / len(values)


class Feature:
    """One feature's reference, window, score and onset."""

    __slots__ = (
        "categories",
        "kind",
        "name",
        "numeric",
        "onset",
        "ref",
        "samples",
        "score",
        "since",
        "taken",
        "window",
    )

    def __init__(self, kind: Kind, name: str, numeric: bool, ref: Reference | None) -> None:
        self.kind, self.name, self.numeric = kind, name, numeric
        self.ref = ref  # pinned, or made of the first REFERENCE samples
        self.taken: list[Any] = []  # the first samples, while the reference is made of them
        self.window: np.ndarray | list[str] = np.empty(0) if numeric else []
        self.categories: set[str] = set()  # the categories seen (MAX_CATEGORIES, then OTHER)
        self.since = 0  # samples since the last score
        self.score = math.nan
        self.onset: float | None = None
        self.samples = 0

    def add(self, values: np.ndarray | list[str], step: float) -> None:
        """Take new samples (already bounded) at ``step``."""
        if not self.numeric:
            values = [self._category(v) for v in values]
        self.samples += len(values)
        if self.ref is None:
            room = REFERENCE - len(self.taken)
            self.taken.extend(
                values[:room].tolist() if isinstance(values, np.ndarray) else values[:room]
            )
            values = values[room:]
            if len(self.taken) >= REFERENCE:
                taken = np.asarray(self.taken, dtype=np.float64) if self.numeric else self.taken
                self.ref, self.taken = Reference.of(taken), []
            if not len(values):
                return
        if isinstance(values, np.ndarray):
            assert isinstance(self.window, np.ndarray)
            self.window = np.concatenate((self.window, values))[-WINDOW:]
        else:
            assert isinstance(self.window, list)
            self.window = (self.window + values)[-WINDOW:]
        self.since += len(values)
        if self.ref is None:
            return
        if self.since >= EVERY:
            self.since = 0
            self._scored(self.ref.score(self.window), step)
        elif self.score != EVENT and self.ref.dead(self.window):
            self._scored(EVENT, step)  # a dead channel shows within DEAD_SPANS[0] samples

    def _category(self, value: str) -> str:
        if value in self.categories:
            return value
        if len(self.categories) < MAX_CATEGORIES:
            self.categories.add(value)
            return value
        return OTHER

    def _scored(self, score: float, step: float) -> None:
        self.score = score
        counts = score >= EVENT or (self.kind == "input" and score >= SHIFT)
        if self.onset is None and counts:
            self.onset = step
        elif self.onset is not None and not counts and score < CLEAR:
            self.onset = None


class Drift:
    """Every drift feature of one run (fed on the exporter's apply thread)."""

    def __init__(self, pinned: Mapping[str, Reference] | None = None) -> None:
        self.pinned = dict(pinned or {})  # "kind/feature" -> its reference
        self.features: dict[tuple[Kind, str], Feature] = {}
        self.versions: dict[str, str] = {}  # the first version of each versioned part
        self.dynamics: dynamics.Dynamics | None = None  # made on the first transitions

    def add(self, kind: Kind, name: str, values: np.ndarray | list[str], step: float) -> bool:
        """Samples of one feature: a flat float array or category texts (a 2-D array: one
        feature per column, ``name[i]``, at most ``MAX_DIMS`` of them); False when a feature
        is new past ``MAX_FEATURES`` of its kind (it is not watched)."""
        if isinstance(values, np.ndarray) and values.ndim == 2:
            return all(
                [
                    self.add(kind, f"{name}[{i}]", values[:, i], step)
                    for i in columns(values.shape[1])
                ]
            )
        if not len(values):
            return True
        numeric = isinstance(values, np.ndarray)
        feature = self._feature(kind, name, numeric)
        if feature is None:
            return False
        if isinstance(values, np.ndarray) != feature.numeric:
            return True  # numbers for a categorical feature (or texts for a numeric one): skipped
        if isinstance(values, np.ndarray):
            ok = np.isfinite(values)
            finite = values if ok.all() else values[ok]
            if finite.size:
                feature.add(finite, step)
            return True
        feature.add(values, step)
        return True

    def version(self, part: str, version: str, step: float) -> bool:
        """The version of a part of the run (``environment``, ``grader``): a version other than
        the first is an input drift of feature ``version:<part>`` from ``step`` on (False: a
        new part past ``MAX_FEATURES``)."""
        first = self.versions.setdefault(part, version)
        feature = self._feature("input", f"version:{part}", False)
        if feature is None:
            return False
        feature._scored(0.0 if version == first else EVENT, step)
        return True

    def transitions(
        self,
        before: np.ndarray,
        actions: np.ndarray,
        after: np.ndarray,
        discrete: bool,
        step: float,
    ) -> bool:
        """Sampled transitions of the environment (rows: observation, action, next
        observation): feature ``observation/dynamics`` scores their model's error ratio
        (``rlpulse.detect.dynamics``), ``EVENT`` from the step it reaches ``dynamics.LEVEL``
        on, as a new version does (False: the feature is new past ``MAX_FEATURES``)."""
        feature = self._feature("observation", DYNAMICS, True)
        if feature is None:
            return False
        if self.dynamics is None:
            self.dynamics = dynamics.Dynamics(discrete)
        ratio = self.dynamics.add(before, actions, after)
        if ratio is not None and not math.isnan(ratio) and feature.score != EVENT:
            feature._scored(EVENT if ratio >= dynamics.LEVEL else min(ratio, CAP), step)
        return True

    def _feature(self, kind: Kind, name: str, numeric: bool) -> Feature | None:
        """The feature ``kind``/``name``, made on its first samples (its pinned reference if
        one of its type is pinned); None when it is new past ``MAX_FEATURES`` of its kind."""
        feature = self.features.get((kind, name))
        if feature is None:
            if sum(k == kind for k, _ in self.features) >= MAX_FEATURES:
                return None
            ref = self.pinned.get(f"{kind}/{name}")
            if ref is not None and (ref.edges is not None) != numeric:
                ref = None  # a pinned reference of the other type: the run's own is made
            feature = self.features[(kind, name)] = Feature(kind, name, numeric, ref)
        return feature

    def samples(self) -> Iterator[tuple[Any, tuple[str, ...], float]]:
        """``rl_drift_score`` of every scored feature, ``rl_drift_onset_step`` of the drifted."""
        for (kind, name), f in list(self.features.items()):
            if math.isnan(f.score):
                continue
            yield SCORE, (kind, name), f.score
            if f.onset is not None:
                yield ONSET, (kind, name), f.onset

    def references(self) -> dict[str, Reference]:
        """Every feature's reference made so far ("kind/feature" -> it), to pin in a later run."""
        return {f"{k}/{n}": f.ref for (k, n), f in self.features.items() if f.ref is not None}


def columns(dims: int) -> list[int]:
    """The dimensions of a vector feature that are watched: all up to ``MAX_DIMS``, else
    ``MAX_DIMS`` evenly spaced ones (the first and the last among them)."""
    if dims <= MAX_DIMS:
        return list(range(dims))
    return sorted({round(i * (dims - 1) / (MAX_DIMS - 1)) for i in range(MAX_DIMS)})


def feature_name(name: Any) -> str:
    """A feature's name as a label value (text, at most ``MAX_NAME_CHARS``)."""
    return str(name)[:MAX_NAME_CHARS]


def save(references: Mapping[str, Reference], path: str | os.PathLike[str], run: str = "") -> None:
    """Write references (``Drift.references``) as a pinned reference file."""
    data = {
        "rlpulse_drift": FORMAT,
        "run": run,
        "features": {name: r.to_dict() for name, r in sorted(references.items())},
    }
    Path(path).write_text(json.dumps(data, indent=1), encoding="utf-8")


def load(path: str | os.PathLike[str]) -> dict[str, Reference]:
    """The references in a pinned reference file; ``ValueError`` naming what is wrong."""
    data = files.read(path, "drift reference", "rlpulse_drift", FORMAT)
    features = files.mapping(data.get("features"), f"drift reference {path}: features")
    out = {}
    for name, ref in features.items():
        kind = str(name).split("/", 1)[0]
        if kind not in KINDS or "/" not in str(name):
            raise ValueError(f"drift reference {path}: feature {name!r} is not kind/name")
        out[str(name)] = Reference.from_dict(ref, f"drift reference {path}: feature {name!r}")
    return out
