"""A reading taken in a worker thread, cached briefly, and bounded by a timeout.

Scrapes call ``CachedReader.get()``; the reading itself (NVML, psutil) runs in a single worker
thread, so a hung driver call makes the scrape report the collector as failed after ``timeout``
seconds instead of hanging the scrape — and no second call piles up behind the hung one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

log = logging.getLogger("rlpulse")

# (catalog metric name, its own labels, value)
Reading = list[tuple[str, dict[str, str], float]]


class CollectorDisabled(Exception):
    """Raised by a read function when the collector cannot work here (no NVML, no GPU)."""


@dataclass
class CollectorState:
    """Self-health of one collector, exported as rlpulse_collector_* series."""

    name: str
    enabled: bool = True
    up: bool = False
    duration: float = 0.0
    errors: int = 0
    last: Reading = field(default_factory=list)


class CachedReader:
    """Runs ``read`` at most every ``ttl`` seconds, waiting at most ``timeout`` for it."""

    def __init__(
        self, name: str, read: Callable[[], Reading], ttl: float = 1.0, timeout: float = 0.5
    ) -> None:
        self.state = CollectorState(name)
        self._read = read
        self._ttl = ttl
        self._timeout = timeout
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"rlpulse-{name}")
        self._pending: Future[Reading] | None = None
        self._stamp = -float("inf")
        self._lock = threading.Lock()
        self._logged = False

    def get(self) -> Reading:
        """The latest reading (empty while failing or disabled); updates ``state``."""
        st = self.state
        if not st.enabled:
            return []
        with self._lock:
            if time.monotonic() - self._stamp < self._ttl:
                return st.last
            if self._pending is None:
                try:
                    self._pending = self._pool.submit(self._timed)
                except RuntimeError:  # interpreter exit (a run's last scrape): no new reads
                    return st.last
            pending = self._pending
            try:
                reading = pending.result(timeout=self._timeout)
            except FutureTimeout:
                self._fail(f"reading took longer than {self._timeout}s")
                return []
            except CollectorDisabled as exc:
                st.enabled, st.up, st.last = False, False, []
                log.warning("rlpulse: %s collector disabled: %s", st.name, exc)
                self._pending = None
                return []
            except Exception as exc:  # a collector must never break a scrape
                self._pending = None
                self._fail(f"{type(exc).__name__}: {exc}")
                return []
            self._pending = None
            self._stamp = time.monotonic()
            st.up, st.last = True, reading
            self._logged = False
            return reading

    def _timed(self) -> Reading:
        t0 = time.perf_counter()
        try:
            return self._read()
        finally:
            self.state.duration = time.perf_counter() - t0

    def _fail(self, why: str) -> None:
        st = self.state
        st.up, st.last = False, []
        st.errors += 1
        if not self._logged:
            log.warning("rlpulse: %s collector failed: %s", st.name, why)
            self._logged = True

    def close(self) -> None:
        """Stop the worker thread (without waiting for a hung call)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
