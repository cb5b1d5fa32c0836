"""The reference band on real trainings: a run against three earlier healthy seeds.

    .venv/bin/python scripts/band_quality.py [--steps 24000] [--algo ppo|a2c|dqn] [--work DIR]

Trains SB3 PPO (or A2C, DQN) on CartPole-v1 (the settings of ``harness.trainings.SB3_ALGOS``):
three healthy reference seeds (20-22) make a band (``rlpulse band build``); then healthy seeds
none of them used (23-30) and runs with causes the band never saw are replayed with and without it
(``rlpulse replay --reference-band``): a learning rate 30x too low (a config regression: the run
learns, slowly), the pole's angular velocity reading 0 from env step 4,000 (an observation
channel dies), and gravity x3 from env step 8,000 (the environment's dynamics change). Prints,
per run, the first ``RLOutsideReferenceBand`` (its series and step) and every other alert.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

REFERENCES = (20, 21, 22)
HEALTHY = (23, 24, 25, 26, 27, 28, 29, 30)
CAUSES = {
    "lr-low": "the learning rate / 30 from the start (a config regression)",
    "obs-dead": "observation 3 (pole angular velocity) reads 0 from env step 4,000",
    "gravity": "gravity x3 from env step 8,000 (the dynamics change)",
}
BAND_ALERT = "RLOutsideReferenceBand"


def train(scenario: str, seed: int, steps: int, work: str, algo: str = "ppo") -> str:
    """One run of ``algo``; the path of its progress.csv."""
    import gymnasium as gym
    import stable_baselines3
    import torch
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from harness.trainings import SB3_ALGOS, SB3_LOG_INTERVAL, DynamicsCause

    torch.set_num_threads(1)

    settings = dict(SB3_ALGOS[algo])
    if scenario == "lr-low":
        settings["learning_rate"] = settings["learning_rate"] / 30
    out = Path(work) / f"{algo}-{scenario}-s{seed}"
    if (out / "progress.csv").exists():  # --work DIR: a run trained before is read again
        return str(out / "progress.csv")
    venv = DummyVecEnv([lambda: Monitor(DynamicsCause(gym.make("CartPole-v1"), scenario))])
    venv.seed(seed)
    cls = getattr(stable_baselines3, algo.upper())
    model = cls("MlpPolicy", venv, seed=seed, device="cpu", **settings)
    model.set_logger(configure(str(out), ["csv"]))
    model.learn(steps, log_interval=SB3_LOG_INTERVAL[algo])
    model.logger.close()
    return str(out / "progress.csv")


def alerts(log: str, band: str | None) -> list[tuple[str, str, str, float | None]]:
    """(alert, severity, series, onset step) of every alert a replay raises."""
    from rlpulse.offline.replay import replay

    result = replay(log, reference_band=band)
    return [(a.alert, a.severity, a.labels.get("series", ""), a.onset_step) for a in result.alerts]


def chart(band: Any, logs: dict[tuple[str, int], str], algo: str, out: Path) -> None:
    """The episode-return band and, over it, a healthy seed not in it and the failing runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlpulse import keys
    from rlpulse.offline import bands
    from rlpulse.offline.logs import read_log, resolve_format
    from rlpulse.offline.replay.timeline import framework_hint

    curve = band.curves["episode_return"]
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=110)
    ax.fill_between(curve.steps, curve.low, curve.high, color="tab:gray", alpha=0.2)
    ax.plot(curve.steps, curve.low, "--", color="tab:gray", lw=1, label="band of seeds 20-22")
    ax.plot(curve.steps, curve.high, "--", color="tab:gray", lw=1)
    shown = {("healthy", HEALTHY[0]): "healthy seed 23", **{(c, 23): c for c in CAUSES}}
    for run, label in shown.items():
        p = Path(logs[run])
        fmt = resolve_format(p, "auto")
        ref = bands.reference(list(read_log(p, fmt)), framework_hint(p, fmt), keys.user_map(None))
        points = ref["episode_return"][1]
        ax.plot([s for s, _, _ in points], [v for _, _, v in points], lw=1.4, label=label)
    ax.set_xlabel(f"logged step ({algo.upper()} updates)")
    ax.set_ylabel("episode return (smoothed)")
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title("A run against the band of earlier healthy runs at the same step", fontsize=10)
    fig.tight_layout()
    fig.savefig(out)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=24_000)
    ap.add_argument("--work", help="keep the trained runs in this directory (and reuse them)")
    ap.add_argument("--algo", default="ppo", choices=("ppo", "a2c", "dqn"))
    ap.add_argument("--chart", type=Path, help="draw the band and the runs' returns into this PNG")
    args = ap.parse_args(argv)
    from rlpulse.offline import bands

    runs = [("healthy", s) for s in REFERENCES + HEALTHY] + [(c, 23) for c in CAUSES]
    with tempfile.TemporaryDirectory(prefix="rlpulse-band-") as tmp:
        work = args.work or tmp
        with ProcessPoolExecutor(2) as pool:
            done = [pool.submit(train, s, seed, args.steps, work, args.algo) for s, seed in runs]
            logs = {run: job.result() for run, job in zip(runs, done, strict=True)}
        band = bands.build([Path(logs[("healthy", s)]) for s in REFERENCES])
        path = Path(work) / "band.json"
        path.write_text(band.to_json())
        if args.chart:
            chart(band, logs, args.algo, args.chart)
        print(f"band of seeds {REFERENCES}: " + ", ".join(
            f"{n} steps {c.steps[0]:g}..{c.steps[-1]:g}" for n, c in band.curves.items()
        ))  # fmt: skip
        print("| run | why | RLOutsideReferenceBand (series @ first step) | other alerts "
              "with the band | alerts without the band |")  # fmt: skip
        print("|---|---|---|---|---|")
        for scenario, seed in runs[len(REFERENCES) :]:
            log = logs[(scenario, seed)]
            with_band = alerts(log, str(path))
            without = alerts(log, None)
            firsts: dict[str, float] = {}
            for a, _sev, series, step in with_band:
                if a == BAND_ALERT and step is not None:
                    firsts[series] = min(step, firsts.get(series, step))
            said = ", ".join(f"{s} @ {step:g}" for s, step in sorted(firsts.items())) or "—"
            other = sorted({f"{a} ({s})" for a, s, _, _ in with_band if a != BAND_ALERT})
            base = sorted({f"{a} ({s})" for a, s, _, _ in without})
            why = CAUSES.get(scenario, "healthy seed, not in the band")
            run = f"{args.algo}-{scenario}-s{seed}"
            print(f"| {run} | {why} | {said} | {', '.join(other) or '—'} | "
                  f"{', '.join(base) or '—'} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
