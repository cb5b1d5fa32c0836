"""``rlpulse band build`` and ``rlpulse replay --reference-band`` through the real promtool: a
run that learns slower than every healthy reference raises RLOutsideReferenceBand at the step it
falls behind; a healthy seed not in the band raises nothing; the band file is what was built."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from rlpulse.cli import main
from rlpulse.offline.replay import replay


def _log(path: Path, pace: float, seed: int) -> Path:
    """An SB3-style progress.csv: a running-mean return that rises ``pace`` an update to 200."""
    rng = random.Random(seed)
    rows = ["train/n_updates,time/total_timesteps,rollout/ep_rew_mean"]
    level = 20.0
    for i in range(120):
        level = min(200.0, level + pace * (1 + 0.3 * rng.gauss(0, 1)))
        rows.append(f"{i * 10},{i * 256},{level + 2 * math.sin(i):.3f}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_a_run_behind_its_healthy_references_warns_and_a_new_healthy_seed_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refs = [_log(tmp_path / f"ref{s}.csv", pace, s) for s, pace in enumerate((2.6, 3.0, 3.4))]
    out = tmp_path / "band.json"
    assert main(["band", "build", *map(str, refs), "-o", str(out)]) == 0
    assert "the band of 3 runs" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["runs"] == ["ref0", "ref1", "ref2"] and "episode_return" in data["series"]

    healthy = replay(_log(tmp_path / "healthy.csv", 3.1, 7), reference_band=out, step_seconds=15)
    assert [a.alert for a in healthy.alerts] == []
    slow = replay(_log(tmp_path / "slow.csv", 1.0, 8), reference_band=out, step_seconds=15)
    fired = [a for a in slow.alerts if a.alert == "RLOutsideReferenceBand"]
    assert fired and fired[0].labels["series"] == "episode_return"
    assert fired[0].severity == "warning" and 0 < (fired[0].onset_step or 0) < 600
    # without the band the same run raises nothing: it never had a gain to lose
    assert replay(tmp_path / "slow.csv", step_seconds=15).alerts == []


def test_replay_refuses_a_band_it_cannot_read(tmp_path: Path) -> None:
    (tmp_path / "band.json").write_text('{"rlpulse_band": 1, "series": []}')
    with pytest.raises(ValueError, match="series: expected a mapping"):
        replay(_log(tmp_path / "run.csv", 2.0, 0), reference_band=tmp_path / "band.json")
