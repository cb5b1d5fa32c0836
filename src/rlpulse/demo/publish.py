"""Export one demo training step through rlpulse's public API, as a user's trainer would.

Three layers: the trainer's TRL-style log dict (RL), per-rollout arrays and grader timings
(system and task), the eval scores (task). Phase timings come from ``rlpulse.phase`` wrapped
around the trainer's phases (see ``Trainer(phase=...)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import rlpulse
from rlpulse import catalog
from rlpulse.demo.grpo import StepStats, TrainConfig
from rlpulse.demo.rollouts import StepRollouts
from rlpulse.demo.task import BENCHMARK

EVAL_SCORE = catalog.get("rl_eval_score").name
GRADER_SECONDS = catalog.get("rl_grader_duration_seconds").name
GRADER_CALLS = catalog.get("rl_grader_calls_total").name
KL_COEF = catalog.get("rl_kl_coefficient").name
HYPERPARAMETER = catalog.get("rl_hyperparameter").name
ADVANTAGE = {
    stat: catalog.get(f"rl_advantage_{stat}").name for stat in ("mean", "std", "min", "max")
}

METADATA = {
    "model": "toy-loglinear-policy",
    "framework": "trl",
    "benchmark": BENCHMARK,
    "grader_version": "toy-arith-grader/1",
}


def publish_config(config: TrainConfig) -> None:
    """The run's numeric settings as hyperparameter gauges (again whenever they change)."""
    for name, value in config.hyperparameters().items():
        rlpulse.set(HYPERPARAMETER, value, name=name)
    rlpulse.set(KL_COEF, config.beta)


def trace_columns(rollouts: StepRollouts) -> dict[str, Any]:
    """One step's rollouts as the arguments of ``record_rollouts`` (the trace store's columns)."""
    records = rollouts.records()
    return {
        "rollout_ids": rollouts.ids(),
        "step": rollouts.step,
        "group_ids": [f"s{rollouts.step}-p{r.group}" for r in records],
        "prompts": [r.prompt for r in records],
        "responses": [r.response for r in records],
        "rewards": rollouts.rewards,
        "components": rollouts.components,
        "advantages": rollouts.advantages,
        "lengths": rollouts.response_tokens,
        "truncated": rollouts.truncated,
        "verdicts": [r.verdict for r in records],
    }


def publish_step(stats: StepStats, record: bool = True) -> None:
    """Everything one step produced. ``record`` also offers the rollouts to the trace store."""
    rollouts = stats.rollouts
    if record:
        rlpulse.record_rollouts(**trace_columns(rollouts))
    rlpulse.observe_rollouts(**rollouts.batch())
    rlpulse.observe(GRADER_SECONDS, rollouts.grader_seconds)
    rlpulse.count(GRADER_CALLS, len(rollouts.grader_seconds))
    adv = rollouts.advantages
    for stat, fn in (("mean", np.mean), ("std", np.std), ("min", np.min), ("max", np.max)):
        rlpulse.set(ADVANTAGE[stat], float(fn(adv)))
    rlpulse.set(EVAL_SCORE, stats.train_score, benchmark=BENCHMARK, split="train")
    if stats.eval_score is not None:
        rlpulse.set(EVAL_SCORE, stats.eval_score, benchmark=BENCHMARK, split="eval")
    rlpulse.log(stats.metrics, step=stats.step)
