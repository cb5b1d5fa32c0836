"""Process-level faults, each in a real subprocess: SIGTERM (default action, a user's handler
before or after ``start()``, ignored), plain interpreter exit, and ``fork()`` after ``start()``
while scrapes are in flight. Expected behaviour: docs/reliability.md."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlpulse.runtime.exporter import Exporter
from tests.conftest import scrape, value

ROOT = Path(__file__).resolve().parents[2]
PRELUDE = """\
import logging, os, signal, sys, time
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
from rlpulse.runtime.exporter import Exporter
def started(first=None, step=None):
    exp = Exporter(port=0, addr="127.0.0.1", run_id="proc", gpu=False, host=False).start()
    if first:
        exp.log(first, step=step)  # before the port is printed, so the first scrape finds it
    print(exp.port, flush=True)
    return exp
"""


@contextmanager
def script(body: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """Run PRELUDE + ``body`` in a fresh interpreter; yields it and the port it printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip().isdigit(), (line, proc.communicate(timeout=10))
        yield proc, int(line)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def finish(proc: subprocess.Popen[str], timeout: float = 15) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def port_is_free(port: int) -> bool:
    """Whether a new exporter can take ``port`` (a socket still listening there refuses it)."""
    try:
        Exporter(port=port, addr="127.0.0.1", gpu=False, host=False, process=False).start().close()
    except OSError:
        return False
    return True


def test_sigterm_with_the_default_action_closes_then_dies_of_sigterm() -> None:
    with script(
        "exp = started({'rl_entropy': 1.0})\n"
        "while True:\n    exp.log({'rl_entropy': 1.0}); time.sleep(0.01)\n"
    ) as (
        proc,
        port,
    ):
        assert value(scrape(f"http://127.0.0.1:{port}/metrics"), "rl_entropy") == 1.0
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc, _, err = finish(proc)
        elapsed = time.monotonic() - t0
    assert rc == -signal.SIGTERM  # the exit status a supervisor expects is unchanged
    assert f"stopped serving http://127.0.0.1:{port}/metrics" in err
    assert port_is_free(port)
    print(f"\nSIGTERM (default action): closed and dead in {elapsed * 1000:.0f} ms")


def test_a_users_sigterm_handler_is_chained_and_decides() -> None:
    body = """
    stop = []
    def handler(signum, frame):
        print("user handler", flush=True)
        stop.append(time.monotonic())
    signal.signal(signal.SIGTERM, handler)
    exp = started()
    exp.log({"rl_entropy": 2.0}, step=1)
    print("logged", flush=True)
    while not stop or time.monotonic() - stop[0] < 1.0:  # checkpoint, then leave
        exp.log({"rl_entropy": 2.0}, step=1); time.sleep(0.01)
    sys.exit(0)
    """
    with script(body) as (proc, port):
        assert proc.stdout is not None and proc.stdout.readline() == "logged\n"
        proc.send_signal(signal.SIGTERM)  # after a step is logged: the scrape below must see it
        assert proc.stdout is not None and proc.stdout.readline() == "user handler\n"
        text = scrape(f"http://127.0.0.1:{port}/metrics")  # still serving: the user decided
        assert value(text, "rl_step") == 1
        rc, _, err = finish(proc)
    assert rc == 0 and "stopped serving" in err  # closed at interpreter exit
    assert port_is_free(port)


def test_a_handler_installed_after_start_replaces_ours_and_exit_still_closes() -> None:
    body = """
    exp = started()
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(3))
    print("handler installed", flush=True)
    while True:
        time.sleep(0.01)
    """
    with script(body) as (proc, port):
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "handler installed"  # no race with the signal
        proc.send_signal(signal.SIGTERM)
        rc, _, err = finish(proc)
    assert rc == 3 and "stopped serving" in err
    assert port_is_free(port)


def test_an_ignored_sigterm_stays_ignored() -> None:
    body = """
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exp = started()
    while True:
        time.sleep(0.01)
    """
    with script(body) as (proc, port):
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert proc.poll() is None
        assert "rl_run_info" in scrape(f"http://127.0.0.1:{port}/metrics")


def test_interpreter_exit_closes_the_endpoint() -> None:
    body = """
    exp = started({"rl_entropy": 1.0}, step=3)
    sys.stdin.readline()  # the test scrapes, then lets the script end without close()
    """
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None and proc.stdin is not None
    port = int(proc.stdout.readline())
    assert value(scrape(f"http://127.0.0.1:{port}/metrics"), "rl_step") == 3
    t0 = time.monotonic()
    proc.stdin.write("\n")
    proc.stdin.flush()
    rc, _, err = finish(proc)
    assert rc == 0 and "stopped serving" in err
    assert time.monotonic() - t0 < 5
    assert port_is_free(port)


FORK = """
import http.client, json, threading, urllib.request, psutil
from rlpulse.runtime.http import Server

exp = started()
exp.log({"rl_entropy": 1.0}, step=1)
stop = threading.Event()
served, failed = [0], []

def scraper():
    conn = http.client.HTTPConnection("127.0.0.1", exp.port, timeout=10)  # keep-alive
    while not stop.is_set():
        try:
            conn.request("GET", "/metrics")
            body = conn.getresponse().read()
            assert b"rl_entropy" in body and b"99.0" not in body, "a child's value was served"
            served[0] += 1
        except Exception as exc:
            failed.append(repr(exc))
            conn = http.client.HTTPConnection("127.0.0.1", exp.port, timeout=10)

threads = [threading.Thread(target=scraper) for _ in range(3)]
for t in threads:
    t.start()
time.sleep(0.2)

def child(release):
    # what a forked worker does: log like the parent (past MAX_PENDING, so it flushes), count,
    # observe, and look at its sockets
    for i in range(6000):
        exp.log({"rl_entropy": 99.0}, step=10**6 + i)
    exp.count("rl_env_steps_total", 5)
    exp.observe_rollouts(latency_seconds=[0.1, 0.2], rewards=[1.0, 0.0])
    listening = [c for c in psutil.Process().net_connections("tcp") if c.status == "LISTEN"]
    os.write(release[1], json.dumps({"serving": exp.serving, "listening": len(listening)}).encode())
    if release[0] is not None:
        os.read(release[0], 1)  # stay alive until the parent has tried the port

children = []
t0 = time.monotonic()
for n in range(20):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        child((None, w))
        sys.exit(0)  # a normal interpreter exit in the child: atexit and thread joins run
    os.close(w)
    children.append((pid, r))
reports = []
for pid, r in children:
    reports.append(json.loads(os.read(r, 4096)))
    _, status = os.waitpid(pid, 0)
    reports[-1]["exit"] = os.waitstatus_to_exitcode(status)
fork_time = time.monotonic() - t0

# a child that outlives the parent's exporter must not keep the port
hold_r, hold_w = os.pipe()
done_r, done_w = os.pipe()
pid = os.fork()
if pid == 0:
    child((hold_r, done_w))
    os._exit(0)
held = json.loads(os.read(done_r, 4096))
stop.set()
for t in threads:
    t.join()
text = urllib.request.urlopen(exp.url).read().decode()
port = exp.port
exp.close()
try:
    Server("127.0.0.1", port).start().close()
    freed = True
except OSError:
    freed = False
os.write(hold_w, b"x")
_, status = os.waitpid(pid, 0)
print(json.dumps({
    "served": served[0], "failed": failed, "children": reports, "held": held, "freed": freed,
    "last_exit": os.waitstatus_to_exitcode(status), "fork_time": fork_time,
    "entropy_line": [l for l in text.splitlines() if l.startswith("rl_entropy{")],
    "steps": [l for l in text.splitlines() if l.startswith("rl_env_steps_total")],
}), flush=True)
"""


def test_fork_after_start_child_lets_go_and_never_serves() -> None:
    with script(FORK) as (proc, _port):
        rc, out, err = finish(proc, timeout=120)
    assert rc == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["failed"] == [] and report["served"] > 0, report
    assert len(report["children"]) == 20
    for child in report["children"]:
        assert child == {"serving": False, "listening": 0, "exit": 0}, child
    assert report["held"] == {"serving": False, "listening": 0}
    assert report["freed"], "a live child kept the parent's port"
    assert report["last_exit"] == 0
    assert report["entropy_line"][0].endswith(" 1.0")  # the children's writes stayed theirs
    assert report["steps"] == []
    print(
        f"\nfork: 20 children forked under 3 keep-alive scrapers, {report['served']} scrapes "
        f"served, 0 failed, {report['fork_time']:.2f}s for all children to log 6000 steps and exit"
    )
