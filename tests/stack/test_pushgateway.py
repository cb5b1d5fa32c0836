"""A short-lived run pushes its final state to a real Pushgateway (Debian
``prometheus-pushgateway``), grouped by job, run_id and rank; a real Prometheus scraping the
gateway with ``honor_labels`` sees the run's series, and a crashed run pages RLRunCrashed."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.stackutil import api, free_port, prometheus, results, server, wait_for
from rlpulse.stack import rules
from rlpulse.stack.alerts.liveness import RUN_CRASHED
from rlpulse.stack.config import Config, Duration, Scrape
from rlpulse.stack.deploy import prometheus as prometheus_yml

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus-pushgateway") is None,
    reason="needs prometheus-pushgateway (apt-get install prometheus-pushgateway)",
)

RUN = """
import rlpulse
rlpulse.start(port=0, addr="127.0.0.1", run_id={run_id!r}, gpu=False, host=False)
for step in range(1, 6):
    rlpulse.log({{"loss": 1.0 / step, "entropy": 2.0}}, step=step)
{ending}
"""


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[str]:
    url = f"http://127.0.0.1:{free_port()}"
    argv = [
        "prometheus-pushgateway",
        f"--web.listen-address={url.removeprefix('http://')}",
        f"--persistence.file={tmp_path / 'pushgateway.store'}",
    ]
    with server(argv, f"{url}/-/ready"):
        yield url


def _run(run_id: str, ending: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = textwrap.dedent(RUN.format(run_id=run_id, ending=ending))
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **env},
    )


def _groups(gateway: str) -> dict[str, dict[str, object]]:
    """run_id -> {metric name: its samples' labels and value} of every pushed group."""
    out: dict[str, dict[str, object]] = {}
    for group in api(f"{gateway}/api/v1/metrics")["data"]:
        run = out.setdefault(group["labels"]["run_id"], {"labels": group["labels"]})
        for name, family in group.items():
            if isinstance(family, dict) and "metrics" in family:
                run[name] = [(m["labels"], m.get("value")) for m in family["metrics"]]
    return out


def test_short_runs_push_their_final_state_grouped_by_run(gateway: str) -> None:
    done = _run("short-ok", "", RLPULSE_PUSHGATEWAY=gateway)
    crashed = _run("short-crash", "raise ValueError('diverged')", RLPULSE_PUSHGATEWAY=gateway)
    assert done.returncode == 0, done.stderr
    assert crashed.returncode == 1 and "ValueError: diverged" in crashed.stderr
    groups = _groups(gateway)
    assert groups["short-ok"]["labels"] == {"job": "rlpulse", "run_id": "short-ok", "rank": "0"}
    [(labels, step)] = groups["short-ok"]["rl_step"]  # type: ignore[misc]
    assert step == "5" and labels["node"] == socket.gethostname() and labels["rank"] == "0"
    outcome = groups["short-crash"]["rl_run_outcome"]
    assert [(labels["outcome"], labels["reason"]) for labels, _ in outcome] == [
        ("crashed", "ValueError")
    ]
    assert "rl_gpu_utilization_ratio" not in groups["short-ok"]  # no readings go stale there


def test_a_failed_push_is_told_and_the_run_still_exits(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    out = _run("lost", "", RLPULSE_PUSHGATEWAY=nobody)
    assert out.returncode == 0
    assert f"could not push run lost to the Pushgateway {nobody}" in out.stderr


def test_prometheus_scraping_the_gateway_sees_the_run_and_pages_its_crash(
    gateway: str, tmp_path: Path
) -> None:
    """The generated prometheus.yml with ``scrape.pushgateways`` set, and the generated rules."""
    _run("pushed-crash", "raise RuntimeError('nccl timeout')", RLPULSE_PUSHGATEWAY=gateway)
    scrape = dataclasses.replace(
        Scrape(),
        pushgateways=(gateway.removeprefix("http://"),),
        static_targets=(),
        file_sd=(),
        interval=Duration("1s"),
        timeout=Duration("1s"),
        evaluation_interval=Duration("1s"),
    )
    cfg = dataclasses.replace(Config(), scrape=scrape)
    (tmp_path / "rules").mkdir()
    for rel, text in rules.render(cfg).items():
        (tmp_path / "rules" / Path(rel).name).write_text(text)
    config = prometheus_yml.config(cfg)
    assert config["scrape_configs"][-1]["honor_labels"] is True
    with prometheus(tmp_path, config) as prom:
        step = wait_for(
            lambda: results(prom, 'rl_step{job="rlpulse", run_id="pushed-crash"}'),
            60,
            "the pushed step",
        )
        assert step[0]["value"][1] == "5"

        def crash_alert() -> dict[str, str] | None:
            for alert in api(f"{prom}/api/v1/alerts")["data"]["alerts"]:
                if alert["labels"]["alertname"] == RUN_CRASHED and alert["state"] == "firing":
                    return dict(alert["labels"])
            return None

        labels = wait_for(crash_alert, 60, "RLRunCrashed firing")
        assert labels["run_id"] == "pushed-crash" and labels["reason"] == "RuntimeError"
