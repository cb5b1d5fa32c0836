"""End to end: demo trainers -> real Prometheus -> real Alertmanager -> a PagerDuty stand-in.

One local stack (``rlpulse stack up --fast``, the real CLI) scrapes every demo scenario at once,
each ``rlpulse demo`` in its own process (with the fake NVML at the ``pynvml`` import) on its own
port, registered through a file_sd target file. Critical alerts go to an Events API v2 stand-in
(a real HTTP server in this process) with the routing key read from a file. The trainers start
together when the module does, so the scenarios run in parallel; each test then waits for what
its scenario must produce. Faults: a killed trainer, a Prometheus restart mid-run, slow scrapes.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import yaml

from harness.fake_nvml import FakeGpu, FakeNvml
from harness.stackutil import (
    ROOT,
    Received,
    Sink,
    api,
    demo_argv,
    feeds,
    free_port,
    query,
    results,
    rlpulse,
    wait_for,
    wait_for_data,
)
from rlpulse import catalog
from rlpulse.demo.task import LOOPHOLE
from rlpulse.offline.stackrun import stop
from rlpulse.runtime.exporter import Exporter
from rlpulse.stack import dashboards
from rlpulse.stack.alerts import liveness
from rlpulse.stack.config import Config
from tests.stack.test_stack_dashboards import metric_names

ROUTING_KEY = "e2e-routing-key-0123456789abcdef"
STEP_DELAY = 0.2  # seconds between demo steps: ~5 steps per scrape-second of the fast preset
RATE_INTERVAL = "4s"  # $__rate_interval for a 1 s scrape interval
STEP = catalog.get("rl_step").name


@dataclass(frozen=True)
class Expectation:
    """What a scenario must page, and how long its run is."""

    alertname: str
    steps: int
    within: float  # seconds after the trainer started


EXPECTED: dict[str, Expectation] = {
    "nan-loss": Expectation("RLNonFiniteLoss", 150, 40),
    "stall": Expectation(liveness.STALLED, 300, 60),
    "entropy-collapse": Expectation("RLEntropyCollapse", 300, 75),
    "kl-blowup": Expectation("RLKLReferenceHigh", 600, 120),
    # a verbosity reward is reward hacking: its page holds back the length and truncation
    # alerts it drives (one root cause, one incident)
    "length-explosion": Expectation("RLRewardHacking", 600, 150),
    "reward-hacking": Expectation("RLRewardHacking", 600, 150),
}
HEALTHY_STEPS = 600
# The generator config the stack runs with (`rlpulse stack up --config`): only this module's
# file_sd targets, and the KL page level of the toy task. Its k3 KL to the reference saturates
# at a median of ~3 nats (a 16-token vocabulary, docs/demo.md), at the default critical level
# of 3 nats. Everything else is the shipped fast preset.
OVERRIDES = {
    "scrape": {"static_targets": []},
    "alerts": {"kl_reference_high": {"critical": 2.0}},
}


@dataclass
class Trainer:
    """One ``rlpulse demo`` process and when it started and ended."""

    scenario: str
    run_id: str
    port: int
    steps: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    ended: float | None = None
    _done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        argv = demo_argv(
            "--scenario", self.scenario, "--steps", str(self.steps), "--port", str(self.port),
            "--run-id", self.run_id, "--step-delay", str(STEP_DELAY), "--addr", "127.0.0.1",
            "--data-dir", str(self.log.parent / "data"),  # the stack's viewer reads it
        )  # fmt: skip
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        self.started = time.time()
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self) -> None:
        assert self.proc is not None
        self.proc.wait()
        self.ended = time.time()
        self._done.set()

    def alive_at(self, t: float) -> bool:
        return t >= self.started and (self.ended is None or t < self.ended)

    def wait(self, timeout: float) -> float:
        """Block until the process ended; when it did."""
        assert self._done.wait(timeout), f"{self.run_id} still running after {timeout}s"
        assert self.ended is not None
        return self.ended

    def kill(self, sig: int = signal.SIGKILL) -> float:
        assert self.proc is not None and self.proc.poll() is None, f"{self.run_id} not running"
        self.proc.send_signal(sig)
        return self.wait(30)


@dataclass
class E2E:
    """The running stack, the PagerDuty stand-in and the trainers."""

    dir: Path
    prometheus: str
    pagerduty: Sink
    up_argv: list[str]
    trainers: dict[str, Trainer]
    onsets: dict[str, float] = field(default_factory=dict)

    def target(self, t: Trainer) -> Path:
        return self.dir / "prometheus" / "targets" / f"{t.run_id}.json"

    def register(self, t: Trainer) -> None:
        self.target(t).write_text(json.dumps([{"targets": [f"127.0.0.1:{t.port}"]}]))

    def page(self, run: str, alertname: str, action: str, timeout: float) -> Received:
        """The first PagerDuty event ``action`` for ``alertname`` of ``run``."""

        def probe() -> Received | None:
            hits = [
                r
                for r in self.pagerduty.events(run_id=run, alertname=alertname)
                if r.body["event_action"] == action
            ]
            return hits[0] if hits else None

        return wait_for(probe, timeout, f"a PagerDuty {action} of {alertname} for {run}")


@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    """``rlpulse stack up --fast`` paging the stand-in, and every scenario training at once."""
    tmp = tmp_path_factory.mktemp("e2e")
    d = tmp / "stack"
    pagerduty = Sink()
    (tmp / "routing_key").write_text(ROUTING_KEY + "\n")
    (tmp / "overrides.yml").write_text(yaml.safe_dump(OVERRIDES))
    prom_port = free_port()
    up_argv = [
        "stack", "up", "--fast", "--dir", str(d), "--config", str(tmp / "overrides.yml"),
        "--pagerduty-url", pagerduty.url, "--pagerduty-key-file", str(tmp / "routing_key"),
        "--prometheus-port", str(prom_port), "--alertmanager-port", str(free_port()),
        "--inbox-port", str(free_port()), "--rollouts-port", str(free_port()),
        "--data-dir", str(tmp / "data"),
    ]  # fmt: skip
    run = rlpulse(*up_argv)
    assert run.returncode == 0, run.stdout + run.stderr
    trainers = {
        name: Trainer(name, f"e2e-{name}", free_port(), spec.steps, tmp / f"{name}.log")
        for name, spec in EXPECTED.items()
    }
    trainers["healthy"] = Trainer(
        "healthy", "e2e-healthy", free_port(), HEALTHY_STEPS, tmp / "healthy.log"
    )
    trainers["killed"] = Trainer("healthy", "e2e-killed", free_port(), 100_000, tmp / "killed.log")
    trainers["restart"] = Trainer(
        "healthy", "e2e-restart", free_port(), 100_000, tmp / "restart.log"
    )
    env = E2E(
        d,
        f"http://127.0.0.1:{prom_port}",
        pagerduty,
        up_argv,
        trainers,
    )
    try:
        for t in trainers.values():
            env.register(t)
            t.start()
        yield env
        print(_timeline(env))
    finally:
        for t in trainers.values():
            if t.proc is not None and t.proc.poll() is None:
                t.proc.kill()
                t.proc.wait()
        rlpulse("stack", "down", "--dir", str(d))
        pagerduty.shutdown()


def _timeline(env: E2E) -> str:
    """The measured onsets, each trainer's first scrape, and every page of the session."""
    lines = ["", "alert onsets (s after the trainer started; killed: after the kill):"]
    for name, secs in sorted(env.onsets.items(), key=lambda kv: kv[1]):
        alert = EXPECTED[name].alertname if name in EXPECTED else liveness.TARGET_DOWN
        lines.append(f"  {name:<18} {alert:<26} {secs:6.1f}")
    lines.append("first scrape (s after the trainer started) and PagerDuty events (s):")
    for t in env.trainers.values():
        raw = results(env.prometheus, f'up{{instance="127.0.0.1:{t.port}"}}[15m]')
        first = f"{float(raw[0]['values'][0][0]) - t.started:5.1f}" if raw else "  -  "
        events = [
            f"{r.body['event_action']} {r.body['payload']['custom_details']['alertname']} "
            f"@{r.time - t.started:.0f}"
            for r in env.pagerduty.events(run_id=t.run_id)
        ]
        ran = f"{t.ended - t.started:.0f}s" if t.ended else "alive"
        lines.append(f"  {t.run_id:<22} first scrape {first}  ran {ran:<6} {'; '.join(events)}")
    return "\n".join(lines)


# ---- every failure scenario pages ---------------------------------------------------------------


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_failure_scenario_pages_pagerduty(e2e: E2E, scenario: str) -> None:
    spec, t = EXPECTED[scenario], e2e.trainers[scenario]
    wait_seconds = t.started + spec.within - time.time()
    page = e2e.page(t.run_id, spec.alertname, "trigger", max(wait_seconds, 1.0))
    e2e.onsets[scenario] = page.time - t.started
    assert t.alive_at(page.time), "paged while the run was alive, not because it ended"
    event = page.body
    assert page.path == "/"
    assert event["routing_key"] == ROUTING_KEY, "the key comes from --pagerduty-key-file"
    assert event["payload"]["severity"] == "critical"
    details = event["payload"]["custom_details"]
    assert details["run_id"] == t.run_id and details["alertname"] == spec.alertname
    assert details["runbook"].endswith(f"#{spec.alertname.lower()}")
    assert t.run_id in details["dashboard"]
    # the same incident for every notification of this alert and run: one stable dedup key
    keys = {
        r.body["dedup_key"] for r in e2e.pagerduty.events(run_id=t.run_id, alertname=spec.alertname)
    }
    assert keys == {event["dedup_key"]} and event["dedup_key"]


def test_the_hacking_pages_rollout_link_shows_the_hack_after_the_run_ended(e2e: E2E) -> None:
    t = e2e.trainers["reward-hacking"]
    page = e2e.page(t.run_id, "RLRewardHacking", "trigger", max(t.started + 150 - time.time(), 1))
    t.wait(EXPECTED["reward-hacking"].steps * STEP_DELAY * 3)
    link = page.body["payload"]["custom_details"]["rollouts"]
    assert "&order=best" in link, link  # the highest rewards, where the hack shows
    with urllib.request.urlopen(link, timeout=10) as resp:  # the stack's viewer, run ended
        html = resp.read().decode()
    assert resp.status == 200 and f"<h1 class=title>{t.run_id}</h1>" in html
    step_min = int(parse_qs(urlsplit(link).query).get("step_min", ["0"])[0])  # the last good step
    steps = [int(s) for s in re.findall(r"<span class=step>step: <b><a [^>]*>(-?\d+)</a>", html)]
    assert steps and min(steps) >= step_min
    rewards = [float(r) for r in re.findall(r"<span class=reward>reward: <b>([^<]+)</b>", html)]
    assert rewards == sorted(rewards, reverse=True)
    verdicts = re.findall(r"<span class=verdict>verdict: <b>([^<]+)</b>", html)
    assert verdicts.count(LOOPHOLE) >= 0.8 * len(verdicts), verdicts  # the grader's loophole


def test_stall_resolves_when_its_run_ends(e2e: E2E) -> None:
    """The hung run is ended the way a launcher ends one: its target file goes, then the
    process; the stall incident resolves (same dedup key) and nothing reports it down."""
    t = e2e.trainers["stall"]
    stalled = e2e.page(t.run_id, liveness.STALLED, "trigger", 60)
    e2e.target(t).unlink()
    wait_for(
        lambda: not results(e2e.prometheus, f'up{{instance="127.0.0.1:{t.port}"}}'),
        30,
        "Prometheus to drop the target",
    )
    t.kill(signal.SIGTERM)
    resolved = e2e.page(t.run_id, liveness.STALLED, "resolve", 30)
    assert resolved.body["dedup_key"] == stalled.body["dedup_key"]
    assert resolved.body["routing_key"] == ROUTING_KEY
    time.sleep(3)  # a target-down page would have arrived by now
    assert not e2e.pagerduty.events(run_id=t.run_id, alertname=liveness.TARGET_DOWN)


def test_killed_trainer_pages_target_down_until_its_target_goes(e2e: E2E) -> None:
    t = e2e.trainers["killed"]
    wait_for_data(e2e.prometheus, f'{STEP}{{run_id="{t.run_id}"}} > 20', 60)
    killed = t.kill(signal.SIGKILL)
    down = e2e.page(t.run_id, liveness.TARGET_DOWN, "trigger", 30)
    e2e.onsets["killed"] = down.time - killed
    assert down.body["payload"]["severity"] == "critical"
    assert down.body["routing_key"] == ROUTING_KEY
    assert f"127.0.0.1:{t.port}" in down.body["payload"]["custom_details"]["description"]
    e2e.target(t).unlink()  # the launcher notices the dead run
    gone = e2e.page(t.run_id, liveness.TARGET_DOWN, "resolve", 60)
    assert gone.body["dedup_key"] == down.body["dedup_key"]


# ---- the healthy run pages nothing, and feeds every dashboard panel -----------------------------


def test_healthy_run_pages_nothing(e2e: E2E) -> None:
    t = e2e.trainers["healthy"]
    ended = t.wait(HEALTHY_STEPS * STEP_DELAY * 3)
    time.sleep(2)  # what the last scrapes of the live run raised has reached the stand-in
    pages = e2e.pagerduty.events(run_id=t.run_id)
    while_alive = [
        (r.body["payload"]["custom_details"]["alertname"], r.time - t.started)
        for r in pages
        if r.time < ended + 1.0
    ]
    assert not while_alive, f"the healthy run paged: {while_alive}"
    assert ended - t.started > 60, "long enough to have exercised every window of the fast preset"
    # it ended on purpose (finish(): a last scrape carried the mark) while its target stays
    # listed: Prometheus finds it down, and RLTargetDown (for 1 s here) must not page
    assert "finished (a last scrape carried the finish mark)" in t.log.read_text()
    wait_for_data(e2e.prometheus, f'up{{instance="127.0.0.1:{t.port}"}} == 0', 30)
    time.sleep(5)
    assert not e2e.pagerduty.events(run_id=t.run_id, alertname=liveness.TARGET_DOWN)


SIGNAL = re.compile(r'signal="(\w+)"')


def test_every_dashboard_panel_query_returns_data_from_the_demo_run(e2e: E2E) -> None:
    """Every panel query (variables and ``$__rate_interval`` expanded as Grafana does) is
    accepted, and returns data at the end of the healthy demo run whenever the run exported
    the series it reads (GPU ones through the fake NVML). The panels the demo cannot feed
    (classic-RL episodes, a critic, tools, error counters that never counted) are listed."""
    t = e2e.trainers["healthy"]
    at = t.wait(HEALTHY_STEPS * STEP_DELAY * 3) - 2.0  # the run's last seconds
    exported = {
        r["metric"]["__name__"]
        for r in results(e2e.prometheus, f'group by (__name__) ({{run_id="{t.run_id}"}})', at)
    }
    assert {m.name for m in catalog.CATALOG if m.name.startswith("rl_gpu_")} <= exported
    # a step-signal panel is fed when the run logged the metric its signal is computed from
    signal = catalog.get("rl_step_signal").name
    signals = {
        r["metric"]["signal"]
        for r in results(e2e.prometheus, f'group by (signal) ({signal}{{run_id="{t.run_id}"}})', at)
    }
    empty, refused, unfed = [], [], []
    for name, model in dashboards.dashboards(Config()).items():
        for title, expr in dashboards.panel_queries(model):
            expanded = dashboards.expand(expr, {"run_id": t.run_id}, rate_interval=RATE_INTERVAL)
            body = query(e2e.prometheus, expanded, at)
            if body["status"] != "success":
                refused.append((name, title, expanded, body.get("error")))
            elif body["data"]["result"]:
                continue
            elif (
                metric_names(expr) <= exported
                and set(SIGNAL.findall(expr)) <= signals
                and feeds(e2e.prometheus, expanded, at, run_id=t.run_id)
            ):
                empty.append((name, title, expanded))
            else:
                unfed.append(f"{name}: {title}: {sorted(metric_names(expr) - exported)}")
    assert not refused, refused
    assert not empty, f"{len(empty)} panel queries without data: {empty}"
    print(f"\n{len(unfed)} panel queries read series the demo does not export:")
    print("\n".join(f"  {line}" for line in unfed))


# ---- faults ------------------------------------------------------------------------------------


def test_exporter_keeps_serving_while_scrapes_are_slow(e2e: E2E) -> None:
    """A hung NVML call and a client that never finishes its request slow one scrape path down;
    Prometheus keeps scraping within its timeout and the training loop keeps its pace."""
    nvml = FakeNvml([FakeGpu(util=70)])
    exp = Exporter(
        port=0, addr="127.0.0.1", run_id="e2e-slow", nvml=nvml, collector_timeout=0.2
    ).start()
    stop_loop = threading.Event()
    steps = [0]

    def loop() -> None:
        while not stop_loop.is_set():
            steps[0] += 1
            exp.log({"loss": 0.5, "entropy": 1.0}, step=steps[0])
            stop_loop.wait(0.05)

    thread = threading.Thread(target=loop, daemon=True)
    target = e2e.dir / "prometheus" / "targets" / "e2e-slow.json"
    target.write_text(json.dumps([{"targets": [f"127.0.0.1:{exp.port}"]}]))
    slow = []
    try:
        thread.start()
        sel = f'{{instance="127.0.0.1:{exp.port}"}}'
        wait_for_data(e2e.prometheus, f"up{sel} == 1", 30)
        nvml.hang.clear()  # every NVML call blocks from now on
        for _ in range(3):  # clients that open a request and never finish it
            s = socket.create_connection(("127.0.0.1", exp.port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            slow.append(s)
        t0, step0 = time.time(), steps[0]
        time.sleep(6)
        window = f"[{int(time.time() - t0)}s]"
        up = results(e2e.prometheus, f"min_over_time(up{sel}{window})")
        assert float(up[0]["value"][1]) == 1.0, "every scrape in the window succeeded"
        took = results(e2e.prometheus, f"max_over_time(scrape_duration_seconds{sel}{window})")
        assert float(took[0]["value"][1]) < 1.0, "within the fast preset's 1 s scrape timeout"
        advanced = results(e2e.prometheus, f"changes({STEP}{sel}{window})")
        assert float(advanced[0]["value"][1]) >= 3, "fresh steps in every scrape"
        gpu_up = results(
            e2e.prometheus,
            f'{catalog.get("rlpulse_collector_up").name}{{collector="gpu",run_id="e2e-slow"}}',
        )
        assert float(gpu_up[0]["value"][1]) == 0.0, "the hung collector is reported, not waited on"
        assert steps[0] - step0 >= 6 / 0.05 * 0.8, "the training loop kept its pace"
    finally:
        nvml.hang.set()
        for s in slow:
            s.close()
        target.unlink()
        stop_loop.set()
        thread.join(5)
        exp.close()


def test_prometheus_restart_mid_run_resumes_scraping_and_counters_stay_monotonic(
    e2e: E2E,
) -> None:
    t = e2e.trainers["restart"]
    steps = catalog.get("rl_train_steps_total").name
    sel = f'{{run_id="{t.run_id}"}}'
    wait_for_data(e2e.prometheus, f"rate({steps}{sel}[{RATE_INTERVAL}]) > 0", 60)
    before = float(results(e2e.prometheus, f"{steps}{sel}")[0]["value"][1])
    assert stop(e2e.dir, "prometheus")
    stopped = time.time()
    time.sleep(3)  # the trainer keeps training while nobody scrapes it
    again = rlpulse(*e2e.up_argv)  # restarts only what is down
    assert again.returncode == 0, again.stdout + again.stderr
    restarted = time.time()
    wait_for_data(e2e.prometheus, f"timestamp({steps}{sel}) > {restarted:.3f}", 30)
    time.sleep(5)  # a few scrapes after the restart
    after = float(results(e2e.prometheus, f"{steps}{sel}")[0]["value"][1])
    assert after > before
    span = f"[{int(time.time() - stopped) + 30}s]"
    assert float(results(e2e.prometheus, f"resets({steps}{sel}{span})")[0]["value"][1]) == 0
    params = {
        "query": f"rate({steps}{sel}[{RATE_INTERVAL}])",
        "start": f"{stopped - 20:.3f}",
        "end": f"{time.time():.3f}",
        "step": "1",
    }
    body = api(f"{e2e.prometheus}/api/v1/query_range?{urlencode(params)}")
    rates = [(float(ts), float(v)) for ts, v in body["data"]["result"][0]["values"]]
    assert all(v >= 0 for _, v in rates), "no negative rate across the restart"
    assert any(v > 0 for ts, v in rates if ts > restarted), "the rate resumes after the restart"
    assert any(v > 0 for ts, v in rates if ts < stopped), "and was there before it"
    raw = results(e2e.prometheus, f"{steps}{sel}[{int(time.time() - stopped) + 20}s]")
    values = [float(v) for _, v in raw[0]["values"]]
    assert values == sorted(values), "the scraped counter never goes down"
    t.kill(signal.SIGTERM)
