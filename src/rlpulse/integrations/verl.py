"""verl: a logger backend for ``verl.utils.tracking.Tracking``, and a follower of the JSON Lines
its ``file`` backend writes.

In the process that builds ``Tracking`` (verl's driver / TaskRunner), either

* ``register()`` once: then ``trainer.logger=['console','rlpulse']`` in the verl config works
  (importing ``rlpulse.integrations.verl_plugin`` does the same, e.g. through
  ``VERL_USE_EXTERNAL_MODULES=rlpulse.integrations.verl_plugin``), or
* ``attach(tracking)`` on a ``Tracking`` you hold.

Either way each ``Tracking.log(data, step)`` goes through ``Exporter.log`` and the verl key map
(``actor/*``, ``critic/*``, ``response_length/*``, ``timing_s/*`` …); each ``timing_s/<phase>``
is also added to the ``rl_phase_duration_seconds{phase}`` histogram.

Without touching the trainer: ``JsonlFollower(path, VerlBackend())`` follows the file written by
``trainer.logger=['file']`` (``VERL_FILE_LOGGER_PATH``) as it grows; ``poll()`` exports the lines
completed since the last call. verl's own package is not needed for that.

``register()`` and ``attach()`` also send heartbeats (``rlpulse.progress()``) from
``RayPPOTrainer`` while it validates or saves a checkpoint: at the start and end of
``_validate`` and ``_save_checkpoint`` and at each generation batch (``_get_gen_batch``), so a
long validation is no stall; RLTrainingStalled still pages for a run that makes no progress in
any phase. They also record verl's generations as rollouts in the run's bounded
store (``rlpulse rollouts serve`` shows them; ``rollouts=False`` turns it off): every validation
sample at each validation (``RayPPOTrainer._maybe_log_val_generations``, called on every
validation whatever ``trainer.log_val_generations`` says) and, where ``trainer.rollout_data_dir``
is set, every training rollout verl dumps there (``_dump_generations``): prompt, response, score
as the reward, the numeric ``reward_extra_info`` columns as components, ground truth and split as
metadata, at verl's ``global_steps``.

With ``rlpulse.start(on_alert=...)`` (``rlpulse.control``) and ``act_on_alerts(trainer)`` on
the ``RayPPOTrainer`` before ``fit()``, the run acts on its alerts at verl's step boundary
(``Tracking.log`` at the end of a step): it saves (``trainer._save_checkpoint()``,
``global_step_<N>``) and, on a stop, makes the next step the last one (verl decides that a step
is its last when the step begins, so one more step runs and ends ``fit()``); ``Tracking.finish``
then ends the run ``stopped`` with the resume line printed. Every checkpoint the trainer saves
is reported as a resume point.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import logging
import os
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import rlpulse
from rlpulse import catalog, control, notices
from rlpulse.integrations.common import (
    end_run,
    exporter_for,
    numbers,
    requires,
    scalar,
    starts_exporter,
)
from rlpulse.runtime.exporter import Exporter

log = logging.getLogger("rlpulse")

FRAMEWORK = "verl"
BACKEND_NAME = "rlpulse"
TIMING_PREFIX = "timing_s/"
PHASE = catalog.get("rl_phase_duration_seconds").name
_registered = False
_trainer: weakref.ref[Any] | None = None  # the trainer act_on_alerts was given
_hooked = False  # RayPPOTrainer's validation, checkpoint and generation methods hooked
_rollouts_on = True  # hook_trainer's hooks record rollouts (attach/register rollouts=False: off)
BEATS = ("_validate", "_save_checkpoint", "_get_gen_batch")  # progress at their start and end


def _version() -> str:
    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return ""


class VerlBackend:
    """What ``Tracking`` calls for each backend: ``log(data=..., step=...)`` and ``finish()``.

    ``exporter``: report there; else to the process-wide exporter, started on the first
    ``log`` (``start_kwargs`` go to ``rlpulse.start``) unless ``start=False``.
    """

    def __init__(
        self, exporter: Exporter | None = None, *, start: bool = True, **start_kwargs: Any
    ):
        self._given = exporter
        self._start = start
        self._start_kwargs = start_kwargs
        self.exporter: Exporter | None = exporter
        self._started = False

    def log(self, data: Mapping[str, Any], step: int | None) -> None:
        """Export one step's metrics dict."""
        exp = self.exporter
        if exp is None:
            self._started = starts_exporter(self._given, self._start)
            exp = self.exporter = exporter_for(
                self._given, FRAMEWORK, _version(), start=self._start, **self._start_kwargs
            )
            if exp is None:
                return
        values = numbers(data)
        exp.log(values, step=step)
        for key, value in values.items():
            if key.startswith(TIMING_PREFIX) and value == value and value >= 0:
                exp.observe(PHASE, value, phase=key[len(TIMING_PREFIX) :])
        c = control.of(exp)
        if c is not None and c.action() is not None:
            _act(c)

    def finish(self, exit_code: int = 0) -> None:
        """Called when verl's ``Tracking.finish(exit_code)`` runs at the end of training (see
        ``hook_finish``): an exporter this backend started ends the run, ``finished`` for exit
        code 0 (a last scrape, then it stops, and no RLTargetDown page), else ``crashed``
        (RLRunCrashed); one given or started elsewhere keeps serving."""
        c = control.of(self.exporter) if self.exporter is not None else None
        if exit_code:
            end_run(self.exporter, self._started, "crashed", f"verl exit code {exit_code}")
        elif c is not None and c.should_stop():
            trainer = _trainer() if _trainer is not None else None
            last = getattr(trainer, "global_steps", None)  # fit() counted one past its last step
            c.stopped(last - 1 if last is not None else None)
        else:
            end_run(self.exporter, self._started)


def act_on_alerts(trainer: Any, exporter: Exporter | None = None) -> None:
    """Let the run's alerts save and stop ``trainer`` (verl's ``RayPPOTrainer``, before
    ``fit()``) at its step boundary; each checkpoint it saves is reported as a resume point of
    ``exporter``'s run (default: the process-wide one)."""
    global _trainer
    _trainer = weakref.ref(trainer)
    save = trainer._save_checkpoint
    if getattr(save, "_rlpulse", False):
        return

    def _save_checkpoint(*args: Any, **kwargs: Any) -> Any:
        out = save(*args, **kwargs)
        step = trainer.global_steps
        folder = os.path.join(trainer.config.trainer.default_local_dir, f"global_step_{step}")
        target = exporter if exporter is not None else rlpulse.get_exporter()
        if target is not None:
            control.checkpoint_saved(step, folder, target)
        return out

    _save_checkpoint._rlpulse = True  # type: ignore[attr-defined]
    trainer._save_checkpoint = _save_checkpoint


def _act(c: control.Control) -> None:
    """At the end of a step: save, and on a stop make the next step verl's last."""
    trainer = _trainer() if _trainer is not None else None
    if trainer is None:
        notices.warn(
            "verl_unbound",
            "rlpulse: an alert asks run %s to save/stop, but no verl trainer was given to "
            "rlpulse.integrations.verl.act_on_alerts(trainer): nothing is done",
            c.exporter.run_id,
        )
        return
    if c.should_save():
        trainer._save_checkpoint()
    if c.should_stop():
        trainer.total_training_steps = min(trainer.total_training_steps, trainer.global_steps + 1)


def hook_finish(tracking_cls: Any) -> None:
    """Make ``tracking_cls.finish`` (verl's ``Tracking``) finish rlpulse backends too.

    verl's ``Tracking.finish(exit_code)`` is what training calls at its end (``main_ppo``
    explicitly, ``Tracking.__del__`` otherwise), but it finishes only the backends it names.
    The original still runs first; calling the hook again changes nothing.
    """
    original = tracking_cls.finish
    if getattr(original, "_rlpulse", False):
        return

    def finish(self: Any, exit_code: int = 0, *args: Any, **kw: Any) -> Any:
        first = not getattr(self, "_finished", False)
        try:
            return original(self, exit_code, *args, **kw)
        finally:
            backends = getattr(self, "logger", {}).values() if first else ()
            for backend in backends:
                if isinstance(backend, VerlBackend):
                    backend.finish(exit_code)

    finish._rlpulse = True  # type: ignore[attr-defined]
    tracking_cls.finish = finish


def hook_trainer(trainer_cls: Any = None) -> None:
    """Hook ``RayPPOTrainer`` (or ``trainer_cls``): its validation, checkpoint saving and
    generation batches send heartbeats, and its validation generations and dumped training
    rollouts go to the process-wide exporter's rollout store too. Idempotent."""
    global _hooked
    if _hooked:
        return
    if trainer_cls is None:
        try:
            from verl.trainer.ppo.ray_trainer import RayPPOTrainer as trainer_cls
        except Exception:  # verl without its trainer's dependencies: nothing to hook
            return
    for name in BEATS:
        if hasattr(trainer_cls, name):
            setattr(trainer_cls, name, _beating(getattr(trainer_cls, name)))
    val, dump = trainer_cls._maybe_log_val_generations, trainer_cls._dump_generations

    def _maybe_log_val_generations(self: Any, inputs: Any, outputs: Any, scores: Any) -> Any:
        _record(self, inputs, outputs, scores, None, {}, "validation")
        return val(self, inputs, outputs, scores)

    def _dump_generations(
        self: Any, inputs: Any, outputs: Any, gts: Any, scores: Any, extra: Any, dump_path: Any
    ) -> Any:
        config = getattr(getattr(self, "config", None), "trainer", None)
        rollout_dir = config.get("rollout_data_dir", None) if config is not None else None
        if rollout_dir and str(dump_path) == str(rollout_dir):  # validation is recorded above
            _record(self, inputs, outputs, scores, gts, extra or {}, "train")
        return dump(self, inputs, outputs, gts, scores, extra, dump_path)

    setattr(trainer_cls, "_maybe_log_val_generations", _maybe_log_val_generations)  # noqa: B010
    setattr(trainer_cls, "_dump_generations", _dump_generations)  # noqa: B010
    _hooked = True


def _beating(method: Any) -> Any:
    """``method`` with a heartbeat before and after it (one attribute write each)."""

    @functools.wraps(method)
    def beating(*args: Any, **kwargs: Any) -> Any:
        rlpulse.progress()
        try:
            return method(*args, **kwargs)
        finally:
            rlpulse.progress()

    return beating


def _record(
    trainer: Any,
    inputs: Any,
    outputs: Any,
    scores: Any,
    gts: Any,
    extra: Mapping[str, Any],
    split: str,
) -> None:
    """Offer one batch of verl generations to the exporter's rollout store (never raises)."""
    exp = rlpulse.get_exporter()
    if exp is None or not _rollouts_on:
        return
    try:
        n = len(inputs)
        components = {
            str(k): [scalar(x) for x in v]
            for k, v in extra.items()
            if hasattr(v, "__len__") and len(v) == n and all(scalar(x) is not None for x in v)
        }
        truths = [None] * n if gts is None else list(gts)
        if split == "train":  # drift: the training prompts, responses and rewards
            exp.observe_features("input", prompt_length=[len(str(x)) for x in inputs])
            behaviour: dict[str, Any] = {f"reward[{k}]": v for k, v in components.items()}
            exp.observe_features(
                "behaviour",
                response_length=[len(str(x)) for x in outputs],
                reward=[float(x) for x in scores],
                **behaviour,
            )
        exp.record_rollouts(
            step=int(getattr(trainer, "global_steps", 0) or 0),
            prompts=[str(x) for x in inputs],
            responses=[str(x) for x in outputs],
            rewards=[float(x) for x in scores],
            components=components or None,
            metadata=[{"split": split, "ground_truth": g} for g in truths],
        )
    except Exception as exc:  # monitoring never stops training
        exp.drops("bad_call", "record_rollouts", exc)


def attach(tracking: Any, exporter: Exporter | None = None, **kwargs: Any) -> VerlBackend:
    """Add an rlpulse backend to an existing ``Tracking`` (its ``logger`` dict) and return it;
    ``Tracking.finish`` then ends it; the trainer's validation and checkpoints send heartbeats,
    and verl's generations are recorded as rollouts unless ``rollouts=False`` (``hook_trainer``)."""
    global _rollouts_on
    _rollouts_on = kwargs.pop("rollouts", _rollouts_on)
    hook_trainer()
    hook_finish(type(tracking))
    backend = VerlBackend(exporter, **kwargs)
    tracking.logger[BACKEND_NAME] = backend
    return backend


def register(**kwargs: Any) -> None:
    """Make ``"rlpulse"`` a backend name ``Tracking(default_backend=[...])`` accepts.

    ``kwargs`` go to every ``VerlBackend`` built this way. Calling it again changes nothing.
    """
    with requires("verl", "verl"):
        from verl.utils.tracking import Tracking
    global _registered
    if _registered:
        return
    original = Tracking.__init__
    Tracking.supported_backend = [*Tracking.supported_backend, BACKEND_NAME]

    def __init__(
        self: Any,
        project_name: Any,
        experiment_name: Any,
        default_backend: Any = "console",
        *args: Any,
        **kw: Any,
    ) -> None:
        names = [default_backend] if isinstance(default_backend, str) else list(default_backend)
        rest = [n for n in names if n != BACKEND_NAME]
        original(self, project_name, experiment_name, rest, *args, **kw)
        if BACKEND_NAME in names:
            attach(self, **kwargs)

    setattr(Tracking, "__init__", __init__)  # noqa: B010  (mypy refuses a method assignment)
    _registered = True


class JsonlFollower:
    """Follows one verl ``file``-backend log (``{"step": N, "data": {...}}`` per line).

    Only complete lines are read; a line still being written waits for the next poll. A file
    that shrinks (rewritten by a new run) is read again from its start. A line that is not a
    verl record is skipped, counted in ``skipped`` and logged once.
    """

    def __init__(self, path: Path | str, backend: VerlBackend) -> None:
        self.path = Path(path)
        self.backend = backend
        self.offset = 0
        self.line = 0
        self.skipped = 0
        self._warned = False

    def poll(self) -> int:
        """Export the lines completed since the last poll; returns how many were exported."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return 0
        if size < self.offset:
            self.offset, self.line = 0, 0
        if size == self.offset:
            return 0
        with open(self.path, "rb") as fh:
            fh.seek(self.offset)
            chunk = fh.read(size - self.offset)
        end = chunk.rfind(b"\n") + 1
        exported = 0
        for raw in chunk[:end].splitlines():
            self.line += 1
            if raw.strip() and self._export(raw):
                exported += 1
        self.offset += end
        return exported

    def _export(self, raw: bytes) -> bool:
        try:
            obj = json.loads(raw)
            step, data = obj["step"], obj["data"]
            if not isinstance(data, dict):
                raise TypeError("data is not an object")
        except (ValueError, KeyError, TypeError) as exc:
            self.skipped += 1
            if not self._warned:
                self._warned = True
                log.warning(
                    "rlpulse: %s line %d: not a verl record (%s)", self.path, self.line, exc
                )
            return False
        number = scalar(step)
        self.backend.log(data, None if number is None else int(number))
        return True
