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

With ``rlpulse.start(on_alert=...)`` (``rlpulse.control``) the run acts on its alerts at the
next optimizer step: ``control.should_save`` (the Trainer saves ``checkpoint-<global_step>``) and,
on a stop, ``control.should_training_stop``; every checkpoint the Trainer saves is reported as a
resume point, and a stopped run ends ``stopped`` with the resume line printed. Only process zero
reads the alerts, so a multi-process run stops there alone: act with ``save`` only, or stop every
rank yourself (docs/integrations/trl.md).
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from collections.abc import Mapping
from typing import Any

from rlpulse import catalog
from rlpulse import control as rlpulse_control
from rlpulse.exporter import Exporter
from rlpulse.integrations.common import (
    end_run,
    exporter_for,
    missing,
    numbers,
    set_hyperparameters,
    starts_exporter,
)
from rlpulse.logs.base import nan_if_none

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
except ImportError as exc:
    raise missing("transformers", "trl", exc) from exc

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
        **start_kwargs: Any,
    ) -> None:
        self._given = exporter
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
        c = rlpulse_control.of(self.exporter) if self.exporter is not None else None
        if c is not None and c.action() is not None:
            control.should_save = control.should_save or c.should_save()
            control.should_training_stop = control.should_training_stop or c.should_stop()

    def on_save(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        **kwargs: Any,
    ) -> None:
        """Every checkpoint the Trainer saves is a resume point (and the save an alert asked)."""
        c = rlpulse_control.of(self.exporter) if self.exporter is not None else None
        if c is not None:
            folder = f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            path = os.path.join(args.output_dir or "", folder)
            c.checkpoint_saved(state.global_step, path)

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
        # the same on every rank; TRL logs a metric that was NaN all window long as None
        gathered = (
            numbers({k: nan_if_none(v) for k, v in logs.items()})
            if state.is_world_process_zero
            else {}
        )
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
