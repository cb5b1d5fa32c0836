"""Bad input never crashes training: counted by reason and logged once, or raised when strict."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from rlpulse.runtime.exporter import Exporter
from tests.conftest import scrape, value

# (what is logged, the drop reason it is counted under; None: recorded)
BAD_VALUES: list[tuple[str, Any, str | None]] = [
    ("string", "0.5", "non_numeric"),
    ("bytes", b"1", "non_numeric"),
    ("none", None, "none"),
    ("bool", True, "bool"),
    ("numpy bool", np.bool_(False), "bool"),
    ("list", [1.0, 2.0], "non_scalar"),
    ("1-d array", np.ones(3), "non_scalar"),
    ("1-element array", np.ones(1), "non_scalar"),
    ("dict", {"a": 1}, "non_numeric"),
    ("complex", 1j, "non_numeric"),
    ("object", object(), "non_numeric"),
]
RECORDED: list[tuple[str, Any, float]] = [
    ("float", 0.5, 0.5),
    ("int", 7, 7.0),
    ("numpy float32", np.float32(0.5), 0.5),
    ("numpy int64", np.int64(3), 3.0),
    ("0-d array", np.array(1.5), 1.5),
]
NON_FINITE = [float("nan"), float("inf"), -float("inf"), np.float64("nan")]


@contextmanager
def _exp(**options: Any) -> Iterator[Exporter]:
    """A started exporter, closed when the ``with`` ends."""
    exp = Exporter(port=0, run_id="bad", gpu=False, host=False, **options).start()
    try:
        yield exp
    finally:
        exp.close()


@pytest.mark.parametrize(("case", "bad", "reason"), BAD_VALUES, ids=[c[0] for c in BAD_VALUES])
def test_bad_value_is_counted_and_logged_once(
    case: str, bad: Any, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    with _exp() as exp:
        with caplog.at_level(logging.WARNING, logger="rlpulse"):
            for _ in range(3):
                exp.log({"rl_entropy": bad, "rl_kl_reference": 0.1})
            text = scrape(exp.url)
        assert value(text, "rlpulse_dropped_values_total", reason=reason) == 3
        assert value(text, "rl_kl_reference") == 0.1  # the good key in the same dict survives
        warnings = [r for r in caplog.records if "rl_entropy" in r.getMessage()]
        assert len(warnings) == 1 and reason in warnings[0].getMessage()


@pytest.mark.parametrize(("case", "bad", "reason"), BAD_VALUES, ids=[c[0] for c in BAD_VALUES])
def test_bad_value_raises_in_strict_mode_naming_the_key(case: str, bad: Any, reason: str) -> None:
    with _exp(strict=True) as exp, pytest.raises(ValueError, match=rf"'rl_entropy'.*{reason}"):
        exp.log({"rl_entropy": bad})


@pytest.mark.parametrize(("case", "good", "expected"), RECORDED, ids=[c[0] for c in RECORDED])
def test_numeric_types_are_recorded(case: str, good: Any, expected: float) -> None:
    with _exp(strict=True) as exp:
        exp.log({"rl_entropy": good})
        assert value(scrape(exp.url), "rl_entropy") == expected


def test_zero_d_tensor_like_is_recorded() -> None:
    class Tensor0d:  # the protocol a 0-d torch tensor offers: ndim, numel via size, __float__
        ndim = 0

        def __float__(self) -> float:
            return 0.75

    with _exp(strict=True) as exp:
        exp.log({"rl_entropy": Tensor0d()})
        assert value(scrape(exp.url), "rl_entropy") == 0.75


@pytest.mark.parametrize("bad", NON_FINITE, ids=["nan", "inf", "-inf", "np-nan"])
def test_non_finite_is_recorded_and_counted(bad: float) -> None:
    with _exp() as exp:
        exp.log({"rl_grad_norm_total_is_not_a_key": 1.0})
        exp.log({"rl_loss": bad})
        exp.log({"rl_loss": bad})
        text = scrape(exp.url)
        got = value(text, "rl_loss")
        assert math.isnan(got) if math.isnan(bad) else got == bad
        assert value(text, "rl_nonfinite_values_total", metric="rl_loss") == 2


def test_a_return_is_non_finite_only_after_it_had_a_value() -> None:
    """A mean return reads NaN before its first episode ends: not counted (RLNonFiniteLoss
    would page a healthy start); one that turns NaN after that is a failure. A step's reward
    mean is defined from the first step: its NaN always counts (TRL logs a reward function
    that returned None as None). RLlib's NaN of an iteration with no finished episode is no
    value at all: its reader drops it."""
    with _exp() as exp:
        for _ in range(3):
            exp.log({"episode_reward_mean": math.nan})
        counted = [ln for ln in scrape(exp.url).splitlines() if "rl_nonfinite_values" in ln]
        assert not [ln for ln in counted if not ln.startswith("#")], counted
        exp.log({"episode_reward_mean": 21.0, "reward": math.nan})
        exp.log({"episode_reward_mean": math.nan})
        exp.set("rl_reward_mean", math.inf)
        text = scrape(exp.url)
        assert value(text, "rl_nonfinite_values_total", metric="rl_episode_return") == 1
        assert value(text, "rl_nonfinite_values_total", metric="rl_reward_mean") == 2


def test_non_finite_raises_when_strict() -> None:
    with _exp(strict=True) as exp, pytest.raises(ValueError, match="rl_loss: non-finite"):
        exp.log({"rl_loss": float("nan")})


@pytest.mark.parametrize(
    "latencies",
    [[0.1, float("nan"), float("inf")], [1e308, 0.1, 1e308]],
    ids=["non-finite", "too-large-to-sum"],
)
def test_samples_a_histogram_cannot_sum_are_counted_not_observed(latencies: list[float]) -> None:
    """NaN/Inf stay out of histograms; so do finite samples past 1e300: two of 1e308 sum to
    inf, and _sum would read +Inf for the rest of the run (every rate() over it NaN)."""
    with _exp() as exp:
        exp.observe_rollouts(latency_seconds=latencies)
        text = scrape(exp.url)
        assert value(text, "rl_rollout_duration_seconds_count") == 1
        assert value(text, "rl_rollout_duration_seconds_sum") == 0.1
        n = value(text, "rl_nonfinite_values_total", metric="rl_rollout_duration_seconds")
        assert n == 2


def test_token_counts_leave_out_a_nan_token_count() -> None:
    """A response whose token count is NaN adds nothing to rl_completion_tokens_total (the
    others still do); nor to the length histogram, where it is counted non-finite."""
    with _exp() as exp:
        exp.observe_rollouts(response_tokens=[10.0, float("nan"), 32.0])
        text = scrape(exp.url)
        assert value(text, "rl_completion_tokens_total") == 42.0
        assert value(text, "rl_response_length_tokens_count") == 2


def test_negative_counter_increment_is_dropped() -> None:
    with _exp() as exp:
        exp.count("rl_env_steps_total", 10)
        exp.count("rl_env_steps_total", -3)
        exp.count("rl_env_steps_total", float("nan"))
        text = scrape(exp.url)
        assert value(text, "rl_env_steps_total") == 10
        assert value(text, "rlpulse_dropped_values_total", reason="negative_increment") == 2
    refused = r"rl_env_steps_total.*negative_increment"
    with _exp(strict=True) as strict, pytest.raises(ValueError, match=refused):
        strict.count("rl_env_steps_total", -1)


def test_cumulative_counter_key_going_backwards_is_dropped() -> None:
    with _exp() as exp:
        exp.log({"rl_episodes_total": 5})
        exp.log({"rl_episodes_total": 4})
        text = scrape(exp.url)
        assert value(text, "rl_episodes_total") == 5
        assert value(text, "rlpulse_dropped_values_total", reason="negative_increment") == 1


def test_unknown_keys_are_kept_up_to_a_cap() -> None:
    with _exp(unmapped_cap=5) as exp:
        exp.log({f"custom/key_{i}": float(i) for i in range(8)})
        text = scrape(exp.url)
        assert value(text, "rl_unmapped_metric", key="custom/key_4") == 4
        assert value(text, "rlpulse_label_overflow_total", label="key") == 3
        assert value(text, "rlpulse_dropped_values_total", reason="unmapped_key_cap") == 3
        assert "custom/key_6" not in text


def test_a_flood_of_label_values_is_capped() -> None:
    with _exp(label_cap=10) as exp:
        for i in range(1000):
            exp.count("rl_tool_calls_total", 1, tool=f"tool-{i}")
            exp.observe_rollouts(rewards=[1.0], components={f"c{i}": [0.5]})
        text = scrape(exp.url)
        tools = [ln for ln in text.splitlines() if ln.startswith("rl_tool_calls_total{")]
        assert len(tools) == 11  # 10 distinct + __overflow__
        assert value(text, "rl_tool_calls_total", tool="__overflow__") == 990
        comps = [ln for ln in text.splitlines() if ln.startswith("rl_reward_component_mean{")]
        assert len(comps) == 11


@pytest.mark.parametrize(
    ("kwargs", "reason", "needle"),
    [
        ({"config": ["lr", 1e-5]}, "bad_config", "config"),
        ({"metadata": {"job": "x"}}, "bad_metadata", "job"),  # Prometheus would rename it
        ({"metadata": "qwen"}, "bad_metadata", "metadata"),
    ],
)
def test_bad_config_is_counted_or_raised(kwargs: dict[str, Any], reason: str, needle: str) -> None:
    with _exp(**kwargs) as exp:
        assert value(scrape(exp.url), "rlpulse_dropped_values_total", reason=reason) == 1
    with pytest.raises(ValueError, match=rf"{needle}.*{reason}"):
        Exporter(port=0, gpu=False, host=False, strict=True, **kwargs)


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (lambda e: e.log(None), "bad_call"),  # type: ignore[arg-type]
        (lambda e: e.log({1: 2.0}), "bad_key"),
        (lambda e: e.log({"rl_entropy": 1.0}, step="three"), "non_numeric"),
        (lambda e: e.set("rl_not_a_metric", 1.0), "bad_metric"),
        (lambda e: e.set("rl_env_steps_total", 1.0), "bad_metric"),
        (lambda e: e.set("rl_eval_score", 1.0, benchmark="x"), "bad_metric"),
        (lambda e: e.observe_rollouts(rewards=[1, 2], truncated=[1]), "shape_mismatch"),
        (lambda e: e.observe_rollouts(rewards=["a", "b"]), "non_numeric"),
        (lambda e: e.observe_episodes([1.0, 2.0], [3]), "shape_mismatch"),
        (lambda e: e.observe("rl_response_length_tokens", "long"), "non_numeric"),
    ],
)
def test_bad_calls_never_raise_by_default(call: Any, reason: str) -> None:
    with _exp() as exp:
        call(exp)
        assert value(scrape(exp.url), "rlpulse_dropped_values_total", reason=reason) >= 1
    with _exp(strict=True) as strict, pytest.raises((ValueError, TypeError, AttributeError)):
        call(strict)
