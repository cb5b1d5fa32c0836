"""docs/reference/alert-quality-heldout.md: alert quality on causes detection was not tuned on.

    .venv/bin/python scripts/heldout_quality.py [--no-sb3]

Issue 24's held-out set: every run below is trained (or, for the TRL-keyed logs, generated) here
with seeds none of the tuning used (10, 11, 12) and causes the alert matrix does not induce, and
is judged *before* it is replayed: its kind, the step its failure begins and the alerts that name
that failure come from the cause alone (``CASES``). Each run's own log then goes through
``rlpulse replay`` with the shipped rules, and the figures are measured as in the alert matrix
(``harness/alert_matrix.py``: damage visible, first relevant alert, lead in logged steps,
incidents after inhibition). Per alert: precision (runs where it fired on the failure it names,
of all runs where it fired), recall (of the failing runs whose cause it names) and median lead.

Writes ``rlpulse/stack/quality/heldout.json``, rendered into the document by ``rlpulse
generate`` (``rlpulse.stack.docs.qualitydoc``), and that document.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness import alert_matrix as am  # noqa: E402
from harness.trainings import Run  # noqa: E402
from rlpulse.stack.docs import qualitydoc  # noqa: E402

COMMAND = ".venv/bin/python scripts/heldout_quality.py"
SEEDS = (10, 11, 12)
OBJECTIVE = "eval_rewards/correct/mean"


@dataclass(frozen=True)
class Case:
    """One held-out cause on one framework, judged before any replay."""

    framework: str
    scenario: str
    seeds: tuple[int, ...]
    expected: tuple[str, ...]  # the alerts that name the failure (empty: healthy)
    why: str  # what the cause does to the run, as judged before the replay
    train: Callable[[str, int, Path], Run]


# ---- TRL-keyed logs (synthetic: TRL's GRPO keys, replayed with --framework trl) -----------------

TRL_STEPS, TRL_INJECT = 200, 100


def _trl_log(scenario: str, seed: int, work: Path) -> Run:
    """A GRPO run's ``log_history`` as JSONL, TRL's keys, one step a minute: the reward rises
    0.2 -> 0.7 with noise 0.02 (per-step batch means), KL and lengths drift, the held-out
    correctness (the declared objective) is read every 10 steps."""
    rng = random.Random(seed)
    log = work / f"trl-{scenario}-s{seed}.jsonl"
    run = Run("trl-synthetic", scenario, seed, log, "jsonl", "reward", None)
    run.key_map = {OBJECTIVE: "objective"}
    if scenario != "healthy":
        run.inject_at = run.inject_step = 0 if scenario == "flat-objective" else TRL_INJECT
    # the flat objective never drops and the proxy only rises: no logged number shows damage
    # to count a lead from (the reward key is the proxy, which never falls)
    if scenario == "null-loss":
        run.reward_key = "loss"
    rows = []
    for step in range(TRL_STEPS):
        broken = run.inject_step is not None and step >= run.inject_step
        reward = 0.2 + 0.5 * step / TRL_STEPS + rng.gauss(0, 0.02)
        row: dict[str, Any] = {
            "step": step,
            "loss": 0.01 * rng.gauss(0, 1),
            "grad_norm": abs(rng.gauss(1.0, 0.2)),
            "learning_rate": 1e-6,
            "reward": reward,
            "reward_std": abs(rng.gauss(0.3, 0.03)),
            "kl": 0.002 * step * (1 + 0.1 * rng.gauss(0, 1)),
            "entropy": 1.0 - 0.3 * step / TRL_STEPS + rng.gauss(0, 0.02),
            "completion_length": 200 + rng.gauss(0, 15),
            "frac_reward_zero_std": max(0.0, rng.gauss(0.1, 0.03)),
        }
        if broken and scenario == "dead-grader":  # the grader answers 0 for every sample
            row |= {"reward": 0.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0}
        if broken and scenario == "null-loss":  # NaN loss, written as null by json.dumps users
            row |= {"loss": None, "grad_norm": None}
        if step % 10 == 0:
            flat = scenario == "flat-objective"
            score = rng.choice((0.0, 0.005, 0.01)) if flat else 0.1 + 0.3 * step / TRL_STEPS
            if broken and scenario == "dead-grader":
                score = 0.1 + 0.3 * TRL_INJECT / TRL_STEPS - 0.001 * (step - TRL_INJECT)
            row[OBJECTIVE] = score + (0 if flat else rng.gauss(0, 0.02))
        rows.append(row)
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


# ---- tabular Q-learning: the tutorial loop, one logged row per episode -------------------------

Q_EPISODES, Q_INJECT = 3000, 2000


def _q_learning(scenario: str, seed: int, work: Path) -> Run:
    """The classic tutorial loop on slippery FrozenLake 4x4 logging every episode (``episode``,
    the 0/1 ``reward``, ``epsilon``): ``reward-zero`` from episode 2000 a reward wrapper
    answers 0 (the agent and the log see it); ``q-reset`` a bad checkpoint reload zeroes the
    Q-table at episode 2000 (epsilon at its floor: it relearns slowly); ``action-remap`` from
    episode 2000 an action wrapper shifts every action by one (a changed action space: the
    learned policy walks the wrong way and relearns slowly)."""
    import gymnasium as gym
    import numpy as np

    rng = np.random.default_rng(seed)
    env = gym.make("FrozenLake-v1", map_name="4x4", is_slippery=True)
    q = np.zeros((16, 4))
    log = work / f"q-{scenario}-s{seed}.jsonl"
    run = Run("q-learning-episodes", scenario, seed, log, "jsonl", "reward", None)
    if scenario != "healthy":
        run.inject_at = run.inject_step = Q_INJECT
    with open(log, "w") as fh:
        for episode in range(1, Q_EPISODES + 1):
            broken = run.inject_at is not None and episode >= Q_INJECT
            if scenario == "q-reset" and episode == Q_INJECT:
                q[:] = 0.0
            remap = broken and scenario == "action-remap"
            eps = max(0.05, 1.0 - episode / 1200)
            state, _ = env.reset(seed=int(rng.integers(1 << 31)))
            total, done = 0.0, False
            while not done:
                explore = rng.random() < eps
                action = int(rng.integers(4)) if explore else int(np.argmax(q[state]))
                nxt, reward, terminated, truncated, _ = env.step(
                    (action + 1) % 4 if remap else action
                )
                reward = 0.0 if broken and scenario == "reward-zero" else float(reward)
                target = reward + 0.99 * np.max(q[nxt]) * (not terminated)
                q[state, action] += 0.1 * (target - q[state, action])
                state, total, done = nxt, total + reward, terminated or truncated
            fh.write(json.dumps({"step": episode, "episode": episode, "reward": total,
                                 "epsilon": eps}) + "\n")  # fmt: skip
    return run


# ---- CartPole faults --------------------------------------------------------------------------


def _switch(env: Any, fault: str, start: int, noise: Any) -> Any:
    """``env`` until it took ``start`` steps, then the same env behind ``fault``: ``obs-noise``
    (a sensor fault adds N(0, 1) noise to every observation, drawn from ``noise``) or
    ``action-stuck`` (the actuator ignores the agent and pushes left every step)."""
    import gymnasium as gym

    if fault == "obs-noise":
        broken = gym.wrappers.TransformObservation(
            env, lambda o: (o + noise.normal(0, 1, o.shape)).astype(o.dtype), None
        )
    else:
        broken = gym.wrappers.TransformAction(env, lambda a: 0, None)

    class Switch(gym.Wrapper[Any, Any, Any, Any]):
        def __init__(self) -> None:
            super().__init__(env)
            self.steps = 0

        def step(self, action: Any) -> Any:
            self.steps += 1
            return (broken if self.steps >= start else self.env).step(action)

    return Switch()


# ---- CleanRL-style PPO (one file, TensorBoard charts): new seeds, new causes --------------------


def _cleanrl(scenario: str, seed: int, work: Path) -> Run:
    """``harness.trainings.train_cleanrl_ppo`` (CleanRL's ppo.py core on CartPole, every chart
    ppo.py writes), with a fault from iteration 40 of 60 in each of its 4 envs: ``reward-zero``
    a reward wrapper inside the episode statistics answers 0 (a broken grader: the agent and
    the charts see it); ``obs-noise`` and ``action-stuck`` as for SB3."""
    import numpy as np

    from harness.trainings import AfterStep, train_cleanrl_ppo

    noise = np.random.default_rng(seed)

    def wrap(env: Any, start: int) -> Any:
        if scenario == "reward-zero":
            return AfterStep(env, start, lambda r: 0.0)
        return _switch(env, scenario, start, noise)

    return train_cleanrl_ppo(scenario, seed, work, all_charts=True, wrap=wrap)


# ---- Stable-Baselines3 on CartPole: new seeds, new causes --------------------------------------

SB3_STEPS, SB3_INJECT = 24_000, 16_000


def _sb3(algo: str) -> Callable[[str, int, Path], Run]:
    def train(scenario: str, seed: int, work: Path) -> Run:
        """``explore``: DQN's exploration rate forced to 1.0 (a schedule bug); ``reward-zero``:
        a reward wrapper inside Monitor answers 0 (a broken grader: the agent and the log see
        it); ``reward-scale``: the agent learns from r x 1000 (outside Monitor: the log keeps
        the task's return), the critic's targets blow up; ``obs-noise``: a sensor fault adds
        N(0, 1) noise to every observation; ``action-stuck``: the actuator ignores the agent and
        pushes left (action 0) every step."""
        import gymnasium as gym
        import numpy as np
        import stable_baselines3
        import torch
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.logger import configure
        from stable_baselines3.common.monitor import Monitor
        from stable_baselines3.common.vec_env import DummyVecEnv

        from harness.trainings import SB3_ALGOS, SB3_LOG_INTERVAL, AfterStep, _first_step_at

        torch.set_num_threads(1)
        out = work / f"sb3-{algo}-{scenario}-s{seed}"
        out.mkdir()  # the run folder: progress.csv and the Monitor's monitor.csv
        run = Run(f"sb3-{algo}", scenario, seed, out, "sb3-run", "rollout/ep_rew_mean", None)
        if scenario != "healthy":
            run.inject_at = SB3_INJECT

        noise = np.random.default_rng(seed)

        def make() -> Any:
            env = gym.make("CartPole-v1")
            if scenario in ("obs-noise", "action-stuck"):
                return Monitor(_switch(env, scenario, SB3_INJECT, noise), str(out))
            if scenario == "reward-zero":
                return Monitor(AfterStep(env, SB3_INJECT, lambda r: 0.0), str(out))
            if scenario == "reward-scale":
                return AfterStep(Monitor(env, str(out)), SB3_INJECT, lambda r: 1000.0 * r)
            return Monitor(env, str(out))

        class Explore(BaseCallback):
            def _on_step(self) -> bool:
                if scenario == "explore" and self.num_timesteps >= SB3_INJECT:
                    self.model.exploration_schedule = lambda _: 1.0  # type: ignore[attr-defined]
                return True

        venv = DummyVecEnv([make])
        venv.seed(seed)
        cls = getattr(stable_baselines3, algo.upper())
        model = cls("MlpPolicy", venv, seed=seed, device="cpu", **SB3_ALGOS[algo])
        model.set_logger(configure(str(out), ["csv"]))
        model.learn(SB3_STEPS, callback=Explore(), log_interval=SB3_LOG_INTERVAL[algo])
        model.logger.close()
        run.log = out / "progress.csv"
        run.inject_step = _first_step_at(run) if run.inject_at is not None else None
        run.log = out  # replayed as the live callback sees the run: rows and episodes
        return run

    return train


# ---- public logs: the RL-Zoo's published agents' training runs (healthy) ---------------------

PUBLIC = REPO / "harness" / "data" / "public-monitors"


def _public(scenario: str, seed: int, work: Path) -> Run:
    """A published agent's training run, worker 0's ``Monitor`` file (``PUBLIC/README.md``)."""
    return Run("rl-zoo", scenario, seed, PUBLIC / f"{scenario}.monitor.csv", "sb3-csv", "r", None)


def _public_cases() -> tuple[Case, ...]:
    sources = json.loads((PUBLIC / "sources.json").read_text())
    return tuple(
        Case("rl-zoo", src["file"].removesuffix(".monitor.csv"), (0,), (),
             f"public: {src['algo']} on {src['env']}, a published agent's training (healthy)",
             _public)
        for src in sources
    )  # fmt: skip


COLLAPSE, LOST, HACK = "RLRewardCollapse", "RLRewardSignalLost", "RLRewardHacking"
FAULTS = (  # CartPole faults (``_switch``): (cause, the alerts that name it, what it does)
    ("obs-noise", (COLLAPSE,), "a sensor fault adds N(0, 1) noise to every observation"),
    ("action-stuck", (COLLAPSE,), "the actuator ignores the agent and pushes left every step"),
)
CASES: tuple[Case, ...] = (
    Case("trl-synthetic", "healthy", SEEDS, (), "reward 0.2 -> 0.7 (noise 0.02), objective "
         "0.1 -> 0.4, KL and entropy drift gently", _trl_log),
    Case("trl-synthetic", "flat-objective", SEEDS, (HACK,), "proxy reward 0.2 -> 0.7 while the "
         "declared objective reads 0.000-0.010 from its first reading (it never falls)", _trl_log),
    Case("trl-synthetic", "dead-grader", SEEDS[:2], (LOST, COLLAPSE, "RLZeroStdGroupsHigh"),
         "from step 100 the grader answers 0 for every sample (reward 0, std 0)", _trl_log),
    Case("trl-synthetic", "null-loss", SEEDS[:2], ("RLNonFiniteLoss",), "from step 100 the loss "
         "and grad norm are NaN, written as JSON null", _trl_log),
    Case("q-learning-episodes", "healthy", SEEDS, (), "the tutorial loop, one row per episode "
         "(0/1 reward)", _q_learning),
    Case("q-learning-episodes", "reward-zero", SEEDS[:2], (LOST, COLLAPSE), "from episode 2000 a "
         "reward wrapper answers 0", _q_learning),
    Case("q-learning-episodes", "q-reset", SEEDS[:2], (COLLAPSE,), "a bad checkpoint reload "
         "zeroes the Q-table at episode 2000", _q_learning),
    Case("q-learning-episodes", "action-remap", SEEDS[:2], (COLLAPSE,), "from episode 2000 "
         "an action wrapper shifts every action by one (the learned policy walks the wrong "
         "way)", _q_learning),
    Case("cleanrl-ppo", "healthy", SEEDS, (), "CartPole, ppo.py's defaults (4 envs x 512 "
         "steps an iteration)", _cleanrl),
    *(Case("cleanrl-ppo", cause, SEEDS[:1], names, f"from iteration 40 of 60 {why}", _cleanrl)
      for cause, names, why in (("reward-zero", (LOST, COLLAPSE), "each env's reward is 0 (the "
                                 "agent and the charts see it)"), *FAULTS)),
    Case("sb3-ppo", "healthy", SEEDS, (), "CartPole, rl-zoo-like settings", _sb3("ppo")),
    Case("sb3-dqn", "healthy", SEEDS, (), "CartPole, rl-zoo-like settings", _sb3("dqn")),
    Case("sb3-a2c", "healthy", SEEDS, (), "CartPole, rl-zoo-like settings", _sb3("a2c")),
    Case("sb3-dqn", "explore", SEEDS[:1], (COLLAPSE,), "exploration rate forced to 1.0 from env "
         "step 16k", _sb3("dqn")),
    Case("sb3-dqn", "reward-zero", SEEDS[:1], (LOST, COLLAPSE), "reward 0 from env step 16k "
         "(agent and log)", _sb3("dqn")),
    Case("sb3-ppo", "reward-zero", SEEDS[:1], (LOST, COLLAPSE), "reward 0 from env step 16k "
         "(agent and log)", _sb3("ppo")),
    Case("sb3-ppo", "reward-scale", SEEDS[:1], ("RLValueLossExplosion", COLLAPSE), "the agent "
         "learns from r x 1000 from env step 16k", _sb3("ppo")),
    *(Case(f"sb3-{algo}", cause, SEEDS[:1], names, f"from env step 16k {why}", _sb3(algo))
      for cause, names, why in FAULTS for algo in ("ppo", "a2c", "dqn")),
    *_public_cases(),
)  # fmt: skip


def judge(case: Case, run: Run) -> dict[str, Any]:
    """The run's row: its log replayed with every logged step one scrape after the one before
    (the lead in logged steps, whatever the run's pace), and at its own pace (``paced_*``: the
    lead in rows and seconds of its log's times, and its critical alerts)."""
    row = _judged(case, run, am.replay(run, rows=True))
    paced = _judged(case, run, am.replay(run))
    row.update(
        paced_lead=paced["relevant_lead"],
        paced_seconds=paced["lead_seconds"],
        paced_critical=paced["critical"],
    )
    return row


def _judged(case: Case, run: Run, result: am.ReplayResult) -> dict[str, Any]:
    verdict = am.judge(run, result)
    row = am.row(run, verdict)
    start = run.inject_step if run.inject_step is not None else math.inf
    fired = [(a.alert, a.severity, a.onset_step) for a in result.alerts]
    relevant = sorted(
        # the step the page names: its since step, or the step it fired at ("at step N")
        (
            a.onset_step,
            a.onset_seconds,
            a.alert,
            a.onset_step if a.since_step is None else a.since_step,
        )
        for a in result.alerts
        if a.alert in case.expected and a.onset_step is not None and a.onset_step >= start
    )
    steps = am.logged_steps(result)
    first = relevant[0] if relevant else None
    lead = since_rows = seconds = None
    if first is not None and verdict.visible_step is not None:
        visible = am._index(steps, verdict.visible_step)
        lead = am._index(steps, first[0]) - visible
        since_rows = am._index(steps, first[3]) - visible
        tl = result.timeline
        seconds = first[1] - tl.record_times[tl.record_steps.index(verdict.visible_step)]
    row.update(
        expected=list(case.expected),
        why=case.why,
        rows=len(steps),
        relevant=first[2] if first else None,
        relevant_step=first[0] if first else None,
        relevant_lead=lead,
        lead_seconds=seconds,
        relevant_since=first[3] if first else None,
        since_rows=since_rows,
        fired_names=sorted({n for n, _s, o in fired if o is not None and o >= start}
                           if case.expected else {n for n, _s, _o in fired}),
    )  # fmt: skip
    return row


def _trained(case: Case, seed: int, work: Path) -> Run:
    """The case's run with ``seed``: trained into ``work``, or the one trained there before."""
    saved = work / f"{case.framework}-{case.scenario}-s{seed}.run.json"
    if saved.exists():
        fields = json.loads(saved.read_text())
        return Run(**{**fields, "log": Path(fields["log"])})
    run = case.train(case.scenario, seed, work)
    saved.write_text(json.dumps({**dataclasses.asdict(run), "log": str(run.log)}))
    return run


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-sb3", action="store_true", help="skip the SB3 trainings")
    ap.add_argument("--only", help="only cases of this framework (the others' rows are kept)")
    ap.add_argument("--first-seed", action="store_true", help="one seed per case")
    ap.add_argument(
        "--keep", type=Path, help="keep the trained runs in this folder and reuse those there"
    )
    args = ap.parse_args(argv)
    rows = []
    if args.only and qualitydoc.HELDOUT.exists():
        kept = qualitydoc.load(qualitydoc.HELDOUT)["runs"]
        rows = [r for r in kept if r["framework"] != args.only]
    with tempfile.TemporaryDirectory(prefix="rlpulse-heldout-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for case in CASES:
            if args.no_sb3 and case.framework.startswith("sb3"):
                continue
            if args.only and case.framework != args.only:
                continue
            for seed in case.seeds[:1] if args.first_seed else case.seeds:
                run = _trained(case, seed, work)
                row = judge(case, run)
                rows.append(row)
                said = f"relevant {row['relevant']} lead {row['relevant_lead']}"
                said += f" (since-step lead {row['since_rows']})"
                print(f"{run.run_id}: {row['alerts']} {said}", flush=True)
    res = {"command": COMMAND, "seeds": list(SEEDS), "runs": rows}
    doc = qualitydoc.save(qualitydoc.HELDOUT, res, REPO)
    print(f"wrote {qualitydoc.HELDOUT} and {doc}")
    for key in ("relevant_lead", "since_rows"):
        leads = [r[key] for r in rows if r[key] is not None]
        print("median", key, statistics.median(leads) if leads else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
