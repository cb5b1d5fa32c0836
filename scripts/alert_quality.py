"""docs/reference/alert-quality.md: every corpus run and demo scenario replayed through the
shipped rules.

Run from the repository root with ``.venv/bin/python scripts/alert_quality.py`` (needs
``../shared/corpus/real-logs`` and promtool). Writes its results to
``rlpulse/stack/quality/alert-quality.json``, from which ``rlpulse generate`` renders
``docs/reference/alert-quality.md`` (``rlpulse.stack.docs.qualitydoc``), and that document.
Each run (a log, or one run of a log holding several: Dopamine's seeds, a digest's environments)
has a judgement taken from the corpus README: ``failing`` with the step where the damage is
visible in the numbers and the alerts that name it, ``healthy``, or ``unclear``. The report says,
per run, which alerts fired (severity @ step), the first relevant one, its delay in logged steps
after the damage was visible (negative: ahead of it), the incidents it opened once Alertmanager's
cause-based inhibition is applied, and whether an alert flapped or resolved while its failure
persisted; then totals against the targets of the issue.
"""

from __future__ import annotations

import bisect
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlpulse.offline.replay import DEFAULT_STEP_SECONDS, ReplayResult, replay_runs
from rlpulse.stack.alerts import CAUSES, NONFINITE
from rlpulse.stack.docs import qualitydoc

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "real-logs"
COMMAND = ".venv/bin/python scripts/alert_quality.py"
DEMO_SEED = 0
DEMO_MIN_STEPS = 120
Kind = str  # "failing" | "healthy" | "unclear"


@dataclass(frozen=True)
class Judged:
    """A run's judgement: its kind, the alerts that name its failure (``expected``), alerts on
    events the judgement itself mentions (``noted``) and the step where the damage is visible."""

    name: str
    kind: Kind
    judgement: str
    expected: frozenset[str] = frozenset()
    noted: frozenset[str] = frozenset()
    visible: int | None = None


def _j(
    name: str,
    kind: Kind,
    judgement: str,
    expected: str = "",
    noted: str = "",
    visible: int | None = None,
) -> Judged:
    return Judged(
        name, kind, judgement, frozenset(expected.split()), frozenset(noted.split()), visible
    )


DOPAMINE = "dopamine/google__dopamine__baselines__atari__data__seaquest.json"
DIGEST = (
    "tinker-cookbook/astOwOlfo__tinker-cookbook-reward-hacking__big-run-reward-hacking-by-epoch.txt"
)
COG = (
    "tinker-cookbook/thinking-machines-lab__tinker-cookbook__tinker_cookbook__recipes__cog_rl__"
    "results__experiment_{}__training_metrics.jsonl"
)
JOAN = "tinker-cookbook/joanvelja__tinker-cookbook__reports__data__{}-metrics.jsonl"

CORPUS_RUNS: tuple[Judged, ...] = (
    _j("trl/IMJONEZZ__UnslothGRPO__outputs_checkpoint-250_trainer_state.json", "healthy",
       "slow start (reward ~0 for 150 steps), one KL spike of 0.93", noted="RLKLReferenceSpike"),
    _j("trl/abdo-ashraf__Gemma-3-RL-Finetuning__outputs_checkpoint-250_trainer_state.json",
       "healthy", "reward 0.43 -> 1.51, KL <= 0.07"),
    _j("trl/samyakshrestha__grpo-verified-reasoner__outputs_checkpoint-1134_trainer_state.json",
       "healthy", "KL and grad-norm spikes (a spike rule should fire, a sustained one not); "
       "length 194 -> 640", expected="RLKLReferenceSpike RLGradNormSpike",
       noted="RLResponseLengthExplosion RLKLReferenceHigh"),
    _j("trl/Rusheel86__Chaos-Economy__training_logs.json", "failing",
       "truncation saturation: clipped ratio 0.6 -> 1.0 at the 512 cap", "RLTruncationHigh",
       visible=5),
    _j("verl/volcengine__verl__examples_ppo_trainer_verl_getting_started.ipynb.outputs.log",
       "healthy", "score 0.01 -> 0.54; one actor grad_norm spike of 48", noted="RLGradNormSpike"),
    _j("other/arvindcr4__tinker-rl-lab__experiments_results_arithmetic_metrics.jsonl", "failing",
       "entropy collapse 0.77 -> 0.002 and zero-std groups (task solved, signal gone)",
       "RLEntropyCollapse RLZeroStdGroupsHigh", visible=3),
    _j("sb3/DLR-RM__rl-trained-agents__ppo_LunarLander-v2_1_0.monitor.csv", "healthy",
       "episode return -142 -> +131"),
    _j("other/morikatron__GAIL_PPO__sample_result_ppo_progress.csv", "healthy",
       "CartPole 171 -> 194; early value-loss spikes up to 140", noted="RLValueLossExplosion"),
    _j(f"{DIGEST}#AEEnv", "failing",
       "reward hacking: reward 0.02 -> 0.77, hacked share > 50% from epoch 1088",
       "RLRewardHacking", "RLEvalDrop", visible=1088),
    _j(f"{DIGEST}#OmitDescriptionEnv", "failing",
       "reward hacking: reward 0.39 -> 1.0, hacked share 84% at epoch 64, >= 94% from 768",
       "RLRewardHacking", "RLEvalDrop", visible=64),
    _j(f"{DIGEST}#SyntheticEnv", "failing",
       "reward hacking at the end: hacked share 0% -> 72% at the last epoch (1472)",
       "RLRewardHacking", "RLEvalDrop", visible=1472),
    _j(f"{DIGEST}#SWEFixerEnv", "unclear", "reward stuck at -1.0 for all 24 epochs (never "
       "succeeds; nothing changes for an alert to see)"),
    _j(f"{DIGEST}#BashCodeforcesEnv", "healthy", "0.67 -> 0.87 with <= 11% hacking",
       noted="RLEvalDrop"),
    _j(COG.format(1), "unclear", "looks like success (reward 0.42 -> 0.99); its README calls it "
       "hacked, nothing in the log shows it"),
    _j(COG.format(6), "healthy", "saturated: every group constant-reward at the end (a trap for "
       "zero-std rules)"),
    _j(COG.format(7), "healthy", "slow, noisy learning"),
    _j(JOAN.format("gptoss-20b-v2"), "failing", "held-out correct 0.566 -> 0.509 with held-out "
       "length growth and format_eos 0.94 -> 0.67, visible from step 30",
       "RLEvalDrop RLTruncationHigh RLFormatComplianceDrop", visible=30),
    _j(JOAN.format("gptoss-20b-v3b"), "unclear", "train healthy, held-out flat; 41% of "
       "completions truncated at the start; grad norm ~1e5 but stable"),
    _j(JOAN.format("qwen3-30b-instruct-v3b"), "healthy", "slow starter; 44% truncated at the "
       "start, 23% at the end", noted="RLTruncationHigh"),
    _j(JOAN.format("qwen3-30b-think-v3b"), "failing", "completions at the length cap from step 0 "
       "(EOS share 0.46), no progress", "RLTruncationHigh", visible=0),
    _j("deepspeed-chat/microsoft__DeepSpeedExamples__applications__DeepSpeed-Chat__training__"
       "step3_rlhf_finetuning__training_log_output__actor_opt-1.3b_critic_opt-350m_"
       "globalBatchSize64.log", "healthy", "reward-model score 0.33 -> 4.46; fp16 overflow "
       "skips before step 211"),
    _j(f"{DOPAMINE}#DQN #2", "failing", "collapse after learning: peak 1683 at iteration 80, "
       "< 25% of it from 155", "RLRewardCollapse", visible=155),
    _j(f"{DOPAMINE}#DQN #4", "failing", "collapse after learning: peak 1782 at iteration 121, "
       "collapse from 128", "RLRewardCollapse", visible=128),
    _j(f"{DOPAMINE}#Quantile (JAX)", "healthy", "two of five seeds plateau or decline",
       noted="RLRewardCollapse"),
    _j(DOPAMINE, "healthy", "one of 30 runs (6 agents x 5 seeds) that learns"),
    _j("rllib/ray-project__rl-experiments__atari-apex__apex-results__APEX_BeamRiderNoFrameskip-"
       "v4_1_env=BeamRiderNoFrameskip-v4_2018-09-29_02-01-28uVT3Mg__result.json", "healthy",
       "very noisy (0-15 episodes per iteration), NaN where none finished"),
    _j("rllib/ray-project__rl-experiments__atari-impala__results__IMPALA_BreakoutNoFrameskip-v4_"
       "0_env=BreakoutNoFrameskip-v4_2018-08-20_22-26-08DAqy01__progress.csv", "healthy",
       "return 0.16 -> 547, grad norm at the clip value"),
    _j("sb3/SpencerCPurdy__Deep_Reinforcement_Learning_Market_Maker_with_Order_Book_Dynamics__"
       "training_metrics.json", "failing", "collapse to a do-nothing policy: eval reward peak "
       "16.6 at 75k, exactly 0 +- 0 from 250k", "RLEvalDrop RLRewardCollapse", visible=250_000),
)  # fmt: skip

# scenario -> (kind, alerts its cause should raise, alerts it plausibly raises on the way)
SPIKES = "RLKLReferenceSpike RLGradNormSpike"
DEMO: dict[str, tuple[Kind, str, str]] = {
    "healthy": ("healthy", "", ""),
    "entropy-collapse": ("failing", "RLEntropyCollapse", f"RLZeroStdGroupsHigh {SPIKES}"),
    "kl-blowup": ("failing", "RLKLReferenceHigh RLKLReferenceSpike", "RLRewardCollapse RLEvalDrop"),
    "reward-hacking": ("failing", "RLRewardHacking", f"RLEvalDrop RLKLReferenceHigh {SPIKES}"),
    "length-explosion": (
        "failing",
        "RLResponseLengthExplosion RLTruncationHigh RLRewardHacking",
        "RLEvalDrop RLEntropyBlowup",
    ),
    "nan-loss": ("failing", "RLNonFiniteLoss", f"RLTruncationHigh RLZeroStdGroupsHigh {SPIKES}"),
    "stall": ("unclear", "", ""),
}


@dataclass
class Row:
    """One replayed run with its judgement."""

    judged: Judged
    result: ReplayResult

    @property
    def steps(self) -> list[int]:
        return self.result.timeline.record_steps

    def index(self, step: int | None) -> int:
        """The logged-record index of ``step`` (the first record at or after it)."""
        return bisect.bisect_left(self.steps, step if step is not None else self.steps[0])

    def fired(self) -> list[tuple[str, str, int]]:
        """(alert, severity, earliest onset step) per alert and severity, by onset."""
        first: dict[tuple[str, str], int] = {}
        for a in self.result.alerts:
            step = a.onset_step if a.onset_step is not None else self.steps[0]
            first[(a.alert, a.severity)] = min(first.get((a.alert, a.severity), step), step)
        return sorted(((n, s, o) for (n, s), o in first.items()), key=lambda x: (x[2], x[0]))

    def verdict(self, alert: str) -> str:
        if alert in self.judged.expected:
            return "TP"
        if alert in self.judged.noted:
            return "noted"
        return "?" if self.judged.kind == "unclear" else "FP"

    def first_relevant(self) -> int | None:
        steps = [o for n, _s, o in self.fired() if n in self.judged.expected]
        return min(steps) if steps else None

    def delay(self) -> int | None:
        """Logged steps from the damage being visible to the first relevant alert."""
        onset = self.first_relevant()
        if onset is None or self.judged.visible is None:
            return None
        return self.index(onset) - self.index(self.judged.visible)

    def incidents(self) -> list[str]:
        """Critical alerts that page: those not held back by a paging cause that fired first."""
        crit = {n: o for n, s, o in self.fired() if s == "critical"}
        causes = {NONFINITE: set(crit) - {NONFINITE}, **{c: set(e) for c, e in CAUSES.items()}}
        return [
            n
            for n, o in sorted(crit.items(), key=lambda x: x[1])
            if not any(n in effects and crit.get(c, o + 1) <= o for c, effects in causes.items())
        ]

    def unstable(self) -> list[str]:
        """Relevant alerts that flapped (several firing episodes) or ended before the run did."""
        last = self.steps[-1]
        out = []
        for a in self.result.alerts:
            if a.alert not in self.judged.expected:
                continue
            if len(a.intervals) > 1:
                out.append(f"{a.alert} ({a.severity}) fired {len(a.intervals)} times")
            elif a.intervals[-1].end_step is not None and a.intervals[-1].end_step < last:
                out.append(f"{a.alert} ({a.severity}) resolved at {a.intervals[-1].end_step}")
        return out


def _by_run(path: Path) -> dict[str, ReplayResult]:
    results = replay_runs(path, step_seconds=DEFAULT_STEP_SECONDS)
    return {r.run_id.split("/", 1)[1] if "/" in r.run_id else "": r for r in results}


def corpus_rows() -> Iterator[Row]:
    """Every corpus run with its judgement; a multi-run log's unlisted runs take the log's."""
    files = sorted(p for p in CORPUS.glob("*/*") if p.name not in ("README.md", "sources.json"))
    judged = {j.name: j for j in CORPUS_RUNS}
    for path in files:
        rel = str(path.relative_to(CORPUS))
        for run, result in _by_run(path).items():
            j = judged.get(f"{rel}#{run}") or judged.get(f"{rel}#{run.split(' #')[0]}")
            j = j or judged[rel]
            yield Row(Judged(f"{rel}#{run}" if run else rel, *_rest(j)), result)


def _rest(j: Judged) -> tuple[Kind, str, frozenset[str], frozenset[str], int | None]:
    return j.kind, j.judgement, j.expected, j.noted, j.visible


def demo_rows(directory: Path) -> Iterator[Row]:
    """Each demo scenario trained (seed 0) and written as the JSONL log of its TRL-style keys and
    held-out eval score a user of the demo would write."""
    from rlpulse.demo.grpo import Trainer
    from rlpulse.demo.scenarios import SCENARIOS

    for name, scenario in SCENARIOS.items():
        kind, expected, noted = DEMO[name]
        steps = max(2 * scenario.within_steps, DEMO_MIN_STEPS)
        hang = scenario.config.hang_at_step
        if hang is not None:  # the log of a hung run ends at its last completed step
            steps = hang - 1
        path = directory / f"demo-{name}.jsonl"
        with open(path, "w") as fh:
            for stats in Trainer(scenario.config, seed=DEMO_SEED).run(steps):
                row = {"step": stats.step, **stats.metrics}
                if stats.eval_score is not None:
                    row["eval_reward"] = stats.eval_score
                fh.write(json.dumps(row) + "\n")
        why = f"{scenario.cause} -> {scenario.signature} (by step {scenario.within_steps})"
        if hang is not None:
            why += "; a log only ends, so a replay cannot tell a hang from a finished run"
        visible = scenario.within_steps if kind == "failing" else None
        judged = _j(f"demo/{name}", kind, why, expected, noted, visible)
        (result,) = replay_runs(path, step_seconds=DEFAULT_STEP_SECONDS, framework="trl")
        yield Row(judged, result)


def as_dict(row: Row) -> dict[str, Any]:
    """What the document shows of one run (``rlpulse.stack.docs.qualitydoc`` renders it)."""
    j = row.judged
    fired = row.fired()
    return {
        "name": _short(j.name),
        "kind": j.kind,
        "judgement": j.judgement,
        "expected": sorted(j.expected),
        "fired": [f"{row.verdict(n)} {n} ({s} @ {o})" for n, s, o in fired],
        "visible": j.visible,
        "first": row.first_relevant(),
        "delay": row.delay(),
        "incidents": len(row.incidents()),
        "unstable": row.unstable(),
        "critical_fp": [n for n, s, _o in fired if s == "critical" and row.verdict(n) == "FP"],
        "warning_fp": sum(1 for n, s, _o in fired if s != "critical" and row.verdict(n) == "FP"),
    }


def results(rows: list[Row]) -> dict[str, Any]:
    version = subprocess.run(
        ["promtool", "--version"], capture_output=True, text=True, check=False
    ).stdout.split("\n", 1)[0]
    return {
        "command": COMMAND,
        "demo_seed": DEMO_SEED,
        "step_seconds": DEFAULT_STEP_SECONDS,
        "promtool": version,
        "runs": [as_dict(r) for r in rows],
    }


def _short(name: str) -> str:
    base, _, run = name.partition("#")
    stem = base.split("/", 1)[-1][:48]
    return f"{stem}#{run}" if run else stem


def _dash(v: int | None) -> str:
    return "—" if v is None else str(v)


def main(argv: list[str]) -> int:
    rows = list(corpus_rows())
    with tempfile.TemporaryDirectory() as tmp:
        rows += demo_rows(Path(tmp))
    res = results(rows)
    doc = qualitydoc.save(qualitydoc.CORPUS, res, REPO)
    print(f"wrote {qualitydoc.CORPUS} and {doc}")
    print("\n".join(qualitydoc.corpus_totals(res["runs"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
