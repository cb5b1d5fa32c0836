"""Every run reaches Prometheus with no settings (issue 25), through the real local stack
(``rlpulse stack up --fast``: Prometheus watching the discovery directory, Alertmanager, the
inbox): ten trainers started at once on the default port (ranks of one run and separate runs,
so most fall back to a free port), among them a 0.05 s tutorial loop, one killed with SIGKILL
and one that crashes. All ten are scraped, the short loop's episodes are in Prometheus, the
killed and the crashed runs page, the finished ones do not, and ``rlpulse stack down`` leaves
no stale target."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.runstack import StackUp, alerts_once_settled, last, stack_up
from harness.stackutil import results, wait_for
from rlpulse.stack.alerts import liveness

EPISODES = 500
# a trainer: starts with the defaults, logs a step every 50 ms until the test says how to end
TRAINER = """
import os, sys, time
import rlpulse
rlpulse.start()
go = sys.argv[1]
if os.environ["KIND"] == "short":  # the tutorial's shape: 500 episodes in ~0.05 s, then exit
    for e in range(500):
        rlpulse.log({"episode": e, "reward": float(e % 3 == 0)}, step=e)
    sys.exit(0)
step = 0
while not os.path.exists(go):
    step += 1
    rlpulse.log({"loss": 1.0 / step, "entropy": 1.0}, step=step)
    time.sleep(0.05)
if os.environ["KIND"] == "crash":
    raise RuntimeError("the trainer's own bug")
"""


@dataclass
class Trainer:
    name: str
    kind: str  # long, short, crash, kill
    env: dict[str, str]
    proc: subprocess.Popen[str] | None = None
    stderr: str = ""

    @property
    def run_id(self) -> str:
        return self.env["RLPULSE_RUN_ID"]


def _trainers(stack: StackUp) -> list[Trainer]:
    ranks = [
        Trainer(
            f"ranks-{r}", "long", {"RLPULSE_RUN_ID": "ranks", "RANK": f"{r}", "LOCAL_RANK": f"{r}"}
        )
        for r in range(3)
    ]
    runs = [Trainer(f"run-{i}", "long", {"RLPULSE_RUN_ID": f"sweep-{i}"}) for i in range(4)]
    odd = [
        Trainer("short", "short", {"RLPULSE_RUN_ID": "tutorial"}),
        Trainer("killed", "kill", {"RLPULSE_RUN_ID": "killed"}),
        Trainer("crashed", "crash", {"RLPULSE_RUN_ID": "crashed"}),
    ]
    trainers = ranks + runs + odd
    for t in trainers:
        t.env = {**stack.env, **t.env, "KIND": t.kind}
    return trainers


@pytest.fixture(scope="module")
def ten(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StackUp, dict[str, Trainer]]]:
    """The ten trainers run to their ends under one stack; yields the stack and them by name
    once the killed and the crashed runs have paged."""
    tmp = tmp_path_factory.mktemp("ten")
    go = tmp / "go"
    with stack_up(tmp) as stack:
        trainers = {t.name: t for t in _trainers(stack)}
        for t in trainers.values():  # all at once
            t.proc = subprocess.Popen(
                [sys.executable, "-c", TRAINER, str(go)],
                env=t.env,
                cwd=tmp,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        try:
            running = {(t.run_id, t.env.get("RANK", "0")) for t in trainers.values()}
            running -= {("tutorial", "0")}

            def scraped() -> set[tuple[str, str]]:
                info = results(stack.prometheus, 'rl_run_info{job="rlpulse"}')
                return {(s["metric"]["run_id"], s["metric"]["rank"]) for s in info}

            wait_for(lambda: scraped() >= running or None, 120, "every long-running run scraped")
            killed = trainers["killed"].proc
            assert killed is not None
            killed.send_signal(signal.SIGKILL)
            go.touch()  # the others end: finished, or crashed
            for t in trainers.values():
                assert t.proc is not None
                _, t.stderr = t.proc.communicate(timeout=120)
            wait_for(lambda: stack.pages(liveness.TARGET_DOWN), 60, "the killed run paged")
            wait_for(lambda: stack.pages(liveness.RUN_CRASHED), 60, "the crashed run paged")
            yield stack, trainers
        finally:
            for t in trainers.values():
                if t.proc is not None and t.proc.poll() is None:
                    t.proc.kill()
                    t.proc.wait()


def test_all_ten_are_scraped(ten: tuple[StackUp, dict[str, Trainer]]) -> None:
    stack, trainers = ten
    seen = {
        (s["metric"]["run_id"], s["metric"]["rank"])
        for s in last(stack.prometheus, 'rl_run_info{job="rlpulse"}')
    }
    expected = {(t.run_id, t.env.get("RANK", "0")) for t in trainers.values()}
    assert seen == expected


def test_a_taken_port_falls_back_registered_and_every_run_says_where(
    ten: tuple[StackUp, dict[str, Trainer]],
) -> None:
    stack, trainers = ten
    where = f"(registered for Prometheus at {stack.targets})"
    for t in trainers.values():
        assert "serving at http://127.0.0.1:" in t.stderr and where in t.stderr, t.stderr
    fell_back = [t.name for t in trainers.values() if "is in use; run" in t.stderr]
    assert len(fell_back) >= 7, fell_back  # ten runs, three ranks' ports: most fall back
    ports = [s["metric"]["instance"] for s in last(stack.prometheus, 'rl_run_info{job="rlpulse"}')]
    assert len(set(ports)) == 10, ports  # no clash, no lost run


def test_the_short_loop_reaches_prometheus_with_every_episode(
    ten: tuple[StackUp, dict[str, Trainer]],
) -> None:
    stack, trainers = ten
    assert "waiting up to" in trainers["short"].stderr  # the wait for its last scrape
    [episodes] = last(stack.prometheus, 'rl_episodes_total{run_id="tutorial"}')
    assert episodes["value"][1] == str(EPISODES)  # indices 0..499: 500 episodes
    [outcome] = last(stack.prometheus, 'rl_run_outcome{run_id="tutorial"}')
    assert outcome["metric"]["outcome"] == "finished"


def test_the_killed_and_the_crashed_run_page_the_finished_do_not(
    ten: tuple[StackUp, dict[str, Trainer]],
) -> None:
    stack, trainers = ten
    paged = {
        (p["payload"]["custom_details"]["alertname"], p["payload"]["custom_details"]["run_id"])
        for p in stack.pages(liveness.TARGET_DOWN) + stack.pages(liveness.RUN_CRASHED)
    }
    expected = {(liveness.TARGET_DOWN, "killed"), (liveness.RUN_CRASHED, "crashed")}
    why = {
        run: (
            [t.stderr for t in trainers.values() if t.run_id == run],
            last(stack.prometheus, f'rl_run_finished_timestamp_seconds{{run_id="{run}"}}'),
        )
        for _, run in paged - expected
    }
    assert paged == expected, why
    alerts = alerts_once_settled(stack.prometheus)
    runs = {t.run_id for t in trainers.values()}
    critical = {
        a["labels"]["run_id"]
        for a in alerts
        if a["labels"].get("severity") == "critical" and a["labels"].get("run_id") in runs
    }
    assert critical == {"killed", "crashed"}, alerts


def test_stack_down_leaves_no_stale_target(ten: tuple[StackUp, dict[str, Trainer]]) -> None:
    stack, _ = ten
    left = [p.name for p in stack.targets.glob("*.json")]
    assert len(left) == 1 and left[0].startswith("killed-0-"), left  # it pages while it stays
    down = subprocess.run(
        [str(Path(sys.executable).with_name("rlpulse")), "stack", "down", "--dir", str(stack.dir)],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert down.returncode == 0, down.stderr
    assert list(stack.targets.glob("*.json")) == []
    assert not (stack.targets / ".rlpulse-watcher").exists()
