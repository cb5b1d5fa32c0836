"""Stable-Baselines3 integration: a real PPO run on CartPole, scraped over HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import CallbackList
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import KVWriter

import rlpulse
from rlpulse import catalog, keys
from rlpulse.integrations.sb3 import PrometheusWriter, RlpulseCallback
from rlpulse.rollouts.query import Filter, open_run, query
from rlpulse.runtime.exporter import Exporter
from tests.conftest import promtool_check_metrics, samples, scrape, value

N_STEPS, N_ENVS, ITERATIONS = 256, 2, 6


class Recorder(KVWriter):
    """Keeps what SB3's logger wrote, to compare with the scrape."""

    def __init__(self) -> None:
        self.dumps: list[tuple[dict[str, Any], int]] = []

    def write(self, key_values: dict[str, Any], key_excluded: Any, step: int = 0) -> None:
        self.dumps.append((dict(key_values), step))

    def close(self) -> None:
        pass


class AddRecorder(RlpulseCallback):
    def __init__(self, recorder: Recorder, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.recorder = recorder

    def _on_training_start(self) -> None:
        super()._on_training_start()
        self.logger.output_formats.append(self.recorder)


@pytest.fixture(scope="module")
def ppo_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Exporter, PPO, Recorder, str]]:
    torch.set_num_threads(1)
    patch = pytest.MonkeyPatch()  # the run's rollout store (its episodes) in a folder of its own
    patch.setenv("RLPULSE_DATA_DIR", str(tmp_path_factory.mktemp("sb3-data")))
    exp = Exporter(port=0, run_id="sb3-test", gpu=False, host=False, metadata={"framework": "sb3"})
    exp.start()
    recorder = Recorder()
    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=0)
    model = PPO("MlpPolicy", env, n_steps=N_STEPS, batch_size=128, n_epochs=2, seed=0, device="cpu")
    model.learn(N_STEPS * N_ENVS * ITERATIONS, callback=AddRecorder(recorder, exporter=exp))
    text = scrape(exp.url)
    yield exp, model, recorder, text
    exp.close()
    patch.undo()


def test_logged_keys_reach_their_mapped_series(
    ppo_run: tuple[Exporter, PPO, Recorder, str],
) -> None:
    exp, _model, recorder, text = ppo_run
    assert promtool_check_metrics(text).returncode == 0
    last, step = recorder.dumps[-1]
    assert step == _model.num_timesteps
    for core in (
        "rollout/ep_rew_mean",
        "train/value_loss",
        "train/entropy_loss",
        "train/approx_kl",
    ):
        assert core in last and keys.resolve(core, "sb3") is not None, core
    checked = 0
    for key, logged in last.items():
        target = keys.resolve(key, "sb3")
        if target is None:
            assert value(text, catalog.get("rl_unmapped_metric").name, key=key) == float(logged)
            continue
        metric = catalog.get(target.metric)
        got = value(text, metric.name, **dict(target.labels))
        assert got == pytest.approx(float(logged) * target.scale, rel=1e-6), key
        checked += 1
    assert checked >= 4
    assert exp.dropped == {}


def test_episodes_steps_phases_and_hyperparameters(
    ppo_run: tuple[Exporter, PPO, Recorder, str],
) -> None:
    _exp, model, recorder, text = ppo_run
    monitors = [env for env in model.get_env().envs]  # DummyVecEnv of Monitor-wrapped envs
    returns = [r for m in monitors for r in m.get_episode_rewards()]
    assert value(text, catalog.get("rl_episodes_total").name) == len(returns)
    last, _ = recorder.dumps[-1]
    # both are the mean of the last 100 episodes
    assert value(text, catalog.get("rl_episode_return").name) == pytest.approx(
        last["rollout/ep_rew_mean"]
    )
    assert value(text, catalog.get("rl_env_steps_total").name) == model.num_timesteps
    # the exporter's step is SB3's update count
    updates = last["train/n_updates"]
    assert value(text, catalog.get("rl_step").name) == updates
    assert value(text, catalog.get("rl_train_steps_total").name) == updates
    phase = catalog.get("rl_phase_duration_seconds").name
    assert value(text, phase + "_count", phase="rollout") == ITERATIONS
    assert value(text, phase + "_count", phase="update") == ITERATIONS
    assert value(text, phase + "_sum", phase="update") > 0
    hp = catalog.get("rl_hyperparameter").name
    assert value(text, hp, name="gamma") == pytest.approx(0.99)
    assert value(text, hp, name="n_steps") == N_STEPS


def test_process_wide_exporter_is_started_with_framework_sb3() -> None:
    rlpulse.close()
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, n_epochs=1, device="cpu")
    callback = RlpulseCallback(port=0, gpu=False, host=False, run_id="sb3-started")
    try:
        model.learn(128, callback=CallbackList([callback]))
        exp = rlpulse.get_exporter()
        assert exp is not None and callback.exporter is exp
        text = scrape(exp.url)
        info = [s for (n, s), _v in samples(text).items() if n == catalog.get("rl_run_info").name]
        labels = dict(info[0])
        assert labels["framework"] == "sb3" and labels["model"] == "PPO"
        assert sum(isinstance(f, PrometheusWriter) for f in model.logger.output_formats) == 1
        model.learn(128, callback=callback, reset_num_timesteps=False)  # a second learn() call
        assert sum(isinstance(f, PrometheusWriter) for f in model.logger.output_formats) == 1
        assert value(scrape(exp.url), catalog.get("rl_env_steps_total").name) == model.num_timesteps
    finally:
        rlpulse.close()


def test_episodes_are_recorded_as_rollouts(ppo_run: tuple[Exporter, PPO, Recorder, str]) -> None:
    exp, model, _recorder, _text = ppo_run
    assert exp._recorder.flush(30)
    conn = open_run("sb3-test")
    try:
        stored = query(conn, Filter(order="best", limit=10_000))
    finally:
        conn.close()
    returns = sorted(
        (r for m in model.get_env().envs for r in m.get_episode_rewards()), reverse=True
    )
    assert stored and stored[0]["reward"] == pytest.approx(returns[0])  # the best one is kept
    assert {r["step"] for r in stored} <= set(range(ITERATIONS * 2 * 10 + 1))
    for r in stored:
        assert r["length"] == r["reward"]  # CartPole pays 1 per step
        assert r["metadata"]["seed"] == 0 and "TimeLimit.truncated" in r["metadata"]["final_info"]


def test_an_eval_callbacks_evaluation_is_progress_not_a_stall() -> None:
    """Issue 23.2: each step of an EvalCallback's evaluation (next to the rlpulse callback) is
    a heartbeat, so a long evaluation does not read as a stall; after training the
    EvalCallback is left as it was."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import EvalCallback

    exp = Exporter(port=0, run_id="sb3-eval", gpu=False, host=False, process=False)
    beats: list[float] = []

    class Watched(gym.Wrapper):  # type: ignore[type-arg]
        def step(self, action: Any) -> Any:
            beats.append(exp.last_progress())
            time.sleep(0.001)  # an evaluation step takes time: each heartbeat is a new time
            return super().step(action)

    evaluation = EvalCallback(Watched(gym.make("CartPole-v1")), eval_freq=128, n_eval_episodes=2)
    model = PPO("MlpPolicy", make_vec_env("CartPole-v1", n_envs=1, seed=0), n_steps=128, seed=0)
    model.learn(256, callback=[RlpulseCallback(exp), evaluation])
    assert len(beats) > 20
    assert len(set(beats)) > len(beats) / 2  # nothing is logged: each step's heartbeat is new
    assert "_log_success_callback" not in vars(evaluation)
    exp.close()
