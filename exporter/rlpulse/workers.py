"""Worker subprocesses (rollout workers, data loaders, reward servers) reporting through the
exporter of the rank that owns them.

In the rank's process, after ``rlpulse.start()``::

    hub = rlpulse.workers.serve()          # or serve(exporter); sets RLPULSE_WORKER_ADDRESS

In a worker (``multiprocessing`` with fork, spawn or forkserver, a torch ``DataLoader`` worker, a
``subprocess`` — anything that inherits the environment)::

    w = rlpulse.workers.worker_client()    # the process-wide client, connected on first use
    w.count("rl_env_steps_total", 64)
    w.observe_rollouts(latency_seconds=lat, response_tokens=toks, rewards=r)
    with w.phase("reward"):
        ...
    w.flush()                              # optional: returns once the exporter has applied it

Each worker has its own connection (a Unix socket in a private directory, HMAC-authenticated), so
a worker killed mid-write cannot corrupt or lock another's stream — the failure modes of one shared
``multiprocessing.Queue`` — and there are no files to grow or clean up, unlike prometheus_client's
multiprocess mode. Calls are buffered in the worker and sent in batches (every ``flush_interval``
seconds, every ``max_batch`` calls, on ``flush()`` and at exit).

What a worker reports is merged into the rank's own series: counters and histograms add exactly,
gauges take the last value written. No series carries a worker label, so workers that come and go
(a data loader re-spawned every epoch) add no series. A worker that exits or dies is dropped from
the hub when its connection closes; everything it sent stays in the totals. Calls still buffered in
a worker that is killed (SIGKILL, or SIGTERM without a handler) are lost: ``flush()`` at the points
where a total must be exact.

A worker's ``log()`` maps keys like the trainer's but sets no step and does not count as the
trainer's activity (``rl_last_step_timestamp_seconds`` follows the trainer loop only).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Client, Connection, Listener, wait
from multiprocessing.util import Finalize
from typing import Any

import rlpulse
from rlpulse import catalog
from rlpulse.exporter import Exporter

__all__ = ["ENV", "Address", "WorkerClient", "WorkerHub", "serve", "worker_client"]

log = logging.getLogger("rlpulse")

ENV = "RLPULSE_WORKER_ADDRESS"
PHASE = catalog.get("rl_phase_duration_seconds").name
HELLO_TIMEOUT = 5.0
_OPS = frozenset({"log", "count", "set", "observe", "observe_rollouts", "observe_episodes"})
_Call = tuple[str, tuple[Any, ...], dict[str, Any]]


@dataclass(frozen=True)
class Address:
    """Where a hub listens and the key a worker proves itself with (picklable; ``str()`` is the
    environment form ``<hex key>@<socket path>``)."""

    path: str
    key: bytes

    def __str__(self) -> str:
        return f"{self.key.hex()}@{self.path}"

    @classmethod
    def parse(cls, text: str) -> Address:
        """The address from its environment form; ValueError naming the variable if malformed."""
        key, sep, path = text.partition("@")
        try:
            raw = bytes.fromhex(key)
        except ValueError:
            raw = b""
        if not sep or not raw or not path:
            raise ValueError(f"{ENV}={text!r} is not '<hex key>@<socket path>'")
        return cls(path, raw)


@dataclass
class Worker:
    """One connected worker, as the hub sees it."""

    name: str
    pid: int
    connected_at: float
    batches: int = 0
    calls: int = 0


# ---- the rank's side ---------------------------------------------------------------------------


class WorkerHub:
    """Accepts worker connections and applies their calls to ``exporter`` (one thread)."""

    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter
        self._dir = tempfile.mkdtemp(prefix="rlpulse-workers-")  # mode 0700: this user only
        self.address = Address(os.path.join(self._dir, "hub.sock"), secrets.token_bytes(32))
        self._listener = Listener(self.address.path, family="AF_UNIX", authkey=self.address.key)
        self._owner = os.getpid()
        self._lock = threading.Lock()
        self._conns: dict[Connection, Worker] = {}
        self.exited = 0  # workers whose connection has closed
        self._wake_r, self._wake_w = os.pipe()
        self._closed = threading.Event()
        self._threads = [
            threading.Thread(target=self._accept, name="rlpulse-workers-accept", daemon=True),
            threading.Thread(target=self._receive, name="rlpulse-workers", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def __enter__(self) -> WorkerHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def workers(self) -> list[Worker]:
        """The workers connected now."""
        with self._lock:
            return list(self._conns.values())

    def close(self) -> None:
        """Stop accepting and receiving, and remove the socket (only in the process that
        created the hub; a forked child leaves the parent's hub alone)."""
        if os.getpid() != self._owner or self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as poke:
            poke.connect(self.address.path)  # wakes the accept() a closed listener would not
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        for t in self._threads:
            t.join(5)
        self._listener.close()
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
        os.close(self._wake_r)
        os.close(self._wake_w)
        shutil.rmtree(self._dir, ignore_errors=True)
        if os.environ.get(ENV) == str(self.address):
            del os.environ[ENV]

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn = self._listener.accept()
                if not conn.poll(HELLO_TIMEOUT):
                    conn.close()
                    raise TimeoutError(f"no hello within {HELLO_TIMEOUT:g} s")
                kind, info = conn.recv()
                if kind != "hello":
                    raise ValueError(f"expected hello, got {kind!r}")
                worker = Worker(str(info["name"])[:128], int(info["pid"]), time.time())
            except Exception as exc:  # a worker that failed to authenticate or to say hello
                if self._closed.is_set():
                    return
                log.warning("rlpulse: refused a worker connection: %s", exc)
                continue
            with self._lock:
                self._conns[conn] = worker
            os.write(self._wake_w, b"x")
            log.debug("rlpulse: worker %s (pid %d) connected", worker.name, worker.pid)

    def _receive(self) -> None:
        while not self._closed.is_set():
            with self._lock:
                conns = list(self._conns)
            ready = wait([*conns, self._wake_r], timeout=1.0)
            for conn in ready:
                if isinstance(conn, int):
                    os.read(self._wake_r, 4096)
                    continue
                assert isinstance(conn, Connection)
                self._read(conn)

    def _read(self, conn: Connection) -> None:
        try:
            message = conn.recv()
        except Exception:  # EOF: the worker exited or died (also a stream cut mid-message)
            self._gone(conn)
            return
        with self._lock:
            worker = self._conns.get(conn)
        if worker is None:
            return
        kind, payload = message if isinstance(message, tuple) and len(message) == 2 else ("?", 0)
        if kind == "calls" and isinstance(payload, list):
            worker.batches += 1
            worker.calls += len(payload)
            for call in payload:
                self._apply(call)
        elif kind == "sync":
            with contextlib.suppress(OSError):
                conn.send(("synced", payload))
        else:
            self._drop(f"message from worker {worker.name}", message)

    def _gone(self, conn: Connection) -> None:
        with self._lock:
            worker = self._conns.pop(conn, None)
            if worker is not None:
                self.exited += 1
        conn.close()
        if worker is not None:
            log.debug("rlpulse: worker %s (pid %d) disconnected", worker.name, worker.pid)

    def _apply(self, call: Any) -> None:
        try:
            op, args, kwargs = call
            if op not in _OPS or not isinstance(args, tuple) or not isinstance(kwargs, dict):
                raise ValueError(f"not a worker call: {op!r}")
            if op == "log":
                self._log(*args, **kwargs)
            else:
                getattr(self.exporter, op)(*args, **kwargs)
        except Exception as exc:
            self._drop("worker call", exc)

    def _log(self, metrics: Mapping[str, Any]) -> None:
        """Map a worker's dict like ``Exporter.log`` without touching the trainer's step and
        last-log time (the worker's activity is not the training loop's)."""
        exp = self.exporter
        with exp._apply_lock:
            exp._apply(dict(metrics), None, exp.store.values[exp._last_ts.slot])

    def _drop(self, key: str, value: Any) -> None:
        try:
            self.exporter._drop("bad_worker_call", key, value)
        except ValueError as exc:  # strict exporters raise; the hub thread must not die
            log.error("%s", exc)


def serve(exporter: Exporter | None = None, *, env: bool = True) -> WorkerHub:
    """Start a hub for ``exporter`` (default: the process-wide one from ``rlpulse.start``).

    With ``env`` the address goes into ``os.environ[RLPULSE_WORKER_ADDRESS]``, so every worker
    started afterwards finds it. The hub closes at interpreter exit, or with ``close()``.
    """
    exp = exporter or rlpulse.get_exporter()
    if exp is None:
        raise ValueError("rlpulse.workers.serve: no exporter (call rlpulse.start() first)")
    hub = WorkerHub(exp)
    if env:
        os.environ[ENV] = str(hub.address)
    atexit.register(hub.close)
    return hub


# ---- the worker's side -------------------------------------------------------------------------


@dataclass
class WorkerClient:
    """The worker end: the exporter's recording calls, buffered and sent to the hub.

    Never raises into the worker once created: a hub that is gone is logged once and the calls
    are dropped.
    """

    address: Address | None
    name: str = ""
    flush_interval: float = 0.5
    max_batch: int = 1024
    _buf: list[_Call] = field(default_factory=list, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _send_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _conn: Connection | None = field(default=None, init=False, repr=False)
    _pid: int = field(default=0, init=False, repr=False)
    _broken: bool = field(default=False, init=False, repr=False)
    _wake: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _sync_id: int = field(default=0, init=False, repr=False)

    @property
    def connected(self) -> bool:
        """Whether calls reach a hub (False without an address or after the hub went away)."""
        return self.address is not None and not self._broken

    # ---- the recording API (as on Exporter) ----
    def log(self, metrics: Mapping[str, Any]) -> None:
        """A metrics dict, mapped like the trainer's ``log()`` (no step)."""
        self._call("log", (dict(metrics),), {})

    def count(self, name: str, amount: float = 1.0, /, **labels: Any) -> None:
        """Add to a catalog counter of the rank."""
        self._call("count", (name, amount), labels)

    def set(self, name: str, value: Any, /, **labels: Any) -> None:
        """Set a catalog gauge of the rank."""
        self._call("set", (name, value), labels)

    def observe(
        self, name: str, values: Any, /, *, exemplars: Sequence[Any] | None = None, **labels: Any
    ) -> None:
        """Add a batch of values to a catalog histogram of the rank."""
        kwargs = dict(labels, exemplars=None if exemplars is None else list(exemplars))
        self._call("observe", (name, values), kwargs)

    def observe_rollouts(self, **batch: Any) -> None:
        """One batch of rollouts; see ``Exporter.observe_rollouts``."""
        self._call("observe_rollouts", (), batch)

    def observe_episodes(self, returns: Any, lengths: Any, success: Any = None) -> None:
        """Finished episodes (classic RL)."""
        self._call("observe_episodes", (returns, lengths, success), {})

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of the worker into the rank's ``rl_phase_duration_seconds{phase}``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._call("observe", (PHASE, time.perf_counter() - t0), {"phase": name})

    # ---- sending ----
    def flush(self, timeout: float = 10.0) -> bool:
        """Send what is buffered and wait until the hub has applied it; False on timeout or
        when no hub is reachable."""
        if not self._send(self._take()):
            return False
        conn = self._conn
        if conn is None:
            return False
        with self._send_lock:
            self._sync_id += 1
            token = self._sync_id
            try:
                conn.send(("sync", token))
                deadline = time.monotonic() + timeout
                while conn.poll(max(0.0, deadline - time.monotonic())):
                    if conn.recv() == ("synced", token):
                        return True
            except (OSError, EOFError) as exc:
                self._lost(exc)
        return False

    def close(self) -> None:
        """Send what is buffered and disconnect (also at exit)."""
        self._send(self._take())
        conn, self._conn = self._conn, None
        if conn is not None and self._pid == os.getpid():
            conn.close()
        self._wake.set()

    def _call(self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not self.connected:
            return
        if self._pid != os.getpid():
            self._start()
        with self._lock:
            self._buf.append((op, args, kwargs))
            full = len(self._buf) >= self.max_batch
        if full:
            self._send(self._take())

    def _take(self) -> list[_Call]:
        with self._lock:
            batch, self._buf = self._buf, []
        return batch

    def _start(self) -> None:
        """(Re)connect in this process: first use, or first use after a fork."""
        with self._send_lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._buf = []  # a forked child does not resend its parent's calls
            self._conn = None
            self._wake = threading.Event()
            assert self.address is not None
            try:
                conn = Client(self.address.path, family="AF_UNIX", authkey=self.address.key)
                conn.send(("hello", {"name": self.name or _default_name(), "pid": self._pid}))
            except Exception as exc:
                self._lost(exc)
                return
            self._conn = conn
        threading.Thread(target=self._flusher, name="rlpulse-worker-flush", daemon=True).start()
        atexit.register(self.close)  # a plain process (subprocess, spawn) exits through atexit;
        Finalize(self, self.close, exitpriority=10)  # a forked multiprocessing child does not

    def _send(self, batch: list[_Call]) -> bool:
        if not batch:
            return self.connected
        if self._pid != os.getpid():
            self._start()
        with self._send_lock:
            conn = self._conn
            if conn is None:
                return False
            try:
                conn.send(("calls", batch))
            except Exception as exc:
                self._lost(exc)
                return False
        return True

    def _flusher(self) -> None:
        wake = self._wake
        while not wake.wait(self.flush_interval):
            self._send(self._take())

    def _lost(self, exc: BaseException) -> None:
        if not self._broken:
            log.warning("rlpulse: worker cannot reach its rank's exporter (%s): dropping", exc)
        self._broken = True
        self._conn = None
        self._wake.set()


def _default_name() -> str:
    return f"{multiprocessing.current_process().name}-{os.getpid()}"


_client: WorkerClient | None = None
_client_lock = threading.Lock()


def worker_client(
    address: Address | str | None = None, *, name: str = "", flush_interval: float = 0.5
) -> WorkerClient:
    """A client reporting to a hub.

    Without ``address``: the process-wide client for ``RLPULSE_WORKER_ADDRESS``, or one that
    drops every call when the variable is unset (code can call it whether or not a hub runs).
    """
    global _client
    if address is not None:
        given = Address.parse(address) if isinstance(address, str) else address
        return WorkerClient(given, name, flush_interval)
    with _client_lock:
        raw = os.environ.get(ENV)
        found = Address.parse(raw) if raw else None
        if _client is None or _client.address != found:
            _client = WorkerClient(found, name, flush_interval)
        return _client
