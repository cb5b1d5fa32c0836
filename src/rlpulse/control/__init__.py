"""Acting on a run's own alerts: save, stop, and say where to resume (opt-in, per run).

``rlpulse.start(on_alert={"critical": "stop", "RLEntropyCollapse": "save"},
alertmanager="http://alertmanager:9093")`` reads the run's alerts from Alertmanager on a
background thread (``alertpoll``): an alert that pages (not silenced, not inhibited) and whose
name, else severity, maps to an action asks the trainer, at its next step boundary, to save a
checkpoint (``save``) or to save and stop (``stop``). The trainer asks with ``should_save()`` /
``should_stop()`` (integrations do it for you), reports checkpoints with ``checkpoint_saved``
(with or without a policy: they are the resume points every page names)
and, once stopped, calls ``stopped()``: it prints where to resume and ends the run with outcome
``stopped`` (``rl_run_outcome``), which pages nothing more. Each alert acts once per firing.
An ``Exporter`` built by hand opts in with ``attach(exporter, on_alert, alertmanager)``.

Nothing here blocks or raises into the trainer: its calls read attributes; failures to reach
Alertmanager are counted (``rlpulse_alertmanager_errors_total``) and said once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from rlpulse import alertindex, catalog, notices
from rlpulse.control.alertpoll import Alertmanager, AlertmanagerError, Firing, Poller
from rlpulse.detect import lastgood
from rlpulse.runtime import forks, scrape
from rlpulse.runtime.exporter import Exporter

log = logging.getLogger("rlpulse")

Action = Literal["save", "stop"]
ACTIONS: tuple[Action, ...] = ("save", "stop")  # weakest first: a stop saves too
SEVERITIES = ("critical", "warning", "info")
ON_ALERT_ENV = "RLPULSE_ON_ALERT"  # e.g. "critical=stop,warning=none,RLEntropyCollapse=save"
POLL_ENV = "RLPULSE_ALERT_POLL_INTERVAL"
RULES_CONFIG_ENV = "RLPULSE_RULES_CONFIG"  # the alert_levels.yml generated with the rules
POLL_INTERVAL = 5.0  # seconds between reads of Alertmanager
SAVE_GAP = 60.0  # seconds: at most one save asked per gap (a flood of warnings is one save)
MAX_REMEMBERED = 4096  # alert firings remembered as judged (the oldest forgotten first)
NONFINITE_ALERT = "RLNonFiniteLoss"  # confirmed by a non-finite value the run logged
STOPPED = "stopped"

ACTION_TIME = catalog.get("rl_alert_action_timestamp_seconds")
ERRORS = catalog.get("rlpulse_alertmanager_errors_total")
NONFINITE = catalog.get("rl_nonfinite_values_total")

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
    key: tuple[str, float] = ("", 0.0)  # the alert firing's (fingerprint, startsAt)

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
    """One exporter's alert actions: the poller's side (``seen``) and the trainer's.

    An alert may act only when it is one the generated rules raise (``rlpulse.alertindex``),
    of this run (``run_id``) and, where it names one, of this ``instance``, began after this
    Control started (not a predecessor's still firing for a resumed run), and the run's own
    values confirm it (its step signal past its level, or a non-finite value logged). A save is
    asked at most once per ``SAVE_GAP`` seconds; a request whose alert no longer pages
    (resolved or silenced) before the trainer acted on it is withdrawn."""

    def __init__(
        self,
        exporter: Exporter,
        on_alert: Policy,
        alertmanager: Alertmanager,
        *,
        interval: float = POLL_INTERVAL,
        rules_config: str | None = None,
        levels: Mapping[str, lastgood.Level] | None = None,
        out: TextIO | None = None,
    ) -> None:
        self.exporter = exporter
        self.rules = dict(on_alert)
        if rules_config:
            exporter.levels = lastgood.levels(rules_config)
        self._levels = levels  # None: the exporter's (those its pages name)
        self.out = out
        self.started = time.time()
        self._pending: Request | None = None
        self._saved = False  # the pending request's checkpoint was reported
        self._committed = False  # should_stop() said True: the loop is ending
        self._stop_step: float | None = None  # the applied step when it first said so
        self._seen: dict[tuple[str, float], bool] = {}  # firing -> acted on (bounded, oldest out)
        self._marks: dict[str, Request] = {}  # alertname -> its latest request (scrape time)
        self._last_save = -math.inf  # time.time() of the latest save asked
        self._locals: frozenset[str] | None = None  # this host's names and addresses
        self._failing = False  # the last read failed (said when it began, not again)
        self._told = False  # where to resume was printed
        self._bad_calls = 0  # trainer calls with arguments that could not be used
        self._lock = threading.Lock()
        self.poller = Poller(alertmanager, exporter.run_id, interval, self.seen, self.failed)
        _all.add(self)

    def start(self) -> Control:
        self.exporter.on_close(self.farewell)
        self.exporter.sample_sources.append(self.samples)
        self.poller.start()
        self.exporter.on_close(self.poller.close)
        return self

    def after_fork_in_child(self) -> None:
        """Fresh locks in a forked child (a parent thread may have held one at the fork)."""
        self._lock = threading.Lock()
        self.exporter.checkpoints._lock = threading.Lock()

    # ---- the poller's side
    def seen(self, alerts: list[Firing]) -> None:
        """Alertmanager's answer: act on each alert that may act and maps to an action, once
        per firing; withdraw a request whose alert no longer pages."""
        if self._failing:
            self._failing = False
            log.info(
                "rlpulse: run %s reads its alerts from Alertmanager again", self.exporter.run_id
            )
        paging: set[tuple[str, float]] = set()
        for alert in sorted(alerts, key=lambda a: a.starts_at):
            key = (alert.fingerprint or alert.name, alert.starts_at)
            acted = self._seen.get(key)
            refused = self._refused(alert)
            if acted is None:
                self._remember(key)
                if refused:  # said once; judged again at each read (the values may confirm it)
                    log.warning(
                        "rlpulse: run %s does not act on alert %s (%s): %s",
                        self.exporter.run_id,
                        clean(alert.name),
                        clean(alert.severity),
                        refused,
                    )
            if refused:
                continue
            paging.add(key)
            action = decide(self.rules, alert)
            if action is None or acted:
                continue
            self._seen[key] = True
            if action == "save" and time.time() - self._last_save < SAVE_GAP:
                log.info(
                    "rlpulse: %s asks a save %g s after the last: not again",
                    alert.name,
                    time.time() - self._last_save,
                )
                continue
            self._ask(action, alert, key)
        self._withdraw_unless(paging)

    def _remember(self, key: tuple[str, float]) -> None:
        self._seen[key] = False
        if len(self._seen) > MAX_REMEMBERED:
            del self._seen[next(iter(self._seen))]

    def _refused(self, alert: Firing) -> str:
        """Why ``alert`` may not act on this run ("" when it may)."""
        labels = alert.labels
        if labels.get("run_id") != self.exporter.run_id:
            return "another run's alert"
        if alert.severity not in alertindex.SEVERITIES.get(alert.name, ()):
            return "not an alert rlpulse's rules raise"
        instance = labels.get("instance")
        if instance is not None and not self._ours(instance):
            return f"another instance's ({clean(instance)})"
        if alert.starts_at < math.floor(self.started * 1000) / 1000:  # Alertmanager keeps ms
            return "it began before this run started here (a predecessor's)"
        if not self._confirmed(alert):
            return "the run's own values do not show it"
        return ""

    def _ours(self, instance: str) -> bool:
        """Whether Prometheus' ``instance`` (host:port) is this exporter."""
        host, _, port = instance.rpartition(":")
        if port != str(self.exporter.port):
            return False
        host = host.strip("[]").lower()
        if self._locals is None:
            self._locals = _local_names(self.exporter.options.addr)
        return host in self._locals or bool(_addresses(host) & self._locals)

    def _confirmed(self, alert: Firing) -> bool:
        """Whether the exporter's own values show what ``alert`` reports."""
        if alert.name == NONFINITE_ALERT:
            store = self.exporter.store
            return any(
                s.metric.name == NONFINITE.name and store.values[s.slot] > 0
                for s in list(store.by_slot)
            )
        level = lastgood.level_of(self._table(), alert.labels)
        if level is None or alert.labels.get("signal", level.signal) != level.signal:
            return False
        series = alert.labels.get("series", "")
        return self.exporter.detector.onset(level.signal, series, level.bad) is not None

    def _table(self) -> Mapping[str, lastgood.Level]:
        return self._levels if self._levels is not None else self.exporter.levels

    def _ask(self, action: Action, alert: Firing, key: tuple[str, float]) -> None:
        level = lastgood.level_of(self._table(), alert.labels)
        exp = self.exporter
        last = lastgood.find(exp.detector, alert.labels, level, exp.checkpoints, alert.starts_at)
        request = Request(action, alert, last, time.time(), key)
        with self._lock:
            pending = self._pending
            if pending is None or ACTIONS.index(action) > ACTIONS.index(pending.action):
                self._pending, self._saved = request, False
            self._marks[alert.name] = request
            self._last_save = request.asked_at
        log.warning(
            "rlpulse: %s (%s) asks run %s to %s: %s",
            alert.name,
            alert.severity,
            self.exporter.run_id,
            action,
            last.describe(),
        )

    def _withdraw_unless(self, paging: set[tuple[str, float]]) -> None:
        with self._lock:
            pending = self._pending
            if pending is None or self._committed or pending.key in paging:
                return
            self._pending = None
        log.warning(
            "rlpulse: %s no longer pages (resolved or silenced): run %s does not %s",
            pending.alert.name,
            self.exporter.run_id,
            pending.action,
        )

    def samples(self) -> Iterator[scrape.Sample]:
        """When each alert last asked, at scrape time (where its failure began the exporter
        exports for every alert: ``lastgood.Onsets``)."""
        for name, request in sorted(self._marks.items()):
            yield ACTION_TIME, (name, request.action), request.asked_at

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

    # ---- the trainer's side: attribute reads, never blocking, never raising
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
        step = getattr(self.exporter.detector, "_last_step", None)  # the latest applied step
        if not self._committed:
            self._committed, self._stop_step = True, step
            # a loop that breaks here and just ends is a stopped run, not a finished one
            self.exporter.asked_end = (STOPPED, pending.alert.name)
        elif self._stop_step is None:
            self._stop_step = step
        elif step is not None and step > self._stop_step + 1 and self.exporter.asked_end:
            self.exporter.asked_end = None  # read, not heeded: a run that trains to its end
            log.warning(
                "rlpulse: run %s trains on after should_stop() (step %g): it ends finished",
                self.exporter.run_id,
                step,
            )
        return True

    def checkpoint_saved(self, step: float, path: str | os.PathLike[str]) -> None:
        """The trainer saved a checkpoint at ``step``: a resume point, and the save an alert
        asked for (a save-only request is then done). Arguments that cannot be used are
        counted (``bad_call``) and logged once, never raised."""
        try:
            at = float(step)
            where = os.fspath(path)
            if not (math.isfinite(at) and isinstance(where, str)):
                raise ValueError(f"step {at!r}, path {where!r}")
        except Exception as exc:
            self._bad_call("checkpoint_saved", exc)
            return
        self.exporter.checkpoint_saved(at, where)
        with self._lock:
            pending = self._pending
            if pending is None:
                return
            if pending.stop:  # the stop says where to resume when the loop has ended
                self._saved = True
                return
            self._pending = None
        self._say(pending.message(at))

    def stopped(self, step: float | None = None) -> str:
        """The trainer stopped as asked: print where to resume and end the run ``stopped``
        (named by the alert). Returns the line printed ("" when no stop was asked)."""
        try:
            at = None if step is None else float(step)
        except Exception as exc:
            self._bad_call("stopped", exc)
            at = None
        pending = self._pending
        if pending is None or not pending.stop or self._told:
            return ""
        self._told = True
        line = pending.message(at)
        self._say(line)
        self.exporter.end(STOPPED, pending.alert.name)
        return line

    def _bad_call(self, call: str, exc: Exception) -> None:
        self.exporter.drops("bad_call", call, exc)
        self._bad_calls += 1

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


def clean(text: str, limit: int = 120) -> str:
    """``text`` safe to print or use as a label value: control characters (terminal escapes,
    newlines) shown as ``?``, cut to ``limit`` characters."""
    shown = "".join(c if c.isprintable() else "?" for c in str(text)[:limit])
    return shown + ("..." if len(str(text)) > limit else "")


def _local_names(addr: str) -> frozenset[str]:
    """This host's names and addresses (loopback included), lower-cased."""
    names = {"localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn()}
    if addr and addr not in ("0.0.0.0", "::"):
        names.add(addr)
    names = {n.lower() for n in names}
    found = set(names)
    for name in names:
        found |= _addresses(name)
    return frozenset(found)


def _addresses(host: str) -> set[str]:
    """The addresses ``host`` resolves to (empty when it does not); the poller's thread."""
    try:
        return {str(info[4][0]).lower() for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return set()


# ---- one Control per exporter ---------------------------------------------------------------

_controls: weakref.WeakKeyDictionary[Exporter, Control] = weakref.WeakKeyDictionary()
_all = forks.Live(Control.after_fork_in_child)  # every Control; its lock: _controls, _process
_process: Control | None = None  # the process-wide run's (rlpulse.start)


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
    with _naming(ON_ALERT_ENV, on_alert is None):
        rules = policy(spec)
    with _naming("RLPULSE_ALERTMANAGER_URL and its options", alertmanager is None):
        source = (
            Alertmanager.of(alertmanager) if alertmanager is not None else Alertmanager.from_env()
        )
    if source is None:
        raise ValueError(
            "rlpulse: on_alert needs Alertmanager's address: alertmanager='http://host:9093' "
            "or RLPULSE_ALERTMANAGER_URL"
        )
    with _naming(POLL_ENV, interval is None):
        every = (
            interval if interval is not None else float(os.environ.get(POLL_ENV) or POLL_INTERVAL)
        )
        Poller.check(every)
    control = Control(
        exporter,
        rules,
        source,
        interval=every,
        rules_config=rules_config or os.environ.get(RULES_CONFIG_ENV) or None,
    )
    global _process
    with _all.lock:
        previous = _controls.get(exporter)
        if previous is not None:
            previous.poller.close()
        _controls[exporter] = control
        if process_wide:
            _process = control
    exporter.on_close(lambda: _let_go(control))
    return control.start()


@contextlib.contextmanager
def _naming(variable: str, from_env: bool) -> Iterator[None]:
    """A ValueError from a setting read from the environment names its variable."""
    try:
        yield
    except ValueError as exc:
        if not from_env:
            raise
        raise ValueError(f"{variable}: {exc}") from None


def _let_go(control: Control) -> None:
    global _process
    with _all.lock:
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


def checkpoint_saved(
    step: float, path: str | os.PathLike[str], exporter: Exporter | None = None
) -> None:
    """Report a checkpoint saved at ``step`` to ``exporter``'s run (default: the process-wide
    one), every one: they are the resume points its pages name, and the save an alert asked."""
    c = of(exporter) if exporter is not None else _process
    if c is not None:
        c.checkpoint_saved(step, path)
    elif exporter is not None:
        exporter.checkpoint_saved(step, path)


def stopped(step: float | None = None) -> str:
    """The loop stopped as asked: print where to resume, end the run ``stopped``."""
    c = _process
    return c.stopped(step) if c is not None else ""
