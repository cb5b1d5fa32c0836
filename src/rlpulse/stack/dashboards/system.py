"""The RL system dashboard: GPUs, host, process, rollouts, phases, grader, tools, exporter health.

Node-level readings (GPUs, host) come from each node's local rank 0 and carry its ``node`` label.
Panels that would read one series per rank or per GPU read the per-node and per-run recording
rules of rlpulse.stack.rules instead, so they stay fast at 1,024 ranks x 8 GPUs
(docs/scaling.md); the per-board panel and the rollout heatmap (its exemplars live on the raw
buckets) read raw series, narrowed by the ``node`` and ``rank`` variables.
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import heatmap, timeseries

from rlpulse import catalog
from rlpulse.stack import panels as t
from rlpulse.stack import rules
from rlpulse.stack.config import Config
from rlpulse.stack.dashboards.common import (
    Recorded,
    Row,
    Selector,
    Target,
    alert_levels,
    assemble,
    graph,
    label_variable,
    latency_heatmap,
    new_dashboard,
    right_axis,
    stacked_percent,
    threshold_lines,
    unit_of,
    zero_when_absent,
)
from rlpulse.stack.metrics import GRADER_CALLS, GRADER_ERRORS, TOOL_CALLS, TOOL_ERRORS

SEL = Selector(("job", "run_id", "rank"))
NODE_SEL = Selector(("job", "run_id", "node"))
GPU_SEL = Selector(("job", "run_id", "node", "gpu"))
GPU_REC = Recorded(("job", "run_id", "node", "gpu"))
RUN_REC = Recorded(("job", "run_id"))
NODE_REC = Recorded(("job", "run_id", "node"))
RUN = "{{run_id}}"
NODE = "{{node}}"
PER_SECOND = "suffix:/s"


def node_agg(name: str, op: str) -> str:
    """A node's recorded ``op`` (avg, min, max, sum) over its GPUs or ranks."""
    return NODE_REC(rules.aggregate_name("node", catalog.get(name), op))


def per_node(name: str) -> str:
    """A node-level reading (local rank 0's), one series per node."""
    return f"max by (node) ({NODE_SEL(name)})"


# ---- GPUs ------------------------------------------------------------------------------------


def gpu_utilization() -> timeseries.Panel:
    panel = graph(
        t.GPU_UTILIZATION,
        unit_of("rl_gpu_utilization_ratio"),
        "Busy fraction of each node's GPUs: mean and least busy board, and the mean "
        "memory-controller load. Low while the run is alive means the GPUs wait on rollouts, the "
        "grader or data; a low minimum is one stuck or starved board.",
        [
            Target(node_agg("rl_gpu_utilization_ratio", "avg"), NODE + " mean"),
            Target(node_agg("rl_gpu_utilization_ratio", "min"), NODE + " min"),
            Target(node_agg("rl_gpu_memory_utilization_ratio", "avg"), NODE + " mem"),
        ],
        span=8,
    )
    return panel.min(0).max(1)


def gpu_memory() -> timeseries.Panel:
    return graph(
        t.GPU_MEMORY,
        unit_of("rl_gpu_memory_used_bytes"),
        "Framebuffer memory in use on each node's GPUs against the installed total, and the "
        "part the trainer processes hold; near-full precedes OOM (per board: "
        f"{t.GPU_MEMORY_BOARDS}).",
        [
            Target(node_agg("rl_gpu_memory_used_bytes", "sum"), NODE + " used"),
            Target(node_agg("rl_gpu_memory_total_bytes", "sum"), NODE + " total"),
            Target(node_agg("rl_gpu_process_memory_bytes", "sum"), NODE + " trainers"),
        ],
        span=8,
    )


def gpu_power() -> timeseries.Panel:
    return graph(
        t.GPU_POWER,
        unit_of("rl_gpu_power_watts"),
        "Board power draw of each node's GPUs and their enforced power limits, summed.",
        [
            Target(node_agg("rl_gpu_power_watts", "sum"), NODE),
            Target(node_agg("rl_gpu_power_limit_watts", "sum"), NODE + " limit"),
        ],
        span=8,
    )


def gpu_temperature() -> timeseries.Panel:
    return graph(
        t.GPU_TEMPERATURE,
        unit_of("rl_gpu_temperature_celsius"),
        "Hottest GPU core of each node.",
        [Target(node_agg("rl_gpu_temperature_celsius", "max"), NODE)],
        span=8,
    )


def gpu_clock() -> timeseries.Panel:
    return graph(
        t.GPU_CLOCK,
        unit_of("rl_gpu_sm_clock_hertz"),
        "Slowest streaming-multiprocessor clock of each node: a drop under load is throttling.",
        [Target(node_agg("rl_gpu_sm_clock_hertz", "min"), NODE)],
        span=8,
    )


def gpu_throttling_and_errors() -> timeseries.Panel:
    panel = graph(
        t.GPU_THROTTLING,
        "short",
        "GPUs of each node whose clocks are held down, by reason (left), and volatile ECC "
        "errors over the rate window (right).",
        [
            Target(NODE_REC(rules.GPU_THROTTLED_COUNT), NODE + " {{reason}}"),
            Target(NODE_REC(rules.GPU_ECC_INCREASE), NODE + " ECC {{error_type}}"),
        ],
        span=8,
    )
    return right_axis(panel, 1, "short")


def gpu_boards() -> timeseries.Panel:
    panel = graph(
        t.GPU_BOARDS,
        unit_of("rl_gpu_utilization_ratio"),
        "One line per GPU of the nodes chosen in the Node and GPU variables (raw series: on a "
        "large job pick a node first).",
        [
            Target(
                f"max by (node, gpu) ({GPU_SEL('rl_gpu_utilization_ratio')})", NODE + " gpu{{gpu}}"
            )
        ],
        span=24,
    )
    return panel.min(0).max(1)


def gpu_memory_boards(cfg: Config) -> timeseries.Panel:
    full = cfg.alerts.gpu_memory_full
    levels = [("warning", full.warning), ("critical", full.critical)]
    panel = graph(
        t.GPU_MEMORY_BOARDS,
        "percentunit",
        "Used share of each board's memory, the series RLGPUMemoryFull tests, against its levels "
        f"(dashed: {full.warning:g} warning, {full.critical:g} critical). One line per GPU of "
        "the nodes chosen in the Node and GPU variables.",
        [Target(f"max by (node, gpu) ({GPU_REC(rules.GPU_MEMORY_RATIO)})", NODE + " gpu{{gpu}}")],
        span=24,
    )
    return threshold_lines(panel.min(0).max(1), alert_levels(levels))


# ---- host and process ------------------------------------------------------------------------


def host_cpu() -> timeseries.Panel:
    panel = graph(
        "CPU",
        unit_of("rl_host_cpu_utilization_ratio"),
        "Host CPU busy fraction of each node (left) and the CPU its trainer processes use, in "
        "cores (right).",
        [
            Target(per_node("rl_host_cpu_utilization_ratio"), NODE),
            Target(node_agg("rl_process_cpu_utilization_ratio", "sum"), NODE + " trainers"),
        ],
    )
    return right_axis(panel, 1, "none")


def host_memory() -> timeseries.Panel:
    return graph(
        "Memory",
        unit_of("rl_host_memory_used_bytes"),
        "Host memory used and installed on each node and the resident set of its trainer "
        "processes (their GPU memory is on the GPU memory panel).",
        [
            Target(per_node("rl_host_memory_used_bytes"), NODE + " used"),
            Target(per_node("rl_host_memory_total_bytes"), NODE + " total"),
            Target(node_agg("rl_process_resident_memory_bytes", "sum"), NODE + " trainers RSS"),
        ],
    )


# ---- rollouts and phases ---------------------------------------------------------------------

_ROLLOUT = "rl_rollout_duration_seconds"


def _quantiles(recorded: dict[str, str]) -> list[Target]:
    return [Target(RUN_REC(name), f"{q} · {RUN}") for q, name in recorded.items()]


def rollout_heatmap() -> heatmap.Panel:
    return latency_heatmap(
        t.ROLLOUT_HEATMAP,
        unit_of(_ROLLOUT),
        "Rollouts per latency bucket over time; exemplars mark single rollouts (rollout_id). "
        "Raw buckets of the ranks chosen in the Rank variable: on a large job pick a few.",
        f"sum by (le) ({SEL.rate(_ROLLOUT, '_bucket')})",
    )


def rollout_quantiles() -> timeseries.Panel:
    return graph(
        t.ROLLOUT_QUANTILES,
        unit_of(_ROLLOUT),
        "p50, p95 and p99 rollout latency per run (recorded over the rules' rate window): p99 "
        "far above p50 is a long tail (stragglers hold the whole batch).",
        _quantiles(rules.ROLLOUT_QUANTILES),
    )


def phase_breakdown() -> timeseries.Panel:
    shares = f"{RUN_REC(rules.PHASE_SHARE)} >= 0"  # a stalled run's 0/0 is left out
    runs = f"count(count by (job, run_id) ({shares}))"
    return stacked_percent(
        graph(
            t.PHASE_BREAKDOWN,
            "percentunit",
            "Each phase's share of the timed time (rollout, reward, ref, update, sync, eval, "
            "checkpoint), averaged over the selected runs that timed a phase in the window, "
            "each run counting once (a phase a run does not time is 0 for it; a stalled run's "
            "0/0 is left out), so the phases add up to 100 %.",
            [Target(f"sum by (phase) ({shares}) / on() group_left() {runs}", "{{phase}}")],
        )
    )


def phase_durations() -> timeseries.Panel:
    return graph(
        t.PHASE_DURATIONS,
        unit_of("rl_phase_duration_seconds"),
        "Mean wall time of one pass through each phase.",
        [Target(RUN_REC(rules.PHASE_MEAN), "{{phase}} · " + RUN)],
    )


# ---- grader and tools ------------------------------------------------------------------------


def grader_latency() -> timeseries.Panel:
    return graph(
        t.GRADER_LATENCY,
        unit_of("rl_grader_duration_seconds"),
        "p50, p95 and p99 latency of grader / reward-model calls.",
        _quantiles(rules.GRADER_QUANTILES),
        span=8,
    )


def grader_calls() -> timeseries.Panel:
    panel = graph(
        t.GRADER_CALLS,
        PER_SECOND,
        "Grader calls and failures per second (left; errors 0 until the first failure) and the "
        "error ratio (right) against the RLGraderErrors levels.",
        [
            Target(RUN_REC(rules.rate_name(GRADER_CALLS)), "calls · " + RUN),
            Target(
                zero_when_absent(
                    RUN_REC(rules.rate_name(GRADER_ERRORS)),
                    ["job", "run_id"],
                    RUN_REC(rules.rate_name(GRADER_CALLS)),
                ),
                "errors · " + RUN,
            ),
            Target(RUN_REC(rules.GRADER_ERROR_RATIO), "error ratio · " + RUN),
        ],
        span=8,
    )
    return right_axis(panel, 2, "percentunit")


def tool_calls() -> timeseries.Panel:
    calls = RUN_REC(rules.TOOL_RATES[TOOL_CALLS])
    errors = RUN_REC(rules.TOOL_RATES[TOOL_ERRORS])
    panel = graph(
        "Tool calls and errors",
        PER_SECOND,
        "Tool calls per second by tool (left) and each tool's error ratio (right; none while "
        "the tool is not called).",
        [
            Target(calls, "{{tool}} · " + RUN),
            Target(f"({errors} or 0 * {calls}) / ({calls} > 0)", "{{tool}} errors · " + RUN),
        ],
        span=8,
    )
    return right_axis(panel, 1, "percentunit")


# ---- exporter health -------------------------------------------------------------------------


def collectors() -> timeseries.Panel:
    panel = graph(
        t.COLLECTORS,
        unit_of("rlpulse_collector_up"),
        "1 while each collector's last reading succeeded on every rank (left) and the slowest "
        "reading (right).",
        [
            Target(f"min by (collector) ({RUN_REC(rules.COLLECTOR_UP_MIN)})", "{{collector}} up"),
            Target(
                f"max by (collector) ({RUN_REC(rules.COLLECTOR_DURATION_MAX)})",
                "{{collector}} duration",
            ),
        ],
        span=8,
    )
    return right_axis(panel, 1, unit_of("rlpulse_collector_duration_seconds"))


def exporter_errors() -> timeseries.Panel:
    return graph(
        t.EXPORTER_ERRORS,
        PER_SECOND,
        "Collector failures, dropped values (by reason) and label-cap overflows per second, 0 "
        "(as none) until the first one while a run is up: anything non-zero means some data is "
        "not on these dashboards.",
        [
            Target(
                zero_when_absent(
                    f"sum by (collector) ({RUN_REC(rules.COLLECTOR_ERROR_RATE)})",
                    [],
                    SEL("rl_run_info"),
                    "collector",
                ),
                "collector {{collector}}",
            ),
            Target(
                zero_when_absent(
                    f"sum by (reason) ({SEL.rate('rlpulse_dropped_values_total')})",
                    [],
                    SEL("rl_run_info"),
                    "reason",
                ),
                "dropped {{reason}}",
            ),
            Target(
                zero_when_absent(
                    f"sum by (label) ({SEL.rate('rlpulse_label_overflow_total')})",
                    [],
                    SEL("rl_run_info"),
                    "label",
                ),
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
        [Target(f"count by (run_id) ({SEL('rl_unmapped_metric')})", "{{run_id}}")],
        span=8,
    )


def build(uid: str, cfg: Config) -> dict[str, Any]:
    """The RL system dashboard as Grafana JSON; alert levels from ``cfg``."""
    dashboard = new_dashboard(
        uid,
        t.SYSTEM,
        "GPUs, host, rollout latency, phase times, grader, tools and exporter health.",
        ["rl", "system"],
        SEL,
        [
            label_variable("run_id", "Run", "rl_run_info", Selector(("job",))),
            label_variable("rank", "Rank", "rl_run_info", Selector(("job", "run_id"))),
            label_variable("node", "Node", "rl_run_info", Selector(("job", "run_id"))),
            label_variable("gpu", "GPU", "rl_gpu_utilization_ratio", NODE_SEL),
        ],
    )
    rows = [
        Row(
            "GPUs",
            [gpu_utilization(), gpu_memory(), gpu_power()]
            + [gpu_temperature(), gpu_clock(), gpu_throttling_and_errors()]
            + [gpu_boards(), gpu_memory_boards(cfg)],
        ),
        Row("Host and process", [host_cpu(), host_memory()]),
        Row(
            "Rollouts and phases",
            [rollout_heatmap(), rollout_quantiles(), phase_breakdown(), phase_durations()],
        ),
        Row("Grader and tools", [grader_latency(), grader_calls(), tool_calls()], collapsed=True),
        Row("Exporter health", [collectors(), exporter_errors(), unmapped_keys()]),
    ]
    return assemble(dashboard, rows)
