"""A real Prometheus for the tests of how runs end: watching one trainer port (1 s scrapes of
``127.0.0.1:PORT`` under the job the rules select, the generated rules with the fast preset), or
the whole local stack (``stack_up``) that every trainer registers with by itself."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.stackutil import api, free_port, prometheus, results, wait_for
from rlpulse.offline import stackrun
from rlpulse.runtime import discovery
from rlpulse.stack import config, rules

SETTLE_S = 5  # past RLTargetDown's `for` with the fast preset, a few evaluations


@contextlib.contextmanager
def watching(workdir: Path, *ports: int) -> Iterator[str]:
    """Prometheus scraping ``127.0.0.1:PORT`` for each port every second (job ``rlpulse``) with
    the fast rules; its URL."""
    rule_files = []
    for rel, text in rules.render(config.fast()).items():
        path = workdir / Path(rel).name
        path.write_text(text)
        rule_files.append(str(path))
    targets = [f"127.0.0.1:{port}" for port in ports]
    prom_config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": rule_files,
        "scrape_configs": [{"job_name": "rlpulse", "static_configs": [{"targets": targets}]}],
    }
    with prometheus(workdir, prom_config) as prom:
        yield prom


def alerts_once_settled(prom: str) -> list[dict[str, Any]]:
    """The alerts (pending or firing) once the ended run's target is down and every rule group
    has evaluated ``SETTLE_S`` seconds past that."""
    down = wait_for(lambda: results(prom, 'up{job="rlpulse"} == 0'), 60, "the target down")
    return alerts_after(prom, float(down[0]["value"][0]))


def alerts_after(prom: str, t: float) -> list[dict[str, Any]]:
    """The alerts (pending or firing) once every rule group has evaluated ``SETTLE_S`` seconds
    past ``t`` (epoch seconds: when the run ended)."""
    after = t + SETTLE_S

    def evaluated_since() -> bool | None:
        groups = api(f"{prom}/api/v1/rules")["data"]["groups"]
        return all(epoch(g["lastEvaluation"]) > after for g in groups) or None

    wait_for(evaluated_since, 60, "every rule group evaluated after the run ended")
    return list(api(f"{prom}/api/v1/alerts")["data"]["alerts"])


def last(prom: str, expr: str) -> list[dict[str, Any]]:
    """``expr``'s newest sample per series over the last 10 minutes (an ended run's series are
    stale)."""
    return results(prom, f"last_over_time({expr}[10m])")


def epoch(rfc3339: str) -> float:
    """Seconds since the epoch of an RFC 3339 time as the Prometheus API writes it."""
    head, _, frac = rfc3339.rstrip("Z").partition(".")
    stamp = datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.UTC)
    digits = "".join(c for c in frac if c.isdigit())[:6]
    return stamp.timestamp() + (float(f"0.{digits}") if digits else 0.0)


@dataclass
class StackUp:
    """A ``rlpulse stack up --fast`` on free ports; ``env`` runs a trainer with the defaults of
    this machine (no port, no targets dir set), its discovery directory under the test's."""

    dir: Path
    prometheus: str
    env: dict[str, str]
    targets: Path

    def run(self, script: Path, *, check: bool = False) -> subprocess.CompletedProcess[str]:
        """``python script`` with ``env``, in the script's folder, its output captured."""
        return subprocess.run(
            [sys.executable, str(script)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=check,
            cwd=script.parent,
        )

    def pages(self, alertname: str) -> list[dict[str, Any]]:
        """PagerDuty triggers of ``alertname`` in the stack's inbox."""
        return [
            n["body"]
            for n in stackrun.notifications(self.dir)
            if n["path"] == "/pagerduty"
            and n["body"].get("event_action") == "trigger"
            and n["body"]["payload"]["custom_details"].get("alertname") == alertname
        ]


DEFAULT_PORTS_LOCK = Path(tempfile.gettempdir()) / "rlpulse-tests-default-ports.lock"


@contextlib.contextmanager
def default_ports() -> Iterator[None]:
    """Held while trainers run on this machine's default ports (9400 and up): pytest runs test
    modules in parallel, and a trainer of another module taking the port of one killed here
    would answer this stack's scrapes of that port (another module's run in its alerts).
    Modules take turns."""
    with open(DEFAULT_PORTS_LOCK, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def stack_up(workdir: Path) -> Iterator[StackUp]:
    """The real ``rlpulse stack up --fast`` (1 s scrapes) scraping only what registers itself
    (no static target: another test's trainer on the default port stays out), stopped with
    ``rlpulse stack down`` at the end; trainers run with ``env`` on the default ports, which
    the stack holds (``default_ports``) until it is down."""
    with default_ports(), _stack_up(workdir) as up:
        yield up


@contextlib.contextmanager
def _stack_up(workdir: Path) -> Iterator[StackUp]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPULSE_")}
    env["XDG_STATE_HOME"] = str(workdir / "state")
    (workdir / "overrides.yml").write_text(yaml.safe_dump({"scrape": {"static_targets": []}}))
    d, prom_port = workdir / "stack", free_port()
    cli = str(Path(sys.executable).with_name("rlpulse"))
    argv = [
        cli, "stack", "up", "--fast", "--dir", str(d), "--config", str(workdir / "overrides.yml"),
        "--prometheus-port", str(prom_port), "--alertmanager-port", str(free_port()),
        "--inbox-port", str(free_port()), "--pushgateway-port", str(free_port()),
        "--rollouts-port", str(free_port()),
    ]  # fmt: skip
    up = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield StackUp(d, f"http://127.0.0.1:{prom_port}", env, discovery.default_dir_in(env))
    finally:
        subprocess.run([cli, "stack", "down", "--dir", str(d)], env=env, timeout=120, check=False)
