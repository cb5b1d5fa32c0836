"""``Recorder``: the trainer-facing object that samples rollouts and hands them to the writer."""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Unpack

from rlpulse import catalog
from rlpulse.rollouts.paths import run_file
from rlpulse.rollouts.records import ColumnError, Columns, RolloutTraces
from rlpulse.rollouts.sampler import Sampler, SamplingConfig
from rlpulse.rollouts.store import Batch, Counters, Writer
from rlpulse.runtime import forks
from rlpulse.runtime.recording import check_keywords

log = logging.getLogger("rlpulse.rollouts")

Redactor = Callable[[dict[str, Any]], dict[str, Any] | None]

# stats() key (before any ":reason") -> its catalog metric
_METRICS = {
    "offered": catalog.get("rlpulse_rollouts_offered_total"),
    "recorded": catalog.get("rlpulse_rollouts_recorded_total"),
    "dropped": catalog.get("rlpulse_rollouts_dropped_total"),
    "evicted": catalog.get("rlpulse_rollouts_evicted_total"),
    "store_bytes": catalog.get("rlpulse_rollout_store_bytes"),
    "store_rows": catalog.get("rlpulse_rollout_store_rows"),
}


class Recorder:
    """Samples rollout batches and stores the kept ones in the run's SQLite file.

    ``record()`` is safe to call from several threads; it never blocks on storage and never
    raises on bad input (unless ``strict``): bad batches are counted under
    ``dropped:invalid`` and logged once.

    Args:
        run_id: the run; the store is ``<data_dir>/rollouts/<run_id>.sqlite``.
        data_dir: defaults to ``$RLPULSE_DATA_DIR`` (see ``rlpulse.rollouts.paths``).
        rank: stored with every row (several ranks may write one run file).
        sampling: per-step counts per criterion (see ``rlpulse.rollouts.sampler``).
        max_rows, max_bytes: bounds on the run file; the oldest rows are evicted past them.
        max_text_chars: prompts, responses, tool calls and metadata are clipped to this.
        queue_size, queue_bytes: batches (and their text, in characters) waiting for the
            writer before new batches are dropped; this bounds the recorder's memory.
        redact: called (on the writer thread) with each kept record as a dict before it is
            stored; returns the dict to store or None to drop the rollout. A hook that raises
            drops the rollout (counted ``dropped:redact_error``), never stores it unredacted.
        lock_timeout_s: how long the writer waits for a locked file before dropping a batch.
        min_free_bytes: free space the store leaves on its filesystem (for the trainer's own
            writes, and so eviction can always run); a batch that would go below it is
            dropped as ``disk_full`` and the oldest quarter evicted.
        page_limit: optional hard cap on the file's SQLite pages (defence in depth; a write
            past it is treated like a full disk).
    """

    def __init__(
        self,
        run_id: str,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        rank: int = 0,
        sampling: SamplingConfig | None = None,
        max_rows: int = 20_000,
        max_bytes: int = 64 * 2**20,
        max_text_chars: int = 16_384,
        queue_size: int = 64,
        queue_bytes: int = 32 * 2**20,
        redact: Redactor | None = None,
        lock_timeout_s: float = 2.0,
        page_limit: int | None = None,
        min_free_bytes: int = 64 * 2**20,
        strict: bool = False,
    ) -> None:
        for name, value in (
            ("max_rows", max_rows),
            ("max_bytes", max_bytes),
            ("max_text_chars", max_text_chars),
            ("queue_size", queue_size),
            ("queue_bytes", queue_bytes),
        ):
            if value < 1:
                raise ValueError(f"Recorder {name}={value} must be ≥ 1")
        if redact is not None and not callable(redact):
            raise ValueError(f"Recorder redact={redact!r} is not callable")
        self.run_id = run_id
        self.path: Path = run_file(run_id, data_dir)
        self.sampling = sampling or SamplingConfig()
        self.max_text_chars = max_text_chars
        self.strict = strict
        self._sampler = Sampler(self.sampling)
        self._counters = Counters()
        self._lock = threading.Lock()
        self._seen = 0
        self._warned: set[str] = set()
        self._closed = False
        self._writer_options: dict[str, Any] = {
            "run_id": run_id,
            "rank": int(rank),
            "max_rows": max_rows,
            "max_bytes": max_bytes,
            "queue_size": queue_size,
            "queue_bytes": queue_bytes,
            "timeout_s": lock_timeout_s,
            "page_limit": page_limit,
            "min_free_bytes": min_free_bytes,
            "redact": redact,
        }
        self._writer = self._new_writer()
        atexit.register(self.close)
        _recorders.add(self)

    def _new_writer(self) -> Writer:
        """A writer thread with its own connection and session (rows of one process)."""
        return Writer(
            self.path,
            session=secrets.randbits(62),
            counters=self._counters,
            **self._writer_options,
        )

    def _after_fork_in_child(self) -> None:
        """In a forked child: fresh locks (a parent thread may have held one at the fork) and
        a writer of its own (the parent's thread and SQLite connection are not the child's),
        so the child's rollouts are stored too. Its counters and sampler (whose random
        generator has a lock of its own) start afresh."""
        self._lock = threading.Lock()
        self._counters = Counters()
        self._sampler = Sampler(self.sampling)
        self._parents_writer = self._writer  # kept: closing its connection here is unsafe
        if not self._closed:
            self._writer = self._new_writer()

    def record(self, **columns: Unpack[RolloutTraces]) -> list[int]:
        """Offer one batch of rollouts (``RolloutTraces``: columns of equal length); returns the
        positions (in the batch, ascending) of the rollouts kept for the store, e.g. to choose
        exemplars."""
        check_keywords("Recorder.record", columns, RolloutTraces)
        if self._closed:
            return []
        try:
            cols = Columns.parse(columns)
        except ColumnError as exc:
            return self._invalid(exc)
        try:
            return self._record(cols)
        except Exception as exc:
            if self.strict:
                raise
            return self._invalid(exc)

    def _record(self, cols: Columns) -> list[int]:
        self._counters.add("offered", cols.n)
        with self._lock:  # selection and queueing in one order, so evictions follow inserts
            first = self._seen
            self._seen += cols.n
            sel = self._sampler.select(cols, first)
            if not sel.keep and not sel.evict:
                return []
            positions = sorted(sel.keep)
            rows = cols.rows(positions, first, self.max_text_chars)
            for row, pos in zip(rows, positions, strict=True):
                row["kept_for"] = sel.keep[pos]
            self._writer.submit(Batch(rows, [first + p for p in positions], sel.evict))
        return positions

    def _invalid(self, exc: Exception) -> list[int]:
        self._counters.add("dropped:invalid")
        if self.strict:
            raise exc
        key = str(exc)[:80]
        if key not in self._warned and len(self._warned) < 64:
            self._warned.add(key)
            log.warning("rlpulse record_rollouts: batch dropped: %s (logged once)", exc)
        return []

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Block until every batch recorded so far is written; False on timeout."""
        return self._writer.flush(timeout)

    def close(self) -> None:
        """Write what is queued and close the file; later ``record()`` calls do nothing."""
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        atexit.unregister(self.close)

    def stats(self) -> dict[str, float]:
        """Counters: ``offered``, ``recorded``, ``dropped:<reason>``, ``evicted:<reason>``,
        ``store_bytes``, ``store_rows``, ``queued`` (batches waiting for the writer)."""
        out = self._counters.snapshot()
        out["queued"] = float(self._writer.queue.qsize())
        return out

    def metric_samples(self) -> list[tuple[str, dict[str, str], float]]:
        """The self-metrics as (catalog name, labels, value), ready for a scrape collector.

        Counters start at 0 so the series exist before the first drop.
        """
        stats = {"offered": 0.0, "recorded": 0.0, "store_bytes": 0.0, "store_rows": 0.0}
        stats |= self.stats()
        out = []
        for key, value in sorted(stats.items()):
            base, _, reason = key.partition(":")
            metric = _METRICS.get(base)
            if metric is not None:
                labels = dict(zip(metric.labels, (reason,), strict=True)) if reason else {}
                out.append((metric.name, labels, value))
        return out


_recorders = forks.Live(Recorder._after_fork_in_child)


def record_rollouts(recorder: Recorder, **columns: Unpack[RolloutTraces]) -> list[int]:
    """Offer a batch (``RolloutTraces``) to ``recorder``."""
    return recorder.record(**columns)
