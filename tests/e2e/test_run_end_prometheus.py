"""A crashed run seen by a real Prometheus: the last scrape carries the crash, RLRunCrashed
pages naming it, and RLTargetDown stays quiet; a killed run still pages RLTargetDown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from harness.runstack import alerts_once_settled, last, watching
from harness.stackutil import free_port, results, wait_for

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


def test_a_killed_run_pages_target_down(tmp_path: Path) -> None:
    port = free_port()
    script = TRAINER.format(run_id="kill-1", ending="print('up', flush=True); time.sleep(600)")
    env = {**os.environ, "RLPULSE_PORT": str(port)}
    with watching(tmp_path, port) as prom:
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script)], env=env, stdout=subprocess.PIPE
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"up"
        wait_for(lambda: results(prom, 'rl_step{run_id="kill-1"} == 3'), 60, "a scrape")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        down = wait_for(
            lambda: [a for a in alerts_once_settled(prom) if a["state"] == "firing"] or None,
            60,
            "RLTargetDown firing",
        )
        assert _names(down) == {"RLTargetDown"}, down
