"""How a 0/1 reward's drop (``Drops``, RLRewardCollapse's discrete path) reads on the quickstart's
Q-learning loop on slippery FrozenLake, healthy and with its reward zeroed.

    nice .venv/bin/python scripts/tutorial_dips.py [--seeds 0 16] [--episodes 4000]

The loop of docs/quickstart.md (random ties, epsilon x0.99 per episode to 0.05, gamma 0.95) on
the slippery map, at learning rates 0.1, 0.3, 0.5 and 0.8: per run, the first episode whose
drop read past RLRewardCollapse's warning (0.5) and critical (0.75) level; then 3 seeds per rate
whose reward is zeroed from episode 2000 (episodes from the failure to the warning and to the
page). Reads the signal alone (``Drops.extend``), not the rules: ``rlpulse replay`` of such a run
agrees (a single evaluation past the level fires).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.qlearning import q_learning_episode  # noqa: E402
from rlpulse.detect.signals import Drops  # noqa: E402

ALPHAS = (0.1, 0.3, 0.5, 0.8)
BROKEN_AT = 2000


def rewards(seed: int, alpha: float, episodes: int, zero_at: int | None = None) -> list[float]:
    """The run's 0/1 episode rewards (0 from ``zero_at`` on: a reward wrapper that answers 0)."""
    import gymnasium as gym
    import numpy as np

    env = gym.make("FrozenLake-v1", is_slippery=True)
    q, rng, epsilon, out = np.zeros((16, 4)), np.random.default_rng(seed), 1.0, []
    for e in range(episodes):
        r = q_learning_episode(env, q, rng, seed * 100_000 + e, epsilon, alpha, 0.95, ties=True)
        epsilon = max(0.05, epsilon * 0.99)
        out.append(0.0 if zero_at is not None and e >= zero_at else r)
    return out


def first_past(values: list[float], level: float, start: int = 0) -> int | None:
    """The first reading from ``start`` whose drop reads past ``level``."""
    drops = Drops()
    for i, v in enumerate(values):
        if drops.extend([v])[0][0] > level and i >= start:
            return i
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs=2, default=(0, 16), metavar=("FIRST", "END"))
    ap.add_argument("--episodes", type=int, default=4000)
    args = ap.parse_args()
    seeds = range(*args.seeds)
    warned, paged = 0, []
    for alpha in ALPHAS:
        for seed in seeds:
            r = rewards(seed, alpha, args.episodes)
            warned += first_past(r, 0.5) is not None
            if (at := first_past(r, 0.75)) is not None:
                paged.append((alpha, seed, at))
    print(f"healthy runs: {len(ALPHAS) * len(seeds)}, paged: {paged}, warned: {warned}")
    for alpha in ALPHAS:
        for seed in range(3):
            r = rewards(seed, alpha, BROKEN_AT + 1000, zero_at=BROKEN_AT)
            w, c = (first_past(r, level, BROKEN_AT) for level in (0.5, 0.75))
            after = [None if x is None else x - BROKEN_AT for x in (w, c)]
            print(f"reward zeroed, alpha {alpha} seed {seed}: warns, pages +{after} episodes")


if __name__ == "__main__":
    main()
