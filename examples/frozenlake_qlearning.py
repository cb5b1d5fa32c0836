"""Tabular Q-learning on Gymnasium's FrozenLake, exported with rlpulse (classic RL).

    pip install rlpulse gymnasium
    python examples/frozenlake_qlearning.py --episodes 20000          # then scrape :9400/metrics

Every ``--log-every`` episodes it reports the finished episodes (return, length, success), the
environment steps, a CleanRL-style log dict (epsilon, TD loss, Q values, steps/s) and, every
``--eval-every`` episodes, the greedy policy's success rate as the eval score.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

import rlpulse
from rlpulse import catalog

ENV_ID = "FrozenLake-v1"
ENV_STEPS = catalog.get("rl_env_steps_total").name
EVAL_SCORE = catalog.get("rl_eval_score").name


@dataclass(frozen=True)
class Settings:
    """Q-learning hyperparameters (exported as rl_hyperparameter gauges)."""

    alpha: float = 0.1
    gamma: float = 0.99
    epsilon_start: float = 1.0
    epsilon_min: float = 0.05
    epsilon_decay: float = 0.999  # per episode
    slippery: bool = True
    map_name: str = "4x4"


def greedy(values: np.ndarray, rng: np.random.Generator) -> int:
    """The best action, ties broken at random (an all-zero row must not always pick 0)."""
    return int(rng.choice(np.flatnonzero(values == values.max())))


def greedy_success(env: gym.Env, q: np.ndarray, episodes: int, seed: int) -> float:
    """Success rate of the greedy policy over ``episodes`` fresh episodes."""
    rng = np.random.default_rng(seed)
    wins = 0
    for i in range(episodes):
        state, _ = env.reset(seed=seed + i)
        done = False
        while not done:
            state, reward, term, trunc, _ = env.step(greedy(q[state], rng))
            done = term or trunc
        wins += reward > 0
    return wins / episodes


def train(
    episodes: int,
    settings: Settings,
    seed: int = 0,
    log_every: int = 100,
    eval_every: int = 1000,
    step_delay: float = 0.0,
) -> np.ndarray:
    """Train and report through the process-wide exporter; returns the Q table."""
    env = gym.make(ENV_ID, map_name=settings.map_name, is_slippery=settings.slippery)
    eval_env = gym.make(ENV_ID, map_name=settings.map_name, is_slippery=settings.slippery)
    rng = np.random.default_rng(seed)
    q = np.zeros((env.observation_space.n, env.action_space.n))  # type: ignore[attr-defined]
    eps = settings.epsilon_start
    returns, lengths, td_sq, q_taken = [], [], [], []
    t0, steps_done = time.perf_counter(), 0
    for episode in range(1, episodes + 1):
        with rlpulse.phase("rollout"):
            state, _ = env.reset(seed=seed + episode)
            done, ret, n = False, 0.0, 0
            while not done:
                explore = rng.random() < eps
                action = int(rng.integers(q.shape[1])) if explore else greedy(q[state], rng)
                nxt, reward, term, trunc, _ = env.step(action)
                target = reward + (0.0 if term else settings.gamma * q[nxt].max())
                td = target - q[state, action]
                q[state, action] += settings.alpha * td
                td_sq.append(td * td)
                q_taken.append(q[state, action])
                state, ret, n, done = nxt, ret + float(reward), n + 1, term or trunc
        returns.append(ret)
        lengths.append(n)
        eps = max(settings.epsilon_min, eps * settings.epsilon_decay)
        if episode % log_every == 0 or episode == episodes:
            steps = int(sum(lengths))
            steps_done += steps
            rlpulse.observe_episodes(returns, lengths, success=[r > 0 for r in returns])
            rlpulse.count(ENV_STEPS, steps)
            rlpulse.log(
                {
                    "charts/epsilon": eps,
                    "charts/learning_rate": settings.alpha,
                    "losses/td_loss": float(np.mean(td_sq)),
                    "losses/q_values": float(np.mean(q_taken)),
                    "charts/SPS": steps_done / (time.perf_counter() - t0),
                },
                step=episode,
            )
            returns, lengths, td_sq, q_taken = [], [], [], []
            if step_delay:
                time.sleep(step_delay)
        if episode % eval_every == 0 or episode == episodes:
            with rlpulse.phase("eval"):
                score = greedy_success(eval_env, q, 100, seed=10**6 + episode)
            rlpulse.set(EVAL_SCORE, score, benchmark=f"{ENV_ID}-{settings.map_name}", split="eval")
    return q


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, serve /metrics, train."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--episodes", type=int, default=20_000)
    p.add_argument("--port", type=int, default=None, help="metrics port (default 9400)")
    p.add_argument("--run-id", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--map", dest="map_name", default="4x4", choices=("4x4", "8x8"))
    p.add_argument("--not-slippery", dest="slippery", action="store_false")
    p.add_argument("--log-every", type=int, default=100, help="episodes per report")
    p.add_argument("--eval-every", type=int, default=1000, help="episodes between evals")
    p.add_argument("--step-delay", type=float, default=0.0, help="seconds to pause per report")
    args = p.parse_args(argv)
    if args.episodes < 1 or args.log_every < 1 or args.eval_every < 1:
        p.error("--episodes, --log-every and --eval-every must be >= 1")
    settings = Settings(slippery=args.slippery, map_name=args.map_name)
    exp = rlpulse.start(
        args.port,
        run_id=args.run_id,
        config={k: v for k, v in vars(settings).items() if not isinstance(v, str)},
        metadata={"framework": "cleanrl", "model": "tabular-q", "benchmark": ENV_ID},
    )
    print(f"frozenlake: metrics at {exp.url} (run_id={exp.run_id})", flush=True)
    q = train(args.episodes, settings, args.seed, args.log_every, args.eval_every, args.step_delay)
    rlpulse.finish()  # the run ended on purpose: no page (an exception here would page a crash)
    env = gym.make(ENV_ID, map_name=settings.map_name, is_slippery=settings.slippery)
    print(f"frozenlake: greedy success {greedy_success(env, q, 200, 99):.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
