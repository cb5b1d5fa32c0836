"""Consecutive ``log()`` calls are applied in columns (``Ingest.apply_run``): the store, the drop
and non-finite counts and every detector answer equal those of the same calls applied one at a
time, whatever the values (NaN, ±Inf, ints, no numbers, a reward NaN before its first finite
value), the steps (repeated, going back, none, no numbers) and the key orders."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from rlpulse.runtime.exporter import Exporter


def _calls(seed: int) -> list[tuple[dict[str, Any], Any]]:
    rng = np.random.default_rng(seed)
    out: list[tuple[dict[str, Any], Any]] = []
    step = 0
    for i in range(1200):
        row: dict[str, Any] = {
            "rl_reward_mean": float(rng.normal(1 - math.exp(-i / 300), 0.05)),
            "rl_episode_return": float(rng.normal(100 - 50 * math.exp(-i / 300), 5)),
            "rl_reward_std": 0.0 if rng.random() < 0.2 else float(rng.random()),
            "rl_entropy": float(1.5 * math.exp(-i / 500) + rng.normal(0, 0.01)),
            "rl_kl_reference": float(abs(rng.normal(0.05, 0.02))),
            "rl_completion_eos_ratio": float(rng.random()),
            "rl_kl_coefficient": int(rng.integers(0, 3)),  # ints stay ints
            "rl_advantage_std": float(rng.normal(1, 0.1)),
            "my_custom_key": float(i),
        }
        r = rng.random()
        if i < 20:
            row["rl_episode_return"] = math.nan  # before the first episode ends: not counted
        elif r < 0.03:
            row["rl_entropy"] = math.nan
        elif r < 0.05:
            row["rl_reward_mean"] = -math.inf
        elif r < 0.06:
            row["rl_advantage_std"] = "high"  # no number: dropped, counted
        elif r < 0.07:
            row["rl_kl_coefficient"] = 10**400  # past a float's range: +Inf, counted
        elif r < 0.08:
            row = dict(reversed(row.items()))  # another key order
        elif r < 0.09:
            row["eval_reward"] = float(rng.random())  # an extra key now and then
        step += int(rng.choice([1, 1, 1, 0, -2]))  # repeated and earlier steps are not steps
        if 300 <= i < 340:
            out.append((row, None))  # a stretch without steps
        elif i == 500:
            out.append((row, "ten"))  # a step that is no number
        elif i == 501:
            out.append((row, math.nan))
        else:
            out.append((row, step if i % 2 else float(step)))
    return out


def _state(exp: Exporter) -> dict[str, Any]:
    exp.flush()
    det = exp.detector
    store = [
        (s.metric.name, s.labels, repr(exp.store.values[s.slot]))
        for s in exp.store.series
        if s.hist is None and s.metric.name != "rl_exporter_start_timestamp_seconds"
    ]
    return {
        "store": store,
        "drops": dict(exp.drops.counts),
        "samples": [(m.name, labels, repr(v)) for m, labels, v in det.samples()],
        "trails": {k: repr(t.pairs()) for k, t in det._trails.items()},
        "steps": list(det._steps),
    }


def _exporter(columns: bool) -> Exporter:
    """A fresh exporter on a fixed clock, applying ``log()`` runs in columns or one at a time."""
    exp = Exporter(port=0, run_id="r", gpu=False, host=False, process=False)
    if not columns:
        exp.ingest.calls.batch = None
    exp.clock = iter(1000.0 + 0.5 * i for i in range(10**6)).__next__
    return exp


@pytest.mark.parametrize("seed", [0, 1])
def test_log_calls_in_columns_equal_them_one_at_a_time(seed: int) -> None:
    states = []
    for columns in (True, False):
        exp = _exporter(columns)
        for i, (row, step) in enumerate(_calls(seed)):
            exp.log(row, step=step)
            if i % 700 == 699:
                states.append(_state(exp))
        states.append(_state(exp))
        exp.close()
    half = len(states) // 2
    for columns, one in zip(states[:half], states[half:], strict=True):
        assert columns == one


def test_an_episode_return_finite_only_in_columns_counts_its_later_nan() -> None:
    """Its first value NaN (not counted), then finite ones applied in columns only, then a NaN
    applied on its own: counted, as when every call is applied one at a time."""
    rows = [math.nan] + [1.0] * 20
    states = []
    for columns in (True, False):
        exp = _exporter(columns)
        for i, value in enumerate(rows):
            exp.log({"rl_episode_return": value, "rl_reward_mean": 0.5}, step=i)
        exp.flush()
        exp.log({"rl_episode_return": math.nan, "rl_reward_mean": 0.5}, step=len(rows))
        states.append(_state(exp))
        exp.close()
    assert states[0] == states[1]
    counts = [v for name, labels, v in states[0]["store"] if name == "rl_nonfinite_values_total"]
    assert counts == ["1.0"]


def test_log_calls_with_no_watched_key_in_columns_equal_them_one_at_a_time() -> None:
    states = []
    for columns in (True, False):
        exp = _exporter(columns)
        for i in range(50):
            exp.log({"rl_loss": float(i), "rl_policy_loss": math.inf if i == 30 else 1.0}, step=i)
        states.append(_state(exp))
        exp.close()
    assert states[0] == states[1]
    assert ("rl_logged_steps_total", (), "50.0") in states[0]["store"]
