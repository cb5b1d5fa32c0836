"""Many simulated ranks through Prometheus' own scale-out path, measured.

    python benchmarks/bench_scale.py [--ranks 256] [--per-process 16] [--gpus 8] \
        [--interval 5s] [--step-seconds 10] [--duration 120] [--reps 3] [--json out.json]

Starts ``--ranks`` exporters (``--per-process`` of them per Python process, each with its own
port and identity; ``--gpus`` ranks per simulated node, the node's local rank 0 reading a fake
NVML with that many GPUs and the host), feeds them a GRPO-like workload, writes their ``file_sd``
targets with ``rlpulse.runtime.targets``, and runs a real Prometheus (the generated config and
rules, ``remote_write`` into a real VictoriaMetrics). After ``--duration`` seconds it reports scrape
durations, series per rank, bytes per scrape, samples/s ingested by both stores, Prometheus
memory, remote-write lag, and the latency of every dashboard query on both stores: as shipped
(against the recording rules) and, as the baseline, with the rules inlined over raw per-rank
series. Prints a table; ``--json`` writes everything (``benchmarks/plot_scale.py`` plots it).
docs/scaling.md holds the measurements at 64, 128 and 256 ranks.

Needs the ``prometheus`` and ``victoria-metrics`` binaries (Debian packages of those names).
``tests/e2e/test_scale_sim.py`` runs a CI-sized variant of the same code.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a child script: the repository holds harness/
    sys.path.insert(0, str(ROOT))

from harness.fake_nvml import FakeGpu, FakeNvml  # noqa: E402
from harness.series import (  # noqa: E402
    COMPLETION_TOKENS,
    EVAL_SCORE,
    GRADER_CALLS,
    GRADER_LATENCY,
    PHASE,
    RESPONSE_LENGTH,
    ROLLOUT,
    SAMPLES,
)
from harness.stackutil import (  # noqa: E402
    api,
    feeds,
    free_port,
    metric_names,
    results,
    server,
    victoria_metrics,
    wait_for,
)
from rlpulse import catalog  # noqa: E402
from rlpulse.runtime import targets  # noqa: E402
from rlpulse.runtime.exporter import Exporter  # noqa: E402
from rlpulse.stack import config as cfgmod  # noqa: E402
from rlpulse.stack import dashboards, rules  # noqa: E402
from rlpulse.stack.deploy import prometheus  # noqa: E402
from rlpulse.stack.output import dump  # noqa: E402

RUN_ID = "scale-sim"
JOB = cfgmod.Config().scrape.job_name

# ---- the workload -------------------------------------------------------------------------------

# What TRL's GRPOTrainer logs once per logging step (keys and levels as in a real run's
# trainer_state.json): global batch statistics, gathered across ranks, reported by rank 0 only.
GRPO_LOG: dict[str, float] = {
    "loss": 0.0012,
    "grad_norm": 0.72,
    "learning_rate": 1.27e-06,
    "reward": 1.17,
    "reward_std": 0.095,
    "frac_reward_zero_std": 0.0,
    "kl": 1.22,
    "entropy": 0.61,
    "completions/mean_length": 125.85,
    "completions/max_length": 174.2,
    "completions/min_length": 92.2,
    "completions/clipped_ratio": 0.0,
    "completions/mean_terminated_length": 125.85,
    "clip_ratio/region_mean": 0.01,
    "clip_ratio/low_mean": 0.004,
    "clip_ratio/high_mean": 0.006,
    "sampling/importance_sampling_ratio/mean": 1.0,
    "sampling/importance_sampling_ratio/min": 0.93,
    "sampling/importance_sampling_ratio/max": 1.08,
    "num_tokens": 66077.0,
    "epoch": 0.08,
    "rewards/correctness_reward_func/mean": 0.975,
    "rewards/correctness_reward_func/std": 0.07,
    "rewards/format_reward_func/mean": 0.1,
    "rewards/format_reward_func/std": 0.0,
    "rewards/reasoning_reward_func/mean": 0.095,
    "rewards/reasoning_reward_func/std": 0.029,
}
HYPERPARAMETERS = {
    "learning_rate": 1e-6,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 4,
    "num_generations": 8,
    "beta": 0.04,
    "epsilon": 0.2,
    "temperature": 0.9,
    "max_prompt_length": 512,
    "max_completion_length": 1024,
    "seed": 42,
}
METADATA = {"model": "Qwen2.5-7B", "framework": "trl", "benchmark": "gsm8k"}
COMPONENTS = ("correctness", "format", "reasoning")
PHASES = ("rollout", "reward", "ref", "update", "sync")
ROLLOUTS_PER_STEP = 64
GROUP_SIZE = 8


def feed(exp: Exporter, step: int, rng: random.Random) -> None:
    """One training step of one rank.

    Every rank: its own shard of rollouts into the histograms (with exemplars) and per-rank
    counters, its phases, and ``log(step=...)`` (its loop is alive; the step is global). Rank 0
    only: the trainer's global batch statistics, as TRL and verl log them (on rank 0 only), its
    rollout gauges, and an eval score now and then.
    """
    n = ROLLOUTS_PER_STEP
    ids = [f"r{exp.rank}-{step}-{i}" for i in range(n)]
    latency = [rng.lognormvariate(0.5, 0.6) for _ in range(n)]
    tokens = [rng.randint(60, 900) for _ in range(n)]
    for phase in PHASES:
        exp.observe(PHASE, rng.uniform(0.1, 5), phase=phase)
    exp.count(GRADER_CALLS, n)
    exp.observe(GRADER_LATENCY, [rng.uniform(0.01, 0.5) for _ in range(4)])
    if exp.rank != 0:
        exp.observe(ROLLOUT, latency, exemplars=ids)
        exp.observe(RESPONSE_LENGTH, tokens, exemplars=ids)
        exp.count(SAMPLES, n)
        exp.count(COMPLETION_TOKENS, sum(tokens))
        exp.log({}, step=step)
        return
    rewards = [float(rng.random() < 0.6) for _ in range(n)]
    exp.observe_rollouts(
        latency_seconds=latency,
        response_tokens=tokens,
        prompt_tokens=[rng.randint(50, 400) for _ in range(n)],
        rewards=rewards,
        components={c: [rng.random() for _ in range(n)] for c in COMPONENTS},
        truncated=[rng.random() < 0.02 for _ in range(n)],
        format_ok=[rng.random() < 0.95 for _ in range(n)],
        success=[r > 0 for r in rewards],
        group_size=GROUP_SIZE,
        rollout_ids=ids,
    )
    wobble = {k: v * (1 + 0.05 * math.sin(step + i)) for i, (k, v) in enumerate(GRPO_LOG.items())}
    exp.log(wobble, step=step)
    if step % 10 == 0:
        exp.set(EVAL_SCORE, 0.6, benchmark="gsm8k", split="eval")


def fake_nvml(gpus: int) -> FakeNvml:
    """A node's boards, busy as in training."""
    boards = [
        FakeGpu(
            uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000",
            util=90,
            mem_util=45,
            mem_used=60 << 30,
            temp_c=65,
        )
        for i in range(gpus)
    ]
    return FakeNvml(boards)


def rank_exporter(
    rank: int,
    gpus_per_node: int,
    run_id: str = RUN_ID,
    *,
    addr: str = "127.0.0.1",
    base_port: int = 0,
) -> Exporter:
    """The exporter of simulated rank ``rank``: node ``node-<rank // gpus>``; the node's local
    rank 0 reads the (fake) GPUs and the host, as on a real node. It listens on ``addr`` at
    ``base_port + local_rank`` (as a launched rank would; ``base_port`` 0: any free port)."""
    local = rank % gpus_per_node
    return Exporter(
        port=base_port,
        addr=addr,
        run_id=run_id,
        rank=rank,
        local_rank=local,
        node=f"node-{rank // gpus_per_node:04d}",
        config=HYPERPARAMETERS if rank == 0 else None,
        metadata=METADATA,
        nvml=fake_nvml(gpus_per_node) if local == 0 else None,
        collector_ttl=1.0,
    )


# ---- series budget ----------------------------------------------------------------------------

# Series one exporter may expose under the workload above (tests/unit/test_scale_cardinality.py
# enforces them on a real scrape; docs/scaling.md multiplies them out). Prometheus adds 5 more
# per target (up, scrape_duration_seconds, scrape_samples_scraped, …).
BUDGET = {"rank0": 400, "node_leader": 340, "rank": 190}
SCRAPE_SERIES_PER_TARGET = 5


def series_count(text: str) -> int:
    """Samples (= series) in a text-format scrape."""
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


# ---- the simulation: exporter processes, file_sd, Prometheus, VictoriaMetrics ------------------

PROMETHEUS_ACCEPT = (  # what Prometheus 2.x sends when it scrapes
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
TEXT_ACCEPT = "text/plain;version=0.0.4"


def node_host(node: int) -> str:
    """The loopback address of simulated node ``node``: one address per node (127.1.x.y), so
    every node's ranks listen on ``base_port + local_rank`` as on real hosts."""
    return f"127.1.{node // 250}.{node % 250 + 1}"


def kind_of(rank: int, gpus_per_node: int) -> str:
    """Which series budget a rank falls under."""
    if rank == 0:
        return "rank0"
    return "node_leader" if rank % gpus_per_node == 0 else "rank"


def _child(spec: Mapping[str, Any]) -> int:
    """One Python process of the simulation: its ranks' exporters, fed a step every
    ``step_seconds`` (steps numbered from the shared ``t0``) until stdin closes."""
    gpus, base, every = int(spec["gpus"]), int(spec["base_port"]), float(spec["step_seconds"])
    exps = [
        rank_exporter(r, gpus, spec["run_id"], addr=node_host(r // gpus), base_port=base).start()
        for r in spec["ranks"]
    ]
    print(json.dumps({"ready": [e.url for e in exps]}), flush=True)
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    rngs = {e.rank: random.Random(e.rank) for e in exps}
    t0 = float(spec["t0"])
    while not stop.is_set():
        step = max(0, int((time.time() - t0) / every))
        for e in exps:
            feed(e, step, rngs[e.rank])
        stop.wait(max(0.0, t0 + (step + 1) * every - time.time()))
    for e in exps:
        e.close()
    return 0


def _free_base_port(hosts: Sequence[str], ranks_per_node: int, tries: int = 50) -> int:
    """A base port P such that P .. P+ranks_per_node-1 are free on every host address."""
    rng = random.Random()
    for _ in range(tries):
        base = rng.randrange(20000, 30000 - ranks_per_node)
        try:
            with contextlib.ExitStack() as stack:
                for host in hosts:
                    for port in range(base, base + ranks_per_node):
                        s = stack.enter_context(socket.socket())
                        s.bind((host, port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free base port on the simulated node addresses")


def stack_config(interval: str, targets_file: Path, write_url: str) -> cfgmod.Config:
    """The shipped defaults, scraping ``targets_file`` every ``interval`` (rules evaluated as
    often), no static target and no Alertmanager, remote-writing every series to ``write_url``
    (the default queue settings) with a ``cluster`` external label."""
    base = cfgmod.Config()
    secs = cfgmod.seconds(interval)
    scrape = dataclasses.replace(
        base.scrape,
        interval=cfgmod.Duration(interval),
        timeout=cfgmod.duration(min(secs, 10.0)),
        evaluation_interval=cfgmod.Duration(interval),
        static_targets=(),
        file_sd=(str(targets_file),),
        alertmanagers=(),
    )
    return dataclasses.replace(
        base,
        scrape=scrape,
        external_labels=(("cluster", "scale-sim"),),
        remote_write=(cfgmod.RemoteWrite(url=write_url, name="vm"),),
    )


@dataclass
class Sim:
    """A running simulation."""

    ranks: int
    gpus: int
    per_process: int
    interval: str
    cfg: cfgmod.Config
    prometheus: str  # base URLs
    vm: str
    base_port: int
    instances: dict[str, int]  # scrape instance (host:port) -> rank
    processes: list[subprocess.Popen[str]]
    started: float  # when every target was up

    def url(self, rank: int) -> str:
        """The metrics URL of ``rank``."""
        node = rank // self.gpus
        return f"http://{node_host(node)}:{self.base_port + rank % self.gpus}/metrics"


@contextlib.contextmanager
def simulate(
    ranks: int,
    per_process: int,
    gpus: int,
    interval: str,
    step_seconds: float,
    workdir: Path,
    *,
    timeout: float = 180.0,
) -> Iterator[Sim]:
    """Run the simulation until the ``with`` ends; entered once every target is up."""
    prom_bin = shutil.which("prometheus")
    assert prom_bin, "prometheus is required (apt-get install prometheus)"
    nodes = [
        targets.Node(node_host(n), min(gpus, ranks - n * gpus)) for n in range(-(-ranks // gpus))
    ]
    base = _free_base_port([n.host for n in nodes], gpus)
    instances = {
        f"{n.host}:{base + local}": i * gpus + local
        for i, n in enumerate(nodes)
        for local in range(n.ranks)
    }
    with contextlib.ExitStack() as stack:
        vm = stack.enter_context(victoria_metrics(workdir / "vm"))

        t0 = time.time()
        procs: list[subprocess.Popen[str]] = []
        stack.callback(_stop_children, procs)
        for first in range(0, ranks, per_process):
            spec = {
                "ranks": list(range(first, min(ranks, first + per_process))),
                "gpus": gpus,
                "base_port": base,
                "step_seconds": step_seconds,
                "run_id": RUN_ID,
                "t0": t0,
            }
            log_file = stack.enter_context(open(workdir / f"child-{first}.log", "w"))
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log_file,
                    text=True,
                    cwd=ROOT,
                )
            )
        for proc in procs:  # each prints one line once its exporters serve
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"a simulation process died: see {workdir}/child-*.log")

        targets_file = workdir / "targets" / "scale.json"
        targets_file.parent.mkdir(parents=True, exist_ok=True)
        targets.write(targets_file, targets.file_sd(nodes, base))

        cfg = stack_config(interval, targets_file, f"{vm}/api/v1/write")
        prom_dir = workdir / "prometheus"
        prom_dir.mkdir(parents=True, exist_ok=True)
        for rel, text in rules.render(cfg).items():
            (workdir / rel).parent.mkdir(parents=True, exist_ok=True)
            (workdir / rel).write_text(text)
        config_file = prom_dir / "prometheus.yml"
        config_file.write_text(dump(prometheus.config(cfg)))
        prom_port = free_port()
        prom = f"http://127.0.0.1:{prom_port}"
        prom_argv = [
            prom_bin,
            f"--config.file={config_file}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--enable-feature=exemplar-storage",
        ]
        stack.enter_context(server(prom_argv, f"{prom}/-/ready"))

        def all_up() -> bool:
            active = trainer_targets(prom)
            return len(active) == ranks and all(t["health"] == "up" for t in active)

        wait_for(all_up, timeout, f"all {ranks} targets up", every=0.5)
        yield Sim(
            ranks, gpus, per_process, interval, cfg, prom, vm, base, instances, procs, time.time()
        )


def _stop_children(procs: Sequence[subprocess.Popen[str]]) -> None:
    for proc in procs:
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()
    deadline = time.monotonic() + 15
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


# ---- measuring ----------------------------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def self_metric(text: str, name: str, contains: str = "", fn: str = "sum") -> float:
    """``fn`` (sum or max) of the samples called ``name`` (labels containing ``contains``) in a
    text-format scrape; NaN when there is none."""
    values = []
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name and contains in (m.group(2) or ""):
            values.append(float(m.group(3)))
    if not values:
        return math.nan
    return max(values) if fn == "max" else sum(values)


def _get(url: str, headers: Mapping[str, str] | None = None, timeout: float = 60) -> bytes:
    req = urllib.request.Request(url, headers=dict(headers or {}))
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body: bytes = resp.read()
        return body


def snapshot(sim: Sim) -> dict[str, float]:
    """The two stores' own counters and gauges, now."""
    p = _get(f"{sim.prometheus}/metrics").decode()
    v = _get(f"{sim.vm}/metrics").decode()
    out = {
        "time": time.time(),
        "prom_samples_appended": self_metric(p, "prometheus_tsdb_head_samples_appended_total"),
        "prom_head_series": self_metric(p, "prometheus_tsdb_head_series"),
        "prom_rss_bytes": self_metric(p, "process_resident_memory_bytes"),
        "prom_heap_inuse_bytes": self_metric(p, "go_memstats_heap_inuse_bytes"),
        "prom_cpu_seconds": self_metric(p, "process_cpu_seconds_total"),
        "rw_samples_sent": self_metric(p, "prometheus_remote_storage_samples_total"),
        "rw_samples_failed": self_metric(p, "prometheus_remote_storage_samples_failed_total"),
        "rw_samples_retried": self_metric(p, "prometheus_remote_storage_samples_retried_total"),
        "rw_samples_dropped": self_metric(p, "prometheus_remote_storage_samples_dropped_total"),
        "rw_samples_pending": self_metric(p, "prometheus_remote_storage_samples_pending"),
        "rw_highest_ts": self_metric(p, "prometheus_remote_storage_highest_timestamp_in_seconds"),
        "rw_sent_ts": self_metric(
            p, "prometheus_remote_storage_queue_highest_sent_timestamp_seconds", fn="max"
        ),
        "rule_group_max_seconds": self_metric(
            p, "prometheus_rule_group_last_duration_seconds", fn="max"
        ),
        "rule_failures": self_metric(p, "prometheus_rule_evaluation_failures_total"),
        "vm_rows_inserted": self_metric(v, "vm_rows_inserted_total", 'type="promremotewrite"'),
        "vm_rss_bytes": self_metric(v, "process_resident_memory_bytes"),
    }
    return out


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"n": 0, "p50": math.nan, "p99": math.nan, "max": math.nan}
    s = sorted(values)
    pick = lambda q: s[min(len(s) - 1, round(q * (len(s) - 1)))]  # noqa: E731
    return {"n": len(s), "p50": pick(0.5), "p99": pick(0.99), "max": s[-1]}


def trainer_targets(prom: str) -> list[dict[str, Any]]:
    """The active targets of the trainers' job (not Prometheus' and Alertmanager's own)."""
    active = api(f"{prom}/api/v1/targets?state=active")["data"]["activeTargets"]
    return [t for t in active if t["labels"]["job"] == JOB]


def scrape_stats(sim: Sim) -> dict[str, Any]:
    """Targets discovered and up; scrape durations and series per target (from Prometheus)."""
    active = trainer_targets(sim.prometheus)
    window = max(1, int(time.time() - sim.started))
    durations: dict[str, list[float]] = {}
    for r in results(sim.prometheus, f'scrape_duration_seconds{{job="{JOB}"}}[{window}s]'):
        kind = kind_of(sim.instances[r["metric"]["instance"]], sim.gpus)
        durations.setdefault(kind, []).extend(float(v) for _, v in r["values"])
        durations.setdefault("all", []).extend(float(v) for _, v in r["values"])
    series: dict[str, list[float]] = {}
    for r in results(sim.prometheus, f'scrape_samples_scraped{{job="{JOB}"}}'):
        kind = kind_of(sim.instances[r["metric"]["instance"]], sim.gpus)
        series.setdefault(kind, []).append(float(r["value"][1]))
    return {
        "discovered": len(active),
        "up": sum(t["health"] == "up" for t in active),
        "duration_seconds": {k: _quantiles(v) for k, v in sorted(durations.items())},
        "series_per_target": {
            k: {"min": min(v), "max": max(v), "targets": len(v)} for k, v in sorted(series.items())
        },
        "series_total": sum(sum(v) for v in series.values()),
    }


def bytes_per_scrape(sim: Sim) -> dict[str, dict[str, int]]:
    """Body sizes of one scrape of rank 0, a node leader and another rank, in the text format
    and OpenMetrics (what Prometheus asks for), plain and gzipped."""
    picks = {"rank0": 0, "node_leader": sim.gpus, "rank": 1}
    out = {}
    for kind, rank in picks.items():
        if rank >= sim.ranks:
            continue
        sizes = {}
        for fmt, accept in (("text", TEXT_ACCEPT), ("openmetrics", PROMETHEUS_ACCEPT)):
            plain = _get(sim.url(rank), {"Accept": accept})
            gz = _get(sim.url(rank), {"Accept": accept, "Accept-Encoding": "gzip"})
            sizes[fmt] = len(plain)
            sizes[f"{fmt}_gzip"] = len(gz)
            if fmt == "text":
                sizes["series"] = series_count(plain.decode())
        out[kind] = sizes
    return out


# ---- dashboard queries: recorded and raw ----------------------------------------------------

_RECORDED_REF = re.compile(r"(?<![\w:])([a-zA-Z_]\w*:[\w:]+)(\{[^}]*\})?")


@dataclass(frozen=True)
class PanelQuery:
    """One dashboard query, expanded as Grafana sends it, and its raw-series equivalent."""

    dashboard: str
    title: str
    expr: str  # against the recording rules (as shipped)
    raw: str  # the recording rules it reads inlined: the same query over per-rank series

    @property
    def fans_out(self) -> bool:
        """Whether the panel reads a recording rule (the raw form would aggregate over ranks)."""
        return self.expr != self.raw


_RANGE_AFTER_PARENS = re.compile(r"\)\[([0-9a-z$_]+)\]")


def inline_recordings(expr: str, cfg: cfgmod.Config) -> str:
    """``expr`` with every recorded series replaced by its rule's expression, the selector's
    matchers pushed into the rule's raw selectors (``Config.selectors``): what the panel would
    have to compute at query time without the recording rules."""
    cache: dict[str, dict[str, str]] = {}

    def rules_for(matchers: str) -> dict[str, str]:
        if matchers not in cache:
            c = dataclasses.replace(cfg, selectors=cfgmod.Selectors(metrics=matchers))
            cache[matchers] = {r.record: r.expr for g in rules.groups(c) for r in g.recordings}
        return cache[matchers]

    def sub(m: re.Match[str]) -> str:
        name, matchers = m.group(1), (m.group(2) or "{}")[1:-1]
        found = rules_for(matchers.replace(", ", ",")).get(name)
        return f"({found})" if found else m.group(0)

    for _ in range(3):  # a rule may read another recorded series
        expr, before = _RECORDED_REF.sub(sub, expr), expr
        if expr == before:
            break
    # a range over a recorded series becomes a subquery over its inlined expression
    return _RANGE_AFTER_PARENS.sub(r")[\1:]", expr)


def panel_queries(cfg: cfgmod.Config, rate_interval: str) -> list[PanelQuery]:
    """Every query of every generated dashboard, variables at their defaults (All) except
    ``run_id``."""
    out = []
    for name, model in dashboards.dashboards(cfg).items():
        for title, expr in dashboards.panel_queries(model):
            expanded = dashboards.expand(expr, {"run_id": RUN_ID}, rate_interval=rate_interval)
            out.append(PanelQuery(name, title, expanded, inline_recordings(expanded, cfg)))
    return out


def exposed_names(sim: Sim) -> set[str]:
    """Every metric name the simulated exporters expose (as Prometheus stored them)."""
    found = results(sim.prometheus, f'group by (__name__) ({{job="{JOB}"}})')
    return {r["metric"]["__name__"] for r in found}


def timed_query(
    base: str, expr: str, *, start: float | None = None, end: float | None = None, step: str = ""
) -> tuple[float, str, int]:
    """(seconds, status, series returned) of one instant query (or range query with ``start``)."""
    if start is None:
        url = f"{base}/api/v1/query?{urlencode({'query': expr})}"
    else:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step}
        url = f"{base}/api/v1/query_range?{urlencode(params)}"
    t0 = time.perf_counter()
    try:
        body = json.loads(_get(url))
    except urllib.error.HTTPError as exc:
        body = {"status": "error", "error": exc.read().decode(errors="replace")[:300]}
    dt = time.perf_counter() - t0
    n = len(body["data"]["result"]) if body.get("status") == "success" else 0
    return dt, str(body.get("status")), n


_SIGNAL = re.compile(r'signal="(\w+)"')


def query_stats(sim: Sim, reps: int = 3, ranged: bool = True) -> dict[str, Any]:
    """Every panel query against Prometheus and VictoriaMetrics, as shipped (recording rules)
    and with the recordings inlined (raw per-rank series), ``reps`` instant queries each and one
    range query over the run; plus which panels returned data."""
    secs = cfgmod.seconds(sim.interval)
    rate_interval = cfgmod.duration(4 * secs)  # Grafana's $__rate_interval at this interval
    queries = panel_queries(sim.cfg, rate_interval)
    exposed = exposed_names(sim) | {"ALERTS"}
    # a step-signal panel is fed when the workload logs the metric its signal is computed from
    signal = catalog.get("rl_step_signal").name
    by_signal = f"group by (signal) ({signal})"
    signals = {r["metric"]["signal"] for r in results(sim.prometheus, by_signal)}
    # VictoriaMetrics gets the samples by remote write, seconds behind Prometheus: a signal the
    # run began to export just now is there once the write caught up
    wait_for(
        lambda: signals <= {r["metric"]["signal"] for r in results(sim.vm, by_signal)},
        60,
        "VictoriaMetrics to have every step signal Prometheus has",
    )
    stores = {"prometheus": sim.prometheus, "victoriametrics": sim.vm}
    end = time.time()
    start = max(sim.started, end - 3600)
    panels = []
    lat: dict[str, dict[str, dict[str, list[float]]]] = {
        s: {v: {"instant": [], "range": []} for v in ("recorded", "raw", "fanout_recorded")}
        for s in stores
    }
    for q in queries:
        fed = (
            metric_names(q.raw) <= exposed
            and set(_SIGNAL.findall(q.raw)) <= signals
            and feeds(sim.prometheus, q.raw)
        )
        row: dict[str, Any] = {"dashboard": q.dashboard, "title": q.title, "expr": q.expr}
        row.update(fans_out=q.fans_out, fed=fed)
        for store, base in stores.items():
            for variant, expr in (("recorded", q.expr), ("raw", q.raw)):
                if variant == "raw" and not q.fans_out:
                    continue
                times, series, status = [], 0, ""
                for _ in range(reps):
                    dt, status, series = timed_query(base, expr)
                    times.append(dt)
                rng = None
                if ranged:
                    rng, _, _ = timed_query(base, expr, start=start, end=end, step=sim.interval)
                keys = [variant] + (
                    ["fanout_recorded"] if variant == "recorded" and q.fans_out else []
                )
                for key in keys:
                    lat[store][key]["instant"].extend(times)
                    if rng is not None:
                        lat[store][key]["range"].append(rng)
                row[f"{store}_{variant}"] = {
                    "status": status,
                    "series": series,
                    "instant_ms": 1000 * statistics.median(times),
                    **({"range_ms": 1000 * rng} if rng is not None else {}),
                }
        panels.append(row)
    summary: dict[str, Any] = {}
    for store, variants in lat.items():
        summary[store] = {
            v: {kind: _quantiles(t) for kind, t in kinds.items() if t}
            for v, kinds in variants.items()
        }
        for kind in ("instant", "range"):
            rec, raw = variants["fanout_recorded"][kind], variants["raw"][kind]
            if rec and raw:
                summary[store][f"{kind}_ratio_recorded_to_raw"] = sum(rec) / sum(raw)
    return {"rate_interval": rate_interval, "summary": summary, "panels": panels}


def recorded_in_vm(sim: Sim) -> dict[str, int]:
    """Series per recorded name the panels read, as VictoriaMetrics received them."""
    wanted = sorted(
        {
            m.group(1)
            for q in panel_queries(sim.cfg, "1m")
            for m in _RECORDED_REF.finditer(q.expr)
            if m.group(1) in rules.recorded_names()
        }
    )
    return {name: len(results(sim.vm, name)) for name in wanted}


def measure(sim: Sim, duration: float, reps: int = 3, ranged: bool = True) -> dict[str, Any]:
    """Let the simulation run ``duration`` seconds, then measure everything."""
    first = snapshot(sim)
    time.sleep(duration)
    last = snapshot(sim)
    elapsed = last["time"] - first["time"]
    rate = lambda key: (last[key] - first[key]) / elapsed  # noqa: E731
    vm_series = api(f"{sim.vm}/api/v1/series/count")["data"][0]
    prom_rules = api(f"{sim.prometheus}/api/v1/rules?type=record")["data"]["groups"]
    out: dict[str, Any] = {
        "ranks": sim.ranks,
        "gpus_per_node": sim.gpus,
        "nodes": -(-sim.ranks // sim.gpus),
        "per_process": sim.per_process,
        "processes": len(sim.processes),
        "scrape_interval": sim.interval,
        "measured_seconds": round(elapsed, 1),
        "scrapes": scrape_stats(sim),
        "bytes_per_scrape": bytes_per_scrape(sim),
        "ingest": {
            "prometheus_samples_per_second": rate("prom_samples_appended"),
            "victoriametrics_rows_per_second": rate("vm_rows_inserted"),
            "remote_write_samples_per_second": rate("rw_samples_sent"),
            "prometheus_cpu_cores": rate("prom_cpu_seconds"),
        },
        "prometheus": {
            "head_series": last["prom_head_series"],
            "rss_bytes": last["prom_rss_bytes"],
            "heap_inuse_bytes": last["prom_heap_inuse_bytes"],
            "rule_group_last_duration_max_seconds": last["rule_group_max_seconds"],
            "rule_evaluation_failures": last["rule_failures"],
            "recording_rules": sum(len(g["rules"]) for g in prom_rules),
        },
        "remote_write": {
            "lag_seconds": last["rw_highest_ts"] - last["rw_sent_ts"],
            "samples_pending": last["rw_samples_pending"],
            "samples_failed": last["rw_samples_failed"],
            "samples_retried": last["rw_samples_retried"],
            "samples_dropped": last["rw_samples_dropped"],
        },
        "victoriametrics": {"series": vm_series, "rss_bytes": last["vm_rss_bytes"]},
    }
    out["queries"] = query_stats(sim, reps, ranged)
    out["recorded_in_vm"] = recorded_in_vm(sim)
    return out


# ---- report -------------------------------------------------------------------------------------


def _ms(q: Mapping[str, float]) -> str:
    return f"{1000 * q['p50']:.1f} / {1000 * q['p99']:.1f} / {1000 * q['max']:.1f}"


def report(r: Mapping[str, Any]) -> str:
    """The human table of one measurement."""
    s, ing, p, rw = r["scrapes"], r["ingest"], r["prometheus"], r["remote_write"]
    lines = [
        f"{r['ranks']} ranks on {r['nodes']} nodes ({r['gpus_per_node']} GPUs each), "
        f"{r['processes']} processes, scrape every {r['scrape_interval']}, "
        f"measured {r['measured_seconds']:.0f} s",
        f"targets discovered / up            {s['discovered']} / {s['up']}",
    ]
    for kind, q in s["duration_seconds"].items():
        lines.append(f"scrape ms p50/p99/max ({kind:>11})  {_ms(q)}  ({q['n']} scrapes)")
    for kind, c in s["series_per_target"].items():
        budget = BUDGET.get(kind, "")
        lines.append(
            f"series per target ({kind:>11})     {c['min']:.0f}-{c['max']:.0f} "
            f"x {c['targets']} (budget {budget} + {SCRAPE_SERIES_PER_TARGET})"
        )
    lines.append(f"series scraped, all targets        {s['series_total']:.0f}")
    for kind, b in r["bytes_per_scrape"].items():
        lines.append(
            f"bytes per scrape ({kind:>11})      text {b['text']} (gzip {b['text_gzip']}), "
            f"OpenMetrics {b['openmetrics']} (gzip {b['openmetrics_gzip']})"
        )
    lines += [
        f"samples/s appended by Prometheus   {ing['prometheus_samples_per_second']:.0f}",
        f"rows/s inserted by VictoriaMetrics {ing['victoriametrics_rows_per_second']:.0f}",
        f"Prometheus head series / RSS       {p['head_series']:.0f} / "
        f"{p['rss_bytes'] / 2**20:.0f} MiB ({p['rss_bytes'] / max(1, p['head_series']):.0f} B"
        f"/series), CPU {ing['prometheus_cpu_cores']:.2f} cores",
        f"rule groups: last eval max         {1000 * p['rule_group_last_duration_max_seconds']:.1f}"
        f" ms ({p['recording_rules']} recording rules, {p['rule_evaluation_failures']:.0f} "
        "failures)",
        f"remote_write lag / pending / failed {rw['lag_seconds']:.1f} s / "
        f"{rw['samples_pending']:.0f} / {rw['samples_failed']:.0f}",
        f"VictoriaMetrics series / RSS       {r['victoriametrics']['series']} / "
        f"{r['victoriametrics']['rss_bytes'] / 2**20:.0f} MiB",
        "",
        "dashboard queries, ms p50 / p99 / max   instant            range (whole run)",
    ]
    for store, v in r["queries"]["summary"].items():
        for variant in ("recorded", "fanout_recorded", "raw"):
            if variant not in v:
                continue
            label = {
                "recorded": "all panels as shipped",
                "fanout_recorded": "fan-out panels, rules",
                "raw": "fan-out panels, raw",
            }[variant]
            inst = _ms(v[variant]["instant"])
            rng = _ms(v[variant]["range"]) if "range" in v[variant] else "-"
            lines.append(f"  {store:<16} {label:<22} {inst:<18} {rng}")
        ratio = v.get("instant_ratio_recorded_to_raw")
        rratio = v.get("range_ratio_recorded_to_raw")
        if ratio is not None:
            extra = f", range {rratio:.3f}" if rratio is not None else ""
            lines.append(f"  {store:<16} time recorded / raw    instant {ratio:.3f}{extra}")
    panels = r["queries"]["panels"]
    fed = [q for q in panels if q["fed"]]
    for store in ("prometheus", "victoriametrics"):
        got = sum(1 for q in fed if q[f"{store}_recorded"]["series"])
        lines.append(f"panels with data ({store}): {got} of {len(fed)} fed ({len(panels)} queries)")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    """Where the measurement ran."""
    versions = {}
    for binary in ("prometheus", "victoria-metrics"):  # the Debian packages' versions
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", binary],
            capture_output=True,
            text=True,
            check=False,
        )
        versions[binary] = out.stdout.strip() if out.returncode == 0 else "?"
    return {
        "cpus": os.cpu_count(),
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "python": platform.python_version(),
        **versions,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--per-process", type=int, default=16)
    ap.add_argument("--gpus", type=int, default=8, help="ranks (and fake GPUs) per node")
    ap.add_argument("--interval", default="5s", help="scrape and rule evaluation interval")
    ap.add_argument("--step-seconds", type=float, default=10.0, help="training step cadence")
    ap.add_argument("--duration", type=float, default=120.0, help="seconds measured")
    ap.add_argument("--reps", type=int, default=3, help="instant queries per panel and store")
    ap.add_argument("--json", type=Path, help="write the measurement here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return _child(json.loads(args.child))
    with tempfile.TemporaryDirectory(prefix="rlpulse-scale-") as tmp:
        t0 = time.time()
        with simulate(
            args.ranks, args.per_process, args.gpus, args.interval, args.step_seconds, Path(tmp)
        ) as sim:
            startup = time.time() - t0
            result = measure(sim, args.duration, args.reps)
    result["startup_seconds"] = round(startup, 1)
    result["step_seconds"] = args.step_seconds
    result["machine"] = machine()
    result["command"] = "python benchmarks/bench_scale.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:])
    )
    print(report(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
