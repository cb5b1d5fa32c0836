"""The scale simulation of benchmarks/scale.py, CI-sized: 24 ranks on 3 nodes in 3 processes.

Real exporter processes (fake 8-GPU NVML on each node's local rank 0, one loopback address per
node), their ``file_sd`` file written by ``rlpulse.runtime.targets``, the real ``prometheus`` with
the generated config and rules scraping every second and remote-writing into the real
``victoria-metrics``. Asserted: structure, never timing (the benchmark prints the figures).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import scale
from harness.stackutil import results, wait_for
from rlpulse import catalog
from rlpulse.stack import rules

RANKS, PER_PROCESS, GPUS = 24, 8, 8
NODES = RANKS // GPUS


def _recorded_everywhere(sim: scale.Sim) -> bool:
    """Every recorded series the panels read that Prometheus has, VictoriaMetrics has too."""
    in_vm = scale.recorded_in_vm(sim)
    in_prom = {name: len(results(sim.prometheus, name)) for name in in_vm}
    have = {name for name, n in in_prom.items() if n}
    return len(have) >= 20 and all(in_vm[name] == in_prom[name] for name in have)


def _raw_everywhere(sim: scale.Sim) -> bool:
    """Every metric of the run Prometheus holds has reached VictoriaMetrics (remote write sends
    in shards and batches, and a loaded machine delays the later ones)."""
    names = f'count by (__name__) ({{run_id="{scale.RUN_ID}"}})'
    in_prom, in_vm = (
        {r["metric"]["__name__"] for r in results(base, names)} for base in (sim.prometheus, sim.vm)
    )
    return bool(in_prom) and in_prom <= in_vm


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[scale.Sim, Any]]:
    workdir: Path = tmp_path_factory.mktemp("scale")
    with scale.simulate(RANKS, PER_PROCESS, GPUS, "1s", 1.0, workdir, timeout=60) as sim:
        # two scrapes of every counter behind a rate rule, evaluated, and remote-written
        wait_for_rates = rules.rate_name(catalog.get("rl_samples_total"))
        wait_for(lambda: results(sim.prometheus, f"{wait_for_rates} > 0"), 30, "rate rules")
        wait_for(lambda: _recorded_everywhere(sim), 30, "recorded series in VictoriaMetrics")
        wait_for(lambda: _raw_everywhere(sim), 30, "every raw metric in VictoriaMetrics")
        result = scale.measure(sim, duration=2, reps=1)
        print("\n" + scale.report(result))
        yield sim, result


def test_every_target_discovered_through_file_sd_and_up(measured: Any) -> None:
    sim, result = measured
    active = scale.trainer_targets(sim.prometheus)
    assert {t["labels"]["instance"] for t in active} == set(sim.instances)
    assert {t["discoveredLabels"]["__meta_filepath"] for t in active} == {
        str(sim.cfg.scrape.file_sd[0])
    }
    assert result["scrapes"]["discovered"] == result["scrapes"]["up"] == RANKS
    assert len(sim.processes) == RANKS // PER_PROCESS


def test_series_per_rank_within_budget(measured: Any) -> None:
    _, result = measured
    per = result["scrapes"]["series_per_target"]
    assert set(per) == {"rank0", "node_leader", "rank"}
    assert per["rank0"]["targets"] == 1
    assert per["node_leader"]["targets"] == NODES - 1
    assert per["rank"]["targets"] == RANKS - NODES
    for kind, counts in per.items():
        assert counts["max"] <= scale.BUDGET[kind], (kind, counts)
    for kind, sizes in result["bytes_per_scrape"].items():
        assert sizes["series"] <= scale.BUDGET[kind]
        assert 0 < sizes["text_gzip"] < sizes["text"]


def test_node_readings_once_per_node(measured: Any) -> None:
    sim, _ = measured
    gpu = catalog.get("rl_gpu_utilization_ratio")
    assert len(results(sim.prometheus, gpu.name)) == NODES * GPUS
    per_node = rules.aggregate_name("node", gpu, "avg")
    for base in (sim.prometheus, sim.vm):
        assert len(results(base, per_node)) == NODES


def test_every_fed_panel_query_returns_data_from_both_stores(measured: Any) -> None:
    """Every panel whose metrics the GRPO-like workload feeds returns data from Prometheus and
    from VictoriaMetrics (as shipped, over the recording rules); no store refuses a query, and
    the recordings inlined over raw series return the same series as the rules."""
    _, result = measured
    panels = result["queries"]["panels"]
    fed = [p for p in panels if p["fed"]]
    assert len(fed) >= 60, len(fed)
    assert sum(p["fans_out"] for p in fed) >= 30
    for p in panels:
        for store in ("prometheus", "victoriametrics"):
            for variant in ("recorded", "raw"):
                got = p.get(f"{store}_{variant}")
                if got is not None:
                    assert got["status"] == "success", (store, variant, p["title"], p["expr"])
    empty = [
        (store, p["title"], p["expr"])
        for p in fed
        for store in ("prometheus", "victoriametrics")
        if not p[f"{store}_recorded"]["series"]
    ]
    assert not empty, empty
    differ = [
        (p["title"], p["expr"])
        for p in fed
        if p["fans_out"] and p["prometheus_raw"]["series"] != p["prometheus_recorded"]["series"]
    ]
    assert not differ, differ


def test_victoriametrics_received_the_recorded_series(measured: Any) -> None:
    sim, result = measured
    got = result["recorded_in_vm"]
    assert sum(1 for n in got.values() if n) >= 20
    assert result["victoriametrics"]["series"] > 0
    assert result["remote_write"]["samples_failed"] == 0
    assert result["ingest"]["victoriametrics_rows_per_second"] > 0
    # the per-node and per-run aggregates the dashboards read, one series per node or run
    for metric, op in rules.NODE_AGGREGATES:
        if metric.name == catalog.get("rl_gpu_process_memory_bytes").name:
            continue  # the fake boards run no processes
        assert got[rules.aggregate_name("node", metric, op)] == NODES, (metric.name, op)
    for metric, op in rules.RUN_AGGREGATES:
        assert len(results(sim.vm, rules.aggregate_name("run", metric, op))) == 1
