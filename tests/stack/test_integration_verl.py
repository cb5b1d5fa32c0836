"""verl integration: the backend fed by verl's real ``Tracking`` (attached, and registered as a
backend name), and the follower reading the file verl's real ``file`` backend writes as it
grows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from verl.utils.tracking import Tracking

import rlpulse
from rlpulse import catalog, keys
from rlpulse.integrations import verl as rlpulse_verl
from rlpulse.integrations.verl import JsonlFollower, VerlBackend, attach, register
from rlpulse.rollouts.query import Filter, open_run, query
from rlpulse.runtime.exporter import Exporter
from tests.conftest import promtool_check_metrics, scrape, value

PHASE = catalog.get("rl_phase_duration_seconds").name
STEP = catalog.get("rl_step").name


def verl_step(step: int) -> dict[str, Any]:
    """A metrics dict shaped like verl's RayPPOTrainer.fit() logs (numpy scalars included)."""
    return {
        "training/global_step": step,
        "actor/pg_loss": np.float32(0.1 * step),
        "actor/entropy": np.float64(2.0 - 0.1 * step),
        "actor/ppo_kl": 0.001 * step,
        "actor/pg_clipfrac": 0.05,
        "actor/grad_norm": np.float32(1.5),
        "actor/lr": 1e-6,
        "critic/score/mean": 0.2 * step,
        "critic/rewards/mean": 0.2 * step - 0.01,
        "critic/advantages/mean": 0.0,
        "response_length/mean": 100.0 + step,
        "response_length/clip_ratio": 0.1,
        "timing_s/gen": 3.0 + step,
        "timing_s/update_actor": 1.5,
        "timing_s/step": 5.0 + step,
        "perf/throughput": 1234.5,
    }


def check_logged(text: str, logged: dict[str, Any]) -> None:
    for key, raw in logged.items():
        target = keys.resolve(key, "verl")
        if target is None:
            assert value(text, catalog.get("rl_unmapped_metric").name, key=key) == float(raw), key
            continue
        got = value(text, catalog.get(target.metric).name, **dict(target.labels))
        assert got == pytest.approx(float(raw) * target.scale, rel=1e-6), key


@pytest.fixture
def file_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "verl.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    return path


def test_attached_backend_gets_what_tracking_logs(exporter: Exporter, file_log: Path) -> None:
    tracking = Tracking("proj", "exp", default_backend=["file"])
    attach(tracking, exporter)
    for step in range(1, 4):
        tracking.log(verl_step(step), step=step)
    text = scrape(exporter.url)
    tracking.finish()
    assert promtool_check_metrics(text).returncode == 0
    for key in ("actor/pg_loss", "actor/entropy", "critic/score/mean", "timing_s/gen"):
        assert keys.resolve(key, "verl") is not None, key
    check_logged(text, verl_step(3))
    assert value(text, STEP) == 3
    assert value(text, PHASE + "_count", phase="gen") == 3
    assert value(text, PHASE + "_sum", phase="gen") == pytest.approx(4 + 5 + 6)
    assert exporter.dropped == {}


def test_finish_ends_the_run_only_of_an_exporter_the_backend_started(
    exporter: Exporter, file_log: Path
) -> None:
    """verl's own Tracking.finish(exit_code) at the end of training (verl 0.9 finishes only
    the backends it names): the backend's own exporter ends, as finished for exit code 0 and
    crashed otherwise; a given one keeps serving."""
    tracking = Tracking("proj", "exp", default_backend=["file"])
    attach(tracking, exporter)
    tracking.log(verl_step(1), step=1)
    tracking.finish()
    assert exporter.serving and exporter.outcome is None
    rlpulse.close()
    for exit_code, outcome in ((0, ("finished", "")), (1, ("crashed", "verl exit code 1"))):
        own = Tracking("proj", "exp", default_backend=["file"])
        backend = attach(own, port=0, addr="127.0.0.1", run_id="verl-own", gpu=False, host=False)
        own.log(verl_step(1), step=1)
        started = backend.exporter
        assert started is rlpulse.get_exporter() and started is not None
        own.finish(exit_code=exit_code)
        assert rlpulse.get_exporter() is None and not started.serving
        assert started.outcome == outcome
        own.finish()  # verl's __del__ calls it again: nothing more happens


def test_registered_backend_name_and_plugin_module(exporter: Exporter, file_log: Path) -> None:
    register(exporter=exporter)
    register(exporter=exporter)  # idempotent
    tracking = Tracking("proj", "exp", default_backend=["file", "rlpulse"])
    assert isinstance(tracking.logger["rlpulse"], VerlBackend)
    tracking.log(verl_step(7), step=7)
    assert value(scrape(exporter.url), STEP) == 7
    tracking.finish()
    # VERL_USE_EXTERNAL_MODULES imports the plugin module when verl is imported
    code = (
        "from verl.utils.tracking import Tracking\n"
        "t = Tracking('p', 'e', default_backend=['rlpulse'])\n"
        "print(type(t.logger['rlpulse']).__name__)\n"
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "rlpulse.integrations.verl_plugin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip().endswith("VerlBackend"), out.stderr[-2000:]


def test_follower_reads_the_file_backend_as_it_grows(exporter: Exporter, file_log: Path) -> None:
    tracking = Tracking("proj", "exp", default_backend=["file"])
    follower = JsonlFollower(file_log, VerlBackend(exporter))
    assert follower.poll() == 0
    tracking.log(verl_step(1), step=1)
    tracking.log(verl_step(2), step=2)
    assert follower.poll() == 2
    text = scrape(exporter.url)
    check_logged(text, verl_step(2))
    assert value(text, STEP) == 2
    tracking.log(verl_step(3), step=3)
    assert follower.poll() == 1
    assert value(scrape(exporter.url), STEP) == 3
    tracking.finish()
    # a line caught half-written waits for the next poll
    line = json.dumps({"step": 4, "data": {"actor/entropy": 0.5}}).encode() + b"\n"
    with open(file_log, "ab") as fh:
        fh.write(line[:20])
    assert follower.poll() == 0
    with open(file_log, "ab") as fh:
        fh.write(line[20:])
    assert follower.poll() == 1
    assert value(scrape(exporter.url), STEP) == 4
    # garbage is skipped and counted, the follower goes on
    with open(file_log, "ab") as fh:
        fh.write(b"not json\n" + line.replace(b'"step": 4', b'"step": 5'))
    assert follower.poll() == 1 and follower.skipped == 1
    assert value(scrape(exporter.url), STEP) == 5
    # a new run rewrites the file: read again from the start
    tracking = Tracking("proj", "exp", default_backend=["file"])
    tracking.log(verl_step(1), step=1)
    assert follower.poll() == 1
    assert value(scrape(exporter.url), STEP) == 1
    tracking.finish()


class TrainerOf:
    """``RayPPOTrainer``'s generation, validation and checkpoint methods with verl 0.9's
    signatures and effects: its trainer module needs peft, torchdata and Ray workers, which
    this test machine lacks. The phases note when the run last made progress, as they ran."""

    def __init__(self, config: Any, step: int) -> None:
        self.config, self.global_steps, self.dumped = config, step, []
        self.seen: list[tuple[str, float]] = []

    def _phase(self, name: str) -> dict[str, float]:
        exp = rlpulse.get_exporter()
        assert exp is not None
        self.seen.append((name, exp.last_progress()))
        time.sleep(0.05)
        return {}

    def _validate(self, merged: bool = False) -> dict[str, float]:
        self._get_gen_batch(None)
        return self._phase("validate")

    def _save_checkpoint(self) -> None:
        self._phase("save")

    def _get_gen_batch(self, batch: Any) -> Any:
        return self._phase("generate")

    def _maybe_log_val_generations(self, inputs: Any, outputs: Any, scores: Any) -> None:
        if self.config.trainer.log_val_generations == 0:
            return

    def _dump_generations(
        self, inputs: Any, outputs: Any, gts: Any, scores: Any, extra: Any, dump_path: Any
    ) -> None:
        self.dumped.append(dump_path)


def test_generations_are_recorded_as_rollouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from omegaconf import OmegaConf

    monkeypatch.setenv("RLPULSE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(rlpulse_verl, "_hooked", False)
    exp = rlpulse.start(port=0, run_id="verl-gen", gpu=False, host=False)
    try:
        trainer_cls = type("Trainer", (TrainerOf,), {})  # hooked here only
        rlpulse_verl.hook_trainer(trainer_cls)
        config = OmegaConf.create(
            {"trainer": {"log_val_generations": 0, "rollout_data_dir": str(tmp_path / "r")}}
        )
        trainer = trainer_cls(config, 7)
        trainer._maybe_log_val_generations(["q1 <b>", "q2"], ["a1", "a2"], [1.0, 0.0])
        extra = {"acc": [1.0, 0.0, 1.0], "pred": ["x", "y", "z"]}
        trainer._dump_generations(
            ["p1", "p2", "p3"], ["o1", "o2", "o3"], ["g1", "g2", "g3"], [0.5, 2.0, 1.0], extra,
            str(tmp_path / "r"),
        )  # fmt: skip
        trainer._dump_generations(["v"], ["w"], [None], [0.0], {}, str(tmp_path / "val"))
        assert trainer.dumped == [str(tmp_path / "r"), str(tmp_path / "val")]  # verl's runs too
        assert exp._recorder.flush(30)
        exp.flush()  # the training batch (not the validation) is drift samples too
        feats = exp.drift.features
        assert feats[("input", "prompt_length")].samples == 3
        assert feats[("behaviour", "reward[acc]")].samples == 3
        conn = open_run("verl-gen", tmp_path / "data")
        try:
            stored = query(conn, Filter(order="best", limit=100))
        finally:
            conn.close()
    finally:
        rlpulse.finish()
    splits = {r["response"]: r["metadata"]["split"] for r in stored}
    assert splits == {
        "a1": "validation",
        "a2": "validation",
        "o1": "train",
        "o2": "train",
        "o3": "train",
    }  # fmt: skip  (the validation dump is not recorded twice)
    best = stored[0]
    assert best["response"] == "o2" and best["reward"] == 2.0 and best["step"] == 7
    assert best["components"] == {"acc": 0.0} and best["metadata"]["ground_truth"] == "g2"


def test_validation_and_checkpoints_are_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """verl's validation (each generation batch) and checkpoint saving send heartbeats, at
    their start and end, with rollouts off too: a long validation is no stall (issue 23.2)."""
    monkeypatch.setattr(rlpulse_verl, "_hooked", False)
    exp = rlpulse.start(port=0, run_id="verl-beats", gpu=False, host=False)
    try:
        monkeypatch.setattr(rlpulse_verl, "_rollouts_on", False)
        trainer_cls = type("Trainer", (TrainerOf,), {})  # hooked here only
        rlpulse_verl.hook_trainer(trainer_cls)
        trainer = trainer_cls(None, 3)
        before = time.time()
        assert trainer._validate() == {} and trainer._save_checkpoint() is None
        after = exp.last_progress()
    finally:
        rlpulse.finish()
    names = [name for name, _ in trainer.seen]
    assert names == ["generate", "validate", "save"]
    assert all(at >= before for _, at in trainer.seen)  # a beat as each phase began
    assert after >= trainer.seen[-1][1] + 0.05  # and one as the last ended
    assert trainer_cls._validate.__name__ == "_validate"
