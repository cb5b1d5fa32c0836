"""The one alert shape (``rlpulse.stack.alerts.kit``): a declaration makes its config section,
its rules and its scenarios; every declared alert, step, threshold or the pipeline's own, is
one of them."""

from __future__ import annotations

import dataclasses
from typing import get_type_hints

import pytest

from rlpulse.stack.alerts import ALL, gpu, kit, meta
from rlpulse.stack.config import Config
from rlpulse.stack.knobs import Duration
from rlpulse.stack.query import Query

BY_KEY = {d.key: d for d in ALL}


def test_a_declaration_makes_its_config_section_in_order_with_its_types() -> None:
    knobs = BY_KEY["training_stalled"].knobs
    names = [f.name for f in dataclasses.fields(knobs)]
    assert names == ["enabled", "for_", "factor", "min_wait", "first_steps_wait"]
    hints = get_type_hints(knobs)
    assert (hints["for_"], hints["min_wait"], hints["factor"]) == (Duration, Duration, float)
    assert knobs().min_wait == "5m"
    assert knobs.__doc__ == (
        "No logged step for many of the run's own step intervals while the exporter is up."
    )
    # a new default of a knob every alert has ("for_": "5m") keeps that knob's sentence
    memory = BY_KEY["gpu_memory_full"].knobs
    for_ = next(f for f in dataclasses.fields(memory) if f.name == "for_")
    assert (for_.default, for_.metadata["doc"]) == (
        "5m",
        "How long the condition must hold before firing.",
    )


def test_a_tiered_alert_is_a_rule_per_level_with_the_level_put_in() -> None:
    d = BY_KEY["gpu_memory_full"]
    rules = list(d.rules(Query(Config()), d.knobs(warning=0.9)))
    assert [(a.severity, a.expr, a.for_) for a in rules] == [
        ("warning", f"{gpu.MEMORY_RATIO} > 0.9", "5m"),
        ("critical", f"{gpu.MEMORY_RATIO} > 0.99", "5m"),
    ]
    assert [a.description.rsplit("(threshold ", 1)[1] for a in rules] == ["90%).", "99%)."]


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
