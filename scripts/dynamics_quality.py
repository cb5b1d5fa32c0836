"""Changed dynamics against healthy learning, on real Gymnasium classic tasks.

    .venv/bin/python scripts/dynamics_quality.py record [--jobs 2] [--out /tmp/dynamics]
    .venv/bin/python scripts/dynamics_quality.py score [--out /tmp/dynamics]

``record`` trains each task (SB3, one env, healthy seeds 20-22 and one seed per dynamics change;
healthy seeds 20-22 of a second algorithm, ``OTHERS``) and keeps every env step's transition
(observation, the action the env applied, next observation, whether the episode ended) and
episode returns in ``<out>/<run>.npz``. ``score``
replays those transitions through ``rlpulse.detect.dynamics`` as the integrations sample them
(every 4th env step) and through the dead-channel rule, and prints per run the highest score
before and after the change and when it first warned.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SEEDS = (20, 21, 22)
# task -> (algorithm, its settings, env steps, env step of the change, {change: (attr, factor)})
TASKS: dict[str, tuple[str, dict[str, Any], int, int, dict[str, tuple[str, float]]]] = {
    "CartPole-v1": (
        "ppo",
        {"n_steps": 256, "batch_size": 64, "n_epochs": 10, "learning_rate": 1e-3,
         "gamma": 0.98, "gae_lambda": 0.8},
        24000, 8000, {"gravity-x3": ("gravity", 3.0), "gravity-x1.5": ("gravity", 1.5)},
    ),
    "Pendulum-v1": (
        "sac",
        {"learning_starts": 1000, "policy_kwargs": {"net_arch": [64, 64]}},
        16000, 8000, {"g-x3": ("g", 3.0), "mass-x2": ("m", 2.0)},
    ),
    "Acrobot-v1": (
        "ppo",
        {"n_steps": 256, "batch_size": 64, "n_epochs": 4, "learning_rate": 1e-3,
         "gamma": 0.99, "gae_lambda": 0.94},
        24000, 12000, {"link2-mass-x2": ("LINK_MASS_2", 2.0)},
    ),
    "MountainCar-v0": (
        "ppo",
        {"n_steps": 256, "batch_size": 64, "n_epochs": 4, "learning_rate": 1e-3,
         "gamma": 0.99, "ent_coef": 0.01},
        24000, 12000, {"force-half": ("force", 0.5)},
    ),
}  # fmt: skip
# healthy runs of other algorithms: task -> (algorithm, its settings, env steps)
OTHERS: dict[str, tuple[str, dict[str, Any], int]] = {
    "CartPole-v1": ("dqn", {"learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 50_000,
                            "learning_starts": 1000, "gamma": 0.99, "target_update_interval": 10,
                            "train_freq": 256, "gradient_steps": 64, "exploration_fraction": 0.16,
                            "exploration_final_eps": 0.04, "policy_kwargs": {"net_arch": [64, 64]}},
                    24000),
    "Pendulum-v1": ("td3", {"learning_starts": 1000, "policy_kwargs": {"net_arch": [64, 64]}},
                    12000),
    "Acrobot-v1": ("a2c", {"n_steps": 16, "learning_rate": 7e-4, "ent_coef": 0.0}, 24000),
    "MountainCar-v0": ("a2c", {"n_steps": 16, "learning_rate": 7e-4, "ent_coef": 0.01}, 24000),
}  # fmt: skip


def record(task: str, change: str, seed: int, out: str) -> str:
    """Train ``task`` with its change (or ``healthy``) and save every transition."""
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3.common.monitor import Monitor

    torch.set_num_threads(1)
    algo, settings, steps, at, changes = TASKS[task]
    if change.startswith("healthy-"):  # another algorithm's healthy run
        algo, settings, steps = OTHERS[task]

    class Tape(gym.Wrapper[Any, Any, Any, Any]):
        def __init__(self, env: gym.Env[Any, Any]) -> None:
            super().__init__(env)
            self.n, self.last = 0, None
            self.rows: list[tuple[Any, ...]] = []

        def reset(self, **kw: Any) -> Any:
            obs, info = self.env.reset(**kw)
            self.last = obs
            return obs, info

        def step(self, action: Any) -> Any:
            self.n += 1
            if change in changes and self.n == at:
                attr, factor = changes[change]
                u = self.env.unwrapped
                setattr(u, attr, getattr(u, attr) * factor)
            obs, reward, term, trunc, info = self.env.step(action)
            self.rows.append((self.last, np.asarray(action, np.float64).reshape(-1), obs,
                              term, trunc, reward))  # fmt: skip
            self.last = obs
            return obs, reward, term, trunc, info

    tape = Tape(gym.make(task))
    env = Monitor(tape)
    model = getattr(stable_baselines3, algo.upper())(
        "MlpPolicy", env, seed=seed, device="cpu", **settings
    )
    model.learn(steps)
    name = f"{task}-{change}-s{seed}"
    obs, act, nxt, term, trunc, rew = zip(*tape.rows, strict=True)
    np.savez_compressed(
        Path(out) / f"{name}.npz",
        obs=np.asarray(obs, np.float64),
        action=np.asarray(act, np.float64),
        next=np.asarray(nxt, np.float64),
        term=np.asarray(term),
        trunc=np.asarray(trunc),
        reward=np.asarray(rew, np.float64),
        at=at if change in changes else -1,
        discrete=isinstance(env.action_space, gym.spaces.Discrete),
    )
    return name


def score(path: Path) -> dict[str, Any]:
    """Replay one recorded run's transitions as the integrations sample them (every 4th env
    step, an episode's end left out, handed over 16 at a time) through the dynamics model, and
    its observations through the dead-channel rule."""
    import numpy as np

    from rlpulse.detect import drift, dynamics

    d = np.load(path)
    ends = d["term"] | d["trunc"]
    sampled = np.arange(3, len(ends), 4)  # the sampler's every 4th step, counted from 1
    kept = sampled[~ends[sampled]]
    discrete = bool(d["discrete"])
    model = dynamics.Dynamics(discrete)
    scores: list[tuple[int, float]] = []
    for i in range(0, len(kept), 16):
        rows = kept[i : i + 16]
        r = model.add(d["obs"][rows], d["action"][rows], d["next"][rows])
        if r is not None:
            scores.append((int(rows[-1]) + 1, r))
    # the observation stream the callbacks sample: after an episode's end, the reset one
    seen = d["next"].copy()
    last = np.flatnonzero(ends[:-1])
    seen[last] = d["obs"][last + 1]
    dead = False
    for j in range(seen.shape[1]):
        f = drift.Feature("observation", f"obs[{j}]", True, None)
        for i in range(0, len(sampled), 16):
            f.add(seen[sampled[i : i + 16], j], 0)
            dead |= f.score == drift.EVENT
    at = int(d["at"])
    returns = np.add.reduceat(d["reward"], np.r_[0, np.flatnonzero(ends)[:-1] + 1])
    finish = np.flatnonzero(ends) + 1
    return {"name": path.stem, "at": at, "scores": scores, "dead": dead,
            "returns": list(zip(finish.tolist(), returns.tolist(), strict=True))}  # fmt: skip


def damaged(returns: list[tuple[int, float]], at: int) -> int | None:
    """The first env step after ``at`` where 5 episodes' mean return is worse than the 20
    before ``at`` by half their size (CartPole 500 -> 250, Pendulum -150 -> -225)."""
    import numpy as np

    before = [v for s, v in returns if s <= at][-20:]
    after = [(s, v) for s, v in returns if s > at]
    if not before:
        return None
    level = float(np.mean(before)) - 0.5 * abs(float(np.mean(before)))
    for i in range(4, len(after)):
        if np.mean([v for _, v in after[i - 4 : i + 1]]) < level:
            return after[i][0]
    return None


def table(out: Path) -> None:
    """Each recorded run's highest error ratio before and after its change, when it first
    reached the level, when its return got worse by half, and whether a healthy observation
    looked dead."""
    import numpy as np

    from rlpulse.detect import dynamics

    print(f"level {dynamics.LEVEL:g}; window {dynamics.WINDOW}, every {dynamics.EVERY}, "
          f"history {dynamics.HISTORY} transitions (every 4th env step)")  # fmt: skip
    print(f"{'run':34s} {'max before':>10s} {'max after':>10s} {'reaches at':>10s} "
          f"{'damage at':>10s} {'scored':>8s}  dead channel")  # fmt: skip
    healthy = []
    for path in sorted(out.glob("*.npz")):
        r = score(path)
        steps = np.array([s for s, _ in r["scores"]])
        vals = np.array([v for _, v in r["scores"]])
        ok = ~np.isnan(vals)
        at = r["at"] if r["at"] >= 0 else 10**9
        before, after = vals[ok & (steps < at)], vals[ok & (steps >= at)]
        hit = steps[ok & (steps >= at) & (vals >= dynamics.LEVEL)]
        damage = damaged(r["returns"], at) if r["at"] >= 0 else None
        if r["at"] < 0:
            healthy.append(before.max() if before.size else float("nan"))
        cells = [f"{a.max():.2f}" if a.size else "-" for a in (before, after)]
        cells += [str(hit[0]) if hit.size else "-", str(damage or "-"), f"{ok.sum()}/{ok.size}"]
        dead = "false alarm" if r["dead"] else "-"
        print(f"{r['name']:34s} " + " ".join(f"{c:>10s}" for c in cells[:4]) + f" {cells[4]:>8s}"
              f"  {dead}")  # fmt: skip
    print(f"healthy runs: highest error ratio {np.nanmax(healthy):.2f} (level {dynamics.LEVEL:g})")


def runs() -> list[tuple[str, str, int]]:
    out = [(t, "healthy", s) for t in TASKS for s in SEEDS]
    out += [(t, c, SEEDS[0]) for t, spec in TASKS.items() for c in spec[4]]
    out += [(t, f"healthy-{spec[0]}", s) for t, spec in OTHERS.items() for s in SEEDS]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("record", "score"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default="/tmp/dynamics")
    ap.add_argument("--only", default="", help="record only runs whose name contains this")
    args = ap.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.what == "record":
        todo = [r for r in runs() if args.only in f"{r[0]}-{r[1]}-s{r[2]}"]
        todo = [r for r in todo if not (Path(args.out) / f"{r[0]}-{r[1]}-s{r[2]}.npz").exists()]
        with ProcessPoolExecutor(args.jobs) as pool:
            for name in pool.map(record, *zip(*todo, strict=True), [args.out] * len(todo)):
                print("recorded", name, flush=True)
    else:
        table(Path(args.out))


if __name__ == "__main__":
    main()
