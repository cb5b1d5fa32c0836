"""On-call drill: what reaches the person paged, checked page by page (issue 23).

A real ``rlpulse stack`` (fast preset: Prometheus, Alertmanager, and the inbox standing in for
PagerDuty on 127.0.0.1) watches demo trainers; every PagerDuty event the inbox receives is read
and checked against what the run really did:

* ``kl-blowup --onset 60 --save-every 25`` without and with ``RLPULSE_ON_ALERT`` (the failure
  begins at step 61, the first step trained with the blow-up settings): the page names "since
  step 61", last good step 60 and checkpoint-50 from its first notification;
* ``reward-hacking``: the page names the true objective's value and where the hack began;
* ``stall`` then ``kill -9``: RLTargetDown pages with the run's metadata and stays firing (no
  resolve) while the run never said it ended; RLTrainingStalled sends no resolve;
* every page's dashboard link is pinned around the alert's start (from/to in epoch ms);
* Alertmanager stopped: the heartbeat checker pages RLWatchdogMissing itself.

The harness shared by ``benchmarks/oncall_drill.py`` (``python -m benchmarks.oncall_drill``
writes the table to docs/oncall-drill.md: per page, what it said and whether it was right) and
``tests/e2e/test_oncall_drill.py`` (a fast subset). A TRL GRPO run with evaluations (point 2 of the
issue) is not part of it yet.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.stackutil import free_port, interruptible, results, wait_for
from rlpulse.offline import stackrun
from rlpulse.runtime.exporter import Exporter

ONSET = 60  # --onset: steps 1-60 train healthy, 61 on with the scenario's settings
SAVE_EVERY = 25
STEP_DELAY = 0.1
TRL_STEPS = 40


@dataclass
class Check:
    """One page and what the drill found about it."""

    scenario: str
    alert: str
    said: str
    right: bool
    why: str


@dataclass
class Stack:
    """A running fast stack whose inbox stands in for PagerDuty."""

    dir: Path
    services: dict[str, stackrun.Service]
    targets: list[str] = field(default_factory=list)

    @property
    def alertmanager(self) -> str:
        return self.services["alertmanager"].url

    def pages(self, run_id: str, alert: str = "", action: str = "trigger") -> list[dict[str, Any]]:
        """PagerDuty events of ``run_id`` (and ``alert``) the inbox received, oldest first."""
        out = []
        for note in stackrun.notifications(self.dir):
            body = note["body"]
            if note["path"] != "/pagerduty" or body.get("event_action") != action:
                continue
            details = body["payload"]["custom_details"]
            if details.get("run_id") == run_id and (not alert or details["alertname"] == alert):
                out.append(body)
        return out


@contextmanager
def stack(d: Path, ports: list[int]) -> Iterator[Stack]:
    """``rlpulse stack up --fast`` into ``d`` on free ports, scraping the demo ``ports``."""
    targets = [f"127.0.0.1:{p}" for p in ports]
    (d / "overrides.yml").write_text(
        yaml.safe_dump({"scrape": {"static_targets": targets, "file_sd": []}})
    )
    opts = stackrun.StackOptions(
        dir=d,
        fast=True,
        config=d / "overrides.yml",
        **{f"{n}_port": free_port() for n in ("prometheus", "alertmanager", "inbox", "rollouts")},
    )
    stackrun.write_files(opts, stackrun.stack_config(opts))
    services = {s.name: s for s in stackrun.services(opts)}
    try:
        for svc in services.values():
            stackrun.start(svc, d)
            pid = svc.name
            wait_for(lambda: stackrun.running_pid(d, pid), 10, pid)  # noqa: B023
            stackrun.wait_ready(svc, d)
        yield Stack(d, services, targets)
    finally:
        stackrun.down(d)


def demo(
    d: Path, port: int, run_id: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A demo trainer on ``port`` (its output in ``d/<run_id>.log``)."""
    argv = [
        *(sys.executable, "-m", "rlpulse.cli", "demo", "--port", str(port), "--addr", "127.0.0.1"),
        *("--run-id", run_id, "--step-delay", str(STEP_DELAY), "--no-rollouts", *args),
    ]
    log = (d / f"{run_id}.log").open("wb")
    return subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        preexec_fn=interruptible,
    )


def pinned(link: str) -> bool:
    """A dashboard link with an absolute time range (from/to in epoch ms) and the run."""
    return bool(re.search(r"var-run_id=[^&]+.*&from=\d{13}&to=\d{13}$", link))


def said(page: dict[str, Any]) -> str:
    """What the page said: its summary and where to resume."""
    details = page["payload"]["custom_details"]
    text = page["payload"]["summary"]
    if details.get("last_good"):
        text += f" [{details['last_good']}]"
    return text.replace("|", "/")


def _kl(s: Stack, d: Path, port: int, acting: bool) -> list[Check]:
    name = "kl-blowup --onset 60 --save-every 25" + (" + RLPULSE_ON_ALERT" if acting else "")
    run_id = f"drill-kl{'-act' if acting else ''}"
    env = (
        {
            # the KL alert stops it, and only that alert: the drill checks its page and stop
            "RLPULSE_ON_ALERT": "RLKLReferenceHigh=stop,critical=none",
            "RLPULSE_ALERTMANAGER_URL": s.alertmanager,
            "RLPULSE_ALERT_POLL_INTERVAL": "1",
        }
        if acting
        else {}
    )
    ckpt = d / run_id
    proc = demo(
        d,
        port,
        run_id,
        *("--scenario", "kl-blowup", "--onset", str(ONSET), "--steps", "400"),
        *("--save-every", str(SAVE_EVERY), "--checkpoints", str(ckpt)),
        env=env,
    )
    try:
        page = wait_for(lambda: (s.pages(run_id, "RLKLReferenceHigh") or [None])[0], 240, name)
    finally:
        if not acting:
            proc.send_signal(signal.SIGINT)
        proc.wait(120)
    details = page["payload"]["custom_details"]
    desc, good = details["description"], details.get("last_good", "")
    first = f"since step {ONSET + 1} " in desc
    resume = f"last good step {ONSET}; resume from " in good and "checkpoint-50" in good
    link = pinned(details["dashboard"])
    why = (
        f"first page names the onset ({ONSET + 1}): {first}; last good {ONSET} and "
        f"checkpoint-50: {resume}; dashboard pinned: {link}"
    )
    out = [Check(name, "RLKLReferenceHigh", said(page), first and resume and link, why)]
    if acting:
        log = (d / f"{run_id}.log").read_text()
        line = next((x for x in log.splitlines() if x.startswith("rlpulse: stopped")), "")
        ok = "checkpoint-50" in line and f"last good step {ONSET}" in line
        out.append(
            Check(
                name,
                "(the run's stop line)",
                line,
                ok,
                "names checkpoint-50 and the last good step",
            )
        )
    return out


def _hacking(s: Stack, d: Path, port: int) -> list[Check]:
    run_id = "drill-hack"
    proc = demo(d, port, run_id, "--scenario", "reward-hacking", "--steps", "2000")
    try:
        page = wait_for(lambda: (s.pages(run_id, "RLRewardHacking") or [None])[0], 300, "hack")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    details = page["payload"]["custom_details"]
    desc = details["description"]
    ok = "The true objective toy-arith (eval) is now" in desc and "since step" in desc
    why = "names the objective's value now and the onset step; dashboard pinned"
    link = pinned(details["dashboard"])
    return [Check("reward-hacking", "RLRewardHacking", said(page), ok and link, why)]


def _killed(s: Stack, d: Path, port: int, hold: float) -> list[Check]:
    run_id = "drill-stall"
    proc = demo(d, port, run_id, "--scenario", "stall", "--steps", "400")
    stalled = wait_for(lambda: (s.pages(run_id, "RLTrainingStalled") or [None])[0], 180, "stall")
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    down = wait_for(lambda: (s.pages(run_id, "RLTargetDown") or [None])[0], 120, "target down")
    time.sleep(hold)
    resolved = [
        p["payload"]["custom_details"]["alertname"] for p in s.pages(run_id, action="resolve")
    ]
    run = down["payload"]["custom_details"].get("run", "")
    named = "model=toy-loglinear-policy" in run
    return [
        Check(
            "stall",
            "RLTrainingStalled",
            said(stalled),
            not resolved,
            f"no resolve after kill -9 ({hold:.0f} s held): {resolved or 'none'}",
        ),
        Check(
            "stall, kill -9",
            "RLTargetDown",
            said(down),
            named and not resolved,
            f"run metadata survives the dead target ({run!r}); still firing after {hold:.0f} s",
        ),
    ]


def _taken(s: Stack, d: Path, port: int, hold: float) -> list[Check]:
    """kill -9, and the next run takes the free port at once: the target never goes down."""
    dead, after = "drill-dead", "drill-next"
    prom = s.services["prometheus"].url
    instance = f'instance="127.0.0.1:{port}"'
    proc = demo(d, port, dead, "--steps", "100000")
    wait_for(lambda: results(prom, f'rl_step{{run_id="{dead}"}} > 20'), 60, "steps scraped")
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    nxt = demo(d, port, after, "--steps", str(int(2 * hold / STEP_DELAY)))
    try:
        down = wait_for(lambda: (s.pages(dead, "RLTargetDown") or [None])[0], 120, "the page")
        time.sleep(hold)
        resolved = s.pages(dead, action="resolve")
        others = [p["payload"]["custom_details"]["alertname"] for p in s.pages(after)]
        served = bool(results(prom, f'rl_step{{run_id="{after}",{instance}}}'))
    finally:
        try:
            nxt.wait(120)  # it ends on its own (finish(): no page), not killed
        except subprocess.TimeoutExpired:
            nxt.kill()
            nxt.wait(30)
    return [
        Check(
            "kill -9, the next run on its port at once",
            "RLTargetDown",
            said(down),
            served and not resolved and not others,
            f"the next run serves the port ({served}); the dead run still paged after "
            f"{hold:.0f} s ({len(resolved)} resolves); the next run paged "
            f"{others or 'nothing'}",
        )
    ]


def _trl_eval(s: Stack, d: Path, port: int, heartbeats: bool) -> list[Check]:
    """A healthy TRL GRPO run (tiny local model, a step every ~0.3 s) evaluating every 10
    steps on enough prompts that each evaluation lasts far longer than the stall level (5 s
    and 5 step intervals in the fast preset): no page. Without the callback's heartbeats
    (``heartbeats=False``: the exporter ignores ``progress()``) the same run pages a stall,
    which shows the evaluations are long enough to matter."""
    from harness import trl_grpo

    run_id = f"drill-trl-eval{'' if heartbeats else '-silent'}"
    exp = Exporter(port, addr="127.0.0.1", run_id=run_id, gpu=False, final_wait=5).start()
    if not heartbeats:
        exp.progress = lambda: None  # type: ignore[method-assign]
    try:
        run = trl_grpo.train_grpo(
            "healthy", 0, d, steps=TRL_STEPS, exporter=exp, eval_every=10, eval_prompts=20000
        )
    finally:
        exp.finish(wait=5)
    time.sleep(5)  # a few evaluations and Alertmanager's fast group_wait after the run
    history = json.loads(run.log.read_text())["log_history"]
    evals = [r["eval_runtime"] for r in history if "eval_runtime" in r]
    pages = sorted({p["payload"]["custom_details"]["alertname"] for p in s.pages(run_id)})
    text = (
        f"{len(evals)} evaluations of {min(evals):.1f}-{max(evals):.1f} s in {TRL_STEPS} steps "
        f"of ~{trl_grpo.LIVE_PACE} s; pages: {', '.join(pages) or 'none'}"
    )
    if heartbeats:
        why = "evaluation is progress (the TRL callback's heartbeats): no stall page"
        return [Check("TRL GRPO, eval every 10 steps", "(none)", text, not pages, why)]
    why = "the control: with its heartbeats ignored the same evaluations read as stalls"
    right = pages == ["RLTrainingStalled"]
    return [Check("the same, heartbeats ignored", "RLTrainingStalled", text, right, why)]


def _watchdog(s: Stack) -> list[Check]:
    stackrun.stop(s.dir, "alertmanager")

    def missing() -> dict[str, Any] | None:
        for note in stackrun.notifications(s.dir):
            details = note["body"].get("payload", {}).get("custom_details", {})
            if details.get("alertname") == stackrun.MISSING:
                return note["body"]  # type: ignore[no-any-return]
        return None

    page = wait_for(missing, 240, "the heartbeat checker's page")
    return [Check("Alertmanager stopped", stackrun.MISSING, page["payload"]["summary"], True,
                  "paged by the heartbeat checker, not through Alertmanager")]  # fmt: skip


SCENARIOS: dict[str, Callable[..., list[Check]]] = {
    "kl": lambda s, d, p: _kl(s, d, p[0], acting=False),
    "kl-act": lambda s, d, p: _kl(s, d, p[1], acting=True),
    "hacking": lambda s, d, p: _hacking(s, d, p[2]),
    "killed": lambda s, d, p: _killed(s, d, p[3], hold=60.0),
    "port-taken": lambda s, d, p: _taken(s, d, p[4], hold=30.0),
    "trl-eval": lambda s, d, p: _trl_eval(s, d, p[5], heartbeats=True),
    "trl-eval-silent": lambda s, d, p: _trl_eval(s, d, p[6], heartbeats=False),
}


def drill(
    workdir: Path,
    only: list[str] | None = None,
    watchdog: bool = True,
    sent: list[str] | None = None,
) -> list[Check]:
    """Run the drill's scenarios (all, or ``only``) against one fast stack; every page the
    stack sent (a Markdown table row each, oldest first) goes to ``sent`` when given."""
    ports = [free_port() for _ in SCENARIOS]
    checks: list[Check] = []
    with stack(workdir, ports) as s:
        for name, run in SCENARIOS.items():
            if only is None or name in only:
                try:
                    checks += run(s, workdir, ports)
                except AssertionError as exc:  # the page never came: that is a finding
                    checks.append(Check(name, "(none)", str(exc), False, "the page never came"))
        if watchdog:
            checks += _watchdog(s)
        if sent is not None:
            sent += [_sent(note["body"]) for note in stackrun.notifications(s.dir)
                     if note["path"] == "/pagerduty"]  # fmt: skip
    return checks


def _sent(event: dict[str, Any]) -> str:
    details = event.get("payload", {}).get("custom_details", {})
    text = event.get("payload", {}).get("summary", "")[:160].replace("|", "/")
    return (
        f"| {details.get('run_id', '')} | {event.get('event_action', '')} | "
        f"{details.get('alertname', '')} | {text} |"
    )


def table(checks: list[Check]) -> str:
    """The drill's result as a Markdown table."""
    rows = [
        "| scenario | page | what it said | right? | checked |",
        "|---|---|---|---|---|",
        *(
            f"| {c.scenario} | {c.alert} | {c.said} | {'yes' if c.right else '**no**'} | {c.why} |"
            for c in checks
        ),
    ]
    return "\n".join(rows) + "\n"
