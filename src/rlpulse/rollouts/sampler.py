"""Which rollouts to keep: a per-step uniform reservoir plus the extremes a reader needs.

Every criterion is a *bottom-k* selection per step: each rollout gets a score and a step keeps
the k lowest scores seen so far. With a uniform random score that is a reservoir sample of the
step however many batches it arrives in; with ``-reward`` it is the step's best rollouts, and
so on. A batch is scored with numpy and only rows that beat a criterion's current k-th score
become Python objects, so a batch where sampling drops almost everything costs a few array
operations. A rollout leaves the store when no criterion of its step holds it any more.

Criteria (k per step from ``SamplingConfig``):

============  ==========================================  ==============
name          score (lowest kept)                         k
============  ==========================================  ==============
sample        uniform random                              ``per_step``
best          -reward                                     ``extremes``
worst         reward                                      ``extremes``
longest       -length (``lengths``, else response chars)  ``extremes``
disagreement  -(max_c z_c - min_c z_c) over components    ``extremes``
truncated     random, among truncated rollouts            ``flagged``
error         random, among grader errors                 ``flagged``
nonfinite     random, among NaN/±Inf reward/advantage/    ``flagged``
              component
============  ==========================================  ==============

``z_c`` is component c standardised over the rollouts of the step in the batch, so the
disagreement is large when one component rates a rollout far above the others (a format reward
paid on a wrong answer). Only the last ``open_steps`` steps keep selection state; a rollout for
an older step starts that step afresh.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from rlpulse.rollouts.records import Columns


@dataclass(frozen=True)
class SamplingConfig:
    """How many rollouts each step keeps, per criterion."""

    per_step: int = 16  # uniform reservoir
    extremes: int = 2  # best, worst, longest, disagreement
    flagged: int = 8  # truncated, grader error, non-finite
    open_steps: int = 8  # steps whose selection can still change
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("per_step", "extremes", "flagged"):
            if getattr(self, name) < 0:
                raise ValueError(f"sampling {name}={getattr(self, name)} must be ≥ 0")
        if self.open_steps < 1:
            raise ValueError(f"sampling open_steps={self.open_steps} must be ≥ 1")

    @property
    def rows_per_step(self) -> int:
        """The most rollouts one step can hold."""
        return self.per_step + 4 * self.extremes + 3 * self.flagged


class BottomK:
    """The ``k`` lowest (score, seq) pairs offered so far (ties broken arbitrarily)."""

    __slots__ = ("items", "k", "threshold")

    def __init__(self, k: int) -> None:
        self.k = k
        self.items: list[tuple[float, int]] = []
        self.threshold = np.inf if k > 0 else -np.inf

    def offer(self, scores: np.ndarray, seqs: np.ndarray) -> tuple[list[int], list[int]]:
        """Offer finite ``scores`` for rows ``seqs``; returns (positions admitted, seqs evicted)."""
        idx = np.flatnonzero(scores < self.threshold)
        if idx.size == 0:
            return [], []
        if idx.size > self.k:
            idx = idx[np.argpartition(scores[idx], self.k - 1)[: self.k]]
        new_seqs = seqs[idx].tolist()
        merged = sorted(self.items + list(zip(scores[idx].tolist(), new_seqs, strict=True)))
        self.items = merged[: self.k]
        if len(self.items) == self.k:
            self.threshold = self.items[-1][0]
        pos_of = dict(zip(new_seqs, idx.tolist(), strict=True))
        admitted = [pos_of[s] for _, s in self.items if s in pos_of]
        evicted = [s for _, s in merged[self.k :] if s not in pos_of]
        return admitted, evicted


class _Step:
    __slots__ = ("refs", "slots")

    def __init__(self, cfg: SamplingConfig) -> None:
        k = {"sample": cfg.per_step, "truncated": cfg.flagged, "error": cfg.flagged}
        k |= {"nonfinite": cfg.flagged}
        k |= dict.fromkeys(("best", "worst", "longest", "disagreement"), cfg.extremes)
        self.slots = {name: BottomK(n) for name, n in k.items() if n > 0}
        self.refs: dict[int, int] = {}  # seq -> how many criteria hold it


@dataclass
class Selection:
    """What one batch changes: batch positions to store (with why) and stored seqs to drop."""

    keep: dict[int, list[str]]
    evict: list[int]


def _disagreement(components: list[np.ndarray]) -> np.ndarray:
    stacked = np.vstack(components)
    finite = bool(np.isfinite(stacked).all())
    with np.errstate(invalid="ignore", divide="ignore"):
        if finite:
            mean, std = stacked.mean(axis=1, keepdims=True), stacked.std(axis=1, keepdims=True)
        else:  # nanmean & co. warn on a component with no finite value; these do not
            ok = np.isfinite(stacked)
            stacked = np.where(ok, stacked, np.nan)
            count = ok.sum(axis=1, keepdims=True)
            mean = np.where(ok, stacked, 0.0).sum(axis=1, keepdims=True) / count
            dev = np.where(ok, (stacked - mean) ** 2, 0.0)
            std = np.sqrt(dev.sum(axis=1, keepdims=True) / count)
        z = (stacked - mean) / np.where(std > 0, std, np.inf)  # a constant component: z = 0
        if finite:
            return z.max(axis=0) - z.min(axis=0)
        return np.fmax.reduce(z, axis=0) - np.fmin.reduce(z, axis=0)


class Sampler:
    """Bottom-k selection per step and criterion. Not thread-safe: the Recorder locks it."""

    def __init__(self, cfg: SamplingConfig) -> None:
        self.cfg = cfg
        self._rng = np.random.default_rng(cfg.seed)
        self._steps: OrderedDict[int, _Step] = OrderedDict()

    def _state(self, step: int) -> _Step:
        state = self._steps.get(step)
        if state is None:
            state = self._steps[step] = _Step(self.cfg)
            while len(self._steps) > self.cfg.open_steps:
                self._steps.popitem(last=False)
        else:
            self._steps.move_to_end(step)
        return state

    def select(self, cols: Columns, first_seq: int) -> Selection:
        """Choose rows of ``cols``; row ``i`` is known as seq ``first_seq + i`` from now on."""
        sel = Selection({}, [])
        if cols.n == 0:
            return sel
        steps = cols.steps
        if steps[0] == steps[-1] and (steps == steps[0]).all():
            self._select_step(int(steps[0]), cols, None, first_seq, sel)
        else:
            for step in np.unique(steps).tolist():
                self._select_step(step, cols, np.flatnonzero(steps == step), first_seq, sel)
        return sel

    def _criteria(
        self, cols: Columns, rows: np.ndarray | None, m: int
    ) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
        """(criterion, scores, mask of eligible rows or None for all) for one step's rows."""

        def part(arr: np.ndarray | None) -> np.ndarray | None:
            return arr if arr is None or rows is None else arr[rows]

        out: list[tuple[str, np.ndarray, np.ndarray | None]] = []
        rewards = part(cols.rewards)
        if rewards is not None:
            finite = np.isfinite(rewards)
            out += [("best", -rewards, finite), ("worst", rewards, finite)]
        lengths = part(cols.length_scores())
        if lengths is not None:
            out.append(("longest", -lengths, np.isfinite(lengths)))
        if len(cols.components) >= 2:
            comps = [part(c) for c in cols.components.values()]
            dis = _disagreement([c for c in comps if c is not None])
            out.append(("disagreement", -dis, np.isfinite(dis)))
        rand = self._rng.random(m)
        out.append(("sample", rand, None))
        for name, flags in (
            ("truncated", part(cols.truncated)),
            ("error", part(cols.error_flags())),
            ("nonfinite", part(cols.nonfinite_flags())),
        ):
            if flags is not None:
                out.append((name, rand, flags))
        return out

    def _select_step(
        self, step: int, cols: Columns, rows: np.ndarray | None, first_seq: int, sel: Selection
    ) -> None:
        state = self._state(step)
        m = cols.n if rows is None else rows.size
        positions = np.arange(m) if rows is None else rows
        seqs = first_seq + positions
        for name, scores, mask in self._criteria(cols, rows, m):
            slot = state.slots.get(name)
            if slot is None:
                continue
            if mask is not None:
                if not mask.any():
                    continue
                admitted, evicted = slot.offer(scores[mask], seqs[mask])
                where = positions[mask]
            else:
                admitted, evicted = slot.offer(scores, seqs)
                where = positions
            for j in admitted:
                pos = int(where[j])
                sel.keep.setdefault(pos, []).append(name)
                seq = first_seq + pos
                state.refs[seq] = state.refs.get(seq, 0) + 1
            for seq in evicted:
                left = state.refs[seq] - 1
                if left:
                    state.refs[seq] = left
                else:
                    del state.refs[seq]
                    sel.evict.append(seq)
