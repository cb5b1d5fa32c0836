"""The step detector's exported values are pinned (issue 28): every ``rl_step_signal`` and its
baseline, the band, the step interval, the onsets a scrape exports, and each signal's newest kept
value and onset at two probe levels, for random runs (rising, collapsing, noisy, discrete 0/1
successes, NaN among the values, a reference band) and real logs from the shared corpus, read
after every 1, 15, 150 and 1,500 logged steps. The golden values were recorded with the detector
as it was before its statistics were batched (d0d861e, one value at a time), and re-recorded once
for an intended change (the held-out drop's guard grows with the readings its best was picked
from: only ``eval_drop_ratio`` and RLEvalDrop's onsets changed); they must come back to within
``ULPS`` (numpy's SIMD sums and sorts differ in the last bits between CPUs: on one without
AVX-512, 45 of 40,675 values differed from the recording by at most 2e-15 of themselves).
Regenerate them only for an intended change of a signal:
``PYTHONPATH=. python tests/unit/test_signals_golden.py --record``."""

from __future__ import annotations

import gzip
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlpulse import Exporter
from rlpulse.detect import band, lastgood, signals
from rlpulse.offline.logs import read_log
from tests.conftest import quiet_exporter

GOLDEN = Path(__file__).parent / "data" / "signals_golden.json.gz"
ULPS = 1e-12  # the relative difference a value may show (the module doc)
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "real-logs"
REAL = (
    "other/arvindcr4__tinker-rl-lab__experiments_results_arithmetic_metrics.jsonl",
    "trl/samyakshrestha__grpo-verified-reasoner__outputs_checkpoint-1134_trainer_state.json",
    "sb3/DLR-RM__rl-trained-agents__ppo_LunarLander-v2_1_0.monitor.csv",
    "tinker-cookbook/joanvelja__tinker-cookbook__reports__data__gptoss-20b-v3b-metrics.jsonl",
)
STEPS = 1650
CADENCES = (1, 15, 150, 1500)
PROBES = (0.5, 2.0)  # levels each signal's onset is asked at (above, and below their negation)
Call = tuple[str, Any, float]  # ("log", row, step) / ("episodes", (returns, success), step)


def _checked(i: int, n: int) -> bool:
    """The reads compared: each of the first 20, every 75th (a read of every cadence) and the
    last."""
    return i < 20 or (i + 1) % 75 == 0 or i == n - 1


def _walk(rng: np.random.Generator, n: int, drift: float, sd: float) -> np.ndarray:
    return np.cumsum(rng.normal(drift, sd, n))


def _random(name: str, seed: int) -> tuple[list[Call], float]:
    """A run of ``STEPS`` log() calls of one shape, and its seconds per step."""
    rng = np.random.default_rng(seed)
    n, t = STEPS, np.arange(STEPS)
    calls: list[Call] = []
    if name == "discrete":
        p = np.where(t < 1000, np.minimum(0.95, 0.2 + t / 600), 0.1)
        for i in range(n):
            success = (rng.random(3) < p[i]).astype(float)
            calls.append(("episodes", (success.tolist(), success.tolist()), i))
            calls.append(("log", {"rl_reward_mean": float(rng.random() < p[i])}, i))
        return calls, 0.01
    reward = {
        "rising": 1 - np.exp(-t / 300) + _walk(rng, n, 0, 0.01),
        "collapsing": np.where(t < 900, t / 900, np.maximum(0.0, 1 - (t - 900) / 60)),
        "noisy": rng.normal(0.3, 0.2, n),
        "nan": np.tanh(t / 400) + rng.normal(0, 0.05, n),
    }[name]
    reward = reward + rng.normal(0, 0.02, n)
    entropy = np.maximum(0.01, 1.5 * np.exp(-t / (200 if name == "collapsing" else 2000)))
    kl = np.abs(_walk(rng, n, 0.00002, 0.005)) + np.where(rng.random(n) < 0.01, 0.5, 0.0)
    for i in range(n):
        row = {
            "rl_reward_mean": reward[i],
            "rl_reward_std": 0.0 if name == "collapsing" and i > 1000 else abs(rng.normal(0.5)),
            "rl_entropy": entropy[i] * (1 + rng.normal(0, 0.05)),
            "rl_kl_reference": kl[i],
            "rl_grad_norm": abs(rng.normal(1, 0.3)) * (30 if rng.random() < 0.01 else 1),
            "rl_value_loss": abs(rng.normal(1, 0.2)),
            "rl_advantage_std": 1.0 / (1 + i / 500) + rng.normal(0, 0.02),
            "rl_response_length_mean_tokens": 200 + i / 5 + rng.normal(0, 20),
            "rl_completion_eos_ratio": 1 - min(1.0, i / 2000) * rng.random(),
            "rl_format_compliance_ratio": 0.9 + rng.random() * 0.1,
        }
        if name == "nan" and i % 37 == 0:
            row["rl_entropy"] = math.nan
        if name == "nan" and i % 53 == 0:
            row["rl_reward_mean"] = math.inf
        if i % 25 == 0:  # held-out evaluations: a benchmark, and the run's declared objective
            row["eval_reward"] = reward[i] + rng.normal(0, 0.05)
            row["pass_rate"] = 0.5 + 0.3 * math.tanh((900 - i) / 300) + rng.normal(0, 0.02)
        calls.append(("log", {k: float(v) for k, v in row.items()}, i))
    return calls, {"rising": 1.0, "collapsing": 0.02, "noisy": 0.5, "nan": 7.0}[name]


def _real(path: Path) -> tuple[list[Call], float]:
    calls: list[Call] = []
    for rec in read_log(path):
        if rec.kind == "episode":
            calls.append(("episodes", ([rec.values["r"]], None), rec.step))
        else:
            calls.append(("log", rec.values, rec.step))
    return calls, 3.0


def _band() -> band.Band:
    def curve(slope: float) -> list[tuple[float, ...]]:
        return [(float(i), v, v) for i in range(0, STEPS, 10) for v in [min(1.0, slope * i)]]

    return band.build(
        {
            f"seed{k}": {"reward_mean": ("rl_reward_mean", curve(s))}
            for k, s in enumerate((2e-3, 3e-3))
        }
    )


SCENARIOS = ("rising", "collapsing", "noisy", "nan", "discrete", "banded")


def _scenario(name: str) -> tuple[list[Call], float, band.Band | None]:
    if name in SCENARIOS:
        seed = SCENARIOS.index(name)
        calls, seconds = _random("rising" if name == "banded" else name, seed)
        return calls, seconds, _band() if name == "banded" else None
    calls, seconds = _real(CORPUS / name)
    return calls, seconds, None


def _exporter(b: band.Band | None) -> Exporter:
    exp = quiet_exporter("golden", process=False, key_map={"pass_rate": "objective"})
    exp.detector.band = b
    return exp


def _read(exp: Exporter) -> dict[str, float]:
    """What a scrape exports of the detector, the onsets of the shipped alerts, and what each
    signal's trail answers."""
    exp.flush()
    det = exp.detector
    out = {}
    for metric, labels, value in det.samples():
        out[f"{metric.name}{labels}"] = value
    # a fresh Onsets: the exporter's own works an onset out again only where a scrape saw an
    # excursion begin, so what it holds depends on when it was read
    for metric, labels, value in lastgood.Onsets().samples(det, exp.levels, exp.checkpoints):
        out[f"{metric.name}{labels}"] = value
    for signal in sorted(signals.SIGNAL_NAMES):
        for series in det.series_of(signal):
            latest = det.latest(signal, series)
            if latest is not None:
                out[f"latest{(signal, series)}"] = float(latest[0]), latest[1]  # type: ignore[assignment]
            for level in PROBES:
                for sign in (1, -1):
                    span = det.onset(signal, series, lambda v, lv=level, s=sign: s * v > s * lv)
                    if span is not None:
                        out[f"onset{(signal, series, sign * level)}"] = span  # type: ignore[assignment]
    return out


def run(name: str, every: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(call index, what was read) at each read of ``every`` calls that ``_checked`` keeps."""
    calls, seconds, b = _scenario(name)
    exp = _exporter(b)
    try:
        for i, (kind, data, step) in enumerate(calls):
            exp.clock = lambda now=1000.0 + seconds * i: now  # the run's own cadence
            if kind == "log":
                exp.log(data, step=step)
            else:
                returns, success = data
                exp.observe_episodes(returns, [10] * len(returns), success)
                exp.log({}, step=step)
            last = i == len(calls) - 1
            if ((i + 1) % every == 0 or last) and _checked(i, len(calls)):
                yield i, json.loads(json.dumps(_read(exp)))
            elif (i + 1) % every == 0:
                exp.flush()
    finally:
        exp.close()


def _names() -> list[str]:
    return [*SCENARIOS, *REAL]


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, list):
        return len(got) == len(want) and all(map(_same, got, want))
    if math.isnan(want):
        return math.isnan(got)
    return math.isclose(got, want, rel_tol=ULPS, abs_tol=0.0)


@pytest.mark.parametrize("every", CADENCES)
@pytest.mark.parametrize("name", _names())
def test_signals_equal_the_recorded_ones(name: str, every: int) -> None:
    if name in REAL and not (CORPUS / name).exists():
        pytest.skip(f"the shared corpus is not here ({CORPUS})")
    golden = json.loads(gzip.decompress(GOLDEN.read_bytes()))[name]
    reads = 0
    for i, got in run(name, every):
        want = golden[str(i)]
        assert got.keys() == want.keys(), (i, sorted(got.keys() ^ want.keys()))
        bad = [k for k in want if not _same(got[k], want[k])]
        assert not bad, (i, [(k, got[k], want[k]) for k in bad[:5]])
        reads += 1
    assert reads >= 1


def record() -> None:
    """Write the golden values: every checked read of reads after every call."""
    golden = {name: {str(i): read for i, read in run(name, 1)} for name in _names()}
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_bytes(gzip.compress(json.dumps(golden, sort_keys=True).encode(), mtime=0))


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    record()


def test_a_detector_nobody_reads_keeps_a_bounded_backlog() -> None:
    """Values wait for a read, but past ``SETTLE_AT`` the applier reads them itself: a run that
    is never scraped keeps at most that many, and each series at most its window of values."""
    det = signals.Detector()
    for i in range(3 * signals.SETTLE_AT):
        det.observe("rl_entropy", (), 1.0 + (i % 7) / 10)
        det.observe("rl_kl_reference", (), 0.01 * (i % 5))
        if i < 2 * signals.SETTLE_AT:  # (then a trainer that logs no steps)
            det.step(float(i), 1000.0 + i)
        assert len(det._values) <= signals.SETTLE_AT
    assert all(len(t.x) <= t.keep for t in det._tracks.values())
    assert ("entropy_ratio_to_start", "") in det.held
