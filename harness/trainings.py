"""Real CPU trainings with failures induced the way they happen in practice (never by writing a
bad metric value), for benchmarks/bench_alert_matrix.py and tests/e2e/test_alert_matrix.py.

Each trainer writes its framework's own log into ``workdir`` (SB3 ``progress.csv``, TensorBoard
events, JSONL) and, given an ``Exporter``, reports to it live as a user's trainer would. The
failure starts at a fixed environment step (``inject_at``); ``Run.inject_step`` is the first
logged step at or after it.

* SB3 PPO, A2C and DQN on CartPole (DQN has no entropy term, so no ``neg-entropy``):
  ``lr-spike`` (a callback swaps the learning-rate schedule for 0.5),
  ``neg-entropy`` (a callback sets ``ent_coef`` to -0.5), ``nan-reward`` (an env wrapper returns
  NaN: the Monitor sees it, the next update's loss is NaN and the run crashes), ``sign-flip``
  (a wrapper negates the reward the agent learns from; Monitor logs the task's return),
  ``stall`` (the env's step blocks for ``STALL_SECONDS`` once, as a remote simulator that stops
  answering until its client's timeout, then the run carries on).
* Tabular Q-learning on FrozenLake (the tutorial loop, ``rlpulse.log`` keys): ``schedule-reset``
  (a schedule bug puts epsilon back to 1 and alpha to 1: the learned Q-table is overwritten).
* CleanRL-style single-file PPO on CartPole writing TensorBoard events: ``lr-spike``.
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from harness.qlearning import q_learning_episode
from rlpulse.runtime.exporter import Exporter

FAILURES = {
    "sb3-ppo": ("lr-spike", "neg-entropy", "nan-reward", "sign-flip", "stall"),
    "sb3-a2c": ("lr-spike", "neg-entropy", "nan-reward", "sign-flip", "stall"),
    "sb3-dqn": ("lr-spike", "nan-reward", "sign-flip", "stall"),  # no entropy term
    "q-learning": ("schedule-reset",),
    "cleanrl-ppo": ("lr-spike",),
}
# one env step blocks this long: past the shipped stall rule's 5 min floor plus its 1 min `for`
STALL_SECONDS = 420.0


@dataclass
class Run:
    """One finished training: where its log is, how to read it, when its failure began."""

    framework: str
    scenario: str
    seed: int
    log: Path
    format: str
    reward_key: str
    inject_at: int | None  # env steps (episodes for Q-learning); None: healthy
    inject_step: int | None = None  # the first logged step at or after inject_at
    crashed: str | None = None  # the exception that ended the run
    key_map: dict[str, str] | None = None  # the user's keys (the true objective), live and replay
    pace: float | None = None  # seconds a logged step took live, for a log without times

    @property
    def run_id(self) -> str:
        return f"{self.framework}-{self.scenario}-s{self.seed}"

    @property
    def healthy(self) -> bool:
        return self.inject_at is None


# ---- Stable-Baselines3 ------------------------------------------------------------------------


class AfterStep(gym.Wrapper[Any, Any, Any, Any]):
    """Changes the reward (or the step's duration) from the ``start``-th env step on."""

    def __init__(self, env: gym.Env[Any, Any], start: int, change: Callable[[float], float]):
        super().__init__(env)
        self.start, self.change, self.steps = start, change, 0

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps >= self.start:
            reward = self.change(float(reward))
        return obs, reward, terminated, truncated, info


class DynamicsCause(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole changed under a trained agent: ``gravity`` x3 from env step 8,000 (new
    dynamics), ``obs-dead`` from step 4,000 (the pole's angular velocity, obs[3], reads 0: a
    dead sensor); any other scenario leaves the env as it is."""

    def __init__(self, env: gym.Env[Any, Any], scenario: str) -> None:
        super().__init__(env)
        self.scenario, self.steps = scenario, 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.scenario == "gravity" and self.steps == 8000:
            self.env.unwrapped.gravity *= 3.0  # type: ignore[attr-defined]
        obs, reward, term, trunc, info = self.env.step(action)
        if self.scenario == "obs-dead" and self.steps >= 4000:
            obs = np.array(obs, copy=True)
            obs[3] = 0.0
        return obs, reward, term, trunc, info


def _hang_once() -> Callable[[float], float]:
    """A reward change that blocks the first step it sees for ``STALL_SECONDS``."""
    hung = False

    def change(reward: float) -> float:
        nonlocal hung
        if not hung:
            hung = True
            time.sleep(STALL_SECONDS)
        return reward

    return change


def _sb3_env(scenario: str, inject_at: int, seed: int) -> Any:
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    def make() -> gym.Env[Any, Any]:
        env: gym.Env[Any, Any] = gym.make("CartPole-v1")
        if scenario == "nan-reward":  # inside Monitor: the logged return is NaN too
            return Monitor(AfterStep(env, inject_at, lambda r: math.nan))
        if scenario == "sign-flip":  # outside Monitor: the agent learns -r, Monitor logs r
            return AfterStep(Monitor(env), inject_at, lambda r: -r)
        if scenario == "stall":
            return Monitor(AfterStep(env, inject_at, _hang_once()))
        return Monitor(env)

    venv = DummyVecEnv([make])
    venv.seed(seed)
    return venv


def _sb3_injection(scenario: str, inject_at: int) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class Inject(BaseCallback):
        """Changes the algorithm mid-run, as a resumed run with a wrong config would."""

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            if self.num_timesteps < inject_at:
                return
            if scenario == "lr-spike":
                self.model.lr_schedule = lambda _: 0.5
            elif scenario == "neg-entropy":
                self.model.ent_coef = -0.5  # type: ignore[attr-defined]

    return Inject()


# Each algorithm tuned to learn CartPole within ~20k steps on one env (rl-zoo settings, smaller)
SB3_ALGOS: dict[str, dict[str, Any]] = {
    "ppo": {"n_steps": 256, "batch_size": 64, "n_epochs": 10, "learning_rate": 1e-3,
            "gamma": 0.98, "gae_lambda": 0.8},
    "a2c": {"n_steps": 16, "learning_rate": 7e-4, "gamma": 0.99, "gae_lambda": 0.95,
            "ent_coef": 0.0},
    "dqn": {"learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 50_000,
            "learning_starts": 1000, "gamma": 0.99, "target_update_interval": 10,
            "train_freq": 256, "gradient_steps": 64, "exploration_fraction": 0.16,
            "exploration_final_eps": 0.04, "policy_kwargs": {"net_arch": [64, 64]}},
}  # fmt: skip
SB3_LOG_INTERVAL = {"ppo": 1, "a2c": 25, "dqn": 4}  # iterations (PPO, A2C) or episodes (DQN)


def train_sb3(
    scenario: str,
    seed: int,
    workdir: Path,
    *,
    timesteps: int,
    inject_at: int,
    algo: str = "ppo",
    exporter: Exporter | None = None,
) -> Run:
    """SB3 ``algo`` (``SB3_ALGOS``) on CartPole-v1; ``healthy`` or one of
    ``FAILURES["sb3-<algo>"]`` from env step ``inject_at``."""
    import stable_baselines3
    from stable_baselines3.common.logger import configure

    from rlpulse.integrations.sb3 import RlpulseCallback

    torch.set_num_threads(1)
    fw = f"sb3-{algo}"
    out = workdir / f"{fw}-{scenario}-s{seed}"
    run = Run(fw, scenario, seed, out, "sb3-csv", "rollout/ep_rew_mean", None)
    if scenario != "healthy":
        run.inject_at = inject_at
    cls = getattr(stable_baselines3, algo.upper())
    env = _sb3_env(scenario, inject_at, seed)
    model = cls("MlpPolicy", env, seed=seed, device="cpu", **SB3_ALGOS[algo])
    model.set_logger(configure(str(out), ["csv"]))
    callbacks = [_sb3_injection(scenario, inject_at)]
    if exporter is not None:
        callbacks.append(RlpulseCallback(exporter))
    try:
        model.learn(timesteps, callback=callbacks, log_interval=SB3_LOG_INTERVAL[algo])
    except ValueError as exc:  # NaN parameters: the policy's distribution refuses them
        run.crashed = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    model.logger.close()
    run.log = out / "progress.csv"
    run.inject_step = _first_step_at(run)
    return run


def _first_step_at(run: Run) -> int | None:
    """The logged step (``train/n_updates``) of the first row with one at or past ``inject_at``."""
    if run.inject_at is None:
        return None
    with open(run.log, newline="") as f:
        for row in csv.DictReader(f):
            # DQN dumps rows between its updates with no train/* values: skip those
            if float(row["time/total_timesteps"]) >= run.inject_at and row.get("train/n_updates"):
                return int(float(row["train/n_updates"]))
    return None


# ---- tabular Q-learning on FrozenLake ---------------------------------------------------------


def train_q_learning(
    scenario: str,
    seed: int,
    workdir: Path,
    *,
    episodes: int = 6000,
    inject_at: int = 4000,
    every: int = 100,
    exporter: Exporter | None = None,
) -> Run:
    """The classic tutorial loop on slippery FrozenLake 4x4, logging every ``every`` episodes
    ``{"episode", "episode_reward", "success_rate", "epsilon", "td_loss"}`` to ``rlpulse.log``
    keys (JSONL beside). ``schedule-reset``: from episode ``inject_at`` a schedule bug sets
    epsilon and alpha back to 1."""
    rng = np.random.default_rng(seed)
    env = gym.make("FrozenLake-v1", map_name="4x4", is_slippery=True)
    q = np.zeros((env.observation_space.n, env.action_space.n))  # type: ignore[attr-defined]
    log = workdir / f"q-learning-{scenario}-s{seed}.jsonl"
    run = Run("q-learning", scenario, seed, log, "jsonl", "episode_reward", None)
    if scenario != "healthy":
        run.inject_at, run.inject_step = inject_at, inject_at
    returns: list[float] = []
    errors: list[float] = []
    with open(log, "w") as f:
        for episode in range(1, episodes + 1):
            broken = run.inject_at is not None and episode >= inject_at
            eps = 1.0 if broken else max(0.05, 1.0 - episode / (0.6 * inject_at))
            alpha = 1.0 if broken else 0.1
            seed_now = int(rng.integers(1 << 31))
            total = q_learning_episode(env, q, rng, seed_now, eps, alpha, 0.99, errors)
            returns.append(total)
            if episode % every == 0:
                rec = {
                    "episode": episode,
                    "episode_reward": float(np.mean(returns[-every:])),
                    "success_rate": float(np.mean(returns[-every:])),
                    "epsilon": eps,
                    "td_loss": float(np.mean(errors)),
                }
                errors.clear()
                f.write(json.dumps({"step": episode, **rec}) + "\n")
                if exporter is not None:
                    exporter.log(rec, step=episode)
    return run


# ---- CleanRL-style PPO writing TensorBoard events ---------------------------------------------


def _agent(obs: int, actions: int) -> torch.nn.Module:
    def layer(i: int, o: int, std: float = math.sqrt(2)) -> torch.nn.Linear:
        lin = torch.nn.Linear(i, o)
        torch.nn.init.orthogonal_(lin.weight, std)
        torch.nn.init.constant_(lin.bias, 0.0)
        return lin

    class Agent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.critic = torch.nn.Sequential(
                layer(obs, 64), torch.nn.Tanh(), layer(64, 64), torch.nn.Tanh(), layer(64, 1, 1.0)
            )
            self.actor = torch.nn.Sequential(
                layer(obs, 64), torch.nn.Tanh(), layer(64, 64), torch.nn.Tanh(),
                layer(64, actions, 0.01),
            )  # fmt: skip

    return Agent()


def train_cleanrl_ppo(
    scenario: str,
    seed: int,
    workdir: Path,
    *,
    iterations: int = 60,
    inject_at: int = 40,
    num_steps: int = 512,
    all_charts: bool = False,
    wrap: Callable[[gym.Env[Any, Any], int], gym.Env[Any, Any]] | None = None,
) -> Run:
    """CleanRL's ppo.py reduced to its core (4 envs, GAE, clipped objective), writing
    ``charts/*`` and ``losses/*`` with ``SummaryWriter``; ``lr-spike`` sets Adam's lr to 0.5
    from iteration ``inject_at`` (a bad resume). Steps are global env steps, as in CleanRL.
    ``all_charts`` also writes ppo.py's ``charts/episodic_length``, ``charts/SPS`` and
    ``losses/explained_variance`` (the alert matrix runs without them). ``wrap(env, start)``
    wraps each env for another cause, ``start`` its own env steps at ``inject_at``."""
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    n_envs, gamma, lam, clip = 4, 0.99, 0.95, 0.2
    start = inject_at * num_steps  # each env's own steps at iteration inject_at

    def make() -> gym.Env[Any, Any]:
        env = gym.make("CartPole-v1")
        return env if wrap is None or scenario == "healthy" else wrap(env, start)

    envs = gym.wrappers.vector.RecordEpisodeStatistics(
        gym.vector.SyncVectorEnv([make for _ in range(n_envs)])
    )
    agent = _agent(4, 2)
    opt = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    out = workdir / f"cleanrl-ppo-{scenario}-s{seed}"
    writer = SummaryWriter(str(out), flush_secs=1)  # a tailer follows the file as it grows
    run = Run("cleanrl-ppo", scenario, seed, out, "tensorboard", "charts/episodic_return", None)
    steps_per_iter = num_steps * n_envs
    if scenario != "healthy":
        run.inject_at = inject_at * steps_per_iter
        run.inject_step = run.inject_at
    obs_np, _ = envs.reset(seed=seed)
    obs = torch.tensor(obs_np, dtype=torch.float32)
    global_step = 0
    started = time.monotonic()
    for _ in range(iterations):
        if scenario == "lr-spike" and global_step >= (run.inject_at or 0):
            opt.param_groups[0]["lr"] = 0.5
        batch, returns = _cleanrl_rollout(envs, agent, obs, num_steps, gamma, lam)
        obs = batch.pop("next_obs")
        global_step += steps_per_iter
        for r in returns:
            writer.add_scalar("charts/episodic_return", r, global_step)
        if all_charts:
            lengths = list(envs.length_queue)[-len(returns) :] if returns else []
            for n in lengths:  # the episodes just finished, as their returns above
                writer.add_scalar("charts/episodic_length", n, global_step)
            sps = int(global_step / (time.monotonic() - started))
            writer.add_scalar("charts/SPS", sps, global_step)
            residual = torch.var(batch["ret"] - batch["val"]) / torch.var(batch["ret"])
            writer.add_scalar("losses/explained_variance", 1 - residual.item(), global_step)
        stats = _cleanrl_update(agent, opt, batch, clip)
        writer.add_scalar("charts/learning_rate", opt.param_groups[0]["lr"], global_step)
        for key, value in stats.items():
            writer.add_scalar(f"losses/{key}", value, global_step)
    writer.close()
    envs.close()
    return run


def _cleanrl_rollout(
    envs: Any, agent: Any, obs: torch.Tensor, num_steps: int, gamma: float, lam: float
) -> tuple[dict[str, torch.Tensor], list[float]]:
    cols: dict[str, list[torch.Tensor]] = {k: [] for k in ("obs", "act", "logp", "val", "rew")}
    dones, returns = [], []
    for _ in range(num_steps):
        with torch.no_grad():
            dist = torch.distributions.Categorical(logits=agent.actor(obs))
            action = dist.sample()
            cols["val"].append(agent.critic(obs).flatten())
        cols["obs"].append(obs)
        cols["act"].append(action)
        cols["logp"].append(dist.log_prob(action))
        nxt, reward, term, trunc, info = envs.step(action.numpy())
        cols["rew"].append(torch.tensor(reward, dtype=torch.float32))
        dones.append(torch.tensor(term | trunc, dtype=torch.float32))
        if "episode" in info:
            returns += [float(r) for r in info["episode"]["r"][info["_episode"]]]
        obs = torch.tensor(nxt, dtype=torch.float32)
    with torch.no_grad():
        last = agent.critic(obs).flatten()
    adv = torch.zeros(num_steps, obs.shape[0])
    gae = torch.zeros(obs.shape[0])
    for t in reversed(range(num_steps)):
        nv = last if t == num_steps - 1 else cols["val"][t + 1]
        delta = cols["rew"][t] + gamma * nv * (1 - dones[t]) - cols["val"][t]
        gae = delta + gamma * lam * (1 - dones[t]) * gae
        adv[t] = gae
    batch = {k: torch.stack(v).flatten(0, 1) for k, v in cols.items()}
    batch["adv"] = adv.flatten()
    batch["ret"] = batch["adv"] + batch["val"]
    batch["next_obs"] = obs
    return batch, returns


def _cleanrl_update(
    agent: Any, opt: torch.optim.Optimizer, b: dict[str, torch.Tensor], clip: float
) -> dict[str, float]:
    n = len(b["adv"])
    stats: dict[str, float] = {}
    for _ in range(4):
        for idx in torch.randperm(n).split(n // 4):
            dist = torch.distributions.Categorical(logits=agent.actor(b["obs"][idx]))
            logp = dist.log_prob(b["act"][idx])
            ratio = (logp - b["logp"][idx]).exp()
            adv = b["adv"][idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
            v = ((agent.critic(b["obs"][idx]).flatten() - b["ret"][idx]) ** 2).mean() / 2
            ent = dist.entropy().mean()
            opt.zero_grad()
            (pg - 0.01 * ent + 0.5 * v).backward()
            norm = torch.nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            opt.step()
            with torch.no_grad():
                stats = {
                    "policy_loss": pg.item(),
                    "value_loss": v.item(),
                    "entropy": ent.item(),
                    "approx_kl": ((ratio - 1) - (logp - b["logp"][idx])).mean().item(),
                    "grad_norm": float(norm),
                }
    return stats
