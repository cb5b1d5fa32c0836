"""Problems a user should see, without any logging set-up.

rlpulse reports problems as WARNING records on the ``rlpulse`` logger. While logging is not
configured (no handler but rlpulse's own on that logger or an ancestor it propagates to), the
first record of each kind (its message template, or ``warn``'s ``kind``) is written to stderr;
``RLPULSE_QUIET=1`` silences that. Once a handler is configured, the logging configuration alone
decides what is shown.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

QUIET_ENV = "RLPULSE_QUIET"
KIND = "rlpulse_kind"  # the LogRecord attribute naming a notice's kind

log = logging.getLogger("rlpulse")


class FirstOfEachKind(logging.Handler):
    """Writes the first WARNING-or-worse record of each kind to stderr (see the module)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._shown: set[str] = set()
        self._seen_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if _quiet() or logging_configured():
            return
        kind = str(getattr(record, KIND, record.msg))
        with self._seen_lock:
            if kind in self._shown:
                return
            self._shown.add(kind)
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not format: show the template
            text = str(record.msg)
        print(f"{text} [{QUIET_ENV}=1 silences rlpulse notices]", file=sys.stderr, flush=True)


def _after_fork_in_child() -> None:
    """Fresh locks: a parent thread may have held one at the fork."""
    for handler in log.handlers:
        if isinstance(handler, FirstOfEachKind):
            handler._seen_lock = threading.Lock()
            handler.createLock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def install() -> None:
    """Give the ``rlpulse`` logger its stderr notices (once)."""
    if not any(isinstance(h, FirstOfEachKind) for h in log.handlers):
        log.addHandler(FirstOfEachKind())


def warn(kind: str, message: str, *args: Any) -> None:
    """Log ``message % args`` as a problem of ``kind`` (its first shows on stderr)."""
    log.warning(message, *args, extra={KIND: kind})


def say(message: str, *args: Any) -> None:
    """Tell the user something they need to know (where the run is served): an INFO record
    where a logging set-up shows rlpulse's INFO records, else a line on stderr
    (``RLPULSE_QUIET=1``: neither)."""
    if logging_configured() and log.isEnabledFor(logging.INFO):
        log.info(message, *args)
    elif not _quiet():
        print(message % args, file=sys.stderr, flush=True)


def logging_configured() -> bool:
    """Whether a handler other than rlpulse's own would receive the ``rlpulse`` records."""
    logger: logging.Logger | None = log
    while logger is not None:
        for handler in logger.handlers:
            if not isinstance(handler, logging.NullHandler | FirstOfEachKind):
                return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


def _quiet() -> bool:
    return os.environ.get(QUIET_ENV, "").strip().lower() not in ("", "0", "false", "no")
