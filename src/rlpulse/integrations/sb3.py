"""Stable-Baselines3: one callback gives the dashboards everything SB3 knows.

``model.learn(total_timesteps, callback=RlpulseCallback())`` then

* adds a ``PrometheusWriter`` to the model's ``Logger``: every ``logger.dump()`` (``rollout/*``,
  ``train/*``, ``time/*`` — env steps, fps, success rate — and the user's own ``logger.record``
  keys) goes through ``Exporter.log`` and the SB3 key map;
* reports each finished episode (the ``Monitor`` wrapper's ``info["episode"]``) once per rollout
  with ``observe_episodes``: ``rl_episodes_total`` and the last-100 return and length;
* times the ``rollout`` (``collect_rollouts``) and ``update`` (``train()``) phases into
  ``rl_phase_duration_seconds``;
* samples every 4th step's observations and actions (``drift_every``) as drift features
  (``rl_drift_score{kind="observation|behaviour"}``), and with the observation before them as
  transitions (``observation/dynamics``), copied at the step, scored off it.

The exporter's step is SB3's ``train/n_updates`` (what ``rl_train_steps_total`` follows), not
``num_timesteps``, which is ``rl_env_steps_total``.

With ``rlpulse.start(on_alert=...)`` (``rlpulse.control``) the run acts on its alerts: at the
next env step it saves ``<checkpoints>/checkpoint-<n_updates>.zip`` when asked to save or stop,
and on a stop ``_on_step`` returns False, so ``learn()`` returns; the run then ends ``stopped``
with the resume line printed. ``save_every`` also saves every that many updates: the resume
points every page of the run names (with or without ``on_alert``).

The per-step work is a scan of the step's ``infos`` for finished episodes, one attribute read
and, every 4th step, a copy of the observation's watched columns and the actions; everything
else happens once per rollout.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from rlpulse import catalog, control
from rlpulse.integrations.common import (
    DRIFT_EVERY,
    DriftSampler,
    exporter_for,
    final_info,
    numbers,
    record_episodes,
    requires,
    set_hyperparameters,
)
from rlpulse.runtime.exporter import Exporter

with requires("stable-baselines3", "sb3"):
    import stable_baselines3
    from gymnasium import spaces
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList, EvalCallback
    from stable_baselines3.common.logger import KVWriter

FRAMEWORK = "sb3"
WRITER_NAME = "rlpulse"  # ``logger.record(key, v, exclude="rlpulse")`` keeps a key out
ROLLOUT, UPDATE = "rollout", "update"
PHASE = catalog.get("rl_phase_duration_seconds").name
STEP_KEY = "train/n_updates"
# counted from the callback's own episodes, so the logger's cumulative copy is left out
OWN_KEYS = frozenset({"time/episodes"})
# algorithm attributes exported as rl_hyperparameter{name} (numbers only; schedules skipped)
HYPERPARAMETERS = (
    "learning_rate",
    "n_steps",
    "batch_size",
    "n_epochs",
    "gamma",
    "gae_lambda",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "n_envs",
    "buffer_size",
    "learning_starts",
    "tau",
    "gradient_steps",
    "target_update_interval",
    "exploration_fraction",
)


class PrometheusWriter(KVWriter):
    """An SB3 ``KVWriter``: each ``Logger.dump`` becomes one ``Exporter.log`` call."""

    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter

    def write(
        self,
        key_values: Mapping[str, Any],
        key_excluded: Mapping[str, tuple[str, ...]],
        step: int = 0,
    ) -> None:
        skip = OWN_KEYS | {k for k, ex in key_excluded.items() if ex and WRITER_NAME in ex}
        values = numbers(key_values, skip)
        updates = values.get(STEP_KEY)
        self.exporter.log(values, step=None if updates is None else int(updates))

    def close(self) -> None:
        """Nothing to release: the exporter outlives the logger."""


class RlpulseCallback(BaseCallback):
    """Exports an SB3 run. ``exporter``: report there; else to the process-wide exporter,
    started on first use (``start_kwargs`` go to ``rlpulse.start``) unless ``start=False``.
    ``checkpoints``: the folder saves go to (asked by an alert, or every ``save_every``
    updates). ``drift_every``: every that many steps' observations and actions are drift
    samples (``rlpulse.detect.drift``; 0: none)."""

    def __init__(
        self,
        exporter: Exporter | None = None,
        *,
        start: bool = True,
        verbose: int = 0,
        checkpoints: str | os.PathLike[str] = "checkpoints",
        save_every: int = 0,
        rollouts: bool = True,
        drift_every: int = DRIFT_EVERY,
        **start_kwargs: Any,
    ) -> None:
        super().__init__(verbose)
        self.rollouts = rollouts
        self.drift_every = drift_every
        self._drift = DriftSampler(0, False, True)
        self._successes: list[Any] = []
        self._infos: list[dict[str, Any]] = []
        self.checkpoints = os.fspath(checkpoints)
        self.save_every = save_every
        self._control: control.Control | None = None
        self._saved_at = -1
        self._given = exporter
        self._start = start
        self._start_kwargs = start_kwargs
        self.exporter: Exporter | None = None
        self.writer: PrometheusWriter | None = None
        self._returns: list[float] = []
        self._lengths: list[float] = []
        self._rollout_t0 = 0.0
        self._update_t0: float | None = None
        self._watched: list[EvalCallback] = []

    # ---- lifecycle --------------------------------------------------------------------------
    def _on_training_start(self) -> None:
        model = self.model
        kwargs = dict(self._start_kwargs)
        kwargs.setdefault("metadata", {"model": type(model).__name__})
        self.exporter = exporter_for(
            self._given, FRAMEWORK, stable_baselines3.__version__, start=self._start, **kwargs
        )
        self._update_t0 = None
        if self.exporter is None:
            return
        self._control = control.of(self.exporter)
        discrete = isinstance(model.action_space, spaces.Discrete)
        self._drift = DriftSampler(self.drift_every, discrete, batched=True)
        set_hyperparameters(
            self.exporter, {name: getattr(model, name, None) for name in HYPERPARAMETERS}
        )
        formats = self.logger.output_formats
        if self.writer is None or self.writer not in formats:
            self.writer = PrometheusWriter(self.exporter)
            formats.append(self.writer)
        self._watch_evaluations(self.locals.get("callback"), self.exporter)

    def _on_rollout_start(self) -> None:
        now = time.perf_counter()
        self._end_update(now)
        self._rollout_t0 = now
        updates = self._updates()
        if self.save_every and updates and updates % self.save_every == 0:
            self._save(updates)

    def _on_step(self) -> bool:
        got = self.locals
        self._drift.step(got.get("new_obs"), got.get("actions"), self.model._last_obs, got["dones"])
        for info in self.locals["infos"]:
            episode = info.get("episode")
            if episode is not None:
                self._returns.append(episode["r"])
                self._lengths.append(episode["l"])
                if self.rollouts:
                    success = info.get("is_success", info.get("success"))
                    self._successes.append(success)
                    seed = getattr(self.model, "seed", None)
                    self._infos.append({"seed": seed, "final_info": final_info(info)})
        c = self._control
        if c is None or c.action() is None:
            return True
        if c.should_save():
            self._save(self._updates())
        return not c.should_stop()

    def _on_rollout_end(self) -> None:
        now = time.perf_counter()
        exp = self.exporter
        if exp is not None:
            exp.observe(PHASE, now - self._rollout_t0, phase=ROLLOUT)
            self._flush(exp)
        self._update_t0 = now

    def _on_training_end(self) -> None:
        for cb in self._watched:
            vars(cb).pop("_log_success_callback", None)
        self._watched = []
        self._end_update(time.perf_counter())
        if self.exporter is not None:
            self._flush(self.exporter)
        if self._control is not None and self._control.should_stop():
            self._control.stopped(self._updates())

    def _updates(self) -> int:
        """The run's step as the exporter logs it (``train/n_updates``)."""
        return int(getattr(self.model, "_n_updates", 0))

    def _save(self, updates: int) -> None:
        """Save the model as ``checkpoint-<updates>`` (once per step) and report it."""
        path = os.path.join(self.checkpoints, f"checkpoint-{updates}.zip")
        if updates != self._saved_at:
            self.model.save(path)
            self._saved_at = updates
        if self.exporter is not None:
            control.checkpoint_saved(updates, path, self.exporter)

    # ---- helpers ----------------------------------------------------------------------------
    def _watch_evaluations(self, callback: Any, exp: Exporter) -> None:
        """Every step of an ``EvalCallback``'s evaluation in the same callback list is a
        heartbeat (``Exporter.progress``): a long evaluation is no stall. It goes through the
        per-step callback EvalCallback hands ``evaluate_policy``, for this training only."""
        todo = [callback]
        while todo:
            cb = todo.pop()
            if isinstance(cb, CallbackList):
                todo += cb.callbacks
            elif isinstance(cb, EvalCallback) and "_log_success_callback" not in vars(cb):
                each = cb._log_success_callback

                def beat(locals_: dict[str, Any], globals_: dict[str, Any], _each: Any = each,
                         _progress: Any = exp.progress) -> None:  # fmt: skip
                    _progress()
                    _each(locals_, globals_)

                cb._log_success_callback = beat  # type: ignore[method-assign]
                self._watched.append(cb)

    def _end_update(self, now: float) -> None:
        if self._update_t0 is not None and self.exporter is not None:
            self.exporter.observe(PHASE, now - self._update_t0, phase=UPDATE)
        self._update_t0 = None

    def _flush(self, exp: Exporter) -> None:
        self._drift.flush(exp)
        if self._returns:
            exp.observe_episodes(self._returns, self._lengths)
            if self.rollouts:
                record_episodes(
                    exp, self._updates(), self._returns, self._lengths, self._successes, self._infos
                )
            self._returns, self._lengths, self._successes, self._infos = [], [], [], []
