"""Alert quality on real trainings, CI-sized (benchmarks/bench_alert_matrix.py is the full matrix):
a short SB3 PPO run on CartPole healthy and with a learning-rate spike, reporting live to the
fast local stack (real Prometheus, Alertmanager, PagerDuty stand-in on 127.0.0.1) and replayed
from its own progress.csv; tabular Q-learning on FrozenLake with a schedule bug, replayed from
its JSONL; TRL GRPO on a tiny local model, healthy and with its sampling temperature driven
toward 0, replayed from its trainer_state.json. The induced failures are caught, the healthy
runs page nothing, and the live stack and the replay of the same log with the same rules raise
the same pages."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("stable_baselines3")

from harness import alert_matrix as am
from harness import trainings as tr

SB3 = {"timesteps": 12_000, "inject_at": 8_000}


@pytest.fixture(scope="module")
def sb3_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Each SB3 scenario trained once, live on the stack; its run, verdict and live view."""
    work = tmp_path_factory.mktemp("alert-matrix")
    out: dict[str, Any] = {}
    with am.live_stack(work) as stack:
        for scenario in ("healthy", "lr-spike"):
            exp = stack.exporter(f"ci-{scenario}")
            started = time.time()
            run = tr.train_sb3(scenario, 0, work, exporter=exp, **SB3)
            am.end_live(exp, run)
            out[scenario] = (run, am.judge(run, am.replay(run)), stack.seen(exp.run_id, started))
    yield out


def test_sb3_lr_spike_is_caught(sb3_live: dict[str, Any]) -> None:
    run, verdict, _ = sb3_live["lr-spike"]
    assert verdict.caught, (run, verdict)


def test_sb3_healthy_run_pages_nothing(sb3_live: dict[str, Any]) -> None:
    _, verdict, live = sb3_live["healthy"]
    assert not verdict.critical, verdict.alerts
    assert live["incidents"] == 0, live


@pytest.mark.parametrize("scenario", ["healthy", "lr-spike"])
def test_live_stack_and_replay_agree_on_pages(sb3_live: dict[str, Any], scenario: str) -> None:
    """The critical alerts agree. A warning may not: the run's clock live is the wall clock, the
    replay's is the log's rounded `time_elapsed`, so a one-row blip held for 30 s of one clock
    (RLValueLossExplosion's, once in CI) can end between two scrapes of the other."""
    run, _, live = sb3_live[scenario]
    fast = am.replay(run, fast=True)
    pages = {a.split(" ")[0] for a in live["alerts"] if "(critical)" in a}
    assert pages == {a.alert for a in fast.alerts if a.severity == "critical"}, (live, fast.alerts)


def test_q_learning_schedule_bug_is_caught_and_healthy_is_quiet(tmp_path: Path) -> None:
    broken = tr.train_q_learning("schedule-reset", 0, tmp_path, episodes=3000, inject_at=2000)
    verdict = am.judge(broken, am.replay(broken))
    assert verdict.caught, verdict
    healthy = tr.train_q_learning("healthy", 0, tmp_path, episodes=3000, inject_at=2000)
    assert not am.judge(healthy, am.replay(healthy)).critical


def test_trl_grpo_entropy_collapse_is_caught_and_healthy_is_quiet(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    from harness import trl_grpo

    cold = trl_grpo.train_grpo("cold", 0, tmp_path, steps=80, inject_at=40)
    verdict = am.judge(cold, am.replay(cold))
    assert "RLEntropyCollapse" in am.names(verdict.alerts), verdict
    assert verdict.caught, verdict
    healthy = trl_grpo.train_grpo("healthy", 0, tmp_path, steps=80, inject_at=40)
    assert not am.judge(healthy, am.replay(healthy)).critical
