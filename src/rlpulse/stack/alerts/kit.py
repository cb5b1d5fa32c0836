"""The parts every alert definition is made of: the rule, its runbook, its promtool scenarios."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rlpulse.stack.knobs import AlertConfig, Tiered, seconds

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

    @classmethod
    def of(
        cls,
        c: AlertConfig,
        name: str,
        severity: Severity,
        expr: str,
        summary: str,
        description: str,
        scope: Scope = "target",
    ) -> Alert:
        """An alert whose ``for``, ``enabled`` and (where it has one) ``keep_firing_for`` come
        from its config entry ``c``."""
        keep = getattr(c, "keep_firing_for", "")
        return cls(name, severity, expr, c.for_, summary, description, scope, c.enabled, {}, keep)

    @classmethod
    def tiered(
        cls,
        t: Tiered,
        name: str,
        expr: Callable[[float], str],
        summary: str,
        description: str,
        level_text: Callable[[float], str] = "{:g}".format,
        scope: Scope = "target",
    ) -> Iterator[Alert]:
        """A warning and a critical rule of one alert; ``$LEVEL`` in the description is the
        tier's level as ``level_text`` prints it."""
        tiers: tuple[tuple[Severity, float], ...] = (
            ("warning", t.warning),
            ("critical", t.critical),
        )
        for sev, level in tiers:
            text = description.replace("$LEVEL", level_text(level))
            yield cls.of(t, name, sev, expr(level), summary, text, scope)

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


@dataclass(frozen=True)
class AlertDef:
    """One alert declared in one place: its knobs (a config section), the rules it generates
    (and the recording rules they read), its runbook sections and its promtool scenarios.

    ``rules`` and ``recordings`` take a ``stack.query.Query`` and the knobs; ``scenarios`` the
    default knobs; ``problems`` the knobs a user set, and says what is wrong with them together
    (each value alone is checked when the config is read)."""

    key: str
    area: Area
    knobs: type[AlertConfig]
    rules: Callable[[Any, Any], Iterator[Alert]]
    runbooks: Mapping[str, Runbook]
    scenarios: Callable[[Any], Iterator[Scenario]]
    recordings: Callable[[Any, Any], list[RecordingRule]] = lambda q, k: []
    problems: Callable[[Any], Iterator[str]] = lambda k: iter(())
