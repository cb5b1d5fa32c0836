"""System alerts on the run's pipeline in wall time: throughput, rollout latency, the grader and
the exporter itself, with the healthy run no system alert fires on."""

from __future__ import annotations

from typing import Any

from rlpulse import catalog
from rlpulse.stack import panels
from rlpulse.stack.alerts import gpu, kit, liveness
from rlpulse.stack.alerts.inputs import HEALTHY_SAMPLES, RUN, TARGET, const, counter, series
from rlpulse.stack.alerts.kit import HUMANIZE, ID, PERCENT, RUN_TEXT, pct
from rlpulse.stack.metrics import (
    COLLECTOR_ERRORS,
    COLLECTOR_UP,
    DROPPED,
    GRADER_CALLS,
    GRADER_ERRORS,
    OVERFLOW,
    ROLLOUT,
    SAMPLES,
    TRAIN_STEPS,
)
from rlpulse.stack.panels import SYSTEM, TRAINING, see
from rlpulse.stack.promql import record_name
from rlpulse.stack.query import Query

QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
ROLLOUT_QUANTILES = {q: record_name("run", ROLLOUT, q) for q, _ in QUANTILES}
GRADER_ERROR_RATIO = record_name("run", GRADER_ERRORS, "ratio")
THROUGHPUT_DROP = "RLThroughputDrop"
LATENCY_TAIL = "RLRolloutLatencyTail"
GRADER = "RLGraderErrors"
COLLECTOR = "RLExporterCollectorErrors"
DROPPED_VALUES = "RLExporterDroppedValues"
_GPU_COLLECTOR = {**TARGET, "collector": "gpu"}
_NON_NUMERIC = {**TARGET, "reason": "non_numeric"}


def rate_ratio_name(metric: catalog.Metric) -> str:
    """The recorded recent rate of a counter as a fraction of its earlier-window rate."""
    return record_name("run", metric, "rate_ratio_to_earlier")


def _rate_ratios(q: Query, k: Any) -> list[kit.RecordingRule]:
    return [
        kit.RecordingRule(
            rate_ratio_name(m),
            f"{q.run_sum_rate(m, q.w.recent)} / {q.run_sum_rate(m, q.w.zscore, q.w.recent)}",
        )
        for m in (TRAIN_STEPS, SAMPLES)
    ]


def _rollout_quantiles(q: Query, k: Any) -> list[kit.RecordingRule]:
    return [
        kit.RecordingRule(name, q.run_quantile(p, ROLLOUT))
        for (_, p), name in zip(QUANTILES, ROLLOUT_QUANTILES.values(), strict=True)
    ]


def _grader_ratio(q: Query, k: Any) -> list[kit.RecordingRule]:
    # no calls in the window: no ratio (not 0/0 = NaN)
    ratio = f"{q.run_sum_rate(GRADER_ERRORS)} / ({q.run_sum_rate(GRADER_CALLS)} > 0)"
    return [kit.RecordingRule(GRADER_ERROR_RATIO, ratio)]


_LATENCY = {
    "0.5": const(0, 40),
    "1": counter((97, 40)),
    "60": counter((97, 40)),
    "120": counter((100, 40)),
    "+Inf": counter((100, 40)),
}


def healthy() -> kit.Scenario:
    """A healthy run no system alert fires on (liveness and GPUs included)."""
    n = HEALTHY_SAMPLES
    hist = {
        "0.5": const(0, n),
        "1": counter((90, n)),
        "2.5": counter((100, n)),
        "+Inf": counter((100, n)),
    }
    return kit.Scenario(
        "Healthy run, 8 hours: up, stepping, GPUs busy at 85% and 70 C with power capping, "
        "corrected ECC errors only, steady throughput, p99/p50 latency 3, 1% grader errors. A "
        "second static target that never served a run is down all along: not paged.",
        (
            *liveness.healthy_inputs(n),
            *gpu.healthy_inputs(n),
            (series(TRAIN_STEPS), counter((1, n))),
            (series(SAMPLES), counter((64, n))),
            *((series(ROLLOUT, {**TARGET, "le": le}, "_bucket"), v) for le, v in hist.items()),
            (series(GRADER_CALLS), counter((100, n))),
            (series(GRADER_ERRORS), counter((1, n))),
            (series(COLLECTOR_UP, _GPU_COLLECTOR), const(1, n)),
            (series(COLLECTOR_ERRORS, _GPU_COLLECTOR), const(0, n)),
            (series(DROPPED, _NON_NUMERIC), const(0, n)),
        ),
    )


DEFS: tuple[kit.AlertDef, ...] = (
    kit.ThresholdAlert(
        name=THROUGHPUT_DROP,
        doc="Training throughput fell against the run's earlier window.",
        settings={
            "for_": "15m",
            "ratio": kit.Knob(0.5, "Fire below this fraction of the earlier rate."),
        },
        severity="warning",
        records=_rate_ratios,
        expr=lambda q, k: " or ".join(
            f'label_replace({rate_ratio_name(m)} < {k.ratio:g}, "throughput", "{m.family}", "", "")'
            for m in (TRAIN_STEPS, SAMPLES)
        ),
        summary="Training throughput fell against the run's earlier rate.",
        description=lambda q, k: (
            f"{{{{ $labels.throughput }}}} rate of {RUN_TEXT} is at {PERCENT} of its rate over "
            f"the earlier {q.w.zscore} (threshold {pct(k.ratio)})."
        ),
        scope="run",
        runbook=kit.Runbook(
            "Training steps or samples per second fell well below the run's rate over the "
            "earlier window.",
            panels.see_in(
                (TRAINING, panels.SAMPLES_RATE, panels.STEPS_RATE, panels.PHASE_SHARE),
                (SYSTEM, panels.PHASE_BREAKDOWN),
            ),
            (
                "Find the phase whose share grew; check GPU throttling, a slow grader, "
                "longer responses (RLResponseLengthDrift), a straggler rank.",
            ),
        ),
        tests=(
            kit.Scenario(
                "Throughput drop: 10 steps a minute, 2 a minute from 90m. At 115m the last 10m "
                "rate (20 steps) against the hour before ([45m, 105m]: 450 + 30 steps) is 0.25.",
                ((series(TRAIN_STEPS), counter((10, 91), (2, 40))),),
                (
                    kit.Check(THROUGHPUT_DROP, "100m"),
                    kit.Check(
                        THROUGHPUT_DROP,
                        "115m",
                        (kit.Expect("warning", {**RUN, "throughput": TRAIN_STEPS.family}, 0.25),),
                    ),
                ),
            ),
        ),
    ),
    kit.ThresholdAlert(
        name=LATENCY_TAIL,
        doc="Rollout-latency long tail: p99 far above p50.",
        settings={
            "for_": "15m",
            "ratio": kit.Knob(10.0, "Fire when p99 / p50 is above this."),
        },
        severity="warning",
        records=_rollout_quantiles,
        expr=lambda q, k: f"{ROLLOUT_QUANTILES['p99']} / {ROLLOUT_QUANTILES['p50']} > {k.ratio:g}",
        summary="Rollout latency has a long tail: p99 is far above p50.",
        description=lambda q, k: (
            f"p99 rollout latency of {RUN_TEXT} is {HUMANIZE} times its p50 "
            f"(threshold {k.ratio:g})."
        ),
        scope="run",
        runbook=kit.Runbook(
            "The p99 rollout latency is far above p50: a few very slow generations or "
            "episodes hold up every batch (synchronous RL waits for the slowest).",
            see(SYSTEM, panels.ROLLOUT_HEATMAP, panels.ROLLOUT_QUANTILES),
            (
                "Cap generation length or time; use partial rollouts / asynchronous generation.",
                "Open an exemplar to find the slow rollout and its prompt.",
            ),
        ),
        tests=(
            kit.Scenario(
                "Rollout-latency tail: of 100 rollouts a minute 97 take up to 1 s and 3 take "
                "1-2 min. p50 = 0.5 + 0.5 * 50/97 = 0.758 s, p99 = 60 + 60 * 2/3 = 100 s: 132 "
                "times p50.",
                tuple(
                    (series(ROLLOUT, {**TARGET, "le": le}, "_bucket"), v)
                    for le, v in _LATENCY.items()
                ),
                (
                    kit.Check(
                        LATENCY_TAIL,
                        "30m",
                        (kit.Expect("warning", RUN, 100 / (0.5 + 0.25 * 100 / 97)),),
                    ),
                ),
            ),
        ),
    ),
    kit.ThresholdAlert(
        name=GRADER,
        doc="Grader / reward-model calls failing.",
        settings=kit.tiers(0.05, 0.5, "error fraction"),
        severity="tiered",
        records=_grader_ratio,
        expr=f"{GRADER_ERROR_RATIO} > $LEVEL",
        summary="Grader / reward-model calls are failing.",
        description=lambda q, k: (
            f"{PERCENT} of the grader calls of {RUN_TEXT} failed over {q.w.rate} "
            "(threshold $LEVEL)."
        ),
        level_text=pct,
        scope="run",
        runbook=kit.Runbook(
            "A large fraction of grader / reward-model calls fail; failed calls usually "
            "score 0 and corrupt the reward signal.",
            see(SYSTEM, panels.GRADER_CALLS, panels.GRADER_LATENCY),
            (
                "Check the grader service (rate limits, timeouts, crashes) and its version.",
                "Pause training when critical: the reward is no longer meaningful.",
            ),
        ),
        tests=(
            kit.Scenario(
                "Grader errors: 100 calls a minute; 10 fail from 10m (0.1, warning), 60 from 40m "
                "(0.6, critical).",
                (
                    (series(GRADER_CALLS), counter((100, 70))),
                    (series(GRADER_ERRORS), counter((0, 11), (10, 30), (60, 29))),
                ),
                kit.tiered_checks(GRADER, RUN, ("30m", 0.1), ("60m", 0.6)),
            ),
        ),
    ),
    kit.ThresholdAlert(
        name=COLLECTOR,
        doc="A GPU/host collector of the exporter failing.",
        severity="warning",
        expr=lambda q, k: (
            f"increase({q.s(COLLECTOR_ERRORS)}[{q.w.recent}]) > 0 or {q.s(COLLECTOR_UP)} == 0"
        ),
        summary="An rlpulse collector keeps failing.",
        description=lambda q, k: (
            f"The {{{{ $labels.collector }}}} collector of {ID} on {{{{ $labels.instance }}}} "
            f"failed (errors in {q.w.recent}, or 0 if down: {HUMANIZE})."
        ),
        runbook=kit.Runbook(
            "One of the exporter's collectors (GPU via NVML, host via psutil) keeps failing "
            "or timing out; its panels and alerts go blind.",
            see(SYSTEM, panels.COLLECTORS, panels.EXPORTER_ERRORS),
            (
                "Check the trainer log for the rlpulse collector message; check the NVIDIA "
                "driver (nvidia-smi) on that node.",
            ),
        ),
        tests=(
            kit.Scenario(
                "Collector failing: the GPU collector goes down at 10m and its error count grows "
                "1 a minute: 10 errors in the 10m before 30m.",
                (
                    (series(COLLECTOR_UP, _GPU_COLLECTOR), f"{const(1, 10)} {const(0, 30)}"),
                    (series(COLLECTOR_ERRORS, _GPU_COLLECTOR), counter((0, 11), (1, 29))),
                ),
                (kit.Check(COLLECTOR, "30m", (kit.Expect("warning", _GPU_COLLECTOR, 10),)),),
            ),
        ),
    ),
    kit.ThresholdAlert(
        name=DROPPED_VALUES,
        doc="The exporter drops logged values or folds labels into __overflow__.",
        settings={"for_": "15m"},
        severity="info",
        expr=lambda q, k: (
            f"increase({q.s(DROPPED)}[{q.w.recent}]) > 0 "
            f"or increase({q.s(OVERFLOW)}[{q.w.recent}]) > 0"
        ),
        summary="The exporter drops logged values or folds labels into __overflow__.",
        description=lambda q, k: (
            f"The exporter of {ID} dropped {HUMANIZE} values in {q.w.recent} "
            "(reason {{ $labels.reason }}{{ $labels.label }})."
        ),
        runbook=kit.Runbook(
            "The exporter dropped logged values (non-numeric, None, …) or folded label "
            "values into __overflow__ at the cardinality cap. Informational: some series "
            "are incomplete.",
            see(SYSTEM, panels.EXPORTER_ERRORS),
            (
                "Look at the reason/label; log numbers only, or raise label_cap if the "
                "values are legitimately many.",
            ),
        ),
        tests=(
            kit.Scenario(
                "Dropped values: the trainer logs a string every minute; 10 dropped in 10m.",
                ((series(DROPPED, _NON_NUMERIC), counter((1, 40))),),
                (kit.Check(DROPPED_VALUES, "30m", (kit.Expect("info", _NON_NUMERIC, 10),)),),
            ),
        ),
    ),
)
