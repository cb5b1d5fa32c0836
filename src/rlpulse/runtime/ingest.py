"""Ingest: the trainer's recording calls, queued in call order and applied to the store.

Every call is taken as plain numbers at the call (``rlpulse.runtime.coerce``) and applied later, in
call order, off the training thread (``rlpulse.runtime.calls``). Logged dicts are mapped key by key
onto catalog series: a plain gauge through the fast-path slot table, anything else
through a binding made on first sight (framework key maps, the user's key map, a counter's
scale; unknown keys as ``rl_unmapped_metric{key}`` up to ``unmapped_cap``). ``count``, ``set``
and ``observe`` write a named catalog metric. Every value that is no number, every wrong call,
and every write to an ``rlpulse_*`` self-metric is dropped and counted (``rlpulse.runtime.drops``);
what passes is written through ``rlpulse.runtime.writes``. Consecutive ``log()`` calls with the
same keys, all plain gauges seen before, are applied in columns (``Ingest.apply_run``).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import islice
from operator import itemgetter
from typing import Any

import numpy as np

from rlpulse import catalog, keys
from rlpulse.catalog import Metric
from rlpulse.runtime import calls
from rlpulse.runtime.coerce import FLOAT_MAX, Dropped, float_array, int_float, label_text, plain
from rlpulse.runtime.drops import Drops
from rlpulse.runtime.store import Series, Store
from rlpulse.runtime.success import SuccessFromReturns
from rlpulse.runtime.writes import Writes

# Labels whose values come from user data and are bounded by ``label_cap``.
USER_LABELS = frozenset({"component", "benchmark", "tool", "phase", "name", "key", "split"})
SELF_PREFIX = "rlpulse_"  # the exporter's own metrics: never written through the recording API
MAX_BOUND_KEYS = 4096  # logged keys whose binding is remembered; later new keys resolve per call
_OVERFLOW = object()  # a key past the unmapped-key cap
KeptIds = set[str] | None  # the rollout ids stored when a call was made (None: no store)
EPISODE_RETURN = catalog.get("rl_episode_return").name
SUCCESS = catalog.get("rl_success_ratio").name


HUGE = 1e300  # the largest magnitude a histogram observes
MAX_PLANS = 64  # key orders whose column plan is remembered
MIN_COLUMNS = 8  # calls in a stretch worth applying in columns (fewer: numpy costs more)
LogCall = tuple[dict[str, Any], Any, float]  # a log() call's snapshot, step and time


class _Binding:
    """How a logged key that is not a plain gauge write is applied."""

    __slots__ = ("counter", "offset", "returns", "scale", "series")

    def __init__(
        self, series: Series, scale: float, returns: bool = False, offset: float = 0.0
    ) -> None:
        self.series = series
        self.scale = scale
        self.offset = offset
        self.counter = series.metric.type == "counter"
        self.returns = returns  # a classic loop's episode return: success derived from it


class _Columns:
    """How ``log()`` dicts with one key order are applied in columns: each key's value slot,
    which columns the detector watches (their index and series, and ``pick``: their values of
    a dict), and those whose non-finite count depends on more than their own values
    (``Writes.first_finite``)."""

    __slots__ = ("_pick", "first_finite", "series", "slots", "watched")

    def __init__(
        self,
        names: tuple[Any, ...],
        slots: list[int],
        watched: list[tuple[int, tuple[str, tuple[str, ...]]]],
        first_finite: list[int],
    ):
        self.slots = slots
        self.watched = [j for j, _ in watched]
        self.series = [key for _, key in watched]
        self.first_finite = first_finite
        keys = [names[j] for j in self.watched]
        # (one key is asked twice: itemgetter gives a tuple for two or more)
        asked = keys * 2 if len(keys) == 1 else keys or [None, None]  # (none: never asked)
        self._pick: Callable[[dict[str, Any]], tuple[Any, ...]] = itemgetter(*asked)

    def watched_of(self, snapshots: list[dict[str, Any]]) -> np.ndarray:
        """The watched columns' values of the dicts (one row each)."""
        w = len(self.watched)
        if not w:
            return np.empty((len(snapshots), 0))
        rows = np.fromiter(
            itertools.chain.from_iterable(map(self._pick, snapshots)),
            float,
            len(snapshots) * max(w, 2),
        )
        return rows.reshape(len(snapshots), -1)[:, :w]


class Ingest:
    """Applies one exporter's recording calls to its ``store``."""

    def __init__(
        self,
        store: Store,
        writes: Writes,
        drops: Drops,
        *,
        key_map: Mapping[str, keys.Target | None],
        framework: str | None,
        unmapped_cap: int,
    ) -> None:
        self.store = store
        self.writes = writes
        self.drops = drops
        self.key_map = key_map  # the user's keys, searched before the framework tables
        self.framework = framework
        self.guess_framework = framework is None
        self.unmapped_cap = unmapped_cap
        self.unmapped = 0
        # fast path: logged key -> value slot of a plain gauge; everything else in bindings
        self.slots: dict[str, int] = {}
        self.bindings: dict[str, _Binding | object] = {}
        # recording calls not applied yet, in call order; log()'s applied in runs
        self.calls = calls.Calls(drops, self.apply, self.apply_run)
        self.plans: dict[tuple[Any, ...], _Columns] = {}  # key order -> its columns
        calls.register(self.calls)
        self.kept_ids: set[str] | None = None  # rollout ids stored (exemplars link only to them)
        self._step = store.get("rl_step")
        self._train_steps = store.get("rl_train_steps_total")
        self.last_ts = store.get("rl_last_step_timestamp_seconds")
        self._logged = store.get("rl_logged_steps_total")
        self.success = SuccessFromReturns()

    def apply_unstamped(self, metrics: Mapping[str, Any]) -> None:
        """Map a dict like ``log()`` without moving the trainer's step and last-log time (a
        worker's activity is not the training loop's)."""
        self.calls.put((dict(metrics),), "log", self._apply_unstamped)

    def _apply_unstamped(self, metrics: dict[str, Any]) -> None:
        self.apply(metrics, None, self.store.values[self.last_ts.slot])

    def flush(self, pause: Callable[[], None] | None = None) -> None:
        """Apply the queued recording calls to the store, in call order; ``pause`` (called
        after each) hands the GIL back to the training thread (a scrape passes it)."""
        self.calls.apply(pause)

    def apply(self, metrics: dict[str, Any], step: Any, stamp: float) -> None:
        slots = self.slots
        values = self.store.values
        if self.guess_framework and metrics:
            self._infer_framework(metrics)
        try:
            for k, v in metrics.items():
                i = slots.get(k)
                t = type(v)
                if i is not None and (t is float or t is int):
                    if t is int and not -FLOAT_MAX <= v <= FLOAT_MAX:
                        v = int_float(v)  # past a float's range: ±Inf, counted below
                    values[i] = v
                    if v - v:  # NaN or ±Inf
                        self.writes.nonfinite(self.store.by_slot[i])
                    self.writes.signal(i, v)
                else:
                    self._log_slow(k, v)
            if step is not None:
                self._log_step(step, stamp)
            values[self.last_ts.slot] = stamp
            values[self._logged.slot] += 1
        except Exception as exc:
            if self.drops.strict:
                raise
            self.drops("bad_call", "log", exc)

    def apply_run(self, run: list[LogCall]) -> None:
        """Consecutive ``log()`` calls, in order: each stretch of ``MIN_COLUMNS`` or more with one
        key order whose keys are all plain gauges seen before in columns (``_apply_columns``),
        the others one by one."""
        for names, group in itertools.groupby(run, key=lambda call: tuple(call[0])):
            stretch = list(group)
            if len(stretch) >= MIN_COLUMNS and self._plan(names) is None:
                self.apply(*stretch[0])  # (its first call binds its keys)
                stretch = stretch[1:]
            plan = self._plan(names) if len(stretch) >= MIN_COLUMNS else None
            if plan is None or not self._apply_columns(plan, stretch):
                for call in stretch:
                    self.apply(*call)

    def _plan(self, names: tuple[Any, ...]) -> _Columns | None:
        """The columns of a key order (None: a key is no plain gauge seen before)."""
        plan = self.plans.get(names)
        if plan is not None or self.guess_framework:
            return plan
        slots = [self.slots.get(k) for k in names]
        if None in slots:
            return None
        found = [int(i) for i in slots if i is not None]
        watched = [(j, w) for j, i in enumerate(found) if (w := self.writes.watched(i))]
        first = [j for j, i in enumerate(found) if self.writes.first_finite(i)]
        if len(self.plans) >= MAX_PLANS:
            self.plans.clear()
        plan = self.plans[names] = _Columns(names, found, watched, first)
        return plan

    def _apply_columns(self, plan: _Columns, run: list[LogCall]) -> bool:
        """``apply`` of each call, in columns: each gauge written once (its last value), the
        non-finite values counted per column, the watched columns handed to the detector at
        once. False, with nothing applied, where a value or step is no plain number (a
        snapshot holds floats, ints and ``Dropped`` only: ``coerce.plain_snapshot``)."""
        n, k = len(run), len(plan.slots)
        snapshots = list(map(itemgetter(0), run))
        chain = itertools.chain.from_iterable
        bad = None  # per value, NaN or ±Inf (None: every value is finite)
        try:
            steps = list(map(itemgetter(1), run))
            nones = steps.count(None)
            at = None if nones else np.fromiter(steps, float, n)
            # a finite sum: every value is finite (a NaN or ±Inf makes it NaN or ±Inf)
            if math.isfinite(sum(chain(map(dict.values, snapshots)), 0.0)):
                watched = plan.watched_of(snapshots)
            else:
                matrix = np.fromiter(chain(map(dict.values, snapshots)), float, n * k)
                matrix = matrix.reshape(n, k)
                bad = ~np.isfinite(matrix)
                watched = matrix[:, plan.watched]
        except (TypeError, ValueError, OverflowError):  # a Dropped, an int past a float's range
            return False
        if nones not in (0, n) or (at is not None and not np.isfinite(at).all()):
            return False  # (a step that is no finite number is dropped one call at a time)
        try:
            self._write_columns(plan, run, watched, bad, at)
        except Exception as exc:
            if self.drops.strict:
                raise
            self.drops("bad_call", "log", exc)
        return True

    def _write_columns(
        self,
        plan: _Columns,
        run: list[LogCall],
        watched: np.ndarray,
        bad: np.ndarray | None,
        steps: np.ndarray | None,
    ) -> None:
        values, last = self.store.values, run[-1]
        for i, v in zip(plan.slots, last[0].values(), strict=True):
            values[i] = v
        checked = set(plan.first_finite)  # the columns whose counts may be more than none
        if bad is not None:
            checked.update(np.flatnonzero(bad.any(axis=0)).tolist())
        counted = []  # (first counted, column, how many), counted in the order calls met them
        for j in checked:
            none = np.zeros(len(run), bool)
            column = self.writes.counted(plan.slots[j], none if bad is None else bad[:, j])
            if column.any():
                counted.append((int(column.argmax()), j, int(column.sum())))
        for _, j, n in sorted(counted):
            self.writes.nonfinite(self.store.by_slot[plan.slots[j]], n)
        stamps = np.fromiter(map(itemgetter(2), run), float, len(run))
        self.writes.detector.observe_rows(plan.series, watched, steps, stamps)
        if steps is not None:
            values[self._step.slot] = float(steps[-1])
            top = float(steps.max())
            if top > values[self._train_steps.slot]:
                values[self._train_steps.slot] = top
        values[self.last_ts.slot] = last[2]
        values[self._logged.slot] += len(run)

    def _infer_framework(self, metrics: dict[str, Any]) -> None:
        """No framework given: the first logged keys say whose meanings to search first
        (``episode`` and ``reward`` in a classic-RL loop are an episode and its return)."""
        self.guess_framework = False
        self.framework = keys.likely_framework(k for k in metrics if isinstance(k, str))

    def _log_step(self, step: Any, stamp: float) -> None:
        value = self.drops.number("step", step)
        if value is None or not math.isfinite(value):
            if value is not None:
                self.drops("non_finite_step", "step", step)
            return
        self.writes.detector.step(value, stamp)
        values = self.store.values
        values[self._step.slot] = value
        if value > values[self._train_steps.slot]:
            values[self._train_steps.slot] = value

    def _log_slow(self, key: Any, value: Any) -> None:
        if not isinstance(key, str):
            self.drops("bad_key", repr(key), value)
            return
        binding = self.bindings.get(key)
        if binding is _OVERFLOW:
            self._overflow(key, value)
            return
        v = self.drops.number(key, value)
        if v is None:
            return
        if binding is None:
            if key.startswith(SELF_PREFIX):
                self.drops("self_metric", key, value)
                return
            slot = self.slots.get(key)
            binding = (
                _Binding(self.store.by_slot[slot], 1.0) if slot is not None else self._bind_key(key)
            )
            if binding is _OVERFLOW:
                self._overflow(key, value)
                return
        assert isinstance(binding, _Binding)
        series = binding.series
        v = v * binding.scale + binding.offset
        if not math.isfinite(v):
            if binding.counter:
                self.drops("non_finite_counter", key, value)
                return
            self.store.values[series.slot] = v
            self.writes.nonfinite(series)
            return
        if binding.counter:
            current = self.store.values[series.slot]
            if v < current:
                self.drops("negative_increment", key, value)
                return
        self.store.values[series.slot] = v
        self.writes.signal(series.slot, v)
        if binding.returns:
            self._derive_success(v)

    def _derive_success(self, episode_return: float) -> None:
        """A classic loop's success rate from its binary episode returns (rlpulse.runtime.success);
        NaN (not counted as a non-finite value) withdraws it once a return is not 0 or 1."""
        rate = self.success.returned(episode_return)
        if rate is None:
            return
        if math.isnan(rate):
            self.store.values[self.store.get(SUCCESS).slot] = rate
        else:
            self.writes.put(SUCCESS, rate)

    def _overflow(self, key: str, value: Any) -> None:
        self.store.overflowed["key"] = self.store.overflowed.get("key", 0) + 1
        self.drops("unmapped_key_cap", key, value)

    def _bind_key(self, key: str) -> _Binding | object:
        """Resolve a key on first sight; plain gauges go to the fast-path table."""
        remember = len(self.slots) + len(self.bindings) < MAX_BOUND_KEYS
        target = self._resolve(key)
        if target is None:
            if self.unmapped >= self.unmapped_cap:
                if remember:
                    self.bindings[key] = _OVERFLOW
                return _OVERFLOW
            self.unmapped += 1  # unmapped_cap bounds these keys, not label_cap
            metric, labels, scale, offset = (
                catalog.get("rl_unmapped_metric"),
                {"key": key},
                1.0,
                0.0,
            )
            capped: frozenset[str] = frozenset()
        else:
            metric, labels, scale, offset = target
            capped = USER_LABELS
        if metric.type not in ("gauge", "counter"):
            raise ValueError(f"key {key!r} maps to {metric.name}, a {metric.type}")
        if metric.name == SUCCESS:
            self.success.stop()  # the trainer logs its own rate: it is the only one
        series = self.store.bind(metric, labels, capped=capped)
        returns = metric.name == EPISODE_RETURN and self.framework == keys.CLASSIC.framework
        binding = _Binding(series, scale, returns and not labels, offset)
        if not remember:
            return binding
        if metric.type == "gauge" and scale == 1.0 and not offset and not binding.returns:
            self.slots[key] = series.slot  # later float/int writes take the fast path
        else:
            self.bindings[key] = binding
        return binding

    def _resolve(self, key: str) -> tuple[Metric, dict[str, str], float, float] | None:
        entry = catalog.BY_NAME.get(key)
        if entry is not None and not entry.labels and entry.type in ("gauge", "counter"):
            return entry, {}, 1.0, 0.0
        user = self.key_map
        target = user[key] if key in user else keys.resolve(key, self.framework)
        if target is None:
            return None
        return catalog.get(target.metric), dict(target.labels), target.scale, target.offset

    # ---- direct catalog access --------------------------------------------------------------
    def series(self, name: str, kind: str, labels: Mapping[str, Any]) -> Series | None:
        """The series a direct call writes; every label value given is user data, capped."""
        try:
            metric = catalog.get(name)
            if metric.type != kind:
                raise ValueError(f"{name} is a {metric.type}, not a {kind}")
            if metric.name.startswith(SELF_PREFIX):
                raise ValueError(f"{name} is one of the exporter's own metrics, not writable")
            if metric.name == SUCCESS:
                self.success.stop()  # set by the trainer: the only rate
            texts = {k: label_text(v) for k, v in labels.items()}
            return self.store.bind(metric, texts, capped=metric.labels)
        except Exception as exc:
            self.drops("bad_metric", name, exc)
            return None

    def queue(
        self,
        name: str,
        apply: Callable[..., None],
        copy: Callable[..., tuple[Any, ...]],
        *given: Any,
    ) -> None:
        """Queue a recording call: ``copy(*given)`` takes the call's arguments as its own
        copies, here in the caller's thread; a call it cannot copy is refused
        (``Drops.refuse``) and nothing is queued."""
        try:
            args = copy(*given)
        except Exception as exc:
            self.drops.refuse(name, exc)
            return
        self.calls.put(args, name, apply)

    def count(self, name: str, amount: float = 1.0, /, **labels: Any) -> None:
        """Add ``amount`` (≥ 0) to a catalog counter."""
        self.queue(name, self._scalar, _scalar_args, "counter", name, amount, labels)

    def set(self, name: str, value: Any, /, **labels: Any) -> None:
        """Set a catalog gauge."""
        self.queue(name, self._scalar, _scalar_args, "gauge", name, value, labels)

    def _scalar(self, kind: str, name: str, value: float | Dropped, labels: dict[str, str]) -> None:
        """A ``count()`` (``kind`` counter) or ``set()`` (gauge) call, applied."""
        try:
            series = self.series(name, kind, labels)
            v = None if series is None else self.drops.number(name, value)
            if series is None or v is None:
                return
            if kind == "gauge":
                self.store.values[series.slot] = v
                if not math.isfinite(v):
                    self.writes.nonfinite(series)
                self.writes.signal(series.slot, v)
            elif v >= 0 and math.isfinite(v):
                with self.store.lock:
                    self.store.values[series.slot] += v
            else:
                self.drops("negative_increment", name, value)
        except Exception as exc:
            self.drops.refuse(name, exc)

    def observe(
        self, name: str, values: Any, /, *, exemplars: Sequence[Any] | None = None, **labels: Any
    ) -> None:
        """Add a batch of values (or one value) to a catalog histogram."""
        args = (name, values, exemplars, self.kept_ids, labels)
        self.queue(name, self._observe, _histogram_args, *args)

    def _observe(
        self,
        name: str,
        values: np.ndarray | Dropped,
        ids: list[str | None] | None,
        kept: KeptIds,
        labels: dict[str, str],
    ) -> None:
        try:
            series = self.series(name, "histogram", labels)
            if series is not None:
                with np.errstate(all="ignore"):
                    self.observe_series(series, values, ids, kept)
        except Exception as exc:
            self.drops.refuse(name, exc)

    def array(self, key: str, values: np.ndarray | Dropped) -> np.ndarray | None:
        """A snapshot's array, or None after counting it ``non_numeric``."""
        if isinstance(values, Dropped):
            self.drops(values.reason, key, values)
            return None
        return values

    def batch(
        self,
        call: str,
        columns: Mapping[str, np.ndarray | Dropped | None],
        ids: list[str | None] | None,
    ) -> tuple[dict[str, np.ndarray], int]:
        """The columns of a batch call (None: not given) as float arrays, and the batch size;
        a column that is no numbers is left out (counted ``non_numeric``), columns (and ids)
        of different lengths make an empty batch (counted ``shape_mismatch``)."""
        arrays: dict[str, np.ndarray] = {}
        for key, raw in columns.items():
            if raw is not None:
                arr = self.array(key, raw)
                if arr is not None:
                    arrays[key] = arr
        sizes = {k: a.size for k, a in arrays.items()}
        if ids is not None:
            sizes["rollout_ids"] = len(ids)
        if len(set(sizes.values())) > 1:
            self.drops("shape_mismatch", call, sizes)
            return {}, 0
        return arrays, next(iter(sizes.values()), 0)

    def observe_series(
        self,
        series: Series,
        values: np.ndarray | Dropped,
        ids: list[str | None] | None,
        kept: KeptIds,
    ) -> None:
        """Add a snapshot's values to a histogram series; ``ids`` become exemplars where
        ``kept`` (the rollouts stored when the call was made) holds them."""
        arr = self.array(series.metric.name, values)
        if arr is None:
            return
        # a value past HUGE is counted as non-finite too: a histogram's float sum cannot hold it
        # with others (two values of -1e308 sum to -inf, and _sum would stay -inf for the run)
        if arr.size and not (arr.min() >= -HUGE and arr.max() <= HUGE):  # (NaN fails them too)
            finite = np.abs(arr) <= HUGE
            bad = int(arr.size - finite.sum())
            arr = arr[finite]
            if ids is not None:
                ids = [i for i, ok in zip(ids, finite.tolist(), strict=False) if ok]
            self.writes.nonfinite(series, bad)
        if ids is not None and len(ids) != arr.size:
            self.drops("shape_mismatch", f"{series.metric.name} exemplars", len(ids))
            ids = None
        if ids is not None and kept is not None:  # exemplars only for rollouts that were stored
            ids = [i if i in kept else None for i in ids]
        assert series.hist is not None
        series.hist.observe_many(arr, ids)


class Phase:
    """Times one phase (a ``with`` block) into ``rl_phase_duration_seconds{phase}``."""

    __slots__ = ("_ingest", "_name", "_t0")

    def __init__(self, ingest: Ingest, name: str) -> None:
        self._ingest = ingest
        self._name = name
        self._t0 = 0.0

    def __enter__(self) -> Phase:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self._t0
        self._ingest.observe("rl_phase_duration_seconds", elapsed, phase=self._name)


def _scalar_args(kind: str, name: str, value: Any, labels: Mapping[str, Any]) -> tuple[Any, ...]:
    """A ``count()`` or ``set()`` call's own copies."""
    return kind, name, plain(value), _texts(labels)


def _histogram_args(
    name: str, values: Any, exemplars: Sequence[Any] | None, kept: KeptIds, labels: Any
) -> tuple[Any, ...]:
    """An ``observe()`` call's own copies."""
    arr = snapshot_array(values)
    return name, arr, snapshot_ids(exemplars, arr), kept, _texts(labels)


def _texts(labels: Mapping[str, Any]) -> dict[str, str]:
    return {k: label_text(v) for k, v in labels.items()}


def snapshot_array(values: Any) -> np.ndarray | Dropped:
    """User numbers as a flat float array of their own (never a view of the caller's array,
    which the trainer may change before it is applied), or a ``Dropped``."""
    try:
        arr = float_array(values)
    except Exception:
        return Dropped("non_numeric", values)
    return arr.copy() if arr is values or not arr.flags.owndata else arr


def snapshot_ids(ids: Any, *arrays: np.ndarray | Dropped | None) -> list[str | None] | None:
    """Rollout ids (any iterable, read once, no further than one past the batch) as text."""
    if ids is None:
        return None
    n = max((a.size for a in arrays if isinstance(a, np.ndarray)), default=0)
    return [None if i is None else str(i) for i in islice(ids, n + 1)]
