"""Panel coverage of the classic-RL dashboard for real classic trainings, over a real Prometheus.

Three real CPU trainings report live, as a user's would, to exporters a real Prometheus scrapes
every second with the generated (fast) rules: tabular Q-learning on FrozenLake logging the W&B
tutorial keys through ``rlpulse.log``, SB3 PPO on CartPole with the SB3 callback, and a
CleanRL-style PPO writing TensorBoard events that ``rlpulse tail-tensorboard`` follows. For each,
every panel the dashboard shows open (collapsed rows are not shown) is queried over the run's
time range as Grafana would: a panel has data when any of its queries returns a sample. The
tutorial's two-key loop (``{"episode", "reward"}``) is measured and printed too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from harness.doc_blocks import REPO, marked
from harness.runstack import watching
from harness.stackutil import api, free_port, interruptible, results, wait_for
from harness.trainings import train_cleanrl_ppo, train_q_learning, train_sb3
from rlpulse.runtime.exporter import Exporter
from rlpulse.stack import config, dashboards

MIN_COVERAGE = 0.8
KINDS = ("q-learning", "sb3-ppo", "cleanrl-ppo", "tutorial")
ASSERTED = KINDS[:3]  # the tutorial logs two keys: its number is printed, not held to 80 %
JOB = "rlpulse"  # the job harness.runstack.watching scrapes under
LINGER_SCRAPES = 3  # scrapes of a run after its training ends, before it finishes


def shown_panels() -> list[dict[str, Any]]:
    """The panels of the classic dashboard's open rows."""
    model = dashboards.dashboards(config.Config())["rl-classic.json"]
    return [p for p in model["panels"] if p["type"] != "row"]


def run_id(kind: str) -> str:
    return f"coverage-{kind}"


@contextlib.contextmanager
def scraped(prom: str, instance: str) -> Iterator[None]:
    """Wait for the target's first scrape; after the block, for ``LINGER_SCRAPES`` more."""
    up = f'up{{instance="{instance}"}} == 1'
    wait_for(lambda: results(prom, up), 30, f"the first scrape of {instance}")
    yield
    ended = time.time()
    wait_for(
        lambda: results(prom, f"timestamp({up}) > {ended + LINGER_SCRAPES}"),
        30,
        f"{LINGER_SCRAPES} scrapes of {instance} after its training",
    )


def exporter_run(prom: str, port: int, kind: str, train: Callable[[Exporter], Any]) -> None:
    exp = Exporter(port, addr="127.0.0.1", run_id=run_id(kind), gpu=False, final_wait=5)
    exp.start()
    with scraped(prom, f"127.0.0.1:{port}"):
        train(exp)
    exp.finish()


def tailed_run(prom: str, port: int, workdir: Path) -> None:
    """CleanRL-style PPO writing TensorBoard events while ``rlpulse tail-tensorboard`` follows
    its log directory (created by the trainer) until Ctrl-C."""
    logdir = workdir / "cleanrl-ppo-healthy-s0"
    rlpulse = str(Path(sys.executable).with_name("rlpulse"))
    proc = subprocess.Popen(
        [rlpulse, "tail-tensorboard", "--wait", "--interval", "0.2", "--addr", "127.0.0.1",
         "--port", str(port), "--run-id", run_id("cleanrl-ppo"), "--framework", "cleanrl",
         str(logdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible,
    )  # fmt: skip
    try:
        with scraped(prom, f"127.0.0.1:{port}"):
            train_cleanrl_ppo("healthy", 0, workdir, iterations=8, num_steps=128, all_charts=True)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def tutorial_run(prom: str, port: int, workdir: Path) -> None:
    """The quickstart's FrozenLake block, run as written (run id renamed)."""
    script = workdir / "frozenlake.py"
    code = marked(REPO / "docs" / "quickstart.md", "stack").code
    script.write_text(code.replace('"frozenlake-q"', repr(run_id("tutorial")).replace("'", '"')))
    env = {**os.environ, "RLPULSE_PORT": str(port), "RLPULSE_EXPECT_SCRAPE": "1"}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every kind of run once, all at once, under one Prometheus; yields its URL and each
    run's time range."""
    tmp = tmp_path_factory.mktemp("coverage")
    ports = {kind: free_port() for kind in KINDS}
    trainings: dict[str, Callable[[str], None]] = {
        "q-learning": lambda prom: exporter_run(
            prom,
            ports["q-learning"],
            "q-learning",
            lambda exp: train_q_learning("healthy", 0, tmp, episodes=6000, every=50, exporter=exp),
        ),
        "sb3-ppo": lambda prom: exporter_run(
            prom,
            ports["sb3-ppo"],
            "sb3-ppo",
            lambda exp: train_sb3("healthy", 0, tmp, timesteps=2048, inject_at=0, exporter=exp),
        ),
        "cleanrl-ppo": lambda prom: tailed_run(prom, ports["cleanrl-ppo"], tmp),
        "tutorial": lambda prom: tutorial_run(prom, ports["tutorial"], tmp),
    }

    def timed(train: Callable[[str], None], prom: str) -> tuple[float, float]:
        start = time.time()
        train(prom)
        return start - 2, time.time() + 2

    with watching(tmp, *ports.values()) as prom, ThreadPoolExecutor(len(KINDS)) as pool:
        running = {kind: pool.submit(timed, train, prom) for kind, train in trainings.items()}
        ranges = {kind: future.result() for kind, future in running.items()}
        time.sleep(2)  # the recording rules' last evaluation over the ended runs
        yield prom, ranges


def has_data(prom: str, expr: str, window: tuple[float, float]) -> bool:
    start, end = window
    body = api(f"{prom}/api/v1/query_range?" + _params(expr, start, end))
    return bool(body["data"]["result"])


def _params(expr: str, start: float, end: float) -> str:
    return urlencode({"query": expr, "start": start, "end": end, "step": "1s"})


def coverage(prom: str, kind: str, window: tuple[float, float]) -> tuple[float, list[str]]:
    """The share of shown panels with data for the run, and the titles of those without."""
    panels = shown_panels()
    empty = [
        p["title"]
        for p in panels
        if not any(
            has_data(
                prom,
                dashboards.expand(
                    t["expr"], {"run_id": run_id(kind), "job": JOB}, rate_interval="4s"
                ),
                window,
            )
            for t in p["targets"]
        )
    ]
    return 1 - len(empty) / len(panels), empty


def test_panels_with_data_for_each_kind_of_classic_run(measured: Any) -> None:
    prom, ranges = measured
    report = {kind: coverage(prom, kind, ranges[kind]) for kind in KINDS}
    n = len(shown_panels())
    for kind, (share, empty) in report.items():
        print(f"{kind}: {round(share * n)}/{n} panels with data ({share:.0%}); empty: {empty}")
    low = {kind: report[kind] for kind in ASSERTED if report[kind][0] < MIN_COVERAGE}
    assert not low, low
