"""Batch statistics: what one batch of rollouts or finished episodes says as catalog values.

Pure functions of plain float arrays (already taken from user input by ``rlpulse.runtime.coerce``);
the exporter writes the results as its own values.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping

import numpy as np

EPISODE_WINDOW = 100  # episodes the episode gauges average over
Gauge = tuple[str, dict[str, str], float]  # (catalog gauge, labels, value)
RATIOS = (
    ("truncated", "rl_truncation_ratio"),
    ("format_ok", "rl_format_compliance_ratio"),
    ("success", "rl_success_ratio"),
)


def _spread(arr: np.ndarray, mean: str, max_: str, min_: str, std: str = "") -> Iterator[Gauge]:
    """Mean, max, min (and std) of ``arr`` under the given gauges; nothing for no values."""
    if arr.size == 0:
        return
    yield mean, {}, float(arr.mean())
    yield max_, {}, float(arr.max())
    yield min_, {}, float(arr.min())
    if std:
        yield std, {}, float(arr.std())


def rollout_gauges(
    arrays: Mapping[str, np.ndarray],
    components: Mapping[str, np.ndarray],
    group_size: int | None,
) -> Iterator[Gauge]:
    """The gauges of one rollout batch: response length and reward spread, the share of
    groups whose rewards are all equal (GRPO learns nothing from them), reward components
    and the truncation, format and success ratios."""
    if "response_tokens" in arrays:
        yield from _spread(
            arrays["response_tokens"],
            "rl_response_length_mean_tokens",
            "rl_response_length_max_tokens",
            "rl_response_length_min_tokens",
        )
    if "rewards" in arrays:
        r = arrays["rewards"]
        yield from _spread(r, "rl_reward_mean", "rl_reward_max", "rl_reward_min", "rl_reward_std")
        if group_size and group_size > 1 and r.size % group_size == 0:
            zero = np.ptp(r.reshape(-1, group_size), axis=1) == 0
            yield "rl_zero_std_groups_ratio", {}, float(zero.mean())
    for component, arr in components.items():
        yield "rl_reward_component_mean", {"component": component}, float(arr.mean())
        yield "rl_reward_component_std", {"component": component}, float(arr.std())
    for key, metric in RATIOS:
        if key in arrays:
            yield metric, {}, float(arrays[key].mean())


def rollout_counts(arrays: Mapping[str, np.ndarray], n: int) -> Iterator[tuple[str, float]]:
    """The counter increments of one rollout batch of ``n`` samples."""
    yield "rl_samples_total", float(n)
    if "response_tokens" in arrays:
        yield "rl_completion_tokens_total", _nansum(arrays["response_tokens"])
    if "prompt_tokens" in arrays:
        yield "rl_prompt_tokens_total", _nansum(arrays["prompt_tokens"])


def _nansum(arr: np.ndarray) -> float:
    """``np.nansum``: the plain sum (the same additions) unless it is NaN."""
    total = arr.sum()
    return float(total if total == total else np.nansum(arr))


class Episodes:
    """The last ``EPISODE_WINDOW`` finished episodes: their mean return and length. A mean is
    *judged* (handed to the step-indexed detector as well as shown) once the window is full and
    a quarter of it turned over since the last judged one: a mean over the first few episodes is
    not the same statistic (one early success in a sparse 0/1 reward reads as a peak that every
    later failure erodes, 1/n at a time), and means of windows that share most of their episodes
    repeat each other, which the detector's noise and frozen-value tests read as a quiet series.
    The episodes themselves are judged one by one (``Detector.episodes``)."""

    def __init__(self, window: int = EPISODE_WINDOW) -> None:
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[float] = deque(maxlen=window)
        self.turnover = window // 4
        self.since = 0  # episodes since the last judged mean

    def add(self, returns: np.ndarray, lengths: np.ndarray) -> tuple[list[Gauge], bool]:
        """Take finished episodes (arrays of equal size): the episode gauges now, and whether
        they are judged."""
        self.returns.extend(returns.tolist())
        self.lengths.extend(lengths.tolist())
        self.since += len(returns)
        if not self.returns:
            return [], False
        judged = len(self.returns) == self.returns.maxlen and self.since >= self.turnover
        if judged:
            self.since = 0
        return [
            ("rl_episode_return", {}, sum(self.returns) / len(self.returns)),
            ("rl_episode_length_steps", {}, sum(self.lengths) / len(self.lengths)),
        ], judged
