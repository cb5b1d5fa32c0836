"""A real Alertmanager for the tests of runs acting on their alerts (``rlpulse.control``):
started on 127.0.0.1 with the shape of the generated config (a null receiver, a cause holding
back its consequence), and alerts and silences posted through its API v2."""

from __future__ import annotations

import contextlib
import datetime
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from harness.stackutil import api, free_port, server

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
CONFIG = {
    "route": {"receiver": "null", "group_wait": "0s", "group_interval": "1s"},
    "receivers": [{"name": "null"}],
    "inhibit_rules": [
        {
            "source_matchers": ['alertname="RLEntropyCollapse"', 'severity="critical"'],
            "target_matchers": ['alertname="RLRewardCollapse"'],
            "equal": ["run_id"],
        }
    ],
}


@contextlib.contextmanager
def alertmanager(tmp: Path, web: dict[str, Any] | None = None) -> Iterator[str]:
    """A real Alertmanager until the ``with`` ends; its URL. With a web config (TLS, basic
    auth) readiness is the caller's to wait for."""
    assert ALERTMANAGER, "prometheus-alertmanager (Debian package) is required"
    (tmp / "am.yml").write_text(yaml.safe_dump(CONFIG))
    port = free_port()
    argv = [
        ALERTMANAGER,
        f"--config.file={tmp / 'am.yml'}",
        f"--storage.path={tmp / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    if web is None:
        with server(argv, f"http://127.0.0.1:{port}/-/ready"):
            yield f"http://127.0.0.1:{port}"
        return
    (tmp / "web.yml").write_text(yaml.safe_dump(web))
    argv.append(f"--web.config.file={tmp / 'web.yml'}")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"https://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def post(url: str, name: str, severity: str, run_id: str, **labels: str) -> None:
    """Post one alert of ``run_id`` (as Prometheus would)."""
    alert = {"alertname": name, "severity": severity, "run_id": run_id, **labels}
    api(f"{url}/api/v2/alerts", [{"labels": alert, "annotations": {"summary": name}}])


def silence(url: str, run_id: str) -> None:
    """Silence every alert of ``run_id`` for an hour."""
    now = datetime.datetime.now(datetime.UTC)
    api(
        f"{url}/api/v2/silences",
        {
            "matchers": [{"name": "run_id", "value": run_id, "isRegex": False}],
            "startsAt": now.isoformat(),
            "endsAt": (now + datetime.timedelta(hours=1)).isoformat(),
            "createdBy": "test",
            "comment": "known: stop paging, keep training",
        },
    )
