"""The generated Grafana dashboards, provisioning and docker-compose.yml.

Structure checks on the JSON (ids, refIds, units, datasource, variables, layout), every PromQL
expression parsed and its metric names checked against the catalog and the recording rules, and
``docker-compose config`` on the compose file.
"""

from __future__ import annotations

import datetime
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from harness import stackutil
from rlpulse import catalog
from rlpulse.stack import alerts, config, dashboards, panels, rules, runbooks
from rlpulse.stack.config import Config
from rlpulse.stack.dashboards.common import ALERTS, HEATMAP_COLOR_STEPS, Recorded, Selector, ref_id
from rlpulse.stack.deploy import compose
from rlpulse.stack.metrics import SAMPLES
from rlpulse.stack.promql import sel

REPO = Path(__file__).resolve().parents[2]
CONFIG = Config()
FILES = dashboards.render(CONFIG)
MODELS = {name: model for name, model in dashboards.dashboards(CONFIG).items()}
DS_UID = "${datasource}"
RATE_SENTINEL = datetime.timedelta(seconds=17)  # what $__rate_interval is expanded to here
HISTOGRAMS_WITH_EXEMPLARS = ("rl_rollout_duration_seconds", "rl_response_length_tokens")

KNOWN_SERIES = (
    catalog.all_series_names()
    | {r.record for g in rules.groups(CONFIG) for r in g.recordings}
    | {ALERTS}
)

by_dashboard = pytest.mark.parametrize("name", sorted(MODELS))


def walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object inside ``node``."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def content_panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboards.panels(model) if p["type"] != "row"]


def parse(expr: str) -> Any:
    return promql_parser.parse(dashboards.expand(expr, rate_interval="17s"))


def nodes(expr: str) -> list[Any]:
    out: list[Any] = []
    promql_parser.walk(parse(expr), lambda n: out.append(n))
    return out


def metric_names(expr: str) -> set[str]:
    """Every metric a panel's PromQL (with Grafana variables) selects."""
    return stackutil.metric_names(dashboards.expand(expr, rate_interval="17s"))


def all_exprs(model: dict[str, Any]) -> list[tuple[str, str]]:
    """Panel queries, annotation queries and the selectors inside variable queries."""
    out = list(dashboards.panel_queries(model))
    out += [(a["name"], a["expr"]) for a in model["annotations"]["list"] if a.get("expr")]
    for var in model["templating"]["list"]:
        if var["type"] == "query":
            out.append((var["name"], variable_expr(var["query"])))
    return out


def variable_expr(query: str) -> str:
    """The PromQL inside a ``label_values(selector, label)`` or ``query_result(expr)``."""
    if query.startswith("query_result(") and query.endswith(")"):
        return query[len("query_result(") : -1]
    assert query.startswith("label_values(") and query.endswith(")"), query
    return query[len("label_values(") :].rsplit(",", 1)[0]


# ---- structure --------------------------------------------------------------------------------


@by_dashboard
def test_panel_ids_unique_and_set(name: str) -> None:
    ids = [p["id"] for p in dashboards.panels(MODELS[name])]
    assert all(isinstance(i, int) and i > 0 for i in ids)
    assert len(ids) == len(set(ids))


@by_dashboard
def test_every_panel_has_queries_with_explicit_unique_ref_ids(name: str) -> None:
    for panel in content_panels(MODELS[name]):
        refs = [t.get("refId") for t in panel["targets"]]
        assert refs, panel["title"]
        assert all(isinstance(r, str) and r for r in refs), panel["title"]
        assert len(refs) == len(set(refs)), panel["title"]


@by_dashboard
def test_every_panel_has_a_unit_title_and_description(name: str) -> None:
    for panel in content_panels(MODELS[name]):
        assert panel["title"] and panel["description"]
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]


@by_dashboard
def test_datasource_only_through_the_variable(name: str) -> None:
    model = MODELS[name]
    refs = [o["datasource"] for o in walk(model) if isinstance(o.get("datasource"), dict)]
    assert refs
    assert all(r == {"type": "prometheus", "uid": DS_UID} for r in refs), refs
    for panel in content_panels(model):
        assert panel["datasource"]["uid"] == DS_UID
        assert all(t["datasource"]["uid"] == DS_UID for t in panel["targets"])
    (ds_var,) = [v for v in model["templating"]["list"] if v["type"] == "datasource"]
    assert ds_var["name"] == "datasource" and ds_var["query"] == "prometheus"
    uids = [o["uid"] for o in walk(model) if "uid" in o and o is not model]
    assert set(uids) == {DS_UID}  # no hard-coded datasource uid anywhere


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "rl-training.json",
            ["datasource", "job", "run_id", "rank", "rollouts", "step_min", "step_max"],
        ),
        ("rl-classic.json", ["datasource", "job", "run_id", "rank"]),
        ("rl-system.json", ["datasource", "job", "run_id", "rank", "node", "gpu"]),
        ("rl-comparison.json", ["datasource", "job", "run_id"]),
    ],
)
def test_variables(name: str, expected: list[str]) -> None:
    variables = {v["name"]: v for v in MODELS[name]["templating"]["list"]}
    assert list(variables) == expected
    run = variables["run_id"]
    assert run["datasource"]["uid"] == DS_UID
    if name in ("rl-training.json", "rl-classic.json"):  # one run, never 28 lines per panel
        assert not run.get("multi") and not run.get("includeAll")
    else:
        assert run["multi"] and run["includeAll"] and run["allValue"] == ".*"


@by_dashboard
def test_firing_alerts_are_annotations(name: str) -> None:
    (annotation,) = MODELS[name]["annotations"]["list"]
    assert annotation["enable"] and annotation["datasource"]["uid"] == DS_UID
    assert metric_names(annotation["expr"]) == {ALERTS}
    assert 'alertstate="firing"' in annotation["expr"]
    assert annotation["titleFormat"] == "{{alertname}}"


@by_dashboard
def test_rows_and_grid_layout(name: str) -> None:
    """Panels fit the 24-column grid, never overlap, and every panel sits under a row."""
    panels = list(dashboards.panels(MODELS[name]))
    assert panels[0]["type"] == "row"
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & mine, f"{panel['title']} overlaps another panel"
        cells |= mine


def by_title(name: str) -> dict[str, dict[str, Any]]:
    return {p["title"]: p for p in content_panels(MODELS[name])}


def test_training_dashboard_rows() -> None:
    titles = set(by_title("rl-training.json"))
    for wanted in (
        panels.REWARD,
        panels.ENTROPY,
        panels.KL_REFERENCE,
        panels.GRAD_NORM,
        panels.NONFINITE,
        panels.RESPONSE_LENGTH,
        panels.PHASE_SHARE,
        panels.LIVENESS,
    ):
        assert wanted in titles
    rows = [p for p in dashboards.panels(MODELS["rl-training.json"]) if p["type"] == "row"]
    assert [r["title"] for r in rows][1:] == [
        "What the alerts test",
        "Reward",
        "Drift",
        "Policy: entropy and divergence",
        "Optimisation",
        "Task: responses",
        "System: throughput, phases, liveness",
        "By training step",
    ]
    # classic RL has a dashboard of its own; the by-step twins open on a click
    assert [r["title"] for r in rows if r["collapsed"]] == ["By training step"]


def test_classic_dashboard_names_what_it_counts_and_collapses_what_does_not_apply() -> None:
    """What a Gymnasium/SB3/CleanRL user asks for, one panel per concept whatever the
    algorithm calls it; policy-gradient details collapsed."""
    model = MODELS["rl-classic.json"]
    assert model["title"] == panels.CLASSIC
    rows = [p for p in dashboards.panels(model) if p["type"] == "row"]
    assert [(r["title"], r["collapsed"]) for r in rows] == [
        ("Run status", False),
        ("Episodes", False),
        ("Learning", False),
        ("Time", False),
        ("Drift", False),
        ("Policy-gradient updates", True),
    ]
    panel = by_title("rl-classic.json")
    exprs = {title: " ".join(t["expr"] for t in p["targets"]) for title, p in panel.items()}
    for title, metrics in (
        (panels.EPISODE_RETURN, {"rl_episode_return", "rl_eval_score", "rl_reference_band"}),
        (panels.EPISODE_LENGTH, {"rl_episode_length_steps"}),
        (panels.SUCCESS_RATE, {"rl_success_ratio", "rl_eval_score"}),
        (panels.EXPLORATION, {"rl_hyperparameter", "rl_entropy"}),
        (panels.VALUES, {"rl_value_mean", "rl_explained_variance"}),
        (panels.CLASSIC_LOSSES, {"rl_policy_loss", "rl_loss", "rl_value_loss"}),
        (panels.DRIFT, {"rl_drift_score"}),  # which observation or action moved
    ):
        found = set().union(*(metric_names(t["expr"]) for t in panel[title]["targets"]))
        assert found == metrics, title
    assert 'name="exploration_rate"' in exprs[panels.EXPLORATION]
    rates = panel[panels.EPISODE_RATES]
    assert rates["fieldConfig"]["defaults"]["unit"] == "suffix: episodes/s"
    right = {o["matcher"]["options"] for o in rates["fieldConfig"]["overrides"]}
    assert right == {"B", "C"}  # env steps on their own axis, named
    assert "group_left(framework)" in exprs[panels.LOGGED_STEP]


def test_phase_share_is_a_share_of_wall_time_with_the_untimed_rest() -> None:
    for name in ("rl-training.json", "rl-classic.json"):
        phase = by_title(name)[panels.PHASE_SHARE]
        timed, rest = phase["targets"]
        assert (
            "rl_phase_duration_seconds_sum" in timed["expr"] and rest["legendFormat"] == "untimed"
        )
        assert phase["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
        assert phase["fieldConfig"]["defaults"]["max"] == 1


def test_titles_are_unique() -> None:
    for model in MODELS.values():
        titles = [p["title"] for p in content_panels(model)]
        assert len(titles) == len(set(titles)), model["title"]


def test_reward_band_log_scales_and_units() -> None:
    panel = by_title("rl-training.json")
    band = panel[panels.REWARD]
    max_override = next(
        o for o in band["fieldConfig"]["overrides"] if o["matcher"]["options"] == "max"
    )
    assert {"id": "custom.fillBelowTo", "value": "min"} in max_override["properties"]
    legends = {t["legendFormat"] for t in band["targets"]}
    assert {"mean", "min", "max"} <= legends
    for title in (panels.GRAD_NORM, panels.KL_REFERENCE):  # values spanning decades
        assert _scale(panel[title]) == {"type": "log", "log": 10}, title
    units = {title: p["fieldConfig"]["defaults"]["unit"] for title, p in panel.items()}
    assert units[panels.ENTROPY] == units[panels.KL_REFERENCE] == "suffix: nats"
    assert units[panels.LEARNING_RATE] == "sci"
    assert units[panels.RESPONSE_LENGTH] == "suffix: tokens"


def test_no_panel_mixes_samples_with_steps_or_host_with_gpu_memory() -> None:
    training = by_title("rl-training.json")
    samples = " ".join(t["expr"] for t in training[panels.SAMPLES_RATE]["targets"])
    assert "rl_samples" in samples and "rl_train_steps" not in samples
    memory = " ".join(t["expr"] for t in by_title("rl-system.json")["Memory"]["targets"])
    assert "rl_gpu_" not in memory


def test_entropy_panel_plots_what_the_alert_tests() -> None:
    entropy = by_title("rl-training.json")[panels.ENTROPY]
    signal = alerts.rl.ENTROPY_COLLAPSE.signal
    assert f'signal="{signal}"' in entropy["targets"][1]["expr"]
    assert metric_names(entropy["targets"][1]["expr"]) == {"rl_step_signal"}


def _levels(panel: dict[str, Any]) -> list[float]:
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    return sorted(s["value"] for s in steps if s["value"] is not None)


def test_a_panel_per_step_alert_with_the_rules_levels() -> None:
    """Each step alert's signal is plotted against the levels its rule uses, from the Config."""
    raised = config.from_dict({"alerts": {"entropy_collapse": {"warning": 0.5}}})
    model = dashboards.dashboards(raised)["rl-training.json"]
    for cfg, panels_by_title in ((CONFIG, by_title("rl-training.json")), (raised, None)):
        found = panels_by_title or {p["title"]: p for p in content_panels(model)}
        for area in ("rl", "task"):
            for alert in alerts.STEP_ALERTS[area]:
                panel = found[panels.alert_signal(alert.name, alert.signal)]
                knobs = getattr(cfg.alerts, alert.key)
                assert _levels(panel) == sorted(level for _, level in alert.tiers(knobs))
                assert f'signal="{alert.signal}"' in panel["targets"][0]["expr"]
                style = panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]
                assert style["mode"] == "dashed"
    entropy = {p["title"]: p for p in content_panels(model)}
    assert 0.5 in _levels(
        entropy[panels.alert_signal("RLEntropyCollapse", "entropy_ratio_to_peak")]
    )


def test_per_board_gpu_memory_against_the_alert_levels() -> None:
    panel = by_title("rl-system.json")[panels.GPU_MEMORY_BOARDS]
    assert metric_names(panel["targets"][0]["expr"]) == {rules.GPU_MEMORY_RATIO}
    full = CONFIG.alerts.gpu_memory_full
    assert _levels(panel) == [full.warning, full.critical]


def test_runbooks_name_panels_that_exist() -> None:
    titles = {m["title"]: {p["title"] for p in content_panels(m)} for m in MODELS.values()}
    pipeline = {a.name for a in alerts.meta.ALERTS}  # point at Prometheus/Alertmanager UIs
    for name, runbook in runbooks.RUNBOOKS.items():
        if name in pipeline:
            continue
        refs = panels.references(runbook.panel)
        assert refs, name
        for dashboard, title in refs:
            assert title in titles[dashboard], f"{name}: no panel {title!r} in {dashboard}"


def test_counters_read_zero_before_their_first_increment() -> None:
    """Error panels show 0 on a healthy run instead of "No data", as a series that carries the
    labels its legend names (``none`` for the label the counter splits by), never a
    label-less ``vector(0)``."""
    system, training = by_title("rl-system.json"), by_title("rl-training.json")
    targets = [
        *system[panels.EXPORTER_ERRORS]["targets"],
        system[panels.GRADER_CALLS]["targets"][1],
        *training[panels.NONFINITE]["targets"],
    ]
    for target in targets:
        assert "vector(0)" not in target["expr"], target["expr"]
        assert "0 * group" in target["expr"], target["expr"]
    (nonfinite,) = training[panels.NONFINITE]["targets"]
    assert nonfinite["expr"].endswith(
        'or on(run_id) label_replace(0 * group by (run_id) (rl_run_info{job=~"$job",'
        'run_id=~"$run_id",rank=~"$rank"}), "metric", "none", "", "")'
    )


def test_no_label_less_fallbacks_in_graphs() -> None:
    """``or vector(0)`` adds a series without labels: in a graph whose legend names labels it
    is an empty entry. Only label-less legends may use it (the untimed rest, a count)."""
    for model in MODELS.values():
        for panel in content_panels(model):
            for target in panel.get("targets", []):
                if "vector(0)" in target["expr"]:
                    assert "{{" not in target["legendFormat"], (panel["title"], target)


def test_legends_separate_labels() -> None:
    for model in MODELS.values():
        for panel in content_panels(model):
            for target in panel.get("targets", []):
                assert "}}{{" not in target.get("legendFormat", ""), panel["title"]


def test_graphs_show_an_outage_as_a_gap() -> None:
    for model in MODELS.values():
        for panel in content_panels(model):
            if panel["type"] in ("timeseries", "trend"):
                custom = panel["fieldConfig"]["defaults"]["custom"]
                assert custom["spanNulls"] is False, panel["title"]


def _scale(panel: dict[str, Any]) -> Any:
    return panel["fieldConfig"]["defaults"]["custom"]["scaleDistribution"]


def test_kl_axes() -> None:
    """KL spans decades (log axis) while beta, on the right, is often 0: beta's axis stays
    linear. The KL z-score (values to thousands against a level of 8) is symlog; the
    comparison KL is log, with units."""
    training = by_title("rl-training.json")
    kl = training[panels.KL_REFERENCE]
    assert _scale(kl)["type"] == "log"
    beta = [o for o in kl["fieldConfig"]["overrides"] if o["matcher"]["options"] == "B"]
    props = {p["id"]: p["value"] for o in beta for p in o["properties"]}
    assert props["custom.scaleDistribution"] == {"type": "linear"}
    assert props["custom.axisPlacement"] == "right"
    zscore = training[panels.alert_signal("RLKLReferenceSpike", "kl_reference_zscore")]
    assert _scale(zscore)["type"] == "symlog" and _scale(zscore)["log"] == 10
    comparison = by_title("rl-comparison.json")
    assert _scale(comparison["KL to reference"]) == {"type": "log", "log": 10}
    for title in ("KL to reference", "Policy entropy"):
        assert comparison[title]["fieldConfig"]["defaults"]["unit"] == "suffix: nats", title


def test_one_run_dashboards_open_on_the_firing_or_newest_run() -> None:
    for name in ("rl-training.json", "rl-classic.json"):
        variables = {v["name"]: v for v in MODELS[name]["templating"]["list"]}
        run = variables["run_id"]
        assert run["sort"] == 0  # options keep the query's order: the first is the default
        assert not run.get("current")
        assert run["query"].startswith("query_result(sort_desc(")
        assert "rl_exporter_start_timestamp_seconds" in run["query"]
        assert 'ALERTS{job=~"$job",alertstate="firing"}' in run["query"]
        assert "[$__range]" in run["query"] and run["regex"] == '/run_id="([^"]+)"/'


def test_phase_shares_skip_a_stalled_run() -> None:
    """A stalled run's 0/0 = NaN share must not blank the average of the others."""
    for name, title in (("rl-system.json", panels.PHASE_BREAKDOWN),):
        (target,) = by_title(name)[title]["targets"]
        assert f"{rules.PHASE_SHARE}" in target["expr"] and ">= 0)" in target["expr"]
        assert "group_left() count(count by (job, run_id) (" in target["expr"]


def test_import_metadata_links_and_schema() -> None:
    for model in MODELS.values():
        assert model["schemaVersion"] >= 41  # Grafana 11.6 / 12
        (ds_input,) = model["__inputs"]
        assert ds_input["type"] == "datasource" and ds_input["pluginId"] == "prometheus"
        required = {(r["type"], r["id"]) for r in model["__requires"]}
        used = {("panel", p["type"]) for p in content_panels(model)}
        assert used | {("grafana", "grafana"), ("datasource", "prometheus")} == required
        variable = model["templating"]["list"][0]
        assert variable["current"]["value"] == "${" + ds_input["name"] + "}"
        (link,) = model["links"]
        assert link["type"] == "dashboards" and link["tags"] == ["rlpulse"]
        assert link["includeVars"] and link["keepTime"]
        assert "rlpulse" in model["tags"]


def test_rollout_links_from_the_alert_signals() -> None:
    panel = by_title("rl-training.json")[
        panels.alert_signal("RLTruncationHigh", "truncation_level")
    ]
    point, steps, run = panel["fieldConfig"]["defaults"]["links"]
    base = "${rollouts}/view?run=${__field.labels.run_id:percentencode}"
    assert point["url"] == f"{base}&since=${{__from}}&until=${{__value.time}}&order=worst&limit=20"
    assert (
        steps["url"] == f"{base}&step_min=${{step_min}}&step_max=${{step_max}}&order=worst&limit=20"
    )
    assert "--step-min ${step_min} --step-max ${step_max}" in steps["title"]
    assert run["url"] == f"{base}&order=recent"
    assert "rlpulse rollouts list --run ${__field.labels.run_id}" in run["title"]
    # the Reward panel (series summed over runs) opens the dashboard's run, best first
    reward = by_title("rl-training.json")[panels.REWARD]["fieldConfig"]["defaults"]["links"]
    assert reward[0]["url"].startswith("${rollouts}/view?run=${run_id:percentencode}&since=")
    assert reward[0]["url"].endswith("&order=best&limit=20")
    length = by_title("rl-training.json")[panels.RESPONSE_LENGTH]["fieldConfig"]["defaults"]
    assert length["links"][1]["url"].endswith("&order=longest&limit=20")
    variables = {v["name"]: v for v in MODELS["rl-training.json"]["templating"]["list"]}
    for name in ("step_min", "step_max"):
        assert variables[name]["hide"] == 2 and "[$__range]" in variables[name]["query"]


# each training curve and its by-step twin (the eval panel is split by split already)
BY_STEP = {
    **{
        title: f"{title} by step"
        for title in (
            panels.REWARD,
            panels.REWARD_COMPONENTS,
            panels.REWARD_SPREAD,
            panels.ENTROPY,
            panels.KL_REFERENCE,
            panels.UPDATE_KL,
            panels.MISMATCH,
            panels.GRAD_NORM,
            panels.NONFINITE,
            panels.LEARNING_RATE,
            panels.LOSSES,
            panels.EXPLAINED_VARIANCE,
            panels.ADVANTAGES,
            panels.RESPONSE_LENGTH,
            panels.RESPONSE_QUALITY,
        )
    },
    panels.EVAL_SCORES: "Eval scores by step",
}


def test_by_step_panels() -> None:
    """Both the training and the comparison dashboard plot every training curve against the
    step: x = step, one point per scrape at most (interval = the scrape interval) where the
    step advanced, split by run and series, legends from both labels."""
    rows = {p["title"]: p for p in MODELS["rl-training.json"]["panels"] if p["type"] == "row"}
    curves = {
        p["title"]
        for row in ("Reward", "Policy: entropy and divergence", "Optimisation", "Task: responses")
        for p in _row_panels(MODELS["rl-training.json"], row)
    }
    assert curves == set(BY_STEP)
    training = rows["By training step"]["panels"]
    comparison = [p for p in content_panels(MODELS["rl-comparison.json"]) if p["type"] == "trend"]
    assert [p["title"] for p in comparison] == [
        *(p["title"] for p in training),
        "Episode return by step",  # classic-RL runs compared
    ]
    assert sorted(p["title"] for p in training) == sorted(BY_STEP.values())
    for panel in training + comparison:
        assert panel["type"] == "trend" and panel["options"]["xField"] == "step"
        assert panel["interval"] == "15s" and panel["maxDataPoints"] == 11_000
        step, value = panel["targets"]
        assert "rl_step" in metric_names(step["expr"])
        assert "offset $__interval" in value["expr"]  # only where the step advanced
        assert step["format"] == value["format"] == "table"
        ids = [t["id"] for t in panel["transformations"]]
        assert ids == ["merge", "organize", "partitionByValues"]
        assert panel["transformations"][2]["options"]["fields"] == ["run_id", "series"]
        (override,) = panel["fieldConfig"]["overrides"]
        assert override["properties"][0]["value"] == (
            "${__field.labels.run_id} · ${__field.labels.series}"
        )
    by = {p["title"]: p for p in training}
    assert _scale(by["Gradient norm by step"])["type"] == "log"
    assert _scale(by["KL to reference by step"])["type"] == "symlog"


def _row_panels(model: dict[str, Any], row: str) -> list[dict[str, Any]]:
    """The panels under the open row titled ``row``."""
    out: list[dict[str, Any]] = []
    current = None
    for panel in model["panels"]:
        if panel["type"] == "row":
            current = panel["title"]
        elif current == row:
            out.append(panel)
    return out


def test_comparison_tables() -> None:
    panels_ = by_title("rl-comparison.json")
    runs, hparams = panels_["Runs"], panels_["Hyperparameters"]
    assert "host" not in runs["targets"][0]["expr"]  # one row per run, not per node
    assert metric_names(runs["targets"][0]["expr"]) == {"rl_run_info"}
    assert metric_names(hparams["targets"][0]["expr"]) == {"rl_hyperparameter"}
    for panel in (runs, hparams):
        assert panel["type"] == "table"
        assert panel["targets"][0]["instant"] and panel["targets"][0]["format"] == "table"
        # finished runs too: the last value in the time range, not the live series
        assert "last_over_time(" in panel["targets"][0]["expr"]
        assert "[$__range]" in panel["targets"][0]["expr"]
    assert hparams["transformations"][0]["id"] == "groupingToMatrix"


# ---- PromQL -----------------------------------------------------------------------------------


@by_dashboard
def test_every_metric_is_in_the_catalog_or_a_recording_rule(name: str) -> None:
    exprs = all_exprs(MODELS[name])
    assert exprs
    for title, expr in exprs:
        names = metric_names(expr)
        assert names, f"{title}: {expr} selects no metric"
        assert names <= KNOWN_SERIES, f"{title}: unknown {names - KNOWN_SERIES} in {expr}"


def test_the_name_check_catches_an_unknown_metric() -> None:
    expr = 'sum(rate(rl_bogus_total{run_id=~"$run_id"}[$__rate_interval])) / {__name__="rl_nope"}'
    assert metric_names(expr) == {"rl_bogus_total", "rl_nope"}
    assert not metric_names(expr) <= KNOWN_SERIES


def test_selector_refuses_names_outside_the_catalog() -> None:
    sel = Selector(("run_id",))
    with pytest.raises(KeyError, match="rl_bogus"):
        sel("rl_bogus")
    with pytest.raises(ValueError, match="_bucket"):
        sel("rl_reward_mean", "_bucket")
    with pytest.raises(ValueError, match="bad label matcher"):  # the rules' check, now shared
        sel("rl_eval_score", splt="eval")
    with pytest.raises(ValueError, match="bad label matcher"):
        Selector(("gpu",))("rl_reward_mean")
    assert sel("rl_eval_score", split="eval") == 'rl_eval_score{run_id=~"$run_id",split="eval"}'


def test_recorded_selectors_go_through_the_one_builder() -> None:
    """Recorded series get the catalog metric's label-name check, like every other selector."""
    rec = Recorded(("job", "run_id"))
    assert rec(rules.PHASE_MEAN, phase="update") == (
        'run_phase:rl_phase_duration_seconds:mean{job=~"$job",run_id=~"$run_id",phase="update"}'
    )
    with pytest.raises(ValueError, match="bad label matcher"):
        rec(rules.PHASE_MEAN, phaze="update")
    with pytest.raises(ValueError, match="bad label matcher"):
        Recorded(("gpu",))(rules.rate_name(SAMPLES))
    with pytest.raises(ValueError, match="not a recording rule"):
        rec("run:rl_bogus:rate")
    with pytest.raises(ValueError, match="not a recording of rl_entropy"):
        sel(catalog.get("rl_entropy"), record=rules.rate_name(SAMPLES))


@by_dashboard
def test_rates_use_rate_interval_and_quantiles_bucket_by_le(name: str) -> None:
    for title, expr in dashboards.panel_queries(MODELS[name]):
        for node in nodes(expr):
            if not isinstance(node, promql_parser.Call):
                continue
            if node.func.name in ("rate", "increase"):
                assert node.args[0].range == RATE_SENTINEL, f"{title}: {expr}"
            if node.func.name == "histogram_quantile":
                inner = node.args[1]
                assert isinstance(inner, promql_parser.AggregateExpr), f"{title}: {expr}"
                assert "le" in inner.modifier.labels, f"{title}: {expr}"
                assert metric_names(str(inner)) <= {
                    catalog.get(h).name + "_bucket" for h in catalog.BY_NAME
                }, f"{title}: {expr}"


@by_dashboard
def test_exemplars_on_the_rollout_and_length_histograms(name: str) -> None:
    buckets = {catalog.get(h).name + "_bucket" for h in HISTOGRAMS_WITH_EXEMPLARS}
    for panel in content_panels(MODELS[name]):
        for target in panel["targets"]:
            if metric_names(target["expr"]) & buckets:
                assert target["exemplar"] is True, panel["title"]


def test_rollout_heatmap() -> None:
    (heat,) = [p for p in content_panels(MODELS["rl-system.json"]) if p["type"] == "heatmap"]
    (target,) = heat["targets"]
    assert (
        target["format"] == "heatmap" and target["exemplar"] and target["legendFormat"] == "{{le}}"
    )
    assert heat["options"]["calculate"] is False
    assert heat["options"]["color"]["steps"] == HEATMAP_COLOR_STEPS == 64


def test_panel_queries_and_expand() -> None:
    model = MODELS["rl-training.json"]
    queries = dashboards.panel_queries(model)
    assert len(queries) == sum(len(p["targets"]) for p in content_panels(model))
    assert all(title and expr for title, expr in queries)
    for _, expr in queries:
        expanded = dashboards.expand(expr, {"run_id": "r1"}, rate_interval="2m")
        assert "$" not in expanded
        parse(expr)
    expr = 'rate(x{run_id=~"$run_id", rank=~"${rank}"}[$__rate_interval])'
    assert dashboards.expand(expr, {"run_id": "r1"}) == 'rate(x{run_id=~"r1", rank=~".*"}[1m])'
    assert ref_id(0) == "A" and ref_id(25) == "Z" and ref_id(26) == "AA"


# ---- files: provisioning, compose, freshness --------------------------------------------------


def test_render_paths() -> None:
    assert set(FILES) == {
        "grafana/dashboards/rl-training.json",
        "grafana/dashboards/rl-system.json",
        "grafana/dashboards/rl-comparison.json",
        "grafana/dashboards/rl-classic.json",
        "grafana/provisioning/datasources/datasources.yml",
        "grafana/provisioning/dashboards/dashboards.yml",
        "docker-compose.yml",
        "docs/reference/dashboards.md",
    }
    for rel, text in FILES.items():
        if rel.endswith(".json"):
            assert json.loads(text)["uid"].startswith("rlpulse-")


def test_docs_list_every_panel() -> None:
    doc = FILES["docs/reference/dashboards.md"]
    for model in MODELS.values():
        assert f"## {model['title']}" in doc
        for panel in content_panels(model):
            assert f"- **{panel['title']}**: {panel['description']}" in doc


def test_committed_files_are_fresh() -> None:
    stale = [rel for rel, text in FILES.items() if (REPO / rel).read_text() != text]
    assert not stale, f"regenerate with `rlpulse generate`: {stale}"


def test_provisioning() -> None:
    sources = yaml.safe_load(FILES["grafana/provisioning/datasources/datasources.yml"])
    types = {d["type"]: d for d in sources["datasources"]}
    assert set(types) == {"prometheus", "alertmanager"}
    assert types["prometheus"]["isDefault"]
    assert types["prometheus"]["jsonData"]["timeInterval"] == CONFIG.scrape.interval
    (exemplar,) = types["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert exemplar["name"] == "rollout_id"  # the exemplar label rlpulse sets
    assert exemplar["url"] == CONFIG.links.rollouts_url + "/view?id=${__value.raw}"  # the viewer
    assert types["alertmanager"]["url"] == f"http://{CONFIG.scrape.alertmanagers[0]}"
    provider = yaml.safe_load(FILES["grafana/provisioning/dashboards/dashboards.yml"])
    (entry,) = provider["providers"]
    assert entry["type"] == "file" and entry["options"]["path"] == compose.GRAFANA_DASHBOARDS


@pytest.fixture
def compose_dir(tmp_path: Path) -> Path:
    """A folder laid out like the repository: the compose file and every folder it mounts."""
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    for folder in ("prometheus/rules", "alertmanager", "secrets"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    return tmp_path


def test_docker_compose_config_accepts_the_file(compose_dir: Path) -> None:
    binary = shutil.which("docker-compose")
    assert binary, "the docker-compose binary (Debian package docker-compose) is required"
    run = subprocess.run(
        [binary, "config"], cwd=compose_dir, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    resolved = yaml.safe_load(run.stdout)["services"]
    assert set(resolved) == {"prometheus", "alertmanager", "grafana", "rollouts", "demo"}
    # the demo writes its rollouts where the viewer reads them
    assert resolved["demo"]["environment"]["RLPULSE_DATA_DIR"] == "/var/lib/rlpulse"
    assert (
        "rlpulse rollouts serve --data-dir /var/lib/rlpulse" in resolved["rollouts"]["command"][-1]
    )
    for service in resolved.values():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), image
    assert "--enable-feature=exemplar-storage" in resolved["prometheus"]["command"]
    binds = [
        Path(v.split(":")[0])
        for service in resolved.values()
        for v in service.get("volumes", [])
        if v.startswith("/")
    ]
    assert all(b.is_dir() for b in binds), binds
    assert {str(b.relative_to(compose_dir.resolve())) for b in binds} == {
        "prometheus",
        "alertmanager",
        "secrets",
        "grafana/provisioning",
        "grafana/dashboards",
    }


def test_compose_mounts_secrets_where_alertmanager_reads_them() -> None:
    spec = yaml.safe_load(FILES["docker-compose.yml"])
    volumes = spec["services"]["alertmanager"]["volumes"]
    key_dir = str(Path(CONFIG.receivers.pagerduty.routing_key_file).parent)
    assert f"{compose.SECRETS_DIR}:{key_dir}:ro" in volumes
    assert "routing_key:" not in FILES["docker-compose.yml"]
    assert spec["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"].startswith("${")
    demo = spec["services"]["demo"]
    assert "rlpulse demo" in " ".join(demo["command"])
    # it installs rlpulse, never the project it was generated in; a named volume holds rollouts
    assert demo["volumes"] == ["rollouts-data:/var/lib/rlpulse"]
    assert compose.RLPULSE_PIP_SPEC in " ".join(demo["command"])


def test_compose_sets_the_external_urls_links_leave_localhost_by() -> None:
    cfg = config.from_dict(
        {
            "links": {
                "grafana_url": "https://grafana.example",
                "prometheus_url": "https://prom.example",
                "alertmanager_url": "https://am.example",
            },
            "receivers": {"pagerduty": {"infra_routing_key_file": "/run/infra/pd_key"}},
        }
    )
    spec = compose.services(cfg)["services"]
    assert "--web.external-url=https://prom.example" in spec["prometheus"]["command"]
    assert "--web.external-url=https://am.example" in spec["alertmanager"]["command"]
    assert spec["grafana"]["environment"]["GF_SERVER_ROOT_URL"] == "https://grafana.example"
    assert f"{compose.SECRETS_DIR}:/run/infra:ro" in spec["alertmanager"]["volumes"]
