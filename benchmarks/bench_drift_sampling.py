"""Training-thread cost of drift sampling (``rlpulse.integrations.common.DriftSampler``).

    python benchmarks/bench_drift_sampling.py [--steps 200000]

What the SB3 callback and the Gymnasium wrappers add to each env step: every 4th step a copy
of the observation's watched columns (at most 16) and the actions (and, for an observation of
at most 16 dimensions, of the one before it: a transition), and once per rollout (here
every 256 steps) the hand-over to the exporter (``observe_features``: a copy, queued; the
scoring runs on the apply thread, not measured here). CPU of the training thread
(``time.thread_time``) per env step, against a dict write of 32 values (bench_log.py's
baseline; target ≤ 2.5x), for a CartPole observation (1 env x 4) and a vector env of Atari
frames (8 envs x 4x84x84).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rlpulse import Exporter
from rlpulse.integrations.common import DriftSampler

ROLLOUT = 256
N_KEYS = 32


def per_step(steps: int, obs: np.ndarray, actions: np.ndarray, exp: Exporter) -> float:
    """µs of training-thread CPU per env step for sampling and handing over."""
    sampler = DriftSampler(4, discrete=True, batched=True)
    before, ends = obs.copy(), np.zeros(len(obs), bool)  # the SB3 callback's _last_obs, dones
    t0 = time.thread_time()
    for i in range(steps):
        sampler.step(obs, actions, before, ends)
        if i % ROLLOUT == ROLLOUT - 1:
            sampler.flush(exp)
    elapsed = time.thread_time() - t0
    exp.flush()
    return elapsed / steps * 1e6


def dict_write(steps: int) -> float:
    values = {f"key_{i}": float(i) for i in range(N_KEYS)}
    out: dict[str, float] = {}
    t0 = time.thread_time()
    for _ in range(steps):
        out.update(values)
    return (time.thread_time() - t0) / steps * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200_000)
    args = ap.parse_args()
    exp = Exporter(port=0, run_id="bench", gpu=False, host=False, process=False)
    base = dict_write(args.steps)
    print(f"dict write of {N_KEYS} values: {base:.3f} us a step")
    cases = {
        "CartPole (1 x 4)": (np.zeros((1, 4), np.float32), np.zeros(1, np.int64)),
        "Atari vec (8 x 4x84x84)": (np.zeros((8, 4, 84, 84), np.uint8), np.zeros(8, np.int64)),
    }
    for name, (obs, actions) in cases.items():
        cost = per_step(args.steps // (10 if obs.size > 1000 else 1), obs, actions, exp)
        print(
            f"{name:24s} drift sampling: {cost:.3f} us a step ({cost / base:.2f}x the dict write)"
        )
    exp.close()


if __name__ == "__main__":
    main()
