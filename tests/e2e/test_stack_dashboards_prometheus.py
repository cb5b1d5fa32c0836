"""Every panel query of every generated dashboard, run against a real Prometheus over five
runs: one that finished, one that crashed (``end("crashed")``), one killed with SIGKILL (no
end recorded) and two still running, one of them logging a step every 2.5 s (slower than it is
scraped: its by-step lines have one point per logged step).

Real exporters (fake NVML at the pynvml boundary) are fed a value for every catalog metric
through the public API while the real ``prometheus`` binary scrapes them each second and
evaluates the generated rules (panels read the recording rules; their rate window is 4 s here
so an idle window is reached within the test). The running run times overlapping phases (its
phases add up to about twice the wall time) and, half-way, stops observing histograms and
counting (its quantile and ratio windows empty) while it keeps logging steps. Then each panel
query, with Grafana's variables expanded, is run as Grafana runs it (a range query, or an
instant one for tables and the outcome) and its values are checked: accepted, data for some
run, no NaN, no phase share above 100 %; and what a reader of the run status sees: the outcome
of each run, the time since the last log still counting after the kill, the finished runs'
metadata and hyperparameters in the comparison tables, the Run variable's default.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from harness.fake_nvml import FakeGpu, FakeNvml
from harness.stackutil import api, free_port, query, server, wait_for, wait_for_data
from rlpulse import catalog
from rlpulse.detect import band
from rlpulse.runtime.exporter import Exporter
from rlpulse.stack import dashboards, panels, rules
from rlpulse.stack.config import Config, Duration, seconds
from rlpulse.stack.dashboards import training

FINISHED, CRASHED, KILLED, RUNNING = "dash-finished", "dash-crashed", "dash-killed", "dash-run"
SLOW = "dash-slow"  # running, one step every SLOW_PERIOD s: slower than it is scraped
SLOW_PERIOD = 2.5
RUNS = (FINISHED, CRASHED, KILLED, RUNNING, SLOW)
LEARNING_RATES = {FINISHED: 1e-3, RUNNING: 5e-3}
FIRING_RULE = "DashboardTestFiring"  # an alert firing for the running run (the oldest start)
END_RULE = "DashboardTestEndFiring"  # firing for the finished run until its series go
RATE = "4s"  # the rules' rate window and $__rate_interval
RANGE = "10m"  # $__range: the whole test
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
SELF_MADE = {
    "rl_run_info",
    "rl_unmapped_metric",
    "rl_step",
    "rl_last_step_timestamp_seconds",
    "rl_exporter_start_timestamp_seconds",  # the Run variable's order
    "rl_run_outcome",  # how each run ends is the test's
    "rl_run_finished_timestamp_seconds",
}
SHARE_PANELS = (panels.PHASE_SHARE, panels.PHASE_BREAKDOWN)


def _feed(exp: Exporter, step: int, *, samples: bool = True) -> None:
    """One training step's worth of every catalog metric, through the public API; without
    ``samples``, gauges only (no histogram observation, no counter increment)."""
    for metric in catalog.CATALOG:
        if metric.name.startswith(COLLECTED) or metric.name in SELF_MADE:
            continue
        labels = {name: LABEL_VALUES.get(name, "x") for name in metric.labels}
        if metric.type == "counter" and samples:
            exp.count(metric.name, 3.0, **labels)
        elif metric.type == "gauge":
            exp.set(metric.name, 0.5 + 0.01 * step, **labels)
        elif metric.type == "histogram" and samples:
            exp.observe(metric.name, [0.2, 1.5, 40.0, 300.0], **labels)
    exp.set(catalog.get("rl_eval_score").name, 0.5, benchmark="success", split="eval")
    lr = LEARNING_RATES.get(exp.run_id)
    if lr is not None:
        exp.set(catalog.get("rl_hyperparameter").name, lr, name="learning_rate")
    for component in ("format", "accuracy", "length"):  # past label_cap: counted as overflow
        exp.set(catalog.get("rl_reward_component_mean").name, 1.0, component=component)
    exp.log({"an_unmapped_key": 1.0, "loss": "not a number"}, step=step)


# a reference band over every step the runs log (the band panels draw it under the run)
BAND = band.Band(
    ("ref-a", "ref-b"),
    band.TOLERANCE,
    {
        name: band.Curve(metric, "below", (0.0, 1e6), (0.4, 0.4), (0.9, 0.9))
        for name, metric in (
            ("episode_return", "rl_episode_return"),
            ("reward_mean", "rl_reward_mean"),
        )
    },
)


def _exporter(run_id: str, port: int = 0, reference_band: Path | None = None) -> Exporter:
    gpu = FakeGpu(util=80, throttle=0x20, ecc={0: 1, 1: 0})
    return Exporter(
        port=port,
        run_id=run_id,
        nvml=FakeNvml([gpu]),
        host=True,
        collector_ttl=0.0,
        label_cap=2,
        reference_band=reference_band,
    )


class Trainer:
    """An in-process run fed on its own thread every ``period`` s until ``stop()``."""

    def __init__(
        self,
        run_id: str,
        *,
        nested_phases: bool = False,
        period: float = 0.2,
        reference_band: Path | None = None,
    ) -> None:
        self.period = period
        self.exp = _exporter(run_id, reference_band=reference_band)
        self.exp.start()
        self.samples = True
        self._stop = threading.Event()
        self._nested = nested_phases
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        step = 0
        while not self._stop.is_set():
            _feed(self.exp, step, samples=self.samples)
            step += 1
            if self._nested:  # reward timed inside rollout: the phases overlap
                with self.exp.phase("rollout"), self.exp.phase("reward"):
                    self._stop.wait(self.period)
            else:
                with self.exp.phase("update"):
                    self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _killed_trainer(port: int) -> None:
    """The run that is killed: ``python -m tests.e2e.test_stack_dashboards_prometheus PORT``."""
    exp = _exporter(KILLED, port)
    exp.start()
    step = 0
    while True:
        _feed(exp, step)
        with exp.phase("update"):
            time.sleep(0.2)
        step += 1


@dataclasses.dataclass
class Stack:
    url: str
    start: float  # before the first scrape
    end: float = 0.0  # once every run is in its final state


def _config() -> Config:
    base = Config()
    return dataclasses.replace(base, windows=dataclasses.replace(base.windows, rate=Duration(RATE)))


def _until(url: str, expr: str, what: str, timeout: float = 90) -> None:
    wait_for(lambda: query(url, expr)["data"]["result"], timeout, what, every=0.5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp_path = tmp_path_factory.mktemp("prometheus")
    binary = shutil.which("prometheus")
    assert binary, "prometheus is required (apt-get install prometheus)"
    reference = tmp_path / "band.json"
    reference.write_text(BAND.to_json())
    running = Trainer(RUNNING, nested_phases=True, reference_band=reference)  # the oldest run
    time.sleep(0.05)
    finished, crashed = Trainer(FINISHED), Trainer(CRASHED)
    slow = Trainer(SLOW, period=SLOW_PERIOD)
    killed_port = free_port()
    killed = subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.test_stack_dashboards_prometheus", str(killed_port)],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    cfg = _config()
    rule_files = rules.render(cfg)
    rule_files["firing.yml"] = json.dumps(
        {
            "groups": [
                {
                    "name": "dashboard-test",
                    "rules": [
                        {
                            "alert": FIRING_RULE,
                            "expr": f'max by (job, run_id) (rl_run_info{{run_id="{RUNNING}"}})',
                        },
                        {
                            "alert": END_RULE,
                            "expr": f'max by (job, run_id) (rl_run_info{{run_id="{FINISHED}"}})',
                            "labels": {"severity": "critical"},
                        },
                    ],
                }
            ]
        }
    )
    for rel, text in rule_files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    ports = [t.exp.port for t in (running, finished, crashed, slow)] + [killed_port]
    targets = [f"127.0.0.1:{port}" for port in ports]
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        f"rule_files: {[str(tmp_path / rel) for rel in rule_files]}\n"
        "scrape_configs:\n"
        f"  - job_name: {cfg.scrape.job_name}\n    static_configs: [{{targets: {targets}}}]\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [
        binary,
        f"--config.file={tmp_path / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--enable-feature=exemplar-storage",
    ]
    start = time.time()
    try:
        with server(argv, f"{url}/-/ready"):
            counter = catalog.get("rl_samples_total").name
            for run in RUNS:  # every run scraped with data, recorded and rated
                _until(url, f'rate({counter}{{run_id="{run}"}}[{RATE}]) > 0', run)
                _until(url, f'{rules.LENGTH_QUANTILES["p50"]}{{run_id="{run}"}}', run)
            finished.stop()
            assert finished.exp.end("finished", wait=10)
            crashed.stop()
            assert crashed.exp.end("crashed", reason="RuntimeError", wait=10)
            killed.send_signal(signal.SIGKILL)
            killed.wait(10)
            _until(url, f'up{{instance="127.0.0.1:{killed_port}"}} == 0', "the kill")
            running.samples = False  # its histogram and counter windows empty out
            time.sleep(2 * seconds(RATE) + 2)
            _until(url, f'ALERTS{{alertname="{FIRING_RULE}",alertstate="firing"}}', "alert")
            yield Stack(url, start, time.time())
    finally:
        for trainer in (running, slow, finished, crashed):
            trainer.stop()
            trainer.exp.close()
        if killed.poll() is None:
            killed.kill()
            killed.wait(10)


def _expand(expr: str, run: str) -> str:
    return dashboards.expand(expr, {"run_id": run}, rate_interval=RATE, interval="1s", range_=RANGE)


def _range(url: str, expr: str, start: float, end: float) -> dict[str, Any]:
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1"}
    try:
        return dict(api(f"{url}/api/v1/query_range?{urlencode(params)}"))
    except urllib.error.HTTPError as exc:
        return dict(json.loads(exc.read()))


def _values(body: dict[str, Any]) -> Iterator[tuple[dict[str, str], float, float]]:
    """(labels, time, value) of every sample of a query reply, range or instant."""
    for series in body["data"]["result"]:
        for t, v in series.get("values") or [series["value"]]:
            yield series["metric"], float(t), float(v)


@dataclasses.dataclass
class Answer:
    dashboard: str
    panel: dict[str, Any]
    target: dict[str, Any]
    run: str
    expr: str
    body: dict[str, Any]


def _single_run(model: dict[str, Any]) -> bool:
    run = next(v for v in model["templating"]["list"] if v["name"] == "run_id")
    return not run.get("multi")


@pytest.fixture(scope="module")
def answers(stack: Stack) -> list[Answer]:
    """Every panel query of every dashboard as Grafana would run it: per run on the one-run
    dashboards, for all runs on the others."""
    out = []
    for name, model in dashboards.dashboards(Config()).items():
        for panel in dashboards.panels(model):
            for target in panel.get("targets", []):
                for run in RUNS if _single_run(model) else (".*",):
                    expr = _expand(target["expr"], run)
                    if target.get("instant"):
                        body = query(stack.url, expr, stack.end)
                    else:
                        body = _range(stack.url, expr, stack.start, stack.end)
                    out.append(Answer(name, panel, target, run, expr, body))
    return out


def test_every_panel_query_is_accepted_and_returns_data(answers: list[Answer]) -> None:
    refused = [(a.panel["title"], a.expr, a.body.get("error")) for a in answers]
    refused = [r for a, r in zip(answers, refused, strict=True) if a.body["status"] != "success"]
    assert not refused, refused
    with_data = {
        (a.dashboard, a.panel["title"], a.target["refId"])
        for a in answers
        if a.body["data"]["result"]
    }
    empty = {
        (a.dashboard, a.panel["title"], a.target["refId"], a.target["expr"])
        for a in answers
        if (a.dashboard, a.panel["title"], a.target["refId"]) not in with_data
    }
    assert not empty, sorted(empty)


def test_no_panel_value_is_nan(answers: list[Answer]) -> None:
    """A run that stops producing samples leaves gaps (quantiles, ratios), never NaN; the
    finished, crashed and killed runs neither."""
    nan = {
        (a.panel["title"], a.target["refId"], a.run)
        for a in answers
        for _, _, value in _values(a.body)
        if math.isnan(value)
    }
    assert not nan, sorted(nan)


def test_phase_shares_never_exceed_the_whole(answers: list[Answer]) -> None:
    """The running run's phases overlap (about 200 % of wall time): each is then its share
    of the timed total, and the stack of a panel's series stays within 100 %."""
    stacks: dict[tuple[str, str, str], dict[float, float]] = {}
    for a in answers:
        if a.panel["title"] in SHARE_PANELS:
            stacked = stacks.setdefault((a.dashboard, a.panel["title"], a.run), {})
            for _, t, value in _values(a.body):
                assert 0 <= value <= 1 + 1e-9, (a.dashboard, a.panel["title"], a.run, value)
                stacked[t] = stacked.get(t, 0.0) + value
    assert len(stacks) == 2 * len(RUNS) + 1  # training and classic per run, system for all
    for key, stacked in stacks.items():
        over = {t: total for t, total in stacked.items() if total > 1 + 1e-9}
        assert not over, (key, over)
    overlap = [a for a in answers if a.panel["title"] == panels.PHASE_SHARE and a.run == RUNNING]
    shares = {labels.get("phase") for a in overlap for labels, _, _ in _values(a.body)}
    assert {"rollout", "reward"} <= shares


def test_legends_name_labels_every_series_has(answers: list[Answer]) -> None:
    """No legend entry with an empty label: each ``{{label}}`` a legend names is set on every
    series the query returns (a counter before its first increment reads ``none``)."""
    missing = set()
    for a in answers:
        for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", a.target.get("legendFormat", "")):
            if label == "reason":  # rl_run_outcome's reason is empty for a finished run
                continue
            for series in a.body["data"]["result"]:
                if not series["metric"].get(label):
                    missing.add((a.panel["title"], a.target["refId"], label))
    assert not missing, sorted(missing)


def test_by_step_lines_advance_one_step_per_point(answers: list[Answer]) -> None:
    """A by-step line has a point only where the run's step advanced since the one before,
    so its x (the step query) strictly increases, as a trend panel needs, and each value has
    its step at the same instant (the two queries merge row by row)."""
    checked = 0
    for a in answers:
        if a.panel["type"] != "trend":
            continue
        step, value = (b for b in answers if b.panel is a.panel and b.run == a.run)
        if a is not step:
            continue
        times: dict[tuple[str, str], list[float]] = {}
        for labels, _, v in _values(step.body):
            key = (labels["run_id"], labels["series"])
            line = times.setdefault(key, [])
            assert not line or v > line[-1], (a.panel["title"], key, v, line[-3:])
            line.append(v)
            checked += 1
        if a.run == SLOW:  # scraped about SLOW_PERIOD times per step, one point per step
            assert all(len(line) >= 3 for line in times.values()), (a.panel["title"], times)
        instants = [
            {(m["run_id"], m["series"], t) for m, t, _ in _values(b.body)} for b in (step, value)
        ]
        assert instants[0] == instants[1], a.panel["title"]
    assert checked


def _outcome(stack: Stack, run: str) -> list[str]:
    expr = _expand(training.outcome_expr(), run)
    body = query(stack.url, expr, stack.end)
    return sorted(series["metric"]["outcome"] for series in body["data"]["result"])


def test_outcome_of_each_run(stack: Stack) -> None:
    assert _outcome(stack, FINISHED) == ["finished"]
    assert _outcome(stack, CRASHED) == ["crashed"]
    assert _outcome(stack, KILLED) == [training.DIED]
    assert _outcome(stack, RUNNING) == [training.RUNNING]


def test_the_alert_firing_when_a_run_ended_stays_on_its_outcome(stack: Stack) -> None:
    """Issue 23.5: the finished run's alert resolved with its series, and the Outcome stat
    still names it (the run's end did not cure it); a running run lists none."""
    model = dashboards.dashboards(Config())["rl-training.json"]
    (at_end,) = [
        e for t, e in dashboards.panel_queries(model) if t == "Outcome" and "firing_at_end" in e
    ]
    live = f'ALERTS{{alertname="{END_RULE}",alertstate="firing"}}'
    assert not query(stack.url, live, stack.end)["data"]["result"]
    ended = {}
    for run in (FINISHED, RUNNING):
        body = query(stack.url, _expand(at_end, run), stack.end)
        ended[run] = {
            (r["metric"]["alertname"], r["metric"]["severity"]) for r in body["data"]["result"]
        }
    assert (END_RULE, "critical") in ended[FINISHED]
    assert not ended[RUNNING]  # its alert fires now: it has not ended


def _panel_expr(dashboard: str, title: str) -> str:
    model = dashboards.dashboards(Config())[dashboard]
    (expr,) = [e for t, e in dashboards.panel_queries(model) if t == title]
    return expr


def test_since_last_log_keeps_counting_after_a_kill(stack: Stack) -> None:
    expr = _expand(_panel_expr("rl-training.json", "Since last log"), KILLED)
    later = stack.end
    earlier = later - 5
    (now,) = [v for _, _, v in _values(query(stack.url, expr, later))]
    (before,) = [v for _, _, v in _values(query(stack.url, expr, earlier))]
    assert now - before == pytest.approx(5, abs=0.01)
    assert now > 5  # the kill was more than the wait for the idle windows ago


@pytest.mark.parametrize("run", [FINISHED, CRASHED])
def test_since_last_log_stops_at_a_run_that_said_it_ended(stack: Stack, run: str) -> None:
    """An ended run is not a hanging one: the clock stops at its end (no red stat for it)."""
    expr = _expand(_panel_expr("rl-training.json", "Since last log"), run)
    (now,) = [v for _, _, v in _values(query(stack.url, expr, stack.end))]
    (before,) = [v for _, _, v in _values(query(stack.url, expr, stack.end - 5))]
    assert now == before
    assert 0 <= now < 5  # it logged until shortly before its end


def test_comparison_tables_show_finished_runs(stack: Stack) -> None:
    runs = query(stack.url, _expand(_panel_expr("rl-comparison.json", "Runs"), ".*"), stack.end)
    assert {s["metric"]["run_id"] for s in runs["data"]["result"]} == set(RUNS)
    expr = _expand(_panel_expr("rl-comparison.json", "Hyperparameters"), ".*")
    hparams = query(stack.url, expr, stack.end)["data"]["result"]
    lrs = {
        s["metric"]["run_id"]: float(s["value"][1])
        for s in hparams
        if s["metric"]["name"] == "learning_rate"
    }
    assert lrs == LEARNING_RATES


def test_the_run_variable_opens_on_the_firing_then_newest_run(stack: Stack) -> None:
    """Options keep the query's order and the first is the default: the runs with a firing
    alert first (here the running run, the oldest, has one of the test's own), each group
    newest start first."""
    firing = {
        s["metric"]["run_id"]
        for s in query(stack.url, 'ALERTS{alertstate="firing"}', stack.end)["data"]["result"]
    }
    assert RUNNING in firing
    starts = query(
        stack.url,
        f"max by (run_id) (last_over_time(rl_exporter_start_timestamp_seconds[{RANGE}]))",
        stack.end,
    )["data"]["result"]
    start = {s["metric"]["run_id"]: float(s["value"][1]) for s in starts}
    assert set(start) == set(RUNS) and min(start, key=start.__getitem__) == RUNNING
    expected = sorted(RUNS, key=lambda run: (run in firing, start[run]), reverse=True)
    for model in dashboards.dashboards(Config()).values():
        if not _single_run(model):
            continue
        variable = next(v for v in model["templating"]["list"] if v["name"] == "run_id")
        inner = variable["query"].removeprefix("query_result(")[:-1]
        body = query(stack.url, _expand(inner, ".*"), stack.end)
        texts = [  # as Grafana lists a query_result: {labels} VALUE TIMESTAMP
            '{{run_id="{}"}} {} {}'.format(s["metric"]["run_id"], *reversed(s["value"]))
            for s in body["data"]["result"]
        ]
        pattern = re.compile(variable["regex"].strip("/"))
        order = [pattern.search(text).group(1) for text in texts]  # type: ignore[union-attr]
        assert order == expected, (order, firing)


def test_every_variable_lists_values(stack: Stack) -> None:
    """Each ``label_values(selector, label)`` variable finds series carrying its label; each
    ``query_result(expr)`` one (the visible step range) a value its regex reads as a step."""
    wait_for_data(stack.url, catalog.get("rl_gpu_utilization_ratio").name)
    for model in dashboards.dashboards(Config()).values():
        for var in model["templating"]["list"]:
            if var["type"] != "query" or (var["name"] == "run_id" and _single_run(model)):
                continue
            if var["query"].startswith("query_result("):
                expr = _expand(var["query"][len("query_result(") : -1], RUNNING)
                [sample] = query(stack.url, expr, stack.end)["data"]["result"]
                text = f"{{}} {sample['value'][1]} {sample['value'][0]}"  # as Grafana lists it
                assert re.search(var["regex"].strip("/"), text), (var["name"], text)
                continue
            selector, label = var["query"].removeprefix("label_values(")[:-1].rsplit(", ", 1)
            result = query(stack.url, _expand(selector, RUNNING))
            values = {r["metric"].get(label) for r in result["data"]["result"]} - {None}
            assert values, f"{model['title']}: variable {var['name']} lists nothing"


if __name__ == "__main__":
    _killed_trainer(int(sys.argv[1]))
