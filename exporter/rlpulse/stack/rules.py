"""Prometheus recording and alert rules, built from the catalog and one Config.

Three groups, one per area (``rl``, ``task``, ``system``), each written to
``prometheus/rules/<area>.yml``. Recording rules come first in a group so the alerts of the same
evaluation see fresh values. Every alert gets ``severity`` and ``layer`` labels, a static
``summary``, a templated ``description`` and, in one generic pass (``_annotate``), its
``runbook_url`` (``docs/runbooks.md#<alertname lowercased>``) and ``dashboard_url``.

Most RL and task alerts read gauges a trainer sets from its own logged values (entropy, KL,
reward, lengths), smoothed over ``windows.recent`` and compared with the run's own earlier values,
so they also work when a trainer logs only every N steps and when a finished run's log is
replayed into Prometheus (``rlpulse replay``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rlpulse import catalog
from rlpulse.stack import alerts as alert_defs
from rlpulse.stack import config as cfgmod
from rlpulse.stack import panels
from rlpulse.stack.alerts.kit import Alert, Area, Recording, Severity
from rlpulse.stack.config import Config
from rlpulse.stack.output import dump, header
from rlpulse.stack.promql import record_name, regex_alternatives
from rlpulse.stack.query import NODE_BY, RUN_BY, Query

AREAS: tuple[Area, ...] = ("rl", "task", "system")
TARGET_BY = "job, instance, run_id, rank"

M = catalog.get
ENTROPY = M("rl_entropy")
KL_REF = M("rl_kl_reference")
APPROX_KL = M("rl_approx_kl")
CLIP = M("rl_clip_fraction_ratio")
NONFINITE = M("rl_nonfinite_values_total")
GRAD_NORM = M("rl_grad_norm")
VALUE_LOSS = M("rl_value_loss")
EXPLAINED_VAR = M("rl_explained_variance")
REWARD = M("rl_reward_mean")
ZERO_STD = M("rl_zero_std_groups_ratio")
IMPORTANCE = M("rl_importance_ratio_mean")
EVAL_SCORE = M("rl_eval_score")
LENGTH_MEAN = M("rl_response_length_mean_tokens")
LENGTH_HIST = M("rl_response_length_tokens")
TRUNCATION = M("rl_truncation_ratio")
FORMAT_OK = M("rl_format_compliance_ratio")
RUN_INFO = M("rl_run_info")
STEP = M("rl_step")
GPU_UTIL = M("rl_gpu_utilization_ratio")
GPU_MEM_UTIL = M("rl_gpu_memory_utilization_ratio")
GPU_POWER = M("rl_gpu_power_watts")
GPU_POWER_LIMIT = M("rl_gpu_power_limit_watts")
GPU_CLOCK = M("rl_gpu_sm_clock_hertz")
GPU_PROCESS_MEM = M("rl_gpu_process_memory_bytes")
PROCESS_CPU = M("rl_process_cpu_utilization_ratio")
PROCESS_RSS = M("rl_process_resident_memory_bytes")
LAST_LOG = M("rl_last_step_timestamp_seconds")
FINISHED = M("rl_run_finished_timestamp_seconds")
OUTCOME = M("rl_run_outcome")
GRADER_LATENCY = M("rl_grader_duration_seconds")
TOOL_CALLS = M("rl_tool_calls_total")
TOOL_ERRORS = M("rl_tool_errors_total")
COLLECTOR_DURATION = M("rlpulse_collector_duration_seconds")
GPU_MEM_USED = M("rl_gpu_memory_used_bytes")
GPU_MEM_TOTAL = M("rl_gpu_memory_total_bytes")
GPU_TEMP = M("rl_gpu_temperature_celsius")
GPU_THROTTLED = M("rl_gpu_throttled")
GPU_ECC = M("rl_gpu_ecc_errors_total")
ROLLOUT = M("rl_rollout_duration_seconds")
PHASE = M("rl_phase_duration_seconds")
GRADER_CALLS = M("rl_grader_calls_total")
GRADER_ERRORS = M("rl_grader_errors_total")
TRAIN_STEPS = M("rl_train_steps_total")
SAMPLES = M("rl_samples_total")
COMPLETION_TOKENS = M("rl_completion_tokens_total")
PROMPT_TOKENS = M("rl_prompt_tokens_total")
ENV_STEPS = M("rl_env_steps_total")
EPISODES = M("rl_episodes_total")
COLLECTOR_UP = M("rlpulse_collector_up")
COLLECTOR_ERRORS = M("rlpulse_collector_errors_total")
DROPPED = M("rlpulse_dropped_values_total")
OVERFLOW = M("rlpulse_label_overflow_total")

# Recorded series other modules (dashboards, replay) may query; names do not depend on Config.
THROUGHPUT_METRICS = (TRAIN_STEPS, SAMPLES, COMPLETION_TOKENS, PROMPT_TOKENS, ENV_STEPS, EPISODES)
RATED_METRICS = (*THROUGHPUT_METRICS, GRADER_CALLS, GRADER_ERRORS)
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
LENGTH_P90_DRIFT = record_name("run", LENGTH_HIST, "p90_drift_ratio")
PHASE_SHARE = record_name("run_phase", PHASE, "share")
GRADER_ERROR_RATIO = record_name("run", GRADER_ERRORS, "ratio")
GPU_MEMORY_RATIO = record_name("gpu", GPU_MEM_USED, "ratio")
ROLLOUT_QUANTILES = {q: record_name("run", ROLLOUT, q) for q, _ in QUANTILES}
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


# Alert names other modules refer to (Alertmanager inhibitions).
TARGET_DOWN = "RLTargetDown"
RUN_CRASHED = "RLRunCrashed"
TRAINING_STALLED = "RLTrainingStalled"
THROUGHPUT_DROP = "RLThroughputDrop"
GPU_IDLE = "RLGPUIdle"


def rate_name(metric: catalog.Metric) -> str:
    """The recorded per-second rate of a throughput counter, per run."""
    return record_name("run", metric, "rate")


def aggregate_name(level: str, metric: catalog.Metric, op: str) -> str:
    """The recorded ``op`` (avg, min, max, sum) of a gauge per node or per run."""
    return record_name(level, metric, op)


def rate_ratio_name(metric: catalog.Metric) -> str:
    """The recorded recent rate of a counter as a fraction of its earlier-window rate."""
    return record_name("run", metric, "rate_ratio_to_earlier")


@dataclass(frozen=True)
class Group:
    """One rule group: the recording rules and alerts of one area."""

    area: Area
    recordings: tuple[Recording, ...]
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


# ---- query builders -----------------------------------------------------------------------------


UNCORRECTED = 'error_type="uncorrected"'
CRASHED = 'outcome="crashed"'
_ID = "run {{ $labels.run_id }} (rank {{ $labels.rank }})"
_RUN = "run {{ $labels.run_id }}"
_GPU = "GPU {{ $labels.gpu }} of run {{ $labels.run_id }} on {{ $labels.instance }}"
# how descriptions print $value (Prometheus' template functions; ruletests.fill renders them)
_X = '{{ printf "%.3g" $value }}'  # a value near 1 (KL in nats, a ratio): 0.2, not 200m
_N = "{{ $value | humanize }}"  # a count or magnitude: 12.3k, not 1.23e+04
_PCT = "{{ $value | humanizePercentage }}"
_AGO = "{{ $value | humanizeDuration }}"


def _pct(ratio: float) -> str:
    """A threshold ratio as the descriptions print it (like humanizePercentage)."""
    return f"{ratio * 100:.4g}%"


def _tiered(
    name: str,
    t: cfgmod.Tiered,
    expr: Callable[[float], str],
    summary: str,
    desc: str,
    level_text: Callable[[float], str] = "{:g}".format,
    **kw: Any,
) -> list[Alert]:
    tiers: tuple[tuple[Severity, float], ...] = (("warning", t.warning), ("critical", t.critical))
    return [
        Alert.of(
            t, name, sev, expr(level), summary, desc.replace("$LEVEL", level_text(level)), **kw
        )
        for sev, level in tiers
    ]


def _declared(q: Query, area: Area) -> Iterator[Alert]:
    """The area's alerts declared in ``rlpulse.stack.alerts``."""
    for d in alert_defs.DEFS[area]:
        yield from d.rules(q, getattr(q.cfg.alerts, d.key))


def _declared_recordings(q: Query, area: Area) -> list[Recording]:
    return [r for d in alert_defs.DEFS[area] for r in d.recordings(q, getattr(q.cfg.alerts, d.key))]


# ---- rl ---------------------------------------------------------------------------------------


def _rl_recordings(q: Query) -> list[Recording]:
    return []


def _rl_alerts(q: Query) -> Iterator[Alert]:
    a = q.cfg.alerts
    yield from _declared(q, "rl")

    uk = a.update_kl_high
    yield Alert.of(
        uk,
        "RLUpdateKLHigh",
        "warning",
        f"{q.recent(APPROX_KL)} > {uk.threshold:g}",
        "Update-step KL is too high: each update moves the policy too far.",
        f"Mean approximate KL per update of {_ID} is {_X} nats (threshold {uk.threshold:g}).",
    )
    cf = a.clip_fraction_high
    yield Alert.of(
        cf,
        "RLClipFractionHigh",
        "warning",
        f"{q.recent(CLIP)} > {cf.threshold:g}",
        "A large fraction of probability ratios is clipped.",
        f"Clip fraction (bound {{{{ $labels.bound }}}}) of {_ID} is {_PCT} "
        f"(threshold {_pct(cf.threshold)}).",
    )
    nf = a.nonfinite_loss
    watched = tuple(M(n) for n in nf.metrics)
    gauges = [
        f"label_replace({q.s(m)} != {q.s(m)} or {q.s(m)} == +Inf or {q.s(m)} == -Inf, "
        f'"metric", "{m.name}", "", "")'
        for m in watched
        if m.type == "gauge"
    ]
    which = f'metric=~"{regex_alternatives(nf.metrics)}"'
    counter = f"increase({q.s(NONFINITE, which)}[{q.w.recent}]) > 0"
    yield Alert.of(
        nf,
        "RLNonFiniteLoss",
        "critical",
        " or ".join([counter, *gauges]),
        "NaN or Inf in a loss or gradient norm.",
        f"{{{{ $labels.metric }}}} of {_ID} is not finite (value or count {_N}): "
        "training has diverged or will.",
    )
    ev = a.explained_variance_negative
    yield Alert.of(
        ev,
        "RLExplainedVarianceNegative",
        "warning",
        f"{q.recent(EXPLAINED_VAR)} < {ev.threshold:g}",
        "The value function explains less than a constant would.",
        f"Explained variance of {_ID} is {_X} (threshold {ev.threshold:g}).",
    )
    ir = a.importance_ratio_drift
    yield Alert.of(
        ir,
        "RLImportanceRatioDrift",
        "warning",
        f"abs({q.recent(IMPORTANCE)} - 1) > {ir.max_deviation:g}",
        "Trainer and rollout engine disagree on token probabilities.",
        f"Mean importance ratio of {_ID} is {_X} away from 1 (threshold {ir.max_deviation:g}).",
    )


# ---- task -------------------------------------------------------------------------------------


def _task_recordings(q: Query) -> list[Recording]:
    out: list[Recording] = []
    out += [
        Recording(name, q.run_quantile(float(name[-2:]) / 100, LENGTH_HIST))
        for name in LENGTH_QUANTILES.values()
    ]
    out.append(
        Recording(
            LENGTH_P90_DRIFT,
            f"{q.run_quantile(0.9, LENGTH_HIST, q.w.recent)} / "
            f"{q.run_quantile(0.9, LENGTH_HIST, q.w.zscore, q.w.zscore)}",
        )
    )
    return out


def _task_alerts(q: Query) -> Iterator[Alert]:
    a = q.cfg.alerts
    yield from _declared(q, "task")
    ld = a.response_length_drift
    yield Alert.of(
        ld,
        "RLResponseLengthDrift",
        "warning",
        f"{LENGTH_P90_DRIFT} > {ld.ratio:g} or {LENGTH_P90_DRIFT} < {1 / ld.ratio:g}",
        "The response-length distribution shifted against its earlier window.",
        f"p90 response length of {_RUN} is {_X} times its p90 of {q.w.zscore} before "
        f"(threshold x{ld.ratio:g} either way).",
        scope="run",
    )


# ---- system -----------------------------------------------------------------------------------


def _system_recordings(q: Query) -> list[Recording]:
    out = [
        Recording(name, q.run_quantile(p, ROLLOUT))
        for (n, p), name in zip(QUANTILES, ROLLOUT_QUANTILES.values(), strict=True)
    ]
    out += [Recording(rate_name(m), q.run_sum_rate(m)) for m in RATED_METRICS]
    out += [
        Recording(
            rate_ratio_name(m),
            f"{q.run_sum_rate(m, q.w.recent)} / {q.run_sum_rate(m, q.w.zscore, q.w.recent)}",
        )
        for m in (TRAIN_STEPS, SAMPLES)
    ]
    phase_sum = q.s(PHASE, suffix="_sum")
    out += [
        Recording(
            PHASE_SHARE,
            f"sum by ({RUN_BY}, phase) (rate({phase_sum}[{q.w.rate}])) / ignoring(phase) "
            f"group_left sum by ({RUN_BY}) (rate({phase_sum}[{q.w.rate}]))",
        ),
        Recording(
            GRADER_ERROR_RATIO, f"{q.run_sum_rate(GRADER_ERRORS)} / {q.run_sum_rate(GRADER_CALLS)}"
        ),
        Recording(GPU_MEMORY_RATIO, f"{q.s(GPU_MEM_USED)} / {q.s(GPU_MEM_TOTAL)}"),
    ]
    return out + _scale_recordings(q) + _declared_recordings(q, "system")


def _scale_recordings(q: Query) -> list[Recording]:
    """Per-node and per-run pre-aggregations the dashboards read (see NODE_AGGREGATES)."""
    out = [
        Recording(aggregate_name("node", m, op), q.by(op, NODE_BY, m)) for m, op in NODE_AGGREGATES
    ]
    out += [
        Recording(aggregate_name("run", m, op), q.by(op, RUN_BY, m)) for m, op in RUN_AGGREGATES
    ]
    out += [
        Recording(GPU_THROTTLED_COUNT, q.by("sum", f"{NODE_BY}, reason", GPU_THROTTLED)),
        Recording(
            GPU_ECC_INCREASE,
            f"sum by ({NODE_BY}, error_type) (increase({q.s(GPU_ECC)}[{q.w.rate}]))",
        ),
        Recording(
            PHASE_MEAN,
            f"sum by ({RUN_BY}, phase) ({q.rate(PHASE, suffix='_sum')}) / "
            f"sum by ({RUN_BY}, phase) ({q.rate(PHASE, suffix='_count')})",
        ),
        Recording(COLLECTOR_UP_MIN, q.by("min", f"{RUN_BY}, collector", COLLECTOR_UP)),
        Recording(COLLECTOR_DURATION_MAX, q.by("max", f"{RUN_BY}, collector", COLLECTOR_DURATION)),
        Recording(
            COLLECTOR_ERROR_RATE, f"sum by ({RUN_BY}, collector) ({q.rate(COLLECTOR_ERRORS)})"
        ),
    ]
    out += [
        Recording(name, f"sum by ({RUN_BY}, tool) ({q.rate(m)})") for m, name in TOOL_RATES.items()
    ]
    out += [
        Recording(name, q.run_quantile(p, GRADER_LATENCY))
        for (_, p), name in zip(QUANTILES, GRADER_QUANTILES.values(), strict=True)
    ]
    return out


def _system_alerts(q: Query) -> Iterator[Alert]:
    a = q.cfg.alerts
    w = q.w

    td = a.target_down
    # when each target last served a run (its last scraped run_info sample)
    served = f"max_over_time(timestamp({q.s(RUN_INFO)})[{w.baseline}:{w.resolution}])"
    last_run = f"topk by (job, instance) (1, {served})"
    # the target's last scrape carried the end mark (finish() or a reported crash): the run
    # ended, however long its last scrape took to come. A later run on the same target pages.
    marked = f"max_over_time(timestamp({q.s(FINISHED)})[{w.baseline}:{w.resolution}])"
    finished = (
        f"max by (job, instance) ({marked}) >= on(job, instance) max by (job, instance) ({served})"
    )
    yield Alert.of(
        td,
        TARGET_DOWN,
        "critical",
        f"(({q.up()} == 0) + on(job, instance) group_left(run_id, rank) (time() - {last_run}))"
        f" unless on(job, instance) ({finished})",
        "A trainer exporter that was serving a run cannot be scraped.",
        "Prometheus cannot scrape {{ $labels.instance }} (job {{ $labels.job }}), which served "
        f"{_ID} until {_AGO} ago: the trainer died, hung hard or lost its network.",
    )
    rc = a.run_crashed
    yield Alert.of(
        rc,
        RUN_CRASHED,
        "critical",
        f"max_over_time({q.s(OUTCOME, CRASHED)}[{w.baseline}]) * on({TARGET_BY}) group_left() "
        f"(time() - max_over_time({q.s(FINISHED)}[{w.baseline}]))",
        "A run ended in an uncaught exception or a non-zero exit status.",
        f"{_ID} on {{{{ $labels.instance }}}} crashed {_AGO} ago: {{{{ $labels.reason }}}}.",
    )
    yield from _declared(q, "system")
    gi = a.gpu_idle
    yield Alert.of(
        gi,
        GPU_IDLE,
        "warning",
        f"{q.recent(GPU_UTIL)} < {gi.threshold:g}",
        "GPUs are idle while the run's exporter is alive.",
        f"{_GPU} averaged {_PCT} utilization over {w.recent} (threshold {_pct(gi.threshold)}).",
    )
    yield from _tiered(
        "RLGPUMemoryFull",
        a.gpu_memory_full,
        lambda lvl: f"{GPU_MEMORY_RATIO} > {lvl:g}",
        "GPU memory is nearly full.",
        f"{_GPU} uses {_PCT} of its memory (threshold $LEVEL).",
        _pct,
    )
    yield from _tiered(
        "RLGPUTemperatureHigh",
        a.gpu_temperature_high,
        lambda lvl: f"{q.s(GPU_TEMP)} > {lvl:g}",
        "A GPU is running hot.",
        f"{_GPU} is at {_N} °C (threshold $LEVEL °C).",
    )
    gt = a.gpu_throttling
    reasons = f'reason=~"{regex_alternatives(gt.reasons)}"'
    yield Alert.of(
        gt,
        "RLGPUThrottling",
        "warning",
        f"{q.recent(GPU_THROTTLED, reasons)} > {gt.min_fraction:g}",
        "GPU clocks are held down by a slowdown.",
        f"{_GPU} was throttled ({{{{ $labels.reason }}}}) {_PCT} of the last {w.recent}.",
    )
    ge = a.gpu_ecc_errors
    yield Alert.of(
        ge,
        "RLGPUECCErrors",
        "critical",
        f"increase({q.s(GPU_ECC, UNCORRECTED)}[{w.recent}]) > 0",
        "A GPU reported uncorrected memory errors.",
        f"{_GPU} reported {_N} uncorrected ECC errors in the last {w.recent}.",
    )
    tp = a.throughput_drop
    yield Alert.of(
        tp,
        THROUGHPUT_DROP,
        "warning",
        " or ".join(
            f'label_replace({rate_ratio_name(m)} < {tp.ratio:g}, "throughput", '
            f'"{m.family}", "", "")'
            for m in (TRAIN_STEPS, SAMPLES)
        ),
        "Training throughput fell against the run's earlier rate.",
        f"{{{{ $labels.throughput }}}} rate of {_RUN} is at {_PCT} of its rate over the earlier "
        f"{w.zscore} (threshold {_pct(tp.ratio)}).",
        scope="run",
    )
    rl = a.rollout_latency_tail
    yield Alert.of(
        rl,
        "RLRolloutLatencyTail",
        "warning",
        f"{ROLLOUT_QUANTILES['p99']} / {ROLLOUT_QUANTILES['p50']} > {rl.ratio:g}",
        "Rollout latency has a long tail: p99 is far above p50.",
        f"p99 rollout latency of {_RUN} is {_N} times its p50 (threshold {rl.ratio:g}).",
        scope="run",
    )
    yield from _tiered(
        "RLGraderErrors",
        a.grader_errors,
        lambda lvl: f"{GRADER_ERROR_RATIO} > {lvl:g}",
        "Grader / reward-model calls are failing.",
        f"{_PCT} of the grader calls of {_RUN} failed over {w.rate} (threshold $LEVEL).",
        _pct,
        scope="run",
    )
    ce = a.exporter_collector_errors
    yield Alert.of(
        ce,
        "RLExporterCollectorErrors",
        "warning",
        f"increase({q.s(COLLECTOR_ERRORS)}[{w.recent}]) > 0 or {q.s(COLLECTOR_UP)} == 0",
        "An rlpulse collector keeps failing.",
        f"The {{{{ $labels.collector }}}} collector of {_ID} on {{{{ $labels.instance }}}} "
        f"failed (errors in {w.recent}, or 0 if down: {_N}).",
    )
    dv = a.exporter_dropped_values
    yield Alert.of(
        dv,
        "RLExporterDroppedValues",
        "info",
        f"increase({q.s(DROPPED)}[{w.recent}]) > 0 or increase({q.s(OVERFLOW)}[{w.recent}]) > 0",
        "The exporter drops logged values or folds labels into __overflow__.",
        f"The exporter of {_ID} dropped {_N} values in {w.recent} "
        "(reason {{ $labels.reason }}{{ $labels.label }}).",
    )


# ---- assembly ----------------------------------------------------------------------------------

_BUILDERS: dict[
    Area, tuple[Callable[[Query], list[Recording]], Callable[[Query], Iterator[Alert]]]
] = {
    "rl": (_rl_recordings, _rl_alerts),
    "task": (_task_recordings, _task_alerts),
    "system": (_system_recordings, _system_alerts),
}


def anchor(name: str) -> str:
    """The docs/runbooks.md anchor of an alert (its heading, lowercased)."""
    return name.lower()


def _annotate(alert: Alert, area: Area, cfg: Config) -> Alert:
    """The generic pass: runbook, dashboard and (for training alerts) rollout links."""
    return Alert(**{**alert.__dict__, "annotations": links(alert.name, area, cfg)})


def links(name: str, area: Area, cfg: Config) -> dict[str, str]:
    """The link annotations of alert ``name``: its runbook section, its dashboard on the run
    (and node) over the baseline window, and for RL/task alerts the run's worst rollouts in the
    rollout API (what ``rlpulse rollouts show --run RUN --worst 20`` prints)."""
    links = cfg.links
    run = "{{ $labels.run_id }}"
    uid = links.system_dashboard_uid if area == "system" else links.training_dashboard_uid
    node = "{{ with $labels.node }}&var-node={{ . }}{{ end }}" if area == "system" else ""
    out = {
        "runbook_url": f"{links.runbook_url}#{anchor(name)}",
        "dashboard_url": f"{links.grafana_url}/d/{uid}?var-run_id={run}{node}"
        f"&from=now-{cfg.windows.baseline}&to=now",
    }
    if area != "system":
        api = panels.rollout_api(cfg.scrape.static_targets)
        out["rollouts_url"] = f"{api}/rollouts?run={run}&worst={panels.WORST_ROLLOUTS}"
    return out


def groups(cfg: Config) -> list[Group]:
    """Every rule group for ``cfg``; disabled alerts are left out."""
    q = Query(cfg)
    out = []
    for area in AREAS:
        recordings, alerts = _BUILDERS[area]
        kept = tuple(_annotate(al, area, cfg) for al in alerts(q) if al.enabled)
        out.append(Group(area, tuple(recordings(q)), kept))
    return out


@functools.cache
def recorded_names() -> frozenset[str]:
    """Every recording rule's name (the names do not depend on the Config)."""
    return frozenset(r.record for g in groups(Config()) for r in g.recordings)


def all_alerts(cfg: Config) -> list[tuple[Area, Alert]]:
    """(area, alert) for every generated alert rule."""
    return [(g.area, al) for g in groups(cfg) for al in g.alerts]


HEADER = header("rules.py")


def render(cfg: Config) -> dict[str, str]:
    """Relative path -> text of every rule file."""
    return {
        f"prometheus/rules/{g.area}.yml": dump({"groups": [g.as_dict()]}, HEADER)
        for g in groups(cfg)
    }
