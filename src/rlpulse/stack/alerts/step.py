"""Alerts on step-indexed signals (``rlpulse.detect.signals``): one declaration makes the whole
alert.

A ``StepAlert`` names a signal, its warning and critical levels and its runbook. From that one
declaration come its knobs (a config section), its rules (a tier per severity, with hysteresis:
a firing alert clears only once the signal is back past ``hysteresis`` of the level, and
``keep_firing_for`` so a run that stops logging mid-failure keeps its page), its description
(value, baseline and step, in the signal's units) and its promtool scenario.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rlpulse import catalog
from rlpulse.detect import signals
from rlpulse.stack import panels
from rlpulse.stack.alerts.inputs import TARGET, series
from rlpulse.stack.alerts.kit import (
    ID,
    Alert,
    AlertDef,
    Check,
    Expect,
    Knob,
    Runbook,
    Scenario,
    Severity,
    knobs_class,
)
from rlpulse.stack.knobs import AlertConfig, seconds
from rlpulse.stack.promql import sel, template_matchers, template_query
from rlpulse.stack.query import Query

SIGNAL = catalog.get("rl_step_signal")
BASELINE = catalog.get("rl_step_signal_baseline")
STEP = catalog.get("rl_step")
LAST_GOOD = catalog.get("rl_last_good_step")
ONSET = catalog.get("rl_failure_onset_step")
ONSET_STEP = 131.0  # where the failure began in the promtool scenarios (the run exports it)
CHECKPOINT = {"checkpoint": "checkpoint-120"}
RESUME = catalog.get("rl_resume_checkpoint_step")
_BY_NAME = {s.name: s for s in signals.SIGNALS}
BAND_GAP = signals.BAND_GAP
# context every other step alert's page carries: where the run is outside the band of its
# healthy reference runs (nothing without a reference band)
_BAND_NOW = template_query(
    f'{SIGNAL.name}{{{template_matchers("job", "instance")},signal="{BAND_GAP}"}} > 0',
    "$labels.job",
    "$labels.instance",
) + (
    "{{ range . }} Outside the band of its healthy reference runs: {{ .Labels.series }} "
    "({{ .Value | humanizePercentage }} of their range).{{ end }}{{ end }}"
)
DRIFT_ONSET = catalog.get("rl_drift_onset_step")
# and the drift that preceded it: each feature of the run drifted from its reference, with the
# step since which (rlpulse.detect.drift; an observation's or action's only when it went dead)
_DRIFT_NOW = template_query(
    f"{DRIFT_ONSET.name}{{{template_matchers('job', 'instance')}}}",
    "$labels.job",
    "$labels.instance",
) + (
    "{{ range . }} {{ .Labels.kind | title }} drift in {{ .Labels.feature }} since step "
    '{{ .Value | printf "%.0f" }}.{{ end }}{{ end }}'
)
_BASELINE = 2.0  # the signal's baseline in the promtool scenarios


# knobs every step alert has; its levels are added per alert
_SETTINGS = {
    "for_": Knob("0s", "How long the condition must hold (the signal is already step-smoothed)."),
    "hysteresis": Knob(
        0.25,
        "A firing alert clears only this fraction of the way back from its level to the "
        "signal's healthy value (no flapping).",
    ),
    "keep_firing_for": Knob("10m", "Keep firing this long after the condition last held."),
}


def _fmt_value(unit: str, v: float) -> str:
    """A value as the description prints it (Python side of ``_go_value``)."""
    if unit == "fraction":
        return f"{v * 100:.4g}%"
    return {"multiple": f"{v:.3g}x", "nats": f"{v:.3g} nats", "sigma": f"{v:.3g} sigma"}[unit]


def _go_value(unit: str) -> str:
    """The Go template that prints ``$value`` like ``_fmt_value``."""
    if unit == "fraction":
        return "{{ $value | humanizePercentage }}"
    suffix = {"multiple": "x", "nats": " nats", "sigma": " sigma"}[unit]
    return '{{ printf "%.3g" $value }}' + suffix


def _go_query(selector: str, args: str, fmt: str) -> str:
    """A template that prints the first value of a query, or nothing."""
    return template_query(selector, *args.split()) + (
        f'{{{{ . | first | value | printf "{fmt}" }}}}{{{{ end }}}}'
    )


@dataclass(frozen=True, kw_only=True)
class StepAlert(AlertDef):
    """One alert on one step-indexed signal (its runbook names the panels to open after the
    one plotting its signal)."""

    signal: str
    subject: str
    relation: str
    healthy: float
    warning: float | None = None
    critical: float | None = None
    # (signal, level): the critical tier also fires at the warning level while that signal of
    # the same run is past that level (the damage this alert's cause has done shows there)
    escalate: tuple[str, float] | None = None
    # a Go template sentence the description ends with (what else the on-call needs to see)
    also: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.signal not in _BY_NAME:
            raise ValueError(f"{self.name}: unknown signal {self.signal!r}")
        if self.warning is None and self.critical is None:
            raise ValueError(f"{self.name}: give a warning or a critical level")
        if self.escalate is not None and (
            self.escalate[0] not in _BY_NAME or self.warning is None or self.critical is None
        ):
            raise ValueError(f"{self.name}: escalate needs a known signal and both levels")

    @property
    def sig(self) -> signals.Signal:
        return _BY_NAME[self.signal]

    @property
    def above(self) -> bool:
        return self.sig.worse == "above"

    @property
    def runbooks(self) -> dict[str, Runbook]:
        """Its runbook, whose panels start with the one plotting its signal (the training
        dashboard's panel of this alert)."""
        own = panels.see(panels.TRAINING, panels.alert_signal(self.name, self.signal))
        panel = own + panels.SEPARATOR + self.runbook.panel if self.runbook.panel else own
        return {self.name: dataclasses.replace(self.runbook, panel=panel)}

    def rules(self, q: Query, k: Any) -> Iterator[Alert]:
        return self.alerts(k, q.cfg.selectors.metrics)

    def scenarios(self, k: Any) -> Iterator[Scenario]:
        yield self.scenario(k, TARGET, k.keep_firing_for)
        if self.escalate:
            yield self.escalation_scenario(k, TARGET)
        if self.signal != BAND_GAP:
            yield self.band_scenario(k, TARGET)
        yield self.drift_scenario(k, TARGET)

    # ---- knobs
    @functools.cached_property
    def knobs(self) -> type[AlertConfig]:
        """The config section of this alert (its levels as fields)."""
        side = "above" if self.above else "below"
        levels = {
            sev: Knob(
                float(level), f"{sev.capitalize()} {side} this {self.signal} ({self.sig.unit})."
            )
            for sev, level in (("warning", self.warning), ("critical", self.critical))
            if level is not None
        }
        if self.escalate is not None:
            other, level = self.escalate
            o = _BY_NAME[other]
            levels["escalate"] = Knob(
                float(level),
                f"Critical already at the warning level while the run's {other} is {o.worse} "
                f"this ({o.unit}).",
            )
        return knobs_class(self.name, f"{self.summary} ({self.signal})", {**_SETTINGS, **levels})

    def tiers(self, k: Any) -> list[tuple[Severity, float]]:
        out: list[tuple[Severity, float]] = []
        if self.warning is not None:
            out.append(("warning", k.warning))
        if self.critical is not None:
            out.append(("critical", k.critical))
        return out

    def clear_level(self, level: float, hysteresis: float) -> float:
        """Where a firing tier clears: ``hysteresis`` of the way from its level back to the
        signal's healthy value."""
        return level + hysteresis * (self.healthy - level)

    # ---- rules
    def alerts(self, k: Any, extra: str) -> Iterator[Alert]:
        """The rule of each tier, for knobs ``k`` and the config's extra matchers."""
        s = sel(SIGNAL, f'signal="{self.signal}"', extra=extra)
        op = ">" if self.above else "<"
        for sev, level in self.tiers(k):
            clear = self.clear_level(level, k.hysteresis)
            firing = f'ALERTS{{alertname="{self.name}",alertstate="firing",severity="{sev}"}}'
            expr = (
                f"{s} {op} {level:g} or ({s} {op} {clear:g} "
                f"and on(job, instance, signal, series) {firing})"
            )
            if sev == "critical" and self.escalate is not None:
                damage = self._damage(k, extra)
                expr += f" or ({s} {op} {k.warning:g} and on(job, instance) {damage})"
            yield Alert(
                self.name,
                sev,
                expr,
                k.for_,
                self.summary,
                self.description(level, k if sev == "critical" else None),
                enabled=k.enabled,
                keep_firing_for=k.keep_firing_for,
            )

    def _damage(self, k: Any, extra: str) -> str:
        """The escalating signal of the run past its level (``escalate``)."""
        assert self.escalate is not None
        other = _BY_NAME[self.escalate[0]]
        op = ">" if other.worse == "above" else "<"
        matcher = f'signal="{other.name}"'
        return f"{sel(SIGNAL, matcher, extra=extra)} {op} {k.escalate:g}"

    def _escalation_text(self, k: Any | None) -> str:
        if k is None or self.escalate is None:
            return ""
        other = _BY_NAME[self.escalate[0]]
        return (
            f" (or {_fmt_value(self.sig.unit, k.warning)} while {other.name} is "
            f"{other.worse} {_fmt_value(other.unit, k.escalate)})"
        )

    def description(self, level: float, k: Any | None = None) -> str:
        """What is wrong, on which run, since which step: the value now against its baseline
        and the level (the failure's onset: ``rlpulse.detect.lastgood``, exported by the run)."""
        ident = "{" + template_matchers("job", "instance")
        base = _go_query(
            f"{BASELINE.name}{ident},{template_matchers('signal', 'series')}}}",
            "$labels.job $labels.instance $labels.signal $labels.series",
            "%.4g",
        )
        step = _go_query(f"{STEP.name}{ident}}}", "$labels.job $labels.instance", "%.0f")
        onset = template_query(
            f"{ONSET.name}{ident},alertname=%q,{template_matchers('series')}}}",
            "$labels.job",
            "$labels.instance",
            f'"{self.name}"',
            "$labels.series",
        )
        since = (
            f'{onset}since step {{{{ . | first | value | printf "%.0f" }}}} (now step {step})'
            f"{{{{ else }}}}at step {step}{{{{ end }}}}"
        )
        series = "{{ if $labels.series }} ({{ $labels.series }}){{ end }}"
        return (
            f"{self.subject}{series} of {ID} is {_go_value(self.sig.unit)} {self.relation} "
            f"(baseline {base}) {since}; fires {'above' if self.above else 'below'} "
            f"{_fmt_value(self.sig.unit, level)}{self._escalation_text(k)}.{self.also}"
            f"{'' if self.signal == BAND_GAP else _BAND_NOW}{_DRIFT_NOW}"
        )

    def expected_description(
        self,
        level: float,
        labels: dict[str, str],
        value: float,
        baseline: float,
        step: float,
        k: Any | None = None,
        onset: float | None = None,
    ) -> str:
        """``description`` as Prometheus prints it for these labels and values (``k``: of the
        critical tier; ``also`` left out: the scenarios do not export what it reads)."""
        series = f" ({labels['series']})" if labels.get("series") else ""
        since = f"since step {onset:.0f} (now step {step:.0f})" if onset else f"at step {step:.0f}"
        return (
            f"{self.subject}{series} of run {labels['run_id']} (rank {labels['rank']}) is "
            f"{_fmt_value(self.sig.unit, value)} {self.relation} (baseline {baseline:.4g}) "
            f"{since}; fires {'above' if self.above else 'below'} "
            f"{_fmt_value(self.sig.unit, level)}{self._escalation_text(k)}."
        )

    # ---- promtool scenario
    def scenario(self, k: Any, target: dict[str, str], keep: str) -> Scenario:
        """The signal goes bad tier by tier, sits in the hysteresis band, then heals: each tier
        fires at its level, stays firing in the band, and clears after ``keep_firing_for``."""
        tiers = self.tiers(k)
        levels = [lvl for _, lvl in tiers]
        worst = max(levels) * 1.5 if self.above else min(levels) / 2
        crit = levels[-1]
        band = (crit + self.clear_level(crit, k.hysteresis)) / 2
        stages: list[tuple[float, int]] = [(self.healthy, 5)]
        if len(levels) == 2:
            stages.append(((levels[0] + levels[1]) / 2, 5))
        stages += [(worst, 5), (band, 4)]
        keep_min = int(seconds(keep) // 60)
        stages.append((self.healthy, keep_min + 10))
        # as the series carries them (%g: 6 digits), so the texts expect what Prometheus prints
        values: list[float] = [float(f"{v:g}") for v, n in stages for _ in range(n)]
        labels = {**target, "signal": self.signal}
        n = len(values)
        inputs = (
            *self._inputs(labels, target, " ".join(f"{v:g}" for v in values), n),
            # where the failure began, exported by the run (rlpulse.detect.lastgood)
            (series(ONSET, {**target, "alertname": self.name}), f"_x4 {ONSET_STEP:g}x{n - 5}"),
            (series(LAST_GOOD, {**target, "alertname": self.name}), f"_x4 130x{n - 5}"),
            (series(RESUME, {**target, "alertname": self.name, **CHECKPOINT}), f"_x4 120x{n - 5}"),
        )
        resume = (130.0, CHECKPOINT["checkpoint"], 120.0)

        def at(minute: int) -> Check:
            v = values[minute]
            fires = [
                self._expect(k, sev, lvl, labels, v, minute, resume)
                for sev, lvl in tiers
                if self._fires(v, lvl, k.hysteresis, minute, values)
            ]
            return Check(self.name, f"{minute}m", tuple(fires))

        start_band = n - keep_min - 10 - 4
        checks = [at(3)]
        if len(levels) == 2:
            checks.append(at(7))
        checks += [at(start_band - 2), at(start_band + 2)]
        checks.append(Check(self.name, f"{n - 3}m"))
        return Scenario(
            f"{self.name}: {self.signal} goes from healthy ({self.healthy:g}) through each level "
            f"to {worst:g}, sits in the hysteresis band ({band:g}: still firing), then heals; "
            f"the alert ends {keep} (keep_firing_for) after the band.",
            inputs,
            tuple(checks),
        )

    def escalation_scenario(self, k: Any, target: dict[str, str]) -> Scenario:
        """The signal sits between its levels: warning only, until the escalating signal of the
        same run goes past its level, when the critical tier fires too."""
        assert self.escalate is not None
        other = _BY_NAME[self.escalate[0]]
        v = float(f"{(k.warning + k.critical) / 2:g}")  # as the series carries it
        bad = k.escalate * 2 if other.worse == "above" else k.escalate / 2
        labels = {**target, "signal": self.signal}
        inputs = (
            *self._inputs(labels, target, f"{v:g}x19", 20),
            (series(SIGNAL, {**target, "signal": other.name, "series": ""}), f"0x9 {bad:g}x9"),
        )

        def expect(sev: Severity, level: float, minute: int) -> Expect:
            return self._expect(k, sev, level, labels, v, minute)

        return Scenario(
            f"{self.name} escalates: {self.signal} at {v:g} (between its levels) is a warning "
            f"until {other.name} goes to {bad:g} (past {k.escalate:g}) at 10m; then critical too.",
            inputs,
            (
                Check(self.name, "5m", (expect("warning", k.warning, 5),)),
                Check(
                    self.name,
                    "15m",
                    (expect("warning", k.warning, 15), expect("critical", k.critical, 15)),
                ),
            ),
        )

    @staticmethod
    def _inputs(
        labels: dict[str, str], target: dict[str, str], values: str, n: int
    ) -> tuple[tuple[str, str], ...]:
        """A scenario's signal (``values``), its baseline and the run's step over ``n``
        minutes; ``series=""`` is no label in Prometheus."""
        return (
            (series(SIGNAL, {**labels, "series": ""}), values),
            (series(BASELINE, {**labels, "series": ""}), f"{_BASELINE:g}x{n - 1}"),
            (series(STEP, target), f"100+10x{n - 1}"),
        )

    def band_scenario(self, k: Any, target: dict[str, str]) -> Scenario:
        """A run outside the band of its healthy reference runs: the page says so, with the
        series and how far outside (drift is context for the failure, not a page of its own)."""
        tiers = self.tiers(k)
        sev, level = tiers[0]
        past = level * 1.5 if self.above else level / 2
        v = float(f"{(level + tiers[1][1]) / 2 if len(tiers) == 2 else past:g}")  # one tier
        labels = {**target, "signal": self.signal}
        gap = {**target, "signal": BAND_GAP, "series": "episode_return"}
        inputs = (*self._inputs(labels, target, f"{v:g}x9", 10), (series(SIGNAL, gap), "0.3x9"))
        plain = self._expect(k, sev, level, labels, v, 5)
        assert plain.annotations is not None
        text = plain.annotations["description"] + (
            " Outside the band of its healthy reference runs: episode_return (30% of their range)."
        )
        return Scenario(
            f"{self.name} on a run 0.3 of its references' range outside their band: the page "
            "names the series that left it.",
            inputs,
            (
                Check(
                    self.name,
                    "5m",
                    (dataclasses.replace(plain, annotations={"description": text}),),
                ),
            ),
        )

    def drift_scenario(self, k: Any, target: dict[str, str]) -> Scenario:
        """A run whose input drifted before it failed: the page names the feature and the step
        since which (drift is context for the failure, not a page of its own)."""
        tiers = self.tiers(k)
        sev, level = tiers[0]
        past = level * 1.5 if self.above else level / 2
        v = float(f"{(level + tiers[1][1]) / 2 if len(tiers) == 2 else past:g}")
        labels = {**target, "signal": self.signal}
        drifted = {**target, "kind": "input", "feature": "obs[2]"}
        inputs = (
            *self._inputs(labels, target, f"{v:g}x9", 10),
            (series(DRIFT_ONSET, drifted), "80x9"),
        )
        plain = self._expect(k, sev, level, labels, v, 5)
        assert plain.annotations is not None
        text = plain.annotations["description"] + " Input drift in obs[2] since step 80."
        return Scenario(
            f"{self.name} on a run whose input obs[2] drifted from step 80: the page says so.",
            inputs,
            (
                Check(
                    self.name,
                    "5m",
                    (dataclasses.replace(plain, annotations={"description": text}),),
                ),
            ),
        )

    def _expect(
        self,
        k: Any,
        sev: Severity,
        level: float,
        labels: dict[str, str],
        value: float,
        minute: int,
        resume: tuple[float, str, float] | None = None,
    ) -> Expect:
        """Tier ``sev`` (at ``level``) firing at ``minute`` of a scenario with ``value``."""
        crit = k if sev == "critical" else None
        onset = ONSET_STEP if resume is not None and minute >= 5 else None
        text = self.expected_description(
            level, labels, value, _BASELINE, 100 + 10 * minute, crit, onset
        )
        return Expect(sev, labels, value, {"description": text}, resume)

    def _fires(self, v: float, level: float, h: float, minute: int, values: list[float]) -> bool:
        """Whether a tier fires at ``minute``: past its level, or in its band after firing."""
        past = (lambda x, lvl: x > lvl) if self.above else (lambda x, lvl: x < lvl)
        if past(v, level):
            return True
        clear = self.clear_level(level, h)
        return past(v, clear) and any(past(x, level) for x in values[:minute])


def healthy_inputs(defs: tuple[StepAlert, ...], target: dict[str, str], n: int) -> list[Any]:
    """Input series of a healthy run: every signal on its healthy side for ``n`` samples."""
    return [
        (series(SIGNAL, {**target, "signal": d.signal, "series": ""}), f"{d.healthy:g}x{n - 1}")
        for d in defs
    ]
