"""Dropped user data: counted by reason (``rlpulse_dropped_values_total{reason}``), said once
per key, each key's first on stderr (for at most ``MAX_WARNED`` keys, then only counted),
raised instead when strict. Nothing here keeps the dropped object: a bounded preview of it is
logged."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rlpulse import notices
from rlpulse.runtime.coerce import PREVIEW_CHARS, Dropped, plain, preview

log = logging.getLogger("rlpulse")

MAX_WARNED = 256  # (key, reason) pairs given their own warning; later drops are only counted


class Drops:
    """One exporter's drop counts; ``drops(reason, key, value)`` counts one."""

    def __init__(self, strict: bool = False) -> None:
        self.strict = strict
        self.counts: dict[str, int] = {}
        self.warned: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def __call__(self, reason: str, key: Any, value: Any) -> None:
        """Count a dropped value under ``reason``; ``ValueError`` when strict."""
        with self._lock:
            self.counts[reason] = self.counts.get(reason, 0) + 1
        name = key[:PREVIEW_CHARS] if type(key) is str else preview(key)
        if self.strict:
            raise ValueError(f"rlpulse: {name!r}: {reason} ({preview(value)})")
        if (name, reason) in self.warned or len(self.warned) > MAX_WARNED:
            return
        self.warned.add((name, reason))
        log.warning(
            "rlpulse: dropped %s for %r: %s (logged once per key)",
            preview(value),
            name,
            reason,
            extra={notices.KIND: f"dropped:{reason}:{name}"},  # each key's first is shown
        )
        if len(self.warned) > MAX_WARNED:
            log.warning("rlpulse: drops for %d keys logged; later ones only counted", MAX_WARNED)

    def tally(self, reason: str) -> None:
        """Count a dropped value whose caller says why itself."""
        with self._lock:
            self.counts[reason] = self.counts.get(reason, 0) + 1

    def refuse(self, name: Any, exc: Exception) -> None:
        """A recording call that failed: raised when strict, else counted as ``bad_call``."""
        if self.strict:
            raise exc
        self("bad_call", name, exc)

    @contextmanager
    def refusing(self, name: Any) -> Iterator[None]:
        """``refuse`` what the block raises (the rest of the block is skipped)."""
        try:
            yield
        except Exception as exc:
            self.refuse(name, exc)

    def number(self, key: str, value: Any) -> float | None:
        """A number from a user value, or None after counting why it was dropped."""
        v = plain(value)
        if isinstance(v, Dropped):
            self(v.reason, key, v)
            return None
        return v

    def after_fork_in_child(self) -> None:
        """A fresh lock: a parent thread may have held this one at the fork."""
        self._lock = threading.Lock()
