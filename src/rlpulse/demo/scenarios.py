"""The demo's scenarios: a healthy run and six ways a run goes wrong, each by a real cause.

A scenario only changes the trainer's settings (or its grader); the failure then follows from
the training dynamics. ``signature`` is what to look for, ``within_steps`` how many training
steps it takes at most to show (seeds 0-4, measured by ``tests/e2e/test_demo_scenarios.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from rlpulse.demo.grpo import PhaseHook, StepStats, TrainConfig, Trainer
from rlpulse.demo.task import RewardSpec

HANG_AT_STEP = 20


@dataclass(frozen=True)
class Scenario:
    """A named trainer configuration and the failure it is expected to show."""

    name: str
    cause: str
    signature: str
    within_steps: int
    config: TrainConfig

    def trainer(self, seed: int = 0, onset: int = 0, phase: PhaseHook | None = None) -> Trainer:
        """A trainer for this scenario; with ``onset`` > 0 it starts under the healthy settings."""
        return Trainer(self.config if onset <= 0 else _BASE, seed=seed, phase=phase)

    def run(self, trainer: Trainer, steps: int, onset: int = 0) -> Iterator[StepStats]:
        """``steps`` training steps, under this scenario's settings after step ``onset``."""
        for stats in trainer.run(steps):
            if onset > 0 and stats.step == onset:
                trainer.reconfigure(self.config)
            yield stats


_BASE = TrainConfig()

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "healthy",
            "sane settings: lr 3e-3, KL penalty 0.2, entropy bonus 0.12",
            "reward and held-out eval rise, entropy declines gently and levels off, KL stays "
            "small, lengths stay put",
            0,
            _BASE,
        ),
        Scenario(
            "entropy-collapse",
            "learning rate ~30x too high (0.1), no entropy bonus and no KL penalty (beta 0, as "
            "in recent GRPO defaults)",
            "token entropy falls below a fifth of its early level by step ~20 and under 0.01 "
            "nats by step ~65; groups lose their reward variance",
            30,
            replace(_BASE, lr=0.1, beta=0.0, entropy_coef=0.0),
        ),
        Scenario(
            "kl-blowup",
            "no KL penalty and large steps (lr 0.1, 16 PPO epochs x 4 minibatches per batch)",
            "KL to the reference above 1 nat for good (median ~3, spikes far higher); reward "
            "and eval collapse",
            60,
            replace(_BASE, beta=0.0, lr=0.1, ppo_epochs=16, minibatches=4),
        ),
        Scenario(
            "reward-hacking",
            "the training grader gives full marks to any response containing '!'",
            "training reward climbs while the strict held-out eval score falls towards 0",
            200,
            replace(_BASE, reward=RewardSpec(loophole=True)),
        ),
        Scenario(
            "length-explosion",
            "a verbosity reward (+0.05 per extra token) instead of a length penalty, and no KL "
            "penalty (beta 0, as in recent GRPO defaults) to anchor the stopping token",
            "mean response length grows past 4x its early level and most responses are cut "
            "at the 64-token limit",
            200,
            replace(_BASE, beta=0.0, reward=RewardSpec(length_per_token=0.05)),
        ),
        Scenario(
            "nan-loss",
            "absurd learning rate (3.0) without gradient clipping",
            "grad norm and KL explode, then log(softmax) underflows: loss, KL, entropy are NaN",
            10,
            replace(_BASE, lr=3.0, max_grad_norm=None),
        ),
        Scenario(
            "stall",
            f"a data-parallel peer never reaches the gradient all-reduce of step {HANG_AT_STEP}",
            "steps stop advancing while the process and its /metrics endpoint stay up",
            HANG_AT_STEP,
            replace(_BASE, hang_at_step=HANG_AT_STEP),
        ),
    )
}


def get(name: str) -> Scenario:
    """The scenario called ``name``; a clear error naming the known ones."""
    try:
        return SCENARIOS[name]
    except KeyError:
        known = ", ".join(SCENARIOS)
        raise ValueError(f"unknown scenario {name!r}; choose one of: {known}") from None
