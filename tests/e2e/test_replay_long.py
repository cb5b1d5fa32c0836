"""``rlpulse replay`` over long runs (thousands of steps, over a simulated day or a million
seconds): the promtool evaluations take the better part of a minute, so they sit with the e2e
tier; the short replays are in tests/stack/test_replay.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from rlpulse.offline.logs import Record
from rlpulse.offline.replay import promtool, replay_runs, report
from rlpulse.offline.replay.timeline import build
from rlpulse.stack import config
from tests.stack.test_replay import _jsonl


def test_a_run_longer_than_a_day_names_the_step_it_fired_at(tmp_path: Path) -> None:
    """promtool writes eval times past a day as ``1d4h21m15s``: a dead reward from episode
    2000 of a 0/1 per-episode log (50 s a step, 1.7 simulated days) fires after episode 2000,
    not at the step the hours alone would name (~314)."""
    assert promtool._go_duration("1d4h21m15s") == 102075
    assert promtool._go_duration("1w2d") == 9 * 86400
    rng = random.Random(0)
    rate = [min(0.7, 0.02 + e / 1500) for e in range(2600)]
    rows = [{"step": e + 1, "reward": 0.0 if e >= 2000 else float(rng.random() < p)}
            for e, p in enumerate(rate)]  # fmt: skip
    log = tmp_path / "episodes.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (result,) = replay_runs(log, fmt="jsonl", step_seconds=50)
    lost = [
        a for a in result.alerts if a.alert == "RLRewardSignalLost" and a.severity == "critical"
    ]
    assert lost and all(a.onset_step is not None and a.onset_step > 2000 for a in lost), lost


def test_a_long_run_builds_in_memory_that_follows_its_changes() -> None:
    """(~6 s on one core; its time is not asserted: it took 88 s on a loaded CI-like run)"""
    n = 17_000  # past 1,000,000 s at 60 s a step
    recs = (Record(s, None, {"reward": (s % 7) / 7, "kl": 0.01, "entropy": 0.5}) for s in range(n))
    tl = build(recs, run_id="r", framework="trl", job="j", scrape_interval=15, step_seconds=60)
    assert tl.duration > 1e6 and len(tl.record_steps) == n and tl.scrapes == 4 * (n - 1) + 2
    # memory follows the changes (a few per record), not the 68,000 scrapes x series
    assert sum(len(runs) for runs in tl.series.values()) < 10 * n
    assert "e+" not in config.duration(tl.duration)


def test_a_long_run_is_compressed_into_the_evaluation_budget(tmp_path: Path) -> None:
    rows = [{"loss": 0.5, "reward": 0.1 + (s % 3) / 10} for s in range(17_000)]
    (result,) = replay_runs(
        _jsonl(tmp_path / "long.jsonl", rows), framework="trl", max_evaluations=400
    )
    assert result.time_scale < 1 / 100  # 1,020,000 s of run into ~6,000 s (x170)
    assert result.timeline.duration <= 400 * 15 + 30 and len(result.timeline.record_steps) == 17_000
    assert result.as_dict()["time_scale"] == result.time_scale
    assert "compressed x" in report.summary(result)
    with pytest.raises(ValueError, match="--max-evaluations must be >= 0"):
        replay_runs(tmp_path / "long.jsonl", max_evaluations=-1)
