"""How RLRewardCollapse reads on healthy SB3 runs trained as a tutorial would: default settings.

    nice .venv/bin/python scripts/healthy_dips.py --keep /tmp/dips [SETUP:SEED ...]

Each run (SB3's default hyperparameters, one env, CPU) is trained into its own run folder
(``progress.csv`` and the ``Monitor`` file), or taken from ``--keep`` where it was trained
before, and replayed through the shipped rules as the alert matrix does
(``harness.alert_matrix.replay``): every logged row one scrape after the one before
(``rows``) and at the run's own pace (``paced``). Per run and series it prints, as one JSON
line, the worst ``reward_gain_lost_ratio`` a scrape read, the step it read it at, the scrapes
at or above the alert's warning and critical levels, and the critical alerts that fired.
None of these runs fails: every critical alert on them is a false page.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness import alert_matrix as am  # noqa: E402
from harness.trainings import Run  # noqa: E402
from rlpulse.stack.alerts.rl import REWARD_COLLAPSE  # noqa: E402

# setup -> (algorithm, env id, env kwargs, env steps)
SETUPS: dict[str, tuple[str, str, dict[str, Any], int]] = {
    "dqn-frozenlake": ("dqn", "FrozenLake-v1", {"is_slippery": True}, 200_000),
    "a2c-cartpole": ("a2c", "CartPole-v1", {}, 120_000),
    "ppo-cartpole": ("ppo", "CartPole-v1", {}, 100_000),
    "ppo-frozenlake": ("ppo", "FrozenLake-v1", {"is_slippery": True}, 100_000),
    "dqn-cartpole": ("dqn", "CartPole-v1", {}, 100_000),
}
DEFAULT = (
    *(f"dqn-frozenlake:{s}" for s in range(4)),
    *(f"a2c-cartpole:{s}" for s in range(8)),
    *(f"ppo-cartpole:{s}" for s in range(3)),
    "ppo-frozenlake:0",
    *(f"dqn-cartpole:{s}" for s in range(3)),
)


def train(setup: str, seed: int, out: Path) -> Run:
    """One default-settings SB3 run into ``out`` (kept: trained once)."""
    run = Run(f"sb3-{setup}", "healthy", seed, out, "sb3-run", "rollout/ep_rew_mean", None)
    if (out / "progress.csv").exists():
        return run
    import gymnasium as gym
    import stable_baselines3
    import torch
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    algo, env_id, kwargs, steps = SETUPS[setup]
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    venv = DummyVecEnv([lambda: Monitor(gym.make(env_id, **kwargs), str(out))])
    venv.seed(seed)
    model = getattr(stable_baselines3, algo.upper())("MlpPolicy", venv, seed=seed, device="cpu")
    model.set_logger(configure(str(out), ["csv"]))
    model.learn(steps)
    model.logger.close()
    return run


def read(result: am.ReplayResult) -> dict[str, Any]:
    """The worst lost gain per series, where, and how many scrapes it held each level."""
    tl = result.timeline
    out: dict[str, Any] = {}
    for key in tl.keys_of(am.SIGNAL):
        if f'signal="{REWARD_COLLAPSE.signal}"' not in key:
            continue
        series = re.search(r'series="([^"]*)"', key)
        at = [(v, -i) for i, v in enumerate(tl.values(key)) if v is not None and v == v]
        if not at:
            continue
        worst, i = max(at)  # (the first scrape that read it)
        i = -i
        out[series.group(1) if series else ""] = {
            "worst": round(worst, 3),
            "step": tl.step_at(i * tl.interval),
            "warning_scrapes": sum(v >= REWARD_COLLAPSE.warning for v, _ in at),
            "critical_scrapes": sum(v >= REWARD_COLLAPSE.critical for v, _ in at),
            "scrapes": tl.scrapes,
        }
    out["critical"] = sorted({f"{a.alert}@{a.onset_step}" for a in result.critical()})
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", default=DEFAULT, help="SETUP:SEED (default: all)")
    ap.add_argument("--keep", type=Path, required=True, help="the run folders' parent")
    args = ap.parse_args(argv)
    for name in args.runs:
        setup, seed = name.split(":")
        run = train(setup, int(seed), args.keep / f"{setup}-s{seed}")
        row = {"run": name, "rows": read(am.replay(run, rows=True)), "paced": read(am.replay(run))}
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
