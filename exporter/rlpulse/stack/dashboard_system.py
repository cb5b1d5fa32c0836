"""The RL system dashboard: GPUs, host, process, rollouts, phases, grader, tools, exporter health.

Every trainer process reads all GPUs and the whole host it runs on, so machine-wide series are
joined to ``rl_run_info``'s ``host`` label and de-duplicated per host (and GPU).
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import heatmap, timeseries

from rlpulse.stack.grafana_common import (
    Query,
    Row,
    Selector,
    alerts_annotation,
    assemble,
    datasource_variable,
    graph,
    label_variable,
    latency_heatmap,
    new_dashboard,
    right_axis,
    stacked_percent,
    unit_of,
)

SEL = Selector(("job", "run_id", "rank"))
GPU_SEL = Selector(("job", "run_id", "rank", "gpu"))
RANK = "{{run_id}}/{{rank}}"
GPU = "{{host}} gpu{{gpu}}"
PER_SECOND = "suffix:/s"
_TARGET = "job, instance, run_id, rank"  # the labels that identify one exporter


def per_host(name: str, selector: Selector = SEL, by: tuple[str, ...] = ()) -> str:
    """A machine-wide catalog gauge, one series per host (and ``by`` labels), ranks folded."""
    labels = ", ".join(("host", *by))
    info = SEL("rl_run_info")
    return f"max by ({labels}) ({selector(name)} * on ({_TARGET}) group_left (host) {info})"


def per_gpu(name: str) -> str:
    """A GPU gauge, one series per physical GPU (host, index)."""
    return per_host(name, GPU_SEL, ("gpu",))


# ---- GPUs ------------------------------------------------------------------------------------


def gpu_utilization() -> timeseries.Panel:
    panel = graph(
        "GPU utilization",
        unit_of("rl_gpu_utilization_ratio"),
        "Busy fraction of each GPU (compute) and of its memory controller (dashed). Low while "
        "the run is alive means the GPUs wait on rollouts, the grader or data.",
        [
            Query(per_gpu("rl_gpu_utilization_ratio"), GPU),
            Query(per_gpu("rl_gpu_memory_utilization_ratio"), GPU + " mem"),
        ],
        span=8,
    )
    return panel.min(0).max(1)


def gpu_memory() -> timeseries.Panel:
    return graph(
        "GPU memory used",
        unit_of("rl_gpu_memory_used_bytes"),
        "Framebuffer memory in use against the installed total; near-full precedes OOM.",
        [
            Query(per_gpu("rl_gpu_memory_used_bytes"), GPU + " used"),
            Query(per_gpu("rl_gpu_memory_total_bytes"), GPU + " total"),
        ],
        span=8,
    )


def gpu_power() -> timeseries.Panel:
    return graph(
        "GPU power",
        unit_of("rl_gpu_power_watts"),
        "Board power draw and the enforced power limit.",
        [
            Query(per_gpu("rl_gpu_power_watts"), GPU),
            Query(per_gpu("rl_gpu_power_limit_watts"), GPU + " limit"),
        ],
        span=8,
    )


def gpu_temperature() -> timeseries.Panel:
    return graph(
        "GPU temperature",
        unit_of("rl_gpu_temperature_celsius"),
        "Core temperature per GPU.",
        [Query(per_gpu("rl_gpu_temperature_celsius"), GPU)],
        span=8,
    )


def gpu_clock() -> timeseries.Panel:
    return graph(
        "GPU SM clock",
        unit_of("rl_gpu_sm_clock_hertz"),
        "Streaming-multiprocessor clock: a drop under load is throttling.",
        [Query(per_gpu("rl_gpu_sm_clock_hertz"), GPU)],
        span=8,
    )


def gpu_throttling_and_errors() -> timeseries.Panel:
    errors = (
        "sum by (host, gpu, error_type) (increase("
        f"{GPU_SEL('rl_gpu_ecc_errors_total')}[$__rate_interval])"
        f" * on ({_TARGET}) group_left (host) {SEL('rl_run_info')})"
    )
    panel = graph(
        "GPU throttling and ECC errors",
        unit_of("rl_gpu_throttled"),
        "1 while a GPU's clocks are held down (by reason), and new volatile ECC errors (right).",
        [
            Query(per_host("rl_gpu_throttled", GPU_SEL, ("gpu", "reason")), GPU + " {{reason}}"),
            Query(errors, GPU + " ECC {{error_type}}"),
        ],
        span=8,
    )
    return right_axis(panel, 1, "short")


# ---- host and process ------------------------------------------------------------------------


def host_cpu() -> timeseries.Panel:
    panel = graph(
        "CPU",
        unit_of("rl_host_cpu_utilization_ratio"),
        "Host CPU busy fraction (left) and each trainer process's CPU use in cores (right).",
        [
            Query(per_host("rl_host_cpu_utilization_ratio"), "{{host}}"),
            Query(f"max by (run_id, rank) ({SEL('rl_process_cpu_utilization_ratio')})", RANK),
        ],
    )
    return right_axis(panel, 1, "none")


def host_memory() -> timeseries.Panel:
    return graph(
        "Memory",
        unit_of("rl_host_memory_used_bytes"),
        "Host memory used and installed, each trainer process's resident set and the GPU "
        "memory it holds.",
        [
            Query(per_host("rl_host_memory_used_bytes"), "{{host}} used"),
            Query(per_host("rl_host_memory_total_bytes"), "{{host}} total"),
            Query(
                f"max by (run_id, rank) ({SEL('rl_process_resident_memory_bytes')})", RANK + " RSS"
            ),
            Query(f"sum by (run_id, rank) ({SEL('rl_gpu_process_memory_bytes')})", RANK + " GPU"),
        ],
    )


# ---- rollouts and phases ---------------------------------------------------------------------

_ROLLOUT = "rl_rollout_duration_seconds"


def rollout_heatmap() -> heatmap.Panel:
    return latency_heatmap(
        "Rollout latency distribution",
        unit_of(_ROLLOUT),
        "Rollouts per latency bucket over time; exemplars mark single rollouts (rollout_id).",
        f"sum by (le) ({SEL.rate(_ROLLOUT, '_bucket')})",
    )


def rollout_quantiles() -> timeseries.Panel:
    return graph(
        "Rollout latency quantiles",
        unit_of(_ROLLOUT),
        "p50, p95 and p99 rollout latency per run: p99 far above p50 is a long tail (stragglers "
        "hold the whole batch).",
        [
            Query(
                SEL.quantile(q, _ROLLOUT, ("run_id",)),
                f"p{round(q * 100)} · {{{{run_id}}}}",
                exemplar=True,
            )
            for q in (0.5, 0.95, 0.99)
        ],
    )


def phase_breakdown() -> timeseries.Panel:
    return stacked_percent(
        graph(
            "Phase-time breakdown",
            "percentunit",
            "Share of wall time per phase (rollout, reward, ref, update, sync, eval, checkpoint).",
            [
                Query(
                    f"sum by (phase) ({SEL.rate('rl_phase_duration_seconds', '_sum')})",
                    "{{phase}}",
                )
            ],
        )
    )


def phase_durations() -> timeseries.Panel:
    return graph(
        "Mean phase duration",
        unit_of("rl_phase_duration_seconds"),
        "Mean wall time of one pass through each phase.",
        [Query(SEL.mean("rl_phase_duration_seconds", ("phase",)), "{{phase}}")],
    )


# ---- grader and tools ------------------------------------------------------------------------


def grader_latency() -> timeseries.Panel:
    name = "rl_grader_duration_seconds"
    return graph(
        "Grader latency",
        unit_of(name),
        "p50, p95 and p99 latency of grader / reward-model calls.",
        [
            Query(SEL.quantile(q, name, ("run_id",)), f"p{round(q * 100)} · {{{{run_id}}}}")
            for q in (0.5, 0.95, 0.99)
        ],
        span=8,
    )


def grader_calls() -> timeseries.Panel:
    calls = f"sum by (run_id) ({SEL.rate('rl_grader_calls_total')})"
    errors = f"sum by (run_id) ({SEL.rate('rl_grader_errors_total')})"
    panel = graph(
        "Grader calls and errors",
        PER_SECOND,
        "Grader calls and failures per second (left) and the error ratio (right).",
        [
            Query(calls, "calls · {{run_id}}"),
            Query(errors, "errors · {{run_id}}"),
            Query(f"{errors} / {calls}", "error ratio · {{run_id}}"),
        ],
        span=8,
    )
    return right_axis(panel, 2, "percentunit")


def tool_calls() -> timeseries.Panel:
    calls = f"sum by (run_id, tool) ({SEL.rate('rl_tool_calls_total')})"
    errors = f"sum by (run_id, tool) ({SEL.rate('rl_tool_errors_total')})"
    panel = graph(
        "Tool calls and errors",
        PER_SECOND,
        "Tool calls per second by tool (left) and each tool's error ratio (right).",
        [
            Query(calls, "{{tool}} · {{run_id}}"),
            Query(f"{errors} / {calls}", "{{tool}} errors · {{run_id}}"),
        ],
        span=8,
    )
    return right_axis(panel, 1, "percentunit")


# ---- exporter health -------------------------------------------------------------------------


def collectors() -> timeseries.Panel:
    panel = graph(
        "Collectors",
        unit_of("rlpulse_collector_up"),
        "1 while each collector's last reading succeeded (left) and how long it took (right).",
        [
            Query(f"min by (collector) ({SEL('rlpulse_collector_up')})", "{{collector}} up"),
            Query(
                f"max by (collector) ({SEL('rlpulse_collector_duration_seconds')})",
                "{{collector}} duration",
            ),
        ],
        span=8,
    )
    return right_axis(panel, 1, unit_of("rlpulse_collector_duration_seconds"))


def exporter_errors() -> timeseries.Panel:
    return graph(
        "Exporter errors",
        PER_SECOND,
        "Collector failures, dropped values (by reason) and label-cap overflows per second: "
        "anything non-zero means some data is not on these dashboards.",
        [
            Query(
                f"sum by (collector) ({SEL.rate('rlpulse_collector_errors_total')})",
                "collector {{collector}}",
            ),
            Query(
                f"sum by (reason) ({SEL.rate('rlpulse_dropped_values_total')})",
                "dropped {{reason}}",
            ),
            Query(
                f"sum by (label) ({SEL.rate('rlpulse_label_overflow_total')})",
                "overflow {{label}}",
            ),
        ],
        span=8,
    )


def unmapped_keys() -> timeseries.Panel:
    return graph(
        "Unmapped logged keys",
        "short",
        "Logged keys no key map knows, kept as rl_unmapped_metric{key}: candidates for a key "
        "map entry.",
        [Query(f"count by (run_id) ({SEL('rl_unmapped_metric')})", "{{run_id}}")],
        span=8,
    )


def build(uid: str) -> dict[str, Any]:
    """The RL system dashboard as Grafana JSON."""
    dashboard = (
        new_dashboard(
            uid,
            "rlpulse · RL system",
            "GPUs, host, rollout latency, phase times, grader, tools and exporter health.",
            ["rl", "system"],
        )
        .with_variable(datasource_variable())
        .with_variable(label_variable("job", "Job", "rl_run_info", Selector(())))
        .with_variable(label_variable("run_id", "Run", "rl_run_info", Selector(("job",))))
        .with_variable(label_variable("rank", "Rank", "rl_run_info", Selector(("job", "run_id"))))
        .with_variable(label_variable("gpu", "GPU", "rl_gpu_utilization_ratio", SEL))
        .annotation(alerts_annotation(SEL))
    )
    rows = [
        Row(
            "GPUs",
            [gpu_utilization(), gpu_memory(), gpu_power()]
            + [gpu_temperature(), gpu_clock(), gpu_throttling_and_errors()],
        ),
        Row("Host and process", [host_cpu(), host_memory()]),
        Row(
            "Rollouts and phases",
            [rollout_heatmap(), rollout_quantiles(), phase_breakdown(), phase_durations()],
        ),
        Row("Grader and tools", [grader_latency(), grader_calls(), tool_calls()]),
        Row("Exporter health", [collectors(), exporter_errors(), unmapped_keys()]),
    ]
    return assemble(dashboard, rows)
