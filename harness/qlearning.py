"""Tabular Q-learning, the classic tutorial loop that the trainings and the tests both run."""

from __future__ import annotations

from typing import Any

import numpy as np


def q_learning_episode(
    env: Any,
    q: np.ndarray,
    rng: np.random.Generator,
    seed: int,
    epsilon: float,
    alpha: float,
    gamma: float,
    errors: list[float] | None = None,
    ties: bool = False,
) -> float:
    """One episode of tabular Q-learning, epsilon-greedy with ``rng``, updating ``q`` in place:
    its return (each step's TD error appended to ``errors``); ``ties``: the greedy action drawn
    among the best ones (the quickstart's loop), else the first of them."""
    state, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        explore = rng.random() < epsilon
        if explore:
            action = int(rng.integers(q.shape[1]))
        elif ties:
            action = int(rng.choice(np.flatnonzero(q[state] == q[state].max())))
        else:
            action = int(np.argmax(q[state]))
        nxt, reward, terminated, truncated, _ = env.step(action)
        target = float(reward) + gamma * np.max(q[nxt]) * (not terminated)
        if errors is not None:
            errors.append(abs(target - q[state, action]))
        q[state, action] += alpha * (target - q[state, action])
        state, total, done = nxt, total + float(reward), terminated or truncated
    return total
