"""Many simulated ranks through Prometheus' own scale-out path, measured.

    python benchmarks/bench_scale.py [--ranks 256] [--per-process 16] [--gpus 8] \
        [--interval 5s] [--duration 120] [--json out.json]

Starts ``--ranks`` exporters (``--per-process`` of them per Python process, each with its own
port and identity; ``--gpus`` ranks per simulated node, the node's local rank 0 reading a fake
NVML with that many GPUs and the host), feeds them a GRPO-like workload, writes their ``file_sd``
targets with ``rlpulse.targets``, and runs a real Prometheus (the generated config and rules,
``remote_write`` into a real VictoriaMetrics). After ``--duration`` seconds it reports scrape
durations, series per rank, bytes per scrape, samples/s ingested by both stores, Prometheus
memory, and the latency of every dashboard query (against the recording rules) on both.

Needs the ``prometheus`` and ``victoria-metrics`` binaries (Debian packages of those names).
``tests/test_scale_sim.py`` runs a CI-sized variant of the same code.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the repository's tests/ holds the fake NVML
    sys.path.insert(0, str(ROOT))

from rlpulse import catalog  # noqa: E402
from rlpulse.exporter import Exporter  # noqa: E402
from rlpulse.stack import config as cfgmod  # noqa: E402
from tests.fake_nvml import FakeGpu, FakeNvml  # noqa: E402

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
PHASE = catalog.get("rl_phase_duration_seconds").name
ROLLOUT = catalog.get("rl_rollout_duration_seconds").name
LENGTH = catalog.get("rl_response_length_tokens").name
GRADER_CALLS = catalog.get("rl_grader_calls_total").name
GRADER_LATENCY = catalog.get("rl_grader_duration_seconds").name
SAMPLES = catalog.get("rl_samples_total").name
COMPLETION_TOKENS = catalog.get("rl_completion_tokens_total").name
EVAL = catalog.get("rl_eval_score").name


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
        exp.observe(LENGTH, tokens, exemplars=ids)
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
        exp.set(EVAL, 0.6, benchmark="gsm8k", split="eval")


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


def rank_exporter(rank: int, gpus_per_node: int, run_id: str = RUN_ID) -> Exporter:
    """The exporter of simulated rank ``rank``: node ``node-<rank // gpus>``; the node's local
    rank 0 reads the (fake) GPUs and the host, as on a real node."""
    local = rank % gpus_per_node
    return Exporter(
        port=0,
        addr="127.0.0.1",
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

# Series one exporter may expose under the workload above (tests/test_scale_cardinality.py
# enforces them on a real scrape; docs/scaling.md multiplies them out). Prometheus adds 5 more
# per target (up, scrape_duration_seconds, scrape_samples_scraped, …).
BUDGET = {"rank0": 400, "node_leader": 340, "rank": 190}
SCRAPE_SERIES_PER_TARGET = 5


def series_count(text: str) -> int:
    """Samples (= series) in a text-format scrape."""
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))
