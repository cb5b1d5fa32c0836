"""End to end: a real SB3 PPO run whose learning rate spikes, followed by ``rlpulse stack up
--fast`` (real Prometheus, real Alertmanager, PagerDuty stand-in on 127.0.0.1), reads its own
alert from Alertmanager, saves and stops, naming the last good step and the checkpoint before
it; the same failure under a silence trains on; a healthy run is never stopped; the demo's
entropy collapse, opted in from the environment, is saved and stopped too."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("stable_baselines3")

from harness.amutil import silence
from harness.runstack import alerts_once_settled, last
from harness.stackutil import ROOT, Sink, demo_argv, free_port, results, rlpulse, wait_for
from rlpulse import control
from rlpulse.runtime.exporter import Exporter

ROUTING_KEY = "control-e2e-routing-key-0123456789"
POLL = 0.2  # seconds between the run's reads of Alertmanager
N_STEPS = 256  # env steps per PPO rollout; PPO logs once per rollout
INJECT_AT = 2048  # env steps: the learning rate becomes 0.5 (as a bad resume would set it)
EPOCHS = 4  # updates per rollout: the logged step (train/n_updates) grows by 4 a rollout
SAVE_EVERY = 16  # updates (4 rollouts): the resume points
SPIKED = INJECT_AT // N_STEPS * EPOCHS  # the logged step of the first update at the spiked rate


@dataclass
class Stack:
    dir: Path
    prometheus: str
    alertmanager: str
    pagerduty: Sink

    def exporter(self, run_id: str) -> Exporter:
        """An exporter for one run, registered as a file_sd target and scraped once."""
        exp = Exporter(free_port(), addr="127.0.0.1", run_id=run_id, gpu=False, final_wait=5)
        exp.start()
        target = self.dir / "prometheus" / "targets" / f"{run_id}.json"
        target.write_text(json.dumps([{"targets": [f"127.0.0.1:{exp.port}"]}]))
        wait_for(
            lambda: results(self.prometheus, f'up{{instance="127.0.0.1:{exp.port}"}} == 1'),
            30,
            f"the first scrape of {run_id}",
        )
        return exp

    def firing(self, run_id: str) -> list[dict[str, Any]]:
        expr = f'ALERTS{{run_id="{run_id}",alertstate="firing",severity="critical"}}'
        return results(self.prometheus, expr)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("control-e2e")
    sink = Sink()
    (tmp / "routing_key").write_text(ROUTING_KEY + "\n")
    (tmp / "overrides.yml").write_text(yaml.safe_dump({"scrape": {"static_targets": []}}))
    prom, am = free_port(), free_port()
    up = rlpulse(
        "stack", "up", "--fast", "--dir", str(tmp / "stack"),
        "--config", str(tmp / "overrides.yml"),
        "--pagerduty-url", sink.url, "--pagerduty-key-file", str(tmp / "routing_key"),
        "--prometheus-port", str(prom), "--alertmanager-port", str(am),
        "--inbox-port", str(free_port()), "--rollouts-port", str(free_port()),
    )  # fmt: skip
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield Stack(tmp / "stack", f"http://127.0.0.1:{prom}", f"http://127.0.0.1:{am}", sink)
    finally:
        rlpulse("stack", "down", "--dir", str(tmp / "stack"))
        sink.shutdown()


def _ppo(scenario: str, exp: Exporter, folder: Path) -> tuple[Any, list[Any]]:
    """PPO on CartPole reporting to ``exp``, saving every SAVE_EVERY updates into ``folder``,
    with the learning rate spiked at INJECT_AT env steps (``lr-spike``); (model, callbacks)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from rlpulse.integrations.sb3 import RlpulseCallback

    class Spike(BaseCallback):
        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            if scenario == "lr-spike" and self.num_timesteps >= INJECT_AT:
                self.model.lr_schedule = lambda _: 0.5

    torch.set_num_threads(1)
    model = PPO(
        "MlpPolicy", "CartPole-v1", n_steps=N_STEPS, batch_size=64, n_epochs=EPOCHS,
        learning_rate=1e-3, gamma=0.98, gae_lambda=0.8, seed=0, device="cpu",
    )  # fmt: skip
    callbacks = [Spike(), RlpulseCallback(exp, checkpoints=folder, save_every=SAVE_EVERY)]
    return model, callbacks


def _act_on(stack: Stack, exp: Exporter) -> control.Control:
    c = control.attach(exp, {"critical": "stop"}, stack.alertmanager, interval=POLL)
    assert c is not None
    return c


def test_lr_spike_is_saved_and_stopped_naming_the_last_good_step(
    stack: Stack, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    exp = stack.exporter("ctl-e2e-spike")
    c = _act_on(stack, exp)
    model, callbacks = _ppo("lr-spike", exp, tmp_path)
    total = 200 * N_STEPS
    model.learn(total, callback=callbacks)
    request = c.action()
    assert request is not None and request.stop, "the run trained to its end"
    assert model.num_timesteps < total
    assert exp.outcome == ("stopped", request.alert.name)
    last = request.last_good
    assert last.onset is not None and last.step is not None and last.step < SPIKED <= last.onset
    assert last.checkpoint is not None and last.checkpoint[0] <= last.step
    assert Path(last.checkpoint[1]).is_file()
    stop_step = model._n_updates
    saved = tmp_path / f"checkpoint-{stop_step}.zip"
    assert saved.is_file()  # saved as it stopped
    err = capfd.readouterr().err
    assert f"resume from checkpoint-{last.checkpoint[0]:.0f}.zip" in err
    # a stop is an outcome, not a crash or a vanished target: neither pages
    settled = {a["labels"]["alertname"] for a in alerts_once_settled(stack.prometheus)}
    assert not settled & {"RLRunCrashed", "RLTargetDown"}, settled
    print(f"\nupdate {stop_step}: {_since_page(stack, exp.run_id, saved)}; {err}")


def test_a_silenced_failure_trains_on(stack: Stack, tmp_path: Path) -> None:
    exp = stack.exporter("ctl-e2e-silenced")
    silence(stack.alertmanager, exp.run_id)
    c = _act_on(stack, exp)
    model, callbacks = _ppo("lr-spike", exp, tmp_path)
    chunk, after_firing = 4 * N_STEPS, 3  # rollouts trained once the alert fires
    for _ in range(100):
        model.learn(chunk, callback=callbacks, reset_num_timesteps=False)
        assert model.num_timesteps % chunk == 0  # no chunk ended early
        if stack.firing(exp.run_id):
            after_firing -= 1
            if not after_firing:
                break
    assert after_firing == 0, "the failure never paged"
    assert c.action() is None and exp.outcome is None
    exp.finish(wait=5)


def test_a_healthy_run_is_never_stopped(stack: Stack, tmp_path: Path) -> None:
    exp = stack.exporter("ctl-e2e-healthy")
    c = _act_on(stack, exp)
    model, callbacks = _ppo("healthy", exp, tmp_path)
    model.learn(16 * N_STEPS, callback=callbacks)
    assert model.num_timesteps == 16 * N_STEPS
    assert c.action() is None and not stack.firing(exp.run_id)
    exp.finish(wait=5)


def test_the_demo_failure_is_saved_and_stopped(stack: Stack, tmp_path: Path) -> None:
    run_id, port = "ctl-e2e-demo", free_port()
    target = stack.dir / "prometheus" / "targets" / f"{run_id}.json"
    target.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"]}]))
    steps = 5000
    env = {
        **os.environ,
        "RLPULSE_ON_ALERT": "critical=stop",
        "RLPULSE_ALERTMANAGER_URL": stack.alertmanager,
        "RLPULSE_ALERT_POLL_INTERVAL": str(POLL),
        "RLPULSE_FINAL_WAIT": "5",
    }
    argv = demo_argv(
        "--scenario", "entropy-collapse", "--onset", "60", "--steps", str(steps),
        "--port", str(port), "--addr", "127.0.0.1", "--run-id", run_id, "--step-delay", "0.02",
        "--checkpoints", str(tmp_path), "--save-every", "20", "--progress-every", "0",
    )  # fmt: skip
    run = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    [line] = [x for x in run.stdout.splitlines() if x.startswith("rlpulse demo: rlpulse: stopped")]
    stopped_at = int(line.split(" at step ")[1].split()[0])
    assert stopped_at < steps and "finished" not in run.stdout
    assert "resume from checkpoint-" in line and "last good step" in line, line
    saved = tmp_path / f"checkpoint-{stopped_at}.npy"
    assert saved.is_file()
    [outcome] = last(stack.prometheus, f'rl_run_outcome{{run_id="{run_id}"}}')
    assert outcome["metric"]["outcome"] == "stopped"
    print(f"\n{_since_page(stack, run_id, saved)}; {line}")


def _since_page(stack: Stack, run_id: str, saved: Path) -> str:
    """When the stop's checkpoint was written, against the run's first PagerDuty trigger."""
    events = stack.pagerduty.events(run_id=run_id)
    pages = [r.time for r in events if r.body["event_action"] == "trigger"]
    if not pages:
        return "no page yet"
    return f"saved {saved.stat().st_mtime - pages[0]:+.2f} s after the first page"
