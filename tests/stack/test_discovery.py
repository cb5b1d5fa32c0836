"""Where an exporter registers for Prometheus (``rlpulse.runtime.discovery``), its file, and the
stack's sweep of dead processes' files; the real stack end to end is
tests/e2e/test_discovery_stack.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlpulse.runtime import discovery, targets
from rlpulse.runtime.exporter import Exporter


def _watched(directory: Path, interval: float = 1.0, pid: int | None = None) -> None:
    """A stack's note: this (live) process plays the watching Prometheus."""
    watcher = discovery.Watcher(pid or os.getpid(), interval, "http://127.0.0.1:1")
    discovery.write_watcher(directory, watcher)


def test_where_a_run_registers(tmp_path: Path) -> None:
    state = {"XDG_STATE_HOME": str(tmp_path)}
    default = tmp_path / "rlpulse" / "targets"
    assert discovery.default_dir_in(state) == default
    nowhere = discovery.resolve(None, state)
    assert nowhere.directory is None and "rlpulse stack up" in nowhere.why  # no stack runs
    _watched(default, interval=15.0)
    here = discovery.resolve(None, state)
    assert here.directory == default and here.local and here.interval == 15.0
    assert here.final_wait(60) == discovery.SD_DELAY + 2 * 15 + 1  # sized from the interval
    assert here.final_wait(0) == 0  # RLPULSE_FINAL_WAIT=0 still skips it
    assert (
        discovery.resolve(None, {**state, "KUBERNETES_SERVICE_HOST": "10.0.0.1"}).directory is None
    )
    assert discovery.resolve(None, {**state, discovery.TARGETS_ENV: "off"}).directory is None
    mine = discovery.resolve(tmp_path / "mine", state)  # start(targets_dir=): no note, no size
    assert mine.directory == tmp_path / "mine" and not mine.local and mine.final_wait(60) == 60
    _watched(default, pid=_dead_pid())
    assert discovery.resolve(None, state).directory is None  # the stack's Prometheus is gone


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return int(proc.stdout)


def test_one_file_per_process_gone_once_the_run_ended(tmp_path: Path) -> None:
    exp = Exporter(port=0, addr="127.0.0.1", run_id="r/1", rank=2, gpu=False, host=False,
                   targets_dir=tmp_path)  # fmt: skip
    exp.start()
    assert exp.registered == tmp_path / f"r_1-2-{os.getpid()}.json"
    [group] = json.loads(exp.registered.read_text())
    assert group["targets"] == [f"127.0.0.1:{exp.port}"]
    assert group["labels"]["__meta_rlpulse_run_id"] == "r/1"
    assert group["labels"]["__meta_rlpulse_pid"] == str(os.getpid())
    assert exp.expect_scrape  # a registered run waits for its last scrape
    assert [p.name for p in tmp_path.iterdir()] == [exp.registered.name]  # no temp file
    exp.end(wait=0)
    assert list(tmp_path.iterdir()) == []


def test_explicit_register_replaces_the_exporters_own(tmp_path: Path) -> None:
    exp = Exporter(port=0, addr="127.0.0.1", run_id="ray", gpu=False, host=False,
                   targets_dir=tmp_path / "own").start()  # fmt: skip
    try:
        reg = targets.register(tmp_path / "ray", exp)
        assert list((tmp_path / "own").glob("*.json")) == []  # not scraped twice
        assert reg.path.exists()
    finally:
        exp.close()


_KILLED = """
import os, sys, rlpulse
rlpulse.start(port=0, addr="127.0.0.1", run_id="dies", targets_dir=sys.argv[1])
print(rlpulse.get_exporter().registered, flush=True)
sys.stdin.readline()
"""


def test_a_run_that_never_said_how_it_ended_keeps_its_target_until_swept(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _KILLED, str(tmp_path)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    path = Path(proc.stdout.readline().strip())
    assert discovery.sweep(tmp_path, keep=0) == []  # its process lives
    proc.send_signal(signal.SIGTERM)  # dies of it without an end: Prometheus pages the target
    assert proc.wait(timeout=30) == -signal.SIGTERM
    proc.stdin.close()
    proc.stdout.close()
    assert path.exists()
    memory: dict[str, float] = {}
    assert discovery.sweep(tmp_path, keep=3600, dead_since=memory) == []  # it pages a while
    assert path.name in memory
    assert discovery.sweep(tmp_path, keep=0) == [path]
    assert not path.exists()


def test_the_sweep_leaves_other_machines_and_reused_pids_alone(tmp_path: Path) -> None:
    path = discovery.register(tmp_path, "127.0.0.1:1", "r", 0)
    group = json.loads(path.read_text())
    group[0]["labels"]["__meta_rlpulse_host"] = socket.gethostname() + "-elsewhere"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(group))
    assert discovery.sweep(tmp_path, keep=0) == []  # mine lives; the other machine's is theirs
    group[0]["labels"].update(__meta_rlpulse_host=socket.gethostname(), __meta_rlpulse_started="1")
    other.write_text(json.dumps(group))  # this pid, but started at another time: a dead run
    assert discovery.sweep(tmp_path, keep=0) == [other]


@pytest.mark.parametrize("value", ["", "off"])
def test_off_or_empty_setting(value: str, tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path), discovery.TARGETS_ENV: value}
    assert discovery.resolve(None, env).directory is None
