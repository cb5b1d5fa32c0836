"""Secrets (the PagerDuty routing key, the Slack webhook URL, the scrape password and its
bcrypt hash) come only from files and the environment, and never land in a generated file, in
``rlpulse generate``'s output, in the exporter's logs (DEBUG included) or in a scrape."""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from rlpulse.runtime import webconfig
from rlpulse.runtime.exporter import Exporter
from tests.conftest import bcrypt_hash

ROOT = Path(__file__).resolve().parents[2]
ROUTING_KEY = "R0UT1NGKEY-5b1d9e2f7a3c4e6b8d0f"
SLACK_URL = "https://hooks.slack.test/services/T000/B000/S3CR3T-XOXB-9f8e7d"
PASSWORD = "scrape-pa55word-6c2e"
GRAFANA_PASSWORD = "grafana-admin-7d1f0b"


def _leaks(text: str, secrets: dict[str, str]) -> list[str]:
    return [name for name, secret in secrets.items() if secret in text]


def test_generate_with_secrets_in_files_and_env_writes_none_of_them(tmp_path: Path) -> None:
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir(mode=0o700)
    (secrets_dir / "pd").write_text(ROUTING_KEY)
    (secrets_dir / "slack").write_text(SLACK_URL)
    (secrets_dir / "scrape_password").write_text(PASSWORD)
    hashed = bcrypt_hash(PASSWORD, cost=4)
    config = tmp_path / "stack.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "receivers": {
                    "pagerduty": {"routing_key_file": str(secrets_dir / "pd")},
                    "slack": {"api_url_file": str(secrets_dir / "slack")},
                }
            }
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        # what a deployment might have in its environment: none of it may be written out
        "PAGERDUTY_ROUTING_KEY": ROUTING_KEY,
        "SLACK_WEBHOOK_URL": SLACK_URL,
        "RLPULSE_SCRAPE_PASSWORD": PASSWORD,
        "GRAFANA_ADMIN_PASSWORD": GRAFANA_PASSWORD,
    }
    out = tmp_path / "out"
    runs = [
        subprocess.run(
            [sys.executable, "-m", "rlpulse.cli", "generate", "--config", str(config)]
            + ["--out", str(out), *extra],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=False,
        )
        for extra in ([], ["--check"], ["--fast"])
    ]
    assert [r.returncode for r in runs] == [0, 0, 0], [r.stderr for r in runs]
    secrets = {
        "routing key": ROUTING_KEY,
        "slack url": SLACK_URL,
        "password": PASSWORD,
        "bcrypt hash": hashed,
        "grafana password": GRAFANA_PASSWORD,
    }
    files = [p for p in out.rglob("*") if p.is_file()]
    names = {p.relative_to(out).as_posix() for p in files}
    assert {
        "alertmanager/alertmanager.yml",
        "prometheus/prometheus.yml",
        "docker-compose.yml",
    } <= names
    assert any(n.startswith("grafana/dashboards/") for n in names), names
    leaked = {
        str(p.relative_to(out)): hits
        for p in files
        if (hits := _leaks(p.read_text(encoding="utf-8", errors="replace"), secrets))
    }
    assert not leaked, leaked
    for r in runs:
        assert not _leaks(r.stdout + r.stderr, secrets)
    am = yaml.safe_load((out / "alertmanager/alertmanager.yml").read_text())
    pd = next(r for r in am["receivers"] if r["name"] == "pagerduty")["pagerduty_configs"][0]
    assert pd["routing_key_file"] == str(secrets_dir / "pd")  # the path, never the key
    compose = (out / "docker-compose.yml").read_text()
    assert "${GRAFANA_ADMIN_PASSWORD" in compose  # interpolated by compose at run time


def test_exporter_logs_and_scrapes_hold_no_credential(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed = bcrypt_hash(PASSWORD, cost=4)
    web = tmp_path / "web.yml"
    web.write_text(yaml.safe_dump({"basic_auth_users": {"prometheus": hashed}}))
    monkeypatch.setenv(webconfig.ENV, str(web))
    wrong = "wrong-" + PASSWORD[::-1]
    secrets = {"password": PASSWORD, "bcrypt hash": hashed, "wrong password": wrong}
    with caplog.at_level(logging.DEBUG):
        exp = Exporter(port=0, addr="127.0.0.1", run_id="secrets", gpu=False, host=False).start()
        try:
            bodies = []
            for password in (PASSWORD, wrong, PASSWORD):
                token = base64.b64encode(f"prometheus:{password}".encode()).decode()
                req = urllib.request.Request(exp.url, headers={"Authorization": f"Basic {token}"})
                try:
                    with urllib.request.urlopen(req, timeout=10) as resp:
                        bodies.append(resp.read().decode())
                except urllib.error.HTTPError as err:
                    assert err.code == 401
                    bodies.append(err.read().decode())
            bad = tmp_path / "bad.yml"
            bad.write_text(yaml.safe_dump({"basic_auth_users": {"prometheus": PASSWORD}}))
            with pytest.raises(webconfig.WebConfigError) as err:
                webconfig.load(bad)  # a password pasted where the hash belongs
        finally:
            exp.close()
    assert "rl_run_info" in bodies[0] and "rl_run_info" in bodies[2]
    assert not _leaks(str(err.value), secrets)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert " serving at " in logged  # the log was captured
    assert not _leaks(logged, secrets)
    for body in bodies:
        assert not _leaks(body, secrets)
