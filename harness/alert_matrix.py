"""Judging a real training's alerts: the step where the damage is visible in the logged reward
(or its cadence, for a stall), the first alert at or after the failure began, the lead in logged
steps, incidents after cause-based inhibition, alerts that resolved while the failure persisted;
and the same run seen live (exporter -> Prometheus -> Alertmanager -> PagerDuty stand-in).

Used by benchmarks/bench_alert_matrix.py and tests/e2e/test_alert_matrix.py.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import math
import re
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.stackutil import (
    RLPULSE,
    Sink,
    free_port,
    interruptible,
    results,
    rlpulse,
    wait_for,
)
from harness.trainings import Run
from rlpulse.offline.logs import read_log
from rlpulse.offline.replay import DEFAULT_STEP_SECONDS, ReplayResult, replay_runs
from rlpulse.offline.replay.onsets import AlertOnset
from rlpulse.runtime.exporter import Exporter
from rlpulse.stack import config
from rlpulse.stack.alerts import CAUSES, NONFINITE

SIGNAL = "rl_step_signal"
FAST_STEP_SECONDS = DEFAULT_STEP_SECONDS / config.FAST_FACTOR
DROP = 0.5  # the reward is damaged once below this share of its level before the failure
SLOW = 5.0  # a stall is visible once a step takes this many times the median step before it
ROUTING_KEY = "alert-matrix-routing-key-0123456789"


@dataclass
class Verdict:
    """What one run's alerts amount to, in logged steps."""

    alerts: list[str]  # "Name (severity) @step"
    caught: bool | None  # None: a healthy run
    first_alert: str | None
    first_alert_step: int | None
    visible_step: int | None
    lead: int | None  # logged steps from damage visible to first alert (negative: ahead)
    incidents: list[str]
    resolved_early: list[str]
    critical: list[str]
    signals: dict[str, list[float]] = field(default_factory=dict)  # missed: [min, max] after
    fast: dict[str, Any] = field(default_factory=dict)  # the same, replayed with fast rules
    live: dict[str, Any] = field(default_factory=dict)
    # the step the first alert's page names as the failure's onset ("since step"), and the
    # logged steps from the damage to it (0: the page names the step the damage showed)
    since_step: int | None = None
    since_rows: int | None = None


def judge(run: Run, result: ReplayResult) -> Verdict:
    """The verdict of ``result``, one replayed run of ``run``'s log."""
    steps = logged_steps(result)
    fired = [
        f"{a.alert} ({a.severity}) @{a.onset_step}"
        for a in result.alerts
        if a.onset_step is not None
    ]
    critical = sorted({a.alert for a in result.alerts if a.severity == "critical"})
    verdict = Verdict(fired, None, None, None, None, None, incidents(result), [], critical)
    if run.healthy:
        return verdict
    start = run.inject_step if run.inject_step is not None else steps[-1] + 1
    verdict.visible_step = visible_step(run, start)
    if run.scenario == "stall" and verdict.visible_step is not None:
        # the hang began after the last step logged before its gap: an alert during the gap
        # holds that step
        start = steps[max(_index(steps, verdict.visible_step) - 1, 0)]
    after = [a for a in result.alerts if a.onset_step is not None and a.onset_step >= start]
    verdict.caught = bool(after)
    if not after:
        verdict.signals = signal_range(result, start)
    if after:
        first = after[0]
        verdict.first_alert = f"{first.alert} ({first.severity})"
        verdict.first_alert_step = first.onset_step
        if verdict.visible_step is not None and first.onset_step is not None:
            verdict.lead = _index(steps, first.onset_step) - _index(steps, verdict.visible_step)
            verdict.since_step = first.since_step
            # an alert on no step signal (NaN loss, a stall): its page says "at step N", the
            # step it fired at
            since = first.onset_step if first.since_step is None else first.since_step
            verdict.since_rows = _index(steps, since) - _index(steps, verdict.visible_step)
        if run.scenario != "stall":  # a hang ends when the env answers again, its alert with it
            verdict.resolved_early = resolved_early(after, steps[-1])
    return verdict


def resolved_early(alerts: list[AlertOnset], last_step: int) -> list[str]:
    """Each end of an alert before the run's last step (a flap, or a last end): "Name
    (severity) ended @step", with "(again @step)" where it fired again."""
    out = []
    for a in alerts:
        for n, i in enumerate(a.intervals):
            if i.end_step is None or i.end_step >= last_step:
                continue
            again = f" (again @{a.intervals[n + 1].start_step})" if n + 1 < len(a.intervals) else ""
            out.append(f"{a.alert} ({a.severity}) ended @{i.end_step}{again}")
    return out


def signal_range(result: ReplayResult, start: int) -> dict[str, list[float]]:
    """[min, max] of every step signal (``rl_step_signal``) over the scrapes at or after logged
    step ``start``: what the rules saw in a run they did not alert on."""
    tl = result.timeline
    first = next(
        (i for i in range(tl.scrapes) if (tl.step_at(i * tl.interval) or -1) >= start), None
    )
    out: dict[str, list[float]] = {}
    for key, changes in tl.series.items():
        if not key.startswith(SIGNAL + "{") or first is None:
            continue
        labels = dict(re.findall(r'(signal|series)="([^"]*)"', key))
        name = "/".join(v for v in (labels.get("signal"), labels.get("series")) if v)
        held = [v for i, v in changes if i >= first]
        held += [v for i, v in changes if i < first][-1:]  # the value held into the window
        finite = [v for v in held if math.isfinite(v)]
        if finite:
            out[name] = [round(min(finite), 4), round(max(finite), 4)]
    return out


def logged_steps(result: ReplayResult) -> list[int]:
    """The run's distinct logged steps, in order: what a lead counts (a run folder's episodes
    share their row's step)."""
    return sorted(set(result.timeline.record_steps))


def _index(steps: list[int], step: int) -> int:
    return bisect.bisect_left(steps, step)


def visible_step(run: Run, start: int) -> int | None:
    """The first logged step at or after ``start`` where the reward is non-finite (or missing
    from a record like those that carried it) or below ``DROP`` of its best (per-step mean)
    before ``start``; for a stall, the first step that took
    ``SLOW`` times the median step time before it. None: never visible."""
    rewards: dict[int, list[float]] = {}
    times: dict[int, float] = {}
    shape: set[str] = set()  # the keys logged beside the reward key
    for rec in read_log(run.log, run.format):
        value = rec.values.get(run.reward_key)
        if value is None and len(shape & rec.values.keys()) > len(shape) // 2:
            value = math.nan  # no longer logged where it was: TRL logs a NaN metric as null
        elif value is not None and not shape:
            shape = set(rec.values)
        if isinstance(value, int | float):
            rewards.setdefault(rec.step, []).append(float(value))
        if rec.timestamp is not None:
            times.setdefault(rec.step, rec.timestamp)
    if run.scenario == "stall":
        return _slow_step(times, start)
    means = {s: sum(v) / len(v) for s, v in sorted(rewards.items())}
    finite = [(s, m) for s, m in means.items() if math.isfinite(m)]
    # a failure from the first step: measured against the first reading (the starting level)
    before = [m for s, m in finite if s < start] or [m for _, m in finite[:1]]
    if not before:
        return None
    best = max(before)
    return next(
        (s for s, m in means.items() if s >= start and not (math.isfinite(m) and m >= DROP * best)),
        None,
    )


def _slow_step(times: dict[int, float], start: int) -> int | None:
    stamps = sorted(times.items())
    gaps = [(s, t - prev) for (_, prev), (s, t) in itertools.pairwise(stamps)]
    usual = [g for s, g in gaps if s < start and g > 0]
    if not usual:
        return None
    limit = SLOW * statistics.median(usual)
    return next((s for s, g in gaps if s >= start and g > limit), None)


def incidents(result: ReplayResult) -> list[str]:
    """Critical alerts that would page, once a paging cause that fired first holds back its
    consequences (Alertmanager's cause-based inhibition)."""
    crit: dict[str, float] = {}
    for a in result.alerts:
        if a.severity == "critical":
            crit[a.alert] = min(crit.get(a.alert, math.inf), a.onset_seconds)
    causes = {NONFINITE: set(crit) - {NONFINITE}, **{c: set(e) for c, e in CAUSES.items()}}
    return [
        n
        for n, at in sorted(crit.items(), key=lambda kv: kv[1])
        if not any(n in fx and crit.get(c, math.inf) <= at for c, fx in causes.items())
    ]


FAST_FIELDS = (
    *("alerts", "caught", "first_alert", "first_alert_step"),
    *("lead", "since_rows", "incidents"),
)


def judge_fast(run: Run, verdict: Verdict) -> ReplayResult:
    """Replay ``run`` with the fast preset (1 s scrapes, durations / 60, as the live stack
    runs), note its verdict in ``verdict.fast``; the replay."""
    result = replay(run, fast=True)
    fast = judge(run, result)
    verdict.fast = {k: getattr(fast, k) for k in FAST_FIELDS}
    verdict.fast["critical"] = fast.critical
    return result


def replay(run: Run, *, fast: bool = False, rows: bool = False) -> ReplayResult:
    """``rlpulse replay`` of the run's own log: shipped rules, or the fast preset the live stack
    runs (``fast``; a log without times then takes a second per record, not a minute, or the
    ``pace`` it was trained at live); ``rows``: each logged step one scrape after the one before
    (``--clock rows``)."""
    cfg, step = (None, DEFAULT_STEP_SECONDS)
    if fast:
        cfg, step = config.fast(), run.pace or FAST_STEP_SECONDS
    (result,) = replay_runs(
        run.log,
        fmt=run.format,
        cfg=cfg,
        step_seconds=step,
        run_id=run.run_id,
        key_map=run.key_map,
        rows=rows,
    )
    return result


# ---- the live stack ---------------------------------------------------------------------------


@dataclass
class LiveStack:
    """``rlpulse stack up --fast`` with PagerDuty pointed at a stand-in on 127.0.0.1."""

    dir: Path
    prometheus: str
    pagerduty: Sink

    def exporter(self, run_id: str, key_map: dict[str, str] | None = None) -> Exporter:
        """An exporter for one run (with the user's ``key_map``), registered as a file_sd target
        of the stack. Its end waits up to 30 s for a last scrape (the default is 60 s): the wait
        ends at the first scrape, and a loaded machine's Prometheus can miss 5 s."""
        exp = Exporter(
            free_port(), addr="127.0.0.1", run_id=run_id, gpu=False, final_wait=30, key_map=key_map
        ).start()
        self.watch(run_id, f"127.0.0.1:{exp.port}")
        return exp

    def watch(self, run_id: str, instance: str) -> None:
        """Register ``instance`` (host:port) as a target; wait for its first scrape."""
        target = self.dir / "prometheus" / "targets" / f"{run_id}.json"
        target.write_text(json.dumps([{"targets": [instance]}]))
        wait_for(
            lambda: results(self.prometheus, f'up{{instance="{instance}"}} == 1'),
            30,
            f"the first scrape of {run_id}",
        )

    def seen(self, run_id: str, since: float) -> dict[str, Any]:
        """The alerts Prometheus fired for ``run_id`` since ``since`` and the PagerDuty incidents
        (distinct dedup keys of trigger events) opened for it."""
        time.sleep(4)  # a few evaluations and Alertmanager's fast group_wait after the run
        window = f"[{int(time.time() - since) + 5}s]"
        firing = results(
            self.prometheus,
            f'max_over_time(ALERTS{{run_id="{run_id}",alertstate="firing"}}{window})',
        )
        alerts = sorted({f"{r['metric']['alertname']} ({r['metric']['severity']})" for r in firing})
        triggers = [
            r.body
            for r in self.pagerduty.events(run_id=run_id)
            if r.body["event_action"] == "trigger"
        ]
        pages = sorted({b["payload"]["custom_details"]["alertname"] for b in triggers})
        return {
            "alerts": alerts,
            "pages": pages,
            "incidents": len({b["dedup_key"] for b in triggers}),
        }

    @contextlib.contextmanager
    def tailer(self, run_id: str, logdir: Path) -> Iterator[None]:
        """``rlpulse tail-tensorboard`` following ``logdir`` (made by the trainer) as a target
        of the stack; stopped with Ctrl-C (SIGINT) afterwards, which finishes its run."""
        port = free_port()
        proc = subprocess.Popen(
            [RLPULSE, "tail-tensorboard", "--wait", "--interval", "0.2", "--addr", "127.0.0.1",
             "--port", str(port), "--run-id", run_id, "--framework", "cleanrl", str(logdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=interruptible,
        )  # fmt: skip
        try:
            self.watch(run_id, f"127.0.0.1:{port}")
            yield
            time.sleep(1)  # the tailer's last poll
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def live_stack(workdir: Path) -> Iterator[LiveStack]:
    """The fast local stack, scraping only the file_sd targets this process registers."""
    d = workdir / "stack"
    sink = Sink()
    (workdir / "routing_key").write_text(ROUTING_KEY + "\n")
    (workdir / "overrides.yml").write_text(yaml.safe_dump({"scrape": {"static_targets": []}}))
    prom_port = free_port()
    up = rlpulse(
        "stack", "up", "--fast", "--dir", str(d), "--config", str(workdir / "overrides.yml"),
        "--pagerduty-url", sink.url, "--pagerduty-key-file", str(workdir / "routing_key"),
        "--prometheus-port", str(prom_port), "--alertmanager-port", str(free_port()),
        "--inbox-port", str(free_port()), "--rollouts-port", str(free_port()),
    )  # fmt: skip
    if up.returncode != 0:
        sink.shutdown()
        raise RuntimeError(f"rlpulse stack up failed: {up.stdout}{up.stderr}")
    try:
        yield LiveStack(d, f"http://127.0.0.1:{prom_port}", sink)
    finally:
        rlpulse("stack", "down", "--dir", str(d))
        sink.shutdown()


def end_live(exp: Exporter, run: Run) -> None:
    """End the live run as the trainer's process would: finished, or crashed with its error."""
    if run.crashed:
        exp.end("crashed", run.crashed, wait=5)
    else:
        exp.finish(wait=5)


def names(alerts: list[str]) -> set[str]:
    """Alert names of "Name (severity) ..." entries."""
    return {a.split(" ")[0] for a in alerts}


def row(run: Run, verdict: Verdict) -> dict[str, Any]:
    """One run's entry of alert-matrix.json."""
    return {
        "framework": run.framework,
        "scenario": run.scenario,
        "seed": run.seed,
        "run_id": run.run_id,
        "log_format": run.format,
        "inject_step": run.inject_step,
        "crashed": run.crashed,
        **asdict(verdict),
    }
