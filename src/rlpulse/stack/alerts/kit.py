"""The one shape of an alert (``AlertDef``: knobs, rules, runbook, scenarios, declared in one
place) and the parts it is made of: the rule, its runbook, its promtool scenarios.

An alert on a PromQL condition is a ``ThresholdAlert``; one on a step signal a
``step.StepAlert``; both are ``AlertDef``s, which is all the generators read.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rlpulse import catalog
from rlpulse.stack.alerts.inputs import TARGET, const, series
from rlpulse.stack.knobs import AlertConfig, Duration, doc, seconds, setting
from rlpulse.stack.query import Query

Severity = Literal["critical", "warning", "info"]
Area = Literal["rl", "task", "system"]
# "target": the alert keeps job/instance (one exporter); "run": aggregated by (job, run_id).
Scope = Literal["target", "run"]

# What descriptions name, and how they print $value (Prometheus' template functions, which
# ``stack.ruletests.fill`` renders for the expected annotations).
ID = "run {{ $labels.run_id }} (rank {{ $labels.rank }})"
RUN_TEXT = "run {{ $labels.run_id }}"
G3 = '{{ printf "%.3g" $value }}'  # a value near 1 (KL in nats, a ratio): 0.2, not 200m
HUMANIZE = "{{ $value | humanize }}"  # a count or magnitude: 12.3k, not 1.23e+04
PERCENT = "{{ $value | humanizePercentage }}"
AGO = "{{ $value | humanizeDuration }}"


def pct(ratio: float) -> str:
    """A threshold ratio as the descriptions print it (like humanizePercentage)."""
    return f"{ratio * 100:.4g}%"


@dataclass(frozen=True)
class RecordingRule:
    """One recording rule."""

    record: str
    expr: str

    def rule(self) -> dict[str, Any]:
        """The rule as it appears in a Prometheus rule file."""
        return {"record": self.record, "expr": self.expr}


@dataclass(frozen=True)
class Alert:
    """One alerting rule (a tiered alert is two of these with the same name)."""

    name: str
    severity: Severity
    expr: str
    for_: str
    summary: str
    description: str
    scope: Scope = "target"
    enabled: bool = True
    annotations: dict[str, str] = field(default_factory=dict)
    keep_firing_for: str = ""
    labels: dict[str, str] = field(default_factory=dict)  # beyond severity and layer (owner)

    def rule(self, area: Area) -> dict[str, Any]:
        """The rule as it appears in a Prometheus rule file."""
        out: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if seconds(self.for_) > 0:
            out["for"] = self.for_
        if self.keep_firing_for and seconds(self.keep_firing_for) > 0:
            out["keep_firing_for"] = self.keep_firing_for
        out["labels"] = {"severity": self.severity, "layer": area, **self.labels}
        out["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            **self.annotations,
        }
        return out


@dataclass(frozen=True)
class Runbook:
    """The three parts of a runbook section."""

    means: str
    panel: str
    tries: tuple[str, ...]


@dataclass(frozen=True)
class Expect:
    """One alert expected to fire: its severity, labels beyond the alertname, and value."""

    severity: Severity
    labels: dict[str, str]
    value: float
    # annotations as they must read, where the rule's templates query more than $labels/$value
    annotations: dict[str, str] | None = None
    # (last good step, checkpoint, its step) when the scenario exports the run's resume point
    resume: tuple[float, str, float] | None = None


@dataclass(frozen=True)
class Check:
    """What one alert should look like at one time ([] = nothing firing)."""

    alert: str
    at: str
    fires: tuple[Expect, ...] = ()


@dataclass(frozen=True)
class Scenario:
    """One promtool test: input series and the checks made on them."""

    comment: str
    inputs: tuple[tuple[str, str], ...]
    checks: tuple[Check, ...] = ()  # none: a healthy run, every alert checked at HEALTHY_TIMES


def level_shift(
    alert: str,
    comment: str,
    series: str,
    levels: tuple[float, float],
    labels: dict[str, str],
    value: float | None = None,
    quiet: tuple[str, ...] = (),
) -> Scenario:
    """A series at its healthy level for 20m, then at its failing level for 40m: ``alert``
    quiet at the ``quiet`` times and a warning at 50m, valued ``value`` (the failing level)."""
    healthy, failing = levels
    return Scenario(
        comment,
        ((series, f"{const(healthy, 20)} {const(failing, 40)}"),),
        (
            *(Check(alert, at) for at in quiet),
            Check(alert, "50m", (Expect("warning", labels, failing if value is None else value),)),
        ),
    )


@dataclass(frozen=True)
class Knob:
    """One setting of an alert: its default, the sentence docs/configuration.md shows and the
    strings a user may set. Its type is the default's (a string is a ``Duration``)."""

    default: Any
    doc: str
    choices: frozenset[str] | None = None

    @property
    def type(self) -> Any:
        d = self.default
        return (
            tuple[str, ...] if isinstance(d, tuple) else Duration if isinstance(d, str) else type(d)
        )


def tiers(warning: float, critical: float, what: str) -> dict[str, Knob | Any]:
    """The settings of a ``tiered`` alert held for 5m: its warning level (above this ``what``)
    and its critical level."""
    return {
        "for_": "5m",
        "warning": Knob(warning, f"Warning above this {what}."),
        "critical": Knob(critical, "Critical above this."),
    }


def tiered_checks(
    name: str, labels: dict[str, str], warning: tuple[str, float], critical: tuple[str, float]
) -> tuple[Check, Check]:
    """A tiered alert's checks: the warning alone at ``warning``'s time and value, then both
    tiers at ``critical``'s."""
    (at, value), (later, worse) = warning, critical
    return (
        Check(name, at, (Expect("warning", labels, value),)),
        Check(name, later, (Expect("warning", labels, worse), Expect("critical", labels, worse))),
    )


def _field(name: str, knob: Knob | Any) -> tuple[str, Any, Any]:
    """A knobs dataclass field: a ``Knob``, or a new default of a knob every alert has."""
    if not isinstance(knob, Knob):
        inherited = {f.name: f for f in dataclasses.fields(AlertConfig)}.get(name)
        if inherited is None:
            raise TypeError(f"{name}: a knob of an alert's own is a Knob(default, doc)")
        knob = Knob(knob, doc(inherited))
    return (name, knob.type, setting(knob.default, knob.doc, knob.choices))


def knobs_class(name: str, sentence: str, settings: Mapping[str, Knob | Any]) -> type[AlertConfig]:
    """The config section of alert ``name``: ``AlertConfig`` with ``settings`` in order (a
    ``Knob``, or a new default of a knob every alert has), ``sentence`` its doc line."""
    fields = [_field(n, k) for n, k in settings.items()]
    cls = dataclasses.make_dataclass(
        f"{name.removeprefix('RL')}Knobs", fields, bases=(AlertConfig,), frozen=True
    )
    cls.__doc__ = sentence
    return cls


def snake_case(name: str) -> str:
    """``GPUMemoryFull`` as ``gpu_memory_full``: a word starts at a capital after a lower-case
    letter or digit, or at the last capital of a run followed by a lower-case letter."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@dataclass(frozen=True, kw_only=True)
class AlertDef(abc.ABC):
    """One alert declared in one place: its name, the config section of its knobs, its rules
    (and the recording rules they read), its runbook and its promtool scenarios. Its area is
    the one whose ``DEFS`` list it (``stack.alerts.DEFS``).

    ``stack.config`` makes a config section of ``knobs``; ``rules`` and ``recordings`` take a
    ``stack.query.Query`` and the knobs, ``scenarios`` the knobs (the shipped ones for every
    scenario but a step alert's), ``problems`` the knobs a user set and says what is wrong with
    them together (each value alone is checked when the config is read). ``key``, the name of
    its config section, is the name in snake case without the ``RL`` prefix unless given."""

    name: str
    summary: str
    runbook: Runbook
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", snake_case(self.name.removeprefix("RL")))

    @property
    def runbooks(self) -> dict[str, Runbook]:
        return {self.name: self.runbook}

    @property
    @abc.abstractmethod
    def knobs(self) -> type[AlertConfig]:
        """The config section of this alert."""

    @abc.abstractmethod
    def rules(self, q: Query, k: Any) -> Iterator[Alert]:
        """Its alerting rules for knobs ``k``."""

    @abc.abstractmethod
    def scenarios(self, k: Any) -> Iterator[Scenario]:
        """Its promtool scenarios."""

    def recordings(self, q: Query, k: Any) -> list[RecordingRule]:
        return []

    def problems(self, k: Any) -> Iterator[str]:
        return iter(())


Text = str | Callable[[Query, Any], str]


@dataclass(frozen=True, kw_only=True)
class ThresholdAlert(AlertDef):
    """An alert on a PromQL condition. ``expr`` and ``description`` are text or a function of
    the ``Query`` and the knobs; a ``tiered`` alert is a warning and a critical rule at the
    knobs' ``warning`` and ``critical`` levels, each put for ``$LEVEL`` (``level_text`` prints
    it in the description). ``settings`` are its knobs beyond ``enabled`` and ``for_``, or
    new defaults of those (``"for_": "5m"``); ``doc`` is the sentence of its config section
    (none for the pipeline's own alerts, ``meta``, which have no config section), ``tests``
    its scenarios (written for the shipped knobs), ``records`` the recording rules it reads
    and ``check`` its ``problems``."""

    severity: Severity | Literal["tiered"]
    expr: Text
    description: Text
    doc: str = ""
    settings: Mapping[str, Knob | Any] = field(default_factory=dict)
    tests: tuple[Scenario, ...] = ()
    scope: Scope = "target"
    level_text: Callable[[float], str] = "{:g}".format
    records: Callable[[Query, Any], list[RecordingRule]] | None = None
    check: Callable[[Any], Iterator[str]] | None = None

    @functools.cached_property
    def knobs(self) -> type[AlertConfig]:
        return knobs_class(self.name, self.doc, self.settings)

    def rules(self, q: Query, k: Any) -> Iterator[Alert]:
        expr = self.expr if isinstance(self.expr, str) else self.expr(q, k)
        text = self.description if isinstance(self.description, str) else self.description(q, k)
        tiers: Iterable[tuple[Severity, float | None]] = (
            (("warning", k.warning), ("critical", k.critical))
            if self.severity == "tiered"
            else ((self.severity, None),)
        )
        keep = getattr(k, "keep_firing_for", "")
        for sev, level in tiers:
            e, t = expr, text
            if level is not None:
                e, t = (
                    e.replace("$LEVEL", f"{level:g}"),
                    t.replace("$LEVEL", self.level_text(level)),
                )
            yield Alert(self.name, sev, e, k.for_, self.summary, t, self.scope, k.enabled, {}, keep)

    def scenarios(self, k: Any) -> Iterator[Scenario]:
        return iter(self.tests)

    def recordings(self, q: Query, k: Any) -> list[RecordingRule]:
        return self.records(q, k) if self.records else []

    def problems(self, k: Any) -> Iterator[str]:
        return self.check(k) if self.check else iter(())


def recent_mean(
    *,
    name: str,
    doc: str,
    metric: catalog.Metric,
    threshold: tuple[float, str],
    below: bool = False,
    summary: str,
    description: Text,
    runbook: Runbook,
    shift: tuple[str, tuple[float, float]],
    labels: dict[str, str] = TARGET,
    for_: str | None = None,
    quiet: tuple[str, ...] = (),
) -> ThresholdAlert:
    """A warning while ``metric``'s mean over the recent window is above its ``threshold``
    knob (``below``: under it); ``threshold`` is the knob's default and what the mean is of.
    Its scenario is a ``level_shift`` of the series with ``labels``: ``shift`` is its comment
    and (healthy, failing) levels."""
    default, what = threshold
    relation = "below" if below else "above"
    settings: dict[str, Knob | Any] = {} if for_ is None else {"for_": for_}
    settings["threshold"] = Knob(default, f"Fire {relation} this mean {what}.")
    comment, levels = shift
    op = "<" if below else ">"
    return ThresholdAlert(
        name=name,
        doc=doc,
        settings=settings,
        severity="warning",
        expr=lambda q, k: f"{q.recent(metric)} {op} {k.threshold:g}",
        summary=summary,
        description=description,
        runbook=runbook,
        tests=(level_shift(name, comment, series(metric, labels), levels, labels, quiet=quiet),),
    )
