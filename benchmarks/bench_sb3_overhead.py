"""Wall-time overhead of the SB3 integration on a real PPO run, measured side by side.

    python benchmarks/bench_sb3_overhead.py [--runs N] [--timesteps T] [--scrape-interval S]

Each round trains PPO("MlpPolicy", "CartPole-v1") twice from the same seed, once plain and once
with ``RlpulseCallback`` reporting to a fresh exporter (a new run, as in real use: a reused one
would see the step counters start again and drop ``time/total_timesteps`` as a negative
increment) that a thread scrapes over HTTP every ``--scrape-interval`` seconds (as Prometheus
would, but more often); the order alternates from round to round. Only ``model.learn`` is timed,
in wall time and in process CPU time (all threads: the apply thread's and the scrapes' CPU count
as overhead). Target: ≤ +1%. Per measure it prints the medians and the mean of the per-pair log
ratios with its 95% confidence interval (each pair runs back to back, so it is the figure least
moved by other load): the run resolves a 1% difference when that interval is narrower than ±1%,
and says so, or how many pairs it would take. It also prints the integration's own time (the
callback hooks and the logger writer, timed from inside) as a share of the instrumented wall time.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from rlpulse.integrations.sb3 import RlpulseCallback
from rlpulse.runtime.exporter import Exporter

N_ENVS = 4
N_STEPS = 256


def scraper(url: str, interval: float, stop: threading.Event, took: list[float]) -> None:
    """GET ``url`` every ``interval`` s until ``stop``, appending each scrape's time to ``took``."""
    while not stop.wait(interval):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as resp:
            resp.read()
        took.append(time.perf_counter() - t0)


class TimedCallback(RlpulseCallback):
    """RlpulseCallback whose hooks and logger writer add their own run time to ``spent``."""

    spent = 0.0

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                TimedCallback.spent += time.perf_counter() - t0

        return run

    def _on_training_start(self) -> None:
        self._timed(super()._on_training_start)()
        assert self.writer is not None
        self.writer.write = self._timed(self.writer.write)  # type: ignore[method-assign]

    def _on_rollout_start(self) -> None:
        self._timed(super()._on_rollout_start)()

    def _on_step(self) -> bool:
        t0 = time.perf_counter()
        out = super()._on_step()
        TimedCallback.spent += time.perf_counter() - t0
        return out

    def _on_rollout_end(self) -> None:
        self._timed(super()._on_rollout_end)()

    def _on_training_end(self) -> None:
        self._timed(super()._on_training_end)()


def train(timesteps: int, seed: int, exporter: Exporter | None) -> tuple[float, float]:
    """Wall and CPU seconds one ``learn`` takes (model and env built beforehand)."""
    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=N_STEPS, batch_size=256, seed=seed, device="cpu")
    callback = TimedCallback(exporter) if exporter is not None else None
    t0, c0 = time.perf_counter(), time.process_time()
    model.learn(timesteps, callback=callback)
    elapsed = time.perf_counter() - t0, time.process_time() - c0
    env.close()
    return elapsed


def instrumented_run(timesteps: int, seed: int, interval: float) -> tuple[float, float]:
    """One ``learn`` reporting to a fresh, scraped exporter (closed afterwards)."""
    exporter = Exporter(port=0, run_id=f"bench-sb3-{seed}", gpu=False, host=True).start()
    stop = threading.Event()
    thread = threading.Thread(
        target=scraper, args=(exporter.url, interval, stop, TOOK), daemon=True
    )
    thread.start()
    try:
        return train(timesteps, seed, exporter)
    finally:
        stop.set()
        thread.join()
        dropped = dict(exporter.dropped)
        exporter.close()
        if dropped:
            print(f"  dropped values in run {seed}: {dropped}")


TOOK: list[float] = []  # every scrape's time
Z95 = 1.96


def resolution(plain: list[float], rlpulse: list[float]) -> tuple[float, float]:
    """Mean overhead of the pairs (from their log ratios) and its 95% half-width, in %."""
    logs = [math.log(b / a) for a, b in zip(plain, rlpulse, strict=True)]
    mean = statistics.fmean(logs)
    half = Z95 * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.inf
    return 100 * math.expm1(mean), 100 * half


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="pairs (each: one run of each)")
    parser.add_argument("--timesteps", type=int, default=8192, help="env steps per run")
    parser.add_argument("--scrape-interval", type=float, default=1.0, help="seconds")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    train(N_ENVS * N_STEPS, 0, None)  # warm-up: imports, allocator, first-call costs
    plain: list[tuple[float, float]] = []
    instrumented: list[tuple[float, float]] = []
    for i in range(args.runs):
        for with_rlpulse in (False, True) if i % 2 == 0 else (True, False):
            if with_rlpulse:
                instrumented.append(instrumented_run(args.timesteps, i, args.scrape_interval))
            else:
                plain.append(train(args.timesteps, i, None))
        (pw, pc), (rw, rc) = plain[-1], instrumented[-1]
        print(
            f"pair {i + 1}: wall plain {pw:.3f}s rlpulse {rw:.3f}s ({rw / pw:.4f})  "
            f"cpu plain {pc:.3f}s rlpulse {rc:.3f}s ({rc / pc:.4f})"
        )
    print(
        f"PPO CartPole-v1 x{N_ENVS} envs, {args.timesteps} steps, {args.runs} pairs, "
        f"scrape every {args.scrape_interval}s, torch threads 1, a fresh exporter per run"
    )
    for col, name in ((0, "wall"), (1, "cpu ")):
        a, b = [x[col] for x in plain], [x[col] for x in instrumented]
        overhead, half = resolution(a, b)
        needed = math.ceil(args.runs * (half / 1.0) ** 2)
        verdict = (
            "resolves 1%"
            if half < 1.0
            else f"cannot resolve 1% (the pairs' noise): about {needed} pairs would"
        )
        print(
            f"{name}: median plain {statistics.median(a):.3f}s  rlpulse "
            f"{statistics.median(b):.3f}s  overhead {overhead:+.2f}% ± {half:.2f}% (95%), "
            f"target <= +1%: {verdict}"
        )
    total = sum(x[0] for x in instrumented)
    print(
        f"integration's own time: {1e3 * TimedCallback.spent:.1f} ms of {total:.2f} s "
        f"instrumented wall time ({100 * TimedCallback.spent / total:.3f}%); "
        f"{len(TOOK)} scrapes, median {1e3 * statistics.median(TOOK or [0.0]):.2f} ms each"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
