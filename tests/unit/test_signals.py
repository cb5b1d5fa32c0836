"""Step-indexed detection signals (rlpulse.detect.signals), fed through a real Exporter's log()."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rlpulse.detect import signals, windows
from rlpulse.detect.signals import (
    FROZEN_VALUES,
    NOISE_LAGS,
    SIGNALS,
    Detector,
    Drops,
    StepWindows,
    Stretches,
    Track,
)
from rlpulse.runtime.exporter import Exporter
from tests.conftest import fork_child_exits_0, replay_jsonl


def _exporter(**options: Any) -> Exporter:
    return Exporter(port=0, run_id="sig", gpu=False, host=False, process=False, **options)


def _signals(exp: Exporter) -> dict[tuple[str, str], float]:
    """What a scrape would read now."""
    exp.flush()
    return {
        (labels[0], labels[1]): v
        for metric, labels, v in exp.detector.samples()
        if metric.name == "rl_step_signal"
    }


def _feed(exp: Exporter, rows: list[dict[str, float]], start: int = 0) -> None:
    for i, row in enumerate(rows):
        exp.log(row, step=start + i)


def _fed(rows: list[dict[str, float]]) -> dict[tuple[str, str], float]:
    """The signals a scrape reads once a fresh run has logged ``rows``, a step each."""
    exp = _exporter()
    _feed(exp, rows)
    return _signals(exp)


def _clocked(seconds_per_step: float, **options: Any) -> Exporter:
    """An exporter whose run clock advances ``seconds_per_step`` per logged step."""
    exp = _exporter(**options)
    calls = iter(range(10**9))
    exp.clock = lambda: next(calls) * seconds_per_step
    return exp


def test_entropy_collapse_against_the_runs_peak() -> None:
    sig = _fed([{"entropy": 1.0}] * 10 + [{"entropy": 0.05}] * 3)
    assert sig[("entropy_ratio_to_peak", "")] == 0.05


def test_entropy_blowup_against_the_runs_start() -> None:
    sig = _fed([{"entropy": 0.9}] * 10 + [{"entropy": 2.7}] * 3)
    assert sig[("entropy_ratio_to_start", "")] == 3.0


def test_a_one_step_spike_is_held_for_hold_steps_whenever_it_is_read() -> None:
    """The exported value is the worst of the last ``hold`` values (a step a minute: no other
    value falls within ``hold_seconds``): reading it changes nothing."""
    exp = _clocked(60.0)
    _feed(exp, [{"grad_norm": 1.0 + 0.01 * i} for i in range(20)])
    _signals(exp)  # a scrape
    _feed(exp, [{"grad_norm": 50.0}, {"grad_norm": 1.0}], start=20)
    assert _signals(exp)[("grad_norm_spike_ratio", "policy")] > 40
    assert _signals(exp)[("grad_norm_spike_ratio", "policy")] > 40  # a second read: the same
    _feed(exp, [{"grad_norm": 1.0}] * 2, start=22)  # three values after the spike
    assert _signals(exp)[("grad_norm_spike_ratio", "policy")] < 2


def test_a_fast_trainers_spike_is_held_for_hold_seconds_of_its_clock() -> None:
    """A trainer logging a step every 0.5 s logs 30 steps between two 15 s scrapes: its one-row
    spike is exported for the 30 s (60 steps) after it, so every scrape cadence sees it, and
    what is exported is the same whether it is read at every step or once in a while."""
    rows = [{"grad_norm": 1.0 + 0.01 * (i % 7)} for i in range(200)]
    rows[100] = {"grad_norm": 80.0}
    every, sparse = _clocked(0.5), _clocked(0.5)
    seen_every, seen_sparse = [], []
    for i, row in enumerate(rows):
        every.log(row, step=i)
        sparse.log(row, step=i)
        seen_every.append(_signals(every).get(("grad_norm_spike_ratio", "policy"), math.nan))
        if i % 30 == 29:  # a 15 s scrape
            seen_sparse.append((i, _signals(sparse).get(("grad_norm_spike_ratio", "policy"))))
    spiked = [i for i, v in enumerate(seen_every) if v > 40]
    assert spiked == list(range(100, 161))  # the spike's step and the 30 s after it
    assert [(i, seen_every[i]) for i, _ in seen_sparse[1:]] == seen_sparse[1:]
    assert any(v > 40 for _, v in seen_sparse)


def test_a_run_that_logs_no_step_holds_its_values_by_count() -> None:
    """Without a step there is no run clock: a spike is held for ``hold`` values only."""
    exp = _exporter()
    for i in range(20):
        exp.log({"grad_norm": 1.0 + 0.01 * i})
    exp.log({"grad_norm": 50.0})
    assert _signals(exp)[("grad_norm_spike_ratio", "policy")] > 40
    for _ in range(3):
        exp.log({"grad_norm": 1.0})
    assert _signals(exp)[("grad_norm_spike_ratio", "policy")] < 2


def test_grad_norm_spikes_are_relative_to_the_run() -> None:
    """A run whose stable norm is ~1e5 is not spiking; steps with ~0 norm make no spikes."""
    rng = random.Random(0)
    sig = _fed([{"grad_norm": 1e5 * (1 + 0.2 * rng.random())} for _ in range(60)])
    assert sig[("grad_norm_spike_ratio", "policy")] < 2
    sig = _fed([{"grad_norm": 0.001 if i % 2 else 0.4} for i in range(60)])
    assert sig[("grad_norm_spike_ratio", "policy")] < 2


def test_kl_jumps_need_a_meaningful_level() -> None:
    exp = _exporter()
    _feed(exp, [{"kl": 0.0}] * 10 + [{"kl": 0.002}])  # verl with a tiny KL: no jump
    assert _signals(exp)[("kl_reference_zscore", "")] == 0.0
    _feed(exp, [{"kl": 2.0}], start=11)
    assert _signals(exp)[("kl_reference_zscore", "")] > 50


def test_sustained_kl_needs_half_of_ten_values() -> None:
    assert _fed([{"kl": 10.0}] * 4 + [{"kl": 0.3}] * 6)[("kl_reference_level", "")] < 1
    assert _fed([{"kl": 0.3}] * 4 + [{"kl": 10.0}] * 6)[("kl_reference_level", "")] == 10.0


def test_value_loss_ratio_never_divides_by_zero() -> None:
    sig = _fed([{"value_loss": 0.0}] * 20 + [{"value_loss": 0.5}] * 3)
    assert ("value_loss_ratio", "") not in sig or math.isfinite(sig[("value_loss_ratio", "")])


def test_reward_collapse_after_learning_and_noise() -> None:
    ramp = [{"reward": min(i / 20, 1.0)} for i in range(40)]
    sig = _fed(ramp + [{"reward": 0.0}] * 3)  # below where it started: more than all lost
    assert sig[("reward_gain_lost_ratio", "reward_mean")] > 1.0
    # a reward that only wiggles around 0 has gained nothing to lose
    rng = random.Random(1)
    sig = _fed([{"reward": rng.choice([0.0, 0.0, 0.8])} for _ in range(60)])
    assert sig[("reward_gain_lost_ratio", "reward_mean")] == 0.0


def test_reward_hacking_against_the_true_objective() -> None:
    """Reward rises while the objective, read every 10 steps, stays flat: the rise counts once
    an objective reading fails to improve; an improving objective clears it."""
    exp = _exporter()
    for step in range(60):
        row: dict[str, float] = {"reward": 0.2 + 0.01 * step}
        if step % 10 == 0:
            row["test/env/all/correct"] = 0.01
        exp.log(row, step=step)
    hacked = _signals(exp)[("reward_hacking_rise_ratio", "reward_mean")]
    assert hacked > 1.0
    exp = _exporter()
    for step in range(60):
        row = {"reward": 0.2 + 0.01 * step}
        if step % 10 == 0:
            row["test/env/all/correct"] = 0.01 * step
        exp.log(row, step=step)
    assert _signals(exp).get(("reward_hacking_rise_ratio", "reward_mean"), 0.0) == 0.0


def test_a_declared_objective_alone_judges_hacking() -> None:
    """TRL evaluates the training reward on held-out prompts too (``eval_reward``): it rises
    with the hack, so once a key is declared the true objective, only that one counts."""
    exp = _exporter(key_map={"eval_rewards/correct/mean": "objective"})
    for step in range(60):
        row: dict[str, float] = {"reward": 0.2 + 0.01 * step}
        if step % 10 == 0:
            row |= {"eval_rewards/correct/mean": 0.3, "eval_reward": 0.2 + 0.01 * step}
        exp.log(row, step=step)
    assert _signals(exp)[("reward_hacking_rise_ratio", "reward_mean")] > 1.0


def test_zero_std_from_reward_std_and_saturation() -> None:
    """Older TRL logs no zero-std share: reward_std == 0 is the evidence. A run saturated at its
    best reward has one reward per group and nothing to fix."""
    assert _fed([{"reward": 0.1, "reward_std": 0.0}] * 12)[("zero_std_unsolved_ratio", "")] == 1.0
    rows = [{"reward": min(i / 10, 1.0), "frac_reward_zero_std": 0.0} for i in range(12)]
    sig = _fed(rows + [{"reward": 1.0, "frac_reward_zero_std": 1.0}] * 12)
    assert sig[("zero_std_unsolved_ratio", "")] == 0.0


def test_an_end_of_sequence_share_is_read_as_truncation() -> None:
    assert _fed([{"env/all/format_eos": 0.46}] * 5)[("truncation_level", "")] == 0.54


def test_a_level_waits_for_the_steps_its_text_claims() -> None:
    """Issue 23.3: a 3-step smoke test has no "median of the last 5 logged steps"."""
    assert ("truncation_level", "") not in _fed([{"env/all/format_eos": 0.0}] * 3)
    sig = _fed([{"reward": 0.1, "reward_std": 0.0}] * 9)  # "of the last 10 batches"
    assert ("zero_std_unsolved_ratio", "") not in sig


def test_eval_drop_beyond_the_readings_noise() -> None:
    exp = _exporter()
    _feed(exp, [{"val/test_score/gsm8k": v} for v in (0.27, 0.31, 0.20, 0.29, 0.23, 0.30, 0.28)])
    assert _signals(exp)[("eval_drop_ratio", "gsm8k,eval")] == 0.0
    _feed(exp, [{"val/test_score/gsm8k": v} for v in (0.05, 0.04, 0.03)], start=7)
    assert _signals(exp)[("eval_drop_ratio", "gsm8k,eval")] > 0.8


@pytest.mark.parametrize("seed", range(4))
def test_a_long_noisy_eval_is_no_drop_from_its_luckiest_best(seed: int) -> None:
    """The best of 200 noisy medians sits ~2 sd above the level: a dip of noise below it is no
    drop (issue 24, the healthy demo's eval: 128 samples a reading), and a real fall after as
    many readings still is, at its second reading."""
    rng = np.random.default_rng(seed)
    exp = _clocked(60.0)  # a minute a step: the exported value holds a few readings, not all
    key = ("eval_drop_ratio", "gsm8k,eval")
    seen = []
    for i, v in enumerate(rng.normal(0.7, 0.03, 200).clip(0, 1)):
        _feed(exp, [{"val/test_score/gsm8k": float(v)}], start=i)
        seen.append(_signals(exp).get(key, 0.0))
    assert max(v for v in seen if v == v) < 0.15  # RLEvalDrop's warning level
    _feed(exp, [{"val/test_score/gsm8k": v} for v in (0.46, 0.48)], start=200)
    assert _signals(exp)[key] > 0.3


def test_step_interval_is_the_runs_own_cadence() -> None:
    det = Detector()
    for i in range(10):
        det.step(i, 1000.0 + 1140.0 * i)  # 19-minute steps
    assert det.interval() == 1140.0


def test_every_signal_has_a_unit_and_a_direction() -> None:
    for s in SIGNALS:
        assert s.worse in ("above", "below") and s.unit in ("fraction", "multiple", "nats", "sigma")


def test_a_replayed_log_and_a_live_run_compute_the_same_signals(tmp_path: Path) -> None:
    """The same rows logged live and replayed from a JSONL file give the same signals (each
    step is scraped once: with a minute a step the replay scrapes after every record)."""
    rows = [
        {"entropy": 1.0 / (1 + 0.1 * s), "kl": 0.01 * s, "reward": 0.5 + 0.01 * (s % 7)}
        for s in range(40)
    ]
    live = _clocked(60.0)  # the replay's clock: a minute a step
    for step, row in enumerate(rows):  # scraped after every step, as the replay's clock does
        live.log(row, step=step)
        live_final = _signals(live)
    tl = replay_jsonl(tmp_path / "run.jsonl", [{"step": s, **r} for s, r in enumerate(rows)])
    replayed = {}
    for key in tl.keys_of("rl_step_signal"):
        labels = dict(part.split("=", 1) for part in key[key.index("{") + 1 : -1].split(","))
        signal = labels["signal"].strip('"')
        series = labels.get("series", '""').strip('"')
        replayed[(signal, series)] = tl.values(key)[-1]
    assert replayed == live_final


def _trace(
    exp: Exporter, rows: list[dict[str, float]], key: tuple[str, str], read_from: int = 0
) -> list[float]:
    """The signal as a scrape after every logged row from ``read_from`` on reads it (0 while
    undefined). What a read returns does not depend on when the one before it was made
    (test_calls_properties), so rows a test has already read in another run go unread."""
    out = []
    for step, row in enumerate(rows):
        exp.log(row, step=step)
        if step >= read_from:
            out.append(_signals(exp).get(key, 0.0))
    return out


def _running_mean(values: list[float], window: int, every: int) -> list[float]:
    """SB3's ep_rew_mean: the mean of the last ``window`` episodes, logged every ``every``."""
    return [
        sum(values[max(0, i - window) : i]) / len(values[max(0, i - window) : i])
        for i in range(every, len(values) + 1, every)
    ]


def test_the_noise_of_a_running_mean_is_its_wander_not_its_step() -> None:
    """Issue 24.2: SB3's 100-episode mean of random CartPole returns (~21 +- 11) logged every 4
    episodes moves ~0.1 from one row to the next but wanders by ~1 over 25 rows; once 200 rows
    are seen the noise is that wander (step-to-step alone reads it ~10x too small)."""
    from rlpulse.detect.signals import StepWindows, Track

    for seed in range(4):
        rng = random.Random(seed)
        episodes = [rng.gauss(21, 11) for _ in range(1200)]
        track = Track(StepWindows())
        for v in _running_mean(episodes, 100, 4)[:200]:
            track.add(v)
        assert 0.5 < track.noise() < 2.0, (seed, track.noise())
        assert track.noise(longest=1) < 0.3


def test_a_small_early_gain_within_the_noise_is_not_the_gain() -> None:
    """Issue 24.3: a reward rising 0.2 -> 0.7 over 200 steps with noise 0.02: no warning
    from a noise dip early on, in any of 16 seeds; a real loss later still counts."""
    for seed in range(16):
        rng = random.Random(seed)
        rows = [{"reward": 0.2 + 0.5 * s / 200 + rng.gauss(0, 0.02)} for s in range(200)]
        exp = _exporter()
        worst = max(_trace(exp, rows, ("reward_gain_lost_ratio", "reward_mean")))
        assert worst < 0.5, (seed, worst)
    _feed(exp, [{"reward": 0.2 + rng.gauss(0, 0.02)} for _ in range(5)], start=200)
    assert _signals(exp)[("reward_gain_lost_ratio", "reward_mean")] > 0.75


def test_a_collapse_keeps_its_loss_while_it_persists() -> None:
    """The fall's own step is not noise: a collapse that persists keeps reading as one."""
    rng = random.Random(3)
    exp = _exporter()
    rows = [{"reward": min(s / 30, 1.0) + rng.gauss(0, 0.03)} for s in range(80)]
    trace = _trace(
        exp,
        rows + [{"reward": rng.gauss(0, 0.03)} for _ in range(100)],
        ("reward_gain_lost_ratio", "reward_mean"),
    )
    assert min(trace[84:]) > 0.75


def test_a_return_back_at_its_start_pages_whatever_its_level() -> None:
    """Issue 24.8: a 100-episode mean that only rose part of the way (-1400 -> -1100, a
    short run) and falls back to its start has lost all of it, at any offset."""
    rng = random.Random(0)
    episodes = [rng.gauss(-1400, 150) for _ in range(200)]
    episodes += [rng.gauss(-600, 100) for _ in range(40)]  # learned, then the blow-up
    episodes += [rng.gauss(-1400, 150) for _ in range(200)]
    rows = [{"rollout/ep_rew_mean": v} for v in _running_mean(episodes, 100, 2)]
    exp = _exporter(metadata={"framework": "sb3"})
    trace = _trace(exp, rows, ("reward_gain_lost_ratio", "episode_return"))
    assert trace[-1] > 0.75


A2C_RUNS = Path(__file__).resolve().parents[1] / "data" / "sb3-a2c-cartpole"


def test_a_classic_policy_that_collapses_and_relearns_warns_and_does_not_page() -> None:
    """Healthy SB3 A2C on CartPole, default settings (real runs, tests/data): the return falls
    from 148-338 to 10-15 within a few rows, or to half, and is relearnt 17-39 rows later. Each
    paged RLRewardCollapse critical; a fall now warns as fast and pages only once it holds."""
    import csv

    from rlpulse.detect.signals import UNCONFIRMED

    for path in sorted(A2C_RUNS.glob("seed*.csv")):
        with path.open() as f:
            rows = [
                {"rollout/ep_rew_mean": float(r["rollout/ep_rew_mean"])}
                for r in csv.DictReader(f)
                if r["rollout/ep_rew_mean"]
            ]
        exp = _exporter(metadata={"framework": "sb3"})
        trace = _trace(exp, rows, ("reward_gain_lost_ratio", "episode_return"))
        assert 0.5 <= max(trace) <= UNCONFIRMED, (path.name, max(trace))


def test_a_classic_return_that_falls_and_stays_pages_once_the_fall_holds() -> None:
    """A return that collapses and stays (random CartPole episodes after a learned policy's,
    as SB3's 100-episode mean logged every 4 episodes) warns within a few rows of the mean's
    fall and pages once the fall held ``HELD_FALL`` readings, with the failure's first rows as
    the onset; so does one that relearns too little to count (2 % of its gain over 40 rows)."""
    from rlpulse.detect.signals import HELD_FALL, UNCONFIRMED

    for seed in range(3):
        for relearnt in (0.0, 10.0):  # over the 40 rows (160 episodes) a fall must hold
            rng = random.Random(seed)
            learn = [rng.gauss(min(20 + 480 * e / 600, 500), 15) for e in range(1000)]
            broken = [rng.gauss(21 + relearnt * e / 160, 11) for e in range(600)]
            rows = [{"rollout/ep_rew_mean": v} for v in _running_mean(learn + broken, 100, 4)]
            exp = _clocked(60.0, metadata={"framework": "sb3"})  # (a value held 3 rows)
            key = ("reward_gain_lost_ratio", "episode_return")
            trace = _trace(exp, rows, key, read_from=250)
            warned = next(i for i, v in enumerate(trace) if v >= 0.5)
            paged = next(i for i, v in enumerate(trace) if v >= 0.75)
            assert warned <= 20 and max(trace[:paged]) <= UNCONFIRMED, (seed, relearnt, warned)
            assert HELD_FALL - 3 <= paged - warned <= HELD_FALL + 5, (seed, relearnt, paged, warned)
            assert min(trace[paged:]) >= 0.75, (seed, relearnt)
            onset = exp.detector.onset(*key, lambda v: v >= 0.75)
            assert onset is not None and 250 <= onset[1] <= 262, (seed, relearnt, onset)


def test_entropy_falling_while_the_return_holds_its_best_is_convergence() -> None:
    """Issue 24.4: entropy 1.38 -> 0.11 while the return rose and holds its best reads 1;
    the same entropy with the return falling back (or never rising) is a collapse."""
    rng = random.Random(0)
    ramp = [min(s / 40, 1.0) for s in range(120)]
    entropy = [max(0.11, 1.38 - 0.015 * s) for s in range(120)]
    rows = [
        {"rollout/ep_rew_mean": 300 + 150 * r + rng.gauss(0, 3), "train/entropy_loss": -e}
        for r, e in zip(ramp, entropy, strict=True)
    ]
    exp = _exporter(metadata={"framework": "sb3"})
    assert min(_trace(exp, rows, ("entropy_ratio_to_peak", ""))[5:]) > 0.35
    fall = [{"rollout/ep_rew_mean": 300 + rng.gauss(0, 3), "train/entropy_loss": -0.11}] * 6
    _feed(exp, fall, start=120)
    assert _signals(exp)[("entropy_ratio_to_peak", "")] < 0.2
    flat = [
        {"rollout/ep_rew_mean": 300 + rng.gauss(0, 3), "train/entropy_loss": -e} for e in entropy
    ]
    exp = _exporter(metadata={"framework": "sb3"})
    assert min(_trace(exp, flat, ("entropy_ratio_to_peak", ""))[5:]) < 0.2


def test_entropy_that_falls_as_the_reward_learns_is_no_collapse() -> None:
    """SB3 A2C and PPO on FrozenLake (2026-12-05): the policy turns deterministic while its
    success rises from 0.02 to 0.75, entropy leading the success it buys by a few logged rows
    (it halved before the success's gain stood out of its noise), then dipping by a third of its
    gain. That read critical; it is learning. A temperature-like collapse from a reward that
    stops improving still reads one."""
    for seed in range(3):
        rng = random.Random(seed)
        n = 120
        success = [0.02 + 0.73 / (1 + math.exp(-(s - 45) / 6)) for s in range(n)]
        entropy = [1.38 * (0.005 + 0.995 / (1 + math.exp((s - 36) / 2.5))) for s in range(n)]
        rows = [
            {"rollout/ep_rew_mean": round(p + rng.gauss(0, 0.02), 2), "train/entropy_loss": -e}
            for p, e in zip(success, entropy, strict=True)
        ]
        dip = [  # then a dip the reward's own alert does not warn on (a third of the gain)
            {"rollout/ep_rew_mean": round(0.75 - 0.25 * (k < 8) + rng.gauss(0, 0.02), 2),
             "train/entropy_loss": -entropy[-1]}
            for k in range(16)
        ]  # fmt: skip
        exp = _exporter(metadata={"framework": "sb3"})
        assert min(_trace(exp, rows + dip, ("entropy_ratio_to_peak", ""))[5:]) > 0.35, seed
        flat = [
            {"rollout/ep_rew_mean": round(0.3 + rng.gauss(0, 0.02), 2), "train/entropy_loss": -e}
            for e in entropy
        ]
        exp = _exporter(metadata={"framework": "sb3"})
        assert min(_trace(exp, flat, ("entropy_ratio_to_peak", ""))[5:]) < 0.2, seed


def test_a_sparse_success_fed_an_episode_at_a_time_reads_no_fall() -> None:
    """PPO on FrozenLake replayed from its Monitor file (2026-12-05): episodes handed over one
    at a time made the exporter's 100-episode mean a reading per episode. Its first success
    at episode ~40 read as a peak of 1/40 that every failure after it eroded, and the mean's
    long stretches at one value read as a frozen reward: critical on healthy seeds. The mean is
    judged once its window is full, every quarter window; a success that then falls to 0 is
    still read, by the episodes' own drops (a discrete reward's mean is not judged as a level
    where its episodes are read: ``Detector.discrete_episodes``)."""
    for seed in range(3):
        rng = random.Random(seed)
        exp = _exporter()
        worst: dict[tuple[str, str], float] = {}
        for ep in range(3000):
            p = min(0.6, 0.015 + max(0, ep - 1500) / 2500)
            exp.observe_episodes([float(rng.random() < p)], [8.0])
            exp.log({}, step=ep)
            if ep % 10 == 0:
                for key, v in _signals(exp).items():
                    worst[key] = max(worst.get(key, 0.0), v)
        warning = {"reward_gain_lost_ratio": 0.5, "reward_frozen_ratio": 2.0}  # (the alerts')
        for signal, level in warning.items():
            assert worst.get((signal, "episode_return"), 0.0) < level, (seed, signal, worst)
        for ep in range(3000, 3400):
            exp.observe_episodes([0.0], [8.0])
            exp.log({}, step=ep)
        assert _signals(exp)[("reward_gain_lost_ratio", "episodes")] >= 0.75, seed


def _sb3_sparse(
    rate: list[float], seed: int, broken_at: int
) -> tuple[float, int | None, int | None]:
    """An SB3 run on a 0/1 success as its callback reports it: each episode
    (``observe_episodes``) and the 100-episode mean logged every 4 episodes. The worst lost
    gain of any series before ``broken_at``, and the rows from it to the first warning and to
    the first critical one."""
    rng = random.Random(seed)
    exp = _exporter(metadata={"framework": "sb3"})
    wins: list[float] = []
    worst, warned, caught = 0.0, None, None
    for ep, p in enumerate(rate):
        wins.append(float(rng.random() < p))
        exp.observe_episodes(wins[-1:], [8.0])
        if ep % 4 == 3:
            exp.log({"rollout/ep_rew_mean": sum(wins[-100:]) / len(wins[-100:])}, step=ep)
            read = _signals(exp).items()
            lost = max([v for (s, _), v in read if s == "reward_gain_lost_ratio"], default=0.0)
            if ep < broken_at:
                worst = max(worst, lost)
            else:
                warned = (ep - broken_at) // 4 if warned is None and lost > 0.5 else warned
                caught = (ep - broken_at) // 4 if caught is None and lost >= 0.75 else caught
    return worst, warned, caught


def test_a_sparse_successs_100_episode_mean_is_judged_by_its_episodes() -> None:
    """SB3 DQN on slippery FrozenLake at default settings (2026-12-05): the 100-episode mean of
    a success that is still rare (a few in 100 while it explores) read one or two lucky
    successes as a gain, and their leaving the window as all of it lost: critical on healthy
    runs (a run folder of seed 0; 17 of 48 synthetic seeds of a success that only ever rises).
    Where the episodes are read, a discrete reward's mean is left to their own drops: no
    healthy seed pages, and a policy that breaks (its reward zeroed, or back to chance) still
    warns within 20 rows of 4 episodes at 0.3 success (the mean's own 75% of its window: 19),
    6 at 0.5, 4 at 0.7, and pages once the drop lasted ``DISCRETE_PAGE`` episodes."""
    from rlpulse.detect.signals import DISCRETE_PAGE

    for top, ramp, within in ((0.1, 1000, None), (0.3, 1500, 20), (0.5, 2500, 6), (0.7, 3000, 4)):
        for seed in range(4):
            learn = [0.015] * 300 + [0.015 + (top - 0.015) * e / ramp for e in range(ramp)]
            after = 0.0 if seed % 2 else 0.015  # zeroed, or back to the random policy's luck
            rate = [*learn, *[top] * 300, *[after] * (400 if within else 0)]
            worst, warned, caught = _sb3_sparse(rate, seed + 100, len(learn) + 300)
            assert worst < 0.75, (top, seed, worst)
            if within is not None:
                assert warned is not None and warned <= within, (top, seed, warned)
                assert caught is not None and caught <= DISCRETE_PAGE // 4 + within, (top, seed)


def test_a_proxy_rising_far_over_a_flat_objective_is_hacking() -> None:
    """Issue 24.5: proxy 0.20 -> 0.70, declared objective 0.000-0.010 from its first reading
    (it never fell): hacking, in every seed. An objective rising with the proxy clears it."""
    for seed in range(6):
        rng = random.Random(seed)
        exp = _exporter(key_map={"eval/correct": "objective"})
        for step in range(100):
            row = {"reward": 0.2 + 0.5 * step / 100 + rng.gauss(0, 0.02)}
            if step % 5 == 0:
                row["eval/correct"] = rng.choice([0.0, 0.005, 0.01])
            exp.log(row, step=step)
        assert _signals(exp)[("reward_hacking_rise_ratio", "reward_mean")] > 0.5, seed
    exp = _exporter(key_map={"eval/correct": "objective"})
    for step in range(100):
        row = {"reward": 0.2 + 0.5 * step / 100 + rng.gauss(0, 0.02)}
        if step % 5 == 0:
            row["eval/correct"] = 0.1 + 0.5 * step / 100 + rng.gauss(0, 0.01)
        exp.log(row, step=step)
    assert _signals(exp).get(("reward_hacking_rise_ratio", "reward_mean"), 0.0) < 0.25


def test_a_held_out_best_never_decays() -> None:
    """Issue 23.4: 60 readings after the drop, the best is still the best of the run."""
    exp = _exporter()
    good = [{"val/test_score/gsm8k": 0.31 + 0.005 * (i % 3)} for i in range(10)]
    bad = [{"val/test_score/gsm8k": 0.008 + 0.004 * (i % 3)} for i in range(80)]
    trace = _trace(exp, good + bad, ("eval_drop_ratio", "gsm8k,eval"))
    assert min(trace[13:]) > 0.9
    assert exp.detector.held[("eval_drop_ratio", "gsm8k,eval")].baseline >= 0.31


def test_a_reward_frozen_below_its_peak_is_a_lost_signal() -> None:
    """Issue 24.7: per-episode returns that varied, then read 0 for every episode (a broken
    grader), page; a reward pinned at its peak (solved CartPole) and 0/1 returns of a learning
    FrozenLake agent do not."""
    rng = random.Random(0)
    exp = _exporter()
    returns = [rng.uniform(0, 100) for _ in range(60)] + [0.0] * 40
    trace = _trace(
        exp, [{"episode_return": r} for r in returns], ("reward_frozen_ratio", "episode_return")
    )
    assert max(trace[:60]) < 1 and trace[-1] >= 3
    exp = _exporter()
    solved = [min(500.0, 20 + 10.0 * s + rng.uniform(0, 5)) for s in range(60)] + [500.0] * 100
    trace = _trace(
        exp, [{"episode_return": r} for r in solved], ("reward_frozen_ratio", "episode_return")
    )
    assert max(trace) == 0.0
    for seed in range(4):
        rng = random.Random(seed)
        exp = _exporter()
        wins = [float(rng.random() < min(0.9, s / 1000)) for s in range(2000)]
        trace = _trace(
            exp, [{"episode_return": w} for w in wins], ("reward_frozen_ratio", "episode_return")
        )
        assert max(trace) < 2, (seed, max(trace))


def test_a_binary_reward_is_judged_by_its_own_frequencies() -> None:
    """Issue 24.7 on 0/1 returns (slippery FrozenLake): a success rate of 1.5 % for 600
    episodes, then rising to 0.7, is flat at 0 for long healthy stretches, which its own
    frequency explains; the same run whose reward wrapper answers 0 from episode 2000 pages
    once those zeros are no longer luck (0.7 success: within 60 episodes)."""
    for seed in range(4):
        rng = random.Random(seed)
        rate = [0.015 if e < 600 else min(0.7, 0.015 + (e - 600) / 1300) for e in range(2600)]
        wins = [float(rng.random() < p) for p in rate]
        for broken in (False, True):
            returns = [0.0 if broken and e >= 2000 else w for e, w in enumerate(wins)]
            # the broken run's first 2000 rows are the healthy run's, read there
            trace = _trace(
                _exporter(),
                [{"episode_return": r} for r in returns],
                ("reward_frozen_ratio", "episode_return"),
                read_from=2000 if broken else 0,
            )
            if not broken:
                assert max(trace) < 2, (seed, max(trace))
            else:
                caught = 2000 + next(i for i, v in enumerate(trace) if v >= 3)
                assert 2000 < caught <= 2060, (seed, caught)


def test_a_return_falling_over_many_rows_is_read_within_three_rows() -> None:
    """Issue 24.9: exploration forced to 1.0 takes SB3's 100-episode mean down one episode at a
    time over ~25 rows; the loss reads 0.5 within 3 rows of the logged mean losing half its
    gain (the lead is counted in rows, so the statistic must not add a window of its own)."""
    rng = random.Random(0)
    learned = [min(500.0, 20 + 2.0 * e) + rng.gauss(0, 20) for e in range(400)]
    episodes = learned + [rng.gauss(21, 9) for _ in range(200)]
    means = _running_mean(episodes, 100, 4)
    exp = _exporter(metadata={"framework": "sb3"})
    trace = _trace(
        exp,
        [{"rollout/ep_rew_mean": v} for v in means],
        ("reward_gain_lost_ratio", "episode_return"),
    )
    peak = max(means[:100])
    start = means[0]
    half = next(i for i in range(100, len(means)) if means[i] < peak - 0.5 * (peak - start))
    caught = next(i for i in range(100, len(trace)) if trace[i] >= 0.5)
    assert caught - half <= 3


def test_a_fall_does_not_raise_the_noise_its_gain_is_judged_by() -> None:
    """A DQN whose actuator stops obeying: its 100-episode mean rose fast (a few 500-step
    episodes), then falls back to the random policy's level as they leave the window. The
    fall's first rows, still in the upper half of the gain, must not enter the noise the gain
    is judged by (it rose 4x and the whole gain read as noise: nothing fired, 6 of 8 seeds)."""
    for seed in range(8):
        rng = random.Random(seed)
        episodes = [rng.gauss(22, 10) for _ in range(100)] + [rng.gauss(480, 40) for _ in range(28)]
        episodes += [rng.gauss(9.4, 0.7) for _ in range(300)]
        means = _running_mean(episodes, 100, 4)
        exp = _exporter(metadata={"framework": "sb3"})
        rows = [{"rollout/ep_rew_mean": v} for v in means]
        trace = _trace(exp, rows, ("reward_gain_lost_ratio", "episode_return"))
        top = means.index(max(means))
        half = next(i for i in range(top, len(means)) if means[i] < (means[top] + means[0]) / 2)
        caught = next(i for i in range(top, len(trace)) if trace[i] >= 0.5)
        assert caught - half <= 3 and trace[-1] > 0.75, (seed, half, caught, trace[-1])


def test_the_frozenlake_tutorial_never_reaches_a_critical_level() -> None:
    """Issue 24 point 0 (and 2, 3, 7 on 0/1 returns): the quickstart's Q-learning loop, its
    0/1 episode reward logged every episode, read at irregular times over 10 seeds: no signal
    ever reaches the critical level of its alert (it paged RLRewardCollapse in 5 of 17)."""
    import gymnasium as gym
    import numpy as np

    from harness.qlearning import q_learning_episode
    from rlpulse.stack.alerts import rl, task

    critical = {
        a.signal: (a.critical, a.above)
        for a in (*rl.STEP_ALERTS, *task.STEP_ALERTS)
        if a.critical is not None
    }
    env = gym.make("FrozenLake-v1", is_slippery=False)
    for seed in range(10):
        exp = _exporter()
        q = np.zeros((16, 4))
        rng = np.random.default_rng(seed)
        reads = random.Random(seed)
        epsilon = 1.0
        for e in range(500):
            r = q_learning_episode(env, q, rng, e, epsilon, 0.8, 0.95, ties=True)  # 1 at the goal
            epsilon = max(0.05, epsilon * 0.99)
            exp.log({"episode": e, "reward": r}, step=e)
            if reads.random() < 0.2 or e == 499:
                for (signal, _series), v in _signals(exp).items():
                    level, above = critical.get(signal, (None, True))
                    if level is not None:
                        assert (v <= level) if above else (v >= level), (seed, e, signal, v)


def _wins(rate: list[float], seed: int, read_from: int = 0) -> tuple[list[float], Detector]:
    """0/1 episode rewards drawn at ``rate``, fed to a detector as a log() call applies them
    (its values, then its step); the reward's lost-gain signal after each from episode
    ``read_from`` on (a run with the same seed and rates up to there reads the episodes
    before it: a read does not depend on when the one before it was made), and the detector."""
    rng, d, out = random.Random(seed), Detector(), []
    for e, p in enumerate(rate):
        d.observe("rl_episode_return", (), float(rng.random() < p))
        d.step(e, float(e))
        if e >= read_from:
            held = d.held.get(("reward_gain_lost_ratio", "episode_return"))
            out.append(held.read() if held else 0.0)
    return out, d


def test_a_discrete_reward_that_collapses_warns_within_forty_readings_and_pages_once_it_lasts() -> (
    None
):
    """A 0/1 episode reward (slippery FrozenLake: success 0.5-0.8 once learned) is too noisy
    for a smoothed level, so its gain never counted and a collapse never paged (a reset
    Q-table, exploration forced to 1.0). The readings since it fell below its typical level
    say so within 40 episodes (15-20 at 0.5 success and no reward at all: the warning band),
    and page once the drop lasted ``DISCRETE_PAGE`` readings, with the failure's first episode
    as the onset; healthy seeds never read a lost gain."""
    from rlpulse.detect.signals import DISCRETE_PAGE, UNCONFIRMED

    for seed in range(6):
        top = 0.5 if seed % 2 else 0.78
        learned = [0.015 if e < 600 else min(top, 0.015 + (e - 600) / 1300) for e in range(2600)]
        healthy, _ = _wins(learned, seed)
        assert max(healthy) == 0, (seed, max(healthy))
        for after in (0.0, 0.015):  # reward gone; a random policy's rare success
            broken, d = _wins(learned[:2000] + [after] * 600, seed, read_from=2000)
            warned = next(i for i, v in enumerate(broken) if v > 0.5)
            assert 0 < warned <= 40 and max(broken[: DISCRETE_PAGE - 20]) == UNCONFIRMED, seed
            caught = next(i for i, v in enumerate(broken) if v >= 0.75)
            assert DISCRETE_PAGE - 20 < caught <= DISCRETE_PAGE + 20, (seed, after, caught)
            onset = d.onset("reward_gain_lost_ratio", "episode_return", lambda v: v >= 0.75)
            # a random policy's lucky success just after the failure moves it a few readings on
            assert onset is not None and 1990 <= onset[1] <= 2005, (seed, after, onset)


def test_a_tabular_policy_s_own_bad_stretches_do_not_page() -> None:
    """Tabular Q-learning on slippery FrozenLake (the quickstart loop, is_slippery=True, alpha
    0.3-0.8): its greedy policy goes bad for tens of episodes and mends itself, far beyond the
    luck of its own success rate (episodes of one policy are no independent draws); 16 of 64
    such healthy runs read RLRewardCollapse critical. These runs (each had such a stretch) read
    at most the warning band."""
    import gymnasium as gym
    import numpy as np

    from harness.qlearning import q_learning_episode
    from rlpulse.detect.signals import UNCONFIRMED

    env = gym.make("FrozenLake-v1", is_slippery=True)
    for alpha, seed in ((0.3, 2), (0.5, 14), (0.8, 3)):
        q, rng, drops, epsilon, worst = (
            np.zeros((16, 4)),
            np.random.default_rng(seed),
            Drops(),
            1.0,
            0.0,
        )
        for e in range(2500):
            r = q_learning_episode(env, q, rng, seed * 100_000 + e, epsilon, alpha, 0.95, ties=True)
            epsilon = max(0.05, epsilon * 0.99)
            worst = max(worst, drops.extend([r])[0][0])
        assert worst <= UNCONFIRMED, (alpha, seed, worst)


def test_the_noise_of_all_lags_in_one_sort_is_each_lags_own_median_to_the_bit() -> None:
    """``_lag_mads`` pads each lag's second differences to one width and sorts them together
    (issue 28: the noise was a third of a reward reading's cost); each lag's MAD must be what
    its own median gives, on trending, 0/1, random-walk and tied series of every length."""
    import numpy as np

    from rlpulse.detect.signals import NOISE_LAGS, _lag_mads, _mad

    for seed in range(40):
        rng = random.Random(seed)
        size = rng.randrange(50, 201)
        x = 0.0
        values = []
        for i in range(size):
            x += rng.gauss(0, 0.1)
            values.append(
                [rng.gauss(0, 1) + 0.01 * i, float(rng.random() < 0.6), x, round(rng.gauss(5, 2))][
                    seed % 4
                ]
            )
        h = np.asarray(values)
        lags = tuple(lag for lag in NOISE_LAGS if size >= 6 * lag)
        want = [
            _mad(sorted((h[2 * lag :] - 2 * h[lag:-lag] + h[: -2 * lag]).tolist())) for lag in lags
        ]
        assert _lag_mads(h, lags).tolist() == want, seed


def test_a_policy_s_brief_fall_into_short_episodes_is_no_broken_reward() -> None:
    """An off-policy walker that learned (+330 over 600 steps) falls at once (-100 in 80
    steps) for 55 episodes and recovers, as real published healthy runs do: ``Falls`` reads
    nothing (the 100-episode mean judges that dip). The same returns over episodes as long as
    the learned ones (the reward broke while the walker walked on) read critical."""
    for seed in range(3):
        for broken in (False, True):
            rng = random.Random(seed)
            exp = _exporter()
            worst, caught = 0.0, None
            for ep in range(800):
                learning = ep < 60
                r, n = (-100.0, 80) if learning else (330.0, 600)
                if 600 <= ep < 655:
                    r, n = -100.0, 600 if broken else 80
                exp.observe_episodes([r + rng.gauss(0, 8)], [n + rng.randrange(-5, 5)])
                exp.log({"episode": ep}, step=ep)
                lost = _signals(exp).get(("reward_gain_lost_ratio", "episodes"), 0.0)
                worst = max(worst, lost)
                caught = ep - 600 if caught is None and lost >= 0.75 else caught
            if broken:
                assert caught is not None and caught <= 20, (seed, caught)
            else:
                assert worst == 0, (seed, worst)


def test_single_episodes_show_a_lost_reward_before_their_100_episode_mean_moves() -> None:
    """Issue 24.7 live: a reward wrapper that answers 0 (SB3 on CartPole) takes the
    100-episode mean down one episode in a hundred, which a short run never shows; the
    episodes' own returns (``observe_episodes``, series ``episodes``) read the stretch of zeros
    critical within 30 episodes, and their fall back to the run's start level while they
    last as long as before (``Falls``) critical within 20 (issue 24.8: whatever the window
    length). A 0/1 success whose policy broke reads its drop there too (a warning within 40
    episodes, critical once it lasted ``DISCRETE_PAGE``). Healthy seeds read neither."""
    for seed in range(3):
        for broken in (False, True):
            rng = random.Random(seed)
            exp = _exporter()
            caught = fell = None
            for ep in range(600):
                r = max(8.0, min(500.0, 20 + ep + rng.gauss(0, 30)))
                n = int(r)  # the episode lasts as long as the policy balances
                if broken and ep >= 400:
                    r = 0.0  # (the reward wrapper answers 0; the policy still balances)
                exp.observe_episodes([r], [n])
                exp.log({"episode": ep}, step=ep)
                got = _signals(exp)
                frozen = got.get(("reward_frozen_ratio", "episodes"), 0.0)
                lost = got.get(("reward_gain_lost_ratio", "episodes"), 0.0)
                if broken and ep >= 400:
                    caught = ep - 400 if caught is None and frozen >= 3 else caught
                    fell = ep - 400 if fell is None and lost >= 0.75 else fell
                else:
                    assert frozen == 0 and lost == 0, (seed, ep, frozen, lost)
            assert (caught is not None and caught <= 30) if broken else caught is None
            assert (fell is not None and fell <= 20) if broken else fell is None
    from rlpulse.detect.signals import DISCRETE_PAGE

    for seed in range(3):
        rng = random.Random(seed)
        exp = _exporter()
        warned = None
        for ep in range(2600):
            p = 0.015 if ep < 600 else min(0.7, 0.015 + (ep - 600) / 1300)
            win = float(rng.random() < (0.015 if ep >= 2000 else p))
            exp.observe_episodes([win], [10])
            exp.log({"episode": ep}, step=ep)
            if ep % 10 == 0 or ep >= 2000:
                lost = _signals(exp).get(("reward_gain_lost_ratio", "episodes"), 0.0)
                if ep < 2000:
                    assert lost == 0, (seed, ep, lost)
                elif lost > 0.5 and warned is None:
                    warned = ep - 2000
                elif lost >= 0.75:  # (a drop pages once it lasted DISCRETE_PAGE episodes)
                    assert warned is not None and warned <= 40, (seed, warned)
                    assert ep - 2000 <= DISCRETE_PAGE + 40, (seed, ep)
                    break
        else:
            raise AssertionError(f"seed {seed}: the broken policy was never read")


def test_a_discrete_reward_is_judged_by_its_drops_alone() -> None:
    """A 0/1 success at 0.9 has long streaks of successes, after which three failures in a row
    (1 in 1,000) took the median of 5 readings to 0 while the noise the gain was judged by read
    ~0: all of the gain "lost", critical, on a healthy run (1 of 8 seeds). A discrete reward is
    judged by its drops alone: healthy seeds read 0, and a policy that halves its success
    (0.9 -> 0.45) reads a lost gain within 100 episodes in most seeds."""
    learned = [0.015 if e < 600 else min(0.9, 0.015 + (e - 600) / 1300) for e in range(2000)]
    caught = 0
    for seed in range(8):
        assert max(_wins(learned + [0.9] * 1000, seed)[0]) == 0, seed
        halved, _ = _wins(learned + [0.45] * 1000, seed, read_from=2000)
        caught += any(v >= 0.5 for v in halved[:100])
    assert caught >= 6, caught


def test_a_child_forked_while_the_detector_was_read_can_read_it() -> None:
    """A read holds the detector's lock; a child forked meanwhile gets a fresh one."""
    before = """
from rlpulse.runtime.exporter import Exporter
exp = Exporter(port=0, run_id="r", gpu=False, host=False, process=False)
exp.log({"rl_entropy": 1.0}, step=1)
exp.flush()
exp.detector._lock.acquire()  # as a scrape thread reading at the fork
"""
    child = """
exp.log({"rl_entropy": 2.0}, step=2)
exp.flush()
os._exit(0 if list(exp.detector.samples()) is not None else 1)
"""
    fork_child_exits_0(before, child)


def test_a_drops_quiet_stretch_read_at_once_is_each_reading_in_turn() -> None:
    """``Drops.read`` takes a stretch that changes nothing but the recent readings (a reward
    holding one value) at once: the same drops, typical levels, lag and state as ``extend``
    reading one value at a time, through constant stretches, level changes, NaN and a
    collapse, and a rare success's pattern that leaves the counts as they were."""
    rng = random.Random(5)
    values: list[float] = []
    for level in (1.0, 1.0, 0.0, 0.5, 1.0):  # long constant stretches between mixed ones
        values += [level] * rng.randint(150, 700)
        values += [float(rng.random() < 0.7) for _ in range(rng.randint(0, 300))]
    values = [math.nan if rng.random() < 0.01 else v for v in values]
    rare = ([1.0] + [0.0] * 99) * 20  # a rare success: 99 % below the typical level (no CUSUM)
    _read_at_once_and_in_turn(values, [rng.choice((1, 99, 100, 250, 1500)) for _ in values])
    _read_at_once_and_in_turn(rare, [300, 105, 1, 1500])  # (a quiet read ends past a success)


def _read_at_once_and_in_turn(values: list[float], sizes: list[int]) -> None:
    at_once, one_by_one = Drops(), Drops()
    for start, stop in itertools.pairwise(itertools.accumulate(sizes, initial=0)):
        batch = np.array(values[start:stop])
        if not len(batch):
            return
        at = np.arange(len(batch)) + 1  # row 0 is not read: it stays NaN
        drop, typical, lag = at_once.read(batch, at, len(batch) + 1)
        got = one_by_one.extend(batch.tolist())
        assert math.isnan(drop[0]) and math.isnan(typical[0])
        assert np.array_equal(drop[1:], [g[0] for g in got])
        assert np.array_equal(typical[1:], [g[1] for g in got], equal_nan=True)
        assert lag == got[-1][2]
        for c, d in zip(at_once.cusums, one_by_one.cusums, strict=True):
            assert (c.odds, c.since, c.total) == (d.odds, d.since, d.total)
        assert (list(at_once.recent), list(at_once.span)) == (
            list(one_by_one.recent),
            list(one_by_one.span),
        )
        assert (at_once.counts, at_once.typical) == (one_by_one.counts, one_by_one.typical)


def _shaped(rng: np.random.Generator, n: int, trial: int) -> np.ndarray:
    """``n`` values of one of five shapes, by trial: continuous, discrete, with ties, constant,
    signed zeros."""
    if trial % 5 == 0:
        return rng.normal(size=n)
    if trial % 5 == 1:
        return rng.integers(0, 3, n).astype(float)
    if trial % 5 == 2:
        return np.round(rng.normal(size=n), 1)
    return np.full(n, 1.5) if trial % 5 == 3 else np.where(rng.random(n) < 0.5, -0.0, 0.0)


def test_medians_ordered_by_a_network_are_the_sorted_windows_medians() -> None:
    """``windows.last_medians`` orders many full windows of a few values (and of twice as
    many) column by column, of several series at once (each's own to the bit): the same
    medians as sorting each window, for any window size, ties, constant values, signed zeros
    and a series' first values (its windows not full yet)."""
    rng = np.random.default_rng(1)
    for trial in range(0, 400, 4):
        w = int(rng.integers(1, 8))
        series = []
        for k in range(int(rng.integers(1, 5))):
            n = int(rng.integers(1, 400))
            x = _shaped(rng, n, trial + k)
            m = n - 1 - int(rng.integers(0, max(1, n // 3)))  # the batch: x's last m values
            seen = np.minimum(np.arange(m + 1) + int(rng.integers(0, 20)), n - m + np.arange(m + 1))
            series.append((x, np.arange(n - m - 1, n), seen))
        for (x, ends, seen), pair in zip(series, windows.last_medians(series, w), strict=True):
            alone = windows.last_medians([(x, ends, seen)], w)[0]  # (to the bit: signed zeros)
            for got, size, own in zip(pair, (w, 2 * w), alone, strict=True):
                rows = windows.windows(x, ends, size)
                rows.sort(axis=1)
                want = windows.medians(rows, np.minimum(seen, size))
                assert np.array_equal(got, want, equal_nan=True)
                assert [repr(v) for v in got.tolist()] == [repr(v) for v in own.tolist()]


def _counted_in_turn(counts: dict[float, int], values: list[float]) -> tuple[list[int], list[int]]:
    """``Stretches._count``'s rule, one value at a time."""
    distinct, count = [], []
    for v in values:
        c = counts.get(v)
        if c is not None or len(counts) < FROZEN_VALUES:
            c = counts[v] = (c or 0) + 1
        distinct.append(len(counts))
        count.append(c or 0)
    return distinct, count


def test_a_reads_values_counted_at_once_are_counted_as_in_turn() -> None:
    """``Stretches._count`` counts at once from where no new value can be counted (64 values
    counted, or every value left seen before): the same counts, and the same dict, as one
    value at a time, for continuous, discrete, constant and signed-zero values in any batches."""
    rng = np.random.default_rng(3)
    for trial in range(100):
        n = int(rng.integers(1, 3000))
        x = _shaped(rng, n, trial)
        stretches, counts = Stretches(), {}
        sizes = rng.choice([1, 10, 64, 100, 700, 1500], 3000)
        for start, stop in itertools.pairwise(itertools.accumulate(sizes, initial=0)):
            if start >= n:
                break
            distinct, count = stretches._count(x[start:stop])
            assert (distinct.tolist(), count.tolist()) == _counted_in_turn(
                counts, x[start:stop].tolist()
            )
            assert list(stretches._counts.items()) == list(counts.items())


def test_a_reads_reused_matrices_stay_with_their_series_whatever_the_history_size() -> None:
    """A read's history matrices are reused by its series in turn (``windows.Scratch``): with an
    odd history (a median is one column of one) and series of different lengths, one read of
    every value gives what a read after each value gives."""
    rng = np.random.default_rng(3)
    kl, loss = np.abs(rng.normal(0.2, 0.1, 700)), rng.normal(1000, 50, 700)
    got = []
    for every in (1, 700):
        det = Detector(StepWindows(history=51))
        for i in range(700):
            det.observe("rl_kl_reference", (), float(kl[i]))
            if i % 3 == 0:
                det.observe("rl_value_loss", (), float(loss[i]))
            det.step(float(i), 1000.0 + i)
            if (i + 1) % every == 0:
                det.settle()
        samples = sorted((m.name, labels, repr(v)) for m, labels, v in det.samples())
        got.append((samples, {k: repr(t.pairs()) for k, t in det._trails.items()}))
    assert got[0] == got[1]


def test_a_scratch_matrix_is_reused_and_held_by_one_owner() -> None:
    scratch, a, b = windows.Scratch(), object(), object()
    first = scratch.get("m", 100, 50, a)
    again = scratch.get("m", 80, 50, b)
    assert np.shares_memory(first, again) and again.shape == (80, 50)
    assert scratch.holds("m", b) and not scratch.holds("m", a)
    big = scratch.get("m", windows.SCRATCH_MAX, 2)
    assert not np.shares_memory(big, first)
    odd = np.sort(np.random.default_rng(0).normal(size=(70, 5)), axis=1)
    assert not np.shares_memory(windows.medians(odd, np.full(70, 5)), odd)


def test_noises_at_many_points_at_once_are_each_points_own_to_the_bit() -> None:
    """A read's gains ask the noise at many points (``Track.gain_noises``): worked out in numpy
    for points with as many values behind them, they equal ``_noise_at`` of each, flat and
    stepped stretches (their spread, not their MAD) and early points included."""
    rng = np.random.default_rng(11)
    for shape in range(4):
        values = [
            rng.normal(0, 1, 400),
            np.round(rng.normal(5, 2, 400)),  # few values: many MADs of 0
            np.repeat(rng.normal(size=40), 10),  # flat stretches
            np.cumsum(rng.normal(0, 0.1, 400)),
        ][shape]
        track = Track(StepWindows())
        track.extend(values)
        rows = list(range(1, 401, 3))
        points = [track.gain_point(r) for r in rows]
        want = [track._noise_at(n, pos, NOISE_LAGS[-1]) for n, pos in points]
        got = track.gain_noises(list(points)).tolist()
        assert [repr(v) for v in got] == [repr(v) for v in want], shape


def test_window_sums_are_math_fsum_to_the_bit() -> None:
    """The zero-std share's window sums (``_sums``): numpy, int64 or ``math.fsum`` by the
    values' shape, always ``math.fsum``'s correctly rounded sum (shares of 6 or 10 groups,
    noisy values, exponents near the int64 limit, negative values, wide rows, zeros)."""
    from rlpulse.detect.signals import _sums

    rng = np.random.default_rng(5)
    for trial in range(600):
        kind = trial % 6
        width = [10, 10, 16, 3, 10, 10][kind]
        shape = (40, width)
        rows = [
            rng.integers(0, 7, shape) / 6,
            15.5 * (1 + rng.normal(0, 0.1, shape)),
            rng.normal(0, 1, shape) * 2.0 ** rng.integers(-3, 3, shape),
            rng.uniform(-1, 1, shape),
            rng.integers(0, 11, shape) / 10 * np.where(rng.random(shape) < 0.3, -1, 1),
            rng.uniform(0.5, 1, shape) * 2.0 ** rng.integers(0, 7, shape),  # span 6: the limit
        ][kind]
        want = [repr(math.fsum(row)) for row in rows.tolist()]
        assert [repr(v) for v in _sums(rows).tolist()] == want, kind


def test_a_read_that_fails_leaves_each_episode_s_length_beside_its_return(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Falls`` pairs each episode's return with its length, which wait apart: a read that
    fails (a bug; the scrape still answers) takes the lengths of the episodes it took, so the
    next read pairs its own."""
    d = Detector()
    for ep in range(30):
        d.episodes([float(ep)], [float(ep + 1000)])
    d.settle()
    calls = 0
    extend = signals.extend_tracks

    def fails_once(tracks: list[Track], batches: list[np.ndarray]) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("a bug in a read")
        extend(tracks, batches)

    monkeypatch.setattr(signals, "extend_tracks", fails_once)
    d.episodes([1.0, 2.0, 3.0], [7.0, 8.0, 9.0])
    d.settle()  # fails: those three episodes are lost, with their lengths
    d.episodes([4.0, 5.0], [10.0, 11.0])
    d.settle()
    ((_, falls),) = d._falls
    assert calls == 2 and falls.batch == [10.0, 11.0] and not falls.lengths


def test_window_sums_of_a_series_are_math_fsum_of_each_window_to_the_bit() -> None:
    """A read's zero-std window sums (``_window_sums``): differences of running sums where
    every one is exact (eighths, halves near 2**28, zeros; in int64: sixths, tenths, exponents
    6 apart whose running sums wrap past 2**63), the windows' own sums elsewhere (-0.0, a
    total past 2**32, wider exponents, noise); always ``math.fsum`` of each window, repeated
    ends included."""
    from rlpulse.detect.signals import _window_sums

    rng = np.random.default_rng(9)
    n = 400
    for kind in range(10):
        x = [
            rng.integers(0, 9, n) / 8,
            rng.integers(0, 9, n) / 8 * np.where(rng.random(n) < 0.05, -0.0, 1.0),
            rng.integers(0, 11, n) / 10,
            (2.0**28 - rng.integers(1, 4, n) / 2) * np.where(rng.random(n) < 0.5, -1, 1),
            2.0**27 + rng.integers(1, 1024, n) * 2.0**-20,  # running totals past 2**33
            np.zeros(n),
            rng.normal(0.3, 0.1, n),
            rng.integers(0, 7, n) / 6,
            rng.uniform(0.5, 1, n) * 2.0 ** rng.integers(0, 7, n),  # exponents 6 apart: the limit
            rng.uniform(0.5, 1, n) * 2.0 ** rng.integers(0, 8, n),  # 7 apart: one by one
        ][kind]
        for w in (1, 10):
            ends = np.sort(rng.integers(w - 1, n, 120))
            want = [repr(math.fsum(x[e - w + 1 : e + 1])) for e in ends.tolist()]
            assert [repr(v) for v in _window_sums(x, ends, w).tolist()] == want, (kind, w)


def test_windows_are_the_values_before_each_end_however_the_ends_run() -> None:
    """``windows.windows``: consecutive ends (a slice of the window view, copied), repeated or
    skipping ends (an index per row), a few rows, into a reused matrix or not, NaN before the
    series starts."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=300)
    padded = np.concatenate((np.full(50, math.nan), x))
    for ends in (
        np.arange(-1, 299),
        np.arange(100, 299),
        np.sort(rng.integers(-1, 300, 200)),
        np.arange(5, 40),
    ):
        want = np.array([padded[e + 1 : e + 51] for e in ends.tolist()])
        assert np.array_equal(windows.windows(x, ends, 50), want, equal_nan=True)
        out = np.empty((len(ends), 50))
        got = windows.windows(x, ends, 50, out)
        assert got is out and np.array_equal(out, want, equal_nan=True)


def test_a_gain_within_the_step_noise_needs_no_longer_lags() -> None:
    """``Track.gain_noises`` with the largest gain each noise judges (``within``): where the
    step-to-step noise alone holds that gain within ``GAIN_NOISE`` times, the noise given may
    be that lower bound, and every gain up to it is judged as by the whole noise."""
    from rlpulse.detect.signals import GAIN_NOISE

    rng = np.random.default_rng(12)
    skipped = False
    for shape in range(4):
        values = [
            rng.normal(0, 1, 400),
            np.cumsum(rng.normal(0.05, 1, 400)),  # a running mean's wander: the lags count
            np.round(rng.normal(5, 2, 400)),
            np.repeat(rng.normal(size=40), 10),
        ][shape]
        track = Track(StepWindows())
        track.extend(values)
        points = [track.gain_point(r) for r in range(60, 401, 3)]
        whole = track.gain_noises(list(points))
        scale = rng.choice([0.5, 1, 3, 5.99, 6, 6.01, 12, 40], len(points))
        within = GAIN_NOISE * whole * scale
        noise = track.gain_noises(list(points), within)
        assert (noise <= whole).all() and (noise == whole).any(), shape
        skipped |= bool((noise < whole).any())
        for gain in (within, within * 0.9, within * rng.random(len(points))):
            assert np.array_equal(gain > GAIN_NOISE * noise, gain > GAIN_NOISE * whole), shape
    assert skipped  # (some lags were left out)
