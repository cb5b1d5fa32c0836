"""Per-step cost of rlpulse's hot path against its baselines, measured side by side.

    python benchmarks/bench_log.py [--repeat N]

Prints medians (µs) and the ratios the targets are stated in:
- ``log()`` of 32 mapped keys vs writing the same 32 values into a dict (target ≤ 2.5x) and vs
  32 pre-bound prometheus_client ``Gauge.set`` calls (target: rlpulse ≥ 4x faster on the
  training thread; also shown with the apply a scrape does, step-indexed detection included);
- ``observe_rollouts`` of 4,096 samples vs 4,096 ``Histogram.observe`` calls (target ≥ 20x).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np
import prometheus_client as pc

from rlpulse import catalog
from rlpulse.exporter import Exporter

N_KEYS = 32
N_SAMPLES = 4096


def _median_us(fn: Callable[[], None], inner: int, repeat: int) -> float:
    """Median over ``repeat`` rounds of the mean time of one call, in microseconds."""
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        rounds.append((time.perf_counter() - t0) / inner * 1e6)
    return statistics.median(rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)

    gauges = [m.name for m in catalog.CATALOG if m.type == "gauge" and not m.labels][:N_KEYS]
    assert len(gauges) == N_KEYS
    step_metrics = {name: 0.5 + i for i, name in enumerate(gauges)}
    exp = Exporter(port=0, run_id="bench", gpu=False, host=False)
    exp.log(step_metrics, step=0)  # bind every key once, as a trainer's first step does

    sink: dict[str, float] = {}

    def dict_write() -> None:
        for k, v in step_metrics.items():
            sink[k] = v

    registry = pc.CollectorRegistry()
    bound = [
        pc.Gauge(f"b_{i}", "bench", ["run_id"], registry=registry).labels("bench")
        for i in range(N_KEYS)
    ]
    pairs = list(zip(bound, step_metrics.values(), strict=True))

    def gauge_set() -> None:
        for g, v in pairs:
            g.set(v)

    step = [0]

    def rl_log() -> None:
        step[0] += 1
        exp.log(step_metrics, step=step[0])

    def log_rounds(repeat: int, inner: int = 2000) -> tuple[float, float]:
        """Training-thread cost of log(), and the scrape thread's cost of applying it."""
        logged, applied = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(inner):
                rl_log()
            t1 = time.perf_counter()
            exp.flush()  # what the next scrape does, off the training thread
            t2 = time.perf_counter()
            logged.append((t1 - t0) / inner * 1e6)
            applied.append((t2 - t1) / inner * 1e6)
        return statistics.median(logged), statistics.median(applied)

    rng = np.random.default_rng(0)
    lat = rng.exponential(0.5, N_SAMPLES)
    tokens = rng.integers(16, 4096, N_SAMPLES)
    hist = pc.Histogram(
        "b_lat",
        "bench",
        buckets=catalog.get("rl_rollout_duration_seconds").buckets,
        registry=registry,
    )
    lat_list = lat.tolist()

    def hist_loop() -> None:
        for x in lat_list:
            hist.observe(x)

    def rl_batch() -> None:
        exp.observe_rollouts(latency_seconds=lat, response_tokens=tokens)

    r = args.repeat
    t_dict = _median_us(dict_write, 20000, r)
    t_gauge = _median_us(gauge_set, 5000, r)
    t_log, t_apply = log_rounds(r)
    t_hist = _median_us(hist_loop, 20, r)
    t_batch = _median_us(rl_batch, 200, r)

    rows = [
        ("dict write, 32 keys", t_dict, ""),
        ("prometheus_client Gauge.set x32 (pre-bound)", t_gauge, ""),
        ("rlpulse log(), 32 mapped keys (training thread)", t_log, ""),
        ("  its apply at scrape time (scrape thread)", t_apply, ""),
        ("Histogram.observe x4096", t_hist, ""),
        ("rlpulse observe_rollouts, 4096 samples", t_batch, ""),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"python {sys.version.split()[0]}, {args.repeat} rounds, medians")
    for name, t, _ in rows:
        print(f"{name:<{width}}  {t:10.2f} µs")
    print()
    print(f"log() / dict write               = {t_log / t_dict:6.2f}x   (target ≤ 2.5x)")
    print(f"Gauge.set / log()                = {t_gauge / t_log:6.2f}x   (target ≥ 4x)")
    print(f"Gauge.set / (log() + its apply)  = {t_gauge / (t_log + t_apply):6.2f}x   (all threads)")
    print(f"Histogram.observe loop / batch   = {t_hist / t_batch:6.2f}x   (target ≥ 20x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
