"""Break-test regressions (issue 16, items 4 and 6): fork() from a process whose threads are
recording rollouts or sending worker calls; unpicklable worker values; hub peers that are
silent, send a partial frame, or stop reading."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from rlpulse import catalog
from rlpulse.rollouts import Recorder
from rlpulse.runtime import workers
from rlpulse.runtime.exporter import Exporter
from tests.conftest import scrape, value

STEPS = catalog.get("rl_env_steps_total").name
FORKS = 20


def _fork_while(busy: threading.Event, child: object) -> list[int]:
    """Fork ``FORKS`` children while a thread keeps ``busy``; their exit codes (-1: hung)."""
    codes = []
    for _ in range(FORKS):
        pid = os.fork()
        if pid == 0:  # the child: must not hang on a lock held by a thread that is gone
            code = 1
            try:
                code = 0 if child() else 2  # type: ignore[operator]
            finally:
                os._exit(code)
        deadline = time.monotonic() + 20
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes.append(os.waitstatus_to_exitcode(status))
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                codes.append(-1)
                break
            time.sleep(0.01)
    busy.set()
    return codes


def test_fork_while_a_thread_records_rollouts_and_the_child_keeps_its_own(tmp_path: Path) -> None:
    rec = Recorder("forked", data_dir=tmp_path, max_rows=100_000)
    stop = threading.Event()

    def record() -> None:
        i = 0
        while not stop.is_set():
            rec.record(step=i, rollout_ids=[f"p{i}"], rewards=[1.0], responses=["r"])
            i += 1
            time.sleep(0.0005)

    def child() -> bool:
        rec.record(step=0, rollout_ids=[f"child-{os.getpid()}"], rewards=[1.0], responses=["c"])
        flushed, stats = rec.flush(10), rec.stats()
        ok = flushed and stats.get("recorded", 0) + stats.get("dropped:locked", 0) == 1
        if not ok:
            print(f"child {os.getpid()}: flushed {flushed}, {stats}", flush=True)
        return ok

    t = threading.Thread(target=record)
    t.start()
    codes = _fork_while(stop, child)
    t.join()
    rec.close()
    print(f"\n{FORKS} forks while recording: exit codes {codes}")
    assert codes == [0] * FORKS


def test_fork_while_a_worker_client_sends(hub: workers.WorkerHub) -> None:
    client = workers.worker_client()
    stop = threading.Event()

    def send() -> None:
        while not stop.is_set():
            client.count(STEPS, 1)
            client._send(client._take())

    def child() -> bool:
        client.count(STEPS, 1000)
        return client.flush(10)

    t = threading.Thread(target=send)
    t.start()
    codes = _fork_while(stop, child)
    t.join()
    assert client.flush(10)
    print(f"\n{FORKS} forks while sending: exit codes {codes}")
    assert codes == [0] * FORKS
    assert value(scrape(hub.exporter.url), STEPS) >= 1000 * FORKS  # every child's calls arrived


class _Unpicklable:
    def __reduce__(self) -> str:
        raise TypeError("not picklable")


def test_an_unpicklable_value_is_counted_and_the_worker_goes_on(hub: workers.WorkerHub) -> None:
    client = workers.WorkerClient(hub.address, "unpicklable")
    client.log({"rl_entropy": _Unpicklable()})  # log() takes plain numbers at the call
    client.set("rl_kl_reference", _Unpicklable())  # sent as given: it cannot be pickled
    client.count(STEPS, 3)
    assert client.flush(10)
    client.count(STEPS, 4)
    assert client.flush(10) and client.connected
    text = scrape(hub.exporter.url)
    assert value(text, STEPS) == 7
    assert value(text, "rlpulse_dropped_values_total", reason="non_numeric") == 1
    assert value(text, "rlpulse_dropped_values_total", reason="bad_worker_call") == 1
    client.close()


def _peer(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    return sock


def test_silent_and_partial_peers_do_not_stall_other_workers(
    hub: workers.WorkerHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers, "HELLO_TIMEOUT", 1.0)
    silent = [_peer(hub.address.path) for _ in range(3)]  # never answer the challenge
    partial = workers.WorkerClient(hub.address, "partial")
    partial.count(STEPS, 1)
    assert partial.flush(10)
    conn = partial._conn
    assert conn is not None
    os.write(conn.fileno(), struct.pack("!i", 1000) + b"half a frame")  # then nothing
    t0 = time.monotonic()
    healthy = workers.WorkerClient(hub.address, "healthy")
    healthy.count(STEPS, 2)
    ok = healthy.flush(10)
    took = time.monotonic() - t0
    print(f"\na new worker beside 3 silent peers and a partial frame: flushed in {took:.2f} s")
    assert ok
    assert value(scrape(hub.exporter.url), STEPS) == 3
    time.sleep(1.5)  # past HELLO_TIMEOUT: the silent peers are cut
    for sock in silent:
        sock.settimeout(5)
        data = b""
        with pytest.raises(OSError):
            while True:  # the challenge, then EOF (or a reset)
                chunk = sock.recv(4096)
                if not chunk:
                    raise ConnectionResetError
                data += chunk
        sock.close()
    healthy.close()


def test_a_frozen_rank_never_blocks_a_workers_calls(tmp_path: Path) -> None:
    """A hub that accepts and then stops reading (a frozen rank): the worker's calls return."""
    exp = Exporter(port=0, run_id="frozen", gpu=False, host=False, process=False)
    hub = workers.WorkerHub(exp)
    client = workers.WorkerClient(hub.address, "w", flush_interval=0.01)
    client.count(STEPS, 1)
    assert client.flush(10)
    frozen = threading.Lock()
    frozen.acquire()
    monkey = hub._handle
    hub._handle = lambda *a: (frozen.acquire(), monkey(*a))  # type: ignore[method-assign]
    t0 = time.monotonic()
    for _ in range(200_000):
        client.observe(catalog.get("rl_rollout_duration_seconds").name, [0.5] * 64)
    took = time.monotonic() - t0
    print(f"\n200,000 calls to a frozen rank took {took:.2f} s; {client._overflow} dropped")
    assert client._overflow > 0
    assert not client.flush(0.5)
    frozen.release()
    client.close()
    hub.close()
