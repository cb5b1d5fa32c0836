"""Wall-time overhead of the SB3 integration on a real PPO run, measured side by side.

    python benchmarks/bench_sb3_overhead.py [--runs N] [--timesteps T] [--scrape-interval S]

Each round trains PPO("MlpPolicy", "CartPole-v1") twice from the same seed, once plain and once
with ``RlpulseCallback`` reporting to a live exporter that a thread scrapes over HTTP every
``--scrape-interval`` seconds (as Prometheus would, but more often); the order alternates from
round to round. Only ``model.learn`` is timed, in wall time and in process CPU time (all
threads: the scrapes' CPU counts as overhead). Prints the medians, the ratio of the medians and
the median of the per-round ratios (each pair runs back to back, so it is the figure least
moved by other load on the machine). Target: ≤ 1.01. On a shared machine the run-to-run noise
exceeds 1%, so it also prints the integration's own time (the callback hooks and the logger
writer, timed from inside) as a share of the instrumented runs' wall time.
"""

from __future__ import annotations

import argparse
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

from rlpulse.exporter import Exporter
from rlpulse.integrations.sb3 import RlpulseCallback

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="rounds (each: one run of each)")
    parser.add_argument("--timesteps", type=int, default=8192, help="env steps per run")
    parser.add_argument("--scrape-interval", type=float, default=1.0, help="seconds")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    exporter = Exporter(port=0, run_id="bench-sb3", gpu=False, host=True).start()
    stop = threading.Event()
    took: list[float] = []
    thread = threading.Thread(
        target=scraper, args=(exporter.url, args.scrape_interval, stop, took), daemon=True
    )
    thread.start()
    train(N_ENVS * N_STEPS, 0, None)  # warm-up: imports, allocator, first-call costs
    plain: list[tuple[float, float]] = []
    instrumented: list[tuple[float, float]] = []
    try:
        for i in range(args.runs):
            order = [None, exporter] if i % 2 == 0 else [exporter, None]
            for exp in order:
                seconds = train(args.timesteps, i, exp)
                (plain if exp is None else instrumented).append(seconds)
            (pw, pc), (rw, rc) = plain[-1], instrumented[-1]
            print(
                f"round {i + 1}: wall plain {pw:.3f}s rlpulse {rw:.3f}s ({rw / pw:.4f})  "
                f"cpu plain {pc:.3f}s rlpulse {rc:.3f}s ({rc / pc:.4f})"
            )
    finally:
        stop.set()
        thread.join()
        exporter.close()
    print(
        f"PPO CartPole-v1 x{N_ENVS} envs, {args.timesteps} steps, {args.runs} runs each, "
        f"scrape every {args.scrape_interval}s, torch threads 1"
    )
    for col, name in ((0, "wall"), (1, "cpu ")):
        p = statistics.median(x[col] for x in plain)
        r = statistics.median(x[col] for x in instrumented)
        paired = statistics.median(
            b[col] / a[col] for a, b in zip(plain, instrumented, strict=True)
        )
        print(
            f"{name}: median plain {p:.3f}s  rlpulse {r:.3f}s  ratio {r / p:.4f}  "
            f"paired ratio {paired:.4f} (overhead {100 * (paired - 1):+.2f}%, target <= +1%)"
        )
    total = sum(x[0] for x in instrumented)
    print(
        f"integration's own time: {1e3 * TimedCallback.spent:.1f} ms of {total:.2f} s "
        f"instrumented wall time ({100 * TimedCallback.spent / total:.3f}%); "
        f"{len(took)} scrapes, median {1e3 * statistics.median(took or [0.0]):.2f} ms each"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
