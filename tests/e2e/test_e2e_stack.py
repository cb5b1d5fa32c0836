"""``rlpulse stack up|down|status`` with the real binaries, and ``scripts/demo`` end to end.

Every process listens on 127.0.0.1 on a free port; each test has its own stack directory.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.stackutil import (
    ROOT,
    api,
    free_port,
    interruptible,
    ready,
    rlpulse,
    taken_port,
    wait_for,
    wait_for_data,
)
from rlpulse.cli import build_parser
from rlpulse.offline.stackrun import INSTALL, alive, running_pid
from rlpulse.runtime.exporter import Exporter
from rlpulse.stack.config import Config

SERVICES = ("prometheus", "alertmanager", "inbox", "rollouts", "pushgateway")  # all installed


def ports() -> dict[str, int]:
    return {name: free_port() for name in SERVICES}


def up_args(d: Path, p: dict[str, int], *extra: str) -> list[str]:
    return [
        "stack",
        "up",
        "--dir",
        str(d),
        "--prometheus-port",
        str(p["prometheus"]),
        "--alertmanager-port",
        str(p["alertmanager"]),
        "--inbox-port",
        str(p["inbox"]),
        "--rollouts-port",
        str(p["rollouts"]),
        "--pushgateway-port",
        str(p["pushgateway"]),
        *extra,
    ]


@pytest.fixture
def stack(
    tmp_path: Path,
) -> Iterator[tuple[Path, dict[str, int], subprocess.CompletedProcess[str]]]:
    """A fast-preset stack started by the CLI; stopped (idempotently) at the end."""
    d, p = tmp_path / "stack", ports()
    run = rlpulse(*up_args(d, p, "--fast"))
    assert run.returncode == 0, run.stdout + run.stderr
    yield d, p, run
    rlpulse("stack", "down", "--dir", str(d))


def test_up_generates_starts_and_prints_what_to_open(
    stack: tuple[Path, dict[str, int], subprocess.CompletedProcess[str]],
) -> None:
    d, p, run = stack
    prom, am = f"http://127.0.0.1:{p['prometheus']}", f"http://127.0.0.1:{p['alertmanager']}"
    for url in (prom, f"{prom}/alerts", am, f"http://127.0.0.1:{p['rollouts']}/"):
        assert url in run.stdout
    assert "grafana/dashboards" in run.stdout and "Import" in run.stdout
    assert "Rollouts: the viewer reads the stores in" in run.stdout
    assert sorted(x.name for x in (d / "grafana" / "dashboards").iterdir()) == [
        "rl-classic.json",
        "rl-comparison.json",
        "rl-system.json",
        "rl-training.json",
    ]
    # the fast preset, and Prometheus alerting this stack's Alertmanager
    prom_yml = yaml.safe_load((d / "prometheus" / "prometheus.yml").read_text())
    assert prom_yml["global"]["scrape_interval"] == "1s"
    targets = prom_yml["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert targets == [f"127.0.0.1:{p['alertmanager']}"]
    wait_for(
        lambda: api(f"{prom}/api/v1/alertmanagers")["data"]["activeAlertmanagers"],
        20,
        "Prometheus to discover the Alertmanager",
    )
    groups = api(f"{prom}/api/v1/rules")["data"]["groups"]
    assert {g["name"] for g in groups} == {
        "rlpulse-rl",
        "rlpulse-task",
        "rlpulse-system",
        "rlpulse-meta",  # the Watchdog and the pipeline's own alerts
    }
    # no secret at hand: a placeholder key file, private, referenced by path only
    key = d / "secrets" / "pagerduty_routing_key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    am_yml = (d / "alertmanager" / "alertmanager.yml").read_text()
    assert str(key.resolve()) in am_yml and key.read_text().strip() not in am_yml
    # receivers are local: PagerDuty and the warning webhook both go to the inbox
    inbox = f"http://127.0.0.1:{p['inbox']}"
    doc = yaml.safe_load(am_yml)
    urls = {
        r["name"]: (r.get("pagerduty_configs") or r.get("webhook_configs") or [{}])[0].get("url")
        for r in doc["receivers"]
    }
    assert urls == {
        "null": None,
        "watchdog": f"{inbox}/heartbeat",  # the inbox checks the heartbeats
        "pagerduty": f"{inbox}/pagerduty",
        "webhook": f"{inbox}/webhook",
    }
    assert all(ready(f"http://127.0.0.1:{port}/-/ready") for port in p.values())
    # the rollout viewer runs beside them, and the pages' rollout links open it
    viewer = f"http://127.0.0.1:{p['rollouts']}"
    assert (
        ready(viewer + "/")
        and f"{viewer}/view?run=" in (d / "prometheus/rules/task.yml").read_text()
    )


def test_up_again_reloads_down_stops_and_is_idempotent(
    stack: tuple[Path, dict[str, int], subprocess.CompletedProcess[str]],
) -> None:
    d, p, _ = stack
    pids = {name: running_pid(d, name) for name in SERVICES}
    assert all(pids.values())
    again = rlpulse(*up_args(d, p, "--fast"))
    assert again.returncode == 0, again.stderr
    assert {name: running_pid(d, name) for name in SERVICES} == pids  # reloaded, not restarted
    moved = rlpulse(*up_args(d, {**p, "prometheus": free_port()}))
    assert moved.returncode == 2 and "stack down" in moved.stderr

    status = rlpulse("stack", "status", "--dir", str(d))
    assert status.returncode == 0 and status.stdout.count(" ready ") == 5

    down = rlpulse("stack", "down", "--dir", str(d))
    assert (
        down.returncode == 0
        and "stopped prometheus, alertmanager, pushgateway, inbox, rollouts" in down.stdout
    )
    for pid in pids.values():
        assert pid is not None and not alive(pid)
    assert not list(d.glob("*.pid"))
    assert not any(ready(f"http://127.0.0.1:{port}/-/ready") for port in p.values())
    second = rlpulse("stack", "down", "--dir", str(d))
    assert second.returncode == 0 and "not running" in second.stdout
    assert rlpulse("stack", "status", "--dir", str(d)).returncode == 1


def test_a_missing_binary_names_the_install_command(tmp_path: Path) -> None:
    run = rlpulse(
        *up_args(tmp_path / "stack", ports()),
        env={"RLPULSE_ALERTMANAGER_BIN": str(tmp_path / "no-such-alertmanager")},
    )
    assert run.returncode == 3
    assert "no-such-alertmanager not found" in run.stderr and INSTALL in run.stderr
    assert not (tmp_path / "stack").exists(), "nothing written or started"


def test_port_zero_is_refused_before_anything_starts(tmp_path: Path) -> None:
    run = rlpulse(*up_args(tmp_path / "stack", {**ports(), "inbox": 0}))
    assert run.returncode == 2 and "--inbox-port 0" in run.stderr
    assert not (tmp_path / "stack").exists()


def test_a_port_in_use_is_named(tmp_path: Path) -> None:
    with taken_port() as busy:
        p = {**ports(), "alertmanager": busy}
        run = rlpulse(*up_args(tmp_path / "stack", p))
    assert run.returncode == 2
    assert f"127.0.0.1:{p['alertmanager']} is already in use" in run.stderr
    rlpulse("stack", "down", "--dir", str(tmp_path / "stack"))


def test_the_demo_default_port_is_scraped_by_the_generated_config(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RLPULSE_PORT", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    demo = build_parser().parse_args(["demo"])
    port = Exporter(port=demo.port, gpu=False, host=False, process=False).port  # not started
    assert f"127.0.0.1:{port}" in Config().scrape.static_targets
    committed = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())
    static = committed["scrape_configs"][0]["static_configs"][0]["targets"]
    assert f"127.0.0.1:{port}" in static


# ---- scripts/demo -------------------------------------------------------------------------------


def _script_env(d: Path, p: dict[str, int], cfg: Path) -> dict[str, str]:
    return {
        **os.environ,
        "VENV": str(Path(sys.executable).parent.parent),
        "RLPULSE_STACK_DIR": str(d),
        "RLPULSE_STACK_UP_ARGS": " ".join(up_args(d, p, "--config", str(cfg))[4:]),
        "RLPULSE_ADDR": "127.0.0.1",
        "RLPULSE_DATA_DIR": str(d.parent / "data"),  # the demo's rollout store
    }


def test_scripts_demo_runs_the_stack_and_the_trainer_then_stops_the_stack(tmp_path: Path) -> None:
    d, p, port = tmp_path / "stack", ports(), free_port()
    cfg = tmp_path / "scrape.yml"  # scrape this test's trainer port instead of the default one
    cfg.write_text(yaml.safe_dump({"scrape": {"static_targets": [f"127.0.0.1:{port}"]}}))
    env = _script_env(d, p, cfg)
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "demo"), "--steps", "40", "--step-delay", "0.2"]
        + ["--port", str(port), "--run-id", "script-demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        preexec_fn=interruptible,
    )
    try:
        prom = f"http://127.0.0.1:{p['prometheus']}"
        wait_for_data(prom, 'rl_step{run_id="script-demo"} > 0', timeout=60)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
    assert proc.returncode == 0, out
    for url in (prom, f"{prom}/alerts", f"http://127.0.0.1:{p['alertmanager']}"):
        assert url in out
    assert "notifications received" in out  # the status at the end
    assert "Next: a run that goes wrong" in out and "--keep" in out  # the next step
    assert "stopped prometheus, alertmanager, pushgateway, inbox, rollouts" in out
    assert not any(running_pid(d, name) for name in SERVICES)


def test_scripts_demo_keep_leaves_the_stack_and_runs_alone_without_binaries(
    tmp_path: Path,
) -> None:
    d, p, port = tmp_path / "stack", ports(), free_port()
    cfg = tmp_path / "scrape.yml"
    cfg.write_text(yaml.safe_dump({"scrape": {"static_targets": [f"127.0.0.1:{port}"]}}))
    env = _script_env(d, p, cfg)
    demo = [str(ROOT / "scripts" / "demo"), "--steps", "5", "--step-delay", "0"]
    demo += ["--port", str(port)]
    try:
        with taken_port() as taken:  # the inbox's port is taken: a stack option, passed on
            kept = subprocess.run(
                [*demo, "--keep", "--inbox-port", str(taken)],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
        assert kept.returncode == 0, kept.stdout + kept.stderr
        assert f"port {taken} is in use; the inbox listens on" in kept.stdout
        assert "keeps running" in kept.stdout and "Next: run your own trainer" in kept.stdout
        assert all(running_pid(d, name) for name in SERVICES)
        assert ready(f"http://127.0.0.1:{p['prometheus']}/-/ready")
    finally:
        assert rlpulse("stack", "down", "--dir", str(d)).returncode == 0
    alone = subprocess.run(
        demo,
        capture_output=True,
        text=True,
        env={**env, "RLPULSE_PROMETHEUS_BIN": str(tmp_path / "none")},
        timeout=120,
        check=False,
    )
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert INSTALL in alone.stderr and "running the demo trainer alone" in alone.stderr
    assert not any(running_pid(d, name) for name in SERVICES)
