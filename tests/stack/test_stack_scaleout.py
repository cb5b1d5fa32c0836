"""Remote write and federation with the real binaries: a real exporter scraped by a real
Prometheus running the generated prometheus.yml and rules (the leaf), remote-writing to two real
VictoriaMetrics (one takes every series, one only the recorded aggregates), and a second real
Prometheus (the global one) running the generated federate job against the leaf.

One leaf, two stores and one global server are shared by the module's tests (module fixture);
everything listens on 127.0.0.1 on free ports, with 1s scrape/evaluation/federation intervals.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.stackutil import api, results, victoria_metrics, wait_for, wait_for_data
from harness.stackutil import prometheus as run_prometheus
from rlpulse.runtime.exporter import Exporter
from rlpulse.stack import config, rules
from rlpulse.stack.deploy import prometheus

RUN = "scaleout"
LEAF_LABELS = {"cluster": "test-a", "replica": "leaf-0"}
RAW = f'rl_step{{run_id="{RUN}"}}'  # a raw per-rank series
RECORDED = f'run:rl_step:max{{run_id="{RUN}"}}'  # per-run aggregate
NODE_RECORDED = f'node:rl_process_resident_memory_bytes:sum{{run_id="{RUN}"}}'
FIRING = f'ALERTS{{alertname="RLNonFiniteLoss",run_id="{RUN}"}}'


@dataclass(frozen=True)
class Scaleout:
    exporter: Exporter
    leaf: str
    vm_all: str
    vm_recorded: str
    glob: str
    cfg: config.Config


def _leaf_config(exporter: Exporter, vm_all: str, vm_recorded: str) -> config.Config:
    queue = {"batch_send_deadline": "1s", "max_shards": 2, "max_samples_per_send": 1000}
    cfg = config.from_dict(
        {
            "scrape": {
                "static_targets": [f"127.0.0.1:{exporter.port}"],
                "file_sd": [],
                "alertmanagers": [],
            },
            "external_labels": LEAF_LABELS,
            "remote_write": [
                {"url": f"{vm_all}/api/v1/write", "name": "vm-all", **queue},
                {
                    "url": f"{vm_recorded}/api/v1/write",
                    "name": "vm-recorded",
                    "send": "recorded",
                    **queue,
                },
            ],
        }
    )
    return config.fast(cfg)  # 1s scrape and evaluation, windows of seconds


@pytest.fixture(scope="module")
def scaleout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scaleout]:
    tmp = tmp_path_factory.mktemp("scaleout")
    with ExitStack() as stack:
        exp = Exporter(port=0, addr="127.0.0.1", run_id=RUN, gpu=False, host=False).start()
        stack.callback(exp.close)
        exp.log({"loss": float("nan"), "reward": 0.5}, step=1)  # RLNonFiniteLoss fires at once
        vm_all = stack.enter_context(victoria_metrics(tmp / "vm-all"))
        vm_recorded = stack.enter_context(victoria_metrics(tmp / "vm-recorded"))
        cfg = _leaf_config(exp, vm_all, vm_recorded)
        leaf_dir = tmp / "leaf"
        for rel, text in rules.render(cfg).items():  # rule_files: rules/<area>.yml
            path = leaf_dir / rel.removeprefix("prometheus/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        leaf = stack.enter_context(run_prometheus(leaf_dir, prometheus.config(cfg)))
        # the global server: its own globals plus the generated federate job, aimed at the leaf
        fed = config.from_dict({"federation": {"leaves": [leaf.removeprefix("http://")]}}, base=cfg)
        glob_cfg = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}}
        glob_cfg.update(prometheus.federate(fed))
        (tmp / "global").mkdir()
        glob = stack.enter_context(run_prometheus(tmp / "global", glob_cfg))
        yield Scaleout(exp, leaf, vm_all, vm_recorded, glob, cfg)


def _labels(series: list[dict[str, Any]]) -> list[dict[str, str]]:
    return [s["metric"] for s in series]


def test_every_series_reaches_the_store_with_the_external_labels(scaleout: Scaleout) -> None:
    vm = scaleout.vm_all
    for expr in (RAW, RECORDED, NODE_RECORDED, FIRING):
        got = _labels(wait_for_data(vm, expr, timeout=30))
        assert all(LEAF_LABELS.items() <= m.items() for m in got), (expr, got)
    raw = _labels(results(vm, RAW))
    assert [m["rank"] for m in raw] == ["0"] and raw[0]["job"] == "rlpulse"
    # the leaf runs the generated queue settings
    loaded = yaml.safe_load(api(f"{scaleout.leaf}/api/v1/status/config")["data"]["yaml"])
    queue = {rw["name"]: rw["queue_config"] for rw in loaded["remote_write"]}
    assert queue["vm-all"]["max_shards"] == 2 and queue["vm-all"]["batch_send_deadline"] == "1s"
    print(f"\nPrometheus' remote-write queue defaults kept: {queue['vm-all']}")


def test_recorded_mode_sends_only_aggregates_alerts_and_run_info(scaleout: Scaleout) -> None:
    vm = scaleout.vm_recorded
    for expr in (RECORDED, NODE_RECORDED, FIRING, f'rl_run_info{{run_id="{RUN}"}}'):
        got = _labels(wait_for_data(vm, expr, timeout=30))
        assert all(LEAF_LABELS.items() <= m.items() for m in got), (expr, got)
    # the other store holds the raw series by now, so they were sent and filtered out here
    wait_for_data(scaleout.vm_all, RAW, timeout=30)
    names = api(f"{vm}/api/v1/label/__name__/values")["data"]
    allowed = set(prometheus.aggregate_names())
    assert set(names) <= allowed, sorted(set(names) - allowed)
    everything = api(f"{scaleout.vm_all}/api/v1/label/__name__/values")["data"]
    assert "rl_step" in everything and "rl_step" not in names
    print(f"\nseries names: all={len(everything)} recorded-only={len(names)}")


def test_global_server_federates_the_aggregates_with_the_leaf_labels(scaleout: Scaleout) -> None:
    glob = scaleout.glob
    for expr in (RECORDED, NODE_RECORDED, FIRING):
        got = _labels(wait_for_data(glob, expr, timeout=30))
        for m in got:  # honor_labels: the leaf's job and its external labels, not the global's
            assert LEAF_LABELS.items() <= m.items() and m["job"] == "rlpulse", (expr, m)
    targets = api(f"{glob}/api/v1/targets")["data"]["activeTargets"]
    assert [t["labels"]["job"] for t in targets] == [scaleout.cfg.federation.job_name]
    params = urllib.parse.parse_qs(urllib.parse.urlparse(targets[0]["scrapeUrl"]).query)
    assert len(params["match[]"]) == 1
    assert results(glob, RAW) == []  # raw per-rank series stay on the leaf
    wait_for(lambda: results(glob, f'rl_run_info{{run_id="{RUN}"}}'), 10, "run info on the global")


def test_every_option_is_a_config_promtool_accepts(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret-not-in-any-file\n")
    cfg = config.from_dict(
        {
            "scrape": {"file_sd": []},
            "external_labels": {"cluster": "b", "__replica__": "prom-1"},  # Mimir's HA labels
            "remote_write": [
                {
                    "url": "https://mimir.example:443/api/v1/push",
                    "name": "mimir",
                    "username": "tenant-b",
                    "password_file": str(secret),
                    "headers": {"X-Scope-OrgID": "tenant-b"},
                    "capacity": 6000,
                    "max_shards": 20,
                    "max_samples_per_send": 2000,
                },
                {
                    "url": "http://receive.example:19291/api/v1/receive",
                    "name": "thanos",
                    "send": "recorded",
                    "bearer_token_file": str(secret),
                },
            ],
        }
    )
    out = tmp_path / "prometheus"
    (out / "rules").mkdir(parents=True)
    for rel, text in {**prometheus.render(cfg), **rules.render(cfg)}.items():
        (out / rel.removeprefix("prometheus/")).parent.mkdir(parents=True, exist_ok=True)
        (out / rel.removeprefix("prometheus/")).write_text(text)
    assert "s3cret" not in (out / "prometheus.yml").read_text()
    promtool = shutil.which("promtool")
    assert promtool
    for name in ("prometheus.yml", "federate.yml"):
        check = subprocess.run(
            [promtool, "check", "config", str(out / name)], capture_output=True, text=True
        )
        assert check.returncode == 0, check.stdout + check.stderr
    written = yaml.safe_load((out / "prometheus.yml").read_text())["remote_write"]
    assert written[0]["basic_auth"] == {"username": "tenant-b", "password_file": str(secret)}
    assert written[1]["authorization"]["credentials_file"] == str(secret)
    assert "write_relabel_configs" not in written[0] and written[1]["write_relabel_configs"]


def test_the_shipped_config_has_no_remote_write() -> None:
    text = prometheus.render(config.Config())["prometheus/prometheus.yml"]
    assert "remote_write" not in text and "external_labels" not in text


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"url": "http://user:pw@vm:8428/api/v1/write"}, "without credentials"),
        ({"url": "http://vm/api/v1/write", "headers": {"Authorization": "Bearer x"}}, "credential"),
        ({"url": "http://vm/api/v1/write", "username": "u"}, "go together"),
        ({"url": "http://vm/api/v1/write", "max_shards": -1}, "whole number"),
        ({"url": "http://vm/api/v1/write", "password": "x"}, "unknown key"),
    ],
)
def test_bad_remote_write_entries_are_named(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(config.ConfigError, match=message) as err:
        config.from_dict({"remote_write": [entry]})
    assert "remote_write[0]" in str(err.value) and "pw" not in str(err.value)
