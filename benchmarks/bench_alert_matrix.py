"""Alert quality on real CPU trainings with induced failures (issue 14).

    .venv/bin/python -m benchmarks.bench_alert_matrix [--quick] [--no-live]

Trains the matrix of benchmarks/trainings.py (SB3 PPO on CartPole: healthy over 3 seeds and
five induced failures; tabular Q-learning on FrozenLake: healthy over 3 seeds and a schedule
bug; a CleanRL-style PPO writing TensorBoard events: healthy and a learning-rate spike), seeds
fixed. Each run's own log goes through ``rlpulse replay`` with the shipped rules; the SB3 runs
also report live to ``rlpulse stack up --fast`` (real Prometheus and Alertmanager, PagerDuty
stand-in on 127.0.0.1), and their log is replayed with the same fast rules to compare. Prints
the table, writes benchmarks/results/alert-matrix.json and docs/alert-quality-trainings.md.
Minutes on 2 CPUs (``--quick``: one healthy seed, shorter runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import alert_matrix as am
from benchmarks import trainings as tr

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "alert-matrix.json"
DOC = REPO / "docs" / "alert-quality-trainings.md"
COMMAND = ".venv/bin/python -m benchmarks.bench_alert_matrix"
SEEDS = (0, 1, 2)
SB3 = {"timesteps": 24_000, "inject_at": 16_000}
SB3_STALL = {"timesteps": 16_000 + 3 * 256, "inject_at": 16_000}


def plan(quick: bool) -> list[tuple[str, str, int]]:
    """(framework, scenario, seed) of every run."""
    seeds = SEEDS[:1] if quick else SEEDS
    return [
        (fw, sc, seed)
        for fw, failures in tr.FAILURES.items()
        for sc, seed in [*(("healthy", s) for s in seeds), *((f, 0) for f in failures)]
    ]


def train(fw: str, scenario: str, seed: int, work: Path, exporter: Any = None) -> tr.Run:
    """One training of the matrix."""
    if fw == "sb3-ppo":
        sizes = SB3_STALL if scenario == "stall" else SB3
        return tr.train_sb3(scenario, seed, work, exporter=exporter, **sizes)
    if fw == "q-learning":
        return tr.train_q_learning(scenario, seed, work)
    return tr.train_cleanrl_ppo(scenario, seed, work)


def run_matrix(work: Path, *, quick: bool, live: bool, say: Callable[[str], None]) -> list[dict]:
    """Every run of ``plan``: trained (SB3 live when ``live``), replayed, judged."""
    rows = []
    with am.live_stack(work) if live else contextlib.nullcontext() as live_stack:
        for fw, scenario, seed in plan(quick):
            t0 = time.time()
            exp = None
            if live_stack is not None and fw == "sb3-ppo":
                exp = live_stack.exporter(f"{fw}-{scenario}-s{seed}")
            run = train(fw, scenario, seed, work, exp)
            verdict = am.judge(run, am.replay(run))
            if exp is not None and live_stack is not None:
                am.end_live(exp, run)
                fast = am.replay(run, fast=True)
                verdict.live = {
                    **live_stack.seen(run.run_id, t0),
                    "replay_fast": sorted({f"{a.alert} ({a.severity})" for a in fast.alerts}),
                    "replay_fast_incidents": am.incidents(fast),
                }
            rows.append(am.row(run, verdict))
            say(f"{run.run_id}: {time.time() - t0:.0f}s {verdict.alerts}")
    return rows


def totals(rows: list[dict]) -> dict[str, Any]:
    """Figures against the issue's targets."""
    failing = [r for r in rows if r["caught"] is not None]
    healthy = [r for r in rows if r["caught"] is None]
    leads = [r["lead"] for r in failing if r["lead"] is not None]
    live = [r for r in rows if r["live"]]
    return {
        "failures": len(failing),
        "caught": sum(bool(r["caught"]) for r in failing),
        "median_lead": statistics.median(leads) if leads else None,
        "healthy_runs": len(healthy),
        "healthy_critical": sum(len(r["critical"]) for r in healthy),
        "max_incidents": max((len(r["incidents"]) for r in failing), default=0),
        "resolved_early": sum(bool(r["resolved_early"]) for r in failing),
        "live_runs": len(live),
        "live_agree": sum(_agree(r) for r in live),
    }


def _agree(r: dict) -> bool:
    return am.names(r["live"]["alerts"]) == am.names(r["live"]["replay_fast"])


def _cell(value: Any) -> str:
    if value is None or value == []:
        return "-"
    return ", ".join(value) if isinstance(value, list) else str(value)


def table(rows: list[dict]) -> str:
    """The Markdown table of every run."""
    head = (
        "| framework | scenario | seed | alerts (severity) @ onset step | first relevant alert "
        "@ step | damage visible @ step | lead (logged steps) | incidents | resolved while "
        "failing |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        first = f"{r['first_alert']} @{r['first_alert_step']}" if r["first_alert"] else None
        if r["caught"] is False:
            first = "**missed**"
        lines.append(
            f"| {r['framework']} | {r['scenario']} | {r['seed']} | {_cell(r['alerts'])} | "
            f"{_cell(first)} | {_cell(r['visible_step'])} | {_cell(r['lead'])} | "
            f"{_cell(r['incidents'])} | {_cell(r['resolved_early'])} |"
        )
    return "\n".join(lines)


def live_table(rows: list[dict]) -> str:
    """Live stack against replay of the same log with the same (fast) rules."""
    lines = [
        "| run | live: alerts fired | live: PagerDuty incidents | replay (fast rules) | agree |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        if not r["live"]:
            continue
        lv = r["live"]
        lines.append(
            f"| {r['run_id']} | {_cell(lv['alerts'])} | {lv['incidents']} "
            f"({_cell(lv['pages'])}) | {_cell(lv['replay_fast'])} | "
            f"{'yes' if _agree(r) else '**no**'} |"
        )
    return "\n".join(lines)


def document(rows: list[dict], tot: dict[str, Any], quick: bool) -> str:
    """docs/alert-quality-trainings.md."""
    cmd = COMMAND + (" --quick" if quick else "")
    return f"""# Alert quality on real trainings

Generated by `{cmd}` from `benchmarks/results/alert-matrix.json`; do not edit by hand.

Real CPU trainings, seeds fixed, with failures induced the way they happen (never by writing a
bad metric value; see `benchmarks/trainings.py`): SB3 PPO on CartPole (a learning-rate schedule
swapped for 0.5, `ent_coef` set to -0.5, an env wrapper returning NaN rewards, a wrapper negating
the reward the agent learns from, an env step slowed to 40 ms), tabular Q-learning on FrozenLake
(a schedule bug resets epsilon and alpha to 1) and a CleanRL-style PPO writing TensorBoard events
(Adam's lr set to 0.5). Each failure starts at a fixed env step and persists to the end.

Each run's own log (SB3 `progress.csv`, JSONL, TensorBoard events) is replayed with the shipped
rules (`rlpulse replay`). *Damage visible*: the first logged step at or after the failure began
where the logged reward is non-finite or below {am.DROP:g} of its best before (stall: a step that
took {am.SLOW:g}x the median step time). *First relevant alert*: the first alert with its onset at
or after the failure began. *Lead*: logged steps from the damage to that alert (negative: ahead
of it). *Incidents*: critical alerts left after cause-based inhibition.

## Totals

- induced failures caught: {tot["caught"]} of {tot["failures"]}
- median lead: {tot["median_lead"]} logged steps (target <= 3)
- critical alerts on healthy runs: {tot["healthy_critical"]} over {tot["healthy_runs"]} runs
  (target 0)
- most incidents for one root cause: {tot["max_incidents"]} (target <= 1)
- failing runs with an alert that resolved while the failure persisted: {tot["resolved_early"]}
- live stack and replay agree on the alerts: {tot["live_agree"]} of {tot["live_runs"]} SB3 runs

## Replay with the shipped rules

{table(rows)}

## Live stack against replay (SB3)

Each SB3 run also reported live through `RlpulseCallback` to `rlpulse stack up --fast` (real
Prometheus and Alertmanager, PagerDuty stand-in); its `progress.csv` was then replayed with the
same fast rules. Alerts compared by name.

{live_table(rows)}
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one healthy seed per framework")
    ap.add_argument("--no-live", action="store_true", help="replay only, no local stack")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rlpulse-alert-matrix-") as tmp:
        rows = run_matrix(Path(tmp), quick=args.quick, live=not args.no_live, say=print)
    tot = totals(rows)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"command": COMMAND, "totals": tot, "runs": rows}, indent=1))
    DOC.write_text(document(rows, tot, args.quick))
    print(table(rows))
    print(live_table(rows))
    print(json.dumps(tot, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
