"""The series budget of one rank and one node, from real scrapes (docs/scaling.md).

Exporters are fed the GRPO-like workload of benchmarks/scale.py (the trainer's global
statistics on rank 0, every rank's own rollout shard, phases and counters) with a fake 8-GPU NVML
on each node's local rank 0. Counted: the samples of a real text-format scrape, i.e. the series
Prometheus stores for that target (plus its 5 synthetic ones).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import pytest

from harness import scale
from rlpulse import catalog, keys
from rlpulse.catalog import OVERFLOW_VALUE
from rlpulse.runtime.exporter import Exporter
from rlpulse.runtime.ingest import USER_LABELS
from tests.conftest import samples, scrape

GPUS = 8
GPU_METRICS = {m.name for m in catalog.CATALOG if m.name.startswith("rl_gpu_")}
HOST_METRICS = {m.name for m in catalog.CATALOG if m.name.startswith("rl_host_")}
# what a trainer reports from rank 0 only (the global batch statistics and the run's settings)
RANK0_ONLY = {
    catalog.get(n).name
    for n in (
        "rl_reward_mean",
        "rl_reward_std",
        "rl_kl_reference",
        "rl_entropy",
        "rl_loss",
        "rl_grad_norm",
        "rl_learning_rate",
        "rl_truncation_ratio",
        "rl_reward_component_mean",
        "rl_hyperparameter",
        "rl_eval_score",
    )
}


def _base(sample_name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if sample_name.endswith(suffix) and sample_name[: -len(suffix)] in catalog.BY_NAME:
            return sample_name[: -len(suffix)]
    return sample_name


def _fed(rank: int, steps: int = 60) -> Iterator[tuple[Exporter, str]]:
    """A started simulated rank, fed ``steps`` steps; yields (exporter, scrape) twice: after
    ``steps`` and after as many more. 60 steps warm every step signal up: a baseline is exported
    once it is defined (the hacking signal's once the reward's gain counts, after 15 values)."""
    exp = scale.rank_exporter(rank, GPUS).start()
    rng = random.Random(rank)
    try:
        for round_ in range(2):
            for step in range(round_ * steps, (round_ + 1) * steps):
                scale.feed(exp, step, rng)
            yield exp, scrape(exp.url)
    finally:
        exp.close()


@pytest.mark.parametrize(
    ("rank", "kind"), [(0, "rank0"), (GPUS, "node_leader"), (3, "rank")], ids=str
)
def test_series_per_exporter_stay_within_the_budget(rank: int, kind: str) -> None:
    counts = []
    for _, text in _fed(rank):
        counts.append(scale.series_count(text))
        assert counts[-1] == len(samples(text))  # every sample line is a distinct series
    assert counts[0] == counts[1], "series must not grow with steps"
    assert counts[0] <= scale.BUDGET[kind], (kind, counts[0])


def test_node_readings_once_per_node_and_rank0_series_only_on_rank0() -> None:
    """Two simulated nodes of 8 ranks: GPUs and host from each node's local rank 0 only, one
    series per physical GPU, process readings from every rank, global statistics from rank 0."""
    texts: dict[int, str] = {}
    for rank in range(2 * GPUS):
        texts[rank] = next(_fed(rank, steps=3))[1]
    gpu_series: Counter[tuple[str, str, str]] = Counter()
    for rank, text in texts.items():
        names = {_base(n) for n, _ in samples(text)}
        if rank % GPUS == 0:
            no_processes = {catalog.get("rl_gpu_process_memory_bytes").name}  # fake boards idle
            assert names >= GPU_METRICS - no_processes
            assert names >= HOST_METRICS
        else:
            assert not names & (GPU_METRICS | HOST_METRICS), rank
        assert catalog.get("rl_process_resident_memory_bytes").name in names
        assert bool(names & RANK0_ONLY) == (rank == 0), (rank, names & RANK0_ONLY)
        for name, labels in samples(text):
            lbl = dict(labels)
            if name == catalog.get("rl_gpu_utilization_ratio").name:
                gpu_series[(name, lbl["node"], lbl["gpu"])] += 1
    assert len(gpu_series) == 2 * GPUS and set(gpu_series.values()) == {1}


def test_key_map_labels_are_fixed_or_capped() -> None:
    """A logged key's label values are constants of the key maps, except pattern captures,
    which come from user data and are all capped labels."""
    for m in keys.MAPS:
        for pattern in m.patterns:
            captured = set(pattern.regex.groupindex)
            assert captured <= USER_LABELS, (m.framework, pattern.template, captured)


def test_every_user_supplied_label_is_bounded() -> None:
    """50 distinct values through each public path that takes user data, label_cap 4: at most 4
    values plus the overflow value per metric and label, each overflow counted."""
    cap = 4
    config = {f"hp{i}": float(i) for i in range(50)}
    exp = Exporter(
        port=0, run_id="cap", gpu=False, host=False, label_cap=cap, unmapped_cap=cap, config=config
    ).start()
    try:
        for i in range(50):
            v = f"v{i}"
            exp.observe_rollouts(rewards=[1.0, 0.0], components={v: [1.0, 0.5]})
            exp.log({f"rewards/{v}/mean": 0.5, f"an_unknown_key_{i}": 1.0})
            exp.set(catalog.get("rl_eval_score").name, 0.5, benchmark=v, split=v)
            exp.count(catalog.get("rl_tool_calls_total").name, 1, tool=v)
            with exp.phase(v):
                pass
        text = scrape(exp.url)
    finally:
        exp.close()
    values: dict[tuple[str, str], set[str]] = {}
    for name, labels in samples(text):
        for label, val in labels:
            if label in USER_LABELS:
                values.setdefault((_base(name), label), set()).add(val)
    checked = {label for _, label in values}
    assert checked == USER_LABELS, USER_LABELS - checked
    for (metric, label), seen in values.items():
        assert len(seen - {OVERFLOW_VALUE}) <= cap, (metric, label, len(seen))
    overflow = catalog.get("rlpulse_label_overflow_total").name
    counted = {dict(lbl)["label"] for n, lbl in samples(text) if n == overflow}
    assert counted == USER_LABELS
