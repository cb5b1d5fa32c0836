"""A success rate derived from binary episode returns.

A classic loop like the FrozenLake tutorial logs each episode's return (1 at the goal, else 0)
and no success rate. While every return a run logs is 0 or 1, its success rate is the share of
1s among its last ``WINDOW`` returns (``rl_success_ratio``). The first other value (a shaped or
averaged return) ends the derivation for the run, and so does a success rate the trainer logs
itself: the trainer's own value is then the only one.
"""

from __future__ import annotations

import math
from collections import deque

WINDOW = 100  # episodes, like SB3's rollout/success_rate and the tutorials' moving averages


class SuccessFromReturns:
    """The success rate of the last ``window`` binary episode returns."""

    __slots__ = ("_recent", "_successes", "active")

    def __init__(self, window: int = WINDOW) -> None:
        self._recent: deque[float] = deque(maxlen=window)
        self._successes = 0.0
        self.active = True

    def returned(self, value: float) -> float | None:
        """The rate after one more episode return. At the first return that is not 0 or 1:
        NaN if a rate was given (withdraw it), and None from then on (see :meth:`stop`)."""
        if not self.active:
            return None
        if value != 0.0 and value != 1.0:  # also NaN
            given = bool(self._recent)
            self.stop()
            return math.nan if given else None
        recent = self._recent
        if len(recent) == recent.maxlen:
            self._successes -= recent[0]
        recent.append(value)
        self._successes += value
        return self._successes / len(recent)

    def stop(self) -> None:
        """Derive nothing more (the returns are not binary, or the trainer logs a rate)."""
        self.active = False
        self._recent.clear()
