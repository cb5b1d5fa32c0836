"""A crashed run seen by a real Prometheus: the last scrape carries the crash, RLRunCrashed
pages naming it, and RLTargetDown stays quiet; a killed run still pages RLTargetDown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from harness.runstack import alerts_once_settled, last, watching
from harness.stackutil import api, free_port, results, wait_for
from rlpulse.stack.alerts.liveness import SERVED

TRAINER = """
import sys, time, rlpulse
rlpulse.start(run_id={run_id!r}, gpu=False, host=False)
for step in range(1, 4):
    rlpulse.log({{"loss": 1.0 / step}}, step=step)
{ending}
"""


def _names(alerts: list[dict[str, dict[str, str]]], state: str = "") -> set[str]:
    return {a["labels"]["alertname"] for a in alerts if not state or a["state"] == state}


def test_a_crash_pages_run_crashed_not_target_down(tmp_path: Path) -> None:
    port = free_port()
    script = TRAINER.format(run_id="crash-1", ending="raise MemoryError('CUDA OOM')")
    env = {**os.environ, "RLPULSE_PORT": str(port), "RLPULSE_EXPECT_SCRAPE": "1"}
    with watching(tmp_path, port) as prom:
        run = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert run.returncode == 1 and "MemoryError: CUDA OOM" in run.stderr
        [outcome] = last(prom, 'rl_run_outcome{run_id="crash-1"}')
        assert outcome["metric"]["outcome"] == "crashed"
        assert outcome["metric"]["reason"] == "MemoryError"
        alerts = alerts_once_settled(prom)
        assert _names(alerts, "firing") == {"RLRunCrashed"}, alerts
        [crash] = [a for a in alerts if a["labels"]["alertname"] == "RLRunCrashed"]
        assert "crashed" in crash["annotations"]["description"]
        assert "MemoryError" in crash["annotations"]["description"]


# a healthy run: a step every 0.2 s, for the 10 minutes a test may last
TRAIN_ON = """print('up', flush=True)
for step in range(4, 3000):
    rlpulse.log({"loss": 1.0 / step}, step=step)
    time.sleep(0.2)"""


def _serving(run_id: str, port: int) -> subprocess.Popen[bytes]:
    """A trainer on ``port`` that logged 3 steps and trains on (a step every 0.2 s)."""
    script = TRAINER.format(run_id=run_id, ending=TRAIN_ON)
    env = {**os.environ, "RLPULSE_PORT": str(port), "RLPULSE_TARGETS_DIR": "off"}
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
    return proc


def _scraped(prom: str, run_id: str) -> None:
    wait_for(lambda: results(prom, f'rl_step{{run_id="{run_id}"}} >= 3'), 60, f"{run_id} scraped")


def _firing(prom: str) -> list[tuple[str, str]]:
    alerts = api(f"{prom}/api/v1/alerts")["data"]["alerts"]
    return sorted((a["labels"]["alertname"], a["labels"]["run_id"]) for a in alerts)


def _killed(prom: str, run_id: str, port: int) -> None:
    """A training trainer on ``port``, scraped and seen served by the rules, then killed with
    SIGKILL. Both matter on a loaded machine: a run killed before any rule evaluation read its
    first scrape was never served as far as the rules know, and one that waited without a step
    for the fast preset's 5 s stalled before it died (RLTrainingStalled then rightly keeps
    firing beside RLTargetDown)."""
    proc = _serving(run_id, port)
    _scraped(prom, run_id)
    wait_for(lambda: results(prom, f'{SERVED}{{run_id="{run_id}"}}'), 60, f"{run_id} served")
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def test_a_killed_run_pages_target_down(tmp_path: Path) -> None:
    port = free_port()
    with watching(tmp_path, port) as prom:
        _killed(prom, "kill-1", port)
        down = wait_for(
            lambda: [a for a in alerts_once_settled(prom) if a["state"] == "firing"] or None,
            60,
            "RLTargetDown firing",
        )
        assert _names(down) == {"RLTargetDown"}, down


def test_a_killed_run_whose_port_another_run_takes_still_pages(tmp_path: Path) -> None:
    """The port of a killed run is taken at once by the next run (the default port, free
    again): the target never stops answering, yet the dead run pages, and the live one not."""
    port = free_port()
    with watching(tmp_path, port) as prom:
        _killed(prom, "kill-2", port)
        taker = _serving("kill-3", port)
        try:
            _scraped(prom, "kill-3")
            wait_for(lambda: _firing(prom) or None, 60, "an alert")
            time.sleep(10)  # the fast preset's stall wait (5 s) and more: the taker trains on
            assert _firing(prom) == [("RLTargetDown", "kill-2")]
            assert results(prom, f'up{{instance="127.0.0.1:{port}"}} == 1')
            [down] = api(f"{prom}/api/v1/alerts")["data"]["alerts"]
            assert down["state"] == "firing"
            assert "answers for another run" in down["annotations"]["description"]
        finally:
            taker.kill()
            taker.wait(30)
