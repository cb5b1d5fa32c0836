"""Prometheus rule files: the alert definitions of ``rlpulse.stack.alerts`` and the recording
rules the dashboards read, for one Config.

Three groups, one per area (``rl``, ``task``, ``system``), each written to
``prometheus/rules/<area>.yml``. Recording rules come first in a group so the alerts of the same
evaluation see fresh values. Every alert gets ``severity`` and ``layer`` labels, a static
``summary``, a templated ``description`` and, in one generic pass (``_annotate``), its owner
labels (``team``, ``cluster``), its ``runbook_url`` (``docs/runbooks.md#<alertname lowercased>``),
``dashboard_url`` and ``run_info`` (the run's model, git sha, framework and owner, looked up in
``rl_run_info`` when the alert fires).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlpulse import catalog
from rlpulse.stack import alerts as alert_defs
from rlpulse.stack import panels
from rlpulse.stack.alerts import gpu, liveness, system
from rlpulse.stack.alerts.kit import Alert, Area, RecordingRule
from rlpulse.stack.config import Config
from rlpulse.stack.metrics import (
    COLLECTOR_DURATION,
    COLLECTOR_ERRORS,
    COLLECTOR_UP,
    COMPLETION_TOKENS,
    ENV_STEPS,
    EPISODES,
    GPU_CLOCK,
    GPU_ECC,
    GPU_MEM_TOTAL,
    GPU_MEM_USED,
    GPU_MEM_UTIL,
    GPU_POWER,
    GPU_POWER_LIMIT,
    GPU_PROCESS_MEM,
    GPU_TEMP,
    GPU_THROTTLED,
    GPU_UTIL,
    GRADER_CALLS,
    GRADER_ERRORS,
    GRADER_LATENCY,
    LAST_GOOD_STEP,
    LAST_LOG,
    LENGTH_HIST,
    OUTCOME,
    PHASE,
    PROCESS_CPU,
    PROCESS_RSS,
    PROMPT_TOKENS,
    RESUME_STEP,
    RUN_INFO,
    SAMPLES,
    STEP,
    TOOL_CALLS,
    TOOL_ERRORS,
    TRAIN_STEPS,
)
from rlpulse.stack.output import dump, header
from rlpulse.stack.promql import record_name, template_matchers, template_query
from rlpulse.stack.query import NODE_BY, RUN_BY, Query

AREAS: tuple[Area, ...] = ("rl", "task", "system")


# Recorded series the dashboards (and replay) query; names do not depend on Config. Those an
# alert reads are declared with it (``rlpulse.stack.alerts``), these three are plotted too.
GPU_MEMORY_RATIO = gpu.MEMORY_RATIO
GRADER_ERROR_RATIO = system.GRADER_ERROR_RATIO
ROLLOUT_QUANTILES = system.ROLLOUT_QUANTILES
QUANTILES = system.QUANTILES
THROUGHPUT_METRICS = (TRAIN_STEPS, SAMPLES, COMPLETION_TOKENS, PROMPT_TOKENS, ENV_STEPS, EPISODES)
RATED_METRICS = (*THROUGHPUT_METRICS, GRADER_CALLS, GRADER_ERRORS)
PHASE_SHARE = record_name("run_phase", PHASE, "share")
GRADER_QUANTILES = {q: record_name("run", GRADER_LATENCY, q) for q, _ in QUANTILES}
PHASE_MEAN = record_name("run_phase", PHASE, "mean")
GPU_THROTTLED_COUNT = record_name("node_reason", GPU_THROTTLED, "sum")
GPU_ECC_INCREASE = record_name("node_error_type", GPU_ECC, "increase")
TOOL_RATES = {m: record_name("run_tool", m, "rate") for m in (TOOL_CALLS, TOOL_ERRORS)}
COLLECTOR_UP_MIN = record_name("run_collector", COLLECTOR_UP, "min")
COLLECTOR_DURATION_MAX = record_name("run_collector", COLLECTOR_DURATION, "max")
COLLECTOR_ERROR_RATE = record_name("run_collector", COLLECTOR_ERRORS, "rate")
# Pre-aggregations for the dashboards (docs/scaling.md): at 1,024 ranks x 8 GPUs a panel reads
# one series per run or per node instead of one per rank or per GPU. (metric, operation) pairs:
# ``node:<metric>:<op>`` is ``<op> by (job, run_id, node)``, ``run:…`` by (job, run_id).
NODE_AGGREGATES: tuple[tuple[catalog.Metric, str], ...] = (
    (GPU_UTIL, "avg"),
    (GPU_UTIL, "min"),
    (GPU_MEM_UTIL, "avg"),
    (GPU_MEM_USED, "sum"),
    (GPU_MEM_TOTAL, "sum"),
    (GPU_POWER, "sum"),
    (GPU_POWER_LIMIT, "sum"),
    (GPU_TEMP, "max"),
    (GPU_CLOCK, "min"),
    (GPU_PROCESS_MEM, "sum"),
    (PROCESS_CPU, "sum"),
    (PROCESS_RSS, "sum"),
)
RUN_AGGREGATES: tuple[tuple[catalog.Metric, str], ...] = (
    (STEP, "max"),
    (LAST_LOG, "max"),
    (LAST_LOG, "min"),
)
LENGTH_QUANTILES = {q: record_name("run", LENGTH_HIST, q) for q in ("p50", "p90", "p99")}


def rate_name(metric: catalog.Metric) -> str:
    """The recorded per-second rate of a throughput counter, per run."""
    return record_name("run", metric, "rate")


def aggregate_name(level: str, metric: catalog.Metric, op: str) -> str:
    """The recorded ``op`` (avg, min, max, sum) of a gauge per node or per run."""
    return record_name(level, metric, op)


@dataclass(frozen=True)
class Group:
    """One rule group: the recording rules and alerts of one area."""

    area: Area
    recordings: tuple[RecordingRule, ...]
    alerts: tuple[Alert, ...]

    @property
    def name(self) -> str:
        """The group name in the rule file."""
        return f"rlpulse-{self.area}"

    def as_dict(self) -> dict[str, Any]:
        """The group as it appears in a Prometheus rule file (evaluated at the global interval)."""
        return {
            "name": self.name,
            "rules": [r.rule() for r in self.recordings] + [a.rule(self.area) for a in self.alerts],
        }


# ---- recordings the dashboards read ------------------------------------------------------------


def _task_panels(q: Query) -> list[RecordingRule]:
    return [
        RecordingRule(name, q.run_quantile(float(name[-2:]) / 100, LENGTH_HIST))
        for name in LENGTH_QUANTILES.values()
    ]


def _system_panels(q: Query) -> list[RecordingRule]:
    """Per-run rates and shares, and the per-node and per-run pre-aggregations of the system
    dashboard (see NODE_AGGREGATES). A share or mean over a window without observations is
    left out (its 0/0 would be NaN)."""
    phase_sum = q.s(PHASE, suffix="_sum")
    out = [RecordingRule(rate_name(m), q.run_sum_rate(m)) for m in RATED_METRICS]
    out.append(
        RecordingRule(
            PHASE_SHARE,
            f"sum by ({RUN_BY}, phase) (rate({phase_sum}[{q.w.rate}])) / ignoring(phase) "
            f"group_left() (sum by ({RUN_BY}) (rate({phase_sum}[{q.w.rate}])) > 0)",
        )
    )
    out += [
        RecordingRule(aggregate_name("node", m, op), q.by(op, NODE_BY, m))
        for m, op in NODE_AGGREGATES
    ]
    out += [
        RecordingRule(aggregate_name("run", m, op), q.by(op, RUN_BY, m)) for m, op in RUN_AGGREGATES
    ]
    out += [
        RecordingRule(GPU_THROTTLED_COUNT, q.by("sum", f"{NODE_BY}, reason", GPU_THROTTLED)),
        RecordingRule(
            GPU_ECC_INCREASE,
            f"sum by ({NODE_BY}, error_type) (increase({q.s(GPU_ECC)}[{q.w.rate}]))",
        ),
        RecordingRule(
            PHASE_MEAN,
            f"sum by ({RUN_BY}, phase) ({q.rate(PHASE, suffix='_sum')}) / "
            f"(sum by ({RUN_BY}, phase) ({q.rate(PHASE, suffix='_count')}) > 0)",
        ),
        RecordingRule(COLLECTOR_UP_MIN, q.by("min", f"{RUN_BY}, collector", COLLECTOR_UP)),
        RecordingRule(
            COLLECTOR_DURATION_MAX, q.by("max", f"{RUN_BY}, collector", COLLECTOR_DURATION)
        ),
        RecordingRule(
            COLLECTOR_ERROR_RATE, f"sum by ({RUN_BY}, collector) ({q.rate(COLLECTOR_ERRORS)})"
        ),
    ]
    out += [
        RecordingRule(name, f"sum by ({RUN_BY}, tool) ({q.rate(m)})")
        for m, name in TOOL_RATES.items()
    ]
    out += [
        RecordingRule(name, q.run_quantile(p, GRADER_LATENCY))
        for (_, p), name in zip(QUANTILES, GRADER_QUANTILES.values(), strict=True)
    ]
    return out


_PANEL_RECORDINGS: dict[Area, Callable[[Query], list[RecordingRule]]] = {
    "rl": lambda q: [],
    "task": _task_panels,
    "system": _system_panels,
}


# ---- assembly ----------------------------------------------------------------------------------


def anchor(name: str) -> str:
    """The docs/runbooks.md anchor of an alert (its heading, lowercased)."""
    return name.lower()


# The run's metadata (rl_run_info, exported by rlpulse.start(metadata=...)) as the alert fires;
# owner is a free-form metadata key (``user`` where a trainer logs that instead). Read from the
# run's last day of rl_run_info, or from what the target-down latch kept of a dead run
# (``liveness.SERVED``): a page about a dead or ended run still names it. Label values go into
# the query quoted by ``template_query``.
_RUN = f"{{{template_matchers('job', 'run_id')}}}"
RUN_METADATA = (
    template_query(
        "max by (model, git_sha, framework, owner, user) "
        f"(last_over_time({RUN_INFO.name}{_RUN}[1d]) or {liveness.SERVED}{_RUN})",
        "$labels.job",
        "$labels.run_id",
        "$labels.job",
        "$labels.run_id",
    )
    + "{{ with first . }}model={{ .Labels.model }} git_sha={{ .Labels.git_sha }} "
    "framework={{ .Labels.framework }} owner={{ or .Labels.owner .Labels.user }}{{ end }}{{ end }}"
)


# Where the failure began, as the run exports it for every step alert (rlpulse.detect.lastgood):
# its last good step and the checkpoint to resume from ($labels holds no alertname: the name is
# written in; series is the alert's step-signal series, empty for most).
_OF_ALERT = f"{{{template_matchers('job', 'run_id', 'alertname', 'series')}}}"
_STEP = '{{ printf "%.0f" .Value }}'


def _first(expr: str, name: str) -> str:
    """Template opening on the first sample of ``expr`` (``%q``: job, run_id, alert name,
    series)."""
    args = ("$labels.job", "$labels.run_id", f'"{name}"', "$labels.series")
    return template_query(expr, *args) + "{{ with first . }}"


_END = "{{ end }}{{ end }}"


def last_good(name: str) -> str:
    """The ``last_good`` annotation of alert ``name``: its run's last good step and the
    checkpoint to resume from."""
    return (
        f"{_first(f'max({LAST_GOOD_STEP.name}{_OF_ALERT})', name)}last good step {_STEP}{_END}"
        f"{_first(RESUME_STEP.name + _OF_ALERT, name)}"
        f"; resume from {{{{ .Labels.checkpoint }}}} (step {_STEP}){_END}"
    )


def step_min(name: str) -> str:
    """The rollout link's lower step bound: the last good step where the run knows it."""
    return f"{_first(f'max({LAST_GOOD_STEP.name}{_OF_ALERT})', name)}&step_min={_STEP}{_END}"


# A run that reported episodes is a classic-RL run (its pages link the classic dashboard).
CLASSIC_RUN = template_query(
    f"last_over_time({EPISODES.name}{_RUN}[1d])", "$labels.job", "$labels.run_id"
)
# How the run ended, once it has (its last rl_run_outcome): an RL/task alert that resolves after
# it says the run's end, not a recovery, ended it (Alertmanager's templates read it).
RUN_END = (
    template_query(f"last_over_time({OUTCOME.name}{_RUN}[1d])", "$labels.job", "$labels.run_id")
    + "{{ with first . }}{{ .Labels.outcome }}{{ with .Labels.reason }}: {{ . }}{{ end }}"
    + "{{ end }}{{ end }}"
)


def queried(name: str) -> tuple[str, ...]:
    """Annotation parts of alert ``name`` that query the run's series (promtool scenarios
    expect them empty unless they export those series)."""
    return RUN_METADATA, last_good(name), step_min(name), RUN_END


def classic_or(uid: str) -> str:
    """The dashboard uid of a run: the classic-RL one for a run that reports episodes, else
    ``uid``."""
    return f"{CLASSIC_RUN}{panels.CLASSIC_UID}{{{{ else }}}}{uid}{{{{ end }}}}"


def owner_labels(area: Area, cfg: Config) -> dict[str, str]:
    """The labels that route an alert of ``area`` to its owner: its team, and the cluster."""
    r = cfg.routing
    return {"team": dict(r.teams)[area], **({"cluster": r.cluster} if r.cluster else {})}


def _annotate(alert: Alert, area: Area, cfg: Config) -> Alert:
    """The generic pass: owner labels; runbook, dashboard and (for training alerts) rollout
    links; the run's metadata."""
    notes = {**links(alert.name, area, cfg), "run_info": RUN_METADATA}
    if area != "system":
        notes["last_good"] = last_good(alert.name)
        notes["run_end"] = RUN_END
    return Alert(**{**alert.__dict__, "annotations": notes, "labels": owner_labels(area, cfg)})


# the rollouts that show an alert's failure first (the viewer's ``order`` or filter); other
# RL/task alerts open the lowest rewards
ROLLOUT_ORDER = {
    "RLRewardHacking": "order=best",
    "RLRewardCollapse": "order=worst",
    "RLResponseLengthExplosion": "order=longest",
    "RLResponseLengthDrift": "order=longest",
    "RLResponseLengthCollapse": "order=shortest",
    "RLTruncationHigh": "truncated=1",
    "RLNonFiniteLoss": "nonfinite=1",
    "RLGraderErrors": "order=errors",
}


def links(name: str, area: Area, cfg: Config) -> dict[str, str]:
    """The link annotations of alert ``name``: its runbook section, its dashboard on the run
    (and node) over the baseline window, and for RL/task alerts (and grader errors) the run's
    rollouts in the viewer from the last good step on, in the order that shows the failure
    (``ROLLOUT_ORDER``; ``rlpulse rollouts show`` prints the same and the link)."""
    links = cfg.links
    run = "{{ $labels.run_id | urlquery }}"
    uid = links.system_dashboard_uid if area == "system" else links.training_dashboard_uid
    if area != "system":
        uid = classic_or(uid)
    node = "{{ with $labels.node }}&var-node={{ . }}{{ end }}" if area == "system" else ""
    out = {
        "runbook_url": f"{links.runbook_url}#{anchor(name)}",
        # Alertmanager's templates add the time range around the alert's start (from/to)
        "dashboard_url": f"{links.grafana_url}/d/{uid}?var-run_id={run}{node}",
    }
    if area != "system" or name in ROLLOUT_ORDER:
        order = ROLLOUT_ORDER.get(name, "order=worst")
        out["rollouts_url"] = (
            f"{links.rollouts_url}/view?run={{{{ $labels.run_id | urlquery }}}}{step_min(name)}"
            f"&{order}"
            f"&limit={panels.WORST_ROLLOUTS}"
        )
    return out


def group(area: Area, cfg: Config) -> Group:
    """The rule group of ``area``: the dashboards' recordings, then each alert definition's
    recordings and rules (disabled alerts left out)."""
    q = Query(cfg)
    recordings = list(_PANEL_RECORDINGS[area](q))
    alerts: list[Alert] = []
    for d in alert_defs.DEFS[area]:
        knobs = getattr(cfg.alerts, d.key)
        recordings += d.recordings(q, knobs)
        alerts += (_annotate(al, area, cfg) for al in d.rules(q, knobs) if al.enabled)
    return Group(area, tuple(recordings), tuple(alerts))


def groups(cfg: Config) -> list[Group]:
    """Every rule group for ``cfg``."""
    return [group(area, cfg) for area in AREAS]


@functools.cache
def recorded_names() -> frozenset[str]:
    """Every recording rule's name (the names do not depend on the Config)."""
    return frozenset(r.record for g in groups(Config()) for r in g.recordings)


def all_alerts(cfg: Config) -> list[tuple[Area, Alert]]:
    """(area, alert) for every generated alert rule."""
    return [(g.area, al) for g in groups(cfg) for al in g.alerts]


def _header(area: Area) -> str:
    return header(
        alert_defs.SOURCES[area], "The dashboards' recording rules: rlpulse/stack/rules.py."
    )


def render(cfg: Config) -> dict[str, str]:
    """Relative path -> text of every rule file."""
    return {
        f"prometheus/rules/{g.area}.yml": dump({"groups": [g.as_dict()]}, _header(g.area))
        for g in groups(cfg)
    }
