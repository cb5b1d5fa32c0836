"""Progress that logs no step (an evaluation, a checkpoint save) keeps a run from looking
stalled: ``Exporter.progress()`` and the TRL callback's evaluation hooks move
``rl_last_progress_timestamp_seconds``, which RLTrainingStalled reads."""

from __future__ import annotations

import time

from rlpulse.runtime.exporter import Exporter
from tests.conftest import scrape, value

PROGRESS = "rl_last_progress_timestamp_seconds"


def test_a_heartbeat_or_a_checkpoint_is_progress_a_step_too() -> None:
    exp = Exporter(port=0, run_id="progress", gpu=False, host=False).start()
    try:
        exp.log({"loss": 1.0}, step=1)
        exp.flush()
        stepped = value(scrape(exp.url), "rl_last_step_timestamp_seconds")
        assert value(scrape(exp.url), PROGRESS) == stepped
        time.sleep(0.05)
        exp.progress()  # an evaluation batch
        beat = value(scrape(exp.url), PROGRESS)
        assert beat > stepped
        assert value(scrape(exp.url), "rl_last_step_timestamp_seconds") == stepped
        time.sleep(0.05)
        exp.checkpoint_saved(1, "/ckpt/checkpoint-1")
        assert value(scrape(exp.url), PROGRESS) > beat
    finally:
        exp.close()


def test_the_trl_callback_beats_on_every_evaluation_batch() -> None:
    from rlpulse.integrations.trl import RlpulseCallback

    exp = Exporter(port=0, run_id="progress-trl", gpu=False, host=False)
    cb = RlpulseCallback(exp)
    cb.exporter = exp  # as on_train_begin sets it
    before = exp.last_progress()
    time.sleep(0.01)
    cb.on_prediction_step(None, None, None)  # type: ignore[arg-type]
    assert exp.last_progress() > before


def test_the_process_wide_heartbeat() -> None:
    """``rlpulse.progress()`` beats for the exporter ``start()`` made; before it, nothing."""
    import rlpulse

    rlpulse.progress()  # no exporter yet: nothing to do, nothing raised
    exp = rlpulse.start(0, addr="127.0.0.1", run_id="progress-module", gpu=False, host=False)
    try:
        before = exp.last_progress()
        time.sleep(0.01)
        rlpulse.progress()
        assert exp.last_progress() > before
    finally:
        rlpulse.close()
