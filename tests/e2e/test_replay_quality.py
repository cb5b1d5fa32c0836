"""The alert-quality report (scripts/alert_quality.py): judgements cover the corpus, and the
classification, delays and incidents are computed right on a small replayed run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from harness.corpus import CORPUS, needs_corpus
from rlpulse.offline.replay import replay
from rlpulse.stack.config import Config
from rlpulse.stack.docs import qualitydoc
from rlpulse.stack.rules import all_alerts

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "alert_quality.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("alert_quality", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["alert_quality"] = module
    spec.loader.exec_module(module)
    return module


aq = _load()
NAMES = {a.name for _area, a in all_alerts(Config())}


@needs_corpus
def test_every_corpus_log_has_a_judgement() -> None:
    logs = {
        str(p.relative_to(CORPUS))
        for p in CORPUS.glob("*/*")
        if p.name not in ("README.md", "sources.json")
    }
    judged = {j.name.partition("#")[0] for j in aq.CORPUS_RUNS}
    assert judged == logs


def test_judgements_name_real_alerts_and_failing_runs_say_when() -> None:
    for kind, expected, noted in aq.DEMO.values():
        assert set(expected.split()) | set(noted.split()) <= NAMES
        assert kind in ("failing", "healthy", "unclear")
    for j in aq.CORPUS_RUNS:
        assert j.expected | j.noted <= NAMES, j.name
        assert (j.kind == "failing") == (j.visible is not None), j.name
        assert j.kind != "failing" or j.expected, j.name


def test_report_classifies_and_measures(tmp_path: Path) -> None:
    log = tmp_path / "collapse.jsonl"
    rows = [
        {"step": s, "entropy": 1.0 if s < 30 else 0.001, "reward": 0.5, "completion_length": 20}
        for s in range(70)
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = replay(log, framework="trl")
    failing = aq.Row(
        aq._j("demo/collapse", "failing", "collapses", "RLEntropyCollapse", "", 30), result
    )
    healthy = aq.Row(aq._j("x/healthy-run", "healthy", "healthy"), result)
    onset = failing.first_relevant()
    assert onset is not None and 30 < onset <= 33
    assert failing.delay() == onset - 30  # one record per step
    assert failing.incidents() == ["RLEntropyCollapse"]
    assert failing.unstable() == []  # keeps firing to the end of the run
    text = qualitydoc.corpus_doc(aq.results([failing, healthy]))  # what generate renders
    assert f"TP RLEntropyCollapse (critical @ {onset})" in text
    assert f"FP RLEntropyCollapse (critical @ {onset})" in text
    assert "- Failing runs caught by a relevant alert: **1 of 1**." in text
    assert "- Critical alerts on healthy runs: **1** (healthy-run: RLEntropyCollapse)" in text


def test_a_cause_holds_back_its_consequences_in_the_incident_count() -> None:
    row = aq.Row(aq._j("x/y", "failing", "", "RLRewardHacking", "", 1), None)  # type: ignore[arg-type]
    row.fired = lambda: [  # type: ignore[method-assign]
        ("RLRewardHacking", "critical", 5),
        ("RLResponseLengthExplosion", "critical", 8),
        ("RLTruncationHigh", "critical", 8),
        ("RLEntropyCollapse", "critical", 9),
        ("RLKLReferenceHigh", "critical", 9),
    ]
    assert row.incidents() == ["RLRewardHacking", "RLKLReferenceHigh"]
