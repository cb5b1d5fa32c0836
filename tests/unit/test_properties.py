"""Property-based bad input (hypothesis): log() and the batch APIs never raise by default,
every value is either recorded or counted, and strict mode raises ValueError naming the key."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlpulse.runtime.exporter import Exporter

SCALARS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.none(),
    st.text(max_size=20),
    st.binary(max_size=8),
    st.complex_numbers(allow_nan=True),
    st.lists(st.floats(), max_size=3),
    st.builds(np.float32, st.floats(width=32)),
    st.builds(np.int64, st.integers(min_value=-(2**63), max_value=2**63 - 1)),
)
KEYS = st.one_of(
    st.sampled_from(["rl_entropy", "rl_loss", "rl_episodes_total", "reward", "kl", "train/loss"]),
    st.text(min_size=0, max_size=30),
)
ARRAYS = st.one_of(
    st.none(),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=16),
    st.lists(st.integers(min_value=-10, max_value=10**6), max_size=16),
    st.lists(st.text(max_size=3), max_size=4),
    st.text(max_size=5),
)

_EXP = Exporter(port=0, run_id="prop", gpu=False, host=False, process=False, unmapped_cap=32)
_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _accounted() -> float:
    """Everything the exporter has recorded or counted so far."""
    _EXP.flush()
    return sum(_EXP.dropped.values()) + len(_EXP.store.series) + _nonfinite()


def _nonfinite() -> float:
    return sum(
        _EXP.store.values[s.slot]
        for s in _EXP.store.series
        if s.metric.name == "rl_nonfinite_values_total"
    )


@_SETTINGS
@given(st.dictionaries(KEYS, SCALARS, max_size=8), st.one_of(st.none(), SCALARS))
def test_log_never_raises_and_never_loses_silently(metrics: dict[str, Any], step: Any) -> None:
    dropped_before = sum(_EXP.dropped.values())
    _EXP.log(metrics, step=step)
    _EXP.flush()
    recorded_or_counted = sum(_EXP.dropped.values()) - dropped_before
    for key, v in metrics.items():
        binding = _EXP.ingest.slots.get(key)
        if binding is not None or key in _EXP.ingest.bindings:
            continue  # bound: the value was stored (or counted above)
        assert recorded_or_counted > 0, (key, v)


@_SETTINGS
@given(KEYS, SCALARS)
def test_strict_mode_raises_value_error_naming_the_key(key: str, v: Any) -> None:
    exp = Exporter(port=0, gpu=False, host=False, process=False, strict=True)
    try:
        exp.log({key: v})
    except ValueError as exc:
        assert repr(key) in str(exc) or "non-finite" in str(exc)
        return
    exp.flush()
    stored = [exp.store.values[s.slot] for s in exp.store.series if s.slot >= 0]
    assert any(
        (math.isnan(x) and math.isnan(float(v))) or x == float(v) * s
        for x in stored
        for s in (1.0, -1.0, 0.01, 100.0)
    ), (key, v, stored)


@_SETTINGS
@given(
    latency=ARRAYS,
    tokens=ARRAYS,
    rewards=ARRAYS,
    truncated=ARRAYS,
    components=st.dictionaries(st.text(max_size=8), ARRAYS, max_size=3),
    group_size=st.one_of(st.none(), st.integers(min_value=-2, max_value=5)),
    ids=st.one_of(st.none(), st.lists(st.text(max_size=70), max_size=16)),
)
def test_observe_rollouts_never_raises(
    latency: Any,
    tokens: Any,
    rewards: Any,
    truncated: Any,
    components: dict[str, Any],
    group_size: Any,
    ids: Any,
) -> None:
    _EXP.observe_rollouts(
        latency_seconds=latency,
        response_tokens=tokens,
        rewards=rewards,
        truncated=truncated,
        components=components,
        group_size=group_size,
        rollout_ids=ids,
    )
    for s in _EXP.store.series:
        if s.hist is not None:
            cumulative, total, _ = s.hist.snapshot()
            assert cumulative == sorted(cumulative)  # buckets stay cumulative
            assert math.isfinite(total)


@_SETTINGS
@given(returns=ARRAYS, lengths=ARRAYS, success=ARRAYS)
def test_observe_episodes_never_raises(returns: Any, lengths: Any, success: Any) -> None:
    _EXP.observe_episodes(returns, lengths, success)


@_SETTINGS
@given(
    name=st.one_of(st.sampled_from(["rl_tool_calls_total", "rl_eval_score", "nope"]), st.text()),
    amount=SCALARS,
    labels=st.dictionaries(st.sampled_from(["tool", "benchmark", "split", "x"]), st.text()),
)
def test_direct_calls_never_raise(name: str, amount: Any, labels: dict[str, str]) -> None:
    _EXP.count(name, amount, **labels)
    _EXP.set(name, amount, **labels)
    _EXP.observe(name, amount, **labels)


def test_the_exporter_still_scrapes_after_all_that() -> None:
    from prometheus_client import generate_latest

    assert b"rl_run_info" in generate_latest(_EXP.registry)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300),
            st.sampled_from([0.0, -0.0, 0.005, 0.01, 0.5, 1.0, 2.5, 60.0, 1e-9]),  # at bounds
        ),
        max_size=300,
    )
)
def test_a_batch_is_counted_in_the_bins_each_value_alone_goes_to(values: list[float]) -> None:
    from rlpulse import catalog
    from rlpulse.detect import windows
    from rlpulse.runtime.store import Histogram

    buckets = catalog.get("rl_rollout_duration_seconds").buckets
    batch, ids, alone = Histogram(buckets), Histogram(buckets), Histogram(buckets)
    batch.observe_many(np.array(values, float))
    ids.observe_many(np.array(values, float), [None] * len(values))  # (the exemplar path)
    for v in values:
        alone.observe_one(v)
    assert batch.counts.tolist() == alone.counts.tolist() == ids.counts.tolist()
    # the other side (a drift bin holds edges[i-1] <= v < edges[i]), as a search per value
    arr, edges = np.array(values, float), np.asarray(buckets, float)
    per_value = np.bincount(np.searchsorted(edges, arr, side="right"), minlength=len(edges) + 1)
    assert windows.bin_counts(arr, edges, le=False).tolist() == per_value.tolist()
