"""Worker subprocesses (rollout workers, data loaders, reward servers) reporting through the
exporter of the rank that owns them.

In the rank's process, after ``rlpulse.start()``::

    hub = rlpulse.runtime.workers.serve()          # or serve(exporter); sets RLPULSE_WORKER_ADDRESS

In a worker (``multiprocessing`` with fork, spawn or forkserver, a torch ``DataLoader`` worker, a
``subprocess`` — anything that inherits the environment)::

    w = rlpulse.runtime.workers.worker_client()    # the process-wide client, connected on first use
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

No peer can stall another: a connection must authenticate and say hello within ``HELLO_TIMEOUT``
(the accept loop does not wait for it), each worker is read by its own thread (a partial frame
holds only its sender), and a worker only appends to a bounded buffer that a background thread
sends (a frozen rank fills the buffer; later calls are dropped, never blocked on). A call that
cannot be pickled is counted as dropped by the rank (``bad_worker_call``); the worker goes on.
Clients and recorders survive ``fork()`` from any thread: their locks are renewed in the child.

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
import struct
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import (
    Connection,
    answer_challenge,
    deliver_challenge,
)
from multiprocessing.reduction import ForkingPickler
from multiprocessing.util import Finalize
from typing import TYPE_CHECKING, Any, Unpack

import rlpulse
from rlpulse import catalog
from rlpulse.runtime import forks, recording, tempdirs
from rlpulse.runtime.coerce import plain_snapshot
from rlpulse.runtime.exporter import Exporter
from rlpulse.runtime.recording import RolloutBatch

__all__ = ["ENV", "Address", "WorkerClient", "WorkerHub", "serve", "worker_client"]

log = logging.getLogger("rlpulse")

ENV = "RLPULSE_WORKER_ADDRESS"
PHASE = catalog.get("rl_phase_duration_seconds").name
HELLO_TIMEOUT = 5.0  # seconds for a connection to authenticate and say hello, in total
MAX_PENDING = 16  # connections authenticating at once; more are closed at once
MAX_BUFFERED = 65536  # calls a worker holds for a hub that does not read; later ones are dropped
ACCEPT_POLL = 0.2  # seconds between the accept loop's deadline checks
_Call = tuple[str, tuple[Any, ...], dict[str, Any]]
_DROPPED = "dropped"  # a call the worker could not send, counted by the hub: (reason, count)


def _shutdown(fd: int) -> None:
    """Shut a socket down by descriptor: a thread blocked reading it sees EOF."""
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=fd)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.detach()


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
        self._dir = tempdirs.private_dir("workers")  # mode 0700: this user only
        self.address = Address(os.path.join(self._dir, "hub.sock"), secrets.token_bytes(32))
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.bind(self.address.path)
        self._sock.listen(64)
        self._sock.settimeout(ACCEPT_POLL)
        self._owner = os.getpid()
        self._lock = threading.Lock()
        self._conns: dict[Connection, Worker] = {}
        self._pending: dict[socket.socket, float] = {}  # authenticating -> deadline
        self.exited = 0  # workers whose connection has closed
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._accept, name="rlpulse-workers-accept", daemon=True
        )
        self._thread.start()

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
        self._thread.join(5)
        self._sock.close()
        with self._lock:
            for sock in self._pending:
                _shutdown(sock.fileno())
            for conn in self._conns:
                _shutdown(conn.fileno())  # its reader thread sees EOF and closes it
        shutil.rmtree(self._dir, ignore_errors=True)
        if os.environ.get(ENV) == str(self.address):
            del os.environ[ENV]

    def _accept(self) -> None:
        """Take connections; each authenticates in its own thread against a deadline."""
        while not self._closed.is_set():
            self._expire()
            try:
                sock, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._closed.is_set():
                    return
                log.debug("rlpulse: worker accept failed: %s", exc)
                time.sleep(ACCEPT_POLL)  # out of descriptors: wait, do not spin
                continue
            sock.setblocking(True)
            with self._lock:
                crowded = len(self._pending) >= MAX_PENDING
                if not crowded:
                    self._pending[sock] = time.monotonic() + HELLO_TIMEOUT
            if crowded:
                sock.close()
                continue
            threading.Thread(
                target=self._admit, args=(sock,), name="rlpulse-workers-hello", daemon=True
            ).start()

    def _expire(self) -> None:
        """Cut connections still authenticating past their deadline (their thread then ends)."""
        now = time.monotonic()
        with self._lock:
            late = [sock for sock, deadline in self._pending.items() if deadline <= now]
        for sock in late:
            _shutdown(sock.fileno())

    def _admit(self, sock: socket.socket) -> None:
        """Authenticate one connection and read its hello; then serve it."""
        conn = Connection(os.dup(sock.fileno()))
        try:
            deliver_challenge(conn, self.address.key)
            answer_challenge(conn, self.address.key)
            if not conn.poll(HELLO_TIMEOUT):
                raise TimeoutError(f"no hello within {HELLO_TIMEOUT:g} s")
            kind, info = conn.recv()
            if kind != "hello":
                raise ValueError(f"expected hello, got {kind!r}")
            worker = Worker(str(info["name"])[:128], int(info["pid"]), time.time())
        except Exception as exc:  # failed to authenticate or to say hello in time
            conn.close()
            if not self._closed.is_set():
                log.warning("rlpulse: refused a worker connection: %s", exc)
            return
        finally:
            with self._lock:
                self._pending.pop(sock, None)
            sock.close()
        with self._lock:
            if self._closed.is_set():
                conn.close()
                return
            self._conns[conn] = worker
        log.debug("rlpulse: worker %s (pid %d) connected", worker.name, worker.pid)
        self._serve(conn, worker)

    def _serve(self, conn: Connection, worker: Worker) -> None:
        """Read one worker until it goes away (a partial frame holds only this thread)."""
        while True:
            try:
                data = conn.recv_bytes()
            except Exception:  # EOF: the worker exited or died, or the hub closed
                self._gone(conn)
                return
            try:
                message = ForkingPickler.loads(data)
            except Exception as exc:
                self._drop(f"message from worker {worker.name}", exc)
                continue
            self._handle(conn, worker, message)

    def _handle(self, conn: Connection, worker: Worker, message: Any) -> None:
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
            if op == _DROPPED:
                reason, count = args
                for _ in range(min(int(count), MAX_BUFFERED)):
                    self._drop(f"worker call ({reason})", reason)
                return
            well_formed = isinstance(args, tuple) and isinstance(kwargs, dict)
            if op not in recording.SENT or not well_formed:
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
        self.exporter.ingest.apply_unstamped(metrics)

    def _drop(self, key: str, value: Any) -> None:
        try:
            self.exporter.drops("bad_worker_call", key, value)
        except ValueError as exc:  # strict exporters raise; the hub thread must not die
            log.error("%s", exc)


def serve(exporter: Exporter | None = None, *, env: bool = True) -> WorkerHub:
    """Start a hub for ``exporter`` (default: the process-wide one from ``rlpulse.start``).

    With ``env`` the address goes into ``os.environ[RLPULSE_WORKER_ADDRESS]``, so every worker
    started afterwards finds it. The hub closes at interpreter exit, or with ``close()``.
    """
    exp = exporter or rlpulse.get_exporter()
    if exp is None:
        raise ValueError("rlpulse.runtime.workers.serve: no exporter (call rlpulse.start() first)")
    hub = WorkerHub(exp)
    if env:
        os.environ[ENV] = str(hub.address)
    atexit.register(hub.close)
    return hub


# ---- the worker's side -------------------------------------------------------------------------


@dataclass(eq=False)  # identity: kept in a WeakSet for fork handling
class WorkerClient:
    """The worker end: the exporter's recording calls, buffered and sent to the hub.

    Never raises into the worker once created, and never blocks it: calls go into a buffer
    (at most ``MAX_BUFFERED``) that a background thread sends; that thread also connects (each
    attempt within ``HELLO_TIMEOUT``), so a frozen or crowded hub never holds the caller. A hub
    that cannot be reached is logged once per outage and tried again with backoff (from
    ``RECONNECT_MIN`` to ``RECONNECT_MAX`` seconds); calls past the buffer are counted.
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
    _down: bool = field(default=False, init=False, repr=False)  # said once per outage
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _kick: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _syncs: list[_Sync] = field(default_factory=list, init=False, repr=False)
    _overflow: int = field(default=0, init=False, repr=False)
    _sync_id: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        _clients.add(self)

    @property
    def connected(self) -> bool:
        """Whether calls reach a hub now (False without an address, before the first connect
        and while the hub cannot be reached)."""
        return self.address is not None and self._conn is not None

    # ---- the recording API (as on Exporter) ----
    def log(self, metrics: Mapping[str, Any]) -> None:
        """A metrics dict, mapped like the trainer's ``log()`` (no step); its values are taken
        as plain numbers now (no tensor waits in the buffer)."""
        try:
            self._call("log", (plain_snapshot(metrics),), {})
        except Exception:  # not a mapping: counted by the hub
            self._call(_DROPPED, ("bad_log", 1), {})

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

    def observe_rollouts(self, **batch: Unpack[RolloutBatch]) -> None:
        """One batch of rollouts; see ``Exporter.observe_rollouts``."""
        self._call("observe_rollouts", (), dict(batch))

    def observe_episodes(self, returns: Any, lengths: Any, success: Any = None) -> None:
        """Finished episodes (classic RL)."""
        self._call("observe_episodes", (returns, lengths, success), {})

    def observe_features(
        self, kind: str, /, *, categorical: Iterable[str] = (), **features: Any
    ) -> None:
        """Samples of drift features; see ``Exporter.observe_features``."""
        self._call("observe_features", (kind,), dict(features, categorical=tuple(categorical)))

    def observe_transitions(
        self, before: Any, actions: Any, after: Any, *, discrete: bool = False
    ) -> None:
        """Sampled environment transitions; see ``Exporter.observe_transitions``."""
        self._call("observe_transitions", (before, actions, after), {"discrete": discrete})

    def observe_prompts(
        self, *, lengths: Any = None, sources: Any = None, difficulty: Any = None
    ) -> None:
        """A batch of prompts as drift inputs; see ``Exporter.observe_prompts``."""
        self._call("observe_prompts", (), {"lengths": lengths, "sources": sources,
                                           "difficulty": difficulty})  # fmt: skip

    def observe_versions(self, **versions: Any) -> None:
        """The versions of the run's parts now; see ``Exporter.observe_versions``."""
        self._call("observe_versions", (), versions)

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
        if self.address is None:
            return False
        if self._pid != os.getpid():
            self._start()
        sync = _Sync(time.monotonic() + timeout)
        with self._lock:
            self._syncs.append(sync)
        self._kick.set()
        return sync.done.wait(timeout) and sync.ok

    def close(self) -> None:
        """Send what is buffered and disconnect (also at exit)."""
        if self._pid == os.getpid() and self.address is not None:
            self.flush(CLOSE_TIMEOUT)  # connects first if the flusher has not yet
        self._stop.set()
        self._kick.set()
        conn, self._conn = self._conn, None
        if conn is not None and self._pid == os.getpid():
            conn.close()

    def _call(self, op: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.address is None:
            return
        if self._pid != os.getpid():
            self._start()
        with self._lock:
            if len(self._buf) >= MAX_BUFFERED:  # the hub does not read (a frozen rank)
                self._overflow += 1
                return
            self._buf.append((op, args, kwargs))
            full = len(self._buf) >= self.max_batch
        if full:
            self._kick.set()

    def _take(self) -> list[_Call]:
        with self._lock:
            batch, self._buf = self._buf, []
            if self._overflow:
                batch.append((_DROPPED, ("worker_buffer_full", self._overflow), {}))
                self._overflow = 0
        return batch

    def _start(self) -> None:
        """Start sending in this process (first use, or first use after a fork): the flusher
        thread connects, never the caller's."""
        with self._send_lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._buf = []  # a forked child does not resend its parent's calls
            self._syncs = []
            self._conn = None
            self._stop = threading.Event()
        threading.Thread(target=self._flusher, name="rlpulse-worker-flush", daemon=True).start()
        atexit.register(self.close)  # a plain process (subprocess, spawn) exits through atexit;
        Finalize(self, self.close, exitpriority=10)  # a forked multiprocessing child does not

    def _send(self, batch: list[_Call]) -> bool:
        """Send a batch (from the flusher thread); a call that cannot be pickled is replaced
        by a drop the hub counts."""
        if not batch:
            return self.connected
        with self._send_lock:
            conn = self._conn
            if conn is None:
                return False
            try:
                conn.send_bytes(_pickled(batch))
            except Exception as exc:
                self._lost(exc)
                return False
        return True

    def _connect(self) -> bool:
        """Connect, authenticate and say hello within ``HELLO_TIMEOUT`` (flusher thread)."""
        assert self.address is not None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn: Connection | None = None
        try:
            sock.settimeout(HELLO_TIMEOUT)
            sock.connect(self.address.path)
            sock.settimeout(None)  # blocking, bounded by kernel timeouts during the handshake
            _io_timeout(sock, HELLO_TIMEOUT)
            conn = Connection(sock.detach())
            answer_challenge(conn, self.address.key)
            deliver_challenge(conn, self.address.key)
            conn.send(("hello", {"name": self.name or _default_name(), "pid": self._pid}))
            _io_timeout(socket.socket(fileno=os.dup(conn.fileno())), 0.0, close=True)
        except Exception as exc:
            sock.close()
            if conn is not None:
                conn.close()
            self._lost(exc)
            return False
        with self._send_lock:
            self._conn = conn
        if self._down:
            self._down = False
            log.warning("rlpulse: worker reaches its rank's exporter again")
        return True

    def _flusher(self) -> None:
        stop, kick = self._stop, self._kick
        backoff = RECONNECT_MIN
        while not stop.is_set():
            if self._conn is None:
                if not self._connect():
                    with self._lock:
                        syncs, self._syncs = self._syncs, []
                    for sync in syncs:  # nothing reaches the hub now
                        sync.done.set()
                    kick.wait(backoff)  # a flush() tries again at once
                    kick.clear()
                    backoff = min(2 * backoff, RECONNECT_MAX)
                    continue
                backoff = RECONNECT_MIN
            kick.wait(self.flush_interval)
            kick.clear()
            with self._lock:  # before the batch: a sync follows the calls made before it
                syncs, self._syncs = self._syncs, []
            self._send(self._take())
            for sync in syncs:
                self._sync(sync)

    def _sync(self, sync: _Sync) -> None:
        """Ask the hub to confirm it applied everything sent so far (flusher thread)."""
        conn = self._conn
        self._sync_id += 1
        token = self._sync_id
        try:
            if conn is not None:
                conn.send(("sync", token))
                while conn.poll(max(0.0, sync.deadline - time.monotonic())):
                    if conn.recv() == ("synced", token):
                        sync.ok = True
                        break
        except (OSError, EOFError) as exc:
            self._lost(exc)
        sync.done.set()

    def _lost(self, exc: BaseException) -> None:
        if not self._down:
            log.warning(
                "rlpulse: worker cannot reach its rank's exporter (%s): calls are held (at most "
                "%d) while it tries again",
                exc,
                MAX_BUFFERED,
            )
        self._down = True
        self._conn = None

    def _after_fork_in_child(self) -> None:
        """Fresh locks: a parent thread may have held one at the fork (it never releases it
        here). ``_start`` then reconnects on the child's first call."""
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._kick = threading.Event()
        self._stop = threading.Event()


if TYPE_CHECKING:  # mypy holds the worker's API to the recording protocol
    _api: type[recording.Recording] = WorkerClient


@dataclass
class _Sync:
    """A ``flush()`` waiting for the hub's confirmation."""

    deadline: float
    ok: bool = False
    done: threading.Event = field(default_factory=threading.Event)


def _io_timeout(sock: socket.socket, seconds: float, close: bool = False) -> None:
    """Kernel send/receive timeouts on a blocking socket (0: none)."""
    whole = int(seconds)
    value = struct.pack("ll", whole, int((seconds - whole) * 1e6))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
    finally:
        if close:
            sock.close()


def _pickled(batch: list[_Call]) -> Any:
    """The wire form of a batch; calls that cannot be pickled become counted drops."""
    try:
        return ForkingPickler.dumps(("calls", batch))
    except Exception:
        kept = [c if _picklable(c) else (_DROPPED, ("unpicklable", 1), {}) for c in batch]
        return ForkingPickler.dumps(("calls", kept))


def _picklable(call: _Call) -> bool:
    try:
        ForkingPickler.dumps(call)
    except Exception:
        return False
    return True


def _default_name() -> str:
    return f"{multiprocessing.current_process().name}-{os.getpid()}"


_client: WorkerClient | None = None
_clients = forks.Live(WorkerClient._after_fork_in_child)  # its lock guards _client
RECONNECT_MIN = 0.5  # seconds before a worker tries its hub again, doubling up to RECONNECT_MAX
RECONNECT_MAX = 30.0
CLOSE_TIMEOUT = 5.0  # seconds a closing worker waits for the hub to take what is buffered


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
    with _clients.lock:
        raw = os.environ.get(ENV)
        found = Address.parse(raw) if raw else None
        if _client is None or _client.address != found:
            _client = WorkerClient(found, name, flush_interval)
        return _client
