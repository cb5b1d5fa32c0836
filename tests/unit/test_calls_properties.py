"""What a run exports depends on what it recorded, never on when it was read: for random
interleavings of ``log``, ``observe_episodes`` and ``observe_rollouts``, reading the store after
every call and reading it every N calls give the same values at every common read (issue 24,
point 1)."""

from __future__ import annotations

import itertools
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rlpulse.runtime.exporter import Exporter

finite = st.floats(-1e3, 1e3, allow_nan=False)
LOG_KEYS = ("rl_entropy", "rl_episode_return", "rl_value_loss", "rl_kl_reference", "rl_grad_norm")
logs = st.tuples(st.just("log"), st.dictionaries(st.sampled_from(LOG_KEYS), finite, min_size=1))
episodes = st.tuples(st.just("episodes"), st.lists(finite, min_size=1, max_size=4))
rollouts = st.tuples(
    st.just("rollouts"), st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=8)
)
calls = st.lists(st.one_of(logs, episodes, rollouts), min_size=1, max_size=120)


def _exporter() -> Exporter:
    exp = Exporter(port=0, run_id="p", gpu=False, host=False, process=False)
    ticks = itertools.count()
    exp.clock = lambda: 1000.0 + next(ticks)  # log times from the calls, not the wall clock
    exp.store.values[exp.ingest.last_ts.slot] = 0.0  # (the wall-clock "never logged" time)
    return exp


def _apply(exp: Exporter, call: tuple[str, Any], step: int) -> None:
    kind, data = call
    if kind == "log":
        exp.log(data, step=step)
    elif kind == "episodes":
        exp.observe_episodes(data, [10] * len(data))
    else:
        exp.observe_rollouts(rewards=data, response_tokens=[100 * len(data)] * len(data))


def read(exp: Exporter) -> dict[tuple[str, tuple[str, ...]], float]:
    """What a scrape exports now: every stored value and every detector sample, by series."""
    exp.flush()
    out = {
        (s.metric.name, s.labels): exp.store.values[s.slot]
        for s in exp.store.series
        if s.hist is None and s.metric.name != "rl_exporter_start_timestamp_seconds"
    }
    for metric, labels, value in exp.detector.samples():
        out[(metric.name, labels)] = value
    return out


def _same(a: dict[Any, float], b: dict[Any, float]) -> bool:
    return a.keys() == b.keys() and all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in a)


@settings(max_examples=60, deadline=None)
@given(calls, st.sampled_from([2, 3, 7, 15, 150]))
def test_reads_at_any_cadence_export_the_same(recorded: list[tuple[str, Any]], every: int) -> None:
    often, seldom = _exporter(), _exporter()
    for i, call in enumerate(recorded):
        _apply(often, call, i)
        _apply(seldom, call, i)
        now = read(often)
        if (i + 1) % every == 0 or i == len(recorded) - 1:
            assert _same(read(seldom), now), i
    assert _same(read(seldom), read(often))  # and reading again changes nothing


def _training_log(seed: int, steps: int) -> list[dict[str, float]]:
    """A random run's log: drifting entropy, reward and KL, grad-norm spikes, rare eval scores."""
    rng = random.Random(seed)
    rows, ent, rew, kl = [], 1.5, 0.0, 0.01
    for i in range(steps):
        ent = max(0.01, ent + rng.gauss(-0.0005, 0.02))
        rew += rng.gauss(0.001, 0.05)
        kl = abs(kl + rng.gauss(0, 0.005))
        row = {
            "rl_entropy": ent,
            "rl_reward_mean": rew,
            "rl_kl_reference": kl,
            "rl_grad_norm": abs(rng.gauss(1, 0.3)) * (30 if rng.random() < 0.01 else 1),
            "rl_value_loss": abs(rng.gauss(1, 0.2)),
            "rl_response_length_mean_tokens": 200 + rng.gauss(0, 20),
            "rl_truncation_ratio": rng.random() * 0.1,
            "rl_format_compliance_ratio": 0.9 + rng.random() * 0.1,
        }
        if i % 25 == 0:
            row["rl_eval_score"] = 0.5 + rng.gauss(0, 0.05)
        rows.append(row)
    return rows


def test_signals_read_every_15_150_1500_steps_equal_those_read_every_step() -> None:
    """The golden values are those read after every step (what the runtime exported before the
    queue, checked once against that code: 321,700 values, none different)."""
    rows = _training_log(0, 3000)
    golden: dict[int, dict[tuple[str, tuple[str, ...]], float]] = {}
    exp = _exporter()
    for i, row in enumerate(rows):
        exp.log(row, step=i)
        golden[i] = read(exp)
    assert any(k[0] == "rl_step_signal" for k in golden[len(rows) - 1])
    for every in (15, 150, 1500):
        exp = _exporter()
        for i, row in enumerate(rows):
            exp.log(row, step=i)
            if (i + 1) % every == 0:
                assert _same(read(exp), golden[i]), (every, i)
