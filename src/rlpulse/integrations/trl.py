"""TRL (and any transformers ``Trainer``): a ``TrainerCallback`` that exports what the trainer logs.

``GRPOTrainer(..., callbacks=[RlpulseCallback()])`` (PPO, RLOO, DPO, SFT … alike). Each
``on_log`` dict (TRL's GRPO/PPO keys: reward, reward_std, kl, entropy, clip ratios, completion
lengths, per-function rewards, loss, grad_norm, learning_rate, eval_* …) goes through
``Exporter.log`` and the TRL key map, with the step taken from ``state.global_step``. Each
optimizer step's wall time lands in ``rl_phase_duration_seconds{phase="step"}``.

Only the world's process zero reports by default: transformers gathers the logged values across
processes, so every rank would export the same numbers. ``all_ranks=True`` gives each process
its own exporter (port = base port + local rank, labelled with its rank) for what is its own:
its step (liveness), its step times and, with ``gpu``/``host`` left on, its node's readings;
the gathered batch statistics and the hyperparameters stay on process zero, so no series is
duplicated across ranks (docs/scaling.md).

Rollouts are recorded by default (``rollouts=False`` turns it off): after each optimizer step
process zero offers the newest generation batch GRPOTrainer keeps for its completion log
(``trainer._logs``: prompts, completions, each reward function's value, advantages) to the run's
bounded rollout store, with the weighted total as the reward, a group id per prompt
(``num_generations`` consecutive completions), lengths in characters and the completion's tool
calls, so ``rlpulse rollouts serve`` shows them; the same batch gives drift samples (each
prompt's length as an input; response lengths, the reward and each component as behaviour).
The trainer is found on the call stack of ``on_train_begin`` (transformers hands callbacks no
trainer) and held by a weak reference.

With ``rlpulse.start(on_alert=...)`` (``rlpulse.control``) the run acts on its alerts at the
next optimizer step: ``control.should_save`` (the Trainer saves ``checkpoint-<global_step>``) and,
on a stop, ``control.should_training_stop``; every checkpoint the Trainer saves is reported as a
resume point, and a stopped run ends ``stopped`` with the resume line printed. Only process zero
reads the alerts, so a multi-process run stops there alone: act with ``save`` only, or stop every
rank yourself (docs/integrations/trl.md).
"""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import time
import weakref
from collections.abc import Mapping
from typing import Any

from rlpulse import catalog
from rlpulse import control as rlpulse_control
from rlpulse.integrations.common import (
    end_run,
    exporter_for,
    numbers,
    requires,
    set_hyperparameters,
    starts_exporter,
)
from rlpulse.offline.logs.base import Nulls, nan_if_none
from rlpulse.runtime.exporter import Exporter

with requires("transformers", "trl"):
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

PHASE = catalog.get("rl_phase_duration_seconds").name
STEP_PHASE = "step"
# TrainingArguments / TRL config fields exported as rl_hyperparameter{name} when numeric
HYPERPARAMETERS = (
    "learning_rate",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_train_epochs",
    "max_steps",
    "warmup_steps",
    "weight_decay",
    "max_grad_norm",
    "seed",
    "beta",
    "num_generations",
    "num_iterations",
    "epsilon",
    "epsilon_high",
    "temperature",
    "top_p",
    "max_prompt_length",
    "max_completion_length",
    "kl_coef",
    "cliprange",
    "vf_coef",
    "gamma",
    "lam",
)


def _version() -> str:
    for dist in ("trl", "transformers"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


class RlpulseCallback(TrainerCallback):
    """Exports a transformers/TRL run. ``exporter``: report there; else to the process-wide
    exporter, started at ``on_train_begin`` (``start_kwargs`` go to ``rlpulse.start``) unless
    ``start=False``. ``framework`` picks the key map (``"trl"``)."""

    def __init__(
        self,
        exporter: Exporter | None = None,
        *,
        start: bool = True,
        all_ranks: bool = False,
        framework: str = "trl",
        rollouts: bool = True,
        **start_kwargs: Any,
    ) -> None:
        self.rollouts = rollouts
        self._trainer: weakref.ref[Any] | None = None
        self._recorded: tuple[Any, ...] | None = None  # the batch recorded last
        self._given = exporter
        self._nulls = Nulls()
        self._start = start
        self.all_ranks = all_ranks
        self.framework = framework
        self._start_kwargs = start_kwargs
        self.exporter: Exporter | None = None
        self._started = False
        self._step_t0: float | None = None

    def _reports(self, state: TrainerState) -> bool:
        return self.all_ranks or bool(state.is_world_process_zero)

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        if not self._reports(state):
            return
        start_kwargs = dict(self._start_kwargs)
        model = kwargs.get("model")
        name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        start_kwargs.setdefault("metadata", {"model": name} if model is not None else {})
        self._started = starts_exporter(self._given, self._start)
        self.exporter = exporter_for(
            self._given, self.framework, _version(), start=self._start, **start_kwargs
        )
        if self.exporter is not None and state.is_world_process_zero:
            params = {k: getattr(args, k, None) for k in HYPERPARAMETERS}
            set_hyperparameters(self.exporter, params)
            trainer = _calling_trainer() if self.rollouts else None
            self._trainer = weakref.ref(trainer) if trainer is not None else None

    def on_step_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        self._step_t0 = time.perf_counter()

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        if self._step_t0 is not None and self.exporter is not None:
            self.exporter.observe(PHASE, time.perf_counter() - self._step_t0, phase=STEP_PHASE)
        self._step_t0 = None
        trainer = self._trainer() if self._trainer is not None else None
        if trainer is not None and self.exporter is not None:
            self._record_rollouts(trainer, int(state.global_step))
        c = rlpulse_control.of(self.exporter) if self.exporter is not None else None
        if c is not None and c.action() is not None:
            control.should_save = control.should_save or c.should_save()
            control.should_training_stop = control.should_training_stop or c.should_stop()

    def _record_rollouts(self, trainer: Any, step: int) -> None:
        """Offer GRPOTrainer's newest generation batch to the rollout store, once."""
        logs = getattr(trainer, "_logs", None)
        if not isinstance(logs, Mapping) or not logs.get("completion"):
            return
        prompts, completions = list(logs["prompt"]), list(logs["completion"])
        advantages = list(logs.get("advantages") or [])
        batch = (id(completions[-1]), len(completions), tuple(advantages[-8:]))
        if batch == self._recorded:
            return  # no new generation since the last step (steps_per_generation > 1)
        self._recorded = batch
        n = len(completions)
        components = {
            str(name): [nan_if_none(v) for v in list(values)[-n:]]
            for name, values in (logs.get("rewards") or {}).items()
        }
        raw = getattr(trainer, "reward_weights", None)
        weights = list(raw.tolist()) if raw is not None else [1.0] * len(components)
        totals = [
            sum(w * v for w, v in zip(weights, column, strict=False) if v == v)
            for column in zip(*components.values(), strict=True)
        ] or None
        group = max(int(getattr(trainer, "num_generations", 1) or 1), 1)
        texts = [_text(c) for c in completions]
        prompt_texts = [_text(p) for p in prompts]
        exp = self.exporter
        assert exp is not None
        # drift: each prompt once (a group repeats it), lengths in characters
        exp.observe_features("input", prompt_length=[len(p) for p in prompt_texts[::group]])
        behaviour: dict[str, Any] = {f"reward[{k}]": v for k, v in components.items()}
        exp.observe_features(
            "behaviour", response_length=[len(t) for t in texts], reward=totals, **behaviour
        )
        exp.record_rollouts(
            step=step,
            group_ids=[f"{step}-{i // group}" for i in range(n)],
            prompts=prompt_texts,
            responses=texts,
            rewards=totals,
            components=components or None,
            advantages=advantages if len(advantages) == n else None,
            lengths=[len(t) for t in texts],
            tool_calls=[_tool_calls(c) for c in completions],
        )

    def on_prediction_step(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Each evaluation batch, and each finished evaluation, is progress: a long evaluation
        is no stall."""
        if self.exporter is not None:
            self.exporter.progress()

    on_evaluate = on_prediction_step

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Every checkpoint the Trainer saves is a resume point (and the save an alert asked)."""
        if self.exporter is not None:
            folder = f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            path = os.path.join(args.output_dir or "", folder)
            rlpulse_control.checkpoint_saved(state.global_step, path, self.exporter)

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if self.exporter is None or not logs or not self._reports(state):
            return
        # the same on every rank; TRL logs a metric that was NaN all window long as None:
        # a None is NaN (``Nulls``, the rule of every log reader)
        gathered = self._nulls(numbers(logs), dict(logs)) if state.is_world_process_zero else {}
        self.exporter.log(gathered, step=int(state.global_step))

    def on_train_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """An exporter this callback started ends the run (``rlpulse.finish``): a last scrape
        carries the mark, then it stops, and Prometheus does not page RLTargetDown for it. A
        run an alert stopped ends ``stopped`` instead, saying where to resume."""
        c = rlpulse_control.of(self.exporter) if self.exporter is not None else None
        if c is not None and c.should_stop():
            c.stopped(state.global_step)
        end_run(self.exporter, self._started)


def _calling_trainer() -> Any:
    """The transformers ``Trainer`` whose loop is calling this callback (None if not found)."""
    frame = inspect.currentframe()
    try:
        for _ in range(8):
            frame = frame.f_back if frame is not None else None
            if frame is None:
                return None
            candidate = frame.f_locals.get("self")
            if hasattr(candidate, "callback_handler") and hasattr(candidate, "state"):
                return candidate
        return None
    finally:
        del frame


def _text(value: Any) -> str:
    """A prompt or completion as text: a chat (a list of messages) one ``role: content`` line
    per message."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            f"{m.get('role', '?')}: {m.get('content', '')}" if isinstance(m, Mapping) else str(m)
            for m in value
        )
    return str(value)


def _tool_calls(completion: Any) -> list[Any] | None:
    """The tool calls of a chat completion's messages, if any."""
    if not isinstance(completion, list):
        return None
    calls = [
        call for m in completion if isinstance(m, Mapping) for call in (m.get("tool_calls") or [])
    ]
    return calls or None
