"""promtool unit tests of the generated alert rules: ``prometheus/tests/<area>.yml``.

Each alert definition (``rlpulse.stack.alerts``) brings scenarios that fire it (values worked out
by hand in their comments) and each area a healthy run of several hours in which no alert fires;
this module renders them. The scenarios are written for the
default thresholds and windows, so ``rlpulse generate`` writes them only when the rules are the
default ones. Expected annotations are the rule's own templates filled in with the expected labels
and value (descriptions use only ``$labels.x`` and ``$value`` through ``printf "%.3g"``,
``humanize``, ``humanizePercentage`` and ``humanizeDuration``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote_plus

from rlpulse.stack import alerts as alert_defs
from rlpulse.stack import rules
from rlpulse.stack.alerts.kit import (
    AGO,
    G3,
    HUMANIZE,
    PERCENT,
    Alert,
    Area,
    Check,
    Expect,
    Scenario,
    Severity,
)
from rlpulse.stack.alerts.step import StepAlert
from rlpulse.stack.config import Config
from rlpulse.stack.output import dump, header
from rlpulse.stack.query import Query

EVALUATION_INTERVAL = "30s"
SERIES_INTERVAL = "1m"
HEALTHY_TIMES = ("1h", "2h30m", "4h", "6h", "7h59m")


# ---- rendering ---------------------------------------------------------------------------------


def go_g(value: float, digits: int) -> str:
    """Go's ``%.<digits>g`` of a float (NaN and ±Inf spelt as Go spells them)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.{digits}g}"


def go_g3(value: float) -> str:
    """``printf "%.3g"`` as Go's text/template prints a float."""
    return go_g(value, 3)


def go_humanize(value: float) -> str:
    """``humanize`` as Prometheus' templates print a number (SI prefix, 4 significant digits)."""
    if value == 0 or not math.isfinite(value):
        return go_g(value, 4)
    big, small = ("k", "M", "G", "T", "P", "E", "Z", "Y"), ("m", "u", "n", "p", "f", "a", "z", "y")
    prefix = ""
    if abs(value) >= 1:
        for p in big:
            if abs(value) < 1000:
                break
            prefix, value = p, value / 1000
    else:
        for p in small:
            if abs(value) >= 1:
                break
            prefix, value = p, value * 1000
    return go_g(value, 4) + prefix


def go_percentage(value: float) -> str:
    """``humanizePercentage`` as Prometheus' templates print a ratio."""
    return go_g(value * 100, 4) + "%"


def go_duration(value: float) -> str:
    """``humanizeDuration`` as Prometheus' templates print a number of seconds (>= 1 s)."""
    if not math.isfinite(value):
        return go_g3(value)
    sign, v = ("-", -value) if value < 0 else ("", value)
    secs, mins, hours, days = int(v) % 60, int(v) // 60 % 60, int(v) // 3600 % 24, int(v) // 86400
    if days:
        return f"{sign}{days}d {hours}h {mins}m {secs}s"
    if hours:
        return f"{sign}{hours}h {mins}m {secs}s"
    if mins:
        return f"{sign}{mins}m {secs}s"
    return f"{sign}{v:.4g}s"


_LABEL = re.compile(r"\{\{ \$labels\.(\w+)( \| urlquery)? \}\}")  # urlquery: Go's QueryEscape
# {{ with $labels.x }}…{{ . }}…{{ end }}: the text with the label's value, or nothing
_WITH_LABEL = re.compile(r"\{\{ with \$labels\.(\w+) \}\}(.*?)\{\{ end \}\}")
_PRINTERS = {G3: go_g3, HUMANIZE: go_humanize, PERCENT: go_percentage, AGO: go_duration}


def fill(
    template: str,
    labels: dict[str, str],
    value: float,
    alert: str = "",
    resume: tuple[float, str, float] | None = None,
) -> str:
    """An annotation template of ``alert`` with the labels, value and the run's resume point
    (``resume``: last good step, checkpoint, its step) filled in, and the run's metadata left
    out (a scenario that exports rl_run_info expects it in ``Expect.annotations``)."""
    if resume:
        good, checkpoint, at = resume
        text = f"last good step {good:.0f}; resume from {checkpoint} (step {at:.0f})"
        template = template.replace(rules.last_good(alert), text)
        template = template.replace(rules.step_min(alert), f"&step_min={good:.0f}")
    training = Config().links.training_dashboard_uid  # no scenario reports episodes
    template = template.replace(rules.classic_or(training), training)
    for queried in rules.queried(alert):
        template = template.replace(queried, "")
    for placeholder, printer in _PRINTERS.items():
        template = template.replace(placeholder, printer(value))
    template = _WITH_LABEL.sub(
        lambda m: m.group(2).replace("{{ . }}", got) if (got := labels.get(m.group(1))) else "",
        template,
    )
    return _LABEL.sub(
        lambda m: (quote_plus if m.group(2) else str)(labels.get(m.group(1), "")), template
    )


def _expected(alert: Alert, area: str, exp: Expect) -> dict[str, Any]:
    labels = {**exp.labels, "severity": exp.severity, "layer": area, **alert.labels}
    notes = {"summary": alert.summary, "description": alert.description, **alert.annotations}
    filled = {k: fill(v, exp.labels, exp.value, alert.name, exp.resume) for k, v in notes.items()}
    return {"exp_labels": labels, "exp_annotations": {**filled, **(exp.annotations or {})}}


def unit_test(
    scn: Scenario, area: str, alerts: dict[tuple[str, Severity], Alert]
) -> dict[str, Any]:
    """One promtool test (input series and alert checks) of scenario ``scn``."""
    names = sorted({a for a, _ in alerts})
    checks: Sequence[Check] = scn.checks or [
        Check(name, t) for t in HEALTHY_TIMES for name in names
    ]
    return {
        "interval": SERIES_INTERVAL,
        "input_series": [{"series": s, "values": v} for s, v in scn.inputs],
        "alert_rule_test": [
            {
                "eval_time": c.at,
                "alertname": c.alert,
                "exp_alerts": [_expected(alerts[(c.alert, e.severity)], area, e) for e in c.fires],
            }
            for c in checks
        ],
    }


# what a step alert's scenario is built from: a config changing only these gets its tests
LEVELS = frozenset({"warning", "critical", "hysteresis", "escalate"})


def scenarios(area: Area, knobs: Any = None) -> list[Scenario]:
    """The scenarios of one area's alerts for ``knobs`` (a config's ``alerts``; default: the
    shipped ones), the healthy run last."""
    knobs = Config().alerts if knobs is None else knobs
    declared = [s for d in alert_defs.DEFS[area] for s in d.scenarios(getattr(knobs, d.key))]
    return [*declared, alert_defs.HEALTHY[area]()]


def firing_rule(a: Alert) -> tuple[Any, ...]:
    """What decides when an alert fires and with which labels (not its texts or links)."""
    return (a.severity, a.expr, a.for_, a.keep_firing_for, a.enabled, sorted(a.labels.items()))


def _unchanged(group: rules.Group, default: rules.Group) -> frozenset[str]:
    """The alerts of ``group`` that fire exactly as with the default config (the scenarios are
    written for those)."""
    ours: defaultdict[str, list[tuple[Any, ...]]] = defaultdict(list)
    theirs: defaultdict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for mine, alerts in ((ours, group.alerts), (theirs, default.alerts)):
        for a in alerts:
            mine[a.name].append(firing_rule(a))
    return frozenset(n for n in ours if ours[n] == theirs.get(n))


def _leveled(area: Area, cfg: Config) -> list[StepAlert]:
    """The step alerts of ``area`` whose rules ``cfg`` changes through their levels alone: their
    scenario, built from those levels, holds for ``cfg``."""
    base = Config()
    out = []
    for d in alert_defs.DEFS[area]:
        if not isinstance(d, StepAlert):
            continue
        mine, theirs = getattr(cfg.alerts, d.key), getattr(base.alerts, d.key)
        changed = {
            f.name
            for f in dataclasses.fields(mine)
            if getattr(mine, f.name) != getattr(theirs, f.name)
        }
        fired = [[firing_rule(a) for a in d.rules(Query(c), mine)] for c in (cfg, base)]
        if changed and changed <= LEVELS and fired[0] == fired[1]:
            out.append(d)
    return out


def _kept(scn: Scenario, testable: frozenset[str], quiet: list[str]) -> Scenario | None:
    """``scn`` if it checks only ``testable`` alerts; the healthy run checks ``quiet`` (the
    alerts unchanged from the defaults it is written for)."""
    if not scn.checks:
        checks = tuple(Check(n, t) for t in HEALTHY_TIMES for n in quiet)
        return dataclasses.replace(scn, checks=checks) if checks else None
    return scn if {c.alert for c in scn.checks} <= testable else None


def render(cfg: Config) -> dict[str, str]:
    """Relative path -> text of each ``prometheus/tests/<area>.yml``: every scenario for the
    default config; for another, those whose alerts fire as with the defaults, and those of the
    step alerts it changes in their levels alone (built from its levels). The others are named
    in the file's head, untested: their scenarios are written for the default values."""
    out = {}
    defaults = {g.area: g for g in rules.groups(Config())}
    for group in rules.groups(cfg):
        alerts = {(a.name, a.severity): a for a in group.alerts}
        names = sorted({a for a, _ in alerts})
        default = defaults[group.area]
        same = group.recordings == default.recordings  # else no scenario's inputs hold
        unchanged = _unchanged(group, default) if same else frozenset()
        leveled = _leveled(group.area, cfg) if same else []
        testable = unchanged | {name for d in leveled for name in d.runbooks}
        knobs = dataclasses.replace(
            Config().alerts, **{d.key: getattr(cfg.alerts, d.key) for d in leveled}
        )
        changed = [n for n in names if n not in testable]
        note = (
            f"Not tested here (this config changes them from the defaults the scenarios are "
            f"written for): {', '.join(changed)}."
            if changed
            else ""
        )
        head = (
            header(
                alert_defs.SOURCES[group.area],
                "Scenarios from there, rendered by rlpulse/stack/ruletests.py.",
                f"Run: promtool test rules prometheus/tests/{group.area}.yml",
            )
            + "".join(f"# {line}\n" for line in _wrap(note))
            + (
                f"rule_files:\n  - ../rules/{group.area}.yml\n"
                f"evaluation_interval: {EVALUATION_INTERVAL}\n"
            )
        )
        body = []
        quiet = [n for n in names if n in unchanged]
        for declared in scenarios(group.area, knobs):
            scn = _kept(declared, testable, quiet)
            if scn is None:
                continue
            text = dump([unit_test(scn, group.area, alerts)])
            comment = "".join(f"  # {line}\n" for line in _wrap(scn.comment))
            body.append(comment + "".join(f"  {line}\n" for line in text.splitlines()))
        tests = "tests:\n" + "\n".join(body) if body else "tests: []\n"
        out[f"prometheus/tests/{group.area}.yml"] = head + tests
    return out


def _wrap(text: str, width: int = 96) -> list[str]:
    lines, cur = [], ""
    for word in text.split():
        if cur and len(cur) + 1 + len(word) > width:
            lines.append(cur)
            cur = word
        else:
            cur = f"{cur} {word}" if cur else word
    return [*lines, cur] if cur else lines
