"""The reference band: built from earlier healthy runs, loaded with clear errors, and a run's
gap outside it at the same step (``rlpulse.detect.band``, the detector's ``reference_band_gap``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlpulse.detect import band
from rlpulse.detect.signals import Detector
from tests.conftest import quiet_exporter


def _curve(level: float, slope: float, wiggle: float, n: int = 100) -> list[tuple[float, ...]]:
    """(step, raw, smoothed) of a learning curve that rises ``slope`` a step to ``level``."""
    out = []
    for i in range(n):
        v = min(level, slope * i) + wiggle * math.sin(i)
        out.append((float(i), v, v))
    return out


def _refs() -> dict[str, band.Reference]:
    return {
        f"seed{k}": {"episode_return": ("rl_episode_return", _curve(100.0, s, 1.0))}
        for k, s in enumerate((2.0, 2.5, 3.0))
    }


def test_the_band_spans_every_reference_within_the_step_tolerance_and_their_noise() -> None:
    b = band.build(_refs(), tolerance=0.25)
    c = b.curves["episode_return"]
    assert b.runs == ("seed0", "seed1", "seed2") and c.worse == "below"
    assert c.steps[0] == 0 and c.steps[-1] == 99 and len(c.steps) == 100
    lo, hi = c.at(40.0)  # type: ignore[misc]
    # the slowest seed at 30 (40 less a quarter) and the fastest at 50, widened by the noise
    assert lo < 2.0 * 30 and hi > 100.0
    assert c.at(-1.0) is None and c.at(100.0) is None  # no band past the references' steps
    assert c.gap(lo + 1.0, 40.0) == (0.0, lo, hi)
    gap, _, _ = c.gap(lo - 0.2 * c.span, 40.0)  # type: ignore[misc]
    assert gap == pytest.approx(0.2)
    assert c.gap(hi + 50.0, 40.0)[0] == 0.0  # type: ignore[index]  # above: not worse


def test_entropy_is_outside_either_way_and_kl_only_above() -> None:
    refs = {
        f"r{k}": {
            "entropy": ("rl_entropy", [(float(i), 1.0, 1.0 + 0.01 * k) for i in range(20)]),
            "kl_reference": ("rl_kl_reference", [(float(i), 0.1, 0.1) for i in range(20)]),
        }
        for k in range(3)
    }
    b = band.build(refs)
    ent, kl = b.curves["entropy"], b.curves["kl_reference"]
    assert ent.gap(0.5, 10.0)[0] > 0 and ent.gap(1.5, 10.0)[0] > 0  # type: ignore[index]
    assert kl.gap(0.5, 10.0)[0] > 0 and kl.gap(0.0, 10.0)[0] == 0  # type: ignore[index]


def test_a_band_needs_two_references_and_a_series_they_share() -> None:
    with pytest.raises(ValueError, match="at least 2 runs"):
        band.build({"one": _refs()["seed0"]})
    with pytest.raises(ValueError, match="share no banded series"):
        band.build({"a": {}, "b": {}})


def test_a_band_file_round_trips_and_a_bad_one_names_what_is_wrong(tmp_path: Path) -> None:
    b = band.build(_refs())
    path = tmp_path / "band.json"
    path.write_text(b.to_json())
    assert band.load(path) == b
    data = json.loads(b.to_json())
    cases = {
        "not an rlpulse band": {**data, "rlpulse_band": 7},
        "'episode_return': metric 'rl_grad_norm'": {
            **data,
            "series": {
                "episode_return": {**data["series"]["episode_return"], "metric": "rl_grad_norm"}
            },
        },
        "steps ascending": {
            **data,
            "series": {
                "episode_return": {**data["series"]["episode_return"], "steps": [3, 2] * 50}
            },
        },
        "'x' is not a finite number": {
            **data,
            "series": {"episode_return": {**data["series"]["episode_return"], "low": ["x"] * 100}},
        },
    }
    for said, bad in cases.items():
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=said):
            band.load(path)
    with pytest.raises(ValueError, match="no-such"):
        band.load(tmp_path / "no-such.json")


def _run(det: Detector, values: list[float], start: int = 0) -> None:
    for i, v in enumerate(values, start):
        det.observe("rl_episode_return", (), v)
        det.step(float(i), float(i))


def _samples(det: Detector) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(m.name, labels): v for m, labels, v in det.samples()}


def test_a_run_behind_every_healthy_seed_exports_its_gap_and_the_band() -> None:
    b = band.build(_refs())
    healthy, behind = Detector(), Detector()
    healthy.band = behind.band = b
    _run(healthy, [min(100.0, 2.4 * i) for i in range(60)])
    _run(behind, [min(100.0, 0.5 * i) for i in range(60)])
    key = ("rl_step_signal", ("reference_band_gap", "episode_return"))
    assert _samples(healthy)[key] == 0.0
    got = _samples(behind)
    assert got[key] > 0.1  # a quarter of the slowest seed's pace: far behind at step 59
    low = got[("rl_reference_band", ("episode_return", "low"))]
    assert low == pytest.approx(b.curves["episode_return"].at(58.0)[0])  # type: ignore[index]
    assert ("rl_reference_band", ("episode_return", "high")) in got
    _run(behind, [50.0] * 50, 60)  # past step 99, the references' last: no band, nothing exported
    assert not any("reference_band" in str(k) for k in _samples(behind))


def test_without_a_band_nothing_is_exported_and_an_unreadable_one_is_said_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    det = Detector()
    _run(det, [float(i) for i in range(30)])
    assert not any(
        s[0] == "rl_reference_band" or "reference_band_gap" in s[1] for s in _samples(det)
    )
    bad = tmp_path / "band.json"
    bad.write_text("{")
    exp = quiet_exporter("r", process=False, reference_band=bad)
    assert exp.detector.band is None
    assert "reference band" in caplog.text and "not compared" in caplog.text
    exp.close()
    with pytest.raises(ValueError, match="reference band"):
        quiet_exporter("r", process=False, reference_band=bad, strict=True)
