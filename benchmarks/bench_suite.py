"""rlpulse against the loggers people would use instead, measured side by side in one run.

    python benchmarks/bench_suite.py [--quick] [--skip-latency]

Peers come from the ``bench`` extra (``pip install -e '.[bench]'``: wandb, tensorboardX, mlflow);
a missing one is reported, not fatal. Prints four markdown tables (docs/performance.md holds one
run's output):

1. per training step of 32 and 256 scalars: training-thread time and total CPU (every thread of
   this process plus helper processes such as wandb-core) for a dict write, prometheus_client
   pre-bound ``Gauge.set``, rlpulse ``log()`` (+ its apply at scrape time), ``wandb.log``
   offline, tensorboardX ``add_scalar`` and mlflow ``log_metrics`` (file store);
2. 4,096 samples into a histogram: one batch call vs per-sample ``Histogram.observe``;
3. the cost and size of one scrape of 100 / 1k / 10k / 50k series: rlpulse's renderer vs
   prometheus_client ``generate_latest`` over the same series as native metrics;
4. the training thread's step latency at 10k series, unscraped vs scraped every second (by a
   separate process, as Prometheus would) through rlpulse's endpoint and through
   prometheus_client's own server on the same series.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from importlib import metadata
from typing import Any

import numpy as np
import prometheus_client as pc
import psutil
from prometheus_client.exposition import start_http_server

from rlpulse import catalog
from rlpulse.catalog import IDENTITY_LABELS
from rlpulse.runtime.exporter import Exporter
from rlpulse.runtime.exposition import Renderer

Step = Callable[[Mapping[str, float], int], None]

AFTER_EVERY = 1000  # steps between two scrapes at 1 ms a step
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


# ---- measuring ------------------------------------------------------------------------------
def cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its child processes (helper services)."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    return total


def settle(timeout: float = 15.0) -> None:
    """Wait until the process tree stops burning CPU (helpers have drained their queues)."""
    deadline = time.monotonic() + timeout
    last = cpu_seconds()
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = cpu_seconds()
        if now - last < 0.01:
            return
        last = now


@dataclass
class Cost:
    """Per-step cost of one logger."""

    thread_us: float  # wall time on the training thread
    cpu_us: float  # CPU over every thread and helper process, drained


def measure(step: Step, metrics: Mapping[str, float], budget: float, after: Any = None) -> Cost:
    """Run ``step`` for about ``budget`` seconds.

    ``after()`` runs every ``AFTER_EVERY`` steps, off the training-thread clock but inside the
    CPU window: rlpulse's apply (what a scrape does once a second) or a writer's flush.
    """
    for i in range(25):
        step(metrics, i)
    t0 = time.perf_counter()
    for i in range(25, 45):
        step(metrics, i)
    per = (time.perf_counter() - t0) / 20
    n = int(min(max(budget / max(per, 1e-9), 30), 500_000))
    if after is not None:
        after()
    settle()
    idle0, c0 = time.perf_counter(), cpu_seconds()
    time.sleep(0.5)
    idle_rate = (cpu_seconds() - c0) / (time.perf_counter() - idle0)  # background noise
    c0, t_start = cpu_seconds(), time.perf_counter()
    thread = 0.0
    for start in range(0, n, AFTER_EVERY):
        t0 = time.perf_counter()
        for i in range(start, min(n, start + AFTER_EVERY)):
            step(metrics, 100 + i)
        thread += time.perf_counter() - t0
        if after is not None:
            after()
    settle()
    elapsed = time.perf_counter() - t_start
    cpu = cpu_seconds() - c0 - idle_rate * elapsed
    return Cost(thread / n * 1e6, max(cpu, 0.0) / n * 1e6)


# ---- 1. loggers per step --------------------------------------------------------------------
def step_metrics(n: int) -> dict[str, float]:
    """``n`` scalars: catalog gauge names first, then custom keys (rl_unmapped_metric)."""
    names = [m.name for m in catalog.CATALOG if m.type == "gauge" and not m.labels][:32]
    names += [f"custom/metric_{i}" for i in range(n - len(names))]
    return {k: 0.5 + i for i, k in enumerate(names[:n])}


@contextlib.contextmanager
def peer_dict() -> Iterator[tuple[Step, Any]]:
    sink: dict[str, float] = {}

    def step(metrics: Mapping[str, float], i: int) -> None:
        for k, v in metrics.items():
            sink[k] = v

    yield step, None


@contextlib.contextmanager
def peer_gauges(keys: list[str]) -> Iterator[tuple[Step, Any]]:
    registry = pc.CollectorRegistry()
    bound = [
        pc.Gauge(f"g_{i}", "bench", ["run_id"], registry=registry).labels("bench")
        for i in range(len(keys))
    ]

    def step(metrics: Mapping[str, float], i: int) -> None:
        for g, v in zip(bound, metrics.values(), strict=True):
            g.set(v)

    yield step, None


@contextlib.contextmanager
def peer_rlpulse() -> Iterator[tuple[Step, Any]]:
    exp = Exporter(port=0, run_id="bench", gpu=False, host=False, process=False, unmapped_cap=4096)

    def step(metrics: Mapping[str, float], i: int) -> None:
        exp.log(metrics, step=i)

    yield step, exp.flush  # the apply a scrape does, counted in the CPU column


@contextlib.contextmanager
def peer_wandb(tmp: str) -> Iterator[tuple[Step, Any]]:
    import wandb

    os.environ["WANDB_SILENT"] = "true"
    settings = wandb.Settings(
        mode="offline",
        console="off",
        x_disable_stats=True,
        x_disable_meta=True,
        disable_git=True,
        save_code=False,
        silent=True,
    )
    run = wandb.init(dir=tmp, project="rlpulse-bench", settings=settings)

    def step(metrics: Mapping[str, float], i: int) -> None:
        run.log(dict(metrics), step=i)

    try:
        yield step, None
    finally:
        run.finish()


@contextlib.contextmanager
def peer_tensorboardx(tmp: str) -> Iterator[tuple[Step, Any]]:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(logdir=os.path.join(tmp, "tb"))

    def step(metrics: Mapping[str, float], i: int) -> None:
        for k, v in metrics.items():
            writer.add_scalar(k, v, i)

    try:
        yield step, writer.flush
    finally:
        writer.close()


@contextlib.contextmanager
def peer_mlflow(tmp: str) -> Iterator[tuple[Step, Any]]:
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # mlflow 3: file store on request
    import mlflow

    mlflow.set_tracking_uri("file:" + os.path.join(tmp, "mlruns"))
    with mlflow.start_run():

        def step(metrics: Mapping[str, float], i: int) -> None:
            mlflow.log_metrics(dict(metrics), step=i)

        yield step, None


def loggers(budget: float) -> list[list[str]]:
    rows: list[list[str]] = []
    for n in (32, 256):
        metrics = step_metrics(n)
        results: dict[str, Cost | str] = {}
        with tempfile.TemporaryDirectory() as tmp:
            peers: dict[str, Callable[[], Any]] = {
                "dict write (floor)": peer_dict,
                "prometheus_client Gauge.set, pre-bound": partial(peer_gauges, list(metrics)),
                "rlpulse log()": peer_rlpulse,
                "wandb.log, offline": partial(peer_wandb, tmp),
                "tensorboardX add_scalar": partial(peer_tensorboardx, tmp),
                "mlflow log_metrics, file store": partial(peer_mlflow, tmp),
            }
            for name, make in peers.items():
                try:
                    with make() as (step, after):
                        results[name] = measure(step, metrics, budget, after)
                except ImportError as exc:
                    results[name] = f"not installed ({exc.name}; pip install -e '.[bench]')"
        ours = results["rlpulse log()"]
        assert isinstance(ours, Cost)
        for name, cost in results.items():
            if isinstance(cost, str):
                rows.append([str(n), name, cost, "", "", ""])
                continue
            rows.append(
                [
                    str(n),
                    name,
                    f"{cost.thread_us:,.1f}",
                    f"{cost.cpu_us:,.1f}",
                    f"{cost.thread_us / ours.thread_us:,.1f}x",
                    f"{cost.cpu_us / ours.cpu_us:,.1f}x",
                ]
            )
    return rows


# ---- 2. histograms --------------------------------------------------------------------------
def median_us(fn: Callable[[], None], inner: int, repeat: int) -> float:
    rounds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        rounds.append((time.perf_counter() - t0) / inner * 1e6)
    return statistics.median(rounds)


def histograms(repeat: int) -> list[list[str]]:
    metric = catalog.get("rl_rollout_duration_seconds")
    rng = np.random.default_rng(0)
    lat = rng.exponential(0.5, 4096)
    tokens = rng.integers(16, 4096, 4096)
    ids = [f"rollout-{i}" for i in range(4096)]
    hist = pc.Histogram("h", "bench", buckets=metric.buckets, registry=pc.CollectorRegistry())
    values = lat.tolist()
    exp = Exporter(port=0, gpu=False, host=False, process=False)

    def per_sample() -> None:
        for x in values:
            hist.observe(x)

    t_loop = median_us(per_sample, 5, repeat)
    cases = {
        "rlpulse observe(), one batch": lambda: exp.observe(metric.name, lat),
        "rlpulse observe(), one batch + exemplars": lambda: exp.observe(
            metric.name, lat, exemplars=ids
        ),
        "rlpulse observe_rollouts(latency, tokens): 2 histograms + stats": (
            lambda: exp.observe_rollouts(latency_seconds=lat, response_tokens=tokens)
        ),
    }
    rows = [["prometheus_client Histogram.observe x4096", f"{t_loop:,.0f}", "1.0x"]]
    for name, fn in cases.items():
        t = median_us(fn, 50, repeat)
        rows.append([name, f"{t:,.0f}", f"{t_loop / t:,.1f}x faster"])
    return rows


# ---- 3. scrape cost -------------------------------------------------------------------------
def populate(n: int, **readers: bool) -> tuple[Exporter, pc.CollectorRegistry]:
    """About ``n`` series, 9 in 10 labelled gauges and the rest histogram lines, twice: in an
    rlpulse exporter and as native prometheus_client metrics with the same names and labels."""
    kwargs = {"gpu": False, "host": False, "process": False, **readers}
    exp = Exporter(port=0, addr="127.0.0.1", run_id="run-bench", label_cap=10**6, **kwargs)
    registry = pc.CollectorRegistry()
    ident = dict(zip(IDENTITY_LABELS, exp.identity, strict=True))
    score, phase = catalog.get("rl_eval_score"), catalog.get("rl_phase_duration_seconds")
    gauge = pc.Gauge(score.name, score.help, [*ident, *score.labels], registry=registry)
    hist = pc.Histogram(
        phase.name,
        phase.help,
        [*ident, *phase.labels],
        buckets=phase.buckets,
        registry=registry,
    )
    lines_per_hist = len(phase.buckets) + 3
    n_hist = max(1, n // 10 // lines_per_hist)
    for i in range(n - n_hist * lines_per_hist):
        v = i * 0.37
        exp.set(score.name, v, benchmark=f"bench-{i}", split="eval")
        gauge.labels(**ident, benchmark=f"bench-{i}", split="eval").set(v)
    for i in range(n_hist):
        data = [0.02 * (i + 1), 3.0, 45.0]
        exp.observe(phase.name, data, phase=f"phase-{i}")
        child = hist.labels(**ident, phase=f"phase-{i}")
        for x in data:
            child.observe(x)
    return exp, registry


def scrape_cost(sizes: list[int], repeat: int) -> list[list[str]]:
    pc.disable_created_metrics()  # the same series on both sides (no _created lines)
    rows = []
    for n in sizes:
        exp, registry = populate(n)
        renderer = Renderer(exp)
        t0 = time.perf_counter()
        body = renderer.render()
        first = time.perf_counter() - t0
        reps = max(3, repeat // (1 + n // 5000))
        t_text = min_ms(renderer.render, reps)
        t_om = min_ms(partial(renderer.render, True), reps)
        t_native = min_ms(partial(pc.generate_latest, registry), max(3, reps // 2))
        t_collector = min_ms(partial(pc.generate_latest, exp.registry), max(3, reps // 2))
        native = pc.generate_latest(registry)
        gz = zlib.compress(body, 1, wbits=31)
        t_gzip = min_ms(partial(zlib.compress, body, 1, wbits=31), reps)
        rows.append(
            [
                f"{body.count(b'{'):,}",
                f"{t_text:.2f}",
                f"{t_om:.2f}",
                f"{first * 1e3:.1f}",
                f"{t_native:.1f}",
                f"{t_collector:.1f}",
                f"{t_text / t_native:.3f}x",
                f"{len(body) / 1e3:,.0f} / {len(gz) / 1e3:,.0f}",
                f"{len(native) / 1e3:,.0f}",
                f"{t_gzip:.1f}",
            ]
        )
    return rows


def min_ms(fn: Callable[[], object], repeat: int) -> float:
    """Best of ``repeat`` runs, in milliseconds (the least disturbed one)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


# ---- 4. step latency while scraped ----------------------------------------------------------
SCRAPER = """
import json, sys, time, urllib.request
url, seconds, accept = sys.argv[1], float(sys.argv[2]), sys.argv[3]
took, size, end = [], [], time.monotonic() + seconds
nxt = time.monotonic() + 1.0
while nxt < end:
    time.sleep(max(0.0, nxt - time.monotonic()))
    nxt += 1.0
    t0 = time.perf_counter()
    req = urllib.request.Request(url, headers={"Accept": accept, "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        size.append(len(resp.read()))
    took.append(time.perf_counter() - t0)
print(json.dumps({"took": took, "bytes": size}))
"""


def calibrate_work(target: float) -> int:
    """Loop length of a pure-Python (GIL-holding) step body taking about ``target`` seconds."""
    n = 10_000
    while True:
        t0 = time.perf_counter()
        busy(n)
        took = time.perf_counter() - t0
        if took > 0.02:
            return max(1, int(n * target / took))
        n *= 2


def busy(n: int) -> int:
    acc = 0
    for i in range(n):
        acc += i * i
    return acc


def run_steps(exp: Exporter, work: int, seconds: float) -> list[float]:
    metrics = step_metrics(32)
    out = []
    step = 0
    end = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        if t0 > end:
            return out
        busy(work)
        exp.log(metrics, step=step)
        out.append(time.perf_counter() - t0)
        step += 1


def scraped(exp: Exporter, url: str, work: int, seconds: float) -> tuple[list[float], Any]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRAPER, url, str(seconds), PROMETHEUS_ACCEPT],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.3)  # the scraper's interpreter starts
    steps = run_steps(exp, work, seconds)
    out, _ = proc.communicate(timeout=120)
    return steps, json.loads(out)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) * 1e3


def step_latency(seconds: float, series: int, rounds: int) -> tuple[list[list[str]], str]:
    """The three conditions in ``rounds`` interleaved windows, so machine noise hits all alike."""
    exp, _ = populate(series, host=True, process=True)
    exp.start()
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=exp.registry)
    urls = {
        "scraped 1/s through rlpulse's endpoint (OpenMetrics + gzip)": exp.url,
        "scraped 1/s through prometheus_client's server, same series": (
            f"http://127.0.0.1:{server.server_address[1]}/metrics"
        ),
    }
    for url in urls.values():
        urllib_warm(url)  # rlpulse's first scrape builds the series prefixes, once
    work = calibrate_work(0.001)
    steps: dict[str, list[float]] = {"unscraped": []} | {name: [] for name in urls}
    scrapes: dict[str, dict[str, list[float]]] = {name: {"took": [], "bytes": []} for name in urls}
    window = seconds / rounds
    for _ in range(rounds):
        exp.flush()
        steps["unscraped"] += run_steps(exp, work, window)
        for name, url in urls.items():
            exp.flush()
            got, seen = scraped(exp, url, work, window)
            steps[name] += got
            for k in ("took", "bytes"):
                scrapes[name][k] += seen[k]
    server.shutdown()
    server.server_close()
    exp.close()
    rows = []
    base = pct(steps["unscraped"], 99.9)
    for name, got in steps.items():
        seen = scrapes.get(name)
        rows.append(
            [
                name,
                f"{len(got):,}",
                f"{pct(got, 50):.3f}",
                f"{pct(got, 99):.3f}",
                f"{pct(got, 99.9):.3f}",
                f"{max(got) * 1e3:.1f}",
                f"{pct(got, 99.9) / base:.2f}x",
                f"{statistics.median(seen['took']) * 1e3:.0f}" if seen else "",
                f"{statistics.median(seen['bytes']) / 1e3:,.0f}" if seen else "",
            ]
        )
    note = (
        f"step body: {work:,}-iteration pure-Python loop (~1 ms, holds the GIL) + log() of 32 "
        f"keys; {rounds} interleaved windows of {window:.0f} s per row; host and process "
        f"collectors on"
    )
    return rows, note


def urllib_warm(url: str) -> None:
    with urllib.request.urlopen(url, timeout=60) as resp:
        resp.read()


# ---- output ---------------------------------------------------------------------------------
def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
        for r in [header, ["-" * w for w in widths], *rows]
    ]
    return "\n".join(lines)


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    versions = []
    for dist in ("prometheus-client", "numpy", "wandb", "tensorboardX", "mlflow"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions.append(f"{dist} {metadata.version(dist)}")
    return (
        f"{os.cpu_count()} CPUs ({model or platform.processor()}), {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}, "
        f"switch interval {sys.getswitchinterval() * 1e3:.0f} ms; " + ", ".join(versions)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, noisier numbers")
    parser.add_argument("--skip-latency", action="store_true", help="leave out table 4")
    args = parser.parse_args(argv)
    budget, repeat, seconds, rounds = (0.4, 5, 8.0, 2) if args.quick else (1.5, 15, 30.0, 6)

    print(f"machine: {machine()}\n")
    print("## 1. One training step of N scalars (µs per step; ratios: peer / rlpulse)\n")
    print(
        table(
            ["keys", "logger", "training thread µs", "CPU µs (all)", "thread ratio", "CPU ratio"],
            loggers(budget),
        )
    )
    print(
        "\nCPU (all) = every thread of the process + helper processes (wandb-core), measured "
        "after the logger drained; for rlpulse it includes the apply a scrape does.\n"
    )
    print("## 2. 4,096 samples into a histogram\n")
    print(table(["call", "µs", "vs per-sample"], histograms(repeat)))
    print("\n## 3. One scrape (ms; bytes in kB)\n")
    print(
        table(
            [
                "series",
                "rlpulse text",
                "rlpulse OpenMetrics",
                "first scrape",
                "generate_latest",
                "generate_latest(exp.registry)",
                "rlpulse / generate_latest",
                "rlpulse kB / gzip kB",
                "generate_latest kB",
                "gzip ms",
            ],
            scrape_cost([100, 1_000, 10_000, 50_000], repeat),
        )
    )
    print(
        "\ngenerate_latest: prometheus_client over the same series as native Gauge/Histogram; "
        "generate_latest(exp.registry): the same exporter through prometheus_client's "
        "collector path. rlpulse columns are render only (no pending log() to apply).\n"
    )
    if not args.skip_latency:
        rows, note = step_latency(seconds, 10_000, rounds)
        print("## 4. Training-thread step latency at 10k series (ms)\n")
        print(
            table(
                [
                    "",
                    "steps",
                    "p50",
                    "p99",
                    "p99.9",
                    "max",
                    "p99.9 / unscraped",
                    "scrape ms",
                    "scrape kB",
                ],
                rows,
            )
        )
        print(f"\n{note}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
