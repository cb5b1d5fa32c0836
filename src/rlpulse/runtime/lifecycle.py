"""Process lifecycle: how a run ends when the process does.

At interpreter exit every serving exporter ends its run (``end``: finished, or crashed /
interrupted as the chained ``sys.excepthook``, ``threading.excepthook`` and ``sys.exit`` saw it;
an error in one of rlpulse's own threads is logged, never the run crashing),
waiting a bounded time for a last scrape (one deadline for all) and pushing to a Pushgateway if
one is set; on a SIGTERM left at its default action it only closes (the signal is then
re-delivered, so the process still dies of it, and Prometheus pages the vanished target); a user's
own SIGTERM handler is called instead and decides. A child forked after ``start()`` lets go of the
inherited sockets and never serves. See docs/reliability.md, docs/quickstart.md#how-a-run-ends.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import logging
import os
import signal
import sys
import threading
import time
import weakref
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, push_to_gateway

from rlpulse import notices
from rlpulse.runtime import http, mainexit
from rlpulse.runtime.options import FINAL_WAIT_ENV

log = logging.getLogger("rlpulse")

METRICS_PATH = "/metrics"
PUSH_JOB = "rlpulse"  # the job label of a push: the generated scrape job's, so the rules match
PUSH_TIMEOUT = 10.0


class Served(Protocol):
    """What the lifecycle needs of an exporter."""

    _lock: threading.Lock
    _server: http.Server | None
    final_wait: float
    expect_scrape: bool
    scraper_seen: bool
    push_gateway: str | None
    registry: CollectorRegistry

    @property
    def run_id(self) -> str: ...

    @property
    def rank(self) -> int: ...

    @property
    def url(self) -> str: ...

    def end(self, outcome: str = ..., reason: str = ..., wait: float | None = ...) -> bool: ...

    def _close(self) -> None: ...

    def _after_fork_in_child(self) -> None: ...


def serving(exp: Served) -> None:
    """``exp`` started serving: end its run at exit, close it on SIGTERM."""
    _live.add(exp)
    _install_sigterm()
    _install_exit_hooks()


def closed(exp: Served) -> None:
    """``exp`` stopped serving."""
    _live.discard(exp)


def await_final_scrape(exp: Served, wait: float) -> bool:
    """Wait for a scrape that began after now, if one is expected: a scraper (Prometheus,
    or anything sending its scrape headers) fetched this endpoint before, or
    ``expect_scrape`` says one will come. Whether one came."""
    server = exp._server
    if server is None or wait <= 0 or not (exp.scraper_seen or exp.expect_scrape):
        return False
    scrapes = server.arrived(METRICS_PATH)
    notices.warn(
        "final_scrape",
        "rlpulse: run %s ended; waiting up to %.3g s for Prometheus to scrape %s once more "
        "(%s=0 skips the wait)",
        exp.run_id,
        wait,
        exp.url,
        FINAL_WAIT_ENV,
    )
    if _cut_short(server.wait_answered, METRICS_PATH, scrapes, wait):
        return True
    if _hurried:
        return False  # said by the signal handler
    notices.warn(
        "final_scrape_missed",
        "rlpulse: no scrape of %s within %.3g s after the run ended: its last values are "
        "lost to Prometheus, which may report the target down",
        exp.url,
        wait,
    )
    return False


def push(exp: Served) -> bool:
    """Push the run's final state to the Pushgateway, grouped by job, run_id and rank."""
    gateway = exp.push_gateway
    if not gateway:
        return False
    group = {"run_id": exp.run_id, "rank": str(exp.rank)}
    failure: list[Exception] = []

    def send() -> None:
        try:
            push_to_gateway(gateway, PUSH_JOB, exp.registry, group, timeout=PUSH_TIMEOUT)
        except Exception as exc:
            failure.append(exc)

    sender = threading.Thread(target=send, name="rlpulse-push", daemon=True)
    sender.start()
    sender.join(PUSH_TIMEOUT)  # in total: a Pushgateway trickling its answer does not hold exit
    try:
        if sender.is_alive():
            raise TimeoutError(f"no answer within {PUSH_TIMEOUT:g} s")
        if failure:
            raise failure[0]
    except Exception as exc:
        notices.warn(
            "push_failed",
            "rlpulse: could not push run %s to the Pushgateway %s: %s",
            exp.run_id,
            exp.push_gateway,
            exc,
        )
        return False
    log.info("rlpulse: pushed run %s to %s", exp.run_id, exp.push_gateway)
    return True


_live: weakref.WeakSet[Served] = weakref.WeakSet()  # exporters now serving
_sigterm_lock = threading.Lock()
_sigterm_previous: Any = None
_sigterm_installed = False


def _close_all() -> None:
    """Close every serving exporter; one whose lock is held (by the very frame a signal
    interrupted) is left to the kernel, which frees its port when the process ends."""
    for exp in list(_live):
        if exp._lock.acquire(timeout=1.0):
            try:
                with contextlib.suppress(Exception):
                    exp._close()
            finally:
                exp._lock.release()


def _on_sigterm(signum: int, frame: Any) -> None:
    previous = _sigterm_previous
    if callable(previous):
        previous(signum, frame)  # the user's handler decides (it may keep training)
        return
    _close_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # die of SIGTERM, as without rlpulse


def _install_sigterm() -> None:
    """Chain a SIGTERM handler once per process, from the main thread, unless SIGTERM is
    ignored; a handler installed later replaces it (interpreter exit still closes)."""
    global _sigterm_previous, _sigterm_installed
    with _sigterm_lock:
        if _sigterm_installed or threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)
        if previous is not signal.SIG_DFL and not callable(previous):
            return  # ignored, or a handler set outside Python that cannot be chained
        _sigterm_previous = previous
        signal.signal(signal.SIGTERM, _on_sigterm)
        _sigterm_installed = True


def _after_fork_in_child() -> None:
    global _sigterm_lock
    _sigterm_lock = threading.Lock()
    for exp in list(_live):
        exp._after_fork_in_child()
    _live.clear()


class _Hurry(BaseException):
    """A second Ctrl-C or a SIGTERM during the exit's final wait: stop waiting, still push."""


def _hurry(signum: int, frame: Any) -> None:
    global _hurried
    if not _hurried:
        _hurried = signum
        print(
            f"rlpulse: signal {signum} during the final wait: not waiting for the last scrape; "
            "the run's end is still recorded and pushed",
            file=sys.stderr,
            flush=True,
        )
    if _in_wait:
        raise _Hurry


_hurried = 0  # the signal that hurried the exit (SIGTERM is re-delivered once done)
_in_wait = False  # a wait a signal may cut short is under way


def _cut_short(wait: Any, *args: Any) -> Any:
    """``wait(*args)``, unless the exit was hurried (then, or when hurried during it: None)."""
    global _in_wait
    if _hurried:
        return None
    try:
        _in_wait = True
        return wait(*args)
    except _Hurry:
        return None
    finally:
        _in_wait = False


def _uncaught() -> tuple[str, str] | None:
    """The outcome of an uncaught exception whose report bypassed the chained hook (a hook set
    after start(), e.g. rich.traceback.install()): the interpreter keeps it in sys.last_*."""
    last = getattr(sys, "last_type", None)
    if not isinstance(last, type) or issubclass(last, SystemExit):
        return None
    if issubclass(last, KeyboardInterrupt):
        return ("interrupted", "KeyboardInterrupt")
    return ("crashed", last.__name__)


def _raised_at_top(noted: bool) -> tuple[str, str] | None:
    """The outcome of a ``raise SystemExit(n)`` in the main module, which no hook sees
    (runtime/mainexit.py); when no hook ``noted`` an exit and its status cannot be read: said,
    and left finished."""
    ended, status = mainexit.raised()
    if not ended or (noted and status is mainexit.UNKNOWN):
        return None
    if status is mainexit.UNKNOWN:
        notices.warn(
            "exit_status_unknown",
            "rlpulse: the script ended with a SystemExit raised outside sys.exit(), whose status "
            "Python %d.%d does not tell exit handlers; the run is recorded finished (with "
            "sys.exit(...) a non-zero status is recorded as a crash)",
            *sys.version_info[:2],
        )
        return None
    return ("finished", "") if status == 0 else ("crashed", f"exit status {status!r}")


def _end_all() -> None:
    """At interpreter exit: end every serving exporter with the outcome the exit hooks saw. The
    waits for a last scrape share one deadline, so several exporters cost one wait; a second
    Ctrl-C or a SIGTERM meanwhile cuts the wait short, never the end record or the push."""
    if (_exit_outcome is None or _exit_outcome[0] == "finished") and _live:
        seen = _uncaught() or _raised_at_top(_exit_outcome is not None)
        if seen is not None:
            _note_outcome(*seen)
    outcome, reason = _exit_outcome or ("finished", "")
    exporters = list(_live)
    if not exporters:
        return
    previous = _catch_signals()
    try:
        deadline = time.monotonic() + max((exp.final_wait for exp in exporters), default=0.0)
        for exp in exporters:
            with contextlib.suppress(_Hurry, Exception):
                exp.end(outcome, reason, wait=min(exp.final_wait, deadline - time.monotonic()))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if _hurried == signal.SIGTERM and previous.get(signal.SIGTERM) in (_on_sigterm, signal.SIG_DFL):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # die of it, as without rlpulse


def _catch_signals() -> dict[int, Any]:
    """Ctrl-C and SIGTERM hurry the exit (main thread only); the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if handler is signal.SIG_IGN or handler is None:
            continue
        previous[signum] = handler
        signal.signal(signum, _hurry)
    return previous


_exit_outcome: tuple[str, str] | None = None  # set by the hooks below; a crash is never replaced
_exit_hooks_installed = False


def _note_outcome(outcome: str, reason: str) -> None:
    global _exit_outcome
    if _exit_outcome is None or _exit_outcome[0] != "crashed":
        _exit_outcome = (outcome, reason)


def _note_exception(exc_type: type[BaseException], where: str = "") -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        _note_outcome("interrupted", "KeyboardInterrupt")
    elif not issubclass(exc_type, SystemExit):
        _note_outcome("crashed", f"{where}{exc_type.__name__}")


def _note_exit_status(status: object) -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # sys.exit in another thread ends only that thread
    if status is None or status == 0:
        _note_outcome("finished", "")
    else:
        _note_outcome("crashed", f"exit status {status!r}")


def _install_exit_hooks() -> None:
    """Chain (once) ``sys.excepthook``, ``threading.excepthook`` and ``sys.exit`` so that
    interpreter exit knows how the run ended; the previous hooks are still called."""
    global _exit_hooks_installed
    with _sigterm_lock:
        if _exit_hooks_installed:
            return
        _exit_hooks_installed = True
    previous_excepthook = sys.excepthook
    previous_thread_hook = threading.excepthook
    previous_exit = sys.exit

    def excepthook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        _note_exception(exc_type)
        previous_excepthook(exc_type, exc, tb)

    def thread_excepthook(args: Any) -> None:
        if not getattr(args.thread, "name", "").startswith("rlpulse"):  # ours: not the run's
            _note_exception(args.exc_type, "thread: ")
        previous_thread_hook(args)

    def exit(status: Any = None) -> Any:
        _note_exit_status(status)
        return previous_exit(status)

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    sys.exit = exit
    mainexit.watch()
    for name in ("exit", "quit"):  # site's exit() / quit() raise SystemExit without sys.exit
        builtin = getattr(builtins, name, None)
        if builtin is not None:
            setattr(builtins, name, _Quitter(builtin))


class _Quitter:
    """``builtins.exit`` / ``quit`` noting the status, then doing what they did."""

    def __init__(self, previous: Any) -> None:
        self._previous = previous

    def __repr__(self) -> str:
        return repr(self._previous)

    def __call__(self, code: Any = None) -> Any:
        _note_exit_status(code)
        return self._previous(code)


atexit.register(_end_all)
os.register_at_fork(after_in_child=_after_fork_in_child)
