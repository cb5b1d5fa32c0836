"""The reward-hacking demo scenario leaves samples in which the exploit is plain to read through
``rlpulse rollouts``: late in the run the best-paid rollouts are the grader's loophole ('!'
accepted as proof of a correct answer), not correct answers."""

from __future__ import annotations

import json

from rlpulse.cli import main
from rlpulse.demo import scenarios
from rlpulse.demo.grpo import Trainer
from rlpulse.demo.publish import trace_columns
from rlpulse.demo.task import CORRECT, LOOPHOLE
from rlpulse.rollouts import Recorder

STEPS = 160


def record_demo(data_dir, run_id: str, scenario: str) -> None:
    """Train the demo and record every step's rollouts, as ``rlpulse demo`` does."""
    rec = Recorder(run_id, data_dir=data_dir)
    trainer = Trainer(scenarios.get(scenario).config, seed=0)
    for stats in trainer.run(STEPS):
        rec.record(**trace_columns(stats.rollouts))
    rec.close()


def cli(capsys, *args: str) -> list[dict]:
    assert main(["rollouts", *args, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_reward_hacking_is_visible_in_the_sampled_rollouts(tmp_path, capsys):
    record_demo(tmp_path, "hack", "reward-hacking")
    run = ["--run", "hack", "--data-dir", str(tmp_path)]
    late = [
        cli(capsys, "list", *run, "--step", str(s), "--best", "3")
        for s in range(STEPS - 9, STEPS + 1)
    ]
    best = [r for rows in late for r in rows]
    hacked = [r for r in best if r["verdict"] == LOOPHOLE]
    assert len(hacked) >= 0.8 * len(best), [r["verdict"] for r in best]
    for r in hacked:
        assert "!" in r["response"] and r["components"]["correctness"] == 1.0
    early = cli(capsys, "list", *run, "--step", "5")
    assert not any(r["verdict"] == LOOPHOLE for r in early)
    # "paid for correctness" — how many of those answers a strict reader would accept:
    paid = cli(capsys, "list", *run, "--component", "correctness>=1", "--limit", "10000")
    late_paid = [r for r in paid if r["step"] > STEPS - 20]
    assert sum(r["verdict"] == LOOPHOLE for r in late_paid) > 0.5 * len(late_paid)
    # and the table a person reads shows it too
    assert main(["rollouts", "list", *run, "--step", str(STEPS), "--best", "3"]) == 0
    table = capsys.readouterr().out
    assert "loophole" in table and "!" in table


def test_healthy_run_pays_for_correct_answers(tmp_path, capsys):
    record_demo(tmp_path, "ok", "healthy")
    run = ["--run", "ok", "--data-dir", str(tmp_path)]
    best = [
        r
        for s in range(STEPS - 9, STEPS + 1)
        for r in cli(capsys, "list", *run, "--step", str(s), "--best", "3")
    ]
    assert sum(r["verdict"] == CORRECT for r in best) >= 0.8 * len(best), [
        r["verdict"] for r in best
    ]
