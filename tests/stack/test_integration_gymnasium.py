"""Gymnasium wrappers on real environments (single and vector, both autoreset modes), checked
against Gymnasium's own RecordEpisodeStatistics and scraped over HTTP."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import RecordEpisodeStatistics
from gymnasium.wrappers.vector import RecordEpisodeStatistics as VectorRecordEpisodeStatistics

import rlpulse
from harness.series import (
    ENV_STEPS,
    EPISODE_LENGTH,
    EPISODE_RETURN,
    EPISODES,
    PHASE,
    ROLLOUT,
    SUCCESS,
)
from rlpulse.integrations.gymnasium import RlpulseEpisodeStats, RlpulseVectorEpisodeStats
from rlpulse.rollouts.query import Filter, open_run, query
from rlpulse.runtime.exporter import Exporter
from tests.conftest import promtool_check_metrics, scrape, value


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """Each test's rollout stores (its episodes) in a folder of its own."""
    monkeypatch.setenv("RLPULSE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


class GoalReached(gym.Wrapper[Any, Any, Any, Any]):
    """FrozenLake pays 1 only at the goal: say so in ``info["is_success"]`` as goal envs do."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            info = {**info, "is_success": float(reward) > 0}
        return obs, reward, terminated, truncated, info


def test_single_env_matches_gymnasium_statistics(exporter: Exporter) -> None:
    env = RlpulseEpisodeStats(RecordEpisodeStatistics(gym.make("CartPole-v1")), exporter)
    env.action_space.seed(0)
    env.reset(seed=0)
    returns, lengths, steps = [], [], 0
    while len(returns) < 130:
        _obs, _r, term, trunc, info = env.step(env.action_space.sample())
        steps += 1
        if term or trunc:
            returns.append(float(info["episode"]["r"]))
            lengths.append(int(info["episode"]["l"]))
            env.reset()
    env.close()
    text = scrape(exporter.url)
    assert promtool_check_metrics(text).returncode == 0
    assert value(text, EPISODES) == 130
    assert value(text, EPISODE_RETURN) == pytest.approx(np.mean(returns[-100:]))
    assert value(text, EPISODE_LENGTH) == pytest.approx(np.mean(lengths[-100:]))
    assert value(text, ENV_STEPS) == steps == sum(lengths)
    assert value(text, PHASE + "_count", phase="env_step") == steps
    assert 0 < value(text, PHASE + "_sum", phase="env_step") < 5
    assert value(text, ROLLOUT + "_count") == 130


def test_success_from_info_on_frozen_lake(exporter: Exporter, data_dir) -> None:
    env = RlpulseEpisodeStats(GoalReached(gym.make("FrozenLake-v1", is_slippery=True)), exporter)
    env.action_space.seed(1)
    env.reset(seed=1)
    outcomes: list[bool] = []
    while sum(outcomes) < 3 and len(outcomes) < 5000:
        _obs, _r, term, trunc, info = env.step(env.action_space.sample())
        if term or trunc:
            outcomes.append(bool(info["is_success"]))
            env.reset()
    env.flush()
    text = scrape(exporter.url)
    assert 3 <= sum(outcomes) < len(outcomes)
    # the gauge is the success ratio of the episodes in the last hand-over (all of them here)
    assert value(text, SUCCESS) == pytest.approx(np.mean(outcomes))
    # every episode is offered to the rollout store; the sampler keeps the successes
    assert exporter._recorder.flush(30)
    conn = open_run(exporter.run_id, data_dir)
    try:
        stored = query(conn, Filter(order="step", limit=10_000))
    finally:
        conn.close()
    wins = [r for r in stored if r["verdict"] == "success"]
    assert len(wins) >= 2 and all(r["reward"] == 1.0 for r in wins)  # "best" keeps 2 a step
    assert {r["verdict"] for r in stored} == {"success", "failure"}
    assert all(
        r["metadata"]["final_info"]["is_success"] == (r["verdict"] == "success") for r in stored
    )
    first = min(stored, key=lambda r: (r["step"], r["length"] or 0))
    assert first["metadata"]["seed"] in (1, None) and all(r["length"] >= 1 for r in stored)


@pytest.mark.parametrize(
    ("mode", "autoreset"),
    [("sync", AutoresetMode.NEXT_STEP), ("async", AutoresetMode.SAME_STEP)],
)
def test_vector_env_matches_gymnasium_statistics(
    exporter: Exporter, mode: str, autoreset: AutoresetMode
) -> None:
    vec = gym.make_vec(
        "CartPole-v1",
        num_envs=4,
        vectorization_mode=mode,
        vector_kwargs={"autoreset_mode": autoreset},
    )
    reference = VectorRecordEpisodeStatistics(vec)
    envs = RlpulseVectorEpisodeStats(reference, exporter, flush_interval=0.0)
    envs.action_space.seed(0)
    envs.reset(seed=0)
    returns: list[float] = []
    lengths: list[int] = []
    for _ in range(300):
        _obs, _r, _term, _trunc, info = envs.step(envs.action_space.sample())
        if "episode" in info:
            done = info["_episode"]
            returns += info["episode"]["r"][done].tolist()
            lengths += info["episode"]["l"][done].tolist()
    in_progress = reference.episode_lengths[~reference.prev_dones].sum()
    if autoreset == AutoresetMode.SAME_STEP:
        in_progress = reference.episode_lengths.sum()
    text = scrape(exporter.url)
    envs.close()
    assert len(returns) > 20
    assert value(text, EPISODES) == len(returns)
    assert value(text, EPISODE_RETURN) == pytest.approx(np.mean(returns[-100:]))
    assert value(text, EPISODE_LENGTH) == pytest.approx(np.mean(lengths[-100:]))
    assert value(text, ENV_STEPS) == sum(lengths) + in_progress
    assert value(text, PHASE + "_count", phase="env_step") == 300


def test_wrapper_reports_to_the_process_wide_exporter_once_started() -> None:
    env = RlpulseEpisodeStats(gym.make("CartPole-v1"), flush_interval=0.0)
    env.reset(seed=0)
    env.step(0)  # no exporter yet: dropped quietly
    exp = rlpulse.start(port=0, gpu=False, host=False, run_id="gym-global")
    try:
        for _ in range(5):
            env.step(0)
        assert value(scrape(exp.url), ENV_STEPS) == 5
    finally:
        env.close()
        rlpulse.close()
