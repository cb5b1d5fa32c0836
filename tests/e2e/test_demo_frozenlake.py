"""The FrozenLake Q-learning example learns and exports classic-RL episodes over HTTP."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

import rlpulse
from rlpulse import catalog
from tests.conftest import samples, scrape

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "frozenlake_qlearning.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("frozenlake_qlearning", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def one(text: str, metric: str, suffix: str = "", **labels: str) -> float:
    name = catalog.get(metric).name + suffix
    hits = [
        v for (n, lbls), v in samples(text).items() if n == name and set(labels.items()) <= lbls
    ]
    assert len(hits) == 1, (metric, labels, hits)
    return hits[0]


def test_q_learning_learns_and_exports_episodes(example: ModuleType) -> None:
    exp = rlpulse.start(0, addr="127.0.0.1", run_id="frozen", gpu=False)
    try:
        settings = example.Settings(slippery=False, epsilon_decay=0.99)
        q = example.train(400, settings, seed=0, log_every=50, eval_every=100)
        text = scrape(exp.url)
    finally:
        rlpulse.close()
    assert one(text, "rl_episodes_total") == 400
    assert one(text, "rl_env_steps_total") >= 400 * 6  # the shortest path is 6 steps
    assert one(text, "rl_step") == 400
    assert one(text, "rl_eval_score", split="eval", benchmark="FrozenLake-v1-4x4") == 1.0
    assert one(text, "rl_success_ratio") > 0.5 and one(text, "rl_episode_return") > 0.5
    assert one(text, "rl_hyperparameter", name="exploration_rate") == pytest.approx(0.05)
    assert one(text, "rl_value_mean") > 0
    assert one(text, "rl_phase_duration_seconds", "_count", phase="rollout") == 400
    env = example.gym.make(example.ENV_ID, is_slippery=False)
    assert example.greedy_success(env, q, 20, seed=5) == 1.0


def test_example_command_line(example: ModuleType, capsys) -> None:
    assert example.main(["--episodes", "50", "--port", "0", "--log-every", "10"]) == 0
    out = capsys.readouterr().out
    assert "metrics at http://" in out and "greedy success" in out
