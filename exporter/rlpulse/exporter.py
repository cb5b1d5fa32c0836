"""The in-process exporter: run identity, the hot-path API, and the HTTP endpoint.

``log()`` and the batch calls only write plain numbers into a ``Store``; ``rlpulse.scrape``
turns the store (plus GPU/host readings) into Prometheus families when Prometheus scrapes.

How a run ends with its process (exit, SIGTERM, fork) is ``rlpulse.lifecycle``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from rlpulse import batches, catalog, http, keys, lifecycle, notices, runinfo, scrape, signals
from rlpulse.catalog import Metric
from rlpulse.coerce import (
    FLOAT_MAX,
    PREVIEW_CHARS,
    Dropped,
    float_array,
    int_float,
    label_text,
    plain,
    plain_snapshot,
    preview,
)
from rlpulse.collectors.base import CachedReader
from rlpulse.collectors.gpu import GpuReader
from rlpulse.collectors.host import HostReader, ProcessReader
from rlpulse.exposition import Renderer
from rlpulse.http import PortInUseError
from rlpulse.options import Options
from rlpulse.store import Series, Store

__all__ = ["Exporter", "PortInUseError"]

log = logging.getLogger("rlpulse")

_LOOPBACK = ("127.0.0.1", "::1", "localhost")
# Labels whose values come from user data and are bounded by ``label_cap``.
USER_LABELS = frozenset({"component", "benchmark", "tool", "phase", "name", "key", "split"})
FINISHED = catalog.get("rl_run_finished_timestamp_seconds")
OUTCOME = catalog.get("rl_run_outcome")
MAX_REASON_CHARS = 120
_NO_LABELS: Mapping[str, str] = {}
MAX_PENDING = 4096  # log() snapshots held for the scrape thread before the trainer applies them

_OVERFLOW = object()  # a key past the unmapped-key cap
SELF_PREFIX = "rlpulse_"  # the exporter's own metrics: never written through the recording API
MAX_BOUND_KEYS = 4096  # logged keys whose binding is remembered; later new keys resolve per call
MAX_WARNED = 256  # (key, reason) pairs given their own warning; later drops are only counted


class _Binding:
    """How a logged key that is not a plain gauge write is applied."""

    __slots__ = ("counter", "scale", "series")

    def __init__(self, series: Series, scale: float) -> None:
        self.series = series
        self.scale = scale
        self.counter = series.metric.type == "counter"


class Exporter:
    """One process's exporter; its arguments are those of ``rlpulse.options.Options.resolve``."""

    def __init__(self, port: int | None = None, **arguments: Any) -> None:
        opts = self.options = Options.resolve(port, **arguments)
        self.strict = opts.strict
        self.rank, self.local_rank, self.node = opts.rank, opts.local_rank, opts.node
        self.port, self.addr, self.run_id = opts.port, opts.addr, opts.run_id
        self.certfile, self.keyfile, self.web_config = opts.certfile, opts.keyfile, opts.web_config
        self._routes: dict[str, http.Handler] = {}
        self._close_hooks: list[Callable[[], None]] = []
        self.identity = [self.run_id, str(self.rank), str(self.local_rank), self.node]
        self.unmapped_cap = opts.unmapped_cap
        self.store = Store(label_cap=opts.label_cap)
        self.dropped: dict[str, int] = {}
        self._drop_lock = threading.Lock()
        self._warned: set[tuple[str, str]] = set()
        self._key_map = keys.user_map(opts.key_map)  # the user's keys, searched before the tables
        self._server: http.Server | None = None
        self._lock = threading.Lock()
        self._episodes = batches.Episodes()
        self._readers: list[CachedReader] = []
        self.final_wait = opts.final_wait
        self.expect_scrape = opts.expect_scrape
        self.push_gateway = opts.push_gateway
        self.outcome: tuple[str, str] | None = None  # (outcome, reason) once the run has ended
        self.scraper_seen = False  # a Prometheus-style scraper has fetched /metrics
        self._recorder: Any = None  # a rollouts.Recorder, opened by the first record_rollouts()
        self._kept_ids: set[str] | None = None
        ttl, timeout = opts.collector_ttl, opts.collector_timeout
        if opts.gpu:
            self._readers.append(CachedReader("gpu", GpuReader(opts.nvml), ttl, timeout))
        if opts.host:
            self._readers.append(CachedReader("host", HostReader(), ttl, timeout))
        if opts.process:
            self._readers.append(CachedReader("process", ProcessReader(), ttl, timeout))
        # fast path: logged key -> value slot of a plain gauge; everything else in _bindings
        self._slots: dict[str, int] = {}
        self._bindings: dict[str, _Binding | object] = {}
        self._unmapped = 0
        self._pending: deque[tuple[dict[str, Any], Any, float]] = deque()
        self._apply_lock = threading.RLock()
        self._step = self.store.get("rl_step")
        self._train_steps = self.store.get("rl_train_steps_total")
        self._last_ts = self.store.get("rl_last_step_timestamp_seconds")
        self.store.values[self._last_ts.slot] = time.time()  # a run that never logs looks stalled
        self.store.values[self.store.get("rl_exporter_start_timestamp_seconds").slot] = time.time()
        self._logged = self.store.get("rl_logged_steps_total")
        # step-indexed detection: slot -> (metric, labels) of a watched series, None if not watched
        self.detector = signals.Detector()
        self._watch: dict[int, tuple[str, tuple[str, ...]] | None] = {}
        self.clock: Callable[[], float] = time.time  # replay sets its simulated clock here
        self.run_info = runinfo.run_info(opts.metadata, self._drop)
        self._framework = self.run_info.framework
        self._guess_framework = self._framework is None
        for name, value in runinfo.hyperparameters(opts.config, self._drop):
            self.set("rl_hyperparameter", value, name=name)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(scrape.Collector(self))

    # ---- lifecycle ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The metrics URL (with the real port once started)."""
        scheme = "https" if self.tls else "http"
        host = "127.0.0.1" if self.addr in ("0.0.0.0", "") else self.addr
        return f"{scheme}://{host}:{self.port}/metrics"

    @property
    def tls(self) -> bool:
        """Whether the endpoint serves HTTPS."""
        return self.options.tls

    @property
    def serving(self) -> bool:
        """Whether the HTTP endpoint is up."""
        return self._server is not None

    def start(self) -> Exporter:
        """Serve ``/metrics``; a no-op when already serving."""
        with self._lock:
            if self._server is not None:
                return self
            options = self.web_config.server_options() if self.web_config is not None else {}
            if self.certfile:  # (a web config with TLS too was refused in __init__)
                options["tls"] = http.tls_context(self.certfile, self.keyfile)
            metrics = scrape.noting_scrapers(self, http.metrics_handler(Renderer(self)))
            routes = {lifecycle.METRICS_PATH: metrics, **self._routes}
            server = http.Server(self.addr, self.port, routes, **options)
            self._server = server.start()
            self.port = server.port
            lifecycle.serving(self)
            log.info("rlpulse: serving %s (run_id=%s rank=%s)", self.url, self.run_id, self.rank)
        return self

    def mount(self, routes: Mapping[str, http.Handler]) -> None:
        """Serve more routes next to ``/metrics``, behind the same TLS and auth (for example the
        rollout API: ``exp.mount(rlpulse.rollouts.server.routes(data_dir))``)."""
        with self._lock:
            self._routes.update(routes)
            if self._server is not None:
                for path, handler in routes.items():
                    self._server.route(path, handler)
        if not (self.web_config and self.web_config.users) and self.addr not in _LOOPBACK:
            log.warning(
                "rlpulse: %s served on %s without basic auth: anyone who reaches the port can "
                "read them (set a web config with basic_auth_users, or addr='127.0.0.1')",
                ", ".join(sorted(routes)),
                self.addr,
            )

    # ---- rollout traces --------------------------------------------------------------------
    def record_rollouts(self, **columns: Any) -> list[int]:
        """Offer raw rollouts to this run's bounded store (``rlpulse.rollouts.Recorder.record``).

        Returns the batch positions kept. A later ``observe_rollouts(rollout_ids=...)`` uses only
        kept ids as exemplars, so every exemplar leads to a stored rollout.
        """
        try:
            if self._recorder is None:
                from rlpulse.rollouts import Recorder

                self._recorder = Recorder(
                    self.run_id, rank=self.rank, strict=self.strict, **self.options.rollouts
                )
            kept = self._recorder.record(**columns)
        except Exception as exc:
            if self.strict:
                raise
            self._drop("bad_call", "record_rollouts", exc)
            return []
        ids = columns.get("rollout_ids")
        if ids is not None:
            self._kept_ids = {str(ids[i]) for i in kept}
        return kept

    def finish(self, wait: float | None = None) -> bool:
        """End the run on purpose: ``end("finished", wait=wait)``. ``RLTargetDown`` then does not
        page for it (a kill or a hang, which never gets here, still does)."""
        return self.end("finished", wait=wait)

    def end(self, outcome: str = "finished", reason: str = "", wait: float | None = None) -> bool:
        """End the run: mark it (``rl_run_finished_timestamp_seconds`` and
        ``rl_run_outcome{outcome, reason}``), wait up to ``wait`` s (default ``final_wait``) for
        a scrape to carry the mark when a scraper is expected, push the final state to the
        Pushgateway if one is set, then ``close()``. Whether a scrape or a push carried it.

        Interpreter exit calls it for every serving exporter: ``finished`` after a normal exit,
        ``crashed`` after an uncaught exception or a non-zero ``sys.exit``, ``interrupted``
        after a ``KeyboardInterrupt``. Only the first call ends the run.
        """
        with self._lock:
            if self.outcome is not None:
                return False
            self.outcome = (outcome, reason[:MAX_REASON_CHARS])
        self._put(FINISHED.name, time.time())
        self._put(OUTCOME.name, 1.0, {"outcome": outcome, "reason": self.outcome[1]})
        seen = lifecycle.await_final_scrape(self, self.final_wait if wait is None else wait)
        self.close()  # before the push, so it carries no host/GPU readings that would go stale
        pushed = lifecycle.push(self)
        return seen or pushed

    def close(self) -> None:
        """Stop serving and free the port. Recording calls stay harmless afterwards."""
        with self._lock:
            self._close()

    def on_close(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` once when this exporter closes (``close()``, interpreter exit, SIGTERM),
        before the port is freed; its errors are logged, not raised. A forked child drops the
        hooks. ``rlpulse.targets.register`` removes its file_sd target this way."""
        with self._lock:
            self._close_hooks.append(hook)

    def _close(self) -> None:
        hooks, self._close_hooks = self._close_hooks, []
        for hook in hooks:  # first: Prometheus should drop the target before scrapes fail
            try:
                hook()
            except Exception:
                log.warning("rlpulse: close hook %r failed", hook, exc_info=True)
        if self._server is not None:
            self._server.close()
            self._server = None
            log.info("rlpulse: stopped serving %s", self.url)
        for reader in self._readers:
            reader.close()
        self._readers = []  # closed readers read nothing more
        if self._recorder is not None:
            self._recorder.close()
        lifecycle.closed(self)

    def _after_fork_in_child(self) -> None:
        """Let go of what the parent still uses; fresh locks (a parent thread may have held one
        at the fork, and it will never release it here)."""
        self._lock = threading.Lock()
        self._drop_lock = threading.Lock()
        self._apply_lock = threading.RLock()
        self.store.lock = threading.Lock()
        for series in self.store.series:
            if series.hist is not None:
                series.hist._lock = threading.Lock()
        self._readers = []  # their worker threads did not survive the fork
        self._close_hooks = []  # the parent's to run (a target file is the parent's)
        if self._server is not None:
            self._server.abandon()
            self._server = None

    # ---- bad input ------------------------------------------------------------------------
    def _drop(self, reason: str, key: str, value: Any) -> None:
        with self._drop_lock:
            self.dropped[reason] = self.dropped.get(reason, 0) + 1
        name = key[:PREVIEW_CHARS] if type(key) is str else preview(key)
        if self.strict:
            raise ValueError(f"rlpulse: {name!r}: {reason} ({preview(value)})")
        if (name, reason) in self._warned or len(self._warned) > MAX_WARNED:
            return
        self._warned.add((name, reason))
        log.warning(
            "rlpulse: dropped %s for %r: %s (logged once per key)",
            preview(value),
            name,
            reason,
            extra={notices.KIND: "dropped_metadata" if reason == "bad_metadata" else "dropped"},
        )
        if len(self._warned) > MAX_WARNED:
            log.warning("rlpulse: drops for %d keys logged; later ones only counted", MAX_WARNED)

    def _refuse_call(self, name: Any, exc: Exception) -> None:
        """A recording call that failed: raised when strict, else counted as ``bad_call``."""
        if self.strict:
            raise exc
        self._drop("bad_call", name, exc)

    def _coerce(self, key: str, value: Any) -> float | None:
        """A number from a logged value, or None after counting why it was dropped."""
        v = plain(value)
        if isinstance(v, Dropped):
            self._drop(v.reason, key, v)
            return None
        return v

    def _count_nonfinite(self, series: Series, n: int = 1) -> None:
        nf = self.store.get("rl_nonfinite_values_total", metric=series.metric.name)
        with self.store.lock:
            self.store.values[nf.slot] += n
        if self.strict:
            raise ValueError(f"rlpulse: {series.metric.name}: non-finite value")

    # ---- log(): the hot path ----------------------------------------------------------------
    def log(self, metrics: Mapping[str, Any], step: Any = None) -> None:
        """Record a trainer's metrics dict (framework keys are mapped onto the catalog).

        The training thread only snapshots the dict as plain floats (no reference to a logged
        object is kept); mapping, checks and counting happen when
        the store is next read (a scrape), or here once ``MAX_PENDING`` snapshots wait, or at
        once with ``strict=True`` so bad values raise in the caller.
        """
        try:
            snapshot = plain_snapshot(metrics)
            if step is not None and type(step) is not int:
                step = plain(step)
            self._pending.append((snapshot, step, self.clock()))
        except Exception as exc:
            if self.strict:
                raise
            self._drop("bad_call", "log", exc)
            return
        if self.strict or len(self._pending) > MAX_PENDING:
            self.flush()

    def flush(self, pause: Callable[[], None] | None = None) -> None:
        """Apply the pending ``log()`` snapshots to the store, in order.

        A scrape passes ``pause`` (called after each snapshot) to hand the GIL back to the
        training thread between slices; it then applies only what was pending when it began.
        """
        pending = self._pending
        with self._apply_lock:
            if pause is None:
                while pending:
                    self._apply(*pending.popleft())
                return
            for _ in range(len(pending)):
                self._apply(*pending.popleft())
                pause()

    def _apply(self, metrics: dict[str, Any], step: Any, stamp: float) -> None:
        slots = self._slots
        values = self.store.values
        if self._guess_framework and metrics:
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
                        self._count_nonfinite(self.store.by_slot[i])
                    self._signal(i, v)
                else:
                    self._log_slow(k, v)
            if step is not None:
                self._log_step(step, stamp)
            values[self._last_ts.slot] = stamp
            values[self._logged.slot] += 1
        except Exception as exc:
            if self.strict:
                raise
            self._drop("bad_call", "log", exc)

    def _infer_framework(self, metrics: dict[str, Any]) -> None:
        """No framework given: the first logged keys say whose meanings to search first
        (``episode`` and ``reward`` in a classic-RL loop are an episode and its return)."""
        self._guess_framework = False
        self._framework = keys.likely_framework(k for k in metrics if isinstance(k, str))

    def _signal(self, slot: int, value: float) -> None:
        """Hand a value written to a watched series to the step-indexed detector."""
        watch = self._watch
        if slot not in watch:
            s = self.store.by_slot[slot]
            watch[slot] = (s.metric.name, s.labels) if s.metric.name in signals.OBSERVED else None
        entry = watch[slot]
        if entry is not None:
            self.detector.observe(entry[0], entry[1], float(value))

    def _log_step(self, step: Any, stamp: float) -> None:
        value = self._coerce("step", step)
        if value is None or not math.isfinite(value):
            if value is not None:
                self._drop("non_finite_step", "step", step)
            return
        self.detector.step(value, stamp)
        values = self.store.values
        values[self._step.slot] = value
        if value > values[self._train_steps.slot]:
            values[self._train_steps.slot] = value

    def _log_slow(self, key: Any, value: Any) -> None:
        if not isinstance(key, str):
            self._drop("bad_key", repr(key), value)
            return
        binding = self._bindings.get(key)
        if binding is _OVERFLOW:
            self._overflow(key, value)
            return
        v = self._coerce(key, value)
        if v is None:
            return
        if binding is None:
            if key.startswith(SELF_PREFIX):
                self._drop("self_metric", key, value)
                return
            slot = self._slots.get(key)
            binding = (
                _Binding(self.store.by_slot[slot], 1.0) if slot is not None else self._bind_key(key)
            )
            if binding is _OVERFLOW:
                self._overflow(key, value)
                return
        assert isinstance(binding, _Binding)
        series = binding.series
        v *= binding.scale
        if not math.isfinite(v):
            if binding.counter:
                self._drop("non_finite_counter", key, value)
                return
            self.store.values[series.slot] = v
            self._count_nonfinite(series)
            return
        if binding.counter:
            current = self.store.values[series.slot]
            if v < current:
                self._drop("negative_increment", key, value)
                return
        self.store.values[series.slot] = v
        self._signal(series.slot, v)

    def _overflow(self, key: str, value: Any) -> None:
        self.store.overflowed["key"] = self.store.overflowed.get("key", 0) + 1
        self._drop("unmapped_key_cap", key, value)

    def _bind_key(self, key: str) -> _Binding | object:
        """Resolve a key on first sight; plain gauges go to the fast-path table."""
        remember = len(self._slots) + len(self._bindings) < MAX_BOUND_KEYS
        target = self._resolve(key)
        if target is None:
            if self._unmapped >= self.unmapped_cap:
                if remember:
                    self._bindings[key] = _OVERFLOW
                return _OVERFLOW
            self._unmapped += 1  # unmapped_cap bounds these keys, not label_cap
            metric, labels, scale = catalog.get("rl_unmapped_metric"), {"key": key}, 1.0
            capped: frozenset[str] = frozenset()
        else:
            metric, labels, scale = target
            capped = USER_LABELS
        if metric.type not in ("gauge", "counter"):
            raise ValueError(f"key {key!r} maps to {metric.name}, a {metric.type}")
        series = self.store.bind(metric, labels, capped=capped)
        binding = _Binding(series, scale)
        if not remember:
            return binding
        if metric.type == "gauge" and scale == 1.0:
            self._slots[key] = series.slot  # later float/int writes take the fast path
        else:
            self._bindings[key] = binding
        return binding

    def _resolve(self, key: str) -> tuple[Metric, dict[str, str], float] | None:
        entry = catalog.BY_NAME.get(key)
        if entry is not None and not entry.labels and entry.type in ("gauge", "counter"):
            return entry, {}, 1.0
        user = self._key_map
        target = user[key] if key in user else keys.resolve(key, self._framework)
        if target is None:
            return None
        return catalog.get(target.metric), dict(target.labels), target.scale

    # ---- direct catalog access --------------------------------------------------------------
    def _series(self, name: str, kind: str, labels: Mapping[str, Any]) -> Series | None:
        """The series a direct call writes; every label value given is user data, capped."""
        try:
            metric = catalog.get(name)
            if metric.type != kind:
                raise ValueError(f"{name} is a {metric.type}, not a {kind}")
            if metric.name.startswith(SELF_PREFIX):
                raise ValueError(f"{name} is one of the exporter's own metrics, not writable")
            texts = {k: label_text(v) for k, v in labels.items()}
            return self.store.bind(metric, texts, capped=metric.labels)
        except Exception as exc:
            self._drop("bad_metric", name, exc)
            return None

    def count(self, name: str, amount: float = 1.0, /, **labels: Any) -> None:
        """Add ``amount`` (≥ 0) to a catalog counter."""
        try:
            series = self._series(name, "counter", labels)
            if series is None:
                return
            v = self._coerce(name, amount)
            if v is None:
                return
            if not (v >= 0 and math.isfinite(v)):
                self._drop("negative_increment", name, amount)
                return
            with self.store.lock:
                self.store.values[series.slot] += v
        except Exception as exc:
            self._refuse_call(name, exc)

    def set(self, name: str, value: Any, /, **labels: Any) -> None:
        """Set a catalog gauge."""
        try:
            series = self._series(name, "gauge", labels)
            if series is None:
                return
            v = self._coerce(name, value)
            if v is None:
                return
            self.store.values[series.slot] = v
            if not math.isfinite(v):
                self._count_nonfinite(series)
            self._signal(series.slot, v)
        except Exception as exc:
            self._refuse_call(name, exc)

    def observe(
        self, name: str, values: Any, /, *, exemplars: Sequence[Any] | None = None, **labels: Any
    ) -> None:
        """Add a batch of values (or one value) to a catalog histogram."""
        try:
            series = self._series(name, "histogram", labels)
            if series is not None:
                with np.errstate(all="ignore"):
                    self._observe(series, values, exemplars)
        except Exception as exc:
            self._refuse_call(name, exc)

    def _array(self, key: str, values: Any) -> np.ndarray | None:
        """Numbers as a flat float array, or None after counting them ``non_numeric``."""
        try:
            return float_array(values)
        except Exception:
            self._drop("non_numeric", key, values)
            return None

    def _observe(self, series: Series, values: Any, ids: Sequence[Any] | None) -> None:
        arr = self._array(series.metric.name, values)
        if arr is None:
            return
        if ids is not None:  # any iterable (a generator too), read once, no further than needed
            ids = list(islice(ids, arr.size + 1))
        finite = np.isfinite(arr)
        if not finite.all():
            bad = int(arr.size - finite.sum())
            arr = arr[finite]
            if ids is not None:
                ids = [i for i, ok in zip(ids, finite.tolist(), strict=False) if ok]
            self._count_nonfinite(series, bad)
        if ids is not None and len(ids) != arr.size:
            self._drop("shape_mismatch", f"{series.metric.name} exemplars", len(ids))
            ids = None
        kept = self._kept_ids
        if ids is not None and kept is not None:  # exemplars only for rollouts that were stored
            ids = [i if str(i) in kept else None for i in ids]
        assert series.hist is not None
        series.hist.observe_many(arr, ids)

    def phase(self, name: str) -> _Phase:
        """A context manager timing one phase into rl_phase_duration_seconds{phase}."""
        return _Phase(self, name)

    # ---- batch APIs -------------------------------------------------------------------------
    def observe_rollouts(
        self,
        *,
        latency_seconds: Any = None,
        response_tokens: Any = None,
        prompt_tokens: Any = None,
        rewards: Any = None,
        components: Mapping[str, Any] | None = None,
        truncated: Any = None,
        format_ok: Any = None,
        success: Any = None,
        group_size: int | None = None,
        rollout_ids: Sequence[Any] | None = None,
    ) -> None:
        """Record one batch of rollouts: per-sample arrays (or lists) of equal length."""
        try:
            with np.errstate(all="ignore"):  # overflow/NaN in user data is counted, not warned
                self._observe_rollouts(
                    latency_seconds,
                    response_tokens,
                    prompt_tokens,
                    rewards,
                    components or {},
                    truncated,
                    format_ok,
                    success,
                    group_size,
                    rollout_ids,
                )
        except Exception as exc:
            if self.strict:
                raise
            self._drop("bad_call", "observe_rollouts", exc)

    def _observe_rollouts(
        self,
        latency: Any,
        tokens: Any,
        prompt: Any,
        rewards: Any,
        components: Mapping[str, Any],
        truncated: Any,
        format_ok: Any,
        success: Any,
        group_size: int | None,
        ids: Sequence[Any] | None,
    ) -> None:
        comps = {label_text(k): v for k, v in components.items()}
        arrays: dict[str, np.ndarray] = {}
        named = {
            "latency_seconds": latency,
            "response_tokens": tokens,
            "prompt_tokens": prompt,
            "rewards": rewards,
            "truncated": truncated,
            "format_ok": format_ok,
            "success": success,
        } | {f"components[{k}]": v for k, v in comps.items()}
        for key, raw in named.items():
            if raw is not None:
                arr = self._array(key, raw)
                if arr is not None:
                    arrays[key] = arr
        sizes = {k: a.size for k, a in arrays.items()}
        if ids is not None:
            sizes["rollout_ids"] = len(ids)
        if len(set(sizes.values())) > 1:
            self._drop("shape_mismatch", "observe_rollouts", sizes)
            return
        n = next(iter(sizes.values()), 0)
        if n == 0:
            return
        for name, amount in batches.rollout_counts(arrays, n):
            self._add(name, amount)
        get = self.store.get
        if "latency_seconds" in arrays:
            self._observe(get("rl_rollout_duration_seconds"), arrays["latency_seconds"], ids)
        if "response_tokens" in arrays:
            self._observe(get("rl_response_length_tokens"), arrays["response_tokens"], ids)
        comp_arrays = {k: arrays[f"components[{k}]"] for k in comps if f"components[{k}]" in arrays}
        for name, labels, value in batches.rollout_gauges(arrays, comp_arrays, group_size):
            self._put(name, value, labels)

    def observe_episodes(self, returns: Any, lengths: Any, success: Any = None) -> None:
        """Record finished episodes (classic RL); gauges show the mean of the last 100."""
        try:
            r = self._array("returns", returns)
            n_steps = self._array("lengths", lengths)
            if r is None or n_steps is None:
                return
            if r.size != n_steps.size:
                self._drop("shape_mismatch", "observe_episodes", (r.size, n_steps.size))
                return
            self._add("rl_episodes_total", float(r.size))
            for name, labels, value in self._episodes.add(r, n_steps):
                self._put(name, value, labels)
            if success is not None:
                s = self._array("success", success)
                if s is not None and s.size:
                    self._put("rl_success_ratio", float(s.mean()))
        except Exception as exc:
            if self.strict:
                raise
            self._drop("bad_call", "observe_episodes", exc)

    # ---- the exporter's own writes: plain floats it computed, no user-input checks ----------
    def _put(self, name: str, value: float, labels: Mapping[str, str] = _NO_LABELS) -> None:
        """Set a catalog gauge to a value the exporter derived (batch statistics, run end)."""
        metric = catalog.get(name)
        series = self.store.bind(metric, dict(labels), capped=metric.labels)
        self.store.values[series.slot] = value
        if not math.isfinite(value):
            self._count_nonfinite(series)
        self._signal(series.slot, value)

    def _add(self, name: str, amount: float) -> None:
        """Add a derived amount to a catalog counter; one that is negative or not finite (user
        data such as negative token counts) is dropped as ``negative_increment``."""
        if not (amount >= 0 and math.isfinite(amount)):
            self._drop("negative_increment", name, amount)
            return
        series = self.store.get(name)
        with self.store.lock:
            self.store.values[series.slot] += amount

    # ---- scrape side ----------------------------------------------------------------------------
    def readings(self) -> Iterator[CachedReader]:
        """The scrape-time collectors (GPU, host)."""
        return iter(self._readers)

    def scrape_samples(self) -> Iterator[tuple[Metric, tuple[str, ...], float]]:
        """What a scrape adds to the store (``rlpulse.scrape.samples``)."""
        return scrape.samples(self)


class _Phase:
    __slots__ = ("_exp", "_name", "_t0")

    def __init__(self, exp: Exporter, name: str) -> None:
        self._exp = exp
        self._name = name
        self._t0 = 0.0

    def __enter__(self) -> _Phase:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self._t0
        series = self._exp._series("rl_phase_duration_seconds", "histogram", {"phase": self._name})
        if series is not None and series.hist is not None:
            series.hist.observe_one(elapsed)
