"""Problems a user should see, without any logging set-up.

Every notice is logged on the ``rlpulse`` logger at WARNING. While logging is not configured
(neither that logger nor an ancestor it propagates to has a handler other than a
``NullHandler``), the first notice of each kind is also written to stderr; ``RLPULSE_QUIET=1``
silences that. Once a handler is configured, the logging configuration alone decides.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

QUIET_ENV = "RLPULSE_QUIET"

log = logging.getLogger("rlpulse")
_shown: set[str] = set()
_lock = threading.Lock()


def warn(kind: str, message: str, *args: Any) -> None:
    """Log ``message % args``; the first of ``kind`` also goes to stderr (see the module)."""
    log.warning(message, *args)
    if _quiet() or logging_configured():
        return
    with _lock:
        if kind in _shown:
            return
        _shown.add(kind)
    text = message % args if args else message
    print(f"{text} [{QUIET_ENV}=1 silences rlpulse notices]", file=sys.stderr, flush=True)


def logging_configured() -> bool:
    """Whether a real handler would receive the ``rlpulse`` logger's records."""
    logger: logging.Logger | None = log
    while logger is not None:
        if any(not isinstance(h, logging.NullHandler) for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


def _quiet() -> bool:
    return os.environ.get(QUIET_ENV, "").strip().lower() not in ("", "0", "false", "no")
