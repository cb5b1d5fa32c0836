"""The per-run SQLite file: schema, and the writer thread that owns the only write connection.

The trainer never touches SQLite: ``Writer.submit`` puts a batch on a bounded queue
(``put_nowait``; a full queue drops the batch and counts it) and the writer thread applies it
in one transaction, then evicts the oldest rows until the run is within ``max_rows`` and
``max_bytes``. Row and byte totals live in the file (kept by triggers), so every process
writing the same run sees the same totals. A full disk, a page limit, a locked file or any other
SQLite error drops that batch, is counted by reason, and the next batch tries again.

Disk space: a batch that would leave less than ``min_free_bytes`` free on the filesystem is
dropped (``disk_full``) before it is written, so the store never takes the trainer's last bytes;
the WAL not yet checkpointed counts as taken (a checkpoint still copies it into the file).
A small reserve file next to the store is given back when the disk fills anyway, so the eviction
(whose deletes need WAL space) can run; it evicts in small transactions and returns the freed
pages to the filesystem. After evicting, freed pages go back to the filesystem (incremental
vacuum) and a WAL past its limit is checkpointed and truncated, so several writers on one file
stay near ``max_bytes``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import math
import os
import queue
import shutil
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlpulse.rollouts.records import to_json, valid_text

log = logging.getLogger("rlpulse.rollouts")

SCHEMA_VERSION = "1"
SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    id INTEGER PRIMARY KEY,
    session INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    rollout_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    group_id TEXT,
    prompt TEXT,
    response TEXT,
    reward REAL,
    components TEXT NOT NULL,
    advantage REAL,
    length REAL,
    truncated INTEGER,
    verdict TEXT,
    error TEXT,
    tool_calls TEXT,
    metadata TEXT,
    nonfinite TEXT NOT NULL,
    kept_for TEXT NOT NULL,
    recorded_at REAL NOT NULL,
    nbytes INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS rollouts_session_seq ON rollouts(session, seq);
CREATE INDEX IF NOT EXISTS rollouts_rollout_id ON rollouts(rollout_id);
CREATE INDEX IF NOT EXISTS rollouts_step_reward ON rollouts(step, reward);
CREATE INDEX IF NOT EXISTS rollouts_reward_step ON rollouts(reward, step);
CREATE INDEX IF NOT EXISTS rollouts_length_step ON rollouts(length, step);
CREATE INDEX IF NOT EXISTS rollouts_group ON rollouts(group_id);
CREATE TABLE IF NOT EXISTS run (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS totals (
    one INTEGER PRIMARY KEY CHECK (one = 1), rows INTEGER NOT NULL, bytes INTEGER NOT NULL
);
INSERT OR IGNORE INTO totals VALUES (1, 0, 0);
CREATE TRIGGER IF NOT EXISTS rollouts_added AFTER INSERT ON rollouts BEGIN
    UPDATE totals SET rows = rows + 1, bytes = bytes + NEW.nbytes;
END;
CREATE TRIGGER IF NOT EXISTS rollouts_removed AFTER DELETE ON rollouts BEGIN
    UPDATE totals SET rows = rows - 1, bytes = bytes - OLD.nbytes;
END;
"""
FIELDS = (  # a stored rollout as it is read back (rlpulse.rollouts.query), in its order
    "rollout_id",
    "step",
    "rank",
    "group_id",
    "reward",
    "components",
    "advantage",
    "length",
    "truncated",
    "verdict",
    "error",
    "prompt",
    "response",
    "tool_calls",
    "metadata",
    "nonfinite",
    "kept_for",
    "recorded_at",
)
COLUMNS = ("session", "seq", *FIELDS, "nbytes")  # what ``encode`` gives, in its order
_INSERT = (
    f"INSERT OR IGNORE INTO rollouts ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(COLUMNS))})"
)
COALESCE = 64  # most queued batches written in one transaction
WAL_BYTES = 4 * 2**20  # most WAL kept between checkpoints (less for small stores)
MAX_JSON = 1 << 20  # characters of tool calls / metadata kept from a redaction hook
RESERVE_BYTES = 512 * 2**10  # the reserve file given back on a full disk: room for the WAL
HEADROOM = 64 * 2**10  # bytes a write may take beyond its rows (pages, indexes)
EVICT_CHUNK = 16  # rows deleted per transaction while making room on a full disk
ROW_OVERHEAD = 160  # bytes counted per row on top of its text (numbers, keys, index entries)
_TEXT_FIELDS = ("rollout_id", "group_id", "prompt", "response", "verdict", "error")


def _finite_or_none(value: float | None) -> float | None:
    """SQLite stores NaN as NULL; keep ±Inf, turn NaN into NULL explicitly."""
    return None if value is None or math.isnan(value) else value


def encode(row: Mapping[str, Any], session: int, seq: int, rank: int) -> tuple[Any, ...]:
    """The INSERT parameters of one record (see ``records.Columns.row``), ``COLUMNS``' order."""
    comps = row.get("components") or {}
    nonfinite = [k for k in ("reward", "advantage") if _nonfinite(row.get(k))]
    nonfinite += [f"components.{k}" for k, v in comps.items() if _nonfinite(v)]
    comps_json = json.dumps(
        {str(k): (v if math.isfinite(v) else repr(v)) for k, v in comps.items()},
        ensure_ascii=False,
    )
    texts = [row.get(k) or "" for k in (*_TEXT_FIELDS, "tool_calls", "metadata")]
    nbytes = ROW_OVERHEAD + len(comps_json) + sum(map(text_bytes, texts))
    truncated = row.get("truncated")
    return (
        session,
        seq,
        str(row.get("rollout_id") or seq),
        int(row.get("step", -1)),
        rank,
        row.get("group_id"),
        _finite_or_none(row.get("reward")),
        comps_json,
        _finite_or_none(row.get("advantage")),
        _finite_or_none(row.get("length")),
        None if truncated is None else int(bool(truncated)),
        row.get("verdict"),
        row.get("error"),
        row.get("prompt"),
        row.get("response"),
        row.get("tool_calls"),
        row.get("metadata"),
        ",".join(nonfinite),
        ",".join(row.get("kept_for", ())),
        time.time(),
        nbytes,
    )


def text_bytes(text: str) -> int:
    """UTF-8 size of ``text`` (cheap for ASCII)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "replace"))


def _nonfinite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def connect(path: Path, timeout_s: float, wal_bytes: int) -> sqlite3.Connection:
    """A write connection to a run file, creating the file and schema if needed; the WAL is
    checkpointed (and cut back) at about ``wal_bytes``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes effect on a new file
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        (page,) = conn.execute("PRAGMA page_size").fetchone()
        conn.execute(f"PRAGMA wal_autocheckpoint={max(int(wal_bytes) // page, 16)}")
        conn.execute(f"PRAGMA journal_size_limit={int(wal_bytes)}")
        conn.executescript(f"BEGIN IMMEDIATE;{SCHEMA}COMMIT;")
    except BaseException:
        conn.close()
        raise
    return conn


def file_bytes(path: Path) -> int:
    """Bytes on disk of a run file with its WAL."""
    total = 0
    for p in (path, path.with_name(path.name + "-wal")):
        with contextlib.suppress(OSError):
            total += p.stat().st_size
    return total


class TurnTimeout(sqlite3.OperationalError):
    """Another writer of the run kept its turn past the lock timeout (counted ``locked``)."""


def error_reason(exc: BaseException) -> str:
    """The drop reason a storage exception is counted under."""
    name = getattr(exc, "sqlite_errorname", "")
    if name.startswith("SQLITE_FULL") or (isinstance(exc, OSError) and exc.errno == errno.ENOSPC):
        return "disk_full"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or isinstance(exc, TurnTimeout):
        return "locked"
    return "store_error"


@dataclass
class Batch:
    """One record() call's worth of changes for the writer; ``size`` approximates its memory."""

    rows: list[dict[str, Any]]
    seqs: list[int]
    evict: list[int]
    size: int = 0

    def __post_init__(self) -> None:
        if not self.size:
            keys = ("prompt", "response", "tool_calls", "metadata")
            self.size = sum(
                ROW_OVERHEAD + sum(len(r.get(k) or "") for k in keys) for r in self.rows
            )


@dataclass
class Counters:
    """Thread-safe counters shared by the recorder and its writer."""

    values: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: str, amount: float = 1.0) -> None:
        if amount:
            with self.lock:
                self.values[key] = self.values.get(key, 0.0) + amount

    def set(self, key: str, value: float) -> None:
        with self.lock:
            self.values[key] = value

    def snapshot(self) -> dict[str, float]:
        with self.lock:
            return dict(self.values)


_writers: weakref.WeakSet[Writer] = weakref.WeakSet()
_held_for_fork: list[Writer] = []
FORK_WAIT = 5.0  # seconds fork() waits for a writer to leave SQLite


def _before_fork() -> None:
    """Hold fork() until no writer thread is inside SQLite: a child forked while one is would
    inherit SQLite's internal mutexes locked, and its own writer would hang on them."""
    for writer in list(_writers):
        if writer.busy.acquire(timeout=FORK_WAIT):
            _held_for_fork.append(writer)


def _after_fork_in_parent() -> None:
    while _held_for_fork:
        _held_for_fork.pop().busy.release()


def _after_fork_in_child() -> None:
    _held_for_fork.clear()  # the parent's writers have no thread here; the child's recorders
    _writers.clear()  # start writers of their own (registered after this hook runs)


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


class Writer:
    """The thread that owns a run file's write connection."""

    def __init__(
        self,
        path: Path,
        *,
        run_id: str,
        session: int,
        rank: int,
        max_rows: int,
        max_bytes: int,
        queue_size: int,
        queue_bytes: int,
        timeout_s: float,
        page_limit: int | None,
        min_free_bytes: int,
        redact: Callable[[dict[str, Any]], dict[str, Any] | None] | None,
        counters: Counters,
    ) -> None:
        self.path = path
        self.run_id = run_id
        self.session = session
        self.rank = rank
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.page_limit = page_limit
        self.min_free_bytes = min_free_bytes
        self.wal_bytes = min(WAL_BYTES, max_bytes // 4)
        self.reserve = path.with_name(path.name + "-reserve")
        self.reserve_bytes = RESERVE_BYTES
        self.redact = redact
        self.counters = counters
        self.queue: queue.Queue[Batch | threading.Event | None] = queue.Queue(queue_size)
        self.queue_bytes = queue_bytes
        self._queued = 0  # Batch.size of what waits in the queue
        self._queued_lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._lock_fd: int | None = None  # the "-lock" file the run's writers take turns on
        self._warned: set[str] = set()
        self.busy = threading.Lock()  # held while the thread is inside SQLite; see _before_fork
        _writers.add(self)
        self._thread = threading.Thread(target=self._run, name="rlpulse-rollouts", daemon=True)
        self._thread.start()

    # ---- training-thread side ----------------------------------------------------------------
    def submit(self, batch: Batch) -> bool:
        """Queue a batch without blocking; False (and counted) when the queue is full, by
        count or by ``queue_bytes``."""
        with self._queued_lock:
            fits = self._queued + batch.size <= self.queue_bytes
            if fits:
                try:
                    self.queue.put_nowait(batch)
                    self._queued += batch.size
                except queue.Full:
                    fits = False
        if not fits:
            self.counters.add("dropped:queue_full", len(batch.rows))
            self._warn("queue_full", "writer queue full; rollouts dropped (store too slow?)")
        return fits

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far is written (or dropped)."""
        if not self._thread.is_alive():
            return False
        done = threading.Event()
        self.queue.put(done, timeout=timeout)
        return done.wait(timeout)

    def close(self, timeout: float | None = 10.0) -> None:
        """Write what is queued, then stop the thread and close the file."""
        if self._thread.is_alive():
            self.queue.put(None, timeout=timeout)
            self._thread.join(timeout)

    # ---- writer thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                batches, markers, stop = self._drain()
                if batches:
                    with self.busy:
                        self._write(batches)
                for done in markers:
                    done.set()
                if stop:
                    return
        finally:
            with self.busy:
                if self._conn is not None:
                    with contextlib.suppress(sqlite3.Error):
                        self._conn.close()
            if self._lock_fd is not None:
                os.close(self._lock_fd)

    def _drain(self) -> tuple[list[Batch], list[threading.Event], bool]:
        """Wait for work, then take everything queued (up to ``COALESCE`` batches or
        ``wal_bytes`` of text): batches
        written together in one transaction, flush markers, and whether to stop."""
        batches: list[Batch] = []
        markers: list[threading.Event] = []
        item = self.queue.get()
        while True:
            if item is None:
                return batches, markers, True
            if isinstance(item, threading.Event):
                markers.append(item)
            else:
                batches.append(item)
                with self._queued_lock:
                    self._queued -= item.size
            if len(batches) >= COALESCE or sum(b.size for b in batches) >= self.wal_bytes:
                return batches, markers, False  # one transaction stays within the WAL limit
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return batches, markers, False

    def _warn(self, reason: str, message: str) -> None:
        if reason not in self._warned:
            self._warned.add(reason)
            log.warning("rlpulse rollouts (%s): %s (logged once)", self.path, message)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = connect(self.path, self.timeout_s, self.wal_bytes)
            if self.page_limit is not None:
                conn.execute(f"PRAGMA max_page_count={int(self.page_limit)}")
            conn.execute(
                "INSERT OR IGNORE INTO run VALUES ('run_id', ?), ('schema', ?)",
                (self.run_id, SCHEMA_VERSION),
            )
            self._conn = conn
            self._take_reserve()
        return self._conn

    def _free_bytes(self) -> int:
        try:
            return shutil.disk_usage(self.path.parent).free
        except OSError:
            return self.min_free_bytes + (1 << 40)  # unknown: do not refuse on that account

    def _take_reserve(self) -> None:
        """Hold ``reserve_bytes`` of real blocks in the reserve file (if there is room)."""
        if self.reserve.exists() or self._free_bytes() < self.min_free_bytes + self.reserve_bytes:
            return
        try:
            fd = os.open(self.reserve, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.reserve_bytes)
            finally:
                os.close(fd)
        except OSError:
            with contextlib.suppress(OSError):
                self.reserve.unlink()

    def _shrink(self, conn: sqlite3.Connection) -> None:
        """Give freed pages back to the filesystem; checkpoint and truncate a WAL past its
        limit or holding much of the room left (so it is not counted against new batches)."""
        conn.executescript("PRAGMA incremental_vacuum;")  # execute() would free one page
        wal = self._wal_bytes()
        if wal > self.wal_bytes or self._free_bytes() - wal < self.min_free_bytes + 2 * wal:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def _prepare(self, batch: Batch) -> list[tuple[Any, ...]]:
        params = []
        for row, seq in zip(batch.rows, batch.seqs, strict=True):
            if self.redact is not None:
                redacted = self._redacted(row)
                if redacted is None:
                    continue
                row = redacted
            params.append(encode(row, self.session, seq, self.rank))
        return params

    def _redacted(self, row: dict[str, Any]) -> dict[str, Any] | None:
        assert self.redact is not None
        view = dict(row)
        for key in ("tool_calls", "metadata"):
            if view.get(key) is not None:
                view[key] = json.loads(view[key])
        try:
            out = self.redact(view)
        except Exception as exc:
            self.counters.add("dropped:redact_error")
            self._warn("redact_error", f"redaction hook raised {exc!r}; rollout not stored")
            return None
        if out is None:
            self.counters.add("dropped:redacted")
            return None
        out = dict(out)
        for key in _TEXT_FIELDS:
            if out.get(key) is not None:
                out[key] = valid_text(str(out[key]))
        for key in ("tool_calls", "metadata"):
            if out.get(key) is not None:
                out[key] = to_json(out[key], MAX_JSON)
        return out

    def _write(self, batches: list[Batch]) -> None:
        n_rows = sum(len(b.rows) for b in batches)
        try:
            conn = self._connection()
            fit = self._fitting(batches)
            prepared = [(b.evict, self._prepare(b)) for b in batches[:fit]]
            n_rows = sum(len(p) for _, p in prepared)
            if prepared:
                with self._turn():
                    self._commit(conn, prepared)
            if fit < len(batches):
                n_rows = sum(len(b.rows) for b in batches[fit:])
                raise OSError(errno.ENOSPC, f"under {self.min_free_bytes} bytes free")
        except Exception as exc:  # the writer thread must outlive any bad batch
            reason = error_reason(exc)
            self.counters.add(f"dropped:{reason}", n_rows)
            self._warn(reason, f"{n_rows} rollouts not stored: {exc}")
            if reason == "disk_full":
                self._make_room()
            elif reason == "store_error":
                self._reset()
        self._refresh_gauges()

    def _wal_bytes(self) -> int:
        try:
            return os.path.getsize(f"{self.path}-wal")
        except OSError:
            return 0

    def _fitting(self, batches: list[Batch]) -> int:
        """How many of ``batches`` (in order) fit while ``min_free_bytes`` stay free: each
        takes about three times its text (the rows, their WAL copy, pages), and the WAL
        not yet copied into the file counts as taken (a checkpoint still adds it)."""
        room = self._free_bytes() - self._wal_bytes() - self.min_free_bytes - HEADROOM
        for i, batch in enumerate(batches):
            room -= 3 * batch.size
            if room < 0:
                return i
        return len(batches)

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """This writer's turn among every process writing the file (an flock on ``-lock``):
        while it holds it no other writer is mid-transaction, so a WAL checkpoint completes
        and the WAL can be truncated; without it, writers take turns too fast for one."""
        if self._lock_fd is None:
            self._lock_fd = os.open(f"{self.path}-lock", os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TurnTimeout(f"another writer held {self.path}-lock") from None
                time.sleep(0.005)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _commit(self, conn: sqlite3.Connection, prepared: list[tuple[list[int], Any]]) -> None:
        """Write the batches and evict past the bounds in one transaction, then shrink."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            evicted = written = 0
            for evict, params in prepared:  # in order: a batch may evict an earlier one's row
                evicted += self._evict_seqs(conn, evict)
                written += max(conn.executemany(_INSERT, params).rowcount, 0)
            by_rows, by_bytes = self._enforce_bounds(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
        self.counters.add("recorded", written)
        self.counters.add("evicted:resampled", evicted)
        self.counters.add("evicted:rows", by_rows)
        self.counters.add("evicted:bytes", by_bytes)
        try:  # the rows are stored: a failure here is not theirs to count
            self._shrink(conn)
        except sqlite3.Error as exc:
            self._warn("shrink_failed", f"could not return space to the filesystem: {exc}")

    def _evict_seqs(self, conn: sqlite3.Connection, seqs: Iterable[int]) -> int:
        cur = conn.executemany(
            "DELETE FROM rollouts WHERE session = ? AND seq = ?",
            [(self.session, s) for s in seqs],
        )
        return max(cur.rowcount, 0)

    def _enforce_bounds(self, conn: sqlite3.Connection) -> tuple[int, int]:
        """Delete the oldest rows past ``max_rows``/``max_bytes``: (by rows, by bytes)."""
        rows, nbytes = conn.execute("SELECT rows, bytes FROM totals").fetchone()
        over_rows = max(rows - self.max_rows, 0)
        if over_rows == 0 and nbytes <= self.max_bytes:
            return 0, 0
        cut, freed, seen = None, 0, 0
        cur = conn.execute("SELECT id, nbytes FROM rollouts ORDER BY id")
        for rowid, size in cur:
            if seen >= over_rows and nbytes - freed <= self.max_bytes:
                break
            cut, freed, seen = rowid, freed + size, seen + 1
        cur.close()
        if cut is None:
            return 0, 0
        conn.execute("DELETE FROM rollouts WHERE id <= ?", (cut,))
        return over_rows, seen - over_rows

    def _make_room(self) -> None:
        """After a full disk: give back the reserve file (the deletes need WAL space), evict
        the oldest quarter in small transactions, return the pages to the filesystem, then
        take the reserve again if there is room."""
        conn = self._conn
        if conn is None:
            return
        with contextlib.suppress(OSError):
            self.reserve.unlink()
        done = 0
        try:
            with self._turn():
                (rows,) = conn.execute("SELECT rows FROM totals").fetchone()
                target = max(rows // 4, 1)
                while done < target:
                    n = conn.execute(  # autocommit: one transaction per chunk
                        "DELETE FROM rollouts WHERE id IN "
                        "(SELECT id FROM rollouts ORDER BY id LIMIT ?)",
                        (min(EVICT_CHUNK, target - done),),
                    ).rowcount
                    if n <= 0:
                        break
                    done += n
                    self._shrink(conn)
        except (sqlite3.Error, OSError) as exc:
            self._warn("evict_failed", f"could not evict to make room: {exc}")
        self.counters.add("evicted:disk_full", done)
        self._take_reserve()

    def _reset(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def _refresh_gauges(self) -> None:
        self.counters.set("store_bytes", float(file_bytes(self.path)))
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                (rows,) = conn.execute("SELECT rows FROM totals").fetchone()
                self.counters.set("store_rows", float(rows))
