"""Liveness alerts, relative to the run's own cadence: a stall, a hang before the first step,
and one rank far slower than the others."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rlpulse import catalog
from rlpulse.stack import panels
from rlpulse.stack.alerts.kit import Alert, AlertDef, Check, Expect, Recording, Runbook, Scenario
from rlpulse.stack.knobs import AlertConfig, Duration, _doc, seconds
from rlpulse.stack.promql import record_name
from rlpulse.stack.query import RUN_BY

M = catalog.get
LAST_LOG = M("rl_last_step_timestamp_seconds")
INTERVAL = M("rl_step_interval_seconds")
LOGGED = M("rl_logged_steps_total")
STARTED = M("rl_exporter_start_timestamp_seconds")
FINISHED = M("rl_run_finished_timestamp_seconds")
STEP = M("rl_step")
PHASE = M("rl_phase_duration_seconds")
RANK_PHASE_MEAN = record_name("rank_phase", PHASE, "mean")
ID = "run {{ $labels.run_id }} (rank {{ $labels.rank }})"
TARGET = {"job": "rlpulse", "instance": "127.0.0.1:9400", "run_id": "r1", "rank": "0"}
STALLED = "RLTrainingStalled"


# ---- stall -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingStalledKnobs(AlertConfig):
    """No logged step for many of the run's own step intervals while the exporter is up."""

    for_: Duration = field(default=Duration("1m"), metadata=_doc("How long before firing."))
    factor: float = field(
        default=5.0,
        metadata=_doc("Fire after this many of the run's own median step intervals."),
    )
    min_wait: Duration = field(
        default=Duration("5m"), metadata=_doc("...and never before this long without a step.")
    )
    first_steps_wait: Duration = field(
        default=Duration("30m"),
        metadata=_doc("Wait for a run that has logged one step (no interval known yet)."),
    )


def _stall_rules(q: Any, k: TrainingStalledKnobs) -> Iterator[Alert]:
    since = f"(time() - {q.s(LAST_LOG)})"
    wait = (
        f"clamp_min({q.s(INTERVAL)} * {k.factor:g}, {seconds(k.min_wait):g})"
        f" or ({q.s(LAST_LOG)} * 0 + {seconds(k.first_steps_wait):g})"
    )
    yield Alert.of(
        k,
        STALLED,
        "critical",
        f"({since} > ({wait})) and on(job, instance) ({q.s(LOGGED)} > 0)"
        f" unless on(job, run_id, rank) {q.s(FINISHED)}",  # a finished run kept by a Pushgateway
        "The trainer logged no step for many of its own step intervals while its exporter is up.",
        f"{ID} logged nothing for {{{{ $value | humanizeDuration }}}} "
        f"(more than {k.factor:g} times its own median step interval, and at least "
        f"{k.min_wait}) while its exporter still answers.",
    )


def _stall_scenarios(k: TrainingStalledKnobs) -> Iterator[Scenario]:
    ts = {**TARGET}
    # a step a minute for 30 minutes, then nothing: the exporter keeps serving the last stamp
    stamps = " ".join(str(60 * i) for i in range(30)) + f" {1740}x29"
    yield Scenario(
        "Stall: a step a minute for 30m (interval 60 s), then the loop hangs at 29m while the "
        "exporter answers. 5 x 60 s < 5m, so it fires once 5m pass without a step (34m) plus "
        "the 1m `for`; its value is the time since the last step.",
        (
            (_s(LAST_LOG, ts), stamps),
            (_s(INTERVAL, ts), "60x59"),
            (_s(LOGGED, ts), "1+1x29 30x29"),
        ),
        (
            Check(STALLED, "33m"),
            Check(STALLED, "36m", (Expect("critical", ts, 36 * 60 - 1740),)),
        ),
    )
    # one step every 19 minutes: the old fixed 15-minute window paged at every step
    slow = " ".join(str(1140 * (i // 19)) for i in range(120))
    yield Scenario(
        "Slow steps are not a stall: one step every 19 minutes (interval 1140 s); 5 intervals "
        "are 95 minutes, so the gaps between steps never fire.",
        (
            (_s(LAST_LOG, ts), slow),
            (_s(INTERVAL, ts), "1140x119"),
            (_s(LOGGED, ts), " ".join(str(1 + i // 19) for i in range(120))),
        ),
        tuple(Check(STALLED, f"{m}m") for m in (18, 37, 56, 75, 94, 113)),
    )
    yield Scenario(
        "A finished run kept by a Pushgateway (rl_run_finished_timestamp_seconds present) is not "
        "a stall however old its last step.",
        (
            (_s(LAST_LOG, ts), "0x59"),
            (_s(INTERVAL, ts), "60x59"),
            (_s(LOGGED, ts), "10x59"),
            (_s(FINISHED, ts), "0x59"),
        ),
        (Check(STALLED, "50m"),),
    )


def _stall_healthy() -> tuple[tuple[str, str], ...]:
    n = 480
    return (
        (_s(LAST_LOG, TARGET), f"0+60x{n - 1}"),
        (_s(INTERVAL, TARGET), f"60x{n - 1}"),
        (_s(LOGGED, TARGET), f"1+1x{n - 1}"),
        (_s(STARTED, TARGET), f"0x{n - 1}"),
    )


# ---- startup hang ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartupHangKnobs(AlertConfig):
    """The exporter started but the trainer never logged its first step."""

    for_: Duration = field(default=Duration("0s"), metadata=_doc("How long before firing."))
    timeout: Duration = field(
        default=Duration("1h"),
        metadata=_doc("Fire when no step was logged this long after the exporter started."),
    )


STARTUP_HANG = "RLStartupHang"


def _startup_rules(q: Any, k: StartupHangKnobs) -> Iterator[Alert]:
    yield Alert.of(
        k,
        STARTUP_HANG,
        "critical",
        f"(time() - {q.s(STARTED)} > {seconds(k.timeout):g}) and on(job, instance) "
        f"({q.s(LOGGED)} == 0)",
        "The trainer has not logged its first step long after its exporter started.",
        f"{ID} started {{{{ $value | humanizeDuration }}}} ago and has logged no step yet "
        f"(threshold {k.timeout}): it hangs in start-up (model loading, a rendezvous, data).",
    )


def _startup_scenarios(k: StartupHangKnobs) -> Iterator[Scenario]:
    yield Scenario(
        "Start-up hang: the exporter starts at 0 and the trainer never logs a step; after the "
        "1h timeout it fires with the time since the start.",
        ((_s(STARTED, TARGET), "0x89"), (_s(LOGGED, TARGET), "0x89")),
        (
            Check(STARTUP_HANG, "59m"),
            Check(STARTUP_HANG, "70m", (Expect("critical", TARGET, 70 * 60),)),
        ),
    )
    yield Scenario(
        "A slow start is not a hang once the first step is logged (at 40m).",
        ((_s(STARTED, TARGET), "0x89"), (_s(LOGGED, TARGET), "0x39 1+1x49")),
        (Check(STARTUP_HANG, "70m"),),
    )


# ---- one slow rank -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SlowRankKnobs(AlertConfig):
    """One rank's phase takes far longer than the same phase on the run's other ranks."""

    for_: Duration = field(default=Duration("10m"), metadata=_doc("How long before firing."))
    factor: float = field(
        default=2.0,
        metadata=_doc("Fire when a rank's mean phase time is this many times the median."),
    )
    min_ranks: int = field(default=3, metadata=_doc("Only for runs with at least this many ranks."))


SLOW_RANK = "RLSlowRank"


def _rank_phase(q: Any, k: SlowRankKnobs) -> list[Recording]:
    by = f"{RUN_BY}, rank, phase"
    return [
        Recording(
            RANK_PHASE_MEAN,
            f"sum by ({by}) ({q.rate(PHASE, suffix='_sum')}) / "
            f"sum by ({by}) ({q.rate(PHASE, suffix='_count')})",
        )
    ]


def _slow_rank_rules(q: Any, k: SlowRankKnobs) -> Iterator[Alert]:
    median = f"quantile by ({RUN_BY}, phase) (0.5, {RANK_PHASE_MEAN})"
    ranks = f"count by ({RUN_BY}, phase) ({RANK_PHASE_MEAN})"
    yield Alert.of(
        k,
        SLOW_RANK,
        "warning",
        f"{RANK_PHASE_MEAN} / on({RUN_BY}, phase) group_left() ({median} > 0) > {k.factor:g}"
        f" and on({RUN_BY}, phase) ({ranks} >= {k.min_ranks})",
        "One rank is far slower than the other ranks of its run.",
        f"Phase {{{{ $labels.phase }}}} on rank {{{{ $labels.rank }}}} of run "
        f'{{{{ $labels.run_id }}}} takes {{{{ printf "%.3g" $value }}}}x the median of the '
        f"run's ranks (threshold {k.factor:g}x): a straggler holds every synchronous step back.",
        scope="run",
    )


def _slow_rank_scenarios(k: SlowRankKnobs) -> Iterator[Scenario]:
    inputs = []
    for rank, secs in (("0", 1.0), ("1", 1.0), ("2", 1.0), ("3", 3.0)):
        labels = {**TARGET, "rank": rank, "phase": "rollout"}
        inputs.append((_s(PHASE, labels, "_sum"), f"0+{6 * secs:g}x40"))
        inputs.append((_s(PHASE, labels, "_count"), "0+6x40"))
    slow = {"job": "rlpulse", "run_id": "r1", "rank": "3", "phase": "rollout"}
    yield Scenario(
        "Slow rank: four ranks log 6 rollouts a minute; ranks 0-2 take 1 s each, rank 3 takes "
        "3 s: 3x the median of 1 s, over the 2x threshold; fires after the 10m `for`.",
        tuple(inputs),
        (Check(SLOW_RANK, "8m"), Check(SLOW_RANK, "20m", (Expect("warning", slow, 3),))),
    )


def _s(metric: catalog.Metric, labels: dict[str, str], suffix: str = "") -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric.name}{suffix}{{{inner}}}"


HEALTHY_INPUTS = _stall_healthy
DEFS: tuple[AlertDef, ...] = (
    AlertDef(
        "training_stalled",
        "system",
        TrainingStalledKnobs,
        _stall_rules,
        {
            STALLED: Runbook(
                "The exporter still answers but the trainer has logged no step for many times "
                "its own median step interval (so runs with 20-minute steps are not paged "
                "between steps): the loop hangs (deadlock, stuck collective, waiting on a dead "
                "worker or grader).",
                panels.see(panels.TRAINING, panels.LIVENESS, panels.STEPS_RATE)
                + panels.SEPARATOR
                + panels.see(panels.SYSTEM, panels.PHASE_BREAKDOWN),
                (
                    "Dump the stacks of the trainer (py-spy dump) to see where it waits.",
                    "Check the phase that stopped finishing (rollout, reward, update, sync).",
                    "A run whose step times vary a lot (long evals) may need a larger "
                    "alerts.training_stalled.factor.",
                ),
            )
        },
        _stall_scenarios,
    ),
    AlertDef(
        "startup_hang",
        "system",
        StartupHangKnobs,
        _startup_rules,
        {
            STARTUP_HANG: Runbook(
                "The exporter has been up for the start-up timeout and the trainer has not "
                "logged a single step: it hangs before training (loading a model, a rendezvous "
                "that never completes, a data loader, a grader it waits for).",
                panels.see(panels.SYSTEM, panels.GPU_UTILIZATION, panels.GPU_MEMORY)
                + panels.SEPARATOR
                + panels.see(panels.TRAINING, panels.LIVENESS),
                (
                    "Dump the stacks of the trainer (py-spy dump); check the rendezvous of "
                    "every rank (one rank missing holds the others).",
                    "Raise alerts.startup_hang.timeout for models that take longer to load.",
                ),
            )
        },
        _startup_scenarios,
    ),
    AlertDef(
        "slow_rank",
        "system",
        SlowRankKnobs,
        _slow_rank_rules,
        {
            SLOW_RANK: Runbook(
                "One rank's mean time for a phase is several times the median of the run's "
                "ranks: a straggler (a slow or throttled GPU, a busy host, a bad link) that "
                "every synchronous step waits for.",
                panels.see(
                    panels.SYSTEM, panels.PHASE_DURATIONS, panels.GPU_BOARDS, panels.GPU_CLOCK
                ),
                (
                    "Compare the rank's GPU clocks, temperature and throttling with the others.",
                    "Check the node for other jobs (host CPU, memory) and its network links.",
                    "Exclude the node and restart from the last checkpoint if it persists.",
                ),
            )
        },
        _slow_rank_scenarios,
        _rank_phase,
    ),
)
