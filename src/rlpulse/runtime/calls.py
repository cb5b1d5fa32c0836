"""The recording calls of one exporter, queued in call order and applied off the training thread.

A recording call (``log``, ``observe_episodes``, ``count`` ...) takes its input as plain numbers
at the call (``rlpulse.runtime.coerce``: no reference to a user object is kept) and appends it
to its exporter's ``Calls``: one bounded deque, so every call is applied in the order it was
made. A call of the queue's own kind (``log()``) is queued as its arguments alone, a tuple of
plain values that the garbage collector stops tracking at its first pass (a long queue adds
nothing to later collections); any other as a ``Call``. The own kind's batch form (``log``'s:
``Ingest.apply_run``) applies a run of up to ``RUN`` consecutive own calls at a time, still in
call order.

One daemon thread per process (``rlpulse-apply``) applies every live exporter's queue: a call
that finds its queue idle wakes it, and it gathers calls for ``BATCH_SECONDS`` (so what a call's
apply says, a dropped value's notice, comes within about a second), or until a queue holds
``BACKLOG`` calls, before it applies them all. Large batches make the apply cheap: consecutive
``log()`` calls go in columns (at 100 steps a second a 50 ms gather found 5 calls, applied one
by one at twice the CPU). A scrape applies what is left before it reads, so it is never stale
(it applies the calls made before it began, not those that keep coming). Past ``MAX_QUEUED``
waiting calls a call is dropped and counted
(``rlpulse_dropped_values_total{reason="queue_full"}``, said once at once), never blocking.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from rlpulse import notices
from rlpulse.runtime import forks
from rlpulse.runtime.drops import Drops
from rlpulse.runtime.exposition import Pacer

log = logging.getLogger("rlpulse")

MAX_QUEUED = 16384  # calls waiting to be applied (~22 MB of 32-key dicts); more are dropped
BATCH_SECONDS = 1.0  # the apply thread gathers calls this long after a wake-up
BACKLOG = 2048  # calls in one queue that end the gather, and past which it applies without pausing
RUN = 256  # consecutive calls of one kind a batch form applies at once (~0.3 ms of work)
FULL = "queue_full"  # the drop reason of a call the full queue refused
Args = tuple[Any, ...]
Apply = Callable[..., None]
Pause = Callable[[], None]


class Call:
    """A queued call of another kind than its queue's own."""

    __slots__ = ("apply", "args")

    def __init__(self, apply: Apply, args: Args) -> None:
        self.apply = apply
        self.args = args


class Calls:
    """One exporter's queue of recording calls; ``apply()`` runs them in order. ``own`` is the
    queue's own kind of call, and ``batch`` its batch form (the args of consecutive calls)."""

    __slots__ = ("__weakref__", "batch", "drops", "lock", "own", "queue", "scheduled", "strict")

    def __init__(
        self, drops: Drops, own: Apply, batch: Callable[[list[Args]], None] | None = None
    ) -> None:
        self.drops = drops
        self.own = own
        self.batch = batch
        self.strict = drops.strict
        self.queue: deque[Args | Call] = deque()
        self.lock = threading.RLock()  # one applier at a time: the apply thread or a scrape
        self.scheduled = False  # the apply thread was woken for this queue's calls

    def put(self, args: Args, name: str, apply: Apply | None = None) -> None:
        """Queue one call: ``apply(*args)``, or (no ``apply``) the queue's own kind (``name``
        is what a drop is counted under)."""
        if self.strict:  # applied at once, so that bad input raises in the caller
            with self.lock:
                self.apply()
                (apply or self.own)(*args)
            return
        queue = self.queue
        if len(queue) >= MAX_QUEUED:
            self.full(name)
            return
        queue.append(args if apply is None else Call(apply, args))
        if not self.scheduled:
            self.schedule()
        elif len(queue) == BACKLOG:
            _backlog.set()

    def full(self, name: str) -> None:
        """Count a call dropped because the queue is full; the first is said at once."""
        first = FULL not in self.drops.counts
        self.drops.tally(FULL)
        if first:
            notices.warn(
                FULL,
                "rlpulse: dropped a %s() call: %d recording calls wait for the apply thread "
                "(the trainer records faster than the exporter applies); every such call is "
                'counted in rlpulse_dropped_values_total{reason="%s"}',
                name,
                MAX_QUEUED,
                FULL,
            )

    def schedule(self) -> None:
        """Wake the apply thread for this queue."""
        self.scheduled = True
        _wake()

    def apply(self, pause: Pause | None = None) -> None:
        """Apply the calls queued so far, in order; ``pause`` (called after each while fewer
        than ``BACKLOG`` wait) hands the GIL back to the training thread between them. Calls
        queued meanwhile wait for the next apply: writers faster than the apply must not hold
        an applier (and a scrape waiting behind it) forever."""
        queue, own, batch = self.queue, self.own, self.batch
        with self.lock:
            left = len(queue)
            while left:
                entry = queue.popleft()
                left -= 1
                if isinstance(entry, Call):
                    entry.apply(*entry.args)
                elif batch is None:
                    own(*entry)
                else:
                    run: list[Args] = [entry]
                    while left and len(run) < RUN and type(queue[0]) is not Call:
                        run.append(queue.popleft())  # type: ignore[arg-type]
                        left -= 1
                    batch(run)
                if pause is not None and len(queue) < BACKLOG:
                    pause()

    def after_fork_in_child(self) -> None:
        """A fresh lock (a parent thread may have held this one at the fork); the child's
        apply thread starts at its next call."""
        self.lock = threading.RLock()
        self.scheduled = False


# ---- the process's apply thread ------------------------------------------------------------

_live = forks.Live(Calls.after_fork_in_child)  # every exporter's queue
_event = threading.Event()  # a queue has calls to apply
_backlog = threading.Event()  # a queue holds BACKLOG calls: apply now
_thread: threading.Thread | None = None


def register(calls: Calls) -> None:
    """Serve ``calls`` from the apply thread (while its exporter lives)."""
    with _live.lock:
        _live.add(calls)


def _wake() -> None:
    global _thread
    if _thread is None:
        with _live.lock:
            if _thread is None:
                _thread = threading.Thread(target=_run, name="rlpulse-apply", daemon=True)
                _thread.start()
    _event.set()


def _queues() -> list[Calls]:
    with _live.lock:
        return list(_live)


def _run() -> None:
    event, backlog = _event, _backlog
    while True:
        event.wait()
        event.clear()
        # a batch gathers, unless a queue fills up first; one that is full already (its
        # writers outran the last apply, so its next call cannot meet BACKLOG) does not wait
        if all(len(calls.queue) < BACKLOG for calls in _queues()):
            backlog.wait(BATCH_SECONDS)
        backlog.clear()
        pause = Pacer()
        for calls in _queues():
            if not calls.scheduled:
                continue
            calls.scheduled = False  # a call queued from now on wakes this thread again
            try:
                calls.apply(pause)
            except Exception:  # the appliers count bad input; this is a bug, not the trainer's
                log.warning("rlpulse: applying a recording call failed", exc_info=True)


def _after_fork_in_child() -> None:
    """The parent's apply thread did not survive the fork: the next call starts one."""
    global _event, _backlog, _thread
    _event, _backlog, _thread = threading.Event(), threading.Event(), None


os.register_at_fork(after_in_child=_after_fork_in_child)
