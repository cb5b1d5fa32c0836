"""Gymnasium: environment wrappers exporting episodes, success, env-step latency and step counts.

``env = RlpulseEpisodeStats(gym.make("CartPole-v1"))`` for one environment,
``envs = RlpulseVectorEpisodeStats(gym.make_vec("CartPole-v1", num_envs=8))`` for a vector env
(any autoreset mode). Per finished episode: return and length (``observe_episodes``), success
(``info["is_success"]`` or ``info["success"]`` at the episode's last step, when the env sets
one) and its wall time (``rl_rollout_duration_seconds``). Per ``step()``: its latency
(``rl_phase_duration_seconds{phase="env_step"}``) and ``rl_env_steps_total``; every 4th
step's observation and action (``drift_every``) is a drift sample (``rlpulse.detect.drift``),
and with the observation before it a transition (``rlpulse.detect.dynamics``).

Each finished episode is also a rollout in the run's bounded store (docs/rollouts.md; the
viewer shows it): its return as the reward, its length, success as the verdict, the reset seed
and the scalar entries of its last ``info`` as metadata, at the step count of the environments so
far; ``rollouts=False`` turns that off.

Steps are buffered in the wrapper and handed to the exporter at most every ``flush_interval``
seconds (and on ``flush()``/``close()``), so a fast environment pays a list append per step.
Wrap the vector env in the main process: an exporter is per process, and a wrapper inside an
``AsyncVectorEnv`` worker reports to nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, TypedDict, Unpack

import numpy as np

import rlpulse
from rlpulse import catalog
from rlpulse.integrations.common import (
    DRIFT_EVERY,
    DriftSampler,
    final_info,
    record_episodes,
    requires,
)
from rlpulse.runtime.exporter import Exporter

with requires("gymnasium", "gymnasium"):
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

ENV_STEP = "env_step"
PHASE = catalog.get("rl_phase_duration_seconds").name
EPISODE_DURATION = catalog.get("rl_rollout_duration_seconds").name
ENV_STEPS = catalog.get("rl_env_steps_total").name
SUCCESS_KEYS = ("is_success", "success")
FLUSH_INTERVAL = 1.0  # seconds between hand-overs to the exporter
MAX_BUFFERED = 65536  # steps buffered before a hand-over regardless of time


class Options(TypedDict, total=False):
    """Both wrappers' keyword options: seconds between hand-overs to the exporter
    (``flush_interval``, default 1), whether finished episodes are stored as rollouts
    (``rollouts``, default True), and every how many steps an observation and action are a
    drift sample (``drift_every``, default 4; 0: none)."""

    flush_interval: float
    rollouts: bool
    drift_every: int


class StepBuffer:
    """Steps and episodes recorded since the last flush, and the hand-over to an exporter."""

    @classmethod
    def for_env(
        cls,
        exporter: Exporter | None,
        action_space: Any,
        batched: bool,
        flush_interval: float = FLUSH_INTERVAL,
        rollouts: bool = True,
        drift_every: int = DRIFT_EVERY,
    ) -> StepBuffer:
        """A wrapper's buffer (``batched``: of a vector env, whose single env takes
        ``action_space``), with its ``Options``."""
        discrete = isinstance(action_space, gym.spaces.Discrete)
        return cls(exporter, flush_interval, rollouts, DriftSampler(drift_every, discrete, batched))

    def __init__(
        self,
        exporter: Exporter | None,
        flush_interval: float,
        rollouts: bool = True,
        drift: DriftSampler | None = None,
    ) -> None:
        self.exporter = exporter
        self.drift = drift or DriftSampler(0, False, False)
        self.flush_interval = flush_interval
        self.rollouts = rollouts
        self.total_steps = 0  # environment steps so far: the step episodes are recorded at
        self.verdicts: list[Any] = []  # per episode: success, or None
        self.infos: list[dict[str, Any]] = []  # per episode: seed and final info
        self.latencies: list[float] = []
        self.steps = 0
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.durations: list[float] = []
        self.success: list[float] = []
        self._last = time.perf_counter()

    def step(self, latency: float, steps: int, now: float) -> None:
        """Record one ``step()`` call that advanced ``steps`` environments."""
        self.latencies.append(latency)
        self.steps += steps
        self.total_steps += steps
        if now - self._last >= self.flush_interval or len(self.latencies) >= MAX_BUFFERED:
            self.flush(now)

    def episode(
        self,
        ret: float,
        length: int,
        duration: float,
        success: Any,
        info: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> None:
        """Record one finished episode (``success`` None when the env does not say)."""
        self.returns.append(ret)
        self.lengths.append(length)
        self.durations.append(duration)
        if success is not None:
            self.success.append(float(success))
        if self.rollouts:
            self.verdicts.append(None if success is None else bool(success))
            self.infos.append({"seed": seed, "final_info": final_info(info or {})})

    def flush(self, now: float | None = None) -> None:
        """Hand everything buffered to the exporter (the process-wide one if none was given)."""
        self._last = time.perf_counter() if now is None else now
        exp = self.exporter or rlpulse.get_exporter()
        self.drift.flush(exp)
        if exp is None:
            self.latencies, self.steps = [], 0
            self.returns, self.lengths, self.durations, self.success = [], [], [], []
            self.verdicts, self.infos = [], []
            return
        if self.steps:
            exp.count(ENV_STEPS, self.steps)
            self.steps = 0
        if self.latencies:
            exp.observe(PHASE, self.latencies, phase=ENV_STEP)
            self.latencies = []
        if self.returns:
            exp.observe_episodes(self.returns, self.lengths, self.success or None)
            exp.observe(EPISODE_DURATION, self.durations)
            if self.rollouts:
                lengths = [float(n) for n in self.lengths]
                record_episodes(
                    exp, self.total_steps, self.returns, lengths, self.verdicts, self.infos
                )
            self.returns, self.lengths, self.durations, self.success = [], [], [], []
            self.verdicts, self.infos = [], []


def _per_env(value: Any) -> bool:
    """Whether a vector env's ``info`` entry holds one value per sub-environment."""
    return isinstance(value, np.ndarray) and value.ndim == 1


def _success(info: Mapping[str, Any]) -> Any:
    for key in SUCCESS_KEYS:
        if key in info:
            return info[key]
    return None


class _HandsOver:
    """What both wrappers share: each ``step()`` timed into their ``StepBuffer``, which they
    hand to the exporter. ``_record`` says what a step recorded: how many env steps it made."""

    buffer: StepBuffer
    env: Any

    def step(self, action: Any) -> Any:
        t0 = time.perf_counter()
        out = self.env.step(action)
        now = time.perf_counter()
        self.buffer.step(now - t0, self._record(action, out, now), now)
        return out

    def _record(self, action: Any, out: tuple[Any, ...], now: float) -> int:
        """Record ``env.step(action)``'s ``out``, returned at ``now``; the env steps it made."""
        raise NotImplementedError

    def flush(self) -> None:
        """Hand the buffered steps and episodes to the exporter now."""
        self.buffer.flush()


class RlpulseEpisodeStats(_HandsOver, gym.Wrapper[Any, Any, Any, Any]):
    """Exports one environment's episodes and steps; see the module docstring and ``Options``."""

    def __init__(
        self, env: gym.Env[Any, Any], exporter: Exporter | None = None, **options: Unpack[Options]
    ) -> None:
        super().__init__(env)
        self.buffer = StepBuffer.for_env(exporter, env.action_space, False, **options)
        self._seed: int | None = None
        self._obs: Any = None  # the observation the next action is taken on
        self._return = 0.0
        self._length = 0
        self._t0 = time.perf_counter()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._return, self._length, self._t0 = 0.0, 0, time.perf_counter()
        self._seed = seed
        self._obs = obs
        return obs, info

    def _record(self, action: Any, out: tuple[Any, ...], now: float) -> int:
        obs, reward, terminated, truncated, info = out
        self.buffer.drift.step(obs, action, self._obs)
        self._obs = obs
        self._return += float(reward)
        self._length += 1
        if terminated or truncated:
            self.buffer.episode(
                self._return, self._length, now - self._t0, _success(info), info, self._seed
            )
            self._return, self._length, self._t0 = 0.0, 0, now
        return 1

    def close(self) -> None:
        self.buffer.flush()
        super().close()


class RlpulseVectorEpisodeStats(_HandsOver, VectorWrapper):
    """Exports a vector environment's episodes and steps, in any autoreset mode.

    With ``NEXT_STEP`` autoreset (Gymnasium's default) the step after an episode ends only
    resets that sub-environment: it is neither counted as an env step nor part of an episode.
    """

    def __init__(
        self,
        env: VectorEnv[Any, Any, Any],
        exporter: Exporter | None = None,
        **options: Unpack[Options],
    ) -> None:
        super().__init__(env)
        self.buffer = StepBuffer.for_env(exporter, env.single_action_space, True, **options)
        self._seeds: list[int | None] = [None] * self.num_envs  # of each env's current episode
        self.autoreset_mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        n = self.num_envs
        self._returns = np.zeros(n)
        self._lengths = np.zeros(n, dtype=np.int64)
        self._t0 = np.full(n, time.perf_counter())
        self._resetting = np.zeros(n, dtype=bool)  # NEXT_STEP: the next step only resets
        self._obs: Any = None  # the observations the next actions are taken on

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        mask = (options or {}).get("reset_mask")
        obs, info = self.env.reset(seed=seed, options=options)
        which = np.ones(self.num_envs, dtype=bool) if mask is None else np.asarray(mask, bool)
        for i in np.flatnonzero(which).tolist():  # gymnasium seeds sub-environment i with seed + i
            self._seeds[i] = seed + i if isinstance(seed, int) else None
        self._returns[which] = 0.0
        self._lengths[which] = 0
        self._t0[which] = time.perf_counter()
        self._resetting[which] = False
        self._obs = obs
        return obs, info

    def _record(self, actions: Any, out: tuple[Any, ...], now: float) -> int:
        obs, rewards, terminations, truncations, infos = out
        same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        # a transition's next observation is of its episode: not a reset's (NEXT_STEP: the step
        # after an end; SAME_STEP: the ending step returns the next episode's first)
        ended = np.logical_or(terminations, truncations) if same_step else self._resetting
        self.buffer.drift.step(obs, actions, self._obs, ended)
        self._obs = obs
        active = ~self._resetting
        self._t0[self._resetting] = now
        self._returns[active] += np.asarray(rewards, dtype=float)[active]
        self._lengths[active] += 1
        done = np.logical_or(terminations, truncations) & active
        if done.any():
            self._episodes(np.flatnonzero(done), infos, now)
        if self.autoreset_mode == AutoresetMode.NEXT_STEP:
            self._resetting = done
        return int(active.sum())

    def _episodes(self, idx: np.ndarray, infos: Mapping[str, Any], now: float) -> None:
        success = next((infos[k] for k in SUCCESS_KEYS if k in infos), None)
        present = next((infos.get(f"_{k}") for k in SUCCESS_KEYS if k in infos), None)
        for i in idx.tolist():
            s = None
            if success is not None and (present is None or present[i]):
                s = success[i]
            last = {k: v[i] for k, v in infos.items() if not k.startswith("_") and _per_env(v)}
            self.buffer.episode(
                float(self._returns[i]), int(self._lengths[i]), now - float(self._t0[i]), s,
                last, self._seeds[i],
            )  # fmt: skip
            self._seeds[i] = None  # the autoreset that follows takes no seed
        self._returns[idx] = 0.0
        self._lengths[idx] = 0
        self._t0[idx] = now

    def close(self, **kwargs: Any) -> None:
        self.buffer.flush()
        super().close(**kwargs)
