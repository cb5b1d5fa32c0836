"""Per-step cost of rlpulse's ``log()`` in the regimes a trainer meets, against its baselines.

    python benchmarks/bench_log.py [--rounds N] [--before DIR]

A training step logs 32 mapped keys (7 of them watched by the step-indexed detector). Every 100
steps the trainer waits for its accelerator (``--gap`` ms asleep, the GIL released: the time the
apply thread works in). Regimes: scraped every 15, 150 or 1,500 steps (the scrape applies what
is left first and reads what it adds to the store, the detector's signals included, as the
endpoint does before it formats the exposition; here on the training thread between steps,
outside its clock) or never scraped (no Prometheus yet, or it is down). Per regime and logger:

- *training thread*: CPU of the recording calls alone (``time.thread_time`` around them), µs a
  step; rlpulse against a dict write of the same 32 values (target ≤ 2.5x in every regime);
- *total*: CPU of the whole process per step (every thread: the calls, rlpulse's apply thread,
  the scrapes' apply, tensorboardX's writer thread), against 32 pre-bound prometheus_client
  ``Gauge.set`` (target: rlpulse ≤ Gauge.set at 1,500 steps per scrape).

Peers: a dict write, ``Gauge.set``, and tensorboardX, wandb (offline) and trackio if installed.
With ``--before DIR`` (another tree's package root: ``src/``, or ``exporter/`` before the layout
move; e.g. ``git archive <rev> src | tar -x -C /tmp/before``, then ``/tmp/before/src``) each
round also measures that rlpulse, interleaved with this one, so both see the same load. Each
logger runs in its own subprocess. Also prints
``observe_rollouts`` of 4,096 samples against 4,096 ``Histogram.observe`` calls (≥ 20x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

N_KEYS = 32
N_SAMPLES = 4096
BATCH = 100  # steps between two waits for the accelerator
REGIMES = {"15": 15, "150": 150, "1,500": 1500, "never": 0}  # steps per scrape (0: never)
STEPS = 6000  # steps measured per regime
HERE = Path(__file__).resolve()


def step_metrics() -> dict[str, float]:
    from rlpulse import catalog

    names = [m.name for m in catalog.CATALOG if m.type == "gauge" and not m.labels][:N_KEYS]
    return {name: 0.5 + i for i, name in enumerate(names)}


def _logger(name: str, tmp: str) -> tuple[Callable[[dict[str, float], int], None], Any, Any]:
    """(step, scrape, close) of one logger."""
    if name == "dict":
        sink: dict[str, float] = {}

        def dict_step(m: dict[str, float], i: int) -> None:
            for k, v in m.items():
                sink[k] = v

        return dict_step, None, None
    if name == "gauge":
        import prometheus_client as pc

        registry = pc.CollectorRegistry()
        bound = [
            pc.Gauge(f"b_{i}", "bench", ["run_id"], registry=registry).labels("bench")
            for i in range(N_KEYS)
        ]

        def gauge_step(m: dict[str, float], i: int) -> None:
            for g, v in zip(bound, m.values(), strict=True):
                g.set(v)

        return gauge_step, None, None
    if name == "rlpulse":
        from rlpulse import Exporter

        exp = Exporter(port=0, run_id="bench", gpu=False, host=False, process=False)

        def rl_step(m: dict[str, float], i: int) -> None:
            exp.log(m, step=i)

        def rl_scrape() -> None:
            exp.flush()
            for _ in exp.scrape_samples():  # what a scrape reads (the detector's signals ...)
                pass

        return rl_step, rl_scrape, rl_scrape
    if name == "tensorboardX":
        from tensorboardX import SummaryWriter

        writer = SummaryWriter(logdir=os.path.join(tmp, "tb"))

        def tb_step(m: dict[str, float], i: int) -> None:
            for k, v in m.items():
                writer.add_scalar(k, v, i)

        return tb_step, None, writer.close
    if name == "wandb":
        import wandb

        os.environ["WANDB_SILENT"] = "true"
        run = wandb.init(dir=tmp, project="rlpulse-bench", mode="offline")
        return (lambda m, i: run.log(dict(m), step=i)), None, run.finish
    if name == "trackio":
        import trackio

        trackio.init(project="rlpulse-bench")
        return (lambda m, i: trackio.log(dict(m), step=i)), None, trackio.finish
    raise ValueError(name)


def worker(name: str, gap: float) -> dict[str, Any]:
    """One logger through every regime: {regime: (training-thread µs, total CPU µs) a step}."""
    metrics = step_metrics()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for regime, every in REGIMES.items():
            step, scrape, close = _logger(name, tmp)
            for i in range(200):  # warm-up: bindings, first-call costs
                step(metrics, i)
            if scrape is not None:
                scrape()
            time.sleep(0.2)
            batch = every if 0 < every < BATCH else BATCH  # steps between two pauses
            thread, c0, since = 0.0, time.process_time(), 0
            for start in range(1000, 1000 + STEPS, batch):
                t0 = time.thread_time()
                for i in range(start, start + batch):
                    step(metrics, i)
                thread += time.thread_time() - t0
                since += batch
                if every and since >= every:
                    since = 0
                    if scrape is not None:
                        scrape()
                time.sleep(gap * batch / BATCH)
            if close is not None:
                close()  # what is left is applied / written: part of the cost
            time.sleep(0.2)
            out[regime] = (thread / STEPS * 1e6, (time.process_time() - c0) / STEPS * 1e6)
    return out


def _run_worker(name: str, gap: float, path: str | None) -> dict[str, Any] | str:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, str(HERE), "--worker", name, "--gap", str(gap)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        return "not installed" if "ModuleNotFoundError" in last else last
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def histograms(repeat: int = 9) -> tuple[float, float]:
    """µs of 4,096 Histogram.observe calls, and of one observe_rollouts of 4,096 samples
    (the call and its apply)."""
    import numpy as np
    import prometheus_client as pc
    from bench_suite import median_us  # this folder is the script's first import path

    from rlpulse import Exporter, catalog

    rng = np.random.default_rng(0)
    lat, tokens = rng.exponential(0.5, N_SAMPLES), rng.integers(16, 4096, N_SAMPLES)
    buckets = catalog.get("rl_rollout_duration_seconds").buckets
    hist = pc.Histogram("b_lat", "bench", buckets=buckets, registry=pc.CollectorRegistry())
    exp = Exporter(port=0, run_id="bench", gpu=False, host=False, process=False)
    values = lat.tolist()

    def per_sample() -> None:
        for x in values:
            hist.observe(x)

    def batch() -> None:
        exp.observe_rollouts(latency_seconds=lat, response_tokens=tokens)
        exp.flush()

    return median_us(per_sample, 20, repeat), median_us(batch, 200, repeat)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gap", type=float, default=0.01, help="seconds asleep every 100 steps")
    parser.add_argument("--before", help="another tree's package root (src/ or exporter/)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.gap)))
        return 0
    loggers: dict[str, tuple[str, str | None]] = {
        "dict write": ("dict", None),
        "Gauge.set x32, pre-bound": ("gauge", None),
        "rlpulse log()": ("rlpulse", None),
    }
    if args.before:
        loggers["rlpulse log(), before"] = ("rlpulse", str(Path(args.before).resolve()))
    loggers |= {"tensorboardX add_scalar x32": ("tensorboardX", None)}
    loggers |= {"wandb.log, offline": ("wandb", None), "trackio.log": ("trackio", None)}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in loggers}
    missing: dict[str, str] = {}
    for r in range(args.rounds):
        order = list(loggers) if r % 2 == 0 else list(reversed(loggers))
        for name in order:
            if name in missing:
                continue
            kind, path = loggers[name]
            got = _run_worker(kind, args.gap, path)
            if isinstance(got, str):
                missing[name] = got
            else:
                runs[name].append(got)
    med = {
        name: {
            regime: tuple(statistics.median(run[regime][k] for run in rs) for k in (0, 1))
            for regime in REGIMES
        }
        for name, rs in runs.items()
        if rs
    }
    print(
        f"python {sys.version.split()[0]}, {args.rounds} rounds (medians), {N_KEYS} keys a step, "
        f"{STEPS} steps per regime, {args.gap * 1e3:g} ms asleep every {BATCH} steps"
    )
    for name, why in missing.items():
        print(f"{name}: {why}")
    dict_, gauge = med["dict write"], med["Gauge.set x32, pre-bound"]
    print()
    head = "steps per scrape | logger | training thread µs | total CPU µs | thread / dict"
    print(f"| {head} | total / Gauge.set |")
    print("| --- | --- | --- | --- | --- | --- |")
    for regime in REGIMES:
        for name, m in med.items():
            thread, total = m[regime]
            print(
                f"| {regime} | {name} | {thread:,.2f} | {total:,.1f} | "
                f"{thread / dict_[regime][0]:.2f}x | {total / gauge[regime][1]:.2f}x |"
            )
    t_hist, t_batch = histograms()
    print()
    print(
        f"Histogram.observe x4096 {t_hist:,.0f} µs; observe_rollouts of 4096 samples (call and "
        f"apply) {t_batch:,.0f} µs: {t_hist / t_batch:.1f}x (target ≥ 20x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
