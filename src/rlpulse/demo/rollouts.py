"""One step's rollouts: a ``RolloutBatch`` for the exporter and per-rollout records for traces."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlpulse.demo.policy import Generation
from rlpulse.demo.task import COMPONENTS, Grade, render, render_prompt
from rlpulse.runtime.recording import RolloutBatch


@dataclass(frozen=True)
class RolloutRecord:
    """Everything about one rollout, in plain Python types (easy to serialise or hand over)."""

    rollout_id: str
    step: int
    group: int  # index of the prompt group within the step
    prompt: str
    response: str
    prompt_tokens: int
    response_tokens: int
    reward: float
    components: dict[str, float]
    advantage: float
    truncated: bool
    verdict: str  # the training grader's verdict (see rlpulse.demo.task)


@dataclass
class StepRollouts:
    """The rollouts of one training step, grouped consecutively by prompt."""

    step: int
    prompts: list[np.ndarray]  # one per sample
    gen: Generation
    grades: list[Grade]
    components: dict[str, np.ndarray]  # name -> (n,) reward component
    rewards: np.ndarray
    advantages: np.ndarray
    grader_seconds: np.ndarray  # latency of each grader call
    group_size: int

    @property
    def prompt_tokens(self) -> np.ndarray:
        """Prompt lengths in tokens."""
        return np.array([len(p) for p in self.prompts])

    @property
    def response_tokens(self) -> np.ndarray:
        """Response lengths in tokens."""
        return self.gen.lengths

    @property
    def truncated(self) -> np.ndarray:
        """Responses cut at the length limit."""
        return ~self.gen.ended

    @property
    def format_ok(self) -> np.ndarray:
        """Responses the training grader found well-formed."""
        return np.array([g.format_ok for g in self.grades])

    @property
    def success(self) -> np.ndarray:
        """Responses the training grader judged correct."""
        return np.array([g.correct for g in self.grades])

    def batch(self) -> RolloutBatch:
        """The step's rollouts as ``observe_rollouts`` takes them."""
        return RolloutBatch(
            latency_seconds=self.gen.latency,
            response_tokens=self.response_tokens,
            prompt_tokens=self.prompt_tokens,
            rewards=self.rewards,
            components=self.components,
            truncated=self.truncated,
            format_ok=self.format_ok,
            success=self.success,
            group_size=self.group_size,
            rollout_ids=self.ids(),
        )

    def ids(self) -> list[str]:
        """A stable id per rollout: ``s<step>-p<group>-g<index in group>``."""
        g = self.group_size
        return [f"s{self.step}-p{i // g}-g{i % g}" for i in range(len(self.prompts))]

    def records(self) -> list[RolloutRecord]:
        """One record per rollout, in batch order."""
        lengths = self.response_tokens
        out = []
        for i, rid in enumerate(self.ids()):
            n = int(lengths[i])
            out.append(
                RolloutRecord(
                    rollout_id=rid,
                    step=self.step,
                    group=i // self.group_size,
                    prompt=render_prompt(self.prompts[i]),
                    response=render(self.gen.tokens[i, :n]),
                    prompt_tokens=len(self.prompts[i]),
                    response_tokens=n,
                    reward=float(self.rewards[i]),
                    components={c: float(self.components[c][i]) for c in COMPONENTS},
                    advantage=float(self.advantages[i]),
                    truncated=not bool(self.gen.ended[i]),
                    verdict=self.grades[i].verdict,
                )
            )
        return out
