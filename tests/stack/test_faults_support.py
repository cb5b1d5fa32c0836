"""Helpers for the hostile-input and fault tests (no tests here): the generated stack run by
``rlpulse.offline.stackrun`` with services that can be stopped and restarted on their ports and
data. Process and query helpers (and a one-off Prometheus) come from ``harness.stackutil``; the PKI
and bcrypt hashes from ``tests.conftest``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.stackutil import free_port, ready, wait_for
from rlpulse.offline import stackrun


@dataclass
class LocalStack:
    """A running ``rlpulse stack`` (fast preset) scraping given targets."""

    dir: Path
    services: dict[str, stackrun.Service]
    restarted: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def url(self, name: str) -> str:
        return self.services[name].url

    def start(self, name: str) -> None:
        stackrun.start(self.services[name], self.dir)
        # /proc/PID/cmdline reads empty for a moment after the exec, and stackrun.running_pid
        # then says "not running": wait until it sees the process (reported to the stackrun
        # author), so wait_ready does not mistake the start for an exit and orphan it
        wait_for(lambda: stackrun.running_pid(self.dir, name), 10, f"{name}'s process")
        stackrun.wait_ready(self.services[name], self.dir)

    def stop(self, name: str) -> None:
        proc = self.restarted.pop(name, None)
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=20)
        else:
            assert stackrun.stop(self.dir, name), f"{name} was not running"

    def restart(self, name: str) -> None:
        """Start a stopped service again on its port and data. Not through stackrun.start: its
        free-port check binds without SO_REUSEADDR, so it refuses the port for as long as the
        stopped server's closed connections sit in TIME_WAIT (~60 s; reported)."""
        svc = self.services[name]
        with (self.dir / f"{name}.log").open("ab") as log:
            self.restarted[name] = subprocess.Popen(
                svc.argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir
            )
        wait_for(lambda: ready(svc.url + svc.ready_path), 30, f"{name} ready again")

    def close(self) -> None:
        for name in list(self.restarted):
            self.stop(name)
        stackrun.down(self.dir)

    def pages(self, alertname: str) -> list[dict[str, Any]]:
        """PagerDuty trigger events for ``alertname`` that reached the inbox, oldest first."""
        return [
            {**n["body"], "received": n["time"]}
            for n in stackrun.notifications(self.dir)
            if n["path"] == "/pagerduty"
            and n["body"].get("event_action") == "trigger"
            and n["body"]["payload"]["custom_details"].get("alertname") == alertname
        ]


@contextmanager
def local_stack(d: Path, targets: Sequence[str]) -> Iterator[LocalStack]:
    """``rlpulse stack up --fast`` into ``d`` on free ports, scraping only ``targets``. Stopped
    (``down``) at the end."""
    overrides = {"scrape": {"static_targets": list(targets), "file_sd": []}}
    (d / "overrides.yml").write_text(yaml.safe_dump(overrides))
    opts = stackrun.StackOptions(
        dir=d,
        fast=True,
        config=d / "overrides.yml",
        prometheus_port=free_port(),
        alertmanager_port=free_port(),
        inbox_port=free_port(),
        rollouts_port=free_port(),
    )
    stackrun.write_files(opts, stackrun.stack_config(opts))
    services = {s.name: s for s in stackrun.services(opts)}
    stack = LocalStack(d, services)
    try:
        for name in services:
            stack.start(name)
        yield stack
    finally:
        stack.close()
