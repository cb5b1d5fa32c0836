"""Alert quality on real CPU trainings with induced failures (issue 14).

    .venv/bin/python -m benchmarks.bench_alert_matrix [--quick] [--no-live] [--doc-only]
        [--only FRAMEWORK]

Trains the matrix of harness/trainings.py and harness/trl_grpo.py, seeds fixed: SB3 PPO,
A2C and DQN on CartPole, TRL GRPO on a tiny local model, tabular Q-learning on FrozenLake and a
CleanRL-style PPO writing TensorBoard events, each healthy over 3 seeds and with its induced
failures. Each run's own log goes through ``rlpulse replay`` with the shipped rules; the SB3 and
TRL runs also report live to ``rlpulse stack up --fast`` (real Prometheus and Alertmanager,
PagerDuty stand-in on 127.0.0.1) through their callbacks, the CleanRL runs through ``rlpulse
tail-tensorboard``, and their log is replayed with the same fast rules to compare. Prints the
table, writes rlpulse/stack/quality/alert-matrix.json (from which ``rlpulse generate`` renders
docs/reference/alert-quality-trainings.md) and that document.
Minutes on 2 CPUs (``--quick``: one healthy seed, shorter runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness import alert_matrix as am
from harness import trainings as tr
from harness import trl_grpo
from rlpulse.stack.docs import qualitydoc

REPO = Path(__file__).resolve().parents[1]
RESULTS = qualitydoc.MATRIX  # its document: qualitydoc.save, as ``rlpulse generate`` renders it
COMMAND = ".venv/bin/python -m benchmarks.bench_alert_matrix"
SEEDS = (0, 1, 2)
# the commit whose rules and signals a row was measured on (``--only`` keeps older rows)
MEASURED = subprocess.run(
    ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
).stdout.strip()
FRAMEWORKS = {**tr.FAILURES, "trl-grpo": trl_grpo.FAILURES}
LIVE_CALLBACK = ("sb3-ppo", "sb3-a2c", "sb3-dqn", "trl-grpo")  # report through their callback
LIVE = (*LIVE_CALLBACK, "cleanrl-ppo")  # and CleanRL's events, followed by the tailer
SB3 = {"timesteps": 24_000, "inject_at": 16_000}
SB3_STALL = {"timesteps": 16_000 + 4096, "inject_at": 16_000}  # DQN logs every 4 episodes
# relearning a flipped reward takes long; DQN's until its 50k buffer has mostly turned over
SB3_FLIP = {
    algo: {"timesteps": steps, "inject_at": 16_000}
    for algo, steps in (("ppo", 40_000), ("a2c", 32_000), ("dqn", 64_000))
}
# How each induced failure reaches (or does not reach) the logged numbers: the mechanism, which
# does not change from run to run; the figures are in the tables.
NOTES = {
    ("sb3-ppo", "lr-spike"): "The swapped schedule takes effect at the next `train()`: Adam "
    "steps of 0.5 wreck the policy within one update, entropy and return fall together.",
    ("sb3-ppo", "neg-entropy"): "`ent_coef` -0.5 rewards certainty, yet against CartPole's "
    "policy gradient it barely moves the policy within the run: the logged entropy goes from "
    "0.20 to 0.14-0.17 over the 8k steps after it (a healthy seed: 0.12-0.23) while the return "
    "keeps rising. No logged number is damaged.",
    ("sb3-ppo", "nan-reward"): "The wrapper's NaN enters the next update's loss and "
    "parameters; the iteration after crashes in `collect_rollouts` (NaN logits refused by "
    "`Categorical`). SB3 dumps an update's `train/*` at the *next* iteration, so the NaN loss is "
    "never logged, and `rollout/ep_rew_mean` turns NaN only if an episode with a NaN reward ended "
    "before the dump (CartPole episodes are ~200 steps by then). `RLNonFiniteLoss` watches "
    "`rl_loss`, `rl_policy_loss`, `rl_value_loss`, `rl_grad_norm` only "
    "(`alerts.nonfinite_loss.metrics`). A replayed `progress.csv` carries no crash: only the live "
    "run, whose exporter ends `crashed`, pages (`RLRunCrashed`).",
    ("sb3-ppo", "sign-flip"): "The agent learns from -r while Monitor logs the task's return. "
    "The critic's targets flip at once (value-loss spike, a leading indicator); the policy "
    "relearns to fail only slowly, and `ep_rew_mean` averages the last 100 episodes.",
    ("sb3-ppo", "stall"): "One env step blocks for 7 min (a remote simulator that stops "
    "answering until its client's timeout), then the run carries on for 4096 env steps: the log "
    "shows one step that took 7 min. RLTrainingStalled waits 5x the run's median step interval "
    "and at least 5 min (`min_wait`), then its 1 min `for`; the fast preset 5 s and 1 s.",
    ("sb3-a2c", "lr-spike"): "As PPO's: RMSprop steps of 0.5 at the next update.",
    ("sb3-a2c", "neg-entropy"): "`ent_coef` -0.5 from the next update: the entropy falls "
    "faster than a healthy seed's (0.47 to 0.18-0.30 over 8k steps, healthy 0.41-0.56) while the "
    "return keeps rising; it ends where healthy PPO runs end (0.2-0.3 of the start).",
    ("sb3-a2c", "nan-reward"): "As PPO's: the NaN enters the next update (every 16 env steps) "
    "and the run crashes in `collect_rollouts`; A2C dumps its log every 25 updates.",
    ("sb3-a2c", "sign-flip"): "As PPO's.",
    ("sb3-a2c", "stall"): "As PPO's.",
    ("sb3-dqn", "lr-spike"): "Adam steps of 0.5 on the Q-network at the next `train()` (every "
    "256 env steps, 64 gradient steps): the greedy policy is wrecked at once.",
    ("sb3-dqn", "nan-reward"): "The NaN reward lands in the replay buffer; the next sampled "
    "batch makes the TD target and the loss NaN (`train/loss` is logged), and the Q-values NaN "
    "(argmax of NaN picks action 0: the run goes on, failing).",
    ("sb3-dqn", "sign-flip"): "The agent learns from -r out of a buffer that turns over to -r "
    "transitions within the run; with -1 at every step both actions' Q-values fall together "
    "and the return did not fall (see below).",
    ("sb3-dqn", "stall"): "As PPO's; DQN logs every 4 episodes.",
    ("q-learning", "schedule-reset"): "epsilon and alpha back to 1: every action random, every "
    "update overwrites the Q-value with one sample; success falls at the next logged batch.",
    ("cleanrl-ppo", "lr-spike"): "Adam's lr set to 0.5 after a bad resume; gradients are "
    "clipped at 0.5, so the damage comes through the step size, not the gradient norm.",
    ("trl-grpo", "length"): "The reward pays only length (the correctness grader kept at weight "
    "0): completions grow to `max_completion_length` and are cut; the held-out correctness "
    "(TRL's evaluation, the run's true objective) falls as the answers turn to padding.",
    ("trl-grpo", "format"): "The reward pays only `\\d+;`: it rises to 1 quickly while held-out "
    "correctness drifts down (nothing holds the sums up): reward hacking against the objective.",
    ("trl-grpo", "cold"): "A temperature schedule multiplies `temperature` by 0.6 each step (the "
    "sampling and the scoring LM head, as a new GRPOConfig value does): the logged entropy falls "
    "to ~0 within a few steps, a group's completions become the same, their advantages 0. "
    "Greedy answers are *more* often right, so neither the reward nor the objective drops: "
    "entropy is the only symptom.",
    ("trl-grpo", "kl-blowup"): "The learning rate jumps to 0.03 with `beta` 1e-3 (with `beta` 0 "
    "TRL loads no reference model and logs no `kl`): KL to the reference goes from ~0.2 to "
    "10^2-10^4 nats, the completions turn to garbage, reward and objective fall to 0.",
    ("trl-grpo", "grader-down"): "The correctness grader raises from the failure on; the reward "
    "function counts `rl_grader_errors_total` and returns None (TRL's way for an unscorable "
    "sample): TRL's reward keeps only the format part, `rewards/correct/mean` and the held-out "
    "score turn NaN (logged as null). Grader errors are counted live only: TRL logs none, so a "
    "replay sees the NaN objective and the reward drop.",
}


def plan(quick: bool) -> list[tuple[str, str, int]]:
    """(framework, scenario, seed) of every run."""
    seeds = SEEDS[:1] if quick else SEEDS
    return [
        (fw, sc, seed)
        for fw, failures in FRAMEWORKS.items()
        for sc, seed in [*(("healthy", s) for s in seeds), *((f, 0) for f in failures)]
    ]


def train(fw: str, scenario: str, seed: int, work: Path, exporter: Any = None) -> tr.Run:
    """One training of the matrix."""
    if fw.startswith("sb3-"):
        algo = fw.removeprefix("sb3-")
        sizes = {"stall": SB3_STALL, "sign-flip": SB3_FLIP[algo]}.get(scenario, SB3)
        return tr.train_sb3(scenario, seed, work, algo=algo, exporter=exporter, **sizes)
    if fw == "trl-grpo":
        return trl_grpo.train_grpo(scenario, seed, work, exporter=exporter)
    if fw == "q-learning":
        return tr.train_q_learning(scenario, seed, work)
    return tr.train_cleanrl_ppo(scenario, seed, work)


def run_matrix(
    work: Path, *, quick: bool, live: bool, say: Callable[[str], None], only: str | None = None
) -> list[dict]:
    """Every run of ``plan``: trained (live when ``live``: SB3 and TRL through their callbacks,
    CleanRL through ``rlpulse tail-tensorboard``), replayed, judged. The stalls, which mostly
    wait out their hang, train in threads beside the others."""
    runs = [r for r in plan(quick) if only in (None, r[0])]
    with (
        am.live_stack(work) if live else contextlib.nullcontext() as stack,
        ThreadPoolExecutor(max_workers=4) as pool,
    ):
        hangs = {r: pool.submit(_one, *r, work, stack, say) for r in runs if r[1] == "stall"}
        rows = {r: _one(*r, work, stack, say) for r in runs if r not in hangs}
        rows.update({r: f.result() for r, f in hangs.items()})
    return [rows[r] for r in runs]


def _one(
    fw: str, scenario: str, seed: int, work: Path, stack: am.LiveStack | None,
    say: Callable[[str], None],
) -> dict:  # fmt: skip
    """One run of the matrix, trained (live on ``stack``), replayed and judged: its JSON row."""
    t0 = time.time()
    run_id = f"{fw}-{scenario}-s{seed}"
    exp = None
    follow: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if fw == "trl-grpo":  # the supervised warm-up, once, before any exporter starts
        trl_grpo.base_model(work)
    if stack is not None and fw in LIVE_CALLBACK:
        exp = stack.exporter(run_id, trl_grpo.KEY_MAP if fw == "trl-grpo" else None)
    elif stack is not None and fw == "cleanrl-ppo":
        follow = stack.tailer(run_id, work / run_id)
    with follow:
        run = train(fw, scenario, seed, work, exp)
    if exp is not None:
        am.end_live(exp, run)
    verdict = am.judge(run, am.replay(run))
    fast = am.judge_fast(run, verdict)
    if stack is not None and fw in LIVE:
        verdict.live = {
            **stack.seen(run.run_id, t0),
            "replay_fast": sorted({f"{a.alert} ({a.severity})" for a in fast.alerts}),
            "replay_fast_incidents": am.incidents(fast),
        }
    say(f"{run.run_id}: {time.time() - t0:.0f}s {verdict.alerts}")
    return {**am.row(run, verdict), "measured": MEASURED}


def totals(rows: list[dict]) -> dict[str, Any]:
    """Figures against the issue's targets."""
    failing = [r for r in rows if r["caught"] is not None]
    healthy = [r for r in rows if r["caught"] is None]
    live = [r for r in rows if r["live"]]
    return {
        "failures": len(failing),
        "healthy_runs": len(healthy),
        **qualitydoc.figures(failing, healthy, ""),
        **qualitydoc.figures([r["fast"] for r in failing], [r["fast"] for r in healthy], "_fast"),
        "resolved_early": sum(bool(r["resolved_early"]) for r in failing),
        "live_runs": len(live),
        "live_agree": sum(qualitydoc.agree(r) for r in live),
        "live_failures": sum(r["caught"] is not None for r in live),
        "live_caught": sum(bool(r["live"]["alerts"]) for r in live if r["caught"] is not None),
        "live_healthy": sum(r["caught"] is None for r in live),
        "live_healthy_pages": sum(r["live"]["incidents"] for r in live if r["caught"] is None),
    }


def results(rows: list[dict], quick: bool) -> dict[str, Any]:
    """What ``rlpulse.stack.docs.qualitydoc`` renders: the runs, their totals and the set-up."""
    context = {
        "stall_seconds": tr.STALL_SECONDS,
        "warmup_steps": trl_grpo.WARMUP_STEPS,
        "objective": trl_grpo.OBJECTIVE,
        "high_lr": trl_grpo.HIGH_LR,
        "drop": am.DROP,
        "slow": am.SLOW,
        "live_pace": trl_grpo.LIVE_PACE,
        "frameworks": list(FRAMEWORKS),
        "notes": [[fw, sc, text] for (fw, sc), text in NOTES.items()],
    }
    return {
        "command": COMMAND,
        "quick": quick,
        "context": context,
        "totals": totals(rows),
        "runs": rows,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one healthy seed per framework")
    ap.add_argument("--no-live", action="store_true", help="replay only, no local stack")
    ap.add_argument("--doc-only", action="store_true", help="rewrite the doc from the JSON")
    ap.add_argument(
        "--only", choices=FRAMEWORKS, help="rerun one framework, its rows replaced in the JSON"
    )
    args = ap.parse_args(argv)
    if args.doc_only:
        saved = json.loads(RESULTS.read_text())
        rows, quick = saved["runs"], saved["quick"]
        saved = results(rows, quick)
    else:
        with tempfile.TemporaryDirectory(prefix="rlpulse-alert-matrix-") as tmp:
            rows = run_matrix(
                Path(tmp), quick=args.quick, live=not args.no_live, say=print, only=args.only
            )
        quick = args.quick
        if args.only:
            kept = [
                r for r in json.loads(RESULTS.read_text())["runs"] if r["framework"] != args.only
            ]
            rows = sorted(kept + rows, key=lambda r: list(FRAMEWORKS).index(r["framework"]))
        saved = results(rows, quick)
    qualitydoc.save(RESULTS, saved, REPO)
    print(qualitydoc.table(rows))
    print(qualitydoc.live_table(rows))
    print(json.dumps(totals(rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
