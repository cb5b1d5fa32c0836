"""The in-process exporter: one process's run, composed of one-job parts.

- ``rlpulse.runtime.options``: arguments and environment, resolved once (``Options``);
- ``rlpulse.runtime.coerce`` / ``rlpulse.runtime.ingest``: user input taken as plain numbers at the
  call and mapped onto catalog series;
- ``rlpulse.runtime.calls``: every recording call queued in call order and applied off the training
  thread (the process's apply thread, or the next scrape);
- ``rlpulse.runtime.drops``: what is dropped, counted and said once;
- ``rlpulse.runtime.writes``: trusted writes into the ``Store`` (the exporter's own values go here);
- ``rlpulse.runtime.batches``: statistics of a rollout or episode batch;
- ``rlpulse.runtime.runinfo``: ``rl_run_info`` and ``rl_hyperparameter`` from metadata and config;
- ``rlpulse.runtime.scrape``: what a scrape adds, and the prometheus_client view;
- ``rlpulse.runtime.lifecycle``: how a run ends with its process (exit, SIGTERM, fork).

``Exporter`` implements ``rlpulse.runtime.recording.Recording`` and serves ``/metrics``
(``rlpulse.runtime.http``).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import numpy as np
from prometheus_client import CollectorRegistry

from rlpulse import catalog, keys, notices
from rlpulse.catalog import Metric
from rlpulse.detect import band, drift, lastgood, signals
from rlpulse.runtime import batches, discovery, http, lifecycle, options, runinfo, scrape, targets
from rlpulse.runtime.coerce import Dropped, label_text, plain, plain_snapshot
from rlpulse.runtime.collectors.base import CachedReader
from rlpulse.runtime.collectors.gpu import GpuReader
from rlpulse.runtime.collectors.host import HostReader, ProcessReader
from rlpulse.runtime.drops import Drops
from rlpulse.runtime.exposition import Renderer
from rlpulse.runtime.http import PortInUseError
from rlpulse.runtime.ingest import Ingest, KeptIds, Phase, snapshot_array, snapshot_ids
from rlpulse.runtime.options import Options
from rlpulse.runtime.recording import ROLLOUT_ARRAYS, RolloutBatch, check_keywords
from rlpulse.runtime.store import Store
from rlpulse.runtime.writes import Writes

if TYPE_CHECKING:
    from rlpulse.rollouts.records import RolloutTraces

__all__ = ["Exporter", "PortInUseError"]

log = logging.getLogger("rlpulse")

_LOOPBACK = ("127.0.0.1", "::1", "localhost")
FINISHED = catalog.get("rl_run_finished_timestamp_seconds")
OUTCOME = catalog.get("rl_run_outcome")
CHECKPOINT = catalog.get("rl_checkpoint_step")
STEP = catalog.get("rl_step")
MAX_REASON_CHARS = 120


class Exporter:
    """One process's exporter; its arguments are the fields of ``rlpulse.runtime.options.Options``
    (the port, then keywords), kept resolved as ``options``."""

    def __init__(self, port: int | None = None, **arguments: Any) -> None:
        opts = self.options = Options.resolve(port, **arguments)
        # what the run's discovery and start change (rlpulse.runtime.discovery, targets):
        self.port = opts.port  # the port served, once serving
        self.final_wait = opts.final_wait
        self.expect_scrape = opts.expect_scrape
        self.push_gateway = opts.push_gateway
        self._routes: dict[str, http.Handler] = {}
        self._close_hooks: list[Callable[[], None]] = []
        self.identity = [opts.run_id, str(opts.rank), str(opts.local_rank), opts.node]
        self.store = Store(label_cap=opts.label_cap)
        self.drops = Drops(opts.strict)
        self.detector = signals.Detector()  # step-indexed detection of RL failure signals
        self.detector.band = self._band(opts.reference_band)
        self.checkpoints = lastgood.Checkpoints()  # the resume points every page names
        self.levels = lastgood.levels(lastgood.levels_path())  # where each step alert fires
        self.onsets = lastgood.Onsets()  # where each alert's failure began
        self.progress_at = 0.0  # time.time() of the latest progress() heartbeat
        self.writes = Writes(self.store, self.detector, self.drops)
        self.run_info = runinfo.run_info(opts.metadata, self.drops)
        # features against their reference (observe_features): their own first samples, or
        # the pinned one of an earlier run
        self.drift = drift.Drift(self._pinned(opts.drift_reference))
        for part, version in runinfo.versions(self.run_info):
            self.drift.version(part, version, 0.0)
        self.ingest = Ingest(
            self.store,
            self.writes,
            self.drops,
            key_map=keys.user_map(opts.key_map),
            framework=self.run_info.framework,
            unmapped_cap=opts.unmapped_cap,
        )
        self._calls = self.ingest.calls  # every recording call, in call order (log()'s own)
        self._server: http.Server | None = None
        self._lock = threading.Lock()
        self._episodes = batches.Episodes()
        self._readers: list[CachedReader] = []
        self.outcome: tuple[str, str] | None = None  # (outcome, reason) once the run has ended
        # (outcome, reason) an alert asked for (rlpulse.control): a normal end becomes this
        self.asked_end: tuple[str, str] | None = None
        self.scraper_seen = False  # a Prometheus-style scraper has fetched /metrics
        self.registered: Path | None = (
            None  # this process's file_sd target (rlpulse.runtime.discovery)
        )
        self._watched_by: tuple[str, str] | None = None  # (Prometheus URL, instance) it scrapes
        self._recorder: Any = None  # a rollouts.Recorder, opened by the first record_rollouts()
        # more scrape-time samples (rlpulse.control's marks): callables yielding scrape.samples'
        self.sample_sources: list[Callable[[], Iterable[scrape.Sample]]] = []
        ttl, timeout = opts.collector_ttl, opts.collector_timeout
        if opts.gpu:
            self._readers.append(CachedReader("gpu", GpuReader(opts.nvml), ttl, timeout))
        if opts.host:
            self._readers.append(CachedReader("host", HostReader(), ttl, timeout))
        if opts.process:
            self._readers.append(CachedReader("process", ProcessReader(), ttl, timeout))
        now = time.time()  # a run that never logs looks stalled
        self.store.values[self.ingest.last_ts.slot] = now
        self.store.values[self.store.get("rl_exporter_start_timestamp_seconds").slot] = now
        self.clock: Callable[[], float] = time.time  # replay sets its simulated clock here
        for name, value in runinfo.hyperparameters(opts.config, self.drops):
            self.set("rl_hyperparameter", value, name=name)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(scrape.Collector(self))

    # ---- lifecycle ------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        """The run's id (``run_id=`` or RLPULSE_RUN_ID)."""
        return self.options.run_id

    @property
    def rank(self) -> int:
        """The process's global rank (``rank=`` or RANK)."""
        return self.options.rank

    @property
    def strict(self) -> bool:
        """Whether bad values and calls raise (``strict=``)."""
        return self.options.strict

    @property
    def url(self) -> str:
        """The metrics URL (with the real port once started)."""
        scheme = "https" if self.tls else "http"
        addr = self.options.addr
        host = "127.0.0.1" if addr in ("0.0.0.0", "") else addr
        return f"{scheme}://{host}:{self.port}/metrics"

    @property
    def tls(self) -> bool:
        """Whether the endpoint serves HTTPS."""
        return self.options.tls

    @property
    def dropped(self) -> dict[str, int]:
        """Dropped values by reason (``rlpulse_dropped_values_total``)."""
        return self.drops.counts

    @property
    def serving(self) -> bool:
        """Whether the HTTP endpoint is up."""
        return self._server is not None

    def _band(self, path: str | os.PathLike[str] | None) -> band.Band | None:
        """The reference band at ``path`` (``reference_band=`` or RLPULSE_REFERENCE_BAND); one
        that cannot be read is said on stderr and the run goes on without it (strict: raised)."""
        if not path:
            return None
        try:
            return band.load(path)
        except ValueError as exc:
            if self.strict:
                raise
            notices.warn("reference_band", "rlpulse: %s; the run is not compared with it", exc)
            return None

    def _pinned(self, path: str | os.PathLike[str] | None) -> dict[str, drift.Reference]:
        """The pinned drift references at ``path`` (``drift_reference=`` or
        RLPULSE_DRIFT_REFERENCE); a file that cannot be read is said on stderr and each feature
        takes its own first samples (strict: raised)."""
        if not path:
            return {}
        try:
            return drift.load(path)
        except ValueError as exc:
            if self.strict:
                raise
            notices.warn(
                "drift_reference", "rlpulse: %s; drift is scored against the run's start", exc
            )
            return {}

    def save_drift_reference(self, path: str | os.PathLike[str]) -> None:
        """Write every drift feature's reference so far (its first 1,000 samples) to ``path``:
        a later run started with ``drift_reference=path`` is scored against this one."""
        self.flush()
        drift.save(self.drift.references(), path, run=self.run_id)

    def start(self) -> Exporter:
        """Serve ``/metrics`` (on a free port when this one is taken, unless strict), register
        it for Prometheus (``rlpulse.runtime.discovery``) and say where; a no-op when already
        serving."""
        with self._lock:
            if self._server is not None:
                return self
            opts = self.options
            addr, web, cert = opts.addr, opts.web_config, opts.certfile
            tls = web.server_options() if web is not None else {}
            if cert:  # (a web config with TLS too was refused by Options.resolve)
                tls["tls"] = http.tls_context(cert, opts.keyfile)
            metrics = scrape.noting_scrapers(self, http.metrics_handler(Renderer(self)))
            routes = {lifecycle.METRICS_PATH: metrics, **self._routes}
            asked = self.port
            try:
                server = http.Server(addr, self.port, routes, **tls).start()
            except PortInUseError:
                if self.strict or not self.port:
                    raise
                server = http.Server(addr, 0, routes, **tls).start()  # training goes on
            self._server = server
            self.port = server.port
            lifecycle.serving(self)
            where = self._register()
            busy = f"port {asked} is in use; " if asked and asked != self.port else ""
            notices.say(
                "rlpulse: %srun %s rank %s serving at %s%s (%s)",
                busy,
                self.run_id,
                self.rank,
                self.url,
                " instead" if busy else "",
                f"registered for Prometheus at {where.directory}"
                if self.registered
                else f"not registered for Prometheus: {where.why}"
                + (f"; its end is pushed to {self.push_gateway}" if self.push_gateway else ""),
            )
        return self

    def _register(self) -> discovery.Where:
        """Write this exporter's file_sd target where ``rlpulse.runtime.discovery`` says; a failure
        to write it is said, never raised."""
        where = discovery.resolve(self.options.targets_dir)
        if where.directory is None:
            return where
        local = where.local and self.options.addr in ("", "0.0.0.0", "::", *_LOOPBACK)
        address = targets.address_of(self, "127.0.0.1" if local else None)
        try:
            self.registered = discovery.register(
                where.directory, address, self.run_id, self.rank, "https" if self.tls else "http"
            )
        except OSError as exc:
            return discovery.Where(None, why=f"cannot write to {where.directory}: {exc}")
        self.expect_scrape = True  # a registered run is one a scraper comes for
        if where.prometheus:
            self._watched_by = (where.prometheus, address)
        self.final_wait = where.final_wait(self.final_wait)
        if where.pushgateway and not self.push_gateway:
            self.push_gateway = where.pushgateway
        self._close_hooks.append(self._unregister_if_ended)
        return where

    def _unregister_if_ended(self) -> None:
        """Remove the target once the run has ended (its last scrape taken): a run that never
        said how it ended keeps it, so Prometheus pages the dead target."""
        if self.outcome is not None:
            self.unregister()

    def unregister(self) -> None:
        """Remove this exporter's own file_sd target now (``targets.register`` replaces it)."""
        if self.registered is not None:
            self.registered.unlink(missing_ok=True)
            self.registered = None

    def mount(self, routes: Mapping[str, http.Handler]) -> None:
        """Serve more routes next to ``/metrics``, behind the same TLS and auth (for example the
        rollout API: ``exp.mount(rlpulse.rollouts.server.routes(data_dir))``)."""
        with self._lock:
            self._routes.update(routes)
            if self._server is not None:
                for path, handler in routes.items():
                    self._server.route(path, handler)
        web = self.options.web_config
        if not (web and web.users) and self.options.addr not in _LOOPBACK:
            log.warning(
                "rlpulse: %s served on %s without basic auth: anyone who reaches the port can "
                "read them (set a web config with basic_auth_users, or addr='127.0.0.1')",
                ", ".join(sorted(routes)),
                self.options.addr,
            )

    # ---- rollout traces --------------------------------------------------------------------
    def record_rollouts(self, **columns: Unpack[RolloutTraces]) -> list[int]:
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
            self.drops("bad_call", "record_rollouts", exc)
            return []
        ids = columns.get("rollout_ids")
        if ids is not None:
            self.ingest.kept_ids = {str(ids[i]) for i in kept}
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
        after a ``KeyboardInterrupt``; ``finished`` becomes ``stopped`` once an alert asked the
        loop to stop (``rlpulse.should_stop()``). Only the first call ends the run.
        """
        if outcome == "finished" and self.asked_end is not None:
            outcome, reason = self.asked_end  # the loop ended because an alert asked it to
        with self._lock:
            if self.outcome is not None:
                return False
            self.outcome = (outcome, reason[:MAX_REASON_CHARS])
        put = self._calls.put
        put((FINISHED.name, time.time()), FINISHED.name, self.writes.put)
        labels = {"outcome": outcome, "reason": self.outcome[1]}
        put((OUTCOME.name, 1.0, labels), OUTCOME.name, self.writes.put)
        self.flush()  # every call made before the end, applied before the last scrape and push
        wait = self.final_wait if wait is None else wait
        since, started = time.time(), time.monotonic()
        seen = lifecycle.await_final_scrape(self, wait)
        if seen and self._watched_by is not None and self.registered is not None:
            # the scrape that came may be another scraper's: wait for the registered one's
            left = wait - (time.monotonic() - started)
            seen = discovery.scraped_since(*self._watched_by, since, left)
            if not seen:
                notices.warn(
                    "final_scrape_missed",
                    "rlpulse: %s did not scrape %s within %.3g s after the run ended: its last "
                    "values are lost to it",
                    self._watched_by[0],
                    self.url,
                    wait,
                )
        if self._watched_by is not None and self.registered is not None and wait > 0:
            self.unregister()  # then serve until that Prometheus lets go: no scrape of it fails
            discovery.dropped(*self._watched_by, self.final_wait)
        self.close()  # before the push, so it carries no host/GPU readings that would go stale
        pushed = not seen and lifecycle.push(self)  # a scrape carried it: nothing to push
        if not (seen or pushed or self.scraper_seen or self.expect_scrape):
            notices.warn(
                "unscraped",
                "rlpulse: run %s ended and no Prometheus scraped %s: its metrics reached no "
                "Prometheus (start `rlpulse stack up` first, or set %s or %s)",
                self.run_id,
                self.url,
                discovery.TARGETS_ENV,
                options.PUSHGATEWAY_ENV,
            )
        return seen or pushed

    def close(self) -> None:
        """Apply what is queued, stop serving, free the port and remove the file_sd target.
        Recording calls stay harmless afterwards."""
        self.flush()
        with self._lock:
            self.unregister()
            self._close()

    def on_close(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` once when this exporter closes (``close()``, interpreter exit, SIGTERM),
        before the port is freed; its errors are logged, not raised. A forked child drops the
        hooks. ``rlpulse.runtime.targets.register`` removes its file_sd target this way."""
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
        self.drops.after_fork_in_child()
        self.store.lock = threading.Lock()
        for series in self.store.series:
            if series.hist is not None:
                series.hist._lock = threading.Lock()
        self._readers = []  # their worker threads did not survive the fork
        self._close_hooks = []  # the parent's to run (a target file is the parent's)
        if self._server is not None:
            self._server.abandon()
            self._server = None

    # ---- log(): the hot path ----------------------------------------------------------------
    def log(self, metrics: Mapping[str, Any], step: Any = None) -> None:
        """Record a trainer's metrics dict (framework keys are mapped onto the catalog).

        The training thread only snapshots the dict as plain floats (no reference to a logged
        object is kept) onto the queue of recording calls (``rlpulse.runtime.calls``); mapping,
        checks, counting and detection happen off it, in call order, or at once with ``strict=True``
        so bad values raise in the caller.
        """
        try:
            snapshot = plain_snapshot(metrics)
            if step is not None and type(step) is not int:
                step = plain(step)
            args = (snapshot, step, self.clock())
        except Exception as exc:
            error = _log_misuse(metrics, step) or exc
            if self.strict:
                raise error from None
            self.drops("bad_call", "log", error)
            return
        self._calls.put(args, "log")

    def flush(self, pause: Callable[[], None] | None = None) -> None:
        """Apply the queued recording calls now, in call order (a scrape does this first)."""
        self.ingest.flush(pause)

    def count(self, name: str, amount: float = 1.0, /, **labels: Any) -> None:
        """Add ``amount`` (≥ 0) to a catalog counter."""
        self.ingest.count(name, amount, **labels)

    def set(self, name: str, value: Any, /, **labels: Any) -> None:
        """Set a catalog gauge."""
        self.ingest.set(name, value, **labels)

    def observe(
        self, name: str, values: Any, /, *, exemplars: Sequence[Any] | None = None, **labels: Any
    ) -> None:
        """Add a batch of values (or one value) to a catalog histogram."""
        self.ingest.observe(name, values, exemplars=exemplars, **labels)

    def phase(self, name: str) -> Phase:
        """A context manager timing one phase into rl_phase_duration_seconds{phase}."""
        return Phase(self.ingest, name)

    # ---- batch APIs -------------------------------------------------------------------------
    def observe_rollouts(self, **batch: Unpack[RolloutBatch]) -> None:
        """Record one batch of rollouts (``rlpulse.runtime.recording.RolloutBatch``): per-sample
        arrays (or lists) of equal length."""
        check_keywords("Exporter.observe_rollouts", batch, RolloutBatch)
        queue = self.ingest.queue
        queue("observe_rollouts", self._apply_rollouts, _rollout_args, batch, self.ingest.kept_ids)

    def _apply_rollouts(
        self,
        columns: dict[str, np.ndarray | Dropped | None],
        comps: list[str],
        group_size: int | None,
        ids: list[str | None] | None,
        kept: KeptIds,
    ) -> None:
        # overflow/NaN in user data is counted, not warned
        with self.drops.refusing("observe_rollouts"), np.errstate(all="ignore"):
            arrays, n = self.ingest.batch("observe_rollouts", columns, ids)
            if n == 0:
                return
            get, writes, observe = self.store.get, self.writes, self.ingest.observe_series
            for name, amount in batches.rollout_counts(arrays, n):
                writes.add(get(name), amount, name)
            if "latency_seconds" in arrays:
                observe(get("rl_rollout_duration_seconds"), arrays["latency_seconds"], ids, kept)
            if "response_tokens" in arrays:
                observe(get("rl_response_length_tokens"), arrays["response_tokens"], ids, kept)
            comp_arrays = {
                k: arrays[f"components[{k}]"] for k in comps if f"components[{k}]" in arrays
            }
            for name, labels, value in batches.rollout_gauges(arrays, comp_arrays, group_size):
                writes.put(name, value, labels)
            self._rollout_drift(arrays, comp_arrays)

    def _rollout_drift(self, arrays: dict[str, np.ndarray], comps: dict[str, np.ndarray]) -> None:
        """A rollout batch's drift features: prompt lengths (input), response lengths and
        rewards (behaviour)."""
        step = self._step_now()
        add = self.drift.add
        if "prompt_tokens" in arrays:
            add("input", "prompt_length", arrays["prompt_tokens"], step)
        behaviour = {
            "response_length": arrays.get("response_tokens"),
            "reward": arrays.get("rewards"),
        }
        behaviour |= {f"reward[{k}]": v for k, v in comps.items()}
        for name, values in behaviour.items():
            if values is not None and not add("behaviour", drift.feature_name(name), values, step):
                self.drops("drift_feature_cap", f"behaviour/{name}", drift.MAX_FEATURES)

    def observe_features(
        self, kind: str, /, *, categorical: Iterable[str] = (), **features: Any
    ) -> None:
        """Samples of drift features (``rlpulse.detect.drift``) of ``kind`` (input, observation
        or behaviour): per feature numbers (a 2-D array: one feature per column, ``obs[i]``)
        or texts; the features named in ``categorical`` (discrete actions, difficulty
        buckets) are categories whatever their type. Copied at the call; scored off it."""
        queue = self.ingest.queue
        queue("observe_features", self._apply_features, _feature_args, kind, categorical, features)

    def _step_now(self) -> float:
        """The trainer's latest logged step (as the calls are applied, in call order)."""
        return self.store.values[self.store.get(STEP.name).slot]

    def _apply_features(self, kind: drift.Kind, features: dict[str, Any]) -> None:
        step = self._step_now()
        for name, values in features.items():
            if isinstance(values, Dropped):
                self.drops(values.reason, name, values)
            elif not self.drift.add(kind, name, values, step):
                self.drops("drift_feature_cap", f"{kind}/{name}", drift.MAX_FEATURES)

    def observe_transitions(
        self, before: Any, actions: Any, after: Any, *, discrete: bool = False
    ) -> None:
        """Sampled transitions of the environment, one row each: the observation, the action
        taken on it (an action index when ``discrete``) and the next observation (of the same
        episode). Their model's error ratio is the drift feature ``observation/dynamics``
        (``rlpulse.detect.dynamics``). Copied at the call; scored off it."""
        args = (before, actions, after, discrete)
        self.ingest.queue("observe_transitions", self._apply_transitions, _transition_args, *args)

    def _apply_transitions(
        self, before: np.ndarray, actions: np.ndarray, after: np.ndarray, discrete: bool
    ) -> None:
        keep = np.isfinite(before).all(1) & np.isfinite(actions).all(1) & np.isfinite(after).all(1)
        if keep.any() and not self.drift.transitions(
            before[keep], actions[keep], after[keep], discrete, self._step_now()
        ):
            self.drops("drift_feature_cap", f"observation/{drift.DYNAMICS}", drift.MAX_FEATURES)

    def observe_prompts(
        self, *, lengths: Any = None, sources: Any = None, difficulty: Any = None
    ) -> None:
        """A batch of prompts as drift inputs: their lengths (tokens), source or dataset tags
        and difficulty buckets (any of them; ``observe_rollouts(prompt_tokens=...)`` gives the
        lengths already)."""
        self.observe_features(
            "input",
            categorical=("source", "difficulty"),
            prompt_length=lengths,
            source=sources,
            difficulty=difficulty,
        )

    def observe_versions(self, **versions: Any) -> None:
        """The versions of the run's parts now (``environment="v2"``, ``grader="2024-06"``): a
        part whose version is not its first (the run's metadata, ``grader_version`` or
        ``<part>_version``, or its first call) is an input drift from the current step on."""
        self.ingest.queue("observe_versions", self._apply_versions, _version_args, versions)

    def _apply_versions(self, versions: dict[str, str]) -> None:
        step = self._step_now()
        for part, version in versions.items():
            if not self.drift.version(part, version, step):
                self.drops("drift_feature_cap", f"input/version:{part}", drift.MAX_FEATURES)

    def observe_episodes(self, returns: Any, lengths: Any, success: Any = None) -> None:
        """Record finished episodes (classic RL); gauges show the mean of the last 100."""
        args = (returns, lengths, success)
        self.ingest.queue("observe_episodes", self._apply_episodes, _episode_args, *args)

    def _apply_episodes(
        self,
        returns: np.ndarray | Dropped,
        lengths: np.ndarray | Dropped,
        success: np.ndarray | Dropped | None,
    ) -> None:
        with self.drops.refusing("observe_episodes"):
            r = self.ingest.array("returns", returns)
            n_steps = self.ingest.array("lengths", lengths)
            if r is None or n_steps is None:
                return
            if r.size != n_steps.size:
                self.drops("shape_mismatch", "observe_episodes", (r.size, n_steps.size))
                return
            self.writes.add(self.store.get("rl_episodes_total"), float(r.size), "rl_episodes_total")
            gauges, judged = self._episodes.add(r, n_steps)
            for name, labels, value in gauges:
                self.writes.put(name, value, labels, judged=judged)
            self.detector.episodes(r.tolist(), n_steps.tolist())
            if success is not None:
                s = self.ingest.array("success", success)
                if s is not None and s.size:
                    self.writes.put("rl_success_ratio", float(s.mean()))

    # ---- scrape side ----------------------------------------------------------------------------
    def readings(self) -> Iterator[CachedReader]:
        """The scrape-time collectors (GPU, host)."""
        return iter(self._readers)

    def progress(self) -> None:
        """The run makes progress without logging a step (an evaluation batch, a checkpoint
        being saved): RLTrainingStalled does not page while such heartbeats come. One
        attribute write; call it as often as you like."""
        self.progress_at = time.time()

    def last_progress(self) -> float:
        """When the run last made progress of any kind (a logged step or a heartbeat)."""
        return max(self.store.values[self.ingest.last_ts.slot], self.progress_at)

    def checkpoint_saved(self, step: Any, path: Any) -> None:
        """The trainer saved a checkpoint at ``step`` (its path): a resume point the pages name.
        A step or path that cannot be used is dropped and counted (``bad_checkpoint``)."""
        try:
            at, where = float(step), os.fspath(path)
            if not (math.isfinite(at) and isinstance(where, str)):
                raise ValueError(where)
        except Exception:
            self.drops("bad_checkpoint", "checkpoint_saved", (step, path))
            return
        self.checkpoints.add(at, where, time.time())
        self.writes.put(CHECKPOINT.name, at)
        self.progress()

    def scrape_samples(self) -> Iterator[tuple[Metric, tuple[str, ...], float]]:
        """What a scrape adds to the store (``rlpulse.runtime.scrape.samples``)."""
        return scrape.samples(self)


def _rollout_args(batch: RolloutBatch, kept: KeptIds) -> tuple[Any, ...]:
    """A rollout batch's own copies: its columns (a reward component's as
    ``components[name]``), the component names, the group size, the rollout ids and ``kept``."""
    given = {label_text(k): v for k, v in (batch.get("components") or {}).items()}
    raw: dict[str, Any] = {k: batch.get(k) for k in ROLLOUT_ARRAYS}
    raw |= {f"components[{k}]": v for k, v in given.items()}
    columns = {k: None if v is None else snapshot_array(v) for k, v in raw.items()}
    ids = snapshot_ids(batch.get("rollout_ids"), *columns.values())
    group_size = batch.get("group_size")
    return columns, list(given), None if group_size is None else int(group_size), ids, kept


def _feature_args(
    kind: str, categorical: Iterable[str], features: Mapping[str, Any]
) -> tuple[str, dict[str, np.ndarray | list[str] | Dropped]]:
    """``observe_features``' own copies, by feature name (a feature given as None is left out)."""
    if kind not in drift.KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(drift.KINDS)}")
    cats = frozenset(categorical)
    return kind, {
        drift.feature_name(k): _feature_snapshot(v, k in cats)
        for k, v in features.items()
        if v is not None
    }


def _transition_args(
    before: Any, actions: Any, after: Any, discrete: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """Transitions as three float matrices of one row per transition (their own copies)."""
    rows = [snapshot_array(v) for v in (before, actions, after)]
    arrays = [r for r in rows if isinstance(r, np.ndarray)]
    if len(arrays) < len(rows):
        raise ValueError("transitions must be numbers")
    n = np.shape(before)[0]
    b, a, nxt = (r.reshape(n, -1) for r in arrays)
    if b.shape != nxt.shape:
        raise ValueError(f"observations of shapes {b.shape} and {nxt.shape}")
    return b, a, nxt, discrete


def _version_args(versions: Mapping[str, Any]) -> tuple[dict[str, str]]:
    """``observe_versions``' own copy: each part's version as a label text."""
    return ({drift.feature_name(k): label_text(v) for k, v in versions.items()},)


def _episode_args(returns: Any, lengths: Any, success: Any) -> tuple[Any, ...]:
    """``observe_episodes``' own copies."""
    s = None if success is None else snapshot_array(success)
    return snapshot_array(returns), snapshot_array(lengths), s


def _feature_snapshot(values: Any, categorical: bool) -> np.ndarray | list[str] | Dropped:
    """A drift feature's samples as its own copy: category texts (the last ``drift.WINDOW``
    of them), or floats (a 2-D array stays 2-D: a batch of vectors)."""
    if isinstance(values, str):
        return [values]
    texts = (
        values.dtype.kind in "US"
        if isinstance(values, np.ndarray)
        else isinstance(values, Sequence) and len(values) > 0 and isinstance(values[0], str)
    )
    if categorical or texts:
        last = values if isinstance(values, np.ndarray | Sequence) else list(values)
        return [label_text(v) for v in last[-drift.WINDOW :]]
    shape = np.shape(values)
    arr = snapshot_array(values)  # flat, a copy of its own (None: NaN, huge ints: ±Inf)
    if isinstance(arr, Dropped) or len(shape) < 2:
        return arr
    return arr.reshape(shape[0], -1)


def _log_misuse(metrics: Any, step: Any) -> TypeError | None:
    """The error for a ``log()`` call that passed no dict, in the caller's terms."""
    if isinstance(metrics, Mapping):
        return None
    hint = f" (did you mean log({{{metrics!r}: {step!r}}})?)" if isinstance(metrics, str) else ""
    return TypeError(f"log() takes a dict of metrics, not {type(metrics).__name__}{hint}")
