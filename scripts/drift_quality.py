"""Drift on real trainings: what rl_drift_score says on healthy seeds and on induced causes.

    .venv/bin/python scripts/drift_quality.py [--steps 24000] [--jobs 2]

Trains SB3 PPO and A2C on CartPole-v1 (``harness.trainings.SB3_ALGOS``) with the rlpulse SB3
callback (every 4th step's observation and action are drift samples): healthy seeds 20-22 of
each, the pole's angular velocity (obs[3]) reading 0 from env step 4,000 (an observation channel
dies), and gravity x3 from env step 8,000 (the dynamics change). After each rollout it reads the
exporter's drift features. Prints, per run: whether RLInputDrift's condition held (an input past
0.25, an observation at 100) and from which env step, the features drifted (their onset step, the
one a later failure's page names), and the highest observation and behaviour scores.

Then an LLM prompt-mix shift on real TRL GRPO runs (the tiny GPT-2 of ``harness.trl_grpo``,
warmed up on sums of two digits; 16 prompts a step, in dataset order): 80% one-digit sums
("easy") and 20% two-digit ones ("hard") throughout in healthy seeds, 30% / 70% from step 70 in
shifted ones. The TRL callback gives the prompts' lengths; the reward function reports each
prompt's ``source`` column with ``rlpulse``'s ``observe_prompts``, as a user would.

``--synthetic`` adds the same shift fed straight to ``observe_prompts`` (no model: 60 steps of 64
prompts, gsm8k 80% / math 20%, from step 30 40% / 60%), 5 healthy seeds and 5 shifted ones.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SEEDS = (20, 21, 22)
CAUSES = {
    "obs-dead": "obs[3] (pole angular velocity) reads 0 from env step 4,000",
    "gravity": "gravity x3 from env step 8,000",
}


def train(algo: str, scenario: str, seed: int, steps: int) -> dict[str, Any]:
    """One SB3 run with the rlpulse callback; what its drift features said after each rollout."""
    import gymnasium as gym
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from harness.trainings import SB3_ALGOS, DynamicsCause
    from rlpulse import Exporter
    from rlpulse.detect import drift
    from rlpulse.integrations.sb3 import RlpulseCallback

    torch.set_num_threads(1)

    exp = Exporter(port=0, run_id=f"{algo}-{scenario}-s{seed}", gpu=False, host=False,
                   process=False, final_wait=0)  # fmt: skip
    timeline: list[tuple[int, int, dict[tuple[str, str], tuple[float, float | None]]]] = []
    returns: list[tuple[int, float]] = []
    paged: dict[str, tuple[int, list[str]]] = {}  # step alert -> (env step, drift it would name)

    class Read(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    returns.append((self.num_timesteps, float(info["episode"]["r"])))
            return True

        def _on_rollout_end(self) -> None:
            exp.flush()
            now = {key: (f.score, f.onset) for key, f in exp.drift.features.items()}
            timeline.append((self.num_timesteps, int(self.model._n_updates), now))
            # a step alert's condition holds where the run exports its failure onset; its page
            # would name every drift onset exported then (the description's last sentences)
            drifted = [f"{k}/{n}" for (k, n), (_, o) in now.items() if o is not None]
            for metric, labels, _ in exp.scrape_samples():
                if metric.name == "rl_failure_onset_step" and labels[0] not in paged:
                    paged[labels[0]] = (self.num_timesteps, drifted)

    venv = DummyVecEnv([lambda: Monitor(DynamicsCause(gym.make("CartPole-v1"), scenario))])
    venv.seed(seed)
    model = getattr(stable_baselines3, algo.upper())(
        "MlpPolicy", venv, seed=seed, device="cpu", **SB3_ALGOS[algo]
    )
    # RlpulseCallback first: its rollout end hands the samples over before Read reads them
    model.learn(steps, callback=[RlpulseCallback(exp, rollouts=False), Read()])
    exp.close()
    warned_at = None
    for env_steps, _, now in timeline:
        if any(
            (k == "input" and s > drift.SHIFT) or (k == "observation" and s >= drift.EVENT)
            for (k, _), (s, _) in now.items()
        ):
            warned_at = env_steps
            break
    last = timeline[-1][2] if timeline else {}
    peak: dict[str, float] = {}
    for _, _, now in timeline:
        for (kind, _), (score, _) in now.items():
            if score == score and score < drift.EVENT:
                peak[kind] = max(peak.get(kind, 0.0), score)
    onsets = {f"{k}/{n}": o for (k, n), (_, o) in last.items() if o is not None}
    first_onset = {}
    for env_steps, updates, now in timeline:
        for (k, n), (_, o) in now.items():
            if o is not None and f"{k}/{n}" not in first_onset:
                first_onset[f"{k}/{n}"] = (env_steps, updates)
    late = [r for s, r in returns if s > steps - 4000]
    inject = {"obs-dead": 4000, "gravity": 8000}.get(scenario)
    damage = None  # the first env step after the cause where 5 episodes average half of before
    if inject is not None:
        before = [r for s, r in returns if s <= inject][-20:]
        after = [(s, r) for s, r in returns if s > inject]
        level = 0.5 * float(np.mean(before)) if before else 0.0
        for i in range(4, len(after)):
            if np.mean([r for _, r in after[i - 4 : i + 1]]) < level:
                damage = after[i][0]
                break
    return {
        "algo": algo,
        "scenario": scenario,
        "seed": seed,
        "warned_at": warned_at,
        "onsets": onsets,
        "first_onset": first_onset,
        "peak": peak,
        "final_return": float(np.mean(late)) if late else float("nan"),
        "damage": damage,
        "paged": paged,
    }


def prompts(shifted: bool, seed: int) -> dict[str, Any]:
    """A synthetic prompt stream through observe_prompts; when its source drifted and from which
    step."""
    import numpy as np

    from rlpulse import Exporter

    rng = np.random.default_rng(seed)
    exp = Exporter(port=0, run_id=f"prompts-{seed}", gpu=False, host=False, process=False,
                   final_wait=0)  # fmt: skip
    first: dict[str, float] = {}
    for step in range(60):
        exp.log({"loss": 1.0}, step=step)
        math_share = 0.6 if shifted and step >= 30 else 0.2
        source = rng.choice(["gsm8k", "math"], 64, p=[1 - math_share, math_share])
        lengths = np.where(source == "math", rng.normal(180, 40, 64), rng.normal(90, 25, 64))
        exp.observe_prompts(lengths=lengths.round(), sources=source.tolist())
        exp.flush()
        for (_, name), f in exp.drift.features.items():
            if f.onset is not None and name not in first:
                first[name] = f.onset
    exp.close()
    return {"shifted": shifted, "seed": seed, "onsets": first}


def grpo(shifted: bool, seed: int, steps: int = 110, shift_at: int = 70) -> dict[str, Any]:
    """A real TRL GRPO run whose prompt mix shifts (or not) at ``shift_at``; when its inputs
    drifted (the step, per feature) and when each step alert's condition first held."""
    import random
    import tempfile

    import torch
    from datasets import Dataset  # type: ignore[import-untyped]
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from harness import trl_grpo
    from rlpulse import Exporter
    from rlpulse.integrations.trl import RlpulseCallback

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="drift-grpo-"))
    base = trl_grpo.base_model(work)
    rng = random.Random(seed)
    per_step = 16
    prompts, sources = [], []
    for i in range(steps * per_step):
        hard_share = 0.7 if shifted and i >= shift_at * per_step else 0.2
        hard = rng.random() < hard_share
        a = rng.randint(10, 99) if hard else rng.randint(0, 9)
        prompts.append(f"{a}+{rng.randint(0, 9)}=")
        sources.append("hard" if hard else "easy")
    exp = Exporter(port=0, run_id=f"grpo-{seed}", gpu=False, host=False, process=False,
                   final_wait=0)  # fmt: skip
    rewards = trl_grpo.Rewards(exp)

    def correct(prompts: list[str], completions: list[str], source: list[str], **kw: Any) -> Any:
        exp.observe_prompts(sources=source[:: args.num_generations])  # a prompt per group
        return rewards.correct(prompts, completions)

    drifted: dict[str, float] = {}
    paged: dict[str, tuple[int, list[str]]] = {}

    class Read(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            exp.flush()
            now = [f"{k}/{n}" for (k, n), f in exp.drift.features.items() if f.onset is not None]
            for (_, n), f in exp.drift.features.items():
                if f.onset is not None and n not in drifted:
                    drifted[n] = f.onset
            for metric, labels, _ in exp.scrape_samples():
                if metric.name == "rl_failure_onset_step" and labels[0] not in paged:
                    paged[labels[0]] = (int(state.global_step), now)

    args = GRPOConfig(
        output_dir=str(work / "out"), max_steps=steps, per_device_train_batch_size=per_step * 4,
        num_generations=4, max_completion_length=trl_grpo.MAX_COMPLETION,
        learning_rate=trl_grpo.LR, lr_scheduler_type="constant", beta=0.0, logging_steps=1,
        save_strategy="no", report_to="none", seed=seed, use_cpu=True, disable_tqdm=True,
        reward_weights=[1.0, 0.5], shuffle_dataset=False, dataloader_num_workers=0,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=str(base),
        reward_funcs=[correct, trl_grpo.Rewards.format],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts, "source": sources}),
        callbacks=[RlpulseCallback(exp), Read()],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    exp.close()
    return {"shifted": shifted, "seed": seed, "onsets": drifted, "paged": paged}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=24000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--synthetic", action="store_true", help="the synthetic prompt feed too")
    ap.add_argument("--only-llm", action="store_true", help="the TRL runs alone")
    args = ap.parse_args()
    if not args.only_llm:
        classic(args.steps, args.jobs)
    print("\nLLM prompt mix (real TRL GRPO, tiny GPT-2): hard prompts 20% -> 70% at step 70")
    cases = [(False, s) for s in (0, 1, 2)] + [(True, s) for s in (0, 1)]
    with ProcessPoolExecutor(args.jobs) as pool:
        for r in pool.map(grpo, *zip(*cases, strict=True)):
            kind = "shifted" if r["shifted"] else "healthy"
            print(f"  {kind} seed {r['seed']}: drifted (step) {r['onsets'] or '-'}")
            for alert, (at, drifted) in r["paged"].items():
                print(
                    f"    {alert} from step {at}: its page names {', '.join(drifted) or 'no drift'}"
                )
    if args.synthetic:
        synthetic()


def classic(steps: int, jobs: int) -> None:
    """The SB3 runs and their table."""
    runs = [(a, "healthy", s) for a in ("ppo", "a2c") for s in SEEDS]
    runs += [(a, c, SEEDS[0]) for a in ("ppo", "a2c") for c in CAUSES]
    with ProcessPoolExecutor(jobs) as pool:
        results = list(pool.map(train, *zip(*runs, strict=True), [steps] * len(runs)))
    print(
        "run                     warns at   drifted features (onset: env step, update)"
        "                 peak obs / behaviour  return (last 4k)"
    )
    for r in results:
        name = f"{r['algo']}-{r['scenario']}-s{r['seed']}"
        warned = "-" if r["warned_at"] is None else str(r["warned_at"])
        onsets = ", ".join(f"{k} ({e}, {u})" for k, (e, u) in r["first_onset"].items()) or "-"
        peak = f"{r['peak'].get('observation', 0):.2f} / {r['peak'].get('behaviour', 0):.2f}"
        print(f"{name:23s} {warned:>9s}   {onsets:55s} {peak:>21s}  {r['final_return']:7.1f}")
        if r["damage"] is not None:
            print(
                f"{'':23s} damage (5-episode return under half of before) at env step {r['damage']}"
            )
        for alert, (at, drifted) in r["paged"].items():
            names = ", ".join(drifted) or "no drift"
            print(f"{'':23s} {alert} from env step {at}: its page names {names}")
    healthy = [r for r in results if r["scenario"] == "healthy"]
    fp = sum(r["warned_at"] is not None for r in healthy)
    print(f"healthy runs warned: {fp} of {len(healthy)}")


def synthetic() -> None:
    """The synthetic prompt feed."""
    print("\nLLM prompt mix (synthetic, observe_prompts): source gsm8k 80% -> 40% at step 30")
    llm = [prompts(shifted, seed) for shifted in (False, True) for seed in range(5)]
    for r in llm:
        kind = "shifted" if r["shifted"] else "healthy"
        print(f"  {kind} seed {r['seed']}: drifted {r['onsets'] or '-'}")


if __name__ == "__main__":
    main()
