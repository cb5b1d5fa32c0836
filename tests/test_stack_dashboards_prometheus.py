"""Every panel query of every generated dashboard, run against a real Prometheus.

A real exporter (fake NVML at the pynvml boundary, real host readings) is fed a value for every
catalog metric through the public API while the real ``prometheus`` binary scrapes it each
second and evaluates the generated rules (panels read the recording rules); then each panel
query, with Grafana's variables expanded, must be accepted and return data.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Iterator

import pytest

from rlpulse import catalog
from rlpulse.exporter import Exporter
from rlpulse.stack import dashboards, rules
from rlpulse.stack.config import Config
from tests.fake_nvml import FakeGpu, FakeNvml
from tests.stackutil import free_port, query, server, wait_for_data

RUN = "dash-run"
# label values used for every catalog label a test series needs
LABEL_VALUES = {
    "split": "eval",
    "bound": "any",
    "network": "policy",
    "phase": "rollout",
    "name": "exploration_rate",
    "benchmark": "episode_return",
    "unit": "env_steps",
}
# series the exporter's collectors and bookkeeping produce themselves
COLLECTED = ("rl_gpu_", "rl_host_", "rl_process_", "rlpulse_")
SELF_MADE = {"rl_run_info", "rl_unmapped_metric", "rl_step", "rl_last_step_timestamp_seconds"}


def _feed(exp: Exporter, step: int) -> None:
    """One training step's worth of every catalog metric, through the public API."""
    for metric in catalog.CATALOG:
        if metric.name.startswith(COLLECTED) or metric.name in SELF_MADE:
            continue
        labels = {name: LABEL_VALUES.get(name, "x") for name in metric.labels}
        if metric.type == "counter":
            exp.count(metric.name, 3.0, **labels)
        elif metric.type == "gauge":
            exp.set(metric.name, 0.5 + 0.01 * step, **labels)
        elif metric.type == "histogram":
            exp.observe(metric.name, [0.2, 1.5, 40.0, 300.0], **labels)
    exp.set(catalog.get("rl_eval_score").name, 0.5, benchmark="success", split="eval")
    for component in ("format", "accuracy", "length"):  # past label_cap: counted as overflow
        exp.set(catalog.get("rl_reward_component_mean").name, 1.0, component=component)
    with exp.phase("update"):
        pass
    exp.log({"an_unmapped_key": 1.0, "loss": "not a number"}, step=step)


@pytest.fixture(scope="module")
def trainer() -> Iterator[Exporter]:
    """An exporter fed every catalog metric a few times a second until the test ends."""
    gpu = FakeGpu(util=80, throttle=0x20, ecc={0: 1, 1: 0})
    exp = Exporter(
        port=0, run_id=RUN, nvml=FakeNvml([gpu]), host=True, collector_ttl=0.0, label_cap=2
    )
    exp.start()
    stop = threading.Event()

    def loop() -> None:
        step = 0
        while not stop.is_set():
            _feed(exp, step)
            gpu.ecc[0] += 1
            step += 1
            stop.wait(0.2)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield exp
    stop.set()
    thread.join(5)
    exp.close()


@pytest.fixture(scope="module")
def prometheus(trainer: Exporter, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus scraping the trainer every second; yields its base URL."""
    tmp_path = tmp_path_factory.mktemp("prometheus")
    binary = shutil.which("prometheus")
    assert binary, "prometheus is required (apt-get install prometheus)"
    config = tmp_path / "prometheus.yml"
    job = Config().scrape.job_name
    rule_files = rules.render(Config())  # the panels read the recording rules too
    for rel, text in rule_files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        f"rule_files: {[str(tmp_path / rel) for rel in rule_files]}\n"
        "scrape_configs:\n"
        f"  - job_name: {job}\n    static_configs: [{{targets: ['127.0.0.1:{trainer.port}']}}]\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--enable-feature=exemplar-storage",
    ]
    with server(argv, f"{url}/-/ready"):
        yield url


def test_every_panel_query_returns_data(prometheus: str) -> None:
    counter = catalog.get("rl_samples_total").name
    wait_for_data(prometheus, f"rate({counter}[4s]) > 0")  # at least two scrapes of a rate
    queries = [
        (name, title, dashboards.expand(expr, {"run_id": RUN}, rate_interval="4s"))
        for name, model in dashboards.dashboards(Config()).items()
        for title, expr in dashboards.panel_queries(model)
    ]
    refused = [
        (name, title, expanded, body.get("error"))
        for name, title, expanded in queries
        if (body := query(prometheus, expanded))["status"] != "success"
    ]
    assert not refused, refused
    # each rule group evaluates on its own 1 s tick: give every recorded series a few rounds
    deadline = time.monotonic() + 30
    empty = queries
    while empty and time.monotonic() < deadline:
        empty = [q for q in empty if not query(prometheus, q[2])["data"]["result"]]
        time.sleep(0.5 if empty else 0)
    assert not empty, empty


def test_every_variable_lists_values(prometheus: str) -> None:
    """Each ``label_values(selector, label)`` variable finds series carrying its label; each
    ``query_result(expr)`` one (the visible step range) a value its regex reads as a step."""
    wait_for_data(prometheus, catalog.get("rl_gpu_utilization_ratio").name)
    for model in dashboards.dashboards(Config()).values():
        for var in model["templating"]["list"]:
            if var["type"] != "query":
                continue
            if var["query"].startswith("query_result("):
                expr = dashboards.expand(var["query"][len("query_result(") : -1], {"run_id": RUN})
                [sample] = query(prometheus, expr)["data"]["result"]
                text = f"{{}} {sample['value'][1]} {sample['value'][0]}"  # as Grafana lists it
                assert re.search(var["regex"].strip("/"), text), (var["name"], text)
                continue
            selector, label = var["query"].removeprefix("label_values(")[:-1].rsplit(", ", 1)
            result = query(prometheus, dashboards.expand(selector, {"run_id": RUN}))
            values = {r["metric"].get(label) for r in result["data"]["result"]} - {None}
            assert values, f"{model['title']}: variable {var['name']} lists nothing"
