"""Metrics point at rollouts: the exemplars on the rollout histograms carry ids that resolve
to stored rollouts (directly and over the JSON endpoint), and a real Prometheus with exemplar
storage accepts them (``/api/v1/query_exemplars``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from urllib.parse import quote, urlencode

import numpy as np
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from harness.stackutil import free_port
from rlpulse import catalog
from rlpulse.rollouts import Recorder, SamplingConfig
from rlpulse.rollouts.query import find
from rlpulse.rollouts.server import serve
from rlpulse.runtime.exporter import Exporter

LATENCY = catalog.get("rl_rollout_duration_seconds").name
LENGTH = catalog.get("rl_response_length_tokens").name


def scrape_exemplars(url: str) -> dict[str, list[tuple[str, float]]]:
    """{histogram: [(rollout_id, value)]} from an OpenMetrics scrape."""
    req = urllib.request.Request(
        url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, list[tuple[str, float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.exemplar is not None:
                out.setdefault(fam.name, []).append(
                    (s.exemplar.labels["rollout_id"], s.exemplar.value)
                )
    return out


@pytest.fixture
def trainer(tmp_path):
    """One step recorded both ways, as ``rlpulse.record_rollouts`` + ``observe_rollouts`` do."""
    exp = Exporter(port=0, addr="127.0.0.1", run_id="ex-run", gpu=False, host=False).start()
    rec = Recorder("ex-run", data_dir=tmp_path, sampling=SamplingConfig(per_step=64, seed=0))
    rng = np.random.default_rng(0)
    n = 32
    ids = [f"s7-p{i // 4}-g{i % 4}" for i in range(n)]
    latency = rng.uniform(0.01, 40, n)
    tokens = rng.integers(8, 4000, n)
    rewards = rng.random(n)
    rec.record(
        rollout_ids=ids,
        step=7,
        responses=[f"answer {i}" for i in range(n)],
        rewards=rewards,
        lengths=tokens,
        metadata=[{"latency_seconds": float(x)} for x in latency],
    )
    exp.observe_rollouts(
        latency_seconds=latency, response_tokens=tokens, rewards=rewards, rollout_ids=ids
    )
    assert rec.flush(30)
    yield exp, tmp_path
    rec.close()
    exp.close()


def test_exemplar_ids_resolve_to_stored_rollouts(trainer):
    exp, data_dir = trainer
    exemplars = scrape_exemplars(exp.url)
    assert exemplars.get(LATENCY) and exemplars.get(LENGTH)
    srv = serve(data_dir)
    try:
        for rid, value in exemplars[LENGTH]:
            run, rec = find(rid, data_dir)
            assert run == "ex-run" and rec["length"] == value
            url = f"http://127.0.0.1:{srv.port}/rollout?id={quote(rid, safe='')}&run=ex-run"
            with urllib.request.urlopen(url, timeout=10) as r:
                assert json.loads(r.read())["rollout"]["length"] == value
    finally:
        srv.close()
    for rid, value in exemplars[LATENCY]:
        _, rec = find(rid, data_dir, "ex-run")
        assert rec["metadata"]["latency_seconds"] == pytest.approx(value)


def test_real_prometheus_stores_the_exemplars(trainer, tmp_path):
    exp, data_dir = trainer
    binary = shutil.which("prometheus")
    assert binary, "prometheus is required (apt-get install prometheus)"
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: rlpulse\n    static_configs: [{{targets: ['127.0.0.1:{exp.port}']}}]\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--enable-feature=exemplar-storage",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        found: list[dict] = []
        deadline = time.time() + 60
        while time.time() < deadline and not found:
            time.sleep(0.5)
            now = time.time()
            query = urlencode({"query": f"{LENGTH}_bucket", "start": now - 300, "end": now + 60})
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/v1/query_exemplars?{query}", timeout=5
                ) as r:
                    body = json.loads(r.read())
            except OSError:
                continue  # not up yet
            found = [e for series in body["data"] for e in series["exemplars"]]
        assert found, "Prometheus stored no exemplars"
        for e in found:
            run, rec = find(e["labels"]["rollout_id"], data_dir)
            assert run == "ex-run" and rec["length"] == float(e["value"])
    finally:
        proc.terminate()
        proc.wait(10)
