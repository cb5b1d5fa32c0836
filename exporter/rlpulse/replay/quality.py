"""docs/alert-quality.md: which alert fires on which corpus run and demo scenario, whether that
is a true or a false positive, and how many steps ahead of the end it fired.

Regenerate with ``python -m rlpulse.replay.quality`` (writes ``docs/alert-quality.md``). The
corpus judgements are the corpus README's; each demo scenario names the alerts its cause should
raise. Every run is replayed with the shipped defaults and ``--step-seconds 60``."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rlpulse.replay import DEFAULT_STEP_SECONDS, ReplayResult, replay
from rlpulse.stack.config import Config
from rlpulse.stack.rules import all_alerts

CORPUS = Path(__file__).resolve().parents[3].parent / "shared" / "corpus" / "real-logs"
OUTPUT = Path(__file__).resolve().parents[3] / "docs" / "alert-quality.md"


@dataclass(frozen=True)
class Expectation:
    """What a run should raise: ``expected`` alerts are true positives, ``noted`` ones point at
    an event the judgement itself mentions (a spike in a healthy run); anything else is false."""

    name: str
    judgement: str
    expected: frozenset[str] = frozenset()
    noted: frozenset[str] = frozenset()


def _e(name: str, judgement: str, expected: str = "", noted: str = "") -> Expectation:
    return Expectation(name, judgement, frozenset(expected.split()), frozenset(noted.split()))


CORPUS_RUNS = (
    _e(
        "trl/IMJONEZZ__UnslothGRPO__outputs_checkpoint-250_trainer_state.json",
        "healthy, slow start (reward ~0 for 150 steps); one KL spike of 0.93",
        noted="RLKLReferenceRising",
    ),
    _e(
        "trl/abdo-ashraf__Gemma-3-RL-Finetuning__outputs_checkpoint-250_trainer_state.json",
        "healthy",
    ),
    _e(
        "trl/samyakshrestha__grpo-verified-reasoner__outputs_checkpoint-1134_trainer_state.json",
        "mostly healthy with KL and grad-norm spikes; a spike rule should fire, a sustained-KL "
        "rule should not; completion length 194 -> 640",
        expected="RLKLReferenceRising RLGradNormSpike",
        noted="RLResponseLengthExplosion",
    ),
    _e(
        "trl/Rusheel86__Chaos-Economy__training_logs.json",
        "failing: truncation saturation (clipped ratio 0.6 -> 1.0)",
        expected="RLTruncationHigh",
    ),
    _e(
        "verl/volcengine__verl__examples_ppo_trainer_verl_getting_started.ipynb.outputs.log",
        "healthy; one actor grad_norm spike of 48",
        noted="RLGradNormSpike",
    ),
    _e(
        "other/arvindcr4__tinker-rl-lab__experiments_results_arithmetic_metrics.jsonl",
        "failing: entropy collapse and zero-std groups (task solved, signal gone)",
        expected="RLEntropyCollapse RLZeroStdGroupsHigh",
    ),
    _e("sb3/DLR-RM__rl-trained-agents__ppo_LunarLander-v2_1_0.monitor.csv", "healthy"),
    _e(
        "other/morikatron__GAIL_PPO__sample_result_ppo_progress.csv",
        "healthy; early value-loss spikes up to 140",
        noted="RLValueLossExplosion",
    ),
)

# scenario -> (alerts its cause should raise, alerts it plausibly raises on the way)
# ("noted": a direct symptom of the cause: large steps clip ratios, a verbosity reward is a
# reward the held-out eval does not pay, an exploding update spikes the gradient norm)
DEMO_EXPECTED = {
    "healthy": ("", ""),
    "entropy-collapse": ("RLEntropyCollapse RLZeroStdGroupsHigh", ""),
    "kl-blowup": (
        "RLKLReferenceHigh RLKLReferenceRising",
        "RLRewardCollapse RLGradNormSpike RLClipFractionHigh",
    ),
    "reward-hacking": ("RLRewardHacking", ""),
    "length-explosion": ("RLResponseLengthExplosion RLTruncationHigh", "RLRewardHacking"),
    "nan-loss": ("RLNonFiniteLoss", "RLGradNormSpike RLKLReferenceHigh RLKLReferenceRising"),
    "stall": ("RLTrainingStalled", ""),
}
DEMO_SEED = 0
DEMO_MIN_STEPS = 120


@dataclass
class Row:
    """One replayed run with its expectation."""

    source: str  # "corpus" or "demo"
    expectation: Expectation
    result: ReplayResult

    def verdict(self, alert: str) -> str:
        """TP, noted, FP, or FP* (a false positive after a true positive already paged)."""
        if alert in self.expectation.expected:
            return "TP"
        if alert in self.expectation.noted:
            return "noted"
        tp = [o for a, o in self.first_onsets().items() if a in self.expectation.expected]
        return "FP*" if tp and min(tp) < self.first_onsets()[alert] else "FP"

    def first_onsets(self) -> dict[str, int]:
        """Each fired alert's earliest onset step (any severity or labels)."""
        out: dict[str, int] = {}
        for a in self.result.alerts:
            step = a.onset_step if a.onset_step is not None else 0
            out[a.alert] = min(out.get(a.alert, step), step)
        return out

    def fired(self) -> list[tuple[str, str, int]]:
        """(alert, severity, earliest onset step) per alert and severity, by onset."""
        first: dict[tuple[str, str], int] = {}
        for a in self.result.alerts:
            step = a.onset_step if a.onset_step is not None else 0
            key = (a.alert, a.severity)
            first[key] = min(first.get(key, step), step)
        return sorted(((n, s, o) for (n, s), o in first.items()), key=lambda x: (x[2], x[0]))

    def missed(self) -> list[str]:
        fired = {a.alert for a in self.result.alerts}
        return sorted(self.expectation.expected - fired)


def demo_logs(directory: Path) -> Iterator[tuple[Expectation, Path]]:
    """Each demo scenario trained (seed 0) and written as a JSONL log of its TRL-style keys and
    its held-out eval score, as a user of the demo would log them."""
    import json

    from rlpulse.demo.grpo import Trainer
    from rlpulse.demo.scenarios import SCENARIOS

    for name, scenario in SCENARIOS.items():
        expected, noted = DEMO_EXPECTED[name]
        steps = max(2 * scenario.within_steps, DEMO_MIN_STEPS)
        hang = scenario.config.hang_at_step
        if hang is not None:  # the log of a hung run ends at the last completed step
            steps = hang - 1
        path = directory / f"demo-{name}.jsonl"
        with open(path, "w") as fh:
            for stats in Trainer(scenario.config, seed=DEMO_SEED).run(steps):
                row = {"step": stats.step, **stats.metrics}
                if stats.eval_score is not None:
                    row["eval_reward"] = stats.eval_score
                fh.write(json.dumps(row) + "\n")
        why = f"demo: {scenario.cause} -> {scenario.signature} (within {scenario.within_steps})"
        if hang is not None:
            why += "; a log only ends, so replay cannot tell a hang from a finished run"
        yield _e(f"demo/{name}", why, expected, noted), path


def collect(step_seconds: float = DEFAULT_STEP_SECONDS) -> list[Row]:
    """Replay the corpus and the demo scenarios."""
    rows = [
        Row("corpus", e, replay(CORPUS / e.name, step_seconds=step_seconds)) for e in CORPUS_RUNS
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for e, path in demo_logs(Path(tmp)):
            rows.append(Row("demo", e, replay(path, step_seconds=step_seconds, framework="trl")))
    return rows


def _cell(items: list[str]) -> str:
    return "<br>".join(items) if items else "—"


def markdown(rows: list[Row], step_seconds: float) -> str:
    """The document."""
    version = subprocess.run(
        ["promtool", "--version"], capture_output=True, text=True, check=False
    ).stdout.split("\n", 1)[0]
    out = [
        "# Alert quality on real and demo runs",
        "",
        "Generated by `python -m rlpulse.replay.quality` (do not edit): every corpus log in "
        "`shared/corpus/real-logs/` and every demo scenario (`rlpulse.demo.scenarios`, seed "
        f"{DEMO_SEED}) replayed with `rlpulse replay --step-seconds {step_seconds:g}` through the "
        f"generated rules with the shipped defaults, evaluated by {version}.",
        "",
        "**TP**: the alert for the run's judged failure. **noted**: an alert on an event the "
        "judgement itself mentions (a spike inside a healthy run) or a direct symptom of a demo "
        "scenario's cause. **FP**: anything else; **FP\\*** when a true positive had already "
        "fired on that run (Alertmanager groups it with, or inhibits it under, that page). "
        "**FN**: an expected alert that did not fire. **Lead** is the steps left in the run when "
        "the alert first fired (what stopping the run at the page would have saved).",
        "",
        "## Per run",
        "",
        "| run | judgement | fired (severity @ onset step, lead) | missed (FN) |",
        "|---|---|---|---|",
    ]
    for row in rows:
        last = row.result.timeline.record_steps[-1]
        fired = [
            f"{row.verdict(name)} {name} ({sev} @ {onset}, lead {last - onset})"
            for name, sev, onset in row.fired()
        ]
        out.append(
            f"| `{row.expectation.name.split('/', 1)[1][:60]}` | {row.expectation.judgement} | "
            f"{_cell(fired)} | {_cell(row.missed())} |"
        )
    out += [
        "",
        "## Per alert",
        "",
        "| alert | severity | true positives (onset, lead) | false positives (onset) | noted "
        "| missed |",
        "|---|---|---|---|---|---|",
    ]
    for name, severities in _alert_table():
        tp, fp, noted, missed = [], [], [], []
        for row in rows:
            short = row.expectation.name.split("/", 1)[1][:40]
            last = row.result.timeline.record_steps[-1]
            hits = [(sev, onset) for n, sev, onset in row.fired() if n == name]
            if name in row.missed():
                missed.append(short)
            if not hits:
                continue
            onset = min(o for _s, o in hits)
            sev = "/".join(sorted({s for s, _o in hits}))
            verdict = row.verdict(name)
            if verdict == "TP":
                tp.append(f"{short} ({sev} @ {onset}, lead {last - onset})")
            elif verdict.startswith("FP"):
                fp.append(f"{short} ({sev} @ {onset}){'*' if verdict == 'FP*' else ''}")
            else:
                noted.append(f"{short} ({sev} @ {onset})")
        cells = (name, severities, _cell(tp), _cell(fp), _cell(noted), _cell(missed))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _alert_table() -> list[tuple[str, str]]:
    sev: dict[str, set[str]] = {}
    for _area, alert in all_alerts(Config()):
        sev.setdefault(alert.name, set()).add(alert.severity)
    return [(name, "/".join(sorted(s))) for name, s in sev.items()]


def main(argv: list[str] | None = None) -> int:
    """Write docs/alert-quality.md (or the path given)."""
    args = argv if argv is not None else sys.argv[1:]
    path = Path(args[0]) if args else OUTPUT
    rows = collect()
    path.write_text(markdown(rows, DEFAULT_STEP_SECONDS))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
