"""Generated Prometheus rules: promtool check/test, catalog references, alert conventions.

The rule files are generated into a temporary folder from the source (the committed copy is
compared with the source by test_stack_generate). ``promtool test rules`` runs the scenario tests
of rlpulse.stack.ruletests: for every alert a case that fires it and a healthy run that fires
nothing.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from harness.stackutil import promtool, promtool_test_rules
from rlpulse import catalog
from rlpulse.stack import alerts as alert_defs
from rlpulse.stack import config, rules, ruletests, runbooks
from rlpulse.stack.deploy import prometheus

DEFAULT = config.Config()
FAST = config.fast()
REPO = Path(__file__).resolve().parents[2]


def _write(tmp: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text)


def _run(
    *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=timeout)


def _generated(tmp: Path, cfg: config.Config) -> Path:
    _write(tmp, {**prometheus.render(cfg), **rules.render(cfg), **ruletests.render(cfg)})
    return tmp / "prometheus"


@pytest.mark.parametrize("preset", ["default", "fast"])
def test_promtool_checks_config_and_rules(tmp_path: Path, preset: str) -> None:
    cfg = DEFAULT if preset == "default" else FAST
    out = _generated(tmp_path, cfg)
    run = _run(promtool(), "check", "config", str(out / "prometheus.yml"))
    assert run.returncode == 0, run.stdout + run.stderr
    # one file per area, and rules/meta.yml: the alerting pipeline's own (stack.alerts.meta)
    assert f"{len(rules.AREAS) + 1} rule files found" in run.stdout
    files = sorted(str(p) for p in (out / "rules").glob("*.yml"))
    assert len(files) == len(rules.AREAS) + 1
    run = _run(promtool(), "check", "rules", *files)
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_unit_tests_pass(tmp_path: Path) -> None:
    """Every area's scenario file, run in parallel (each takes several seconds)."""
    out = _generated(tmp_path, DEFAULT)
    promtool_test_rules(out, [f"tests/{area}.yml" for area in rules.AREAS])


def test_a_broken_threshold_fails_the_unit_tests(tmp_path: Path) -> None:
    """The scenarios really check the rules: a collapse threshold of 0.01 misses the collapse."""
    out = _generated(tmp_path, DEFAULT)
    rl = out / "rules" / "rl.yml"
    text = rl.read_text()
    broken = text.replace('"entropy_ratio_to_peak"} < 0.2 ', '"entropy_ratio_to_peak"} < 0.01 ')
    assert broken != text
    rl.write_text(broken)
    doc = yaml.safe_load((out / "tests" / "rl.yml").read_text())
    doc["tests"] = doc["tests"][:1]  # the entropy-collapse scenario
    (out / "tests" / "one.yml").write_text(yaml.safe_dump(doc))
    run = _run(promtool(), "test", "rules", "tests/one.yml", cwd=out, timeout=300)
    assert run.returncode != 0
    assert "RLEntropyCollapse" in run.stdout + run.stderr


def test_step_alert_texts_expect_what_prometheus_prints(tmp_path: Path) -> None:
    """A scenario value with more digits than its series carries (RLRewardCollapse's band at
    a critical level of 0.7 is 0.61875) is expected as Prometheus reads and prints it: 61.88%."""
    alerts = dataclasses.replace(
        DEFAULT.alerts,
        reward_collapse=dataclasses.replace(DEFAULT.alerts.reward_collapse, critical=0.7),
    )
    cfg = dataclasses.replace(DEFAULT, alerts=alerts)
    out = _generated(tmp_path, cfg)
    [group] = [g for g in rules.groups(cfg) if g.area == "rl"]
    [entry] = [d for d in alert_defs.DEFS["rl"] if d.key == "reward_collapse"]
    fired = {(a.name, a.severity): a for a in group.alerts}
    doc = {
        "rule_files": ["../rules/rl.yml"],
        "evaluation_interval": ruletests.EVALUATION_INTERVAL,
        "tests": [
            ruletests.unit_test(s, "rl", fired) for s in entry.scenarios(alerts.reward_collapse)
        ],
    }
    assert "61.88%" in yaml.safe_dump(doc)
    (out / "tests" / "one.yml").write_text(yaml.safe_dump(doc))
    run = _run(promtool(), "test", "rules", "tests/one.yml", cwd=out, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]


def _test_files(tmp: Path) -> dict[str, Any]:
    out = _generated(tmp, DEFAULT)
    return {
        area: yaml.safe_load((out / "tests" / f"{area}.yml").read_text()) for area in rules.AREAS
    }


def test_every_alert_and_severity_has_a_firing_case_and_a_healthy_case(tmp_path: Path) -> None:
    tests = _test_files(tmp_path)
    for group in rules.groups(DEFAULT):
        doc = tests[group.area]
        fired = {
            (case["alertname"], exp["exp_labels"]["severity"])
            for t in doc["tests"]
            for case in t["alert_rule_test"]
            for exp in case["exp_alerts"]
        }
        wanted = {(a.name, a.severity) for a in group.alerts}
        assert wanted <= fired, f"{group.area}: no firing case for {sorted(wanted - fired)}"
        names = {a.name for a in group.alerts}
        healthy = [
            t
            for t in doc["tests"]
            if all(not c["exp_alerts"] for c in t["alert_rule_test"])
            and {c["alertname"] for c in t["alert_rule_test"]} == names
        ]
        assert healthy, f"{group.area}: no healthy run that checks every alert"
        hours = max(len(s["values"].split()) for s in healthy[0]["input_series"]) / 60
        assert hours >= 7, "the healthy run covers the whole baseline window"


def _metric_names(expr: str) -> set[str]:
    nodes: list[Any] = []
    promql_parser.walk(promql_parser.parse(expr), nodes.append)
    names = set()
    for node in nodes:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            names |= {m.value for m in node.matchers.matchers if m.name == "__name__"}
    return names


RECORDED = {r.record for g in rules.groups(DEFAULT) for r in g.recordings}
KNOWN = catalog.all_series_names() | RECORDED | {"up", "ALERTS"}  # Prometheus' own series


@pytest.mark.parametrize("cfg", [DEFAULT, FAST], ids=["default", "fast"])
def test_every_metric_in_every_rule_is_in_the_catalog_or_recorded(cfg: config.Config) -> None:
    seen: set[str] = set()
    for group in rules.groups(cfg):
        for rule in [*group.recordings, *group.alerts]:
            names = _metric_names(rule.expr)
            assert names, f"{rule}: selects no metric"
            assert names <= KNOWN, f"unknown {names - KNOWN} in {rule.expr}"
            seen |= names
    unused = {r for r in RECORDED - seen if not _is_for_dashboards(r)}
    assert not unused, f"recording rules neither alerted on nor for panels: {unused}"


def _is_for_dashboards(record: str) -> bool:
    """Recording rules kept for panels (rates, quantiles, shares, per-node/per-run aggregates),
    not read by an alert."""
    return bool(
        re.search(r":(rate|p\d\d|share|zscore|drop_ratio|avg|min|max|sum|mean|increase)$", record)
    )


def test_the_name_check_parses_tricky_expressions() -> None:
    expr = (
        'label_replace(rl_loss{run_id="a"} != rl_loss or up == 0, "metric", "rl_fake_in_a_string",'
        ' "", "") + on(job) group_left(run_id)'
        ' max_over_time(timestamp(rl_run_info)[6h:1m] offset 5m) or {__name__="rl_bogus"}'
    )
    assert _metric_names(expr) == {"rl_loss", "up", "rl_run_info", "rl_bogus"}
    assert not _metric_names(expr) <= KNOWN


def test_alerts_follow_the_conventions() -> None:
    labels_seen = set()
    for area, alert in rules.all_alerts(DEFAULT):
        rule = alert.rule(area)
        assert re.fullmatch(r"RL[A-Z][A-Za-z0-9]+", alert.name)
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert rule["labels"]["team"] == ("infra" if area == "system" else "research")
        assert "cluster" not in rule["labels"]
        notes = rule["annotations"]
        training = {"rollouts_url", "last_good", "run_end"} if area != "system" else set()
        if alert.name in rules.ROLLOUT_ORDER:  # grader errors: the failed calls' rollouts
            training.add("rollouts_url")
        links = {"runbook_url", "dashboard_url"} | training
        assert set(notes) == {"summary", "description", "run_info"} | links
        assert "{{" not in notes["summary"], "summary is static"
        assert "$labels.run_id" in notes["description"] and "$value" in notes["description"]
        assert notes["runbook_url"].endswith(f"docs/runbooks.md#{alert.name.lower()}")
        labels_seen.add((alert.name, alert.severity))
    assert len(labels_seen) == len(rules.all_alerts(DEFAULT)), "no duplicate (name, severity)"


def test_owner_labels_come_from_the_config() -> None:
    """Every alert, the alerting pipeline's own included, carries its layer's team and the
    cluster; the run's metadata is looked up by the alert's job and run_id."""
    teams = {"rl": "ml-policy", "task": "ml-evals", "system": "sre"}
    cfg = config.from_dict({"routing": {"teams": teams, "cluster": "eu-1"}})
    (meta_group,) = prometheus.meta_rules(cfg)["groups"]
    generated = [a.rule(area) for area, a in rules.all_alerts(cfg)] + meta_group["rules"]
    for rule in generated:
        layer = rule["labels"]["layer"]
        assert rule["labels"]["team"] == teams[layer] and rule["labels"]["cluster"] == "eu-1"
    notes = rules.all_alerts(cfg)[0][1].annotations
    assert (
        "rl_run_info{job=%q,run_id=%q}[1d]) or target:rl_run_info:last_served{job=%q,run_id=%q})`"
        " $labels.job $labels.run_id $labels.job $labels.run_id | query" in notes["run_info"]
    )


ISSUE_ALERTS = {
    # RL
    "RLEntropyCollapse", "RLEntropyBlowup", "RLKLReferenceHigh", "RLKLReferenceSpike",
    "RLUpdateKLHigh", "RLClipFractionHigh", "RLNonFiniteLoss", "RLGradNormSpike",
    "RLValueLossExplosion", "RLExplainedVarianceNegative", "RLRewardCollapse",
    "RLZeroStdGroupsHigh", "RLAdvantageStdCollapse", "RLImportanceRatioDrift",
    # task / reward hacking
    "RLRewardHacking", "RLEvalDrop", "RLResponseLengthExplosion", "RLResponseLengthCollapse",
    "RLTruncationHigh", "RLFormatComplianceDrop",
    # system
    "RLTargetDown", "RLTrainingStalled", "RLGPUIdle", "RLGPUMemoryFull", "RLGPUTemperatureHigh",
    "RLGPUThrottling", "RLGPUECCErrors", "RLThroughputDrop", "RLRolloutLatencyTail",
    "RLGraderErrors", "RLExporterCollectorErrors",
}  # fmt: skip


def test_the_alerts_of_the_issue_exist() -> None:
    names = {a.name for _, a in rules.all_alerts(DEFAULT)}
    missing = ISSUE_ALERTS - names
    assert not missing, missing


def test_disabled_alerts_are_left_out() -> None:
    cfg = config.from_dict({"alerts": {"eval_drop": {"enabled": False}}})
    names = {a.name for _, a in rules.all_alerts(cfg)}
    assert "RLEvalDrop" not in names and "RLRewardCollapse" in names


def test_thresholds_and_windows_come_from_the_config() -> None:
    cfg = config.from_dict(
        {
            "alerts": {"entropy_collapse": {"critical": 0.15, "for": "7m", "hysteresis": 0.5}},
            "windows": {"recent": "3m"},
        }
    )
    alert = next(
        a
        for _, a in rules.all_alerts(cfg)
        if (a.name, a.severity) == ("RLEntropyCollapse", "critical")
    )
    # the level, and the hysteresis band halfway back to the healthy 0.8
    assert "< 0.15 or" in alert.expr and "< 0.475 and" in alert.expr and alert.for_ == "7m"
    text = "".join(rules.render(cfg).values())
    assert "[3m]" in text and "[10m]" not in text


def test_selector_is_added_to_every_catalog_series() -> None:
    cfg = config.from_dict({"selectors": {"metrics": 'cluster="a"'}})
    for group in rules.groups(cfg):
        for rule in [*group.recordings, *group.alerts]:
            for name in _metric_names(rule.expr) - RECORDED - {"up", "ALERTS"}:
                assert re.search(rf"{name}\{{[^}}]*cluster=\"a\"", rule.expr), rule.expr


def test_every_alert_has_a_runbook_section() -> None:
    text = runbooks.render(DEFAULT)["docs/runbooks.md"]
    anchors = {_github_anchor(h) for h in re.findall(r"^## (.+)$", text, re.M)}
    for _, alert in rules.all_alerts(DEFAULT):
        anchor = alert.annotations["runbook_url"].rsplit("#", 1)[1]
        assert anchor in anchors, f"{alert.name}: no section for #{anchor}"
        section = text.split(f"## {alert.name}\n", 1)[1].split("\n## ", 1)[0]
        for part in ("What it means", "What to do first", "Panel to open"):
            assert part in section, f"{alert.name}: runbook lacks {part!r}"
    committed = (REPO / "docs" / "runbooks.md").read_text()
    assert committed == text, "docs/runbooks.md is stale: run `rlpulse generate`"


def _github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_go_printf_matches_the_promtool_rendering() -> None:
    assert [ruletests.go_g3(v) for v in (0.05, 18, -0.1 + 1e-17, float("inf"), 131.97, 1e-5)] == [
        "0.05",
        "18",
        "-0.1",
        "+Inf",
        "132",
        "1e-05",
    ]
