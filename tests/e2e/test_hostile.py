"""Hostile label values from user data (run ids, reward components, tool names, benchmark
names, logged keys): quotes, backslashes, newlines, braces, unicode, the longest value kept
(``MAX_LABEL_CHARS``; a longer one is cut, ``test_hardening_exporter.py``), PromQL- and
Go-template-looking text, control characters.

They cannot break the exposition (``promtool check metrics``, both text formats round-trip), a
real Prometheus ingests and returns them intact, every dashboard query with the run id
substituted as Grafana escapes it selects exactly that run (or, for a value Grafana cannot carry,
is refused — never another run's data), and the alert path (the generated rules in a real
Prometheus, the generated Alertmanager config, the PagerDuty payload) carries them verbatim.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from harness.stackutil import api, results, wait_for
from rlpulse import catalog
from rlpulse.runtime.exporter import Exporter
from rlpulse.runtime.store import MAX_LABEL_CHARS
from rlpulse.stack import dashboards
from rlpulse.stack.config import Config
from tests.conftest import promtool_check_metrics, quiet_exporter, scrape
from tests.stack.test_faults_support import LocalStack, local_stack

HOSTILE = {
    "quote": 'run "quoted"',
    "backslash": "C:\\runs\\new\\",
    "newline": "line1\nline2",
    "braces": "a}b{c",
    "unicode": "ünïcødé-漢字-🚀",
    "long": "L" * MAX_LABEL_CHARS,
    "promql": 'x"} or vector(1) or {a="',
    "regex": ".*|(a+)?[b]^$",
    "template": '{{ .CommonLabels }}{{ template "__subject" . }}{{ $labels.run_id }}',
    "control": "tab\tcr\rnul\x00end",
}
# Grafana writes a variable's value into the PromQL string literal without escaping a newline
# (see grafana_regex_escape): such a run id cannot be selected, and its queries are refused.
GRAFANA_CANNOT_CARRY = frozenset({"newline"})
NONFINITE_ALERT = "RLNonFiniteLoss"
TOOLS = catalog.get("rl_tool_calls_total").name
COMPONENT = catalog.get("rl_reward_component_mean").name
EVAL = catalog.get("rl_eval_score").name


def _feed(exp: Exporter, run: str) -> None:
    """Every path where user data becomes a label value, with the hostile set."""
    for v in HOSTILE.values():
        exp.count(TOOLS, 1, tool=v)
        exp.set(COMPONENT, 0.5, component=v)
        exp.set(EVAL, 0.7, benchmark=v, split=v)
        exp.log({v: 1.0})  # an unmapped key: rl_unmapped_metric{key=...}
        with exp.phase(v):
            pass
    exp.log({"rl_entropy": 1.0, "rl_loss": float("nan")}, step=1)


def _exporter(run: str) -> Exporter:
    exp = quiet_exporter(
        run,
        addr="127.0.0.1",
        config={v: 1.0 for v in HOSTILE.values()},  # rl_hyperparameter{name=...}
        metadata={"benchmark": run, "model": run},
    )
    _feed(exp, run)
    return exp


def _labels(families: Iterator[Any], name: str, label: str) -> set[str]:
    return {s.labels[label] for fam in families for s in fam.samples if s.name == name}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_exposition_keeps_hostile_values_intact(kind: str) -> None:
    run = HOSTILE[kind]
    exp = _exporter(run).start()
    try:
        text = scrape(exp.url)
        om = scrape(exp.url, accept="application/openmetrics-text; version=1.0.0")
    finally:
        exp.close()
    check = promtool_check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    values = set(HOSTILE.values())
    for parse, body in ((parse_text, text), (parse_om, om)):
        assert _labels(parse(body), "rl_run_info", "run_id") == {run}
        assert _labels(parse(body), TOOLS, "tool") == values
        assert _labels(parse(body), COMPONENT, "component") == values
        assert _labels(parse(body), EVAL, "benchmark") == values
        assert _labels(parse(body), "rl_unmapped_metric", "key") == values
        assert _labels(parse(body), "rl_hyperparameter", "name") == values
        assert _labels(parse(body), "rl_phase_duration_seconds_count", "phase") == values
        assert _labels(parse(body), "rl_run_info", "model") == {
            run[:256]
        }  # run metadata is clipped to 256 characters


def test_unencodable_text_cannot_break_the_exposition() -> None:
    lone = "half a pair \ud800"  # a lone surrogate: not encodable as UTF-8
    exp = Exporter(port=0, addr="127.0.0.1", run_id=lone, gpu=False, host=False).start()
    try:
        exp.count(TOOLS, 1, tool=lone)
        text = scrape(exp.url)
    finally:
        exp.close()
    check = promtool_check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    assert _labels(parse_text(text), TOOLS, "tool") == {"half a pair ?"}


def grafana_regex_escape(value: str) -> str:
    """What Grafana 11 writes for a multi-value/``All`` variable's value in ``=~"$var"``
    (``prometheusSpecialRegexEscape`` with the ``prometheusSpecialCharsInLabelValues`` toggle):
    backslashes and double quotes escaped for the string literal, RE2 metacharacters for the
    regex; nothing else (a newline stays raw)."""
    value = value.replace("\\", "\\\\\\\\").replace('"', '\\\\\\"')
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0), value)


def _post_query(base: str, expr: str) -> dict[str, Any]:
    data = urllib.parse.urlencode({"query": expr}).encode()  # Grafana POSTs its queries
    try:
        with urllib.request.urlopen(f"{base}/api/v1/query", data=data, timeout=10) as resp:
            return dict(json.load(resp))
    except urllib.error.HTTPError as exc:
        return dict(json.load(exc))


def _dashboard_queries() -> list[tuple[str, str]]:
    out = []
    for model in dashboards.dashboards(Config()).values():
        out += [(f"{model['title']}: {t}", e) for t, e in dashboards.panel_queries(model)]
        out += [
            (f"{model['title']}: {a['name']}", a["expr"])
            for a in model.get("annotations", {}).get("list", [])
            if a.get("expr")
        ]
    return out


@pytest.fixture(scope="module")
def hostile_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One exporter per hostile run id, scraped by the generated stack (fast preset)."""
    exporters = [_exporter(run).start() for run in HOSTILE.values()]
    try:
        targets = [f"127.0.0.1:{exp.port}" for exp in exporters]
        with local_stack(tmp_path_factory.mktemp("hostile-stack"), targets) as stack:
            prom = stack.url("prometheus")
            wait_for(lambda: len(results(prom, "rl_run_info")) == len(HOSTILE), 60, "every target")
            yield stack
    finally:
        for exp in exporters:
            exp.close()


def test_prometheus_returns_hostile_values_intact(hostile_stack: LocalStack) -> None:
    prom = hostile_stack.url("prometheus")
    runs = {r["metric"]["run_id"] for r in results(prom, "rl_run_info")}
    assert runs == set(HOSTILE.values())
    for run in HOSTILE.values():
        selector = json.dumps(run, ensure_ascii=False)  # a valid PromQL string literal
        tools = results(prom, f"{TOOLS}{{run_id={selector}}}")
        assert {r["metric"]["tool"] for r in tools} == set(HOSTILE.values())


def test_dashboard_queries_select_exactly_the_chosen_run(hostile_stack: LocalStack) -> None:
    prom = hostile_stack.url("prometheus")
    queries = _dashboard_queries()
    assert len(queries) > 50
    problems = []
    for kind, run in HOSTILE.items():
        variable = grafana_regex_escape(run)
        for title, expr in queries:
            body = _post_query(prom, dashboards.expand(expr, {"run_id": variable}))
            if kind in GRAFANA_CANNOT_CARRY:
                if body["status"] != "error":  # refused: an error panel, never wrong data
                    problems.append((kind, title, "answered"))
                continue
            if body["status"] != "success":
                problems.append((kind, title, body.get("error")))
                continue
            seen = {r["metric"].get("run_id") for r in body["data"]["result"]} - {None}
            if seen - {run}:
                problems.append((kind, title, "another run's series"))
    assert not problems, problems[:10]


def test_alert_templates_and_the_pagerduty_payload_carry_them_verbatim(
    hostile_stack: LocalStack,
) -> None:
    prom = hostile_stack.url("prometheus")

    def firing() -> list[dict[str, Any]] | None:
        alerts = api(f"{prom}/api/v1/alerts")["data"]["alerts"]
        mine = [a for a in alerts if a["labels"]["alertname"] == NONFINITE_ALERT]
        return (
            mine
            if len(mine) == len(HOSTILE) and all(a["state"] == "firing" for a in mine)
            else None
        )

    alerts = wait_for(firing, 60, f"{NONFINITE_ALERT} firing for every run")
    for alert in alerts:
        run = alert["labels"]["run_id"]
        assert f"of run {run} (rank 0) is not finite" in alert["annotations"]["description"]
    pages = wait_for(
        lambda: (lambda p: p if len(p) >= len(HOSTILE) else None)(
            hostile_stack.pages(NONFINITE_ALERT)
        ),
        60,
        "a page per run",
    )
    by_run = {p["payload"]["custom_details"]["run_id"]: p for p in pages}
    assert set(by_run) == set(HOSTILE.values())  # grouped per run, values intact
    for run, page in by_run.items():
        details = page["payload"]["custom_details"]
        assert f"of run {run} (rank 0) is not finite" in details["description"]
        summary = page["payload"]["summary"]
        assert len(summary) <= 1024  # PagerDuty's limit: Alertmanager truncates, never fails
        assert summary.startswith(f"{NONFINITE_ALERT} (run {run[:900]}")
