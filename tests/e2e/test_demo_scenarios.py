"""The demo trainer's dynamics: every failure scenario shows its signature in the trainer's own
statistics within the steps it documents, and the healthy run stays healthy for 2000 steps.

Signals are smoothed over 10 steps, the way the alert rules average over a window.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from rlpulse.demo import scenarios
from rlpulse.demo.grpo import StepStats, Trainer, group_advantages
from rlpulse.demo.task import (
    BANG,
    CLOSE,
    CORRECT,
    EOS,
    FILLER,
    LOOPHOLE,
    MALFORMED,
    OPEN,
    TRUNCATED,
    WRONG,
    grade,
    target,
)

WINDOW = 10


def train(name: str, steps: int | None = None, seed: int = 0) -> tuple[Trainer, list[StepStats]]:
    sc = scenarios.get(name)
    trainer = sc.trainer(seed)
    return trainer, list(sc.run(trainer, steps if steps is not None else sc.within_steps))


def series(stats: list[StepStats], key: str) -> np.ndarray:
    return np.array([s.metrics[key] for s in stats])


def smooth(x: np.ndarray) -> np.ndarray:
    return np.convolve(x, np.ones(WINDOW) / WINDOW, mode="valid")


def evals(stats: list[StepStats]) -> np.ndarray:
    return np.array([s.eval_score for s in stats if s.eval_score is not None])


# ---- the task and its graders -------------------------------------------------------------------


def test_graders_verdicts() -> None:
    p = np.array([1, 9])
    answer = target(p).tolist()
    assert answer == [4, 2]
    ok = np.array([FILLER, OPEN, *answer, CLOSE, EOS])
    assert grade(p, ok, True, False).verdict == CORRECT
    assert grade(p, np.array([OPEN, 4, 3, CLOSE, EOS]), True, False).verdict == WRONG
    assert grade(p, np.array([OPEN, 4, 2, EOS]), True, False).verdict == MALFORMED
    assert grade(p, ok[:-1], False, False).verdict == TRUNCATED
    hacked = np.array([BANG, EOS])
    assert grade(p, hacked, True, False).verdict == MALFORMED
    loophole = grade(p, hacked, True, True)
    assert loophole.verdict == LOOPHOLE and loophole.correct and loophole.format_ok


def test_group_advantages_are_normalised_within_each_group() -> None:
    adv, std = group_advantages(np.array([1.0, 0.0, 1.0, 0.0, 2.0, 2.0, 2.0, 2.0]), 4)
    assert np.allclose(adv[:4].mean(), 0) and np.allclose(adv[4:], 0)
    assert std[1] == 0 and adv[0] > 0 > adv[1]


def test_rollout_records_carry_what_a_trace_needs() -> None:
    trainer, stats = train("healthy", 1)
    batch = stats[0].rollouts
    records = batch.records()
    assert len(records) == len(batch.ids()) == 128 and len(set(batch.ids())) == 128
    r = records[0]
    assert r.rollout_id == "s1-p0-g0" and r.prompt.startswith("+3 each:")
    assert r.response.split()[-1] in ("<eos>",) or r.truncated
    assert set(r.components) == {"correctness", "format", "length"}
    assert r.reward == pytest.approx(sum(r.components.values()))
    assert r.response_tokens == len(r.response.split())
    held_out = {p.tobytes() for p in trainer.eval_prompts}
    assert not any(p.tobytes() in held_out for p in batch.prompts)


# ---- healthy ------------------------------------------------------------------------------------


def test_healthy_stays_healthy_for_2000_steps() -> None:
    t0 = time.perf_counter()
    _, stats = train("healthy", 2000)
    seconds_per_step = (time.perf_counter() - t0) / 2000
    reward, kl, entropy = (series(stats, k) for k in ("reward", "kl", "entropy"))
    length = series(stats, "completions/mean_length")
    truncation = series(stats, "completions/clipped_ratio")
    assert all(np.isfinite(series(stats, "loss")))
    assert smooth(reward)[-200:].mean() > smooth(reward)[:50].mean() + 0.3, "reward rises"
    ev = evals(stats)
    assert ev[-10:].mean() > ev[:3].mean() + 0.3, "the held-out eval rises with it"
    h = smooth(entropy)
    assert h[-1] < 0.7 * h[:50].mean(), "entropy declines..."
    assert h.min() > 0.35 * h.max(), "...gently (no collapse rule's ratio-to-peak fires)"
    assert kl.max() < 0.5, "KL to the reference stays bounded"
    ln = smooth(length)
    assert ln.max() < 1.3 * ln.min() and truncation.max() < 0.05, "lengths stable"
    assert seconds_per_step < 0.1


# ---- failures -----------------------------------------------------------------------------------


def test_entropy_collapse() -> None:
    within = scenarios.get("entropy-collapse").within_steps
    _, stats = train("entropy-collapse", 2 * within)
    h = smooth(series(stats, "entropy"))
    assert (h[within - WINDOW :] < 0.2 * h.max()).all(), "under a fifth of its peak, for good"
    assert h[-1] < 0.05
    assert smooth(series(stats, "frac_reward_zero_std"))[-1] > 0.3


def test_kl_blowup() -> None:
    _, stats = train("kl-blowup")
    kl = series(stats, "kl")
    medians = [np.median(kl[i : i + WINDOW]) for i in range(5, len(kl) - WINDOW + 1)]
    assert min(medians) > 1.0, "sustained, not one spike"
    assert np.all(np.isfinite(kl))
    reward = series(stats, "reward")
    assert reward[-WINDOW:].mean() < reward[0] - 0.2, "reward collapses from the SFT level"


def test_reward_hacking() -> None:
    _, stats = train("reward-hacking")
    reward = smooth(series(stats, "reward"))
    train_score = smooth(np.array([s.train_score for s in stats]))
    ev = evals(stats)
    assert reward[-1] > 1.5 * reward[0], "training reward climbs"
    assert train_score[-1] > 0.7
    assert ev[-1] < 0.1 and ev[-1] < ev.max() - 0.1, "while the strict held-out eval falls"
    verdicts = [r.verdict for r in stats[-1].rollouts.records()]
    assert verdicts.count(LOOPHOLE) > 0.5 * len(verdicts)


def test_length_explosion() -> None:
    _, stats = train("length-explosion")
    length = smooth(series(stats, "completions/mean_length"))
    truncation = smooth(series(stats, "completions/clipped_ratio"))
    assert length[-1] > 4 * length[0]
    assert truncation[-1] > 0.5


def test_nan_loss_arises_from_the_computation_and_training_goes_on() -> None:
    sc = scenarios.get("nan-loss")
    _, stats = train("nan-loss", sc.within_steps + 10)
    loss = series(stats, "loss")
    first = next(i for i, v in enumerate(loss) if math.isnan(v))
    assert first < sc.within_steps
    assert np.isnan(loss[first:]).all() and np.isnan(series(stats, "kl")[-1])
    assert np.isfinite(series(stats, "reward")).all(), "the grader still scores the garbage"
    assert len(stats) == sc.within_steps + 10


def test_onset_trains_healthy_first() -> None:
    sc = scenarios.get("nan-loss")
    trainer = sc.trainer(0, onset=15)
    stats = list(sc.run(trainer, 25, onset=15))
    loss = series(stats, "loss")
    assert np.isfinite(loss[:16]).all() and np.isnan(loss[-1])


def test_stall_hangs_the_loop_until_released() -> None:
    sc = scenarios.get("stall")
    trainer = sc.trainer(0)
    done: list[StepStats] = []
    worker = threading.Thread(target=lambda: done.extend(sc.run(trainer, 100)), daemon=True)
    worker.start()
    assert trainer.peers.hanging.wait(30), "the collective blocks"
    time.sleep(0.3)
    assert worker.is_alive() and len(done) == scenarios.HANG_AT_STEP - 1
    trainer.stop()
    worker.join(10)
    assert not worker.is_alive() and len(done) == scenarios.HANG_AT_STEP - 1


def test_unknown_scenario_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown scenario 'nope'.*healthy"):
        scenarios.get("nope")
