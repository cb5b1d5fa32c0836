"""The alert-quality document generator: classification and layout on a small replayed run."""

from __future__ import annotations

import json
from pathlib import Path

from rlpulse.replay import replay
from rlpulse.replay.quality import CORPUS, CORPUS_RUNS, DEMO_EXPECTED, Row, _e, markdown
from tests.corpus import needs_corpus


@needs_corpus
def test_every_corpus_log_has_a_judgement() -> None:
    logs = {
        str(p.relative_to(CORPUS))
        for p in CORPUS.glob("*/*")
        if p.name not in ("README.md", "sources.json")
    }
    assert {e.name for e in CORPUS_RUNS} == logs


def test_demo_expectations_name_real_alerts() -> None:
    from rlpulse.stack.config import Config
    from rlpulse.stack.rules import all_alerts

    names = {a.name for _area, a in all_alerts(Config())}
    for expected, noted in DEMO_EXPECTED.values():
        assert set(expected.split()) | set(noted.split()) <= names
    for e in CORPUS_RUNS:
        assert e.expected | e.noted <= names


def test_markdown_classifies_alerts(tmp_path: Path) -> None:
    log = tmp_path / "collapse.jsonl"
    rows = [{"step": s, "entropy": 1.0 if s < 30 else 0.001, "reward": 0.5} for s in range(70)]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = replay(log, framework="trl")
    as_tp = Row(
        "demo", _e("demo/collapse", "collapses", "RLEntropyCollapse RLTrainingStalled"), result
    )
    as_fp = Row("corpus", _e("x/healthy-run", "healthy"), result)
    text = markdown([as_tp, as_fp], 60)
    onset = as_tp.fired()[0][2]
    assert (
        f"| `collapse` | collapses | TP RLEntropyCollapse (critical @ {onset}, lead {69 - onset}) "
        "| RLTrainingStalled |" in text
    )
    assert f"| `healthy-run` | healthy | FP RLEntropyCollapse (critical @ {onset}, lead" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("| RLEntropyCollapse |"))
    assert f"collapse (critical @ {onset}, lead {69 - onset})" in line
    assert f"healthy-run (critical @ {onset})" in line
