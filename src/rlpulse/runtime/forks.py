"""What a forked child must not take over as it is: a lock a parent thread may have held at the
fork, and objects whose threads did not survive it. ``Live`` keeps one kind's live objects and
the lock of its process-wide state, and makes both fit for the child right after a fork."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Live(Generic[T]):
    """The live objects of one kind (held weakly) and ``lock``, for the kind's process-wide
    state. In a forked child the lock is made afresh, then ``rearm`` re-arms each object (fresh
    locks, threads of its own)."""

    def __init__(self, rearm: Callable[[T], None]) -> None:
        self.lock = threading.Lock()
        self._objects: weakref.WeakSet[T] = weakref.WeakSet()
        self._rearm = rearm
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    def add(self, obj: T) -> None:
        self._objects.add(obj)

    def __iter__(self) -> Iterator[T]:
        """The objects live now (a copy: the set may change meanwhile)."""
        return iter(list(self._objects))

    def _after_fork_in_child(self) -> None:
        self.lock = threading.Lock()
        for obj in self:
            self._rearm(obj)
