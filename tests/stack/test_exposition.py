"""The fast renderer: same content as prometheus_client's, valid for promtool and strict parsers."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from harness.fake_nvml import FakeGpu, FakeNvml
from rlpulse import catalog
from rlpulse.runtime.exporter import Exporter
from rlpulse.runtime.exposition import Renderer, format_le, format_value, header
from rlpulse.runtime.ingest import SELF_PREFIX
from tests.conftest import promtool_check_metrics

ODD_LABEL = 'quote " backslash \\ newline \n unicode é✓'

# prometheus_client's OpenMetrics parser cannot read \" in an exemplar (Prometheus can: see
# tests/stack/test_http.py), so these ids stop at a backslash
EXEMPLARS = ["r-1", "r 2 é✓", "r\\3"]

Sample = tuple[str, frozenset[tuple[str, str]]]


def _samples(text: str, openmetrics: bool = False) -> dict[Sample, tuple[str, Any]]:
    """{(name, labels): (repr(value), exemplar)} as prometheus_client's parsers read a scrape."""
    parse = parse_openmetrics if openmetrics else parse_text
    out = {}
    for fam in parse(text):
        for s in fam.samples:
            ex = s.exemplar and (s.exemplar.labels, s.exemplar.value, s.exemplar.timestamp)
            out[(s.name, frozenset(s.labels.items()))] = (repr(float(s.value)), ex)
    return out


def _every_metric(exp: Exporter) -> None:
    """One series of every catalog metric, exemplars on histograms, odd label values.

    The exporter's own ``rlpulse_*`` metrics are not writable: a dropped value and an
    over-long label value make two of them appear."""
    for m in catalog.CATALOG:
        if m.name.startswith(SELF_PREFIX):
            continue
        labels = {n: f"{n}-{ODD_LABEL}" for n in m.labels}
        if m.type == "histogram":
            exp.observe(m.name, [0.1, 5.0, 1e9], exemplars=EXEMPLARS, **labels)
        elif m.type == "gauge":
            exp.set(m.name, 0.25, **labels)
        elif m.type == "counter":
            exp.count(m.name, 3, **labels)
    exp.log({"rl_entropy": math.nan, "rl_loss": math.inf, "rl_policy_loss": -math.inf}, step=7)
    exp.log({"rl_value_loss": 12})  # an int stays exact
    exp.log({"rl_entropy": "not a number"})  # a self-metric: rlpulse_dropped_values_total
    exp.count("rl_tool_calls_total", tool="t" * 300)  # rlpulse_label_overflow_total{label="tool"}


def _exp(**kwargs: Any) -> Exporter:
    kwargs = {"gpu": False, "host": False, "process": False, **kwargs}
    kwargs.setdefault("label_cap", 1000)
    return Exporter(port=0, run_id=f"run {ODD_LABEL}", **kwargs)


@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
def test_same_content_as_prometheus_client(openmetrics: bool) -> None:
    nvml = FakeNvml([FakeGpu(), FakeGpu(uuid="GPU-1", name=ODD_LABEL)])
    exp = _exp(gpu=True, host=True, process=True, nvml=nvml, collector_ttl=3600.0)
    _every_metric(exp)
    ours = Renderer(exp).render(openmetrics).decode()
    reference = (generate_openmetrics if openmetrics else generate_latest)(exp.registry).decode()
    assert _samples(ours, openmetrics) == _samples(reference, openmetrics)
    assert ours.count("# TYPE ") == reference.count("# TYPE ")  # families are not split


def test_every_catalog_metric_passes_promtool() -> None:
    exp = _exp()
    _every_metric(exp)
    text = Renderer(exp).render().decode()
    check = promtool_check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    names = {name for name, _ in _samples(text)}
    written = [m for m in catalog.CATALOG if not m.name.startswith(SELF_PREFIX)]
    assert {n for m in written for n in catalog.series_names(m)} <= names
    assert {"rlpulse_dropped_values_total", "rlpulse_label_overflow_total"} <= names


def test_openmetrics_units_types_exemplars_and_eof() -> None:
    exp = _exp()
    _every_metric(exp)
    text = Renderer(exp).render(openmetrics=True).decode()
    assert text.endswith("\n# EOF\n") and "\n\n" not in text
    units = {f.name: f.unit for f in parse_openmetrics(text)}  # the strict parser checks UNIT
    assert units[catalog.get("rl_rollout_duration_seconds").name] == "seconds"
    assert units[catalog.get("rl_prompt_tokens_total").family] == "tokens"
    assert units[catalog.get("rl_entropy").name] == ""
    assert "# TYPE rl_run info" in text and "# TYPE rl_env_steps counter" in text
    hist = catalog.get("rl_rollout_duration_seconds").name
    exemplars = {
        s.exemplar.labels["rollout_id"]
        for f in parse_openmetrics(text)
        if f.name == hist
        for s in f.samples
        if s.exemplar
    }
    assert exemplars == set(EXEMPLARS)


def test_header_lines() -> None:
    counter = catalog.get("rl_prompt_tokens_total")
    assert header(counter, openmetrics=False)[1] == f"# TYPE {counter.name} counter"
    assert header(counter, openmetrics=True)[1:] == [
        f"# TYPE {counter.family} counter",
        f"# UNIT {counter.family} tokens",
    ]
    info = catalog.get("rl_run_info")
    assert header(info, openmetrics=False)[1] == f"# TYPE {info.name} gauge"
    for metric in catalog.CATALOG:  # a UNIT only where the name ends in it (promtool's rule)
        for line in header(metric, openmetrics=True):
            if line.startswith("# UNIT"):
                _, _, name, unit = line.split()
                assert name.endswith("_" + unit)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (math.nan, "NaN"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (3, "3.0"),
        (-0.0, "-0.0"),
        (1e-7, "1e-07"),
        (2.5e20, "2.5e+20"),
        (10**400, "+Inf"),
        (-(10**400), "-Inf"),
    ],
)
def test_value_formatting(value: float, text: str) -> None:
    assert format_value(value) == text


def test_le_labels_match_client_libraries() -> None:
    assert [format_le(b) for b in (0.005, 1.0, 32768.0, 1e6)] == [
        "0.005",
        "1.0",
        "32768.0",
        "1e+06",
    ]


def test_out_of_range_int_renders_as_inf_not_an_error() -> None:
    exp = _exp()
    exp.log({"rl_value_loss": 1})  # binds the key: later ints take the fast path as they are
    exp.log({"rl_value_loss": 10**400})
    text = Renderer(exp).render().decode()
    assert promtool_check_metrics(text).returncode == 0
    assert _samples(text)[("rl_value_loss", _ident(exp))][0] == "inf"


def _ident(exp: Exporter, **labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(zip(catalog.IDENTITY_LABELS, exp.identity, strict=True)) | frozenset(
        labels.items()
    )


def test_series_bound_after_a_scrape_appear_in_the_next() -> None:
    exp = _exp()
    renderer = Renderer(exp)
    exp.set("rl_eval_score", 0.5, benchmark="gsm8k", split="eval")
    renderer.render()
    exp.set("rl_eval_score", 0.7, benchmark="math", split="eval")
    exp.set("rl_eval_score", 0.6, benchmark="gsm8k", split="eval")
    exp.observe("rl_phase_duration_seconds", [1.0], phase="rollout")
    got = _samples(renderer.render().decode())
    assert got[("rl_eval_score", _ident(exp, benchmark="gsm8k", split="eval"))][0] == "0.6"
    assert got[("rl_eval_score", _ident(exp, benchmark="math", split="eval"))][0] == "0.7"
    count = got[("rl_phase_duration_seconds_count", _ident(exp, phase="rollout"))]
    assert count[0] == "1.0"


def test_paced_render_is_the_same_text_and_pauses() -> None:
    exp = _exp()
    for i in range(3000):
        exp.set("rl_hyperparameter", float(i), name=f"h{i}")
    for step in range(50):
        exp.log({"rl_entropy": float(step)}, step=step)
    pauses = []
    paced = Renderer(exp).render(pause=lambda: pauses.append(1))
    assert paced == Renderer(exp).render()
    assert len(pauses) >= 3000 // 512 + 50


def test_render_while_the_trainer_logs() -> None:
    exp = _exp(label_cap=5000)
    renderer = Renderer(exp)
    errors: list[BaseException] = []

    def train() -> None:
        try:
            for step in range(3000):
                exp.log({"rl_entropy": step / 7, f"custom/key_{step % 50}": 1.0}, step)
                exp.set("rl_eval_score", 1.0, benchmark=f"b{step}", split="eval")
                exp.observe_rollouts(latency_seconds=[0.1], rollout_ids=[f"r{step}"])
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=train)
    thread.start()
    scrapes = 0
    while thread.is_alive() or scrapes < 4:
        openmetrics = bool(scrapes % 2)
        text = renderer.render(openmetrics).decode()
        _samples(text, openmetrics)  # parses: no torn lines, no split families
        scrapes += 1
    thread.join()
    assert not errors
    last = _samples(renderer.render().decode())
    # a tight loop may outrun the apply thread: what it cannot keep is counted, never blocks
    assert set(exp.dropped) <= {"queue_full"}
    assert last[("rl_step", _ident(exp))][0] == "2999.0" or exp.dropped


def test_identity_change_rebuilds_prefixes() -> None:
    exp = _exp()
    exp.set("rl_entropy", 1.0)
    renderer = Renderer(exp)
    renderer.render()
    exp.identity = ["other-run", "3", "0", "node-b"]
    text = renderer.render().decode()
    assert 'rl_entropy{run_id="other-run",rank="3",local_rank="0",node="node-b"} 1.0' in text
