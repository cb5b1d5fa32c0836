"""GPU alerts, per board: idle, memory nearly full, running hot, throttled, memory errors."""

from __future__ import annotations

from rlpulse.runtime.collectors.gpu import THROTTLE_REASONS
from rlpulse.stack import panels
from rlpulse.stack.alerts import kit
from rlpulse.stack.alerts.inputs import GPU, const, counter, every, noisy, series
from rlpulse.stack.alerts.kit import HUMANIZE, PERCENT, pct
from rlpulse.stack.metrics import (
    GPU_ECC,
    GPU_MEM_TOTAL,
    GPU_MEM_USED,
    GPU_TEMP,
    GPU_THROTTLED,
    GPU_UTIL,
)
from rlpulse.stack.panels import SYSTEM, see
from rlpulse.stack.promql import record_name, regex_alternatives

MEMORY_RATIO = record_name("gpu", GPU_MEM_USED, "ratio")
ID = "GPU {{ $labels.gpu }} of run {{ $labels.run_id }} on {{ $labels.instance }}"
IDLE = "RLGPUIdle"
MEMORY_FULL = "RLGPUMemoryFull"
TEMPERATURE = "RLGPUTemperatureHigh"
THROTTLING = "RLGPUThrottling"
ECC_ERRORS = "RLGPUECCErrors"
UNCORRECTED = 'error_type="uncorrected"'
_THERMAL = {**GPU, "reason": "thermal"}
_POWER = {**GPU, "reason": "power"}
_UNCORRECTED = {**GPU, "error_type": "uncorrected"}
_CORRECTED = {**GPU, "error_type": "corrected"}


def healthy_inputs(n: int) -> tuple[tuple[str, str], ...]:
    """A GPU busy at 85% and 70 C with power capping and corrected ECC errors only."""
    return (
        (series(GPU_UTIL, GPU), noisy(0.85, 0.85, 0.05, n, 21)),
        (series(GPU_MEM_TOTAL, GPU), const(80e9, n)),
        (series(GPU_MEM_USED, GPU), const(60e9, n)),
        (series(GPU_TEMP, GPU), noisy(70, 72, 3, n, 22)),
        (series(GPU_THROTTLED, _POWER), every(lambda i: 1, n, 2).replace("_", "0")),
        (series(GPU_THROTTLED, _THERMAL), const(0, n)),
        (series(GPU_ECC, _CORRECTED), counter((0.1, n))),
        (series(GPU_ECC, _UNCORRECTED), const(0, n)),
    )


DEFS: tuple[kit.AlertDef, ...] = (
    kit.recent_mean(
        name=IDLE,
        doc="GPUs idle while the run's exporter is alive.",
        metric=GPU_UTIL,
        threshold=(0.05, "GPU utilization"),
        below=True,
        summary="GPUs are idle while the run's exporter is alive.",
        description=lambda q, k: (
            f"{ID} averaged {PERCENT} utilization over {q.w.recent} (threshold {pct(k.threshold)})."
        ),
        runbook=kit.Runbook(
            "A GPU of a live run averaged near-zero utilization: the run waits on something "
            "(rollouts, grader, data, a stalled rank) or the GPU is not used at all.",
            see(SYSTEM, panels.GPU_BOARDS, panels.PHASE_BREAKDOWN),
            (
                "Check which phase dominates; overlap generation and training, or add "
                "rollout workers.",
                "Check the device assignment (CUDA_VISIBLE_DEVICES) of each rank.",
            ),
        ),
        shift=(
            "GPU idle: utilization 0.9, then 0 from 20m; the 10m mean is under 0.05 from 30m.",
            (0.9, 0),
        ),
        labels=GPU,
    ),
    kit.ThresholdAlert(
        name=MEMORY_FULL,
        doc="GPU framebuffer nearly full.",
        settings=kit.tiers(0.97, 0.99, "used/total fraction"),
        severity="tiered",
        records=lambda q, k: [
            kit.RecordingRule(MEMORY_RATIO, f"{q.s(GPU_MEM_USED)} / {q.s(GPU_MEM_TOTAL)}")
        ],
        expr=f"{MEMORY_RATIO} > $LEVEL",
        summary="GPU memory is nearly full.",
        description=f"{ID} uses {PERCENT} of its memory (threshold $LEVEL).",
        level_text=pct,
        runbook=kit.Runbook(
            "GPU framebuffer memory is nearly full; the next long batch can run out of memory.",
            see(SYSTEM, panels.GPU_MEMORY_BOARDS, panels.GPU_MEMORY),
            (
                "Lower the micro-batch size or max length, enable activation checkpointing, "
                "lower the inference engine's memory fraction.",
            ),
        ),
        tests=(
            kit.Scenario(
                "GPU memory: 80 GB card at 40 GB, 78 GB from 10m (0.975, warning), 79.6 GB from "
                "30m (0.995, critical).",
                (
                    (series(GPU_MEM_TOTAL, GPU), const(80e9, 50)),
                    (
                        series(GPU_MEM_USED, GPU),
                        f"{const(40e9, 10)} {const(78e9, 20)} {const(79.6e9, 20)}",
                    ),
                ),
                kit.tiered_checks(MEMORY_FULL, GPU, ("25m", 0.975), ("45m", 0.995)),
            ),
        ),
    ),
    kit.ThresholdAlert(
        name=TEMPERATURE,
        doc="GPU running hot.",
        settings=kit.tiers(85.0, 92.0, "temperature, Celsius"),
        severity="tiered",
        expr=lambda q, k: f"{q.s(GPU_TEMP)} > $LEVEL",
        summary="A GPU is running hot.",
        description=f"{ID} is at {HUMANIZE} °C (threshold $LEVEL °C).",
        runbook=kit.Runbook(
            "A GPU runs hot; it will throttle and may fail.",
            see(SYSTEM, panels.GPU_TEMPERATURE, panels.GPU_POWER),
            ("Check the node's cooling and fans; move the job off the node if it keeps rising.",),
        ),
        tests=(
            kit.Scenario(
                "GPU temperature: 60 C, 88 C from 10m (warning over 85), 95 C from 30m (critical "
                "over 92).",
                ((series(GPU_TEMP, GPU), f"{const(60, 10)} {const(88, 20)} {const(95, 20)}"),),
                kit.tiered_checks(TEMPERATURE, GPU, ("25m", 88), ("45m", 95)),
            ),
        ),
    ),
    kit.ThresholdAlert(
        name=THROTTLING,
        doc="GPU clocks held down by a slowdown.",
        settings={
            "reasons": kit.Knob(
                ("thermal", "hw_slowdown"),
                "rl_gpu_throttled reasons that count (power capping is normal).",
                frozenset(THROTTLE_REASONS),
            ),
            "min_fraction": kit.Knob(
                0.5, "Fire when throttled this fraction of the recent window."
            ),
        },
        severity="warning",
        expr=lambda q, k: (
            q.recent(GPU_THROTTLED, f'reason=~"{regex_alternatives(k.reasons)}"')
            + f" > {k.min_fraction:g}"
        ),
        summary="GPU clocks are held down by a slowdown.",
        description=lambda q, k: (
            f"{ID} was throttled ({{{{ $labels.reason }}}}) {PERCENT} of the last {q.w.recent}."
        ),
        runbook=kit.Runbook(
            "A GPU's clocks are held down by a thermal or hardware slowdown (power capping "
            "is not counted): training runs slower than it should on that GPU and the whole "
            "job waits.",
            see(
                SYSTEM,
                panels.GPU_THROTTLING,
                panels.GPU_CLOCK,
                panels.GPU_TEMPERATURE,
                panels.GPU_POWER,
            ),
            ("Check cooling and power delivery of the node; report hardware slowdowns.",),
        ),
        tests=(
            kit.Scenario(
                "GPU throttling: thermal slowdown from 10m on; power capping all along is normal "
                "and is not counted.",
                (
                    (series(GPU_THROTTLED, _THERMAL), f"{const(0, 10)} {const(1, 40)}"),
                    (series(GPU_THROTTLED, _POWER), const(1, 50)),
                ),
                (kit.Check(THROTTLING, "40m", (kit.Expect("warning", _THERMAL, 1),)),),
            ),
        ),
    ),
    kit.ThresholdAlert(
        name=ECC_ERRORS,
        key="gpu_ecc_errors",
        doc="Uncorrected GPU memory errors.",
        settings={"for_": "0s"},
        severity="critical",
        expr=lambda q, k: f"increase({q.s(GPU_ECC, UNCORRECTED)}[{q.w.recent}]) > 0",
        summary="A GPU reported uncorrected memory errors.",
        description=lambda q, k: (
            f"{ID} reported {HUMANIZE} uncorrected ECC errors in the last {q.w.recent}."
        ),
        runbook=kit.Runbook(
            "A GPU reported uncorrected ECC memory errors: results on that GPU may be wrong "
            "and the process usually crashes.",
            see(SYSTEM, panels.GPU_THROTTLING, panels.GPU_BOARDS),
            (
                "Drain the node, reset the GPU or replace it; resume the run from a "
                "checkpoint on healthy hardware.",
            ),
        ),
        tests=(
            kit.Scenario(
                "GPU ECC: 2 uncorrected errors at 20m page at once; corrected errors do not.",
                (
                    (series(GPU_ECC, _UNCORRECTED), f"{const(0, 20)} {const(2, 20)}"),
                    (series(GPU_ECC, _CORRECTED), counter((1, 40))),
                ),
                (
                    kit.Check(ECC_ERRORS, "19m"),
                    kit.Check(ECC_ERRORS, "25m", (kit.Expect("critical", _UNCORRECTED, 2),)),
                ),
            ),
        ),
    ),
)
