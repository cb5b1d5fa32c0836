"""The classic tutorial as an acceptance test: the FrozenLake Q-learning block of
docs/quickstart.md, run as written (a script that logs ``{"episode": e, "reward": r}`` and
exits) while a real Prometheus scrapes it once a second and evaluates the generated rules: the
short run's data reaches Prometheus, the run is finished, and nothing pages."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from rlpulse import keys
from tests.doc_blocks import REPO, marked
from tests.runstack import alerts_once_settled, epoch, last, watching
from tests.stackutil import free_port

RUN = 'run_id="frozenlake-q"'
EPISODES = 500


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tutorial run once under a watching Prometheus; yields (Prometheus URL, the run)."""
    tmp = tmp_path_factory.mktemp("tutorial")
    script = tmp / "frozenlake.py"
    script.write_text(marked(REPO / "docs" / "quickstart.md", "stack").code)
    port = free_port()
    env = {**os.environ, "RLPULSE_PORT": str(port), "RLPULSE_EXPECT_SCRAPE": "1"}
    with watching(tmp, port) as prom:
        run = subprocess.run(
            [sys.executable, str(script)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            cwd=tmp,
        )
        yield prom, run


def test_the_short_run_reaches_prometheus_and_ends_finished(tutorial: Any) -> None:
    prom, run = tutorial
    assert run.returncode == 0, run.stderr
    assert "waiting up to" in run.stderr  # the wait for a last scrape is visible
    [step] = last(prom, f"rl_step{{{RUN}}}")
    assert step["value"][1] == str(EPISODES - 1)  # the last step made it
    [outcome] = last(prom, f'rl_run_outcome{{{RUN}, outcome="finished"}}')
    assert outcome["value"][1] == "1"
    [info] = last(prom, f"rl_run_info{{{RUN}}}")
    assert info["metric"]["env"] == "FrozenLake-v1" and info["metric"]["algo"] == "q-learning"
    # {"episode", "reward"} alone is a classic-RL loop: the reward is the episode's return
    reward = keys.resolve("reward", keys.likely_framework(["episode", "reward"]))
    assert reward is not None and reward.metric == "rl_episode_return"
    assert last(prom, f"{reward.metric}{{{RUN}}}"), "the reward is queryable"


def test_nothing_pages(tutorial: Any) -> None:
    prom, _ = tutorial
    alerts = alerts_once_settled(prom)
    critical = [a["labels"] for a in alerts if a["labels"].get("severity") == "critical"]
    assert critical == [], critical


def test_classic_keys_land_on_episode_metrics(tutorial: Any) -> None:
    prom, _ = tutorial
    assert last(prom, f"rl_episode_return{{{RUN}}}"), "reward as the episode return"
    [success] = last(prom, f"rl_success_ratio{{{RUN}}}")  # derived from the binary reward
    assert 0 <= float(success["value"][1]) <= 1  # the tutorial's agent does not always learn
    samples = last(prom, f"rl_samples_total{{{RUN}}}")
    assert all(float(s["value"][1]) == 0 for s in samples), "episodes are not samples"


def test_epoch_parses_the_api_time() -> None:
    assert epoch("1970-01-01T00:00:01.5Z") == 1.5 and time.time() > epoch("2026-01-01T00:00:00Z")
