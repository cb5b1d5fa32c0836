"""Liveness alerts: a target that stopped answering, a run that crashed, and, relative to the
run's own cadence, a stall, a hang before the first step, and one rank far slower than the
others."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rlpulse.stack import panels
from rlpulse.stack.alerts import kit
from rlpulse.stack.alerts.inputs import TARGET, const, ramp, raw, series
from rlpulse.stack.alerts.kit import AGO, ID
from rlpulse.stack.knobs import seconds
from rlpulse.stack.metrics import (
    FINISHED,
    INTERVAL,
    LAST_LOG,
    LOGGED,
    OUTCOME,
    PHASE,
    PROGRESS,
    RUN_INFO,
    STARTED,
    STEP,
)
from rlpulse.stack.promql import record_name
from rlpulse.stack.query import RUN_BY, Query

RANK_PHASE_MEAN = record_name("rank_phase", PHASE, "mean")
TARGET_BY = "job, instance, run_id, rank"
RUN_BY_RANK = "job, run_id, rank"
CRASHED = 'outcome="crashed"'
UP = {"job": "rlpulse", "instance": "127.0.0.1:9400"}
_SERVING = (series(RUN_INFO, {**TARGET, "model": "tiny"}), const(1, 30))
# the run_info annotation of a page about the run _SERVING served
TINY = {"run_info": "model=tiny git_sha= framework= owner="}
TARGET_DOWN = "RLTargetDown"
RUN_CRASHED = "RLRunCrashed"
STALLED = "RLTrainingStalled"


# ---- target down -------------------------------------------------------------------------------


# Each run (rank) a target served, kept while the run has not said it ended: the last time it
# was served (its rl_run_info scraped), with its target and metadata. A latch: the rule reads its
# own previous value, so a run that died unannounced stays here however long ago it died, until
# the same run (run_id, rank) is served again (a resume, on any target), its target is dropped
# from discovery (the launcher removed it), or a scrape within windows.recent carried its end
# mark (read over that window, not at one evaluation: an evaluation can fall after the end's
# scrape was appended late and the next scrape failed). Another run taking the dead run's port
# does not let it go: that run is not the dead one's end. Prometheus 2.x and 3.x evaluate it
# alike; a Prometheus that stops evaluating for longer than its lookback delta (5m) forgets the
# runs that were dead then.
SERVED = record_name("target", RUN_INFO, "last_served")
RUN_META = ("model", "git_sha", "framework", "owner", "user")


def _ended(q: Query) -> str:
    """Each run's end mark as read over windows.recent: a run stays ended for the evaluations
    after its last scrape even when the next scrape already failed."""
    return f"last_over_time({q.s(FINISHED)}[{q.w.recent}])"


def _served(q: Query, k: Any) -> list[kit.RecordingRule]:
    live = (
        f"max by ({TARGET_BY}, {', '.join(RUN_META)}) (timestamp({q.s(RUN_INFO)}))"
        f" unless on({TARGET_BY}) {q.s(FINISHED)}"
    )
    kept = (
        f"{SERVED} and on(job, instance) {q.up()} unless on({RUN_BY_RANK}) {q.s(RUN_INFO)}"
        f" unless on({TARGET_BY}) {_ended(q)}"
    )
    return [kit.RecordingRule(SERVED, f"({live}) or ({kept})")]


def dead(q: Query) -> str:
    """When each run that is no longer served, and never said it ended, was last served, by
    target: its target stopped answering, or answers for another run."""
    return f"max by ({TARGET_BY}) ({SERVED} unless on({RUN_BY_RANK}) {q.s(RUN_INFO)})"


def _paging_on(minute: int) -> tuple[kit.Check, ...]:
    """r1, last scraped at 29m: quiet at 30m, paging at ``minute`` and still a day later."""
    return (kit.Check(TARGET_DOWN, "30m"),) + tuple(
        kit.Check(TARGET_DOWN, at, (kit.Expect("critical", TARGET, secs - 29 * 60, TINY),))
        for at, secs in ((f"{minute}m", minute * 60), ("26h", 26 * 3600))
    )


def _target_down_scenarios() -> Iterator[kit.Scenario]:
    up = raw("up", UP)
    yield kit.Scenario(
        "Target down: the exporter serves run r1 for 30 minutes, then every scrape fails "
        "(up 0, its series end). Fires 1m later with the run it last served and the time since its "
        "last sample (29m): 660 s at 40m, and still a day later (the run never said it "
        "ended), its metadata kept by the latch past rl_run_info's last day: 26h - 29m at 26h.",
        ((up, f"{const(1, 30)} {const(0, 1600)}"), _SERVING),
        _paging_on(40),
    )
    r2 = {**TARGET, "run_id": "r2", "model": "tiny"}
    yield kit.Scenario(
        "Killed, and a new run (r2) takes its port at once: r1's series go stale at 30m while "
        "the target keeps answering, for r2. r1 still pages, from 31m, naming the time since "
        "its last scrape (29m), and a day later; r2, alive, does not.",
        (
            (up, const(1, 1600)),
            (series(RUN_INFO, {**TARGET, "model": "tiny"}), f"{const(1, 30)} stale"),
            (series(RUN_INFO, r2), f"_x30 {const(1, 1570)}"),
        ),
        _paging_on(32),
    )
    moved = {**TARGET, "instance": "127.0.0.1:9401", "model": "tiny"}
    yield kit.Scenario(
        "Killed, then resumed under its run_id on another port at 40m (the dead target stays "
        "listed, down): it pages from 31m and resolves once the run is served again.",
        (
            (up, f"{const(1, 30)} {const(0, 30)}"),
            (raw("up", {**UP, "instance": moved["instance"]}), f"_x40 {const(1, 20)}"),
            (series(RUN_INFO, {**TARGET, "model": "tiny"}), f"{const(1, 30)} stale"),
            (series(RUN_INFO, moved), f"_x40 {const(1, 20)}"),
        ),
        (
            kit.Check(
                TARGET_DOWN, "35m", (kit.Expect("critical", TARGET, 35 * 60 - 29 * 60, TINY),)
            ),
            kit.Check(TARGET_DOWN, "45m"),
        ),
    )
    yield kit.Scenario(
        "Killed, then the launcher removes the target (up ends at 60m): it resolves once "
        "Prometheus no longer lists the target.",
        ((up, f"{const(1, 30)} {const(0, 30)}"), _SERVING),
        (
            kit.Check(
                TARGET_DOWN, "50m", (kit.Expect("critical", TARGET, 50 * 60 - 29 * 60, TINY),)
            ),
            kit.Check(TARGET_DOWN, "70m"),
        ),
    )
    yield kit.Scenario(
        "Finished run: finish() at 28m20s is carried by the last two scrapes, then the exporter "
        "stops (up 0): the run ended on purpose, nothing pages.",
        (
            (up, f"{const(1, 30)} {const(0, 30)}"),
            _SERVING,
            (series(FINISHED), f"_x28 {const(28 * 60 + 20, 2)}"),
        ),
        (kit.Check(TARGET_DOWN, "40m"), kit.Check(TARGET_DOWN, "58m")),
    )
    yield kit.Scenario(
        "A finished run's target serves a new run from 20m (no finish mark), which dies at 60m: "
        "the old mark does not hide it, it fires with the new run's last sample (59m).",
        (
            (up, f"{const(1, 60)} {const(0, 20)}"),
            (series(RUN_INFO, {**TARGET, "model": "tiny"}), const(1, 60)),
            (series(FINISHED), f"_x8 {const(9 * 60, 2)}"),
        ),
        (
            kit.Check(
                TARGET_DOWN, "70m", (kit.Expect("critical", TARGET, 70 * 60 - 59 * 60, TINY),)
            ),
        ),
    )


# ---- run crashed -------------------------------------------------------------------------------


# The alerts that were firing when each run ended, valued at its end time: a run that ended
# does not cure its failure, and once its alerts resolve (the run's series are gone) this is
# where the dashboards still show them. A latch like SERVED, cleared when the same run_id
# serves again without an end mark, and after END_KEEP.
ENDED_FIRING = record_name("run", OUTCOME, "firing_at_end")
END_KEEP = 7 * 86400


def _ended_firing(q: Query, k: Any) -> list[kit.RecordingRule]:
    ended = f"max by (job, run_id) ({_ended(q)})"
    firing = 'ALERTS{alertstate="firing", run_id!=""}'
    new = (
        f"max by (job, run_id, alertname, severity) ({firing}) * 0"
        f" + on(job, run_id) group_left() {ended}"
    )
    serving = f"({q.s(RUN_INFO)} unless on(job, run_id) {ended})"
    kept = f"({ENDED_FIRING} > (time() - {END_KEEP})) unless on(job, run_id) {serving}"
    return [kit.RecordingRule(ENDED_FIRING, f"({new}) or ({kept})")]


def _run_crashed_scenarios() -> Iterator[kit.Scenario]:
    crashed = {**TARGET, "outcome": "crashed", "reason": "ValueError"}
    end = 29 * 60 - 10
    meta = {"model": "qwen2.5-0.5b", "git_sha": "1a2b3c4", "framework": "trl", "owner": "alice"}
    run_info = {"run_info": " ".join(f"{k}={v}" for k, v in meta.items())}
    yield kit.Scenario(
        "Crashed run: an uncaught ValueError at 28m50s; the last scrape (29m) carries the end "
        "mark and the outcome, then the exporter stops (up 0). RLRunCrashed fires at once "
        "naming the reason and the seconds since the end (70 s at 30m), with the run's "
        "metadata (read from the run's last day of rl_run_info); RLTargetDown stays quiet (the "
        "crash is the page).",
        (
            (raw("up", UP), f"{const(1, 30)} {const(0, 30)}"),
            (series(RUN_INFO, {**TARGET, **meta}), const(1, 30)),
            (series(FINISHED), f"_x29 {end}"),
            (series(OUTCOME, crashed), "_x29 1"),
        ),
        (
            kit.Check(RUN_CRASHED, "28m"),
            kit.Check(
                RUN_CRASHED, "30m", (kit.Expect("critical", crashed, 30 * 60 - end, run_info),)
            ),
            kit.Check(
                RUN_CRASHED, "50m", (kit.Expect("critical", crashed, 50 * 60 - end, run_info),)
            ),
            kit.Check(TARGET_DOWN, "50m"),
        ),
    )


# ---- stall -------------------------------------------------------------------------------------


def _still(name: str) -> str:
    """Alert ``name`` firing now, with the labels of the series it fired on (not those the
    rule and Prometheus add)."""
    added = "alertname, alertstate, severity, layer, team, cluster"
    return f'max without ({added}) (ALERTS{{alertname="{name}",alertstate="firing"}})'


def _stall(q: Query, k: Any) -> str:
    # progress of any kind: a logged step or a heartbeat (an evaluation batch, a checkpoint
    # save); exporters older than the heartbeat export only the step's time
    since = f"(time() - ({q.s(PROGRESS)} or {q.s(LAST_LOG)}))"
    wait = (
        f"clamp_min({q.s(INTERVAL)} * {k.factor:g}, {seconds(k.min_wait):g})"
        f" or ({q.s(LAST_LOG)} * 0 + {seconds(k.first_steps_wait):g})"
    )
    return (
        f"({since} > ({wait})) and on(job, instance) ({q.s(LOGGED)} > 0)"
        f" unless on(job, run_id, rank) {q.s(FINISHED)}"  # a finished run kept by a Pushgateway
        # a stalled run whose target then died stays stalled (held back by RLTargetDown): its
        # series ending is no recovery, and must not send a resolve
        f" or ({_still(STALLED)} * 0 + on({TARGET_BY}) group_left() (time() - {dead(q)}))"
    )


def _stall_scenarios() -> Iterator[kit.Scenario]:
    ts = {**TARGET}
    # a step a minute for 30 minutes, then nothing: the exporter keeps serving the last stamp
    stamps = " ".join(str(60 * i) for i in range(30)) + f" {1740}x29"
    yield kit.Scenario(
        "Stall: a step a minute for 30m (interval 60 s), then the loop hangs at 29m while the "
        "exporter answers. 5 x 60 s < 5m, so it fires once 5m pass without a step (34m) plus "
        "the 1m `for`; its value is the time since the last step.",
        (
            (series(LAST_LOG, ts), stamps),
            (series(INTERVAL, ts), "60x59"),
            (series(LOGGED, ts), "1+1x29 30x29"),
        ),
        (
            kit.Check(STALLED, "33m"),
            kit.Check(STALLED, "36m", (kit.Expect("critical", ts, 36 * 60 - 1740),)),
        ),
    )
    # one step every 19 minutes: the old fixed 15-minute window paged at every step
    slow = " ".join(str(1140 * (i // 19)) for i in range(120))
    # steps stop at 29m while an evaluation sends heartbeats until 45m; then nothing
    beats = " ".join(str(60 * min(i, 45)) for i in range(70))
    yield kit.Scenario(
        "An evaluation is no stall: a step a minute for 30m, then an evaluation logs no step "
        "for 16 minutes but sends heartbeats (rl_last_progress_timestamp_seconds) every "
        "minute: no stall; its heartbeats stop at 45m, so it fires 5m + 1m later.",
        (
            (series(LAST_LOG, ts), " ".join(str(60 * i) for i in range(30)) + " 1740x39"),
            (series(PROGRESS, ts), beats),
            (series(INTERVAL, ts), "60x69"),
            (series(LOGGED, ts), "1+1x29 30x39"),
        ),
        (
            kit.Check(STALLED, "40m"),
            kit.Check(STALLED, "45m"),
            kit.Check(STALLED, "52m", (kit.Expect("critical", ts, 52 * 60 - 45 * 60),)),
        ),
    )
    yield kit.Scenario(
        "Slow steps are not a stall: one step every 19 minutes (interval 1140 s); 5 intervals "
        "are 95 minutes, so the gaps between steps never fire.",
        (
            (series(LAST_LOG, ts), slow),
            (series(INTERVAL, ts), "1140x119"),
            (series(LOGGED, ts), " ".join(str(1 + i // 19) for i in range(120))),
        ),
        tuple(kit.Check(STALLED, f"{m}m") for m in (18, 37, 56, 75, 94, 113)),
    )
    yield kit.Scenario(
        "Stall, then kill -9: the loop hangs at 29m (stall fires at 36m), the process is "
        "killed at 40m (up 0, every series ends). The stall stays firing while the dead run "
        "never said it ended (RLTargetDown holds it back): no resolve as if it recovered. Its "
        "value is then the time since the target last served the run (39m).",
        (
            (raw("up", UP), f"{const(1, 40)} {const(0, 200)}"),
            (series(RUN_INFO, {**TARGET, "model": "tiny"}), const(1, 40)),
            (series(LAST_LOG, ts), " ".join(str(60 * i) for i in range(30)) + f" {1740}x9"),
            (series(INTERVAL, ts), "60x39"),
            (series(LOGGED, ts), "1+1x29 30x9"),
        ),
        (
            kit.Check(STALLED, "36m", (kit.Expect("critical", ts, 36 * 60 - 1740, TINY),)),
            kit.Check(STALLED, "3h", (kit.Expect("critical", ts, 3 * 3600 - 39 * 60, TINY),)),
            kit.Check(TARGET_DOWN, "3h", (kit.Expect("critical", ts, 3 * 3600 - 39 * 60, TINY),)),
        ),
    )
    yield kit.Scenario(
        "A finished run kept by a Pushgateway (rl_run_finished_timestamp_seconds present) is not "
        "a stall however old its last step.",
        (
            (series(LAST_LOG, ts), "0x59"),
            (series(INTERVAL, ts), "60x59"),
            (series(LOGGED, ts), "10x59"),
            (series(FINISHED, ts), "0x59"),
        ),
        (kit.Check(STALLED, "50m"),),
    )


def healthy_inputs(n: int) -> tuple[tuple[str, str], ...]:
    """A live run stepping once a minute for ``n`` samples; a second static target that never
    served a run is down all along."""
    return (
        (raw("up", UP), const(1, n)),
        (raw("up", {**UP, "instance": "127.0.0.1:9401"}), const(0, n)),
        (series(RUN_INFO, {**TARGET, "model": "tiny"}), const(1, n)),
        (series(STEP), ramp(1, 1, n)),
        (series(LAST_LOG, TARGET), f"0+60x{n - 1}"),
        (series(INTERVAL, TARGET), f"60x{n - 1}"),
        (series(LOGGED, TARGET), f"1+1x{n - 1}"),
        (series(STARTED, TARGET), f"0x{n - 1}"),
    )


# ---- startup hang ------------------------------------------------------------------------------


STARTUP_HANG = "RLStartupHang"


def _startup_scenarios() -> Iterator[kit.Scenario]:
    yield kit.Scenario(
        "Start-up hang: the exporter starts at 0 and the trainer never logs a step; after the "
        "1h timeout it fires with the time since the start.",
        ((series(STARTED, TARGET), "0x89"), (series(LOGGED, TARGET), "0x89")),
        (
            kit.Check(STARTUP_HANG, "59m"),
            kit.Check(STARTUP_HANG, "70m", (kit.Expect("critical", TARGET, 70 * 60),)),
        ),
    )
    yield kit.Scenario(
        "A slow start is not a hang once the first step is logged (at 40m).",
        ((series(STARTED, TARGET), "0x89"), (series(LOGGED, TARGET), "0x39 1+1x49")),
        (kit.Check(STARTUP_HANG, "70m"),),
    )


# ---- one slow rank -----------------------------------------------------------------------------


SLOW_RANK = "RLSlowRank"


def _rank_phase(q: Query, k: Any) -> list[kit.RecordingRule]:
    by = f"{RUN_BY}, rank, phase"
    return [
        kit.RecordingRule(
            RANK_PHASE_MEAN,
            f"sum by ({by}) ({q.rate(PHASE, suffix='_sum')}) / "
            f"sum by ({by}) ({q.rate(PHASE, suffix='_count')})",
        )
    ]


def _slow_rank(q: Query, k: Any) -> str:
    median = f"quantile by ({RUN_BY}, phase) (0.5, {RANK_PHASE_MEAN})"
    ranks = f"count by ({RUN_BY}, phase) ({RANK_PHASE_MEAN})"
    return (
        f"{RANK_PHASE_MEAN} / on({RUN_BY}, phase) group_left() ({median} > 0) > {k.factor:g}"
        f" and on({RUN_BY}, phase) ({ranks} >= {k.min_ranks})"
    )


def _slow_rank_scenarios() -> Iterator[kit.Scenario]:
    inputs = []
    for rank, secs in (("0", 1.0), ("1", 1.0), ("2", 1.0), ("3", 3.0)):
        labels = {**TARGET, "rank": rank, "phase": "rollout"}
        inputs.append((series(PHASE, labels, "_sum"), f"0+{6 * secs:g}x40"))
        inputs.append((series(PHASE, labels, "_count"), "0+6x40"))
    slow = {"job": "rlpulse", "run_id": "r1", "rank": "3", "phase": "rollout"}
    yield kit.Scenario(
        "Slow rank: four ranks log 6 rollouts a minute; ranks 0-2 take 1 s each, rank 3 takes "
        "3 s: 3x the median of 1 s, over the 2x threshold; fires after the 10m `for`.",
        tuple(inputs),
        (
            kit.Check(SLOW_RANK, "8m"),
            kit.Check(SLOW_RANK, "20m", (kit.Expect("warning", slow, 3),)),
        ),
    )


_BEFORE = "How long before firing."
DEFS: tuple[kit.AlertDef, ...] = (
    kit.ThresholdAlert(
        name=TARGET_DOWN,
        doc="A trainer exporter that served a run within the baseline window is down.",
        settings={"for_": "1m"},
        severity="critical",
        records=_served,
        expr=lambda q, k: f"time() - {dead(q)}",
        summary="A trainer exporter that was serving a run no longer serves it, and the run "
        "never said it ended.",
        description=f"{ID} was last scraped on {{{{ $labels.instance }}}} (job "
        f"{{{{ $labels.job }}}}) {AGO} ago and never said it ended: the trainer died, hung hard "
        "or lost its network (the target no longer answers, or answers for another run that "
        "took its port). This pages until the run is marked ended or served again, its target "
        "is removed or it is silenced.",
        runbook=kit.Runbook(
            "A run that never said it ended is no longer served: its exporter cannot be "
            "scraped, or its port now serves another run (the next run took the free "
            "port). The process died (kill -9, the OOM killer, a lost node), hung hard, or "
            "lost its network. It keeps paging, however long ago the run died, until a "
            "last scrape carries the run's end mark, the same run (run_id and rank) is "
            "served again (a resume, on any port), its target is removed from discovery, "
            "or someone silences it: a dead run does not heal, and another run on its "
            "port is not its end. "
            f"The run is kept by the recording rule {SERVED} (a latch that reads its own "
            "previous value; Prometheus 2.42 and 3.x evaluate it alike, and a Prometheus "
            "that stops evaluating rules for longer than its 5m lookback forgets the dead "
            "runs it kept). The run's other alerts on that target, and a RLTrainingStalled "
            "of the same run (which keeps firing rather than resolve as if it recovered), "
            "are held back while this fires; the alerts of a run that took its port are "
            "not.",
            panels.see_in((panels.SYSTEM, panels.COLLECTORS), (panels.TRAINING, panels.LIVENESS)),
            (
                "First: is the process alive? Check the trainer's process and its last log "
                "lines (OOM killer in dmesg, an NCCL timeout, a node failure).",
                "Restart from the checkpoint the page names (resume under the same run_id "
                "resolves it), or end the incident: silence it with the run_id matcher, or "
                "remove the run's file_sd target (delete its file; when another run took "
                "its port, the target stays listed for that run: silence it).",
                "A run that ends (rlpulse.finish(), a normal interpreter exit, or a crash, "
                "which RLRunCrashed pages) has a last scrape carry its end mark and this "
                "alert stays quiet. If it paged for a run that did end, that last scrape "
                "never came (the exit wait, RLPULSE_FINAL_WAIT, was shorter than the scrape "
                "interval): raise the wait.",
            ),
        ),
        tests=tuple(_target_down_scenarios()),
    ),
    kit.ThresholdAlert(
        name=RUN_CRASHED,
        doc="The run ended in an uncaught exception or a non-zero sys.exit (rl_run_outcome).",
        settings={"for_": "0s"},
        severity="critical",
        records=_ended_firing,
        expr=lambda q, k: (
            f"max_over_time({q.s(OUTCOME, CRASHED)}[{q.w.baseline}]) * on({TARGET_BY}) "
            f"group_left() (time() - max_over_time({q.s(FINISHED)}[{q.w.baseline}]))"
        ),
        summary="A run ended in an uncaught exception or a non-zero exit status.",
        description=f"{ID} on {{{{ $labels.instance }}}} crashed {AGO} ago: "
        "{{ $labels.reason }}.",
        runbook=kit.Runbook(
            "The trainer process ended in an uncaught exception (in any thread) or called "
            "sys.exit with a non-zero status; rlpulse exported the outcome (rl_run_outcome, "
            "reason: the exception type or the exit status) in a last scrape or a push. "
            "RLTargetDown stays quiet for it: this alert is the page.",
            panels.see(panels.TRAINING, panels.LIVENESS, panels.STEPS_RATE),
            (
                "Read the traceback at the end of the trainer's log; the reason label names "
                "the exception type.",
                "Resume from the last checkpoint once the cause is fixed.",
                "A Pushgateway keeps the crashed run's series until its group is deleted: "
                "curl -X DELETE <pushgateway>/metrics/job/rlpulse/run_id/<run_id>/rank/<rank>.",
            ),
        ),
        tests=tuple(_run_crashed_scenarios()),
    ),
    kit.ThresholdAlert(
        name=STALLED,
        doc="No logged step for many of the run's own step intervals while the exporter is up.",
        settings={
            "for_": kit.Knob("1m", _BEFORE),
            "factor": kit.Knob(5.0, "Fire after this many of the run's own median step intervals."),
            "min_wait": kit.Knob("5m", "...and never before this long without a step."),
            "first_steps_wait": kit.Knob(
                "30m", "Wait for a run that has logged one step (no interval known yet)."
            ),
        },
        severity="critical",
        expr=_stall,
        summary="The trainer logged no step for many of its own step intervals while its "
        "exporter is up.",
        description=lambda q, k: (
            f"{ID} logged nothing for {{{{ $value | humanizeDuration }}}} "
            f"(more than {k.factor:g} times its own median step interval, and at least "
            f"{k.min_wait}) while its exporter still answers."
        ),
        runbook=kit.Runbook(
            "The exporter still answers but the trainer has made no progress of any kind "
            "(no logged step, no heartbeat of an evaluation or a checkpoint save: the TRL "
            "integration sends one per evaluation batch, Exporter.progress() does it by "
            "hand) for many times its own median step interval (so runs with 20-minute "
            "steps are not paged between steps): the loop hangs (deadlock, stuck "
            "collective, waiting on a dead worker or grader).",
            panels.see_in(
                (panels.TRAINING, panels.LIVENESS, panels.STEPS_RATE),
                (panels.SYSTEM, panels.PHASE_BREAKDOWN),
            ),
            (
                "Dump the stacks of the trainer (py-spy dump) to see where it waits.",
                "Check the phase that stopped finishing (rollout, reward, update, sync).",
                "A run whose step times vary a lot (long evals) may need a larger "
                "alerts.training_stalled.factor.",
            ),
        ),
        tests=tuple(_stall_scenarios()),
    ),
    kit.ThresholdAlert(
        name=STARTUP_HANG,
        doc="The exporter started but the trainer never logged its first step.",
        settings={
            "for_": kit.Knob("0s", _BEFORE),
            "timeout": kit.Knob(
                "1h", "Fire when no step was logged this long after the exporter started."
            ),
        },
        severity="critical",
        expr=lambda q, k: (
            f"(time() - {q.s(STARTED)} > {seconds(k.timeout):g}) and on(job, instance) "
            f"({q.s(LOGGED)} == 0)"
        ),
        summary="The trainer has not logged its first step long after its exporter started.",
        description=lambda q, k: (
            f"{ID} started {{{{ $value | humanizeDuration }}}} ago and has logged no step yet "
            f"(threshold {k.timeout}): it hangs in start-up (model loading, a rendezvous, data)."
        ),
        runbook=kit.Runbook(
            "The exporter has been up for the start-up timeout and the trainer has not "
            "logged a single step: it hangs before training (loading a model, a rendezvous "
            "that never completes, a data loader, a grader it waits for).",
            panels.see_in(
                (panels.SYSTEM, panels.GPU_UTILIZATION, panels.GPU_MEMORY),
                (panels.TRAINING, panels.LIVENESS),
            ),
            (
                "Dump the stacks of the trainer (py-spy dump); check the rendezvous of "
                "every rank (one rank missing holds the others).",
                "Raise alerts.startup_hang.timeout for models that take longer to load.",
            ),
        ),
        tests=tuple(_startup_scenarios()),
    ),
    kit.ThresholdAlert(
        name=SLOW_RANK,
        doc="One rank's phase takes far longer than the same phase on the run's other ranks.",
        settings={
            "for_": kit.Knob("10m", _BEFORE),
            "factor": kit.Knob(
                2.0, "Fire when a rank's mean phase time is this many times the median."
            ),
            "min_ranks": kit.Knob(3, "Only for runs with at least this many ranks."),
        },
        severity="warning",
        records=_rank_phase,
        expr=_slow_rank,
        summary="One rank is far slower than the other ranks of its run.",
        description=lambda q, k: (
            f"Phase {{{{ $labels.phase }}}} on rank {{{{ $labels.rank }}}} of run "
            f'{{{{ $labels.run_id }}}} takes {{{{ printf "%.3g" $value }}}}x the median of the '
            f"run's ranks (threshold {k.factor:g}x): a straggler holds every synchronous step "
            "back."
        ),
        scope="run",
        runbook=kit.Runbook(
            "One rank's mean time for a phase is several times the median of the run's "
            "ranks: a straggler (a slow or throttled GPU, a busy host, a bad link) that "
            "every synchronous step waits for.",
            panels.see(panels.SYSTEM, panels.PHASE_DURATIONS, panels.GPU_BOARDS, panels.GPU_CLOCK),
            (
                "Compare the rank's GPU clocks, temperature and throttling with the others.",
                "Check the node for other jobs (host CPU, memory) and its network links.",
                "Exclude the node and restart from the last checkpoint if it persists.",
            ),
        ),
        tests=tuple(_slow_rank_scenarios()),
    ),
)
