"""Acting on a run's own alerts: save, stop, and say where to resume (opt-in, per run).

``rlpulse.start(on_alert={"critical": "stop", "RLEntropyCollapse": "save"},
alertmanager="http://alertmanager:9093")`` reads the run's alerts from Alertmanager on a
background thread (``alertpoll``): an alert that pages (not silenced, not inhibited) and whose
name, else severity, maps to an action asks the trainer, at its next step boundary, to save a
checkpoint (``save``) or to save and stop (``stop``). The trainer asks with ``should_save()`` /
``should_stop()`` (integrations do it for you), reports checkpoints with ``checkpoint_saved``
and, once stopped, calls ``stopped()``: it prints where to resume and ends the run with outcome
``stopped`` (``rl_run_outcome``), which pages nothing more. Each alert acts once per firing.
An ``Exporter`` built by hand opts in with ``attach(exporter, on_alert, alertmanager)``.

Nothing here blocks or raises into the trainer: its calls read attributes; failures to reach
Alertmanager are counted (``rlpulse_alertmanager_errors_total``) and said once.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from rlpulse import catalog, lastgood, notices
from rlpulse.alertpoll import Alertmanager, AlertmanagerError, Firing, Poller
from rlpulse.exporter import Exporter

log = logging.getLogger("rlpulse")

Action = Literal["save", "stop"]
ACTIONS: tuple[Action, ...] = ("save", "stop")  # weakest first: a stop saves too
SEVERITIES = ("critical", "warning", "info")
ON_ALERT_ENV = "RLPULSE_ON_ALERT"  # e.g. "critical=stop,warning=none,RLEntropyCollapse=save"
POLL_ENV = "RLPULSE_ALERT_POLL_INTERVAL"
RULES_CONFIG_ENV = "RLPULSE_RULES_CONFIG"  # the rlpulse config the rules were generated from
POLL_INTERVAL = 5.0  # seconds between reads of Alertmanager
STOPPED = "stopped"

CHECKPOINT = catalog.get("rl_checkpoint_step")
ACTION_TIME = catalog.get("rl_alert_action_timestamp_seconds")
LAST_GOOD = catalog.get("rl_last_good_step")
RESUME = catalog.get("rl_resume_checkpoint_step")
ERRORS = catalog.get("rlpulse_alertmanager_errors_total")

Policy = Mapping[str, Action | None]


def policy(spec: Mapping[str, str | None] | str) -> dict[str, Action | None]:
    """An ``on_alert`` policy: alert name or severity -> ``"save"``, ``"stop"`` or None
    (``"none"`` in a string: ``"critical=stop,RLEntropyCollapse=save"``)."""
    if isinstance(spec, str):
        pairs = [p.partition("=") for p in spec.split(",") if p.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise ValueError(
                f"rlpulse: on_alert {spec!r}: write name=action pairs, e.g. critical=stop"
            )
        spec = {k.strip(): v.strip() for k, _, v in pairs}
    out: dict[str, Action | None] = {}
    for key, value in spec.items():
        action = None if value in (None, "", "none", "None") else value
        if action is not None and action not in ACTIONS:
            raise ValueError(f"rlpulse: on_alert[{key!r}] is {value!r}; use 'save', 'stop' or None")
        if key not in SEVERITIES and not key.startswith("RL"):
            raise ValueError(
                f"rlpulse: on_alert key {key!r} is neither a severity {SEVERITIES} nor an alert "
                "name (RL...)"
            )
        out[key] = action
    return out


def decide(rules: Policy, alert: Firing) -> Action | None:
    """The action for ``alert``: by its name if the policy names it, else by its severity."""
    if alert.name in rules:
        return rules[alert.name]
    return rules.get(alert.severity)


@dataclass(frozen=True)
class Request:
    """What an alert asks of the trainer."""

    action: Action
    alert: Firing
    last_good: lastgood.LastGood
    asked_at: float

    @property
    def stop(self) -> bool:
        return self.action == "stop"

    def message(self, step: float | None = None) -> str:
        """The line a trainer prints when it acts."""
        done = "stopped" if self.stop else "saved"
        at = f" at step {step:.0f}" if step is not None else ""
        return (
            f"rlpulse: {done}{at} on {self.alert.name} ({self.alert.severity}): "
            f"{self.last_good.describe()}"
        )


class Control:
    """One exporter's alert actions: the poller's side (``seen``) and the trainer's."""

    def __init__(
        self,
        exporter: Exporter,
        on_alert: Policy,
        alertmanager: Alertmanager,
        *,
        interval: float = POLL_INTERVAL,
        rules_config: str | None = None,
        levels: Mapping[tuple[str, str], lastgood.Level] | None = None,
        out: TextIO | None = None,
    ) -> None:
        self.exporter = exporter
        self.rules = dict(on_alert)
        self.checkpoints = lastgood.Checkpoints()
        self.rules_config = rules_config
        self._levels = levels  # None: those of rules_config, read when an alert first acts
        self.out = out
        self._pending: Request | None = None
        self._saved = False  # the pending request's checkpoint was reported
        self._acted: set[tuple[str, float]] = set()  # (fingerprint, startsAt) already acted on
        self._failing = False  # the last read failed (said when it began, not again)
        self._told = False  # where to resume was printed
        self._lock = threading.Lock()
        self.poller = Poller(alertmanager, exporter.run_id, interval, self.seen, self.failed)

    def start(self) -> Control:
        self.exporter.on_close(self.farewell)
        self.poller.start()
        self.exporter.on_close(self.poller.close)
        return self

    # ---- the poller's side
    def seen(self, alerts: list[Firing]) -> None:
        """Alertmanager's answer: act on each alert that maps to an action, once per firing."""
        if self._failing:
            self._failing = False
            log.info(
                "rlpulse: run %s reads its alerts from Alertmanager again", self.exporter.run_id
            )
        for alert in sorted(alerts, key=lambda a: a.starts_at):
            action = decide(self.rules, alert)
            key = (alert.fingerprint or alert.name, alert.starts_at)
            if action is None or key in self._acted:
                continue
            self._acted.add(key)
            self._ask(action, alert)

    def _ask(self, action: Action, alert: Firing) -> None:
        table = self._levels if self._levels is not None else lastgood.levels(self.rules_config)
        level = lastgood.level_of(table, alert.labels)
        last = lastgood.find(
            self.exporter.detector, alert.labels, level, self.checkpoints, alert.starts_at
        )
        request = Request(action, alert, last, time.time())
        with self._lock:
            pending = self._pending
            if pending is None or ACTIONS.index(action) > ACTIONS.index(pending.action):
                self._pending, self._saved = request, False
        exp, name = self.exporter, alert.name
        exp.writes.put(ACTION_TIME.name, request.asked_at, {"alertname": name, "action": action})
        if last.step is not None:
            exp.writes.put(LAST_GOOD.name, last.step, {"alertname": name})
        if last.checkpoint is not None:
            step, path = last.checkpoint
            exp.writes.put(RESUME.name, step, {"alertname": name, "checkpoint": path})
        log.warning(
            "rlpulse: %s (%s) asks run %s to %s: %s",
            alert.name,
            alert.severity,
            exp.run_id,
            action,
            last.describe(),
        )

    def failed(self, exc: AlertmanagerError) -> None:
        """A read that failed: counted by reason, said once per outage."""
        series = self.exporter.store.bind(ERRORS, {"reason": exc.reason})
        self.exporter.writes.add(series, 1.0, ERRORS.name)
        if self._failing:
            return
        self._failing = True
        notices.warn(
            "alertmanager_unreachable",
            "rlpulse: cannot read run %s's alerts from Alertmanager (%s: %s); the run does not "
            "act on them until it can (counted in %s)",
            self.exporter.run_id,
            exc.reason,
            exc,
            ERRORS.name,
        )

    # ---- the trainer's side: attribute reads, never blocking
    def action(self) -> Request | None:
        """What an alert asks now (None: nothing)."""
        return self._pending

    def should_save(self) -> bool:
        """Save a checkpoint now (then report it with ``checkpoint_saved``)."""
        return self._pending is not None and not self._saved

    def should_stop(self) -> bool:
        """Stop at this step boundary (save first while ``should_save()``), then ``stopped()``."""
        pending = self._pending
        if pending is None or not pending.stop:
            return False
        # a loop that breaks here and just ends is a stopped run, not a finished one
        self.exporter.asked_end = (STOPPED, pending.alert.name)
        return True

    def checkpoint_saved(self, step: float, path: str | os.PathLike[str]) -> None:
        """The trainer saved a checkpoint at ``step``: a resume point, and the save an alert
        asked for (a save-only request is then done)."""
        self.checkpoints.add(float(step), os.fspath(path), time.time())
        self.exporter.writes.put(CHECKPOINT.name, float(step))
        with self._lock:
            pending = self._pending
            if pending is None:
                return
            if pending.stop:  # the stop says where to resume when the loop has ended
                self._saved = True
                return
            self._pending = None
        self._say(pending.message(float(step)))

    def stopped(self, step: float | None = None) -> str:
        """The trainer stopped as asked: print where to resume and end the run ``stopped``
        (named by the alert). Returns the line printed ("" when no stop was asked)."""
        pending = self._pending
        if pending is None or not pending.stop or self._told:
            return ""
        self._told = True
        line = pending.message(step)
        self._say(line)
        self.exporter.end(STOPPED, pending.alert.name)
        return line

    def farewell(self) -> None:
        """At the end of a run that was asked to stop and never called ``stopped()``: say
        where to resume."""
        if self.exporter.asked_end is not None and not self._told:
            pending = self._pending
            self._told = True
            if pending is not None:
                self._say(pending.message())

    def _say(self, line: str) -> None:
        print(line, file=self.out or sys.stderr, flush=True)


# ---- one Control per exporter ---------------------------------------------------------------

_controls: weakref.WeakKeyDictionary[Exporter, Control] = weakref.WeakKeyDictionary()
_process: Control | None = None  # the process-wide run's (rlpulse.start)
_controls_lock = threading.Lock()


def attach(
    exporter: Exporter,
    on_alert: Mapping[str, str | None] | str | None = None,
    alertmanager: Alertmanager | str | Mapping[str, Any] | None = None,
    *,
    interval: float | None = None,
    rules_config: str | None = None,
    process_wide: bool = False,
) -> Control | None:
    """Let ``exporter``'s run act on its alerts; arguments left None come from the environment
    (``RLPULSE_ON_ALERT``, ``RLPULSE_ALERTMANAGER_URL`` and its options,
    ``RLPULSE_ALERT_POLL_INTERVAL``, ``RLPULSE_RULES_CONFIG``). None when no policy is set.
    ``process_wide``: the one ``rlpulse.should_stop()`` and the other module calls ask."""
    spec = on_alert if on_alert is not None else os.environ.get(ON_ALERT_ENV)
    if not spec:
        return None
    rules = policy(spec)
    source = Alertmanager.of(alertmanager) if alertmanager is not None else Alertmanager.from_env()
    if source is None:
        raise ValueError(
            "rlpulse: on_alert needs Alertmanager's address: alertmanager='http://host:9093' "
            "or RLPULSE_ALERTMANAGER_URL"
        )
    every = interval if interval is not None else float(os.environ.get(POLL_ENV) or POLL_INTERVAL)
    control = Control(
        exporter,
        rules,
        source,
        interval=every,
        rules_config=rules_config or os.environ.get(RULES_CONFIG_ENV) or None,
    )
    global _process
    with _controls_lock:
        previous = _controls.get(exporter)
        if previous is not None:
            previous.poller.close()
        _controls[exporter] = control
        if process_wide:
            _process = control
    exporter.on_close(lambda: _let_go(control))
    return control.start()


def _let_go(control: Control) -> None:
    global _process
    with _controls_lock:
        if _process is control:
            _process = None


def of(exporter: Exporter | None = None) -> Control | None:
    """The Control attached to ``exporter`` (default: the process-wide one), if any."""
    return _controls.get(exporter) if exporter is not None else _process


# ---- the process-wide run (``rlpulse.should_stop()`` ...): no-ops without a Control -----------


def action() -> Request | None:
    """What an alert asks of the process-wide run now (None: nothing, or not opted in)."""
    c = _process
    return c.action() if c is not None else None


def should_save() -> bool:
    """Save a checkpoint now, then report it with ``checkpoint_saved(step, path)``."""
    c = _process
    return c.should_save() if c is not None else False


def should_stop() -> bool:
    """Stop at this step boundary (save first while ``should_save()``), then call ``stopped()``."""
    c = _process
    return c.should_stop() if c is not None else False


def checkpoint_saved(step: float, path: str | os.PathLike[str]) -> None:
    """Report a checkpoint saved at ``step`` (every one: they are the resume points)."""
    c = _process
    if c is not None:
        c.checkpoint_saved(step, path)


def stopped(step: float | None = None) -> str:
    """The loop stopped as asked: print where to resume, end the run ``stopped``."""
    c = _process
    return c.stopped(step) if c is not None else ""
