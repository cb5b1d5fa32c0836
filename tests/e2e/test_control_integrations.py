"""The integrations act on a run's alerts (``rlpulse.control``) read from a real Alertmanager:
a real transformers ``Trainer`` saves ``checkpoint-<step>`` and stops, a real SB3 PPO saves and
``learn()`` returns, verl's real ``Tracking`` saves and ends the loop at its step boundary; each
run ends ``stopped`` naming its checkpoint, and a save-only alert saves without stopping."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from harness.amutil import alertmanager, post
from rlpulse import control
from rlpulse.runtime.exporter import Exporter


@pytest.fixture(scope="module")
def am(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with alertmanager(tmp_path_factory.mktemp("am")) as url:
        yield url


def failing(exp: Exporter) -> None:
    """Logged values that confirm the alerts the tests post: entropy falling to 5 % of its peak,
    the reward's gain lost."""
    for step in range(1, 60):
        late = step >= 40
        exp.log({"rl_entropy": 0.05 if late else 1.0, "rl_reward_mean": 0.0 if late else step / 40})
        exp.log({}, step=step)
    exp.flush()


@pytest.fixture
def paged(am: str, request: pytest.FixtureRequest) -> Iterator[tuple[Exporter, control.Control]]:
    """An exporter whose run has a critical alert firing in Alertmanager, already read."""
    run_id = f"act-{request.node.name}"[:60]
    exp = Exporter(port=0, run_id=run_id, gpu=False, host=False, final_wait=0).start()
    c = control.attach(exp, {"critical": "stop", "RLRewardCollapse": "save"}, am, interval=30)
    assert c is not None
    failing(exp)
    post(am, "RLEntropyCollapse", "critical", run_id, signal="entropy_ratio_to_peak")
    c.poller.poll()
    assert c.should_stop()
    yield exp, c
    exp.close()


def test_trl_trainer_saves_and_stops(
    tmp_path: Path, paged: tuple[Exporter, control.Control]
) -> None:
    from transformers import Trainer, TrainingArguments

    from rlpulse.integrations.trl import RlpulseCallback
    from tests.e2e.test_integration_trl import char_tokenizer, tiny_gpt2

    exp, c = paged
    tokenizer = char_tokenizer()
    ids = [tokenizer("the cat sat", padding="max_length", max_length=16)["input_ids"]] * 8
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=20,
        per_device_train_batch_size=4,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    data = [{"input_ids": i, "labels": i} for i in ids]
    callback = RlpulseCallback(exp)
    trainer = Trainer(
        model=tiny_gpt2(tokenizer), args=args, train_dataset=data, callbacks=[callback]
    )
    trainer.train()
    assert trainer.state.global_step == 1  # stopped at the first step boundary, not 20
    assert (tmp_path / "checkpoint-1").is_dir()
    assert c.exporter.checkpoints.at_or_before(1) == (1.0, str(tmp_path / "checkpoint-1"))
    assert exp.outcome == ("stopped", "RLEntropyCollapse")


def test_sb3_saves_then_learn_returns(
    tmp_path: Path, paged: tuple[Exporter, control.Control]
) -> None:
    import torch
    from stable_baselines3 import PPO

    from rlpulse.integrations.sb3 import RlpulseCallback

    exp, _ = paged
    torch.set_num_threads(1)
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, n_epochs=1, device="cpu")
    model.learn(10_000, callback=RlpulseCallback(exp, checkpoints=tmp_path))
    assert model.num_timesteps == 1  # False from the first _on_step ended learn()
    assert (tmp_path / "checkpoint-0.zip").is_file()
    assert exp.outcome == ("stopped", "RLEntropyCollapse")


class _VerlLoop:
    """The end of verl's ``RayPPOTrainer.fit`` step, as it orders it (verl's trainer module
    needs Ray and torchdata, which this environment lacks): ``is_last_step`` decided when the
    step begins, ``Tracking.log``, ``global_steps += 1``, return after the last step."""

    def __init__(self, folder: Path, total: int) -> None:
        self.global_steps, self.total_training_steps = 1, total
        self.config = SimpleNamespace(trainer=SimpleNamespace(default_local_dir=str(folder)))
        self.saved: list[int] = []

    def _save_checkpoint(self) -> None:
        (Path(self.config.trainer.default_local_dir) / f"global_step_{self.global_steps}").mkdir()
        self.saved.append(self.global_steps)

    def fit(self, tracking: Any) -> None:
        while True:
            is_last_step = self.global_steps >= self.total_training_steps
            tracking.log({"actor/entropy": 1.0, "critic/score/mean": 0.5}, step=self.global_steps)
            self.global_steps += 1
            if is_last_step:
                return


def test_verl_saves_at_its_step_boundary_and_ends_the_loop(
    tmp_path: Path, paged: tuple[Exporter, control.Control]
) -> None:
    from verl.utils.tracking import Tracking

    from rlpulse.integrations.verl import act_on_alerts, attach

    exp, c = paged
    trainer = _VerlLoop(tmp_path, total=100)
    act_on_alerts(trainer, exp)
    tracking = Tracking("proj", "exp", default_backend=[])
    attach(tracking, exp)
    trainer.fit(tracking)
    tracking.finish()
    assert trainer.saved == [1] and trainer.global_steps == 3  # step 2 was the last
    assert c.exporter.checkpoints.at_or_before(1) == (1.0, str(tmp_path / "global_step_1"))
    assert exp.outcome == ("stopped", "RLEntropyCollapse")


def test_a_save_only_alert_saves_and_training_goes_on(am: str, tmp_path: Path) -> None:
    import torch
    from stable_baselines3 import PPO

    from rlpulse.integrations.sb3 import RlpulseCallback

    exp = Exporter(port=0, run_id="act-save-only", gpu=False, host=False).start()
    try:
        c = control.attach(exp, {"critical": "stop", "RLRewardCollapse": "save"}, am, interval=30)
        assert c is not None
        failing(exp)
        post(am, "RLRewardCollapse", "critical", "act-save-only", series="reward_mean")
        c.poller.poll()
        assert c.should_save() and not c.should_stop()
        torch.set_num_threads(1)
        model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=64, n_epochs=1, device="cpu")
        model.learn(128, callback=RlpulseCallback(exp, checkpoints=tmp_path))
        assert model.num_timesteps == 128 and (tmp_path / "checkpoint-0.zip").is_file()
        assert c.action() is None and exp.outcome is None
    finally:
        exp.close()


def test_a_hand_written_loop_opted_in_from_the_environment(
    am: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlpulse

    run_id = "act-loop"
    monkeypatch.setenv("RLPULSE_ON_ALERT", "critical=stop,warning=none")
    monkeypatch.setenv("RLPULSE_ALERTMANAGER_URL", am)
    monkeypatch.setenv("RLPULSE_ALERT_POLL_INTERVAL", "0.05")
    exp = rlpulse.start(0, run_id=run_id, addr="127.0.0.1", gpu=False, host=False, final_wait=0)
    post(am, "RLEntropyCollapse", "critical", run_id, signal="entropy_ratio_to_peak")
    line, step = "", 0
    try:
        for step in range(1, 100_000):
            rlpulse.log({"entropy": 1.0 if step < 40 else 0.05}, step=step)
            if rlpulse.should_save():
                path = tmp_path / f"checkpoint-{step}"
                path.write_text("weights")
                rlpulse.checkpoint_saved(step, path)
            if rlpulse.should_stop():
                line = rlpulse.stopped(step)
                break
            time.sleep(0.005)
    finally:
        rlpulse.close()
    assert line.startswith(f"rlpulse: stopped at step {step} on RLEntropyCollapse (critical)")
    assert (tmp_path / f"checkpoint-{step}").is_file()
    assert exp.outcome == ("stopped", "RLEntropyCollapse") and rlpulse.get_exporter() is None
