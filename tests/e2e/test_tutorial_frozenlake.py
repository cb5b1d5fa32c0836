"""The classic tutorial as an acceptance test: the FrozenLake Q-learning block of
docs/quickstart.md, run as written with no setting (a script that logs ``{"episode": e,
"reward": r}`` and exits) while the real local stack runs (``rlpulse stack up --fast``: 1 s
scrapes, the generated rules): the run registers itself, the agent learns, the short run's data
reaches Prometheus, the run is finished, and nothing pages."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from harness.doc_blocks import REPO, marked
from harness.runstack import alerts_after, epoch, last, stack_up
from harness.stackutil import results
from rlpulse import keys

RUN = 'run_id="frozenlake-q"'
EPISODES = 500


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The tutorial run once beside the local stack; yields (Prometheus URL, the run, when it
    had ended)."""
    tmp = tmp_path_factory.mktemp("tutorial")
    script = tmp / "frozenlake.py"
    script.write_text(marked(REPO / "docs" / "quickstart.md", "stack").code)
    with stack_up(tmp) as stack:
        run = stack.run(script)
        yield stack.prometheus, run, time.time()  # and when its process had exited


def test_the_short_run_reaches_prometheus_and_ends_finished(tutorial: Any) -> None:
    prom, run, _ = tutorial
    assert run.returncode == 0, run.stderr
    assert "waiting up to" in run.stderr  # the wait for a last scrape is visible
    assert re.search(r"run frozenlake-q rank 0 serving at http://127\.0\.0\.1:\d+/metrics "
                     r"\(registered for Prometheus at ", run.stderr), run.stderr  # fmt: skip
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


def test_the_agent_learns(tutorial: Any) -> None:
    _, run, _ = tutorial
    rates = [float(x) for x in re.findall(r"success rate ([0-9.]+)", run.stdout)]
    assert len(rates) == EPISODES // 100, run.stdout
    assert rates[-1] > 0 and rates[-1] > rates[0], rates  # rising from chance
    assert rates == sorted(rates[:3]) + rates[3:], rates  # rising while it explores


def test_nothing_pages(tutorial: Any) -> None:
    """Nothing critical fires at the end (its target left discovery: it never reads as down),
    nor at any time of the run (Prometheus' ALERTS history)."""
    prom, _, ended = tutorial
    alerts = alerts_after(prom, ended)
    critical = [a["labels"] for a in alerts if a["labels"].get("severity") == "critical"]
    assert critical == [], critical
    ever = f'ALERTS{{{RUN}, severity="critical", alertstate="firing"}}[10m]'
    assert results(prom, f"max_over_time({ever})") == []


def test_classic_keys_land_on_episode_metrics(tutorial: Any) -> None:
    prom, _, _ = tutorial
    assert last(prom, f"rl_episode_return{{{RUN}}}"), "reward as the episode return"
    [success] = last(prom, f"rl_success_ratio{{{RUN}}}")  # derived from the binary reward
    assert float(success["value"][1]) > 0.5  # the last 100 episodes: the agent learned
    [episodes] = last(prom, f"rl_episodes_total{{{RUN}}}")
    assert episodes["value"][1] == str(EPISODES)  # indices 0..499 are 500 episodes
    samples = last(prom, f"rl_samples_total{{{RUN}}}")
    assert all(float(s["value"][1]) == 0 for s in samples), "episodes are not samples"


def test_epoch_parses_the_api_time() -> None:
    assert epoch("1970-01-01T00:00:01.5Z") == 1.5 and time.time() > epoch("2026-01-01T00:00:00Z")
