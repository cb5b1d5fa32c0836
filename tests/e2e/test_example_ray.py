"""examples/ray_actors.py with real Ray and a real Prometheus: every actor's exporter is found
through file_sd, and a killed, terminated or finished actor's target goes away."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import ray

from harness.stackutil import ROOT, api, prometheus, results, wait_for

EXAMPLE = ROOT / "examples" / "ray_actors.py"
WORKERS = 3


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ray_actors", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)  # the workers cannot import it by name
    return module


@pytest.fixture(scope="module")
def cluster(example: ModuleType) -> Iterator[str]:
    """One local Ray for the module; its GCS address. (Ray refuses a loopback node address on
    Linux: the node, and so every exporter, is on this machine's own interface address.)"""
    started = time.monotonic()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
    )
    print(f"ray.init: {time.monotonic() - started:.1f} s")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def scrape_config(sd: Path) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "ray",
                "file_sd_configs": [{"files": [str(sd / "*.json")], "refresh_interval": "1s"}],
            }
        ],
    }


def active(base: str) -> dict[str, dict[str, Any]]:
    """Prometheus' active targets of job ray, by instance."""
    body = api(f"{base}/api/v1/targets?state=active")
    return {
        t["labels"]["instance"]: t
        for t in body["data"]["activeTargets"]
        if t["labels"]["job"] == "ray"
    }


def by_instance(base: str, expr: str) -> dict[str, dict[str, str]]:
    return {r["metric"]["instance"]: r["metric"] for r in results(base, expr)}


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_prometheus_finds_every_actor_and_drops_the_ones_that_go(
    example: ModuleType, cluster: str, tmp_path: Path
) -> None:
    sd = tmp_path / "targets"
    sd.mkdir()
    with prometheus(tmp_path, scrape_config(sd)) as prom:
        started = time.monotonic()
        job = example.Job(sd, "ray-e2e", WORKERS)
        try:
            job.run(3)
            actors = {t["rank"]: t for t in job.targets()}
            print(f"{len(actors)} actors up and 3 steps: {time.monotonic() - started:.1f} s")
            assert sorted(actors) == list(range(WORKERS + 1))
            assert sorted(p.name for p in sd.glob("*.json")) == [
                f"ray-e2e-{r}.json" for r in range(WORKERS + 1)
            ]
            (node,) = (n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
            addresses = {t["address"]: r for r, t in actors.items()}
            assert all(a.startswith(f"{node}:") for a in addresses)  # the Ray node's address
            # one local rank 0 on the (one) node
            assert sorted(t["local_rank"] for t in actors.values()) == list(range(WORKERS + 1))

            # -- discovery: one target per actor, each up, labelled by its own exporter
            up = wait_for(
                lambda: len(got := by_instance(prom, 'up{job="ray"} == 1')) == len(actors) and got,
                30,
                "every actor up",
            )
            print(f"all discovered and scraped: {time.monotonic() - started:.1f} s")
            assert set(up) == set(addresses)
            assert set(active(prom)) == set(addresses)
            info = by_instance(prom, 'rl_run_info{job="ray"}')
            for instance, labels in info.items():
                t = actors[addresses[instance]]
                assert labels["run_id"] == "ray-e2e"
                assert labels["rank"] == str(t["rank"])
                assert labels["node"] == node
                assert labels["local_rank"] == str(t["local_rank"])
                assert labels["role"] == ("learner" if t["rank"] == 0 else "rollout")
            assert set(info) == set(addresses)
            steps = results(prom, 'rl_step{job="ray"}')
            assert sorted((r["metric"]["rank"], r["value"][1]) for r in steps) == [
                (str(r), "3") for r in range(WORKERS + 1)
            ]
            for metric in ("rl_loss", "rl_kl_reference", "rl_entropy", "rl_grad_norm"):
                assert [r["metric"]["rank"] for r in results(prom, f'{metric}{{job="ray"}}')] == [
                    "0"
                ], metric
            rollouts = results(prom, 'rl_rollout_duration_seconds_count{job="ray"} > 0')
            assert sorted(r["metric"]["rank"] for r in rollouts) == ["1", "2", "3"]
            assert results(prom, 'rl_response_length_tokens_count{job="ray", rank="3"} > 0')
            host = results(prom, 'rlpulse_collector_enabled{job="ray", collector="host"}')
            assert [r["metric"]["local_rank"] for r in host] == ["0"]  # once per node

            # -- rank 1 is killed (no exit handlers run), rank 2 terminated (they run)
            ray.kill(job.workers[1])
            job.workers[2].__ray_terminate__.remote()
            wait_for(lambda: gone(actors[1]["pid"]) and gone(actors[2]["pid"]), 20, "the exits")
            assert actors[1]["file"] in {str(p) for p in sd.iterdir()}  # left behind
            wait_for(lambda: not Path(actors[2]["file"]).exists(), 10, "rank 2's own cleanup")
            job.run(1)  # the driver notices both
            assert sorted(job.lost) == [1, 2]
            assert sorted(p.name for p in sd.glob("*.json")) == ["ray-e2e-0.json", "ray-e2e-3.json"]
            left = {actors[0]["address"], actors[3]["address"]}
            wait_for(lambda: set(active(prom)) == left, 30, "Prometheus dropping ranks 1 and 2")
            print(f"dead workers dropped: {time.monotonic() - started:.1f} s")
            # their series end (staleness markers, written a couple of intervals later)
            wait_for(lambda: set(by_instance(prom, 'up{job="ray"}')) == left, 10, "stale up")
        finally:
            job.close()  # -- the end of the run: every file goes
        assert list(sd.iterdir()) == []
        wait_for(lambda: not active(prom), 30, "Prometheus dropping every target")
        print(f"all dropped after close: {time.monotonic() - started:.1f} s")


def test_main_prints_the_targets_and_leaves_none(cluster: str, tmp_path: Path) -> None:
    sd = tmp_path / "targets"
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--targets", str(sd), "--address", cluster]
        + ["--workers", "2", "--steps", "10", "--step-seconds", "0", "--run-id", "cli"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    for rank, role in ((0, "learner"), (1, "rollout"), (2, "rollout")):
        assert any(
            line.split()[:3] == [role, "rank", str(rank)] and f"{sd}/cli-{rank}.json" in line
            for line in lines
        ), (rank, lines)
    assert "step 10: loss" in out.stdout
    assert list(sd.iterdir()) == []
