"""rlpulse: RL-training observability on Prometheus, Grafana and Alertmanager.

The module-level functions drive one process-wide exporter started by :func:`start`; before
``start()`` (or after ``close()``) they do nothing, so library code can call them freely.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Unpack

from rlpulse import control, notices
from rlpulse.control import action, should_save, should_stop
from rlpulse.runtime import options
from rlpulse.runtime.exporter import Exporter, PortInUseError
from rlpulse.runtime.recording import Recording, RolloutBatch
from rlpulse.version import __version__ as __version__

if TYPE_CHECKING:
    from rlpulse.rollouts.records import RolloutTraces

__all__ = [
    "Exporter",
    "PortInUseError",
    "Recording",
    "action",
    "checkpoint_saved",
    "close",
    "count",
    "end",
    "finish",
    "get_exporter",
    "log",
    "observe",
    "observe_episodes",
    "observe_features",
    "observe_prompts",
    "observe_rollouts",
    "observe_transitions",
    "observe_versions",
    "phase",
    "progress",
    "record_rollouts",
    "save_drift_reference",
    "set",
    "should_save",
    "should_stop",
    "start",
    "stopped",
]

_lock = threading.Lock()
_current: Exporter | None = None
_started_with: tuple[Any, dict[str, Any]] | None = None  # start()'s arguments for _current


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a parent thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)
notices.install()  # problems reach stderr until logging is configured (RLPULSE_QUIET=1: never)


def start(
    port: int | None = None,
    *,
    on_alert: Mapping[str, str | None] | str | None = None,
    alertmanager: Any = None,
    alert_poll_interval: float | None = None,
    rules_config: str | None = None,
    **kwargs: Any,
) -> Exporter:
    """Start (once) the process-wide exporter and serve ``/metrics``; see ``Exporter``.

    Calling it again returns the running exporter unchanged (with a notice if the arguments
    differ). The run ends at interpreter exit (``Exporter.end``) unless ``finish()`` ends it
    before. ``on_alert`` and the three after it let the run act on its own alerts
    (``rlpulse.control.attach``; ``RLPULSE_ON_ALERT`` and its variables when left None).
    """
    global _current, _started_with
    options.check_names(kwargs, ("on_alert", "alertmanager", "alert_poll_interval", "rules_config"))
    acting = (on_alert, alertmanager, alert_poll_interval, rules_config)
    with _lock:
        if _current is None:
            exp = Exporter(port, **kwargs).start()
            try:
                control.attach(
                    exp,
                    on_alert,
                    alertmanager,
                    interval=alert_poll_interval,
                    rules_config=rules_config,
                    process_wide=True,
                )
            except BaseException:  # a bad on_alert: no run is left serving
                exp.close()
                raise
            _current = exp
            _started_with = (port, {**kwargs, "acting": acting})
        elif not _same((port, {**kwargs, "acting": acting}), _started_with):
            notices.warn(
                "start_again",
                "rlpulse: start() called again with other arguments; the exporter already "
                "serving run %s at %s is kept unchanged",
                _current.run_id,
                _current.url,
            )
        return _current


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # arguments that do not compare (arrays): assume they differ
        return False


def get_exporter() -> Exporter | None:
    """The running process-wide exporter, if any."""
    return _current


def _recording() -> Recording | None:
    """Where the module's recording calls go: the process-wide exporter, if one runs."""
    return _current


def close() -> None:
    """Stop the process-wide exporter and free its port."""
    global _current
    with _lock:
        if _current is not None:
            _current.close()
            _current = None


def finish(wait: float | None = None) -> bool:
    """End the run on purpose (``Exporter.finish``): a last scrape (or a push) carries the mark,
    then the process-wide exporter stops, and ``RLTargetDown`` does not page for it. A normal
    interpreter exit does the same."""
    return end("finished", wait=wait)


def end(outcome: str = "finished", reason: str = "", wait: float | None = None) -> bool:
    """End the run with an outcome (``Exporter.end``): ``"crashed"`` pages RLRunCrashed naming
    ``reason``; the process-wide exporter then stops."""
    global _current
    with _lock:
        exp, _current = _current, None
    return exp.end(outcome, reason, wait) if exp is not None else False


def checkpoint_saved(step: float, path: Any) -> None:
    """Report a checkpoint the trainer saved at ``step`` (its path): the resume points every page
    of the run names (the newest at or before the last good step), and the save an alert asked
    for (``rlpulse.control``)."""
    exp = _current
    if exp is not None:
        control.checkpoint_saved(step, path, exp)


def progress() -> None:
    """The run makes progress without logging a step (an evaluation batch of your own loop, a
    checkpoint being written): ``RLTrainingStalled`` does not page while such heartbeats come.
    One attribute write; does nothing before ``start()``."""
    exp = _current
    if exp is not None:
        exp.progress()


def stopped(step: float | None = None) -> str:
    """The loop stopped as its alert asked (``should_stop()``): print where to resume and end
    the run ``stopped`` (``rlpulse.control``). The line printed; "" when no stop was asked."""
    line = control.stopped(step)
    if line:
        end()  # already ended: let go of the exporter, so a later start() starts a new run
    return line


def log(metrics: Mapping[str, Any], step: int | None = None) -> None:
    """Record the trainer's metrics dict (TRL, verl, SB3, CleanRL, OpenRLHF keys)."""
    exp = _current
    if exp is not None and exp.outcome is None:
        exp.log(metrics, step)
    else:  # e.g. from an atexit handler that runs after the run ended
        _not_running("log")


def _not_running(call: str) -> None:
    notices.warn(
        "not_running",
        "rlpulse: rlpulse.%s() while no exporter runs (start() not called yet, or the run "
        "ended): nothing is recorded",
        call,
    )


def phase(name: str) -> AbstractContextManager[Any]:
    """Time a training phase: ``with rlpulse.phase("rollout"): ...``."""
    rec = _recording()
    return rec.phase(name) if rec is not None else nullcontext()


def observe_rollouts(**batch: Unpack[RolloutBatch]) -> None:
    """Record one batch of rollouts; see ``Exporter.observe_rollouts``."""
    rec = _recording()
    if rec is not None:
        rec.observe_rollouts(**batch)


def record_rollouts(**columns: Unpack[RolloutTraces]) -> list[int]:
    """Offer raw rollouts to the run's bounded trace store; see ``Exporter.record_rollouts``."""
    exp = _current
    return exp.record_rollouts(**columns) if exp is not None else []


def observe_episodes(returns: Any, lengths: Any, success: Any = None) -> None:
    """Record finished episodes (classic RL)."""
    rec = _recording()
    if rec is not None:
        rec.observe_episodes(returns, lengths, success)


def observe_features(kind: str, /, **features: Any) -> None:
    """Samples of drift features (input, observation or behaviour); see
    ``Exporter.observe_features``."""
    exp = _recording()
    if exp is not None:
        exp.observe_features(kind, **features)


def observe_transitions(before: Any, actions: Any, after: Any, *, discrete: bool = False) -> None:
    """Sampled environment transitions (a custom loop's; the integrations send their own): the
    observations, the actions taken on them, the next observations; see
    ``Exporter.observe_transitions``."""
    rec = _recording()
    if rec is not None:
        rec.observe_transitions(before, actions, after, discrete=discrete)


def observe_prompts(**prompts: Any) -> None:
    """A batch of prompts' lengths, source tags and difficulty as drift inputs; see
    ``Exporter.observe_prompts``."""
    exp = _recording()
    if exp is not None:
        exp.observe_prompts(**prompts)


def observe_versions(**versions: Any) -> None:
    """The run's environment or grader version now (a change is an input drift); see
    ``Exporter.observe_versions``."""
    exp = _recording()
    if exp is not None:
        exp.observe_versions(**versions)


def save_drift_reference(path: str | os.PathLike[str]) -> None:
    """Write the run's drift references to pin in a later run; see
    ``Exporter.save_drift_reference``."""
    exp = _current
    if exp is not None:
        exp.save_drift_reference(path)
    else:
        _not_running("save_drift_reference")


def count(name: str, amount: float = 1.0, /, **labels: Any) -> None:
    """Add to a catalog counter, e.g. ``count("rl_env_steps_total", 64)``."""
    rec = _recording()
    if rec is not None:
        rec.count(name, amount, **labels)


def set(name: str, value: Any, /, **labels: Any) -> None:
    """Set a catalog gauge, e.g. ``set("rl_eval_score", 0.7, benchmark="gsm8k", split="eval")``."""
    rec = _recording()
    if rec is not None:
        rec.set(name, value, **labels)


def observe(
    name: str, values: Any, /, *, exemplars: Sequence[Any] | None = None, **labels: Any
) -> None:
    """Add a batch of values to a catalog histogram."""
    rec = _recording()
    if rec is not None:
        rec.observe(name, values, exemplars=exemplars, **labels)
