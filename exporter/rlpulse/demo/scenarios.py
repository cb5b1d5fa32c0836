"""The demo's scenarios: a healthy run and six ways a run goes wrong, each by a real cause.

A scenario only changes the trainer's settings (or its grader); the failure then follows from
the training dynamics. ``signature`` is what to look for, ``within_steps`` how many training
steps it takes at most to show (seeds 0–4, measured by ``tests/test_demo_scenarios.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rlpulse.demo.grpo import TrainConfig
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
            "learning rate 100x too high and no entropy bonus",
            "token entropy falls below 0.05 nats and stays there; groups lose reward variance",
            60,
            replace(_BASE, lr=0.3, entropy_coef=0.0),
        ),
        Scenario(
            "kl-blowup",
            "no KL penalty and large steps (lr 0.2, 4 PPO epochs per batch)",
            "KL to the reference above 0.5 for good (spikes far higher); reward and eval fall",
            40,
            replace(_BASE, beta=0.0, lr=0.2, ppo_epochs=4),
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
            "a verbosity reward (+0.05 per extra token) instead of a length penalty",
            "mean response length doubles and many responses are truncated at the limit",
            150,
            replace(_BASE, reward=RewardSpec(length_per_token=0.05)),
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
