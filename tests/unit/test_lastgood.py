"""Where a failure began, exported by the exporter itself (``rlpulse.detect.lastgood``): the onset,
the last good step before it and the newest checkpoint at or before that, for every step alert
of the run, at the shipped levels (``rlpulse.alertindex``; no alert actions needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlpulse.detect import lastgood
from rlpulse.detect.signals import Detector
from rlpulse.runtime.exporter import Exporter
from rlpulse.stack import config, levels
from tests.conftest import scrape, value

KL = "RLKLReferenceHigh"


def _kl(d: Detector, onset: int, steps: int = 120, bad: float = 3.5) -> None:
    """KL to the reference at 0.05 nats, then ``bad`` from step ``onset`` on."""
    for step in range(1, steps):
        d.observe("rl_kl_reference", (), 0.05 if step < onset else bad)
        d.step(step, float(step))


@pytest.mark.parametrize("onset", [20, 61, 100])
def test_a_sustained_signal_names_the_step_before_the_first_bad_value(onset: int) -> None:
    """kl_reference_level is the median of the last 10 values: it turns at the 5th or 6th bad
    one, never inside the failure: the last good step is the one before the first bad value
    or, where the median turned early (at a level below the average of its middle two), one
    step earlier."""
    d = Detector()
    _kl(d, onset)
    level = lastgood.levels()[KL]
    good, start = d.onset(level.signal, "", level.bad) or (None, None)
    assert good is not None and start is not None
    assert good < onset and onset - 1 - good <= 1
    assert start <= onset


def test_a_latest_value_signal_turns_at_once() -> None:
    d = Detector()
    for step in range(1, 60):
        d.observe("rl_grad_norm", (), 1.0 + 0.01 * (step % 3) if step != 50 else 100.0)
        d.step(step, float(step))
    level = lastgood.levels()["RLGradNormSpike"]
    assert d.onset(level.signal, "", level.bad) == (49, 50)


def test_levels_are_the_first_tier_shipped_or_generated(tmp_path: Path) -> None:
    """The failure begins at an alert's first level (the warning): the shipped one, or that of
    the alert_levels.yml `rlpulse generate` wrote for a config (read without the generator)."""
    assert lastgood.levels()[KL] == lastgood.Level(
        "kl_reference_level", True, 1.0, "KL to the reference", "nats"
    )
    cfg = config.from_dict({"alerts": {"kl_reference_high": {"warning": 0.5}}})
    ((rel, text),) = levels.render(cfg).items()
    (tmp_path / "alert_levels.yml").write_text(text)
    assert rel == "prometheus/alert_levels.yml"
    assert lastgood.levels(str(tmp_path / "alert_levels.yml"))[KL].level == 0.5
    assert lastgood.levels(str(tmp_path / "alert_levels.yml")).keys() == lastgood.levels().keys()


def test_the_exporter_exports_onset_last_good_and_checkpoint_without_alert_actions() -> None:
    exp = Exporter(port=0, run_id="lg-run", gpu=False, host=False).start()
    try:
        for step in range(1, 120):
            exp.log({"kl": 0.05 if step < 61 else 3.5}, step=step)
            if step % 25 == 0:
                exp.checkpoint_saved(step, f"/ckpt/checkpoint-{step}")
        exp.flush()
        text = scrape(exp.url)
    finally:
        exp.close()
    labels = {"alertname": KL, "series": ""}
    good = value(text, "rl_last_good_step", **labels)
    assert good in (59, 60)
    assert value(text, "rl_failure_onset_step", **labels) == good + 1
    resume = {**labels, "checkpoint": "/ckpt/checkpoint-50"}
    assert value(text, "rl_resume_checkpoint_step", **resume) == 50
    assert value(text, "rl_checkpoint_step") == 100


def test_unreadable_levels_say_so_and_name_no_onset(tmp_path: Path) -> None:
    bad = tmp_path / "alert_levels.yml"
    bad.write_text("alerts: [")
    assert lastgood.levels(str(bad)) == {}
