"""promtool unit tests of the generated alert rules: ``prometheus/tests/<area>.yml``.

For every alert a scenario that fires it (values worked out by hand in the comments) and, per
area, a healthy run of several hours in which no alert fires. The scenarios are written for the
default thresholds and windows, so ``rlpulse generate`` writes them only when the rules are the
default ones. Expected annotations are the rule's own templates filled in with the expected labels
and value (descriptions use only ``$labels.x`` and ``$value`` through ``printf "%.3g"``,
``humanize``, ``humanizePercentage`` and ``humanizeDuration``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from typing import Any

from rlpulse.stack import alerts as alert_defs
from rlpulse.stack import rules
from rlpulse.stack.alerts import liveness, step
from rlpulse.stack.alerts.kit import Area, Check, Expect, Scenario
from rlpulse.stack.config import Config
from rlpulse.stack.output import header
from rlpulse.stack.promql import sel

M = rules.M
TARGET = {"job": "rlpulse", "instance": "127.0.0.1:9400", "run_id": "r1", "rank": "0"}
RUN = {"job": "rlpulse", "run_id": "r1"}
GPU = {**TARGET, "gpu": "0", "uuid": "GPU-0", "model": "H100"}
EVALUATION_INTERVAL = "30s"
SERIES_INTERVAL = "1m"


def series(metric: Any, labels: dict[str, str], suffix: str = "") -> str:
    """An input-series name in promtool notation, checked against the catalog."""
    name = sel(metric, suffix=suffix)
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}}"


def const(value: float, n: int) -> str:
    """``n`` samples of ``value``."""
    return f"{value:g}x{n - 1}" if n > 1 else f"{value:g}"


def ramp(start: float, step: float, n: int) -> str:
    """``n`` samples from ``start`` growing by ``step``."""
    return f"{start:g}{step:+g}x{n - 1}"


def counter(*segments: tuple[float, int]) -> str:
    """A counter from 0 growing ``rate`` per sample for ``n`` samples, segment after segment
    (the first sample is 0; each segment's samples come after the previous one's last)."""
    parts, value, first = [], 0.0, True
    for rate, n in segments:
        start = value if first else value + rate
        parts.append(ramp(start, rate, n))
        value = start + rate * (n - 1)
        first = False
    return " ".join(parts)


def noisy(start: float, end: float, amplitude: float, n: int, seed: int = 1) -> str:
    """``n`` samples on a line from ``start`` to ``end`` plus deterministic noise in
    [-amplitude, amplitude] (a small LCG, so the files are stable)."""
    out, x = [], seed
    for i in range(n):
        x = (1103515245 * x + 12345) % 2**31
        noise = (x / 2**31 * 2 - 1) * amplitude
        out.append(f"{start + (end - start) * i / max(n - 1, 1) + noise:.4g}")
    return " ".join(out)


def every(value_at: Any, n: int, period: int) -> str:
    """``n`` samples with a value only every ``period`` (a trainer that logs every N steps)."""
    return " ".join(f"{value_at(i):.4g}" if i % period == 0 else "_" for i in range(n))


def _w(metric: Any, labels: dict[str, str] = TARGET, suffix: str = "") -> str:
    return series(metric, labels, suffix)


# ---- rl ---------------------------------------------------------------------------------------


def _declared(area: Area) -> Iterator[Scenario]:
    """The scenarios of the alerts of ``area`` declared in ``rlpulse.stack.alerts``."""
    alerts = Config().alerts
    for d in alert_defs.DEFS[area]:
        yield from d.scenarios(getattr(alerts, d.key))


def _rl() -> Iterator[Scenario]:
    r = rules
    yield from _declared("rl")
    yield Scenario(
        "Update-step KL: 0.01, then 0.2 from 20m; above 0.05 from 22m, fires from 32m.",
        ((_w(r.APPROX_KL), f"{const(0.01, 20)} {const(0.2, 40)}"),),
        (Check("RLUpdateKLHigh", "50m", (Expect("warning", TARGET, 0.2),)),),
    )
    clip = {**TARGET, "bound": "any"}
    yield Scenario(
        "Clip fraction: 0.1, then 0.5 from 20m; fires from about 32m.",
        ((_w(r.CLIP, clip), f"{const(0.1, 20)} {const(0.5, 40)}"),),
        (Check("RLClipFractionHigh", "50m", (Expect("warning", clip, 0.5),)),),
    )
    policy = {**TARGET, "network": "policy"}
    yield Scenario(
        "Non-finite values. A log replay sets the gauge to +Inf (no exporter counter): fires "
        "at once with the gauge's value. A live exporter also counts NaNs: rl_loss goes NaN at "
        "10m and the counter grows 1 per minute, so at 15m the count is 6 (the counter wins). "
        "The grad-norm alert keeps firing for 10m after its last Inf (11m).",
        (
            (_w(r.GRAD_NORM, policy), f"{const(1, 10)} Inf Inf {const(1, 10)}"),
            (_w(M("rl_loss")), f"{const(0.5, 10)} {' '.join(['NaN'] * 10)}"),
            (_w(r.NONFINITE, {**TARGET, "metric": "rl_loss"}), f"{const(0, 10)} {ramp(1, 1, 10)}"),
        ),
        (
            Check("RLNonFiniteLoss", "9m"),
            Check(
                "RLNonFiniteLoss",
                "11m",
                (
                    Expect("critical", {**policy, "metric": "rl_grad_norm"}, math.inf),
                    Expect("critical", {**TARGET, "metric": "rl_loss"}, 2),
                ),
            ),
            Check(
                "RLNonFiniteLoss",
                "15m",
                (
                    # the grad norm is finite again from 12m: kept firing (keep_firing_for)
                    Expect("critical", {**policy, "metric": "rl_grad_norm"}, math.inf),
                    Expect("critical", {**TARGET, "metric": "rl_loss"}, 6),
                ),
            ),
        ),
    )
    yield Scenario(
        "Explained variance: 0.5, then -0.3 from 20m; the 10m mean is negative from 26m and "
        "fires 15m later.",
        ((_w(r.EXPLAINED_VAR), f"{const(0.5, 20)} {const(-0.3, 40)}"),),
        (
            Check("RLExplainedVarianceNegative", "35m"),
            Check("RLExplainedVarianceNegative", "50m", (Expect("warning", TARGET, -0.3),)),
        ),
    )
    yield Scenario(
        "Train/inference mismatch: importance ratio 1.0, then 1.5 from 20m: 0.5 away from 1.",
        ((_w(r.IMPORTANCE), f"{const(1, 20)} {const(1.5, 40)}"),),
        (Check("RLImportanceRatioDrift", "50m", (Expect("warning", TARGET, 0.5),)),),
    )
    n = 480
    yield Scenario(
        "Healthy GRPO/PPO run, 8 hours: entropy decays 1.0 -> 0.55, KL grows 0 -> 0.3, reward "
        "rises 0.2 -> 0.8, value loss falls, explained variance rises; all with noise.",
        (
            (_w(r.ENTROPY), noisy(1.0, 0.55, 0.02, n, 1)),
            (_w(r.KL_REF), noisy(0.01, 0.3, 0.01, n, 2)),
            (_w(r.APPROX_KL), noisy(0.01, 0.01, 0.003, n, 3)),
            (_w(r.CLIP, clip), noisy(0.1, 0.08, 0.02, n, 4)),
            (_w(M("rl_loss")), noisy(0.5, 0.3, 0.1, n, 5)),
            (_w(r.GRAD_NORM, policy), noisy(1.0, 0.8, 0.3, n, 6)),
            (_w(r.VALUE_LOSS), noisy(2.0, 0.5, 0.1, n, 7)),
            (_w(r.EXPLAINED_VAR), noisy(0.2, 0.9, 0.05, n, 8)),
            (_w(r.REWARD), noisy(0.2, 0.8, 0.05, n, 9)),
            (_w(r.ZERO_STD), noisy(0.2, 0.2, 0.05, n, 10)),
            (_w(r.IMPORTANCE), noisy(1.0, 1.0, 0.02, n, 11)),
            (_w(r.NONFINITE, {**TARGET, "metric": "rl_loss"}), const(0, n)),
            *step.healthy_inputs(alert_defs.STEP_ALERTS["rl"], TARGET, n),
        ),
    )


# ---- task -------------------------------------------------------------------------------------


def _task() -> Iterator[Scenario]:
    r = rules
    yield from _declared("task")
    gsm = {**TARGET, "benchmark": "gsm8k", "split": "eval"}
    buckets = {
        "64": const(0, 121),
        "128": counter((10, 61), (0, 60)),
        "256": counter((10, 61), (0, 60)),
        "512": counter((10, 121)),
        "+Inf": counter((10, 121)),
    }
    yield Scenario(
        "Length-distribution drift: 10 responses a minute in (64, 128] for an hour, then in "
        "(256, 512]. p90 goes from 64 + 0.9 * 64 = 121.6 to 256 + 0.9 * 256 = 486.4 tokens, "
        "4x the p90 an hour earlier; fires 15m after the shift shows.",
        tuple((_w(r.LENGTH_HIST, {**TARGET, "le": le}, "_bucket"), v) for le, v in buckets.items()),
        (
            Check("RLResponseLengthDrift", "60m"),
            Check("RLResponseLengthDrift", "100m", (Expect("warning", RUN, 4),)),
        ),
    )
    n = 480
    yield Scenario(
        "Healthy run, 8 hours: reward rises 0.2 -> 0.8 and the held-out eval score (logged every "
        "30 minutes) rises 0.3 -> 0.6; mean length grows 200 -> 400 tokens from a stable "
        "distribution; truncation 2%; format compliance 0.9 -> 0.95.",
        (
            (_w(r.REWARD), noisy(0.2, 0.8, 0.05, n, 9)),
            (_w(r.EVAL_SCORE, gsm), every(lambda i: 0.3 + 0.3 * i / n, n, 30)),
            (_w(r.LENGTH_MEAN), noisy(200, 400, 10, n, 12)),
            (_w(r.LENGTH_HIST, {**TARGET, "le": "128"}, "_bucket"), const(0, n)),
            (_w(r.LENGTH_HIST, {**TARGET, "le": "256"}, "_bucket"), counter((10, n))),
            (_w(r.LENGTH_HIST, {**TARGET, "le": "512"}, "_bucket"), counter((11, n))),
            (_w(r.LENGTH_HIST, {**TARGET, "le": "+Inf"}, "_bucket"), counter((11, n))),
            (_w(r.TRUNCATION), noisy(0.02, 0.02, 0.01, n, 13)),
            (_w(r.FORMAT_OK), noisy(0.9, 0.95, 0.02, n, 14)),
            *step.healthy_inputs(alert_defs.STEP_ALERTS["task"], TARGET, n),
        ),
    )


# ---- system -----------------------------------------------------------------------------------


def _system() -> Iterator[Scenario]:
    r = rules
    yield from _declared("system")
    up = {"job": "rlpulse", "instance": "127.0.0.1:9400"}
    yield Scenario(
        "Target down: the exporter serves run r1 for 30 minutes, then every scrape fails "
        "(up 0, its series end). Fires 1m later with the run it last served and the time since its "
        "last sample (29m): 660 s at 40m.",
        (
            (series_up(up), f"{const(1, 30)} {const(0, 30)}"),
            (_w(r.RUN_INFO, {**TARGET, "model": "tiny"}), const(1, 30)),
        ),
        (
            Check(r.TARGET_DOWN, "30m"),
            Check(r.TARGET_DOWN, "40m", (Expect("critical", TARGET, 40 * 60 - 29 * 60),)),
        ),
    )
    yield Scenario(
        "Finished run: finish() at 28m20s is carried by the last two scrapes, then the exporter "
        "stops (up 0): the run ended on purpose, nothing pages.",
        (
            (series_up(up), f"{const(1, 30)} {const(0, 30)}"),
            (_w(r.RUN_INFO, {**TARGET, "model": "tiny"}), const(1, 30)),
            (_w(r.FINISHED), f"_x28 {const(28 * 60 + 20, 2)}"),
        ),
        (Check(r.TARGET_DOWN, "40m"), Check(r.TARGET_DOWN, "58m")),
    )
    yield Scenario(
        "A finished run's target serves a new run from 20m (no finish mark), which dies at 60m: "
        "the old mark does not hide it, it fires with the new run's last sample (59m).",
        (
            (series_up(up), f"{const(1, 60)} {const(0, 20)}"),
            (_w(r.RUN_INFO, {**TARGET, "model": "tiny"}), const(1, 60)),
            (_w(r.FINISHED), f"_x8 {const(9 * 60, 2)}"),
        ),
        (Check(r.TARGET_DOWN, "70m", (Expect("critical", TARGET, 70 * 60 - 59 * 60),)),),
    )
    crashed = {**TARGET, "outcome": "crashed", "reason": "ValueError"}
    yield Scenario(
        "Crashed run: an uncaught ValueError at 28m50s; the last scrape (29m) carries the end "
        "mark and the outcome, then the exporter stops (up 0). RLRunCrashed fires at once "
        "naming the reason and the seconds since the end (70 s at 30m); RLTargetDown stays "
        "quiet (the crash is the page).",
        (
            (series_up(up), f"{const(1, 30)} {const(0, 30)}"),
            (_w(r.RUN_INFO, {**TARGET, "model": "tiny"}), const(1, 30)),
            (_w(r.FINISHED), f"_x29 {29 * 60 - 10}"),
            (_w(r.OUTCOME, crashed), "_x29 1"),
        ),
        (
            Check(r.RUN_CRASHED, "28m"),
            Check(r.RUN_CRASHED, "30m", (Expect("critical", crashed, 30 * 60 - (29 * 60 - 10)),)),
            Check(r.RUN_CRASHED, "50m", (Expect("critical", crashed, 50 * 60 - (29 * 60 - 10)),)),
            Check(r.TARGET_DOWN, "50m"),
        ),
    )
    yield Scenario(
        "GPU idle: utilization 0.9, then 0 from 20m; the 10m mean is under 0.05 from 30m.",
        ((_w(r.GPU_UTIL, GPU), f"{const(0.9, 20)} {const(0, 40)}"),),
        (Check(r.GPU_IDLE, "50m", (Expect("warning", GPU, 0),)),),
    )
    yield Scenario(
        "GPU memory: 80 GB card at 40 GB, 78 GB from 10m (0.975, warning), 79.6 GB from 30m "
        "(0.995, critical).",
        (
            (_w(r.GPU_MEM_TOTAL, GPU), const(80e9, 50)),
            (_w(r.GPU_MEM_USED, GPU), f"{const(40e9, 10)} {const(78e9, 20)} {const(79.6e9, 20)}"),
        ),
        (
            Check("RLGPUMemoryFull", "25m", (Expect("warning", GPU, 0.975),)),
            Check(
                "RLGPUMemoryFull",
                "45m",
                (Expect("warning", GPU, 0.995), Expect("critical", GPU, 0.995)),
            ),
        ),
    )
    yield Scenario(
        "GPU temperature: 60 C, 88 C from 10m (warning over 85), 95 C from 30m (critical over 92).",
        ((_w(r.GPU_TEMP, GPU), f"{const(60, 10)} {const(88, 20)} {const(95, 20)}"),),
        (
            Check("RLGPUTemperatureHigh", "25m", (Expect("warning", GPU, 88),)),
            Check(
                "RLGPUTemperatureHigh",
                "45m",
                (Expect("warning", GPU, 95), Expect("critical", GPU, 95)),
            ),
        ),
    )
    thermal, power = {**GPU, "reason": "thermal"}, {**GPU, "reason": "power"}
    yield Scenario(
        "GPU throttling: thermal slowdown from 10m on; power capping all along is normal and "
        "is not counted.",
        (
            (_w(r.GPU_THROTTLED, thermal), f"{const(0, 10)} {const(1, 40)}"),
            (_w(r.GPU_THROTTLED, power), const(1, 50)),
        ),
        (Check("RLGPUThrottling", "40m", (Expect("warning", thermal, 1),)),),
    )
    unc, cor = {**GPU, "error_type": "uncorrected"}, {**GPU, "error_type": "corrected"}
    yield Scenario(
        "GPU ECC: 2 uncorrected errors at 20m page at once; corrected errors do not.",
        (
            (_w(r.GPU_ECC, unc), f"{const(0, 20)} {const(2, 20)}"),
            (_w(r.GPU_ECC, cor), counter((1, 40))),
        ),
        (
            Check("RLGPUECCErrors", "19m"),
            Check("RLGPUECCErrors", "25m", (Expect("critical", unc, 2),)),
        ),
    )
    yield Scenario(
        "Throughput drop: 10 steps a minute, 2 a minute from 90m. At 115m the last 10m rate "
        "(20 steps) against the hour before ([45m, 105m]: 450 + 30 steps) is 0.25.",
        ((_w(r.TRAIN_STEPS), counter((10, 91), (2, 40))),),
        (
            Check(r.THROUGHPUT_DROP, "100m"),
            Check(
                r.THROUGHPUT_DROP,
                "115m",
                (Expect("warning", {**RUN, "throughput": r.TRAIN_STEPS.family}, 0.25),),
            ),
        ),
    )
    lat = {
        "0.5": const(0, 40),
        "1": counter((97, 40)),
        "60": counter((97, 40)),
        "120": counter((100, 40)),
        "+Inf": counter((100, 40)),
    }
    yield Scenario(
        "Rollout-latency tail: of 100 rollouts a minute 97 take up to 1 s and 3 take 1-2 min. "
        "p50 = 0.5 + 0.5 * 50/97 = 0.758 s, p99 = 60 + 60 * 2/3 = 100 s: 132 times p50.",
        tuple((_w(r.ROLLOUT, {**TARGET, "le": le}, "_bucket"), v) for le, v in lat.items()),
        (
            Check(
                "RLRolloutLatencyTail",
                "30m",
                (Expect("warning", RUN, 100 / (0.5 + 0.25 * 100 / 97)),),
            ),
        ),
    )
    yield Scenario(
        "Grader errors: 100 calls a minute; 10 fail from 10m (0.1, warning), 60 from 40m (0.6, "
        "critical).",
        (
            (_w(r.GRADER_CALLS), counter((100, 70))),
            (_w(r.GRADER_ERRORS), counter((0, 11), (10, 30), (60, 29))),
        ),
        (
            Check("RLGraderErrors", "30m", (Expect("warning", RUN, 0.1),)),
            Check(
                "RLGraderErrors", "60m", (Expect("warning", RUN, 0.6), Expect("critical", RUN, 0.6))
            ),
        ),
    )
    gpu_col = {**TARGET, "collector": "gpu"}
    yield Scenario(
        "Collector failing: the GPU collector goes down at 10m and its error count grows 1 a "
        "minute: 10 errors in the 10m before 30m.",
        (
            (_w(r.COLLECTOR_UP, gpu_col), f"{const(1, 10)} {const(0, 30)}"),
            (_w(r.COLLECTOR_ERRORS, gpu_col), counter((0, 11), (1, 29))),
        ),
        (Check("RLExporterCollectorErrors", "30m", (Expect("warning", gpu_col, 10),)),),
    )
    dropped = {**TARGET, "reason": "non_numeric"}
    yield Scenario(
        "Dropped values: the trainer logs a string every minute; 10 dropped in 10m.",
        ((_w(r.DROPPED, dropped), counter((1, 40))),),
        (Check("RLExporterDroppedValues", "30m", (Expect("info", dropped, 10),)),),
    )
    n = 480
    other = {"job": "rlpulse", "instance": "127.0.0.1:9401"}
    hist = {
        "0.5": const(0, n),
        "1": counter((90, n)),
        "2.5": counter((100, n)),
        "+Inf": counter((100, n)),
    }
    yield Scenario(
        "Healthy run, 8 hours: up, stepping, GPUs busy at 85% and 70 C with power capping, "
        "corrected ECC errors only, steady throughput, p99/p50 latency 3, 1% grader errors. A "
        "second static target that never served a run is down all along: not paged.",
        (
            (series_up(up), const(1, n)),
            (series_up(other), const(0, n)),
            (_w(r.RUN_INFO, {**TARGET, "model": "tiny"}), const(1, n)),
            (_w(r.STEP), ramp(1, 1, n)),
            (_w(r.TRAIN_STEPS), counter((1, n))),
            (_w(r.SAMPLES), counter((64, n))),
            (_w(r.GPU_UTIL, GPU), noisy(0.85, 0.85, 0.05, n, 21)),
            (_w(r.GPU_MEM_TOTAL, GPU), const(80e9, n)),
            (_w(r.GPU_MEM_USED, GPU), const(60e9, n)),
            (_w(r.GPU_TEMP, GPU), noisy(70, 72, 3, n, 22)),
            (_w(r.GPU_THROTTLED, power), every(lambda i: 1, n, 2).replace("_", "0")),
            (_w(r.GPU_THROTTLED, thermal), const(0, n)),
            (_w(r.GPU_ECC, cor), counter((0.1, n))),
            (_w(r.GPU_ECC, unc), const(0, n)),
            *((_w(r.ROLLOUT, {**TARGET, "le": le}, "_bucket"), v) for le, v in hist.items()),
            (_w(r.GRADER_CALLS), counter((100, n))),
            (_w(r.GRADER_ERRORS), counter((1, n))),
            (_w(r.COLLECTOR_UP, gpu_col), const(1, n)),
            (_w(r.COLLECTOR_ERRORS, gpu_col), const(0, n)),
            (_w(r.DROPPED, dropped), const(0, n)),
            *liveness.HEALTHY_INPUTS(),
        ),
    )


def series_up(labels: dict[str, str]) -> str:
    """The ``up`` series Prometheus writes for a scrape target."""
    return "up{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


_SCENARIOS = {"rl": _rl, "task": _task, "system": _system}
HEALTHY_TIMES = ("1h", "2h30m", "4h", "6h", "7h59m")


# ---- rendering ---------------------------------------------------------------------------------


def go_g3(value: float) -> str:
    """``printf "%.3g"`` as Go's text/template prints a float."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.3g}"


def _go_g4(value: float) -> str:
    """Go's ``%.4g`` of a float (NaN and ±Inf spelt as Go spells them)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.4g}"


def go_humanize(value: float) -> str:
    """``humanize`` as Prometheus' templates print a number (SI prefix, 4 significant digits)."""
    if value == 0 or not math.isfinite(value):
        return _go_g4(value)
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
    return _go_g4(value) + prefix


def go_percentage(value: float) -> str:
    """``humanizePercentage`` as Prometheus' templates print a ratio."""
    return _go_g4(value * 100) + "%"


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


_LABEL = re.compile(r"\{\{ \$labels\.(\w+) \}\}")
# {{ with $labels.x }}…{{ . }}…{{ end }}: the text with the label's value, or nothing
_WITH_LABEL = re.compile(r"\{\{ with \$labels\.(\w+) \}\}(.*?)\{\{ end \}\}")
_VALUE = '{{ printf "%.3g" $value }}'
_PRINTERS = {
    _VALUE: go_g3,
    "{{ $value | humanize }}": go_humanize,
    "{{ $value | humanizePercentage }}": go_percentage,
    "{{ $value | humanizeDuration }}": go_duration,
}


def fill(template: str, labels: dict[str, str], value: float) -> str:
    """An annotation template with the labels and value filled in."""
    for placeholder, printer in _PRINTERS.items():
        template = template.replace(placeholder, printer(value))
    template = _WITH_LABEL.sub(
        lambda m: m.group(2).replace("{{ . }}", got) if (got := labels.get(m.group(1))) else "",
        template,
    )
    return _LABEL.sub(lambda m: labels.get(m.group(1), ""), template)


def _expected(alert: rules.Alert, area: str, exp: Expect) -> dict[str, Any]:
    labels = {**exp.labels, "severity": exp.severity, "layer": area}
    notes = {"summary": alert.summary, "description": alert.description, **alert.annotations}
    filled = {k: fill(v, exp.labels, exp.value) for k, v in notes.items()}
    return {"exp_labels": labels, "exp_annotations": {**filled, **(exp.annotations or {})}}


def unit_test(
    scn: Scenario, area: str, alerts: dict[tuple[str, rules.Severity], rules.Alert]
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


def scenarios(area: str) -> list[Scenario]:
    """The scenarios of one area, the healthy run last."""
    return list(_SCENARIOS[area]())


def render(cfg: Config) -> dict[str, str]:
    """Relative path -> text of each ``prometheus/tests/<area>.yml``."""
    out = {}
    for group in rules.groups(cfg):
        alerts = {(a.name, a.severity): a for a in group.alerts}
        head = header(
            "ruletests.py", f"Run: promtool test rules prometheus/tests/{group.area}.yml"
        ) + (
            f"rule_files:\n  - ../rules/{group.area}.yml\n"
            f"evaluation_interval: {EVALUATION_INTERVAL}\ntests:\n"
        )
        body = []
        for scn in scenarios(group.area):
            text = rules.dump([unit_test(scn, group.area, alerts)])
            comment = "".join(f"  # {line}\n" for line in _wrap(scn.comment))
            body.append(comment + "".join(f"  {line}\n" for line in text.splitlines()))
        out[f"prometheus/tests/{group.area}.yml"] = head + "\n".join(body)
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
