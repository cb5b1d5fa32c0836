"""Break-test regressions (issue 16, item 1): idle, silent and slow connections cannot take the
trainer's threads or file descriptors, and the accept loop does not spin when they run out."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlpulse.runtime import http
from rlpulse.runtime.exporter import Exporter
from tests.conftest import scrape, self_signed

SILENT = 200


@pytest.fixture
def short_head(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "HEAD_TIMEOUT", 0.6, raising=False)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _closed_within(sock: socket.socket, seconds: float, drip: bytes = b"") -> float | None:
    """Seconds until the server closes ``sock`` (sending ``drip`` every 0.1 s), or None."""
    t0 = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - t0 < seconds:
        try:
            if drip:
                sock.sendall(drip)
            if sock.recv(4096) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


@pytest.fixture
def exp(short_head: None) -> Iterator[Exporter]:
    e = Exporter(port=0, addr="127.0.0.1", run_id="conn", gpu=False, host=False).start()
    yield e
    e.close()


def test_silent_connections_take_no_thread_and_are_capped(exp: Exporter) -> None:
    threads = threading.active_count()
    silent = [_connect(exp.port) for _ in range(SILENT)]
    try:
        time.sleep(0.3)
        added = threading.active_count() - threads
        server = exp._server
        assert server is not None
        held = len(server._waiting) + len(server.connections)
        text = scrape(exp.url)  # a scraper still gets in: it evicts the oldest silent one
        print(f"\n{SILENT} silent connections: +{added} threads, {held} held by the server")
        assert added == 0
        assert held <= http.MAX_CONNECTIONS
        assert "rl_run_info" in text
    finally:
        for s in silent:
            s.close()


def test_a_slowloris_head_is_cut_at_the_total_deadline(exp: Exporter) -> None:
    sock = _connect(exp.port)
    sock.sendall(b"GET /metrics HTTP/1.1\r\n")
    took = _closed_within(sock, 10.0, drip=b"X-a: b\r\n")  # a header line every 0.1 s
    sock.close()
    print(f"\nslowloris cut after {took} s (HEAD_TIMEOUT {http.HEAD_TIMEOUT} s)")
    assert took is not None


def test_a_stalled_tls_handshake_is_cut(short_head: None, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    e = Exporter(
        port=0, addr="127.0.0.1", run_id="tls", gpu=False, host=False, certfile=cert, keyfile=key
    ).start()
    try:
        sock = _connect(e.port)
        sock.sendall(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
        took = _closed_within(sock, 10.0)
        sock.close()
        print(f"\nstalled TLS handshake cut after {took} s")
        assert took is not None
        ctx = ssl.create_default_context(cafile=cert)
        raw = socket.create_connection(("127.0.0.1", e.port))
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert b"200 OK" in tls.recv(100)
    finally:
        e.close()


TRAINER = textwrap.dedent(
    """
    import json, resource, sys, threading, time
    from rlpulse.runtime.exporter import Exporter
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
    exp = Exporter(port=0, addr="127.0.0.1", run_id="fd", gpu=False, host=False).start()
    print(exp.port, flush=True)
    sys.stdin.readline()  # the attacker's connections are open
    time.sleep(1.0)
    files, error = [], None
    try:
        for _ in range(40):  # the trainer's own checkpoint files
            files.append(open(sys.argv[1], "rb"))
    except OSError as exc:
        error = repr(exc)
    cpu0, t0 = time.process_time(), time.monotonic()
    time.sleep(1.0)
    cpu = (time.process_time() - cpu0) / (time.monotonic() - t0)
    print(json.dumps({"error": error, "cpu": cpu, "threads": threading.active_count()}))
    """
)


def test_a_connection_flood_leaves_the_trainer_its_file_descriptors() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", TRAINER, __file__],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    flood: list[socket.socket] = []
    try:
        port = int(proc.stdout.readline())
        for _ in range(300):
            try:
                flood.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            except OSError:
                break
        proc.stdin.write("go\n")
        proc.stdin.flush()
        report = json.loads(proc.stdout.readline())
    finally:
        for s in flood:
            s.close()
        proc.kill()
        proc.wait()
    print(f"\n{len(flood)} connections at ulimit -n 128: {report}")
    assert report["error"] is None
    assert report["threads"] < 10
    assert report["cpu"] < 0.5  # a spinning accept loop takes a whole core
