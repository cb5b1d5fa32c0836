"""The one alert shape (``rlpulse.stack.alerts.kit``): a declaration makes its config section,
its rules and its scenarios; every declared alert, step, threshold or the pipeline's own, is
one of them."""

from __future__ import annotations

import dataclasses
from typing import get_type_hints

import pytest

from rlpulse.stack.alerts import ALL, kit, meta
from rlpulse.stack.config import Config
from rlpulse.stack.knobs import Duration
from rlpulse.stack.query import Query

TIERED = kit.ThresholdAlert(
    name="RLExampleHigh",
    key="example_high",
    doc="An example.",
    settings={
        "for_": "5m",
        "warning": kit.Knob(0.5, "Warning above this."),
        "critical": kit.Knob(0.9, "Critical above this."),
        "window": kit.Knob("1h", "A duration of its own."),
    },
    severity="tiered",
    expr=lambda q, k: f"rl_example > $LEVEL unless rl_other[{k.window}]",
    summary="Example.",
    description="{{ $value }} (threshold $LEVEL).",
    level_text=kit.pct,
    runbook=kit.Runbook("Means.", "Panel.", ("Try.",)),
)


def test_a_declaration_makes_its_config_section_in_order_with_its_types() -> None:
    knobs = TIERED.knobs
    assert [f.name for f in dataclasses.fields(knobs)] == [
        "enabled",
        "for_",
        "warning",
        "critical",
        "window",
    ]
    assert knobs() == knobs(enabled=True, for_="5m", warning=0.5, critical=0.9, window="1h")
    hints = get_type_hints(knobs)
    assert (hints["for_"], hints["window"], hints["warning"]) == (Duration, Duration, float)
    assert knobs.__doc__ == "An example."
    # a new default of a knob every alert has keeps that knob's sentence
    for_ = next(f for f in dataclasses.fields(knobs) if f.name == "for_")
    assert for_.metadata["doc"] == "How long the condition must hold before firing."


def test_a_tiered_alert_is_a_rule_per_level_with_the_level_put_in() -> None:
    k = TIERED.knobs(warning=0.6)
    rules = list(TIERED.rules(Query(Config()), k))
    assert [(a.severity, a.expr, a.description, a.for_) for a in rules] == [
        ("warning", "rl_example > 0.6 unless rl_other[1h]", "{{ $value }} (threshold 60%).", "5m"),
        ("critical", "rl_example > 0.9 unless rl_other[1h]", "{{ $value }} (threshold 90%).", "5m"),
    ]


def test_a_knob_of_its_own_needs_its_sentence() -> None:
    with pytest.raises(TypeError, match="ratio: a knob of an alert's own is a Knob"):
        kit.knobs_class("RLExample", "An example.", {"ratio": 0.5})


def test_every_alert_is_one_declaration_with_a_unique_name_and_key() -> None:
    declared = [*ALL, *meta.DEFS]
    assert all(isinstance(d, kit.AlertDef) for d in declared)
    assert len({d.name for d in declared}) == len(declared)
    assert len({d.key for d in declared}) == len(declared)
    # its runbook is the one the runbooks page shows for its name
    assert all(list(d.runbooks) == [d.name] for d in declared)
