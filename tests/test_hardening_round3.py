"""Break-test regressions, round 3 (issue 27): each test fails on the code before the fix."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpulse.stack import config, rules

# ---- 9: label values inside the queries annotations run ----------------------------------------

EVIL = 'evil"} or rl_run_info{run_id="victim'
QUOTED = 'a"b'


def _series(metric: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in labels.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def _annotations(tmp_path: Path, run_id: str, exp: dict[str, str]) -> subprocess.CompletedProcess:
    notes = {"run_info": rules.RUN_METADATA, "last_good": rules.last_good("RLX")}
    group = {"name": "g", "rules": [{"alert": "RLX", "expr": "x > 0", "annotations": notes}]}
    (tmp_path / "r.yml").write_text(yaml.safe_dump({"groups": [group]}))
    victim = {"job": "j", "run_id": "victim"}
    series = [
        _series("rl_run_info", {**victim, "model": "secret", "git_sha": "s"}, "1x5"),
        _series("rl_last_good_step", {**victim, "alertname": "RLX"}, "7x5"),
        _series("rl_run_info", {"job": "j", "run_id": QUOTED, "model": "m", "git_sha": "g"}, "1x5"),
        _series("x", {"job": "j", "run_id": run_id}, "1x5"),
    ]
    expected = {"exp_labels": {"job": "j", "run_id": run_id}, "exp_annotations": exp}
    case = {"eval_time": "2m", "alertname": "RLX", "exp_alerts": [expected]}
    test = {
        "rule_files": ["r.yml"],
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": [case]}],
    }
    (tmp_path / "t.yml").write_text(yaml.safe_dump(test))
    cmd = ["promtool", "test", "rules", "t.yml"]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("run_id", "exp"),
    [
        (EVIL, {"run_info": "", "last_good": ""}),
        (QUOTED, {"run_info": "model=m git_sha=g framework= owner=", "last_good": ""}),
    ],
    ids=["injection", "plain-quote"],
)
def test_a_run_id_cannot_rewrite_the_queries_of_its_annotations(
    tmp_path: Path, run_id: str, exp: dict[str, str]
) -> None:
    done = _annotations(tmp_path, run_id, exp)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "doc",
    [
        {"scrape": {"static_targets": ['x:1/{{ printf "%s" "y" }}']}},
        {"scrape": {"static_targets": ["127.0.0.1:9400", "a b:1"]}},
        {"scrape": {"alertmanagers": ["{{ . }}:9093"]}},
    ],
)
def test_host_ports_that_reach_templates_are_refused_naming_the_key(doc: dict[str, Any]) -> None:
    (section,) = doc["scrape"]
    with pytest.raises(
        config.ConfigError, match=rf"scrape\.{section}\[\d\]: .* is not a host:port"
    ):
        config.from_dict(doc)
